/* t-engine — the scheduler on the demo model (share/moe-demo.uth): waiting
 * for KV blocks, a full pool, cancellation, callbacks, n_predict 0, prefix
 * sharing between requests, decoding that goes on while a long prompt is
 * prefilled, a caller's sequence continued, request parameter checks. */
#include "engine.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MOE_SRC_SHAREDIR
#define MOE_SRC_SHAREDIR "share"
#endif

typedef struct counter {
	int tokens, done, stop_after;
	int steps_seen;         /* scheduler steps at which a token came */
	char text[4096];
	size_t len;
} counter;

static int on_token(void *user, moe_req *r, int32_t id, const float *logits)
{
	(void)r, (void)id, (void)logits;
	counter *c = user;
	c->tokens++;
	return c->stop_after && c->tokens >= c->stop_after ? -1 : 0;
}

static int on_text(void *user, moe_req *r, const char *t, size_t n)
{
	(void)r;
	counter *c = user;
	if (c->len + n < sizeof c->text) {
		memcpy(c->text + c->len, t, n);
		c->len += n;
	}
	return 0;
}

static void on_done(void *user, moe_req *r)
{
	(void)r;
	((counter *)user)->done++;
}

static moe_req *req(moe_engine *eng, const int32_t *ids, size_t n, int n_predict, counter *c)
{
	moe_req_params p = moe_req_params_defaults();
	p.sampling.temp = 0;
	p.n_predict = n_predict;
	p.ignore_eos = true;
	moe_req_callbacks cb = {on_token, on_text, on_done, c};
	moe_req *r = NULL;
	moe_error e = {0};
	if (moe_req_new(&r, eng, ids, n, &p, &cb, &e) < 0)
		tap_diag("moe_req_new: %s", e.msg);
	return r;
}

typedef struct obs_count {
	int calls, expert_calls, output_calls, bad;
	int64_t rows;
} obs_count;

static void on_observe(void *user, const moe_matmul_obs *o)
{
	obs_count *c = user;
	c->calls++;
	c->rows += o->n_rows;
	c->expert_calls += o->expert >= 0;
	c->output_calls += o->layer < 0;
	/* the rows must be readable and finite: the values the kernels get */
	for (int64_t i = 0; i < o->n_rows * o->w->cols; i++)
		c->bad += !isfinite(o->x[i]);
	c->bad += !o->w->name || o->n_rows < 1;
}

