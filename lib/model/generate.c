/* generate.c — the generation loop: evaluate the prompt (reusing the cached
 * prefix), then sample, detokenise and emit until EOS/EOT, a stop string,
 * n_predict tokens or a full context.
 *
 * Stop strings: text that could still become a stop string is held back
 * until it either completes one (then it is dropped and generation stops)
 * or can no longer match (then it is emitted).  So a caller never sees text
 * that a stop string later cuts. */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *moe_finish_name(moe_finish f)
{
	switch (f) {
	case MOE_FINISH_STOP: return "stop";
	case MOE_FINISH_LENGTH: return "length";
	case MOE_FINISH_ABORT: return "abort";
	}
	return "?";
}

/* Text not yet emitted: pending[0..len). */
typedef struct {
	char *buf;
	size_t len, cap;
} pending;

static int pending_add(pending *p, const char *s, size_t n, moe_error *e)
{
	if (p->len + n + 1 > p->cap) {
		size_t cap = (p->len + n + 1) * 2;
		char *b = realloc(p->buf, cap);
		if (!b)
			return moe_err(e, MOE_ENOMEM, "out of memory");
		p->buf = b;
		p->cap = cap;
	}
	memcpy(p->buf + p->len, s, n);
	p->len += n;
	return 0;
}

/* Length of the longest suffix of text that is a proper prefix of a stop
 * string: those bytes must wait. */
static size_t held_back(const char *t, size_t n, const moe_gen_params *p)
{
	size_t hold = 0;
	for (size_t k = 0; k < p->n_stop; k++) {
		size_t sl = strlen(p->stop[k]);
		for (size_t m = sl > 1 ? sl - 1 : 0; m > hold; m--)
			if (m <= n && !memcmp(t + n - m, p->stop[k], m)) {
				hold = m;
				break;
			}
	}
	return hold;
}

/* Emit what is safe; returns 1 if a stop string was found (text before it
 * emitted), 0 otherwise, < 0 if emit asked to stop. */
static int flush_pending(pending *pd, const moe_gen_params *p, bool final, moe_gen_emit_fn emit,
			 void *user)
{
	size_t cut = pd->len;
	int found = 0;
	for (size_t k = 0; k < p->n_stop; k++) {
		size_t sl = strlen(p->stop[k]);
		if (!sl || sl > pd->len)
			continue;
		const char *hit = memmem(pd->buf, pd->len, p->stop[k], sl);
		if (hit && (size_t)(hit - pd->buf) < cut) {
			cut = (size_t)(hit - pd->buf);
			found = 1;
		}
	}
	size_t out = found ? cut : final ? pd->len : pd->len - held_back(pd->buf, pd->len, p);
	if (out && emit(user, pd->buf, out) < 0)
		return -1;
	memmove(pd->buf, pd->buf + out, pd->len - out);
	pd->len -= out;
	return found;
}

int moe_generate(moe_ctx *ctx, const moe_tokenizer *tok, moe_sampler *s, const int32_t *prompt,
		 size_t n_prompt, const moe_gen_params *p, moe_gen_emit_fn emit, void *user,
		 moe_gen_result *res, moe_error *e)
{
	memset(res, 0, sizeof *res);
	res->n_prompt = n_prompt;
	if (n_prompt == 0)
		return moe_err(e, MOE_EINVAL, "empty prompt (no tokens)");
	/* The engine writes one logit per embedding row; rows past the
	 * tokenizer's tokens (padding) can never be printed, so they are never
	 * chosen. */
	uint32_t nv = moe_ctx_n_vocab(ctx), nt = moe_tokenizer_n_tokens(tok);
	float *logits = malloc((size_t)nv * sizeof *logits);
	moe_detok *dt = NULL;
	pending pd = {0};
	int rc = logits ? moe_detok_new(&dt, tok, 0, e) : moe_err(e, MOE_ENOMEM, "out of memory");
	if (rc < 0)
		goto done;
	double t0 = moe_time_now();
	moe_sampler_reset(s);
	for (size_t i = 0; i < n_prompt; i++)
		moe_sampler_accept(s, prompt[i]);
	rc = moe_ctx_eval_reuse(ctx, prompt, n_prompt, logits, &res->n_prompt_eval, e);
	if (rc < 0)
		goto done;
	double t1 = moe_time_now();
	res->t_prompt = t1 - t0;
	res->finish = MOE_FINISH_LENGTH;
	bool cut = false; /* a stop string ended the text */
	for (;;) {
		if (p->n_predict >= 0 && res->n_gen >= (size_t)p->n_predict)
			break;
		for (uint32_t i = nt; i < nv; i++)
			logits[i] = -INFINITY;
		int32_t id = moe_sampler_sample(s, logits);
		moe_sampler_accept(s, id);
		res->n_gen++;
		if (!p->ignore_eos && moe_tokenizer_is_eog(tok, id)) {
			res->finish = MOE_FINISH_STOP;
			break;
		}
		const char *text;
		size_t len;
		if ((rc = moe_detok_push(dt, id, &text, &len, e)) < 0)
			goto done;
		if ((rc = pending_add(&pd, text, len, e)) < 0)
			goto done;
		int f = flush_pending(&pd, p, false, emit, user);
		if (f != 0) {
			res->finish = f > 0 ? MOE_FINISH_STOP : MOE_FINISH_ABORT;
			cut = f > 0;
			break;
		}
		if (moe_ctx_pos(ctx) >= moe_ctx_n_ctx(ctx))
			break; /* full: finish "length" */
		if ((rc = moe_ctx_eval(ctx, &id, 1, logits, false, e)) < 0)
			goto done;
	}
	if (!cut && res->finish != MOE_FINISH_ABORT) {
		const char *text;
		size_t len;
		moe_detok_flush(dt, &text, &len);
		if ((rc = pending_add(&pd, text, len, e)) < 0)
			goto done;
		int f = flush_pending(&pd, p, true, emit, user);
		if (f > 0)
			res->finish = MOE_FINISH_STOP;
		else if (f < 0)
			res->finish = MOE_FINISH_ABORT;
	}
	res->t_gen = moe_time_now() - t1;
	rc = 0;
done:
	free(pd.buf);
	moe_detok_free(dt);
	free(logits);
	return rc;
}
