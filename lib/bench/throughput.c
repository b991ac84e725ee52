/* throughput.c — what a model is (size, parameters total and active,
 * weight types) and how fast it runs: llama-bench's pp/tg/pp+tg tests,
 * optionally at a depth; peak RSS, CPU name and timestamps for the reports. */
#include "bench.h"
#include "quant.h"
#include "uth.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ model info */

static bool is_tokenizer_role(int role)
{
	return role >= MOE_UTH_ROLE_TOKENIZER_TOKENS &&
	       role <= MOE_UTH_ROLE_TOKENIZER_MERGE_OFFSETS;
}

static void params_label(uint64_t n, char *buf, size_t len)
{
	if (n >= 1000000000ull)
		snprintf(buf, len, "%.1fB", (double)n / 1e9);
	else if (n >= 1000000ull)
		snprintf(buf, len, "%.0fM", (double)n / 1e6);
	else
		snprintf(buf, len, "%.0fK", (double)n / 1e3);
}

int moe_bench_describe(const moe_model *m, moe_bench_model_info *out, moe_error *e)
{
	memset(out, 0, sizeof *out);
	const moe_uth *u = m->file;
	const moe_hparams *hp = &m->hp;
	uint64_t type_bytes[MOE_DTYPE_MAX] = {0}, matrix_bytes[MOE_DTYPE_MAX] = {0};
	uint64_t embd = 0, n_layer = hp->n_layer;
	bool has_output = false;
	/* per MoE layer: elements of all experts together */
	uint64_t *exp_elems = calloc(n_layer ? n_layer : 1, sizeof *exp_elems);
	if (!exp_elems)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < u->n_tensors; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		if (is_tokenizer_role(t->role))
			continue;
		uint64_t ne = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
		out->size += t->size;
		out->n_params += ne;
		if (t->dtype < MOE_DTYPE_MAX) {
			type_bytes[t->dtype] += t->size;
			if (t->n_dims >= 2)
				matrix_bytes[t->dtype] += t->size;
		}
		if (t->role == MOE_UTH_ROLE_TOKEN_EMBD)
			embd += ne;
		if (t->role == MOE_UTH_ROLE_OUTPUT)
			has_output = true;
		if (t->expert != MOE_UTH_NONE && t->layer < n_layer)
			exp_elems[t->layer] += ne;
	}
	/* Active per token: everything but the embedding table (one row is
	 * read; when it is tied to the output it is read whole) and the
	 * experts a token does not use. */
	uint64_t inactive = has_output ? embd : 0;
	if (hp->n_expert > 0)
		for (uint64_t l = 0; l < n_layer; l++) {
			uint64_t per = exp_elems[l] / hp->n_expert;
			inactive += (uint64_t)(hp->n_expert - hp->n_expert_used) * per;
		}
	free(exp_elems);
	out->n_params_active = out->n_params > inactive ? out->n_params - inactive : 0;
	out->active_bytes = moe_model_active_bytes(m);
	out->n_vocab = hp->n_vocab;
	snprintf(out->arch, sizeof out->arch, "%s", hp->arch);

	/* the main type and every type's share, by bytes */
	int main_t = -1, n_matrix_types = 0;
	uint64_t all_matrix = 0;
	for (int t = 0; t < MOE_DTYPE_MAX; t++) {
		all_matrix += matrix_bytes[t];
		if (matrix_bytes[t] && (main_t < 0 || matrix_bytes[t] > matrix_bytes[main_t]))
			main_t = t;
	}
	/* a "mix" has a second type of some weight, not just a small F32
	 * router next to the quantised matrices */
	for (int t = 0; t < MOE_DTYPE_MAX; t++)
		if (matrix_bytes[t] && matrix_bytes[t] * 100 >= all_matrix)
			n_matrix_types++;
	snprintf(out->main_type, sizeof out->main_type, "%s",
		 main_t >= 0 ? moe_type_name(main_t) : "?");
	size_t pos = 0;
	bool used[MOE_DTYPE_MAX] = {false};
	for (;;) {
		int best = -1;
		for (int t = 0; t < MOE_DTYPE_MAX; t++)
			if (type_bytes[t] && !used[t] &&
			    (best < 0 || type_bytes[t] > type_bytes[best]))
				best = t;
		if (best < 0)
			break;
		used[best] = true;
		double pct = out->size ? 100.0 * (double)type_bytes[best] / (double)out->size : 0;
		int w = snprintf(out->weight_types + pos, sizeof out->weight_types - pos,
				 "%s%s %.*f%%", pos ? ", " : "", moe_type_name(best),
				 pct < 9.95 ? 1 : 0, pct);
		if (w < 0 || (size_t)w >= sizeof out->weight_types - pos)
			break;
		pos += (size_t)w;
	}
	char plabel[32], tname[16];
	params_label(out->n_params, plabel, sizeof plabel);
	snprintf(tname, sizeof tname, "%s", out->main_type);
	for (char *c = tname; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	snprintf(out->type, sizeof out->type, "%s %s %s%s", hp->arch, plabel, tname,
		 n_matrix_types > 1 ? " mix" : "");
	return 0;
}

