/* engine-batch — test helper (TAP): batch invariance, prefix sharing, the
 * KV pool's accounting, pool exhaustion and cancellation on one model.
 *
 *   engine-batch MODEL.uth [NAME]
 *
 * Reference run: sequence A alone on an engine with the default batch and
 * one thread: its prompt in one step, then G greedy tokens; every logit is
 * kept.  Then A again on engines with other batch sizes and thread counts,
 * its prompt fed in uneven chunks inside steps that also hold the prompts
 * and decode tokens of 16 other sequences (placed before and after A's
 * tokens): every logit must be bit-identical and the greedy ids the same.
 * Then A on a new sequence of the same engine takes its prompt's whole
 * blocks from the pool (prefix sharing): the same logits again.  Freed
 * sequences give every block back. */
#include "engine.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define G 6        /* greedy tokens */
#define NP 37      /* A's prompt length (not a multiple of the block) */
#define OTHERS 16

static uint64_t rng = 12345;
static int32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (int32_t)((rng >> 33) % n);
}

static int32_t argmax(const float *l, uint32_t n)
{
	int32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (l[i] > l[b])
			b = (int32_t)i;
	return b;
}

/* A alone: prompt in one step, G greedy steps; logits [(G + 1) x nv].
 * The KV block size is part of the arithmetic (attention sums block by
 * block), so the reference uses the block size of the run it is compared
 * with. */
static int run_alone(const moe_model *m, const int32_t *prompt, int block, float *logits,
		     int32_t *ids, moe_error *e)
{
	moe_engine *eng;
	moe_seq *s;
	uint32_t nv = m->hp.n_vocab;
	MOE_TRY(moe_engine_new(&eng, m,
			       &(moe_engine_params){.n_threads = 1, .kv_size = 256, .kv_block = block},
			       e));
	int rc = moe_seq_new(&s, eng, e);
	if (rc == 0)
		rc = moe_seq_eval(s, prompt, NP, logits, false, e);
	for (int g = 0; rc == 0 && g < G; g++) {
		ids[g] = argmax(logits + (size_t)g * nv, nv);
		rc = moe_seq_eval(s, &ids[g], 1, logits + (size_t)(g + 1) * nv, false, e);
	}
	moe_seq_free(s);
	moe_engine_free(eng);
	return rc;
}

/* A among OTHERS sequences on an engine with n_batch and threads; A's
 * prompt goes in chunks of `chunk`, the others' tokens around it. */
static int run_mixed(const moe_model *m, const int32_t *prompt, int n_batch, int threads,
		     int chunk, int block, float *logits, int32_t *ids, float *shared_logits,
		     moe_error *e)
{
	uint32_t nv = m->hp.n_vocab;
	moe_engine *eng;
	MOE_TRY(moe_engine_new(&eng, m,
			       &(moe_engine_params){.n_threads = threads, .n_batch = n_batch,
						    .kv_size = 2048, .kv_block = block},
			       e));
	moe_seq *a = NULL, *o[OTHERS] = {0};
	int rc = moe_seq_new(&a, eng, e);
	for (int i = 0; rc == 0 && i < OTHERS; i++)
		rc = moe_seq_new(&o[i], eng, e);
	float *junk = malloc((size_t)nv * sizeof *junk);
	moe_step_token t[64];
	int fed = 0, g = 0, other_len[OTHERS];
	for (int i = 0; i < OTHERS; i++)
		other_len[i] = 3 + rnd(40);
	while (rc == 0 && g < G + 1) {
		int n = 0;
		/* half the others first */
		for (int i = 0; i < OTHERS / 2; i++)
			if (moe_seq_pos(o[i]) < other_len[i] + 10)
				t[n++] = (moe_step_token){o[i], rnd(nv), moe_seq_pos(o[i]),
							  i % 3 ? NULL : junk};
		if (fed < NP) {
			int c = NP - fed < chunk ? NP - fed : chunk;
			for (int j = 0; j < c; j++, fed++)
				t[n++] = (moe_step_token){a, prompt[fed], fed,
							  fed == NP - 1 ? logits : NULL};
		} else {
			ids[g - 1] = argmax(logits + (size_t)(g - 1) * nv, nv);
			t[n++] = (moe_step_token){a, ids[g - 1], NP + g - 1, logits + (size_t)g * nv};
		}
		/* the others' prompts (several tokens) after A */
		for (int i = OTHERS / 2; i < OTHERS; i++)
			for (int j = 0; j < 2 && moe_seq_pos(o[i]) + j < other_len[i] + 10; j++)
				t[n++] = (moe_step_token){o[i], rnd(nv), moe_seq_pos(o[i]) + j, NULL};
		rc = moe_engine_step(eng, t, n, e);
		if (rc == 0 && (fed == NP))
			g++;
	}
	/* prefix sharing: a new sequence with A's prompt takes its blocks */
	moe_seq *b = NULL;
	if (rc == 0 && shared_logits && (rc = moe_seq_new(&b, eng, e)) == 0) {
		int taken = moe_seq_share_prefix(b, prompt, NP);
		ok(taken >= 16 && taken < NP, "prefix sharing took %d of %d prompt tokens", taken, NP);
		rc = moe_seq_eval(b, prompt + taken, (size_t)(NP - taken), shared_logits, false, e);
	}
	moe_seq_free(b);
	moe_seq_free(a);
	for (int i = 0; i < OTHERS; i++)
		moe_seq_free(o[i]);
	moe_kv_stats ks;
	moe_engine_kv_stats(eng, &ks);
	ok(ks.n_used == 0 && ks.n_used + ks.n_cached + ks.n_free == ks.n_blocks,
	   "every block back in the pool (used %d, cached %d, free %d of %d)", ks.n_used,
	   ks.n_cached, ks.n_free, ks.n_blocks);
	free(junk);
	moe_engine_free(eng);
	return rc;
}

