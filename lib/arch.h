/* arch.h — supported architectures and their hyper-parameters in one
 * vocabulary, whatever the source (GGUF keys or a Hugging Face config.json).
 *
 * How to use: moe_hparams_from_gguf / moe_hparams_from_hf fill a moe_hparams;
 * moe_hparams_to_json writes the "hparams" object of UTH metadata and
 * moe_hparams_from_json reads it back (the engine only ever sees this form).
 * moe_arch_map_hf_name translates a Hugging Face tensor name into the
 * canonical (GGUF-style, per-expert) name, role, layer and expert.
 */
#ifndef MOE_ARCH_H
#define MOE_ARCH_H

#include "core.h"
#include "gguf.h"

#include <jansson.h>

/* How RoPE pairs dimensions: NORM rotates adjacent pairs (x0,x1),(x2,x3)...
 * (Llama as in GGUF); NEOX rotates (x_i, x_{i+d/2}) (GPT-NeoX, Qwen, OLMoE). */
typedef enum { MOE_ROPE_NORM = 0, MOE_ROPE_NEOX = 1 } moe_rope_kind;
typedef enum { MOE_ROPE_SCALING_NONE = 0, MOE_ROPE_SCALING_LINEAR, MOE_ROPE_SCALING_YARN,
	       MOE_ROPE_SCALING_LLAMA3 } moe_rope_scaling;
typedef enum { MOE_NORM_RMS = 0, MOE_NORM_LAYER = 1 } moe_norm_kind;
/* q/k normalisation: none, RMSNorm per head (Qwen3), or over the whole
 * projection (OLMoE). */
typedef enum { MOE_QK_NORM_NONE = 0, MOE_QK_NORM_HEAD, MOE_QK_NORM_FULL } moe_qk_norm;
typedef enum { MOE_GATING_SOFTMAX = 0, MOE_GATING_SIGMOID = 1 } moe_gating;

typedef struct moe_arch_info {
	const char *name;          /* canonical: "llama", "qwen2moe", ... */
	const char *gguf_name;     /* general.architecture */
	const char *const *hf_names; /* config.json "architectures" values, NULL-ended */
	moe_rope_kind rope;
	moe_qk_norm qk_norm;
	moe_norm_kind norm;
	bool topk_renorm;          /* default when the source does not say */
	bool permute_hf_qk;        /* HF q/k rows are half-split: permute to NORM order */
} moe_arch_info;

/* The table entry for a canonical, GGUF or HF name, or NULL. */
const moe_arch_info *moe_arch_by_name(const char *name);
const moe_arch_info *moe_arch_by_gguf(const char *gguf_arch);
const moe_arch_info *moe_arch_by_hf(const char *hf_arch);
/* Comma-separated list of supported names, for error messages. */
const char *moe_arch_supported_list(void);

typedef struct moe_hparams {
	char arch[32];
	uint32_t n_vocab, n_ctx_train, n_embd, n_layer;
	uint32_t n_head, n_head_kv, head_dim, head_dim_v;
	uint32_t n_ff;                 /* dense FFN width (0 if none) */
	uint32_t n_expert, n_expert_used, n_ff_exp;
	uint32_t n_expert_shared, n_ff_shexp; /* shared experts (count, total width) */
	uint32_t n_layer_dense_lead;   /* leading dense layers before MoE layers */
	uint32_t n_rot;                /* rotated dims per head */
	moe_rope_kind rope_kind;
	double rope_base;
	moe_rope_scaling rope_scaling;
	double rope_factor;
	uint32_t rope_orig_ctx;
	double norm_eps;
	moe_norm_kind norm_kind;
	moe_qk_norm qk_norm;
	bool topk_renorm;              /* renormalise the top-k expert weights */
	moe_gating gating;
	double expert_weights_scale;   /* 1 unless the model says otherwise */
	bool shared_expert_gate;       /* sigmoid gate on the shared expert */
	bool tied_embeddings;
	bool qkv_bias;
	/* Granite's multipliers (1 when absent). */
	double embedding_scale, residual_scale, attention_scale, logit_scale;
	/* DeepSeek-V2 multi-head latent attention (0 when absent). */
	uint32_t q_lora_rank, kv_lora_rank, rope_head_dim;
} moe_hparams;

/* From GGUF keys ({arch}.embedding_length, ...). Tensor shapes are used
 * where keys are optional (vocabulary size, FFN widths, tied output).
 * MOE_EUNSUPPORTED names the supported architectures; MOE_EFORMAT a
 * missing or bad key. */
int moe_hparams_from_gguf(moe_hparams *hp, const moe_gguf *g, moe_error *e);
/* From a config.json text. `has_lm_head` says whether lm_head.weight exists. */
int moe_hparams_from_hf(moe_hparams *hp, const char *config_json, bool has_lm_head,
			moe_error *e);
/* Check internal consistency (heads divide, experts used <= experts...). */
int moe_hparams_check(const moe_hparams *hp, moe_error *e);
json_t *moe_hparams_to_json(const moe_hparams *hp);
int moe_hparams_from_json(moe_hparams *hp, const json_t *obj, moe_error *e);

/* A canonical tensor name and where it belongs. */
typedef struct moe_tensor_place {
	char name[96];   /* "blk.3.ffn_up.5.weight" */
	int role;        /* MOE_UTH_ROLE_* */
	int layer;       /* -1 if none */
	int expert;      /* -1 if none */
} moe_tensor_place;

/* Canonical name -> place (role from the base name; per-expert names
 * "blk.L.ffn_gate.E.weight"). MOE_ENOTFOUND if the name is not known. */
int moe_arch_place_canonical(const char *name, moe_tensor_place *p, moe_error *e);
/* Hugging Face name -> canonical place. Stacked expert tensors (GraniteMoE)
 * are reported with expert = -1 and handled by the converter. */
int moe_arch_map_hf_name(const moe_arch_info *a, const char *hf_name, moe_tensor_place *p,
			 moe_error *e);

#endif