/* ------------------------------------------------------------- the tests */

char *moe_bench_test_name(const moe_bench_test *t, char *buf, size_t n)
{
	int w;
	if (t->n_prompt > 0 && t->n_gen > 0)
		w = snprintf(buf, n, "pp%d+tg%d", t->n_prompt, t->n_gen);
	else if (t->n_prompt > 0)
		w = snprintf(buf, n, "pp%d", t->n_prompt);
	else
		w = snprintf(buf, n, "tg%d", t->n_gen);
	if (t->n_depth > 0 && w >= 0 && (size_t)w < n)
		snprintf(buf + w, n - (size_t)w, " @ d%d", t->n_depth);
	return buf;
}

/* splitmix64: random token ids, reproducible from the seed */
static uint64_t next_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

int32_t moe_bench_bos(const moe_model *m)
{
	if (!m->tok)
		return -1;
	int32_t *ids = NULL;
	size_t n = 0;
	int32_t bos = moe_tokenizer_special(m->tok, MOE_SPECIAL_BOS);
	/* the tokenizer adds BOS iff encoding nothing with specials gives it */
	if (bos < 0 || moe_tokenizer_encode(m->tok, "", 0, true, false, &ids, &n, NULL) < 0)
		return -1;
	bool added = n > 0 && ids[0] == bos;
	free(ids);
	return added ? bos : -1;
}

typedef struct run_state {
	const moe_model *m;
	moe_engine *eng;
	moe_seq *ctx;
	int32_t *ids;
	float *logits;
	uint64_t rng;
	int32_t bos;
	uint32_t n_vocab;
} run_state;

static void random_ids(run_state *s, int n, bool first_bos)
{
	for (int i = 0; i < n; i++)
		s->ids[i] = (int32_t)(next_rand(&s->rng) % s->n_vocab);
	if (first_bos && s->bos >= 0 && n > 0)
		s->ids[0] = s->bos;
}

/* llama-bench's test_prompt: n random tokens, BOS first, in one call that
 * splits them into batches; logits for the last one. */
static int prompt_tokens(run_state *s, int n, moe_error *e)
{
	random_ids(s, n, true);
	return moe_seq_eval(s->ctx, s->ids, (size_t)n, s->logits, false, e);
}

/* llama-bench's test_gen: one token at a time, BOS first, random after. */
static int gen_tokens(run_state *s, int n, moe_error *e)
{
	int32_t tok = s->bos >= 0 ? s->bos : (int32_t)(next_rand(&s->rng) % s->n_vocab);
	for (int i = 0; i < n; i++) {
		MOE_TRY(moe_seq_eval(s->ctx, &tok, 1, s->logits, false, e));
		tok = (int32_t)(next_rand(&s->rng) % s->n_vocab);
	}
	return 0;
}

