/* sampler.h — choose the next token from logits.
 *
 * How to use: moe_sampler_new(&s, &params, n_vocab), then per step
 * id = moe_sampler_sample(s, logits) and moe_sampler_accept(s, id) for every
 * token that enters the context (prompt tokens too, for the penalties).
 * Order, as llama.cpp's default chain: repetition/presence/frequency
 * penalties over the last repeat_last_n tokens, top-k, top-p, min-p,
 * temperature, then a seeded draw.  temp <= 0 is greedy (argmax after the
 * penalties).
 */
#ifndef MOE_SAMPLER_H
#define MOE_SAMPLER_H

#include "core.h"

typedef struct moe_sampler_params {
	float temp;            /* 0: greedy */
	int top_k;             /* <= 0: off */
	float top_p;           /* >= 1: off */
	float min_p;           /* <= 0: off */
	float repeat_penalty;  /* 1: off */
	float presence_penalty, frequency_penalty; /* 0: off */
	int repeat_last_n;     /* tokens the penalties look at (0: off, -1: all the context) */
	uint64_t seed;
} moe_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
 * penalties off, last 64 tokens. */
moe_sampler_params moe_sampler_defaults(void);

typedef struct moe_sampler moe_sampler;
int moe_sampler_new(moe_sampler **out, const moe_sampler_params *p, int n_vocab, moe_error *e);
void moe_sampler_free(moe_sampler *s);
/* Choose a token; logits are not modified. */
int32_t moe_sampler_sample(moe_sampler *s, const float *logits);
void moe_sampler_accept(moe_sampler *s, int32_t id);
void moe_sampler_reset(moe_sampler *s);

#endif
