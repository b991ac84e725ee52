/* arch.h — supported architectures and their hyper-parameters in one
 * vocabulary, whatever the source (GGUF keys or a Hugging Face config.json),
 * and the ONE validation of those hyper-parameters that the converter and
 * the loader share (lib/arch/check.c).
 *
 * How to use: moe_hparams_from_gguf / moe_hparams_from_hf fill a moe_hparams;
 * moe_hparams_to_json writes the "hparams" object of UTH metadata and
 * moe_hparams_from_json reads it back (the engine only ever sees this form).
 * Before anything uses them, moe_hparams_check checks every field (range,
 * finiteness, internal consistency) and moe_hparams_check_tensors checks
 * them against the tensors a file actually holds; a converter that passes
 * both writes nothing the loader refuses (except architectures or features
 * the engine does not run yet: moe_hparams_check_runnable).
 * moe_arch_map_hf_name translates a Hugging Face tensor name into the
 * canonical (GGUF-style, per-expert) name, role, layer and expert.
 */
#ifndef MOE_ARCH_H
#define MOE_ARCH_H

#include "core.h"
#include "uth.h"

#include <jansson.h>

/* How RoPE pairs dimensions: NORM rotates adjacent pairs (x0,x1),(x2,x3)...
 * (Llama as in GGUF); NEOX rotates (x_i, x_{i+d/2}) (GPT-NeoX, Qwen, OLMoE). */
typedef enum { MOE_ROPE_NORM = 0, MOE_ROPE_NEOX = 1 } moe_rope_kind;
/* LONGROPE (Phi-3.5): per-pair divisors of the rotary frequencies, one set
 * while the sequence fits the original context, another beyond (tensors
 * rope_factors_short / rope_factors_long). */
typedef enum { MOE_ROPE_SCALING_NONE = 0, MOE_ROPE_SCALING_LINEAR, MOE_ROPE_SCALING_YARN,
	       MOE_ROPE_SCALING_LLAMA3, MOE_ROPE_SCALING_LONGROPE } moe_rope_scaling;
typedef enum { MOE_NORM_RMS = 0, MOE_NORM_LAYER = 1 } moe_norm_kind;
/* q/k normalisation: none, RMSNorm per head (Qwen3), or over the whole
 * projection (OLMoE). */
typedef enum { MOE_QK_NORM_NONE = 0, MOE_QK_NORM_HEAD, MOE_QK_NORM_FULL } moe_qk_norm;
typedef enum { MOE_GATING_SOFTMAX = 0, MOE_GATING_SIGMOID = 1 } moe_gating;
/* Attention: ordinary multi-head (grouped) attention, or DeepSeek's
 * multi-head latent attention (q/kv low-rank paths, rope and no-rope parts). */
typedef enum { MOE_ATTN_MHA = 0, MOE_ATTN_MLA = 1 } moe_attention;
/* Group-limited routing (DeepSeek): how a group of experts is ranked — by
 * its best score (V2 group_limited_greedy) or the sum of its best two (V3
 * noaux_tc). */
typedef enum { MOE_GROUP_SCORE_MAX = 0, MOE_GROUP_SCORE_TOP2SUM = 1 } moe_group_score;
/* The router: top-k of the gating scores, or Phi-3.5-MoE's sparsemixer
 * (two experts, each weighted by a softmax over the experts near it). */
typedef enum { MOE_ROUTER_TOPK = 0, MOE_ROUTER_SPARSEMIXER = 1 } moe_router;
/* The FFN activation: SwiGLU (silu(g) u), or gpt-oss's clamped variant
 * ((clamp(u) + 1) min(g, limit) sigmoid(alpha min(g, limit))). */
typedef enum { MOE_ACT_SILU = 0, MOE_ACT_SWIGLU_OAI = 1 } moe_ffn_act;

