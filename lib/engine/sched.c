/* sched.c — requests and the scheduler (continuous batching).
 *
 * A request goes queued -> prefill -> decode -> done.  Each scheduler step
 * admits queued requests (first come, first served) while fewer than
 * n_parallel run and the KV pool has blocks for their prompts (blocks
 * reserved at admission, so a prefill never runs out half way), then builds
 * one engine step: one token for every decoding request, then prompt chunks
 * of the prefilling ones in what is left of n_batch.  After the step each
 * request that got logits samples, detokenises and emits text.
 *
 * Stop strings: text that could still become a stop string is held back
 * until it either completes one (then it is dropped and the request stops)
 * or can no longer match (then it is emitted).  So a caller never sees
 * text that a stop string later cuts. */
#include "engine/engine_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { REQ_NEW, REQ_QUEUED, REQ_PREFILL, REQ_DECODE, REQ_DONE } req_state;

struct moe_req {
	moe_engine *eng;
	moe_sched *sched;
	req_state state;
	int32_t *prompt;
	size_t n_prompt;
	moe_req_params p;
	char *stop_copy[MOE_REQ_MAX_STOP];
	moe_req_callbacks cb;
	moe_sampler *sampler;
	moe_detok *detok;
	char *text;             /* text not yet emitted: text[0..text_len) */
	size_t text_len, text_cap;
	float *logits;          /* [n_vocab] */
	moe_seq *seq;
	size_t n_fed;           /* prompt tokens in the sequence */
	int32_t next;           /* the token to feed in the next decode step */
	moe_req_result res;
	double t_submit, t_admit, t_first;
	bool cut;               /* a stop string ended the text */
	moe_seq *user_seq;      /* the caller's sequence (moe_req_use_seq) or NULL */
};

struct moe_sched {
	moe_engine *eng;
	int n_parallel, n_batch;
	moe_req **queue;        /* [n_queue], oldest first */
	int n_queue, cap_queue;
	moe_req **running;      /* [n_running], admission order */
	int n_running;
	moe_step_token *toks;   /* [n_batch] */
};

const char *moe_finish_name(moe_finish f)
{
	switch (f) {
	case MOE_FINISH_NONE: return "none";
	case MOE_FINISH_STOP: return "stop";
	case MOE_FINISH_LENGTH: return "length";
	case MOE_FINISH_ABORT: return "abort";
	case MOE_FINISH_ERROR: return "error";
	}
	return "?";
}

/* -------------------------------------------------------------- requests */

int moe_req_new(moe_req **out, moe_engine *eng, const int32_t *prompt, size_t n,
		const moe_req_params *p, const moe_req_callbacks *cb, moe_error *e)
{
	*out = NULL;
	const moe_tokenizer *tok = eng->m->tok;
	uint32_t nv = eng->m->hp.n_vocab;
	if (!tok)
		return moe_err(e, MOE_EINVAL, "the model has no tokenizer");
	if (n == 0)
		return moe_err(e, MOE_EINVAL, "empty prompt (no tokens)");
	if (n > (size_t)eng->n_ctx)
		return moe_err(e, MOE_ERANGE, "context full: a prompt of %zu tokens does not fit in %d",
			       n, eng->n_ctx);
	for (size_t i = 0; i < n; i++)
		if (prompt[i] < 0 || (uint32_t)prompt[i] >= nv)
			return moe_err(e, MOE_EINVAL, "token id %d out of range (vocabulary %u)",
				       prompt[i], nv);
	MOE_TRY(moe_req_params_check(p, e));
	moe_req *r = calloc(1, sizeof *r);
	if (!r)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	r->eng = eng;
	r->p = *p;
	if (cb)
		r->cb = *cb;
	r->n_prompt = n;
	r->res.n_prompt = n;
	int rc = 0;
	r->prompt = malloc(n * sizeof *r->prompt);
	r->logits = malloc((size_t)nv * sizeof *r->logits);
	if (!r->prompt || !r->logits) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto fail;
	}
	memcpy(r->prompt, prompt, n * sizeof *prompt);
	for (size_t i = 0; i < p->n_stop; i++)
		if (!(r->p.stop[i] = r->stop_copy[i] = strdup(p->stop[i]))) {
			rc = moe_err(e, MOE_ENOMEM, "out of memory");
			goto fail;
		}
	if ((rc = moe_sampler_new(&r->sampler, &p->sampling, (int)nv, e)) < 0 ||
	    (rc = moe_detok_new(&r->detok, tok, 0, e)) < 0)
		goto fail;
	*out = r;
	return 0;
