/* engine-run — test helper: run the engine on token ids.
 *
 *   engine-run MODEL.uth "ID ID ..." N_GREEDY [BATCH [KV_BLOCK [all|all-keep]]] > out.txt
 *
 * Prints line 1: the logits of the last prompt position (space separated,
 * %.9g); line 2: N_GREEDY greedily generated ids.  BATCH (default 256) sets
 * the prefill batch size, so tests can compare batched and token-by-token
 * prefill; KV_BLOCK (default 64) the KV block size, so that sliding-window
 * layers keep their window only (t0435).  "all": then one line per
 * generated id, the logits that followed it; "all-keep": the same with the
 * sliding layers keeping every position (moe_engine_params.kv_keep_all).
 * On stderr, one line: the KV cache's peak bytes (moe_kv_stats).
 * ENGINE_RUN_KV_TYPE=q8_0 in the environment: a Q8_0 cache (t0412).
 *
 * ENGINE_RUN_TAPE=FILE in the environment: also write the engine's rounding
 * decisions to FILE, for tests/ref/vs_engine.py --tape (its tie oracle,
 * tests/ref/README).  The tape is taken through the public activation
 * observer (moe_engine_set_observer: the exact rows the kernels then
 * quantise) and the prompt-cache file (moe_seq_save: the cache's rows as
 * stored); the engine itself has no hook for it.  Little-endian:
 *
 *   "MOETAPE1"
 *   product record, for every product with a quantised activation type:
 *     u32 1, i32 layer (-1: output), i32 expert (-1: none), i32 part,
 *     i32 n_parts (deepseek2's per-head matrices, else 0), u32 activation
 *     type (ggml id: 8 Q8_0, 9 Q8_1, 15 Q8_K), u32 name length, u32 rows,
 *     u32 cols, u32 bytes per quantised row; the weight's name; i32
 *     position of each row; the rows as floats (rows x cols f32); the rows
 *     as the engine's own kernels (moe_kernels_get, the table the engine
 *     uses) quantise them (rows x bytes per row)
 *   cache record, once at the end (absent if the cache cannot be saved):
 *     u32 2, u32 KV type, u32 layers, u32 positions, u32 rows per position
 *     (2: K and V; 1: deepseek2's latent row), u32 bytes per row; the rows,
 *     layer by layer, position by position (moe-run(1), PROMPT CACHE FILES)
 *
 * Row positions: a step begins with the product of layer 0 observed first
 * in the run (its rows are the step's tokens, positions following the last
 * step's); an expert's input rows are found, bit for bit, among the rows
 * its layer's router saw (the down product's rows are its gate's); a
 * per-head product sees one token per call, head by head; the output
 * matrix sees the step's last tokens (engine-run asks for the logits of
 * the last position only). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

typedef struct {
	FILE *f;
	const moe_kernels *k;
	const moe_model *m;
	const moe_weight *first;     /* the first product of a step */
	int base, B;                 /* the step's first position and size */
	float *xn;                   /* the current layer's router input, B rows */
	int xn_layer;
	int32_t *pos;                /* positions of the last expert's rows */
	int pos_n, pos_expert;
	const moe_weight *heads_w;   /* per-head products: calls so far */
	int heads_i;
	uint8_t *q;
	size_t q_cap;
	int bad;                     /* a row it could not place (reported) */
} tape;

static void put(tape *t, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, t->f) != n)
		t->bad = 1;
}

static void put_u32(tape *t, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	put(t, b, 4);
}