typedef struct moe_arch_info {
	const char *name;          /* canonical: "llama", "qwen2moe", ... */
	const char *gguf_name;     /* general.architecture */
	const char *const *hf_names; /* config.json "architectures" values, NULL-ended */
	moe_rope_kind rope;
	moe_qk_norm qk_norm;
	moe_norm_kind norm;
	bool topk_renorm;          /* default when the source does not say */
	bool permute_hf_qk;        /* HF q/k rows are half-split: permute to NORM order */
	bool runs;                 /* the engine runs it (the others only convert) */
} moe_arch_info;

/* The table entry for a canonical, GGUF or HF name, or NULL. */
const moe_arch_info *moe_arch_by_name(const char *name);
const moe_arch_info *moe_arch_by_gguf(const char *gguf_arch);
const moe_arch_info *moe_arch_by_hf(const char *hf_arch);
/* Comma-separated list of supported names, for error messages. */
const char *moe_arch_supported_list(void);
/* The same for the architectures the engine runs. */
const char *moe_arch_runnable_list(void);

/* Upper bounds of the counts and sizes in a moe_hparams (checked before any
 * loop or allocation uses them).  They are far above any published model
 * and keep every product of two of them well inside 64 bits. */
#define MOE_HP_MAX_LAYERS   4096u
#define MOE_HP_MAX_HEADS    4096u
#define MOE_HP_MAX_EXPERTS  4096u
#define MOE_HP_MAX_EMBD     (1u << 17)
#define MOE_HP_MAX_HEAD_DIM 4096u
#define MOE_HP_MAX_FF       (1u << 20)
#define MOE_HP_MAX_VOCAB    (1u << 24)
#define MOE_HP_MAX_CTX      (1u << 30)
/* Real-valued fields: finite, positive and at most this (RoPE base at most
 * 1e12, norm epsilon at most 1). */
#define MOE_HP_MAX_REAL     1e6
#define MOE_HP_MAX_ROPE_BASE 1e12

typedef enum { MOE_HP_SRC_UTH = 0, MOE_HP_SRC_GGUF, MOE_HP_SRC_HF } moe_hparams_source;

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
	/* --- issue 14 (deepseek2, gpt-oss, phimoe, granitemoe); in UTH files
	 * written before these existed they are absent and take the defaults
	 * named here. */
	moe_attention attention;       /* MHA; MLA for deepseek2 */
	/* The whole q.k multiplier: 1/sqrt(head_dim) by default, Granite's
	 * attention_scale, DeepSeek's mscale^2/sqrt(head_dim). */
	double kq_scale;
	/* Group-limited routing: n_expert/expert_groups consecutive experts
	 * per group, the expert_groups_used best groups kept (1, 1: none). */
	uint32_t expert_groups, expert_groups_used;
	moe_group_score expert_group_score;
	moe_router expert_router;      /* TOPK */
	double router_jitter_eps;      /* sparsemixer's epsilon (0.01) */
	/* YaRN: ramp bounds (32, 1), whether the ramp ends are rounded
	 * (true), and the log multiplier of the attention factor (0). */
	double rope_beta_fast, rope_beta_slow, rope_yarn_log_mul;
	bool rope_yarn_truncate;
	/* The magnitude RoPE's cos and sin are multiplied by (1): YaRN's
	 * attention factor, LongRoPE's short and long mscales. */
	double rope_mscale, rope_mscale_long;
	/* Sliding-window attention: a query at p sees keys p-window < k <= p
	 * in the layers whose bit is set (window 0: none). */
	uint32_t sliding_window;
	uint8_t sliding_layers[MOE_HP_MAX_LAYERS / 8];
	bool attn_sinks;               /* blk.N.attn_sinks: a logit per head */
	bool expert_bias;              /* blk.N.ffn_{gate,up,down}.E.bias */
	moe_ffn_act ffn_act;           /* SILU */
	double swiglu_alpha, swiglu_limit; /* SWIGLU_OAI: 1.702, 7 */
	/* Where the values came from, so that messages name a field as the
	 * source spells it ("rope_theta" in config.json, "llama.rope.freq_base"
	 * in GGUF, "hparams.rope.base" in UTH). */
	moe_hparams_source source;
} moe_hparams;