fail:
	moe_req_free(r);
	return rc;
}

void moe_req_free(moe_req *r)
{
	if (!r)
		return;
	if (r->sched)
		moe_sched_cancel(r->sched, r);
	moe_seq_free(r->seq);
	for (size_t i = 0; i < MOE_REQ_MAX_STOP; i++)
		free(r->stop_copy[i]);
	moe_sampler_free(r->sampler);
	moe_detok_free(r->detok);
	free(r->text);
	free(r->logits);
	free(r->prompt);
	free(r);
}

void moe_req_use_seq(moe_req *r, moe_seq *s)
{
	if (r->state == REQ_NEW && s && s->eng == r->eng)
		r->user_seq = s;
}

const moe_req_result *moe_req_get_result(const moe_req *r)
{
	return &r->res;
}

bool moe_req_done(const moe_req *r)
{
	return r->state == REQ_DONE;
}

static int text_add(moe_req *r, const char *s, size_t n, moe_error *e)
{
	if (r->text_len + n + 1 > r->text_cap) {
		size_t cap = (r->text_len + n + 1) * 2;
		char *b = realloc(r->text, cap);
		if (!b)
			return moe_err(e, MOE_ENOMEM, "out of memory");
		r->text = b;
		r->text_cap = cap;
	}
	memcpy(r->text + r->text_len, s, n);
	r->text_len += n;
	return 0;
}

/* Length of the longest suffix of the pending text that is a proper prefix
 * of a stop string: those bytes must wait. */
static size_t held_back(const moe_req *r)
{
	size_t hold = 0, n = r->text_len;
	for (size_t k = 0; k < r->p.n_stop; k++) {
		size_t sl = strlen(r->p.stop[k]);
		for (size_t m = sl > 1 ? sl - 1 : 0; m > hold; m--)
			if (m <= n && !memcmp(r->text + n - m, r->p.stop[k], m)) {
				hold = m;
				break;
			}
	}
	return hold;
}

/* Emit what is safe; 1 if a stop string was found (text before it
 * emitted), 0 otherwise, -1 if the callback asked to stop. */
static int flush_text(moe_req *r, bool final)
{
	size_t cut = r->text_len;
	int found = 0;
	for (size_t k = 0; k < r->p.n_stop; k++) {
		size_t sl = strlen(r->p.stop[k]);
		if (!sl || sl > r->text_len)
			continue;
		const char *hit = memmem(r->text, r->text_len, r->p.stop[k], sl);
		if (hit && (size_t)(hit - r->text) < cut) {
			cut = (size_t)(hit - r->text);
			found = 1;
		}
	}
	size_t out = found ? cut : final ? r->text_len : r->text_len - held_back(r);
	if (out && r->cb.text && r->cb.text(r->cb.user, r, r->text, out) < 0)
		return -1;
	memmove(r->text, r->text + out, r->text_len - out);
	r->text_len -= out;
	return found;
}

/* ------------------------------------------------------------- scheduler */

