/* model.h — a model loaded from a UTH file, and the inference context that
 * runs it: forward pass over a batch of tokens, KV cache.
 *
 * How to use:
 *   moe_model *m;  moe_model_load(&m, "model.uth", &e);
 *   moe_ctx *c;    moe_ctx_new(&c, m, &(moe_ctx_params){.n_ctx = 4096}, &e);
 *   moe_ctx_eval(c, ids, n, logits, &e);   // prompt (batched) or one token
 * The model's weights stay in the mmap'ed file (never copied); the context
 * owns the KV cache, activation buffers and the thread pool.  Several
 * contexts may share one model.
 */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include "arch.h"
#include "core.h"
#include "kernels.h"
#include "text.h"
#include "uth.h"

/* A weight matrix (rows x cols, row-major, `dtype` blocks along a row) or a
 * vector (rows = 1) in the mapped file. */
typedef struct moe_weight {
	const void *data;
	int dtype;
	int64_t rows, cols;
	size_t row_bytes;
} moe_weight;

typedef struct moe_layer {
	const float *attn_norm;        /* [n_embd] */
	moe_weight wq, wk, wv, wo;     /* [n_head*hd x n_embd] ... [n_embd x n_head*hd] */
	const float *bq, *bk, *bv;     /* biases or NULL */
	const float *q_norm, *k_norm;  /* [hd] (per head) or [n_head*hd] (full), or NULL */
	const float *ffn_norm;         /* [n_embd] */
	/* dense FFN (n_expert == 0 or a leading dense layer) */
	moe_weight ffn_gate, ffn_up, ffn_down;
	/* experts */
	moe_weight router;             /* [n_expert x n_embd] */
	moe_weight *exp_gate, *exp_up, *exp_down; /* [n_expert] each */
	/* shared expert */
	moe_weight sh_gate, sh_up, sh_down;
	moe_weight sh_router;          /* [1 x n_embd] sigmoid gate, or data NULL */
	bool is_moe;
} moe_layer;

typedef struct moe_model {
	moe_uth *file;
	moe_hparams hp;
	moe_tokenizer *tok;            /* NULL if the file has no vocabulary */
	json_t *meta;                  /* parsed metadata */
	moe_weight tok_embd;           /* [n_vocab x n_embd] */
	const float *out_norm;         /* [n_embd] */
	moe_weight output;             /* [n_vocab x n_embd] (token embedding when tied) */
	moe_layer *layers;             /* [n_layer] */
	void **owned;                  /* vectors converted to F32 at load */
	size_t n_owned;
} moe_model;

/* Open, validate and bind a model. MOE_EUNSUPPORTED for architectures the
 * engine cannot run yet (it names them), MOE_EFORMAT for missing or
 * mis-shaped tensors (named). */
int moe_model_load(moe_model **out, const char *path, moe_error *e);
void moe_model_free(moe_model *m);

typedef struct moe_ctx_params {
	int n_ctx;      /* KV cache length (0: min(train context, 4096)) */
	int n_threads;  /* 0: moe_default_threads() */
	int n_batch;    /* tokens per forward batch (0: 256) */
	int kv_type;    /* MOE_F16 (also when 0) or MOE_Q8_0 */
} moe_ctx_params;

typedef struct moe_ctx moe_ctx;

int moe_ctx_new(moe_ctx **out, const moe_model *m, const moe_ctx_params *p, moe_error *e);
void moe_ctx_free(moe_ctx *c);
/* Run n tokens at the current position (prefill in batches of n_batch) and
 * advance it.  logits: NULL, or n_vocab floats for the last token, or, with
 * all_logits, n * n_vocab floats (one row per token).  MOE_ERANGE when the
 * context is full. */
int moe_ctx_eval(moe_ctx *c, const int32_t *ids, size_t n, float *logits, bool all_logits,
		 moe_error *e);
/* Tokens in the cache; forget everything after `pos` (chat rewinds). */
int moe_ctx_pos(const moe_ctx *c);
void moe_ctx_truncate(moe_ctx *c, int pos);
int moe_ctx_n_ctx(const moe_ctx *c);
/* Logits per token: the model's vocabulary (rows of the embedding), which
 * may exceed the tokenizer's (padding rows). */
uint32_t moe_ctx_n_vocab(const moe_ctx *c);
/* Bytes of weights one decode step reads (for bandwidth figures). */
uint64_t moe_model_active_bytes(const moe_model *m);

/* Routing statistics: if set, called for every token and MoE layer with
 * the chosen experts (for moe-bench --expert-stats).  Calls come from the
 * thread that called moe_ctx_eval, layer by layer, and within a layer in
 * token order for all of the batch's tokens; consecutive layers' choices of
 * one token can therefore be paired by order. */
typedef void (*moe_route_fn)(void *user, int layer, const int32_t *experts, const float *weights,
			     int k);
void moe_ctx_set_route_callback(moe_ctx *c, moe_route_fn fn, void *user);

#endif