int moe_bench_run(const moe_model *m, const moe_bench_test *t, uint64_t *samples_ns, moe_error *e)
{
	if (t->n_prompt < 0 || t->n_gen < 0 || t->n_depth < 0 || t->reps < 1 ||
	    (t->n_prompt == 0 && t->n_gen == 0))
		return moe_err(e, MOE_EINVAL,
			       "bench: a test needs prompt or generated tokens and "
			       "at least one repetition");
	uint64_t n_ctx = (uint64_t)t->n_depth + (uint64_t)t->n_prompt + (uint64_t)t->n_gen + 1;
	if (n_ctx > (1u << 24))
		return moe_err(e, MOE_EINVAL, "bench: %llu tokens of context is too many",
			       (unsigned long long)n_ctx);
	run_state s = {.m = m,
		       .rng = t->seed ? t->seed : 1,
		       .bos = moe_bench_bos(m),
		       .n_vocab = m->hp.n_vocab};
	int n_ids = t->n_prompt > t->n_depth ? t->n_prompt : t->n_depth;
	s.ids = malloc(((size_t)n_ids + 1) * sizeof *s.ids);
	s.logits = malloc((size_t)m->hp.n_vocab * sizeof *s.logits);
	if (!s.ids || !s.logits) {
		free(s.ids);
		free(s.logits);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	moe_engine_params ep = {.kv_size = (int)n_ctx,
				.n_threads = t->n_threads,
				.n_batch = t->n_batch,
				.kv_type = t->kv_type};
	int rc = moe_engine_new(&s.eng, m, &ep, e);
	if (rc < 0 || (rc = moe_seq_new(&s.ctx, s.eng, e)) < 0)
		goto out;
	/* warm-up, as llama-bench: the prompt once, one generated token */
	if (t->n_prompt > 0 && (rc = prompt_tokens(&s, t->n_prompt, e)) < 0)
		goto out;
	if (t->n_gen > 0 && (rc = gen_tokens(&s, 1, e)) < 0)
		goto out;
	for (int r = 0; r < t->reps; r++) {
		moe_seq_truncate(s.ctx, 0);
		if (t->n_depth > 0) {
			/* the depth: a text already in the cache (random ids) */
			random_ids(&s, t->n_depth, true);
			if ((rc = moe_seq_eval(s.ctx, s.ids, (size_t)t->n_depth, NULL, false, e)) <
			    0)
				goto out;
		}
		double t0 = moe_time_now();
		if (t->n_prompt > 0 && (rc = prompt_tokens(&s, t->n_prompt, e)) < 0)
			goto out;
		if (t->n_gen > 0 && (rc = gen_tokens(&s, t->n_gen, e)) < 0)
			goto out;
		double dt = moe_time_now() - t0;
		samples_ns[r] = (uint64_t)(dt * 1e9 + 0.5);
	}
out:
	moe_seq_free(s.ctx);
	moe_engine_free(s.eng);
	free(s.ids);
	free(s.logits);
	return rc;
}

/* ------------------------------------------------ several sequences */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* One repetition: pl fresh sequences, their prompts in one engine step
 * (split by n_batch), then tg decode steps of pl tokens. */
static int batched_once(moe_engine *eng, const moe_batched_test *t, uint64_t *rng, float *logits,
			moe_step_token *toks, uint64_t *pp_ns, uint64_t *tg_ns, moe_error *e)
{
	uint32_t nv = moe_engine_n_vocab(eng);
	moe_seq **seq = calloc((size_t)t->n_pl, sizeof *seq);
	int rc = seq ? 0 : moe_err(e, MOE_ENOMEM, "out of memory");
	for (int i = 0; rc == 0 && i < t->n_pl; i++)
		rc = moe_seq_new(&seq[i], eng, e);
	int32_t bos = moe_bench_bos(moe_engine_model(eng));
	size_t n = 0;
	for (int i = 0; rc == 0 && i < t->n_pl; i++)
		for (int p = 0; p < t->n_pp; p++) {
			int32_t id = p == 0 && bos >= 0 ? bos : (int32_t)(next_rand(rng) % nv);
			toks[n++] = (moe_step_token){seq[i], id, p,
						     p == t->n_pp - 1 ? logits + (size_t)i * nv : NULL};
		}
	double t0 = moe_time_now();
	if (rc == 0 && n)
		rc = moe_engine_step(eng, toks, (int)n, e);
	double t1 = moe_time_now();
	for (int g = 0; rc == 0 && g < t->n_tg; g++) {
		for (int i = 0; i < t->n_pl; i++)
			toks[i] = (moe_step_token){seq[i], (int32_t)(next_rand(rng) % nv),
						   moe_seq_pos(seq[i]), logits + (size_t)i * nv};
		rc = moe_engine_step(eng, toks, t->n_pl, e);
	}
	double t2 = moe_time_now();
	*pp_ns = (uint64_t)((t1 - t0) * 1e9 + 0.5);
	*tg_ns = (uint64_t)((t2 - t1) * 1e9 + 0.5);
	for (int i = 0; seq && i < t->n_pl; i++)
		moe_seq_free(seq[i]);
	free(seq);
	return rc;
}

int moe_bench_batched_run(const moe_model *m, const moe_batched_test *t, moe_batched_row *row,
			  moe_error *e)
{
	if (t->n_pl < 1 || t->n_pp < 0 || t->n_tg < 0 || t->n_pp + t->n_tg < 1 || t->reps < 1)
		return moe_err(e, MOE_EINVAL, "bench: -np needs sequences, prompt or generated "
					      "tokens, and a repetition");
	uint64_t kv = (uint64_t)t->n_pl * ((uint64_t)t->n_pp + (uint64_t)t->n_tg);
	if (kv > (1u << 24))
		return moe_err(e, MOE_EINVAL, "bench: %llu tokens of KV cache is too many",
			       (unsigned long long)kv);
	moe_engine *eng;
	/* every sequence may leave one block partly used */
	moe_engine_params ep = {.kv_size = (int)kv + t->n_pl * 64, .n_threads = t->n_threads,
				.n_batch = t->n_batch, .kv_type = t->kv_type};
	MOE_TRY(moe_engine_new(&eng, m, &ep, e));
	size_t n_toks = (size_t)t->n_pl * (size_t)(t->n_pp > 1 ? t->n_pp : 1);
	float *logits = malloc((size_t)t->n_pl * moe_engine_n_vocab(eng) * sizeof *logits);
	moe_step_token *toks = malloc(n_toks * sizeof *toks);
	uint64_t rng = t->seed ? t->seed : 1, w_pp, w_tg;
	int rc = logits && toks ? 0 : moe_err(e, MOE_ENOMEM, "out of memory");
	/* warm-up: a short run of the same shape */
	moe_batched_test warm = *t;
	warm.n_pp = t->n_pp < 16 ? t->n_pp : 16;
	warm.n_tg = t->n_tg < 2 ? t->n_tg : 2;
	if (rc == 0)
		rc = batched_once(eng, &warm, &rng, logits, toks, &w_pp, &w_tg, e);
	for (int r = 0; rc == 0 && r < t->reps; r++)
		rc = batched_once(eng, t, &rng, logits, toks, &row->pp_ns[r], &row->tg_ns[r], e);
	moe_kv_stats ks;
	moe_engine_kv_stats(eng, &ks);
	row->test = *t;
	row->n_kv = (int)kv;
	row->kv_block = ks.block_tokens;
	row->kv_peak_blocks = ks.peak_used;
	row->kv_peak_bytes = (uint64_t)ks.peak_used * ks.block_bytes +
			     (uint64_t)ks.peak_win_used * ks.win_slot_bytes;
	free(logits);
	free(toks);
	moe_engine_free(eng);
	return rc;
}

/* Median of n samples (sorted copy). */
uint64_t moe_bench_median_ns(const uint64_t *v, size_t n)
{
	if (!n)
		return 0;
	uint64_t *c = malloc(n * sizeof *c);
	if (!c)
		return v[0];
	memcpy(c, v, n * sizeof *c);
	qsort(c, n, sizeof *c, cmp_u64);
	uint64_t m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
	free(c);
	return m;
}

/* ----------------------------------------------------- process and host */

/* A "Key:   value kB" line of /proc/self/status, in bytes; 0 if absent. */
static uint64_t proc_status_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	char line[256];
	uint64_t v = 0;
	size_t kl = strlen(key);
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			v = strtoull(line + kl + 1, NULL, 10) * 1024;
			break;
		}
	}
	fclose(f);
	return v;
}

uint64_t moe_bench_peak_rss(void)
{
	uint64_t hwm = proc_status_kb("VmHWM");
	if (hwm)
		return hwm;
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		return (uint64_t)ru.ru_maxrss * 1024; /* kilobytes on Linux */
	return 0;
}

bool moe_bench_peak_rss_reset(void)
{
	/* "5" resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+) */
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, "5", 1) == 1;
	close(fd);
	return ok;
}

void moe_bench_cpu_name(char *buf, size_t n)
{
	snprintf(buf, n, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *v = strchr(line, ':');
			if (!v)
				break;
			v++;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t l = strlen(v);
			while (l && (v[l - 1] == '\n' || v[l - 1] == ' '))
				v[--l] = '\0';
			snprintf(buf, n, "%s", v);
			break;
		}
	}
	fclose(f);
}

void moe_bench_time_iso(char *buf, size_t n)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