int moe_sched_new(moe_sched **out, moe_engine *eng, const moe_sched_params *p, moe_error *e)
{
	*out = NULL;
	if (p->n_parallel < 0 || p->n_batch < 0)
		return moe_err(e, MOE_EINVAL, "scheduler: negative n_parallel or n_batch");
	moe_sched *s = calloc(1, sizeof *s);
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s->eng = eng;
	s->n_parallel = p->n_parallel > 0 ? p->n_parallel : 1;
	s->n_batch = p->n_batch > 0 ? p->n_batch : eng->n_batch;
	/* every running request decodes one token per step */
	if (s->n_batch < s->n_parallel)
		s->n_batch = s->n_parallel;
	s->running = calloc((size_t)s->n_parallel, sizeof *s->running);
	s->toks = calloc((size_t)s->n_batch, sizeof *s->toks);
	if (!s->running || !s->toks) {
		moe_sched_free(s);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	*out = s;
	return 0;
}

void moe_sched_free(moe_sched *s)
{
	if (!s)
		return;
	while (s->n_running)
		moe_sched_cancel(s, s->running[0]);
	while (s->n_queue)
		moe_sched_cancel(s, s->queue[0]);
	free(s->queue);
	free(s->running);
	free(s->toks);
	free(s);
}

int moe_sched_submit(moe_sched *s, moe_req *r, moe_error *e)
{
	if (r->state != REQ_NEW)
		return moe_err(e, MOE_EINVAL, "request submitted twice");
	if (r->eng != s->eng)
		return moe_err(e, MOE_EINVAL, "request of another engine");
	if (s->n_queue == s->cap_queue) {
		int cap = s->cap_queue ? s->cap_queue * 2 : 16;
		moe_req **q = realloc(s->queue, (size_t)cap * sizeof *q);
		if (!q)
			return moe_err(e, MOE_ENOMEM, "out of memory");
		s->queue = q;
		s->cap_queue = cap;
	}
	s->queue[s->n_queue++] = r;
	r->sched = s;
	r->state = REQ_QUEUED;
	r->t_submit = moe_time_now();
	return 0;
}

/* The request is over: final text (unless a stop string cut it or it was
 * aborted), blocks back to the pool, off the lists, done callback. */
static void finish(moe_sched *s, moe_req *r, moe_finish f)
{
	if (r->state == REQ_DONE)
		return;
	if ((f == MOE_FINISH_STOP || f == MOE_FINISH_LENGTH) && !r->cut) {
		const char *t;
		size_t len;
		moe_detok_flush(r->detok, &t, &len);
		if (text_add(r, t, len, NULL) == 0) {
			int fl = flush_text(r, true);
			if (fl < 0)
				f = MOE_FINISH_ABORT;
		}
	}
	double now = moe_time_now();
	if (r->t_first > 0)
		r->res.t_gen = now - r->t_first;
	else if (r->t_admit > 0)
		r->res.t_prompt = now - r->t_admit;
	r->res.finish = f;
	if (r->seq != r->user_seq)
		moe_seq_free(r->seq);
	r->seq = NULL;
	for (int i = 0; i < s->n_running; i++)
		if (s->running[i] == r) {
			memmove(s->running + i, s->running + i + 1,
				(size_t)(s->n_running - i - 1) * sizeof *s->running);
			s->n_running--;
			break;
		}
	for (int i = 0; i < s->n_queue; i++)
		if (s->queue[i] == r) {
			memmove(s->queue + i, s->queue + i + 1, (size_t)(s->n_queue - i - 1) * sizeof *s->queue);
			s->n_queue--;
			break;
		}
	r->state = REQ_DONE;
	r->sched = NULL;
	if (r->cb.done)
		r->cb.done(r->cb.user, r);
}

static void finish_error(moe_sched *s, moe_req *r, const moe_error *err)
{
	r->res.error = *err;
	finish(s, r, MOE_FINISH_ERROR);
}

void moe_sched_cancel(moe_sched *s, moe_req *r)
{
	if (r->sched == s)
		finish(s, r, MOE_FINISH_ABORT);
}

/* Blocks the prefilling requests still need for their prompts (plus the
 * first generated token). */
static int blocks_reserved(const moe_sched *s)
{
	int n = 0;
	for (int i = 0; i < s->n_running; i++) {
		const moe_req *r = s->running[i];
		if (r->state == REQ_PREFILL) {
			const kv_pool *kv = &s->eng->kv;
			int pos = r->seq->n_pos;
			int need = moe_engine_blocks_for(s->eng, (int)r->n_prompt + 1) - r->seq->n_blocks;
			/* a shared block about to be written is copied first */
			if (pos % kv->block_tokens && kv->blocks[r->seq->blocks[pos / kv->block_tokens]].ref > 1)
				need++;
			n += need > 0 ? need : 0;
		}
	}
	return n;
}

/* Admit the oldest queued request if there is room; 1 if admitted. */
static int admit_one(moe_sched *s)
{
	moe_req *r = s->queue[0];
	moe_error err = {0};
	moe_engine *eng = s->eng;
	int total = moe_engine_blocks_for(eng, (int)r->n_prompt + 1);
	if (total > eng->kv.n_blocks) {
		moe_err(&err, MOE_ERANGE, "prompt of %zu tokens needs %d KV blocks of %d tokens, the "
					  "pool has %d (raise -c/--kv-size)", r->n_prompt, total,
			eng->kv.block_tokens, eng->kv.n_blocks);
		finish_error(s, r, &err);
		return 1;
	}
	if (r->user_seq) {
		/* continue the caller's sequence after what it shares with the prompt */
		moe_seq *q = r->seq = r->user_seq;
		size_t keep = 0;
		while (keep < r->n_prompt && keep < (size_t)q->n_pos && q->tokens[keep] == r->prompt[keep])
			keep++;
		if (keep == r->n_prompt)
			keep--; /* evaluate the last token again for fresh logits */
		moe_seq_truncate(q, (int)keep);
		keep = (size_t)moe_seq_pos(q); /* 0 if a sliding window was given back */
		r->n_fed = keep ? keep : (size_t)moe_seq_share_prefix(q, r->prompt, r->n_prompt);
	} else if (moe_seq_new(&r->seq, eng, &err) < 0) {
		finish_error(s, r, &err);
		return 1;
	} else {
		r->n_fed = (size_t)moe_seq_share_prefix(r->seq, r->prompt, r->n_prompt);
	}
	int need = total - r->seq->n_blocks;
	/* a shared last block written again is copied: one more */
	if (r->n_fed % (size_t)eng->kv.block_tokens)
		need++;
	if (need > moe_engine_blocks_available(eng) - blocks_reserved(s)) {
		if (r->seq != r->user_seq)
			moe_seq_free(r->seq);
		r->seq = NULL;
		if (s->n_running == 0) {
			moe_err(&err, MOE_ERANGE, "KV pool full: %d blocks free, the prompt needs %d",
				moe_engine_blocks_available(eng), need);
			finish_error(s, r, &err);
			return 1;
		}
		return 0; /* wait for a running request to end */
	}
	memmove(s->queue, s->queue + 1, (size_t)(s->n_queue - 1) * sizeof *s->queue);
	s->n_queue--;
	s->running[s->n_running++] = r;
	r->state = REQ_PREFILL;
	r->t_admit = moe_time_now();
	r->res.t_queue = r->t_admit - r->t_submit;
	r->res.n_prompt_eval = r->n_prompt - r->n_fed;
	moe_sampler_reset(r->sampler);
	for (size_t i = 0; i < r->n_prompt; i++)
		moe_sampler_accept(r->sampler, r->prompt[i]);
	return 1;
}

/* Sample from fresh logits and emit; finishes the request when it ends. */
static void after_logits(moe_sched *s, moe_req *r)
{
	const moe_tokenizer *tok = s->eng->m->tok;
	uint32_t nv = s->eng->m->hp.n_vocab, nt = moe_tokenizer_n_tokens(tok);
	if (r->state == REQ_PREFILL) {
		r->state = REQ_DECODE;
		r->t_first = moe_time_now();
		r->res.t_prompt = r->t_first - r->t_admit;
	}
	if (r->p.n_predict >= 0 && r->res.n_gen >= (size_t)r->p.n_predict) {
		finish(s, r, MOE_FINISH_LENGTH);
		return;
	}
	/* a broken model (or file) must not pass for text: stop with an error */
	for (uint32_t i = 0; i < nt; i++)
		if (!isfinite(r->logits[i])) {
			moe_error err;
			moe_err(&err, MOE_EFORMAT, "the model computed a %s logit (token %u at position "
				"%d): its weights are broken", isnan(r->logits[i]) ? "NaN" : "infinite", i,
				moe_seq_pos(r->seq) - 1);
			finish_error(s, r, &err);
			return;
		}
	/* rows past the tokenizer's tokens (padding) can never be printed */
	for (uint32_t i = nt; i < nv; i++)
		r->logits[i] = -INFINITY;
	int32_t id = moe_sampler_sample(r->sampler, r->logits);
	moe_sampler_accept(r->sampler, id);
	r->res.n_gen++;
	if (r->cb.token && r->cb.token(r->cb.user, r, id, r->logits) < 0) {
		finish(s, r, MOE_FINISH_ABORT);
		return;
	}
	if (!r->p.ignore_eos && moe_tokenizer_is_eog(tok, id)) {
		finish(s, r, MOE_FINISH_STOP);
		return;
	}
	const char *text;
	size_t len;
	moe_error err = {0};
	if (moe_detok_push(r->detok, id, &text, &len, &err) < 0 ||
	    text_add(r, text, len, &err) < 0) {
		finish_error(s, r, &err);
		return;
	}
	int f = flush_text(r, false);
	if (f != 0) {
		r->cut = f > 0; /* the stop string and what follows are dropped */
		finish(s, r, f > 0 ? MOE_FINISH_STOP : MOE_FINISH_ABORT);
		return;
	}
	if (r->p.n_predict >= 0 && r->res.n_gen >= (size_t)r->p.n_predict) {
		finish(s, r, MOE_FINISH_LENGTH);
		return;
	}
	if (moe_seq_pos(r->seq) >= s->eng->n_ctx) {
		finish(s, r, MOE_FINISH_LENGTH); /* a full context */
		return;
	}
	r->next = id;
}

int moe_sched_step(moe_sched *s, moe_error *e)
{
	moe_engine *eng = s->eng;
	while (s->n_queue && s->n_running < s->n_parallel)
		if (!admit_one(s))
			break;
	int n = 0, bt = eng->kv.block_tokens, new_blocks = 0;
	/* one token for every decoding request */
	for (int i = 0; i < s->n_running; i++) {
		moe_req *r = s->running[i];
		if (r->state != REQ_DECODE)
			continue;
		int pos = moe_seq_pos(r->seq);
		if (pos % bt == 0) {
			if (moe_engine_blocks_available(eng) - blocks_reserved(s) < new_blocks + 1) {
				finish(s, r, MOE_FINISH_LENGTH); /* the KV pool is full */
				i--;
				continue;
			}
			new_blocks++;
		}
		s->toks[n++] = (moe_step_token){r->seq, r->next, pos, r->logits};
	}
	/* prompt chunks in what is left, oldest request first */
	for (int i = 0; i < s->n_running && n < s->n_batch; i++) {
		moe_req *r = s->running[i];
		if (r->state != REQ_PREFILL)
			continue;
		int pos = moe_seq_pos(r->seq);
		while (n < s->n_batch && r->n_fed < r->n_prompt) {
			bool last = r->n_fed + 1 == r->n_prompt;
			s->toks[n++] = (moe_step_token){r->seq, r->prompt[r->n_fed], pos++,
							last ? r->logits : NULL};
			r->n_fed++;
		}
	}
	if (n) {
		int rc = moe_engine_step(eng, s->toks, n, e);
		if (rc < 0) {
			while (s->n_running)
				finish_error(s, s->running[0], e);
			return rc;
		}
	}
	/* requests whose logits are fresh sample (in admission order) */
	for (int i = 0; i < n; i++)
		if (s->toks[i].logits) {
			moe_req *r = NULL;
			for (int j = 0; j < s->n_running && !r; j++)
				if (s->running[j]->seq == s->toks[i].seq)
					r = s->running[j];
			if (r)
				after_logits(s, r);
		}
	return s->n_queue + s->n_running;
}

int moe_sched_run(moe_sched *s, moe_error *e)
{
	int rc;
	while ((rc = moe_sched_step(s, e)) > 0)
		;
	return rc;
}