static void on_product(void *user, const moe_matmul_obs *o)
{
	tape *t = user;
	const moe_type_traits *tt = moe_type_get(o->w->dtype);
	int64_t n = o->n_rows, cols = o->w->cols;
	if (!tt || n <= 0)
		return;
	if (!t->first)
		t->first = o->w;
	if (o->w == t->first) {              /* a new step */
		t->base += t->B;
		t->B = (int)n;
		t->heads_w = NULL;
		t->xn_layer = -2;
	}
	const moe_layer *L = o->layer >= 0 ? &t->m->layers[o->layer] : NULL;
	if (L && o->w == &L->router) {       /* every expert's input comes from these */
		free(t->xn);
		t->xn = malloc((size_t)(n * cols) * sizeof(float));
		if (t->xn)
			memcpy(t->xn, o->x, (size_t)(n * cols) * sizeof(float));
		t->xn_layer = o->layer;
	}
	if (tt->vec_dot_type == MOE_F32)
		return;
	int32_t *pos = malloc((size_t)n * sizeof *pos);
	if (!pos) {
		t->bad = 1;
		return;
	}
	if (o->n_parts > 1) {                /* one token a call, head by head */
		if (o->w != t->heads_w)
			t->heads_w = o->w, t->heads_i = 0;
		pos[0] = t->base + t->heads_i++ % t->B;
	} else if (o->expert >= 0) {
		bool all = t->xn && t->xn_layer == o->layer;
		for (int64_t i = 0; all && i < n; i++) {
			int j = 0;
			while (j < t->B && memcmp(t->xn + (size_t)j * cols, o->x + i * cols,
						  (size_t)cols * sizeof(float)))
				j++;
			all = j < t->B;
			pos[i] = t->base + j;
		}
		if (all) {                   /* gate, up: the rows to remember */
			free(t->pos);
			t->pos = malloc((size_t)n * sizeof *pos);
			if (t->pos)
				memcpy(t->pos, pos, (size_t)n * sizeof *pos);
			t->pos_n = (int)n;
			t->pos_expert = o->expert;
		} else if (t->pos && t->pos_n == n && t->pos_expert == o->expert) {
			memcpy(pos, t->pos, (size_t)n * sizeof *pos);    /* down */
		} else {
			for (int64_t i = 0; i < n; i++)
				pos[i] = -1;
			t->bad = 1;
		}
	} else {                             /* the step's last n tokens */
		for (int64_t i = 0; i < n; i++)
			pos[i] = t->base + t->B - (int)n + (int)i;
	}
	uint64_t rb;
	if (moe_type_nbytes(tt->vec_dot_type, (uint64_t)cols, &rb, NULL) < 0 ||
	    !t->k->quantize_row[tt->vec_dot_type]) {
		free(pos);
		t->bad = 1;
		return;
	}
	if (t->q_cap < (size_t)rb) {
		free(t->q);
		t->q = malloc((size_t)rb);
		t->q_cap = t->q ? (size_t)rb : 0;
		t->bad |= !t->q;
	}
	size_t nl = strlen(o->w->name ? o->w->name : "");
	put_u32(t, 1);
	int32_t head[4] = {o->layer, o->expert, o->part, o->n_parts};
	put(t, head, sizeof head);
	put_u32(t, (uint32_t)tt->vec_dot_type);
	put_u32(t, (uint32_t)nl);
	put_u32(t, (uint32_t)n);
	put_u32(t, (uint32_t)cols);
	put_u32(t, (uint32_t)rb);
	put(t, o->w->name ? o->w->name : "", nl);
	put(t, pos, (size_t)n * sizeof *pos);
	put(t, o->x, (size_t)(n * cols) * sizeof(float));
	for (int64_t i = 0; i < n && t->q; i++) {
		t->k->quantize_row[tt->vec_dot_type](o->x + i * cols, t->q, cols);
		put(t, t->q, (size_t)rb);
	}
	free(pos);
}