/* The fields issue 14 added, at their neutral values (ordinary attention
 * scaled by 1/sqrt(head_dim) — set head_dim first —, no groups, top-k
 * router, YaRN betas 32/1, RoPE magnitude 1, no window, SiLU): for code
 * that fills a moe_hparams by hand, and for UTH files without them. */
void moe_hparams_set_defaults14(moe_hparams *hp);

/* From GGUF keys ({arch}.embedding_length, ...). Tensor shapes are used
 * where keys are optional (vocabulary size, FFN widths, tied output).
 * MOE_EUNSUPPORTED names the supported architectures; MOE_EFORMAT a
 * missing or bad key, or a count over its bound (checked before the tensor
 * lookups that use it).  Call moe_hparams_check on the result. */
struct moe_gguf; /* gguf.h: the GGUF reader is needed only by who reads GGUF */
int moe_hparams_from_gguf(moe_hparams *hp, const struct moe_gguf *g, moe_error *e);
/* From a config.json text. `has_lm_head` says whether lm_head.weight exists.
 * Integers are accepted as JSON integers or as integral reals (4096.0), and
 * reals as either; a value of the wrong type or out of range is refused
 * naming the field.  Call moe_hparams_check on the result. */
int moe_hparams_from_hf(moe_hparams *hp, const char *config_json, bool has_lm_head,
			moe_error *e);
/* Every field on its own and with the others: counts within the MOE_HP_MAX_*
 * bounds, reals finite and positive within theirs, heads divisible by KV
 * heads, experts used <= experts, rotary dimensions even and <= head size,
 * FFN widths present where layers need them...  MOE_EFORMAT naming the
 * field (as hp->source spells it) and the problem; the caller adds the file
 * name. */
int moe_hparams_check(const moe_hparams *hp, moe_error *e);

/* The tensors of a model file, for moe_hparams_check_tensors: `count`
 * tensors reached by index, and a lookup by canonical name (NULL if absent). */
typedef struct moe_tensor_set {
	size_t count;
	const moe_uth_tensor *(*at)(const void *ctx, size_t i);
	const moe_uth_tensor *(*find)(const void *ctx, const char *name);
	const void *ctx;
} moe_tensor_set;
/* The tensor set of an open UTH file. */
moe_tensor_set moe_tensor_set_uth(const moe_uth *u);
/* hparams against the tensors present: the embedding is [n_embd x n_vocab],
 * no tensor belongs to a layer >= n_layer or an expert >= n_expert, and, for
 * architectures the engine runs, every tensor the forward pass binds exists
 * with the shape the hparams give (attention, biases exactly when qkv_bias,
 * q/k norms, dense FFN or router and n_expert experts, shared expert).
 * MOE_EFORMAT naming the tensor and the field it contradicts. */
int moe_hparams_check_tensors(const moe_hparams *hp, const moe_tensor_set *ts, moe_error *e);
/* Whether the engine can run these hparams: MOE_EUNSUPPORTED for an
 * architecture that only converts, or a feature not implemented yet
 * (llama3 RoPE scaling). */
int moe_hparams_check_runnable(const moe_hparams *hp, moe_error *e);
/* The three above in order (runnable only when `to_run`): what the converter
 * (to_run false) and the loader (to_run true) call.  The caller prefixes the
 * file name. */
int moe_hparams_validate(const moe_hparams *hp, const moe_tensor_set *ts, bool to_run,
			 moe_error *e);

/* Whether layer il uses the sliding window. */
static inline bool moe_hparams_layer_slides(const moe_hparams *hp, uint32_t il)
{
	return hp->sliding_window && il < MOE_HP_MAX_LAYERS &&
	       (hp->sliding_layers[il / 8] >> (il % 8) & 1);
}

json_t *moe_hparams_to_json(const moe_hparams *hp);
/* Reads the "hparams" object of UTH metadata and runs moe_hparams_check. */
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
