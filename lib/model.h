/* model.h — a model loaded from a UTH file: hyper-parameters, tokenizer and
 * weights bound in place, plus the expert store the forward pass asks for a
 * layer's experts.
 *
 * How to use:
 *   moe_model *m;  moe_model_load(&m, "model.uth", &e);
 *   ... run it with an engine (engine.h) ...
 *   moe_model_free(m);
 * The weights stay in the mmap'ed file (never copied) and are read-only, so
 * any number of engines and threads may share one model.
 */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include "arch.h"
#include "core.h"
#include "kernels.h"
#include "text.h"
#include "uth.h"

typedef struct moe_expert_store moe_expert_store;

/* A weight matrix (rows x cols, row-major, `dtype` blocks along a row) or a
 * vector (rows = 1) in the mapped file. */
typedef struct moe_weight {
	const char *name;  /* the tensor's name in the file ("blk.3.ffn_up.5.weight") */
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
	/* issue 14 (phimoe): LayerNorm biases [n_embd] and the attention
	 * output's bias [n_embd], or NULL */
	const float *attn_norm_b, *ffn_norm_b, *bo;
	/* issue 14 (gpt-oss): sink logits [n_head], router bias [n_expert],
	 * expert biases [n_expert] of [n_ff_exp] / [n_embd], or NULL */
	const float *sinks, *router_b;
	const float **exp_gate_b, **exp_up_b, **exp_down_b;
	/* issue 14 (deepseek2, multi-head latent attention; wq/wk/wv unused):
	 * queries direct (wq) or low-rank: wq_a [q_lora x n_embd], its norm
	 * q_a_norm [q_lora], wq_b [n_head*hd x q_lora]; wkv_a [kv_lora + rope x
	 * n_embd] (latent ++ the shared rope key), kv_a_norm [kv_lora]; per head
	 * h, rows h*kv_lora.. of wk_b [n_head*kv_lora x nope] and rows h*hdv..
	 * of wv_b [n_head*hdv x kv_lora]; the expert score-correction bias
	 * [n_expert] (V3), or NULL */
	moe_weight wq_a, wq_b, wkv_a, wk_b, wv_b;
	const float *q_a_norm, *kv_a_norm, *exp_probs_b;
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
	/* issue 14 (phimoe): output norm bias [n_embd], output bias [n_vocab],
	 * LongRoPE divisors [n_rot/2] (short, long), or NULL */
	const float *out_norm_b, *out_bias, *rope_short, *rope_long;
	void **owned;                  /* vectors converted to F32 at load */
	size_t n_owned;
	moe_expert_store *resident;    /* see moe_model_resident_experts */
} moe_model;

/* Open, validate and bind a model. MOE_EUNSUPPORTED for architectures the
 * engine cannot run yet (it names them), MOE_EFORMAT for missing or
 * mis-shaped tensors (named). */
int moe_model_load(moe_model **out, const char *path, moe_error *e);
void moe_model_free(moe_model *m);

/* Bytes of weights one decode step reads (for bandwidth figures). */
uint64_t moe_model_active_bytes(const moe_model *m);

/* ------------------------------------------------------------ expert store
 *
 * The seam between the forward pass and where expert weights live.  Right
 * after routing a layer, the engine asks the store for every expert the
 * step's tokens chose (acquire), runs them, and gives them back (release).
 * The resident store returns the weights in the mapped file; a streaming
 * store may start all missing reads in acquire and block only on the ones
 * not yet in memory.  acquire fills out[i] for ids[i] (n distinct experts of
 * `layer`, in increasing id order); the pointers stay valid until release. */
typedef struct moe_expert {
	const moe_weight *gate, *up, *down;   /* [n_ff_exp x n_embd], .., [n_embd x n_ff_exp] */
} moe_expert;

struct moe_expert_store {
	int (*acquire)(moe_expert_store *s, int layer, const int32_t *ids, int n, moe_expert *out,
		       moe_error *e);
	void (*release)(moe_expert_store *s, int layer, const int32_t *ids, int n);
	void *impl;
	/* Optional (NULL for the resident store): a hint that `layer` will
	 * probably ask for ids[0..n) soon (router lookahead); a streaming store
	 * starts the missing reads and returns at once.  Never fails. */
	void (*prefetch)(moe_expert_store *s, int layer, const int32_t *ids, int n);
	/* How many layers ahead the store wants prefetch hints for (0: 1):
	 * after routing layer L the engine hints L+1 .. L+lookahead, nearest
	 * first, each predicted from layer L's state. */
	int lookahead;
	/* Optional (NULL: the engine calls acquire): acquire in two halves so
	 * that the engine computes experts in the order they arrive.
	 * acquire_start takes every expert of ids[0..n) as acquire does (none
	 * is evicted before release) and starts the reads of the missing ones,
	 * all at once, without waiting.  out[0..n) must come zeroed: it fills
	 * out[i] for each expert already in memory, writes those i to ready[]
	 * and returns how many.  acquire_wait blocks until at least one expert
	 * whose out[i].gate is still NULL is in memory, fills it (and any other
	 * that arrived meanwhile), writes the i to ready[] and returns how many
	 * (0 once none is missing).  On error (< 0, e filled) either half has
	 * given back every expert of ids: no release. */
	int (*acquire_start)(moe_expert_store *s, int layer, const int32_t *ids, int n,
			     moe_expert *out, int *ready, moe_error *e);
	int (*acquire_wait)(moe_expert_store *s, int layer, const int32_t *ids, int n,
			    moe_expert *out, int *ready, moe_error *e);
};

/* The store that serves the model's own mapped weights (never fails).  It
 * lives as long as the model. */
moe_expert_store *moe_model_resident_experts(const moe_model *m);
/* (load.c) Make m->resident; MOE_ENOMEM. */
int moe_model_resident_new(moe_model *m, moe_error *e);

#endif
