/* engine-window — test helper (TAP): prefix sharing and rewinds when
 * sliding-window layers keep their window only (lib/engine/kv.c), on a
 * model with sliding layers whose window plus a block of 4 is shorter than
 * the sequence (t0435 uses gpt-oss with a window of 8).
 *
 *   engine-window MODEL.uth [NAME]
 *
 * Reference: sequence A, a prompt of NP ids then G greedy tokens one at a
 * time (so the slots of blocks that fell behind are reused by later ones),
 * every step's logits kept.  Then, with A still held:
 *   - B shares all of A's tokens but the last: the window before it is
 *     still held, so it takes them, and its last step equals A's;
 *   - A rewound a few positions (inside what is kept) continues as before;
 *   - A rewound far back (its window there given back and reused) starts
 *     again from 0, and recomputing gives A's logits;
 * and after A is freed, C with a prefix whose window rows were reused takes
 * fewer blocks (none here) and still gets A's logits; and D computes all of
 * A's tokens in one step of 4-token chunks holding only the window's slots
 * and the chunk's, with A's logits.  Results must be
 * bit-identical: the engine's sums do not depend on how a sequence was
 * chunked (t0430). */
#include "engine.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define NP 8
#define G 60
#define BLOCK 4

static int32_t argmax(const float *l, uint32_t n)
{
	int32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (l[i] > l[b])
			b = (int32_t)i;
	return b;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: engine-window MODEL [NAME]\n");
		return 2;
	}
	const char *name = argc > 2 ? argv[2] : argv[1];
	moe_error e = {0};
	moe_model *m;
	moe_engine *eng;
	if (moe_model_load(&m, argv[1], &e) < 0 ||
	    moe_engine_new(&eng, m, &(moe_engine_params){.n_threads = 1, .kv_size = 256,
							 .kv_block = BLOCK}, &e) < 0) {
		ok(0, "%s: load: %s", name, e.msg);
		return tap_done();
	}
	uint32_t nv = m->hp.n_vocab;
	int n = NP + G;
	int32_t seq[NP + G] = {1, 7, 3, 9, 4, 200 % (int)nv, 11, 5};
	/* ref[p]: the logits after position p (p >= NP - 1) */
	float *ref = calloc((size_t)n * nv, sizeof(float)), *got = malloc(nv * sizeof(float));
	moe_seq *a, *b, *c;
	if (moe_seq_new(&a, eng, &e) < 0 ||
	    moe_seq_eval(a, seq, NP, ref + (size_t)(NP - 1) * nv, false, &e) < 0) {
		ok(0, "%s: A's prompt: %s", name, e.msg);
		return tap_done();
	}
	for (int p = NP; p < n; p++) {
		seq[p] = argmax(ref + (size_t)(p - 1) * nv, nv);
		if (moe_seq_eval(a, &seq[p], 1, ref + (size_t)p * nv, false, &e) < 0) {
			ok(0, "%s: A's step %d: %s", name, p, e.msg);
			return tap_done();
		}
	}
	moe_kv_stats ks;
	moe_engine_kv_stats(eng, &ks);
	ok(ks.n_win_layers > 0 && ks.n_win_used < moe_engine_blocks_for(eng, n),
	   "%s: sliding layers apart (%d), A holds %d window slots for %d blocks", name,
	   ks.n_win_layers, ks.n_win_used, moe_engine_blocks_for(eng, n));

	/* B: everything but the last token shared, the last computed */
	int taken = -1;
	if (moe_seq_new(&b, eng, &e) == 0)
		taken = moe_seq_share_prefix(b, seq, (size_t)n);
	ok(taken == n - 1 && moe_seq_eval(b, &seq[n - 1], 1, got, false, &e) == 0 &&
	   !memcmp(got, ref + (size_t)(n - 1) * nv, nv * sizeof(float)),
	   "%s: B shares %d of A's %d tokens (window held) and gets A's last logits", name, taken, n);
	moe_seq_free(b);

	/* A rewound within what is kept: continues from there */
	int near = n - 3;
	moe_seq_truncate(a, near);
	int pos = moe_seq_pos(a);
	ok(pos == near && moe_seq_eval(a, &seq[near], n - near, got, false, &e) == 0 &&
	   !memcmp(got, ref + (size_t)(n - 1) * nv, nv * sizeof(float)),
	   "%s: A rewound to %d (inside the window) stays at %d and recomputes the same logits", name,
	   near, pos);

	/* A rewound far back: its window there was reused, so from 0 */
	int far = 20;
	moe_seq_truncate(a, far);
	pos = moe_seq_pos(a);
	ok(pos == 0 && moe_seq_eval(a, seq, (size_t)far + 1, got, false, &e) == 0 &&
	   !memcmp(got, ref + (size_t)far * nv, nv * sizeof(float)),
	   "%s: A rewound to %d (window given back) starts again at %d; same logits", name, far, pos);
	moe_seq_free(a);

	/* C after A is gone: the cached blocks of [0, 24) lost their window
	 * rows, so C takes only what still has them */
	int len = 24;
	taken = -1;
	if (moe_seq_new(&c, eng, &e) == 0)
		taken = moe_seq_share_prefix(c, seq, (size_t)len);
	ok(taken >= 0 && taken < len - 1 &&
	   moe_seq_eval(c, seq + taken, (size_t)(len - taken), got, false, &e) == 0 &&
	   !memcmp(got, ref + (size_t)(len - 1) * nv, nv * sizeof(float)),
	   "%s: C shares %d of %d tokens (window rows reused) and gets A's logits", name, taken, len);
	moe_seq_free(c);
	moe_engine_kv_stats(eng, &ks);
	ok(ks.n_used == 0 && ks.n_win_used == 0, "%s: every block and window slot back (%d, %d)",
	   name, ks.n_used, ks.n_win_used);
	moe_engine_free(eng);

	/* D: all of A's tokens in one step on an engine of 4-token chunks:
	 * window slots come chunk by chunk, so the step holds the window and
	 * the chunk only (plus the block being written), with A's logits */
	moe_seq *d;
	moe_step_token *st = calloc((size_t)n, sizeof *st);
	for (int p = 0; p < n; p++)
		st[p] = (moe_step_token){NULL, seq[p], p, p == n - 1 ? got : NULL};
	int bound = (m->hp.sliding_window + BLOCK + 4) / BLOCK + 2;
	if (moe_engine_new(&eng, m, &(moe_engine_params){.n_threads = 1, .kv_size = 256,
							 .n_batch = 4, .kv_block = BLOCK}, &e) < 0 ||
	    moe_seq_new(&d, eng, &e) < 0) {
		ok(0, "%s: engine of 4-token chunks: %s", name, e.msg);
		return tap_done();
	}
	for (int p = 0; p < n; p++)
		st[p].seq = d;
	int rc = moe_engine_step(eng, st, n, &e);
	moe_engine_kv_stats(eng, &ks);
	ok(rc == 0 && ks.peak_win_used <= bound && !memcmp(got, ref + (size_t)(n - 1) * nv, nv * sizeof(float)),
	   "%s: %d tokens in one step of 4-token chunks: at most %d window slots held (%d), A's logits",
	   name, n, bound, ks.peak_win_used);
	moe_seq_free(d);
	free(st);
	free(ref);
	free(got);
	moe_engine_free(eng);
	moe_model_free(m);
	return tap_done();
}