/* The cache record: the prompt-cache file's payload, decompressed. */
static void tape_cache(tape *t, moe_seq *c, const char *path)
{
	char tmp[4096];
	moe_error e = {0};
	snprintf(tmp, sizeof tmp, "%s.kv", path);
	if (moe_seq_save(c, moe_seq_pos(c), tmp, &e) < 0) {
		fprintf(stderr, "engine-run: tape: no cache record: %s\n", e.msg);
		return;
	}
	FILE *f = fopen(tmp, "rb");
	uint8_t h[64];
	if (!f || fread(h, 1, 64, f) != 64) {
		t->bad = 1;
		if (f)
			fclose(f);
		return;
	}
	uint32_t u[10];       /* the header's words at bytes 0 .. 39 */
	uint64_t cs = 0, rs = 0;
	for (int i = 0; i < 10; i++)
		u[i] = (uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 |
		       (uint32_t)h[4 * i + 2] << 16 | (uint32_t)h[4 * i + 3] << 24;
	for (int i = 7; i >= 0; i--) {
		cs = cs << 8 | h[40 + i];
		rs = rs << 8 | h[48 + i];
	}
	uint8_t *z = malloc(cs ? (size_t)cs : 1), *raw = malloc(rs ? (size_t)rs : 1);
	uint32_t n_layer = u[7], rb = u[8], n_pos = u[9];
	if (!z || !raw || fread(z, 1, (size_t)cs, f) != cs ||
	    ZSTD_decompress(raw, (size_t)rs, z, (size_t)cs) != rs || !n_layer || !n_pos || !rb) {
		t->bad = 1;
	} else {
		uint64_t body = rs - 4ull * n_pos;
		uint32_t rows = (uint32_t)(body / ((uint64_t)n_layer * n_pos * rb));
		put_u32(t, 2);
		put_u32(t, u[6]);
		put_u32(t, n_layer);
		put_u32(t, n_pos);
		put_u32(t, rows);
		put_u32(t, rb);
		put(t, raw + 4ull * n_pos, (size_t)body);
	}
	free(z);
	free(raw);
	fclose(f);
	remove(tmp);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: engine-run MODEL \"IDS\" N_GREEDY [BATCH [KV_BLOCK [all|all-keep]]]\n");
		return 2;
	}
	moe_error e = {0};
	moe_model *m;
	if (moe_model_load(&m, argv[1], &e) < 0) {
		fprintf(stderr, "engine-run: %s\n", e.msg);
		return 1;
	}
	int32_t ids[4096];
	size_t n = 0;
	for (char *s = argv[2], *end; n < 4096; s = end) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		ids[n++] = (int32_t)v;
	}
	int n_greedy = atoi(argv[3]);
	moe_engine_params ep = {.kv_size = (int)n + n_greedy + 1,
				.n_batch = argc > 4 ? atoi(argv[4]) : 0,
				.kv_block = argc > 5 ? atoi(argv[5]) : 0,
				.kv_keep_all = argc > 6 && !strcmp(argv[6], "all-keep")};
	const char *kvt = getenv("ENGINE_RUN_KV_TYPE");
	ep.kv_type = kvt && !strcmp(kvt, "q8_0") ? MOE_Q8_0 : MOE_F16;
	bool all = argc > 6 && !strncmp(argv[6], "all", 3);
	moe_engine *eng;
	moe_seq *c;
	if (moe_engine_new(&eng, m, &ep, &e) < 0 || moe_seq_new(&c, eng, &e) < 0) {
		fprintf(stderr, "engine-run: %s\n", e.msg);
		return 1;
	}
	const char *tape_path = getenv("ENGINE_RUN_TAPE");
	tape tp = {.k = moe_kernels_get(), .m = m, .xn_layer = -2};
	if (tape_path && *tape_path) {
		if (!(tp.f = fopen(tape_path, "wb"))) {
			perror(tape_path);
			return 1;
		}
		put(&tp, "MOETAPE1", 8);
		moe_engine_set_observer(eng, on_product, &tp);
	}
	uint32_t nv = m->hp.n_vocab;
	float *logits = malloc(nv * sizeof *logits);
	if (moe_seq_eval(c, ids, n, logits, false, &e) < 0) {
		fprintf(stderr, "engine-run: %s\n", e.msg);
		return 1;
	}
	for (uint32_t i = 0; i < nv; i++)
		printf("%s%.9g", i ? " " : "", logits[i]);
	printf("\n");
	/* every step's logits, kept for printing after the ids */
	float *steps = all ? malloc((size_t)(n_greedy ? n_greedy : 1) * nv * sizeof *steps) : NULL;
	for (int g = 0; g < n_greedy; g++) {
		int32_t best = 0;
		for (uint32_t i = 1; i < nv; i++)
			if (logits[i] > logits[best])
				best = (int32_t)i;
		printf("%s%d", g ? " " : "", best);
		if (moe_seq_eval(c, &best, 1, logits, false, &e) < 0) {
			fprintf(stderr, "engine-run: %s\n", e.msg);
			return 1;
		}
		if (steps)
			memcpy(steps + (size_t)g * nv, logits, nv * sizeof *logits);
	}
	printf("\n");
	for (int g = 0; steps && g < n_greedy; g++)
		for (uint32_t i = 0; i < nv; i++)
			printf("%.9g%s", steps[(size_t)g * nv + i], i + 1 < nv ? " " : "\n");
	free(steps);
	moe_kv_stats ks;
	moe_engine_kv_stats(eng, &ks);
	unsigned long long peak = (unsigned long long)ks.peak_used * ks.block_bytes +
				  (unsigned long long)ks.peak_win_used * ks.win_slot_bytes;
	fprintf(stderr, "kv: %d positions; peak %d blocks x %zu bytes + %d window slots x %zu "
			"bytes (%d sliding layers apart) = %llu bytes\n", moe_seq_pos(c), ks.peak_used,
		ks.block_bytes, ks.peak_win_used, ks.win_slot_bytes, ks.n_win_layers, peak);
	if (tp.f) {
		tape_cache(&tp, c, tape_path);
		if (fclose(tp.f) || tp.bad) {
			fprintf(stderr, "engine-run: %s: the tape is incomplete (a write failed or "
					"rows could not be placed)\n", tape_path);
			return 1;
		}
		free(tp.xn);
		free(tp.pos);
		free(tp.q);
	}
	free(logits);
	moe_seq_free(c);
	moe_engine_free(eng);
	moe_model_free(m);
	return 0;
}