static int on_text(void *user, moe_req *r, const char *t, size_t n)
{
	(void)user, (void)r, (void)t, (void)n;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: engine-batch MODEL [NAME]\n");
		return 2;
	}
	const char *name = argc > 2 ? argv[2] : argv[1];
	moe_error e = {0};
	moe_model *m;
	if (moe_model_load(&m, argv[1], &e) < 0) {
		ok(0, "%s: load: %s", name, e.msg);
		return tap_done();
	}
	uint32_t nv = m->hp.n_vocab;
	int32_t prompt[NP], ids0[G], ids[G];
	for (int i = 0; i < NP; i++)
		prompt[i] = rnd(nv);
	size_t sz = (size_t)(G + 1) * nv * sizeof(float);
	float *ref = malloc(sz), *got = malloc(sz), *shared = malloc(nv * sizeof(float));
	static const struct { int n_batch, threads, chunk, block; } cfg[] = {
		{256, 2, 37, 16}, {7, 2, 5, 16}, {64, 1, 1, 64}, {13, 3, 11, 32},
	};
	for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
		if (run_alone(m, prompt, cfg[c].block, ref, ids0, &e) < 0) {
			ok(0, "%s: alone: %s", name, e.msg);
			continue;
		}
		memset(got, 0, sz);
		int rc = run_mixed(m, prompt, cfg[c].n_batch, cfg[c].threads, cfg[c].chunk, cfg[c].block, got, ids,
				   c == 1 ? shared : NULL, &e);
		if (rc < 0) {
			ok(0, "%s: mixed run: %s", name, e.msg);
			continue;
		}
		ok(!memcmp(ref, got, sz) && !memcmp(ids0, ids, sizeof ids),
		   "%s: among %d others, -b %d, %d threads, prompt chunks of %d, KV blocks of %d: "
		   "bit-identical logits and greedy ids", name, OTHERS, cfg[c].n_batch,
		   cfg[c].threads, cfg[c].chunk, cfg[c].block);
		if (c == 1)
			ok(!memcmp(ref, shared, nv * sizeof(float)),
			   "%s: prefix-shared sequence: bit-identical logits", name);
	}

	/* pool exhaustion: a clear error, nothing evaluated, the sequence intact */
	moe_engine *eng;
	moe_seq *s;
	if (moe_engine_new(&eng, m, &(moe_engine_params){.kv_size = 32, .kv_block = 16}, &e) < 0 ||
	    moe_seq_new(&s, eng, &e) < 0) {
		ok(0, "%s: small engine: %s", name, e.msg);
		return tap_done();
	}
	int rc = moe_seq_eval(s, prompt, 30, NULL, false, &e);
	ok(rc == 0, "%s: 30 tokens in a pool of 32", name);
	rc = moe_seq_eval(s, prompt, 5, NULL, false, &e);
	ok(rc == MOE_ERANGE && moe_seq_pos(s) == 30, "%s: 5 more: MOE_ERANGE (%s), position kept",
	   name, e.msg);
	moe_seq_free(s);

	/* cancel mid-prefill through the scheduler: counters back to the start */
	moe_kv_stats k0, k1;
	moe_engine_kv_stats(eng, &k0);
	moe_sched *sc;
	moe_req *r;
	moe_req_params rp = moe_req_params_defaults();
	rp.sampling.temp = 0;
	moe_req_callbacks cb = {.text = on_text};
	if (m->tok && moe_sched_new(&sc, eng, &(moe_sched_params){.n_parallel = 2, .n_batch = 8},
				    &e) == 0 &&
	    moe_req_new(&r, eng, prompt + 1, 28, &rp, &cb, &e) == 0) {
		moe_sched_submit(sc, r, &e);
		moe_sched_step(sc, &e);
		moe_kv_stats km;
		moe_engine_kv_stats(eng, &km);
		moe_sched_cancel(sc, r);
		moe_engine_kv_stats(eng, &k1);
		ok(km.n_used > 0 && k1.n_used == k0.n_used && moe_req_done(r) &&
		   moe_req_get_result(r)->finish == MOE_FINISH_ABORT,
		   "%s: cancel mid-prefill frees every block (%d used during, %d after)", name,
		   km.n_used, k1.n_used);
		moe_req_free(r);
		moe_sched_free(sc);
	}
	moe_engine_free(eng);
	free(ref);
	free(got);
	free(shared);
	moe_model_free(m);
	return tap_done();
}
