/* generate.h — text generation on a context: prompt in, streamed text out.
 *
 * How to use:
 *   int32_t *ids; size_t n;   moe_tokenizer_encode(tok, prompt, ...);
 *   moe_generate(ctx, tok, sampler, ids, n, &params, emit, user, &res, &e);
 * emit() receives the generated text as it is produced (never half a UTF-8
 * character, never text past a stop string).  The prompt is evaluated after
 * the longest prefix it shares with what the context already holds (a chat
 * turn or a batch of prompts with a common system prompt is not recomputed).
 */
#ifndef MOE_GENERATE_H
#define MOE_GENERATE_H

#include "model.h"
#include "sampler.h"
#include "text.h"

typedef struct moe_gen_params {
	int n_predict;             /* tokens to generate; < 0: until EOS or a full context */
	const char *const *stop;   /* stop strings (not emitted) */
	size_t n_stop;
	bool ignore_eos;           /* keep going past end-of-generation tokens */
} moe_gen_params;

typedef enum { MOE_FINISH_STOP, MOE_FINISH_LENGTH, MOE_FINISH_ABORT } moe_finish;

typedef struct moe_gen_result {
	size_t n_prompt;      /* prompt tokens */
	size_t n_prompt_eval; /* of which evaluated (the rest reused from the cache) */
	size_t n_gen;         /* generated tokens (the stop token included) */
	moe_finish finish;
	double t_prompt, t_gen; /* seconds */
} moe_gen_result;

/* "stop", "length" or "abort" — the OpenAI finish_reason words. */
const char *moe_finish_name(moe_finish f);

/* Return < 0 to stop generation (finish = abort). */
typedef int (*moe_gen_emit_fn)(void *user, const char *text, size_t len);

/* s must have been made for moe_ctx_n_vocab(ctx) tokens. */
int moe_generate(moe_ctx *ctx, const moe_tokenizer *tok, moe_sampler *s, const int32_t *prompt,
		 size_t n_prompt, const moe_gen_params *p, moe_gen_emit_fn emit, void *user,
		 moe_gen_result *res, moe_error *e);

/* Evaluate `ids` after the longest prefix they share with the tokens in the
 * context (at least the last token is evaluated, so logits are fresh).
 * *n_eval tells how many were evaluated. */
int moe_ctx_eval_reuse(moe_ctx *c, const int32_t *ids, size_t n, float *logits, size_t *n_eval,
		       moe_error *e);

#endif