int main(void)
{
	const char *path = MOE_SRC_SHAREDIR "/moe-demo.uth";
	moe_error e = {0};
	moe_model *m;
	if (moe_model_load(&m, path, &e) < 0)
		tap_skip_all("the demo model is not available");
	int32_t ids[300];
	for (int i = 0; i < 300; i++)
		ids[i] = 3 + (i * 37) % 900;

	/* alone: the reference texts */
	moe_engine *eng;
	moe_sched *s;
	ok(moe_engine_new(&eng, m, &(moe_engine_params){.kv_size = 1024}, &e) == 0, "engine");
	ok(moe_sched_new(&s, eng, &(moe_sched_params){.n_parallel = 1}, &e) == 0, "scheduler");
	counter ref[3] = {{0}};
	for (int i = 0; i < 3; i++) {
		moe_req *r = req(eng, ids + 10 * i, 40, 10, &ref[i]);
		moe_sched_submit(s, r, &e);
		moe_sched_run(s, &e);
		ok(moe_req_done(r) && moe_req_get_result(r)->finish == MOE_FINISH_LENGTH &&
		   ref[i].tokens == 10 && ref[i].done == 1, "request %d alone: 10 tokens, length", i);
		moe_req_free(r);
	}
	moe_sched_free(s);
	moe_engine_free(eng);

	/* a pool of 2 blocks: the third request waits for a place, then runs;
	 * the texts do not change */
	ok(moe_engine_new(&eng, m, &(moe_engine_params){.kv_size = 128, .kv_block = 64}, &e) == 0,
	   "engine with a pool of 2 blocks");
	moe_sched_new(&s, eng, &(moe_sched_params){.n_parallel = 3}, &e);
	counter c[3] = {{0}};
	moe_req *r[3];
	for (int i = 0; i < 3; i++) {
		r[i] = req(eng, ids + 10 * i, 40, 10, &c[i]);
		moe_sched_submit(s, r[i], &e);
	}
	moe_sched_step(s, &e);
	moe_kv_stats ks;
	moe_engine_kv_stats(eng, &ks);
	ok(ks.n_used == 2 && c[2].tokens == 0, "two admitted, the third waits (%d blocks used)",
	   ks.n_used);
	ok(moe_sched_run(s, &e) == 0, "run to the end");
	bool same = true;
	for (int i = 0; i < 3; i++) {
		same &= c[i].len == ref[i].len && !memcmp(c[i].text, ref[i].text, c[i].len) &&
			c[i].done == 1;
		moe_req_free(r[i]);
	}
	ok(same, "all three finish with the texts they have alone");
	moe_engine_kv_stats(eng, &ks);
	ok(ks.n_used == 0, "no block used after (%d cached, %d free)", ks.n_cached, ks.n_free);

	/* a sequence that outgrows the pool ends with "length" */
	counter g = {0};
	moe_req *big = req(eng, ids, 120, 50, &g);
	moe_sched_submit(s, big, &e);
	moe_sched_run(s, &e);
	ok(moe_req_get_result(big)->finish == MOE_FINISH_LENGTH && g.tokens == 9,
	   "120 prompt tokens, 50 asked, a pool of 128: %d generated, finish %s", g.tokens,
	   moe_finish_name(moe_req_get_result(big)->finish));
	moe_req_free(big);
	/* a prompt larger than the pool is refused */
	moe_req *huge = NULL;
	moe_req_params p = moe_req_params_defaults();
	ok(moe_req_new(&huge, eng, ids, 200, &p, NULL, &e) == MOE_ERANGE, "200 tokens in a pool "
	   "of 128: %s", e.msg);
	moe_sched_free(s);
	moe_engine_free(eng);

	/* cancellation, the token callback stopping, n_predict 0 */
	moe_engine_new(&eng, m, &(moe_engine_params){.kv_size = 2048, .n_batch = 8}, &e);
	moe_sched_new(&s, eng, &(moe_sched_params){.n_parallel = 1}, &e);
	counter a = {0}, b = {.stop_after = 3}, q = {0}, z = {0};
	moe_req *ra = req(eng, ids, 40, 20, &a), *rb = req(eng, ids + 1, 40, 20, &b),
		*rq = req(eng, ids + 2, 40, 20, &q), *rz = req(eng, ids + 3, 40, 0, &z);
	moe_sched_submit(s, ra, &e);
	moe_sched_submit(s, rb, &e);
	moe_sched_submit(s, rq, &e);
	moe_sched_submit(s, rz, &e);
	moe_sched_step(s, &e);
	moe_engine_kv_stats(eng, &ks);
	moe_sched_cancel(s, ra); /* mid-prefill */
	moe_sched_cancel(s, rq); /* queued */
	moe_kv_stats k2;
	moe_engine_kv_stats(eng, &k2);
	ok(ks.n_used > 0 && k2.n_used == 0 && a.done == 1 && q.done == 1 &&
	   moe_req_get_result(ra)->finish == MOE_FINISH_ABORT &&
	   moe_req_get_result(rq)->finish == MOE_FINISH_ABORT && q.tokens == 0,
	   "cancel mid-prefill and queued: finish abort, done called, blocks back (%d -> %d)",
	   ks.n_used, k2.n_used);
	moe_sched_run(s, &e);
	ok(b.tokens == 3 && moe_req_get_result(rb)->finish == MOE_FINISH_ABORT,
	   "the token callback stops a request after 3 tokens");
	ok(z.tokens == 0 && z.len == 0 && moe_req_get_result(rz)->finish == MOE_FINISH_LENGTH &&
	   z.done == 1, "n_predict 0: no token, finish length");
	moe_req_free(ra);
	moe_req_free(rb);
	moe_req_free(rq);
	moe_req_free(rz);

	/* prefix sharing between requests: the second takes 128 tokens */
	counter p1 = {0}, p2 = {0};
	moe_req *r1 = req(eng, ids, 150, 2, &p1);
	moe_sched_submit(s, r1, &e);
	moe_sched_run(s, &e);
	int32_t ids2[200];
	memcpy(ids2, ids, 150 * sizeof *ids);
	for (int i = 150; i < 200; i++)
		ids2[i] = 5 + i;
	moe_req *r2 = req(eng, ids2, 200, 2, &p2);
	moe_sched_submit(s, r2, &e);
	moe_sched_run(s, &e);
	ok(moe_req_get_result(r2)->n_prompt_eval == 200 - 128,
	   "a prompt starting like an earlier one: %zu of 200 tokens computed",
	   moe_req_get_result(r2)->n_prompt_eval);
	moe_req_free(r1);
	moe_req_free(r2);
	moe_sched_free(s);

	/* decoding goes on while a long prompt is prefilled in chunks */
	moe_sched_new(&s, eng, &(moe_sched_params){.n_parallel = 2, .n_batch = 8}, &e);
	counter d = {0}, l = {0};
	moe_req *rd = req(eng, ids + 7, 10, 60, &d);
	moe_sched_submit(s, rd, &e);
	while (d.tokens < 2)
		moe_sched_step(s, &e);
	moe_req *rl = req(eng, ids + 20, 250, 1, &l);
	moe_sched_submit(s, rl, &e);
	int steps = 0, before = d.tokens;
	while (l.tokens == 0 && steps < 100) {
		moe_sched_step(s, &e);
		steps++;
	}
	ok(steps >= 250 / 7 && d.tokens - before == steps,
	   "a 250-token prompt took %d steps of 8 tokens; the other request got a token in "
	   "each (%d)", steps, d.tokens - before);
	moe_sched_run(s, &e);
	moe_req_free(rd);
	moe_req_free(rl);
	moe_sched_free(s);

	/* a caller's sequence continued: only what is new is computed */
	moe_sched_new(&s, eng, &(moe_sched_params){0}, &e);
	moe_seq *conv;
	moe_seq_new(&conv, eng, &e);
	counter t1 = {0}, t2 = {0};
	moe_req *c1 = req(eng, ids, 30, 5, &t1);
	moe_req_use_seq(c1, conv);
	moe_sched_submit(s, c1, &e);
	moe_sched_run(s, &e);
	int pos = moe_seq_pos(conv);
	moe_req *c2 = req(eng, ids, 45, 5, &t2);
	moe_req_use_seq(c2, conv);
	moe_sched_submit(s, c2, &e);
	moe_sched_run(s, &e);
	ok(pos == 34 && moe_req_get_result(c2)->n_prompt_eval == 15,
	   "a kept sequence (%d tokens after the first request): the next computes %zu of 45",
	   pos, moe_req_get_result(c2)->n_prompt_eval);
	moe_req_free(c1);
	moe_req_free(c2);
	moe_seq_free(conv);
	moe_sched_free(s);
	moe_engine_free(eng);

	/* the activation observer sees every product; the logits do not change */
	{
		moe_engine *oe;
		moe_seq *sq;
		uint32_t nv = m->hp.n_vocab;
		float *l0 = malloc(nv * sizeof *l0), *l1 = malloc(nv * sizeof *l1);
		obs_count oc = {0};
		moe_engine_new(&oe, m, &(moe_engine_params){.kv_size = 256}, &e);
		moe_seq_new(&sq, oe, &e);
		moe_seq_eval(sq, ids, 5, l0, false, &e);
		moe_seq_truncate(sq, 0);
		moe_engine_set_observer(oe, on_observe, &oc);
		moe_seq_eval(sq, ids, 5, l1, false, &e);
		int L = (int)m->hp.n_layer, k = (int)m->hp.n_expert_used;
		/* per layer: q, k, v, o, router; per chosen expert gate, up, down */
		ok(oc.calls - oc.expert_calls == 5 * L + 1 && oc.output_calls == 1 &&
		   oc.expert_calls >= 3 * L && oc.expert_calls <= 3 * L * 5 * k && !oc.bad,
		   "observer: %d calls (%d for experts, %d for the output), rows readable", oc.calls,
		   oc.expert_calls, oc.output_calls);
		ok(!memcmp(l0, l1, nv * sizeof *l0), "observer set: the same logits");
		moe_seq_free(sq);
		moe_engine_free(oe);
		free(l0);
		free(l1);
	}

	/* the one parameter check */
	moe_req_params bad = moe_req_params_defaults();
	bad.sampling.top_p = NAN;
	ok(moe_req_params_check(&bad, &e) == MOE_EINVAL && strstr(e.msg, "top_p"),
	   "top_p NaN: %s", e.msg);
	bad = moe_req_params_defaults();
	bad.sampling.temp = INFINITY;
	ok(moe_req_params_check(&bad, &e) == MOE_EINVAL && strstr(e.msg, "temperature"),
	   "temperature inf: %s", e.msg);
	bad = moe_req_params_defaults();
	bad.stop[0] = "";
	bad.n_stop = 1;
	ok(moe_req_params_check(&bad, &e) == MOE_EINVAL, "an empty stop string: %s", e.msg);
	moe_req_defaults d0 = {.params = moe_req_params_defaults()};
	moe_req_input in;
	const char *js = "{\"prompt\": \"hi\", \"min_p\": 1.5}";
	ok(moe_req_parse(js, strlen(js), m->tok, &d0, &in, &e) == MOE_EINVAL &&
	   strstr(e.msg, "min_p"), "JSON min_p 1.5: %s", e.msg);
	js = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_k\": 5, \"id\": 7}";
	ok(moe_req_parse(js, strlen(js), m->tok, &d0, &in, &e) == 0 && in.chat &&
	   in.params.sampling.top_k == 5 && json_integer_value(in.id) == 7 && in.prompt_len > 2,
	   "JSON messages rendered, fields read");
	moe_req_input_free(&in);
	moe_model_free(m);
	return tap_done();
}
