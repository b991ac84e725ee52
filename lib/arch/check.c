/* check.c — the one validation of hyper-parameters, shared by the converter
 * (before it writes a file) and the loader (before it binds one), so that
 * moe-convert refuses exactly what moe-run would refuse.
 *
 * Three steps: the fields alone and with each other (moe_hparams_check), the
 * fields against the tensors present (moe_hparams_check_tensors), and what
 * the engine implements (moe_hparams_check_runnable).  Messages name a field
 * as its source spells it, so the user can find it in config.json or in the
 * GGUF keys. */
#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------ field names */

enum {
	F_N_VOCAB, F_N_CTX_TRAIN, F_N_EMBD, F_N_LAYER, F_N_HEAD, F_N_HEAD_KV, F_HEAD_DIM,
	F_HEAD_DIM_V, F_N_FF, F_N_EXPERT, F_N_EXPERT_USED, F_N_FF_EXP, F_N_EXPERT_SHARED,
	F_N_FF_SHEXP, F_N_LAYER_DENSE_LEAD, F_N_ROT, F_ROPE_BASE, F_ROPE_FACTOR, F_ROPE_ORIG_CTX,
	F_NORM_EPS, F_EXPERT_WEIGHTS_SCALE, F_EMBEDDING_SCALE, F_RESIDUAL_SCALE,
	F_ATTENTION_SCALE, F_LOGIT_SCALE, F_Q_LORA_RANK, F_KV_LORA_RANK, F_ROPE_HEAD_DIM,
	F_TIED, F_QKV_BIAS, F_SHEXP_GATE, F_KQ_SCALE, F_EXPERT_GROUPS, F_EXPERT_GROUPS_USED,
	F_ROUTER_EPS, F_BETA_FAST, F_BETA_SLOW, F_YARN_LOG_MUL, F_ROPE_MSCALE, F_ROPE_MSCALE_LONG,
	F_SLIDING_WINDOW, F_SWIGLU_ALPHA, F_SWIGLU_LIMIT,
};

/* UTH metadata name, GGUF key (after "ARCH."; parenthesised: derived from a
 * tensor's shape), config.json field. */
static const struct { const char *uth, *gguf, *hf; } field_names[] = {
	[F_N_VOCAB] = {"n_vocab", "(token_embd.weight rows)", "vocab_size"},
	[F_N_CTX_TRAIN] = {"n_ctx_train", "context_length", "max_position_embeddings"},
	[F_N_EMBD] = {"n_embd", "embedding_length", "hidden_size"},
	[F_N_LAYER] = {"n_layer", "block_count", "num_hidden_layers"},
	[F_N_HEAD] = {"n_head", "attention.head_count", "num_attention_heads"},
	[F_N_HEAD_KV] = {"n_head_kv", "attention.head_count_kv", "num_key_value_heads"},
	[F_HEAD_DIM] = {"head_dim", "attention.key_length", "head_dim"},
	[F_HEAD_DIM_V] = {"head_dim_v", "attention.value_length", "v_head_dim"},
	[F_N_FF] = {"n_ff", "(ffn_up.weight rows)", "intermediate_size"},
	[F_N_EXPERT] = {"n_expert", "expert_count", "num_local_experts"},
	[F_N_EXPERT_USED] = {"n_expert_used", "expert_used_count", "num_experts_per_tok"},
	[F_N_FF_EXP] = {"n_ff_exp", "(ffn_up_exps.weight rows)",
			"moe_intermediate_size' / 'intermediate_size"},
	[F_N_EXPERT_SHARED] = {"n_expert_shared", "expert_shared_count", "n_shared_experts"},
	[F_N_FF_SHEXP] = {"n_ff_shexp", "(ffn_up_shexp.weight rows)",
			  "shared_expert_intermediate_size' / 'shared_intermediate_size"},
	[F_N_LAYER_DENSE_LEAD] = {"n_layer_dense_lead", "leading_dense_block_count",
				  "first_k_dense_replace"},
	[F_N_ROT] = {"rope.n_rot", "rope.dimension_count", "partial_rotary_factor"},
	[F_ROPE_BASE] = {"rope.base", "rope.freq_base", "rope_theta"},
	[F_ROPE_FACTOR] = {"rope.factor", "rope.scaling.factor", "rope_scaling.factor"},
	[F_ROPE_ORIG_CTX] = {"rope.orig_ctx", "rope.scaling.original_context_length",
			     "rope_scaling.original_max_position_embeddings"},
	[F_NORM_EPS] = {"norm_eps", "attention.layer_norm_rms_epsilon", "rms_norm_eps"},
	[F_EXPERT_WEIGHTS_SCALE] = {"expert_weights_scale", "expert_weights_scale",
				    "routed_scaling_factor"},
	[F_EMBEDDING_SCALE] = {"embedding_scale", "embedding_scale", "embedding_multiplier"},
	[F_RESIDUAL_SCALE] = {"residual_scale", "residual_scale", "residual_multiplier"},
	[F_ATTENTION_SCALE] = {"attention_scale", "attention.scale", "attention_multiplier"},
	[F_LOGIT_SCALE] = {"logit_scale", "logit_scale", "logits_scaling"},
	[F_Q_LORA_RANK] = {"q_lora_rank", "attention.q_lora_rank", "q_lora_rank"},
	[F_KV_LORA_RANK] = {"kv_lora_rank", "attention.kv_lora_rank", "kv_lora_rank"},
	[F_ROPE_HEAD_DIM] = {"rope_head_dim", "rope.dimension_count", "qk_rope_head_dim"},
	[F_TIED] = {"tied_embeddings", "(no output.weight)", "tie_word_embeddings"},
	[F_QKV_BIAS] = {"qkv_bias", "(blk.0.attn_q.bias present)", "attention_bias"},
	[F_SHEXP_GATE] = {"shared_expert_gate", "(ffn_gate_inp_shexp present)",
			  "(shared_expert_gate.weight present)"},
	[F_KQ_SCALE] = {"kq_scale", "(attention.scale or 1/sqrt(key_length))",
			"(attention_multiplier or 1/sqrt(head_dim))"},
	[F_EXPERT_GROUPS] = {"expert_groups", "expert_group_count", "n_group"},
	[F_EXPERT_GROUPS_USED] = {"expert_groups_used", "expert_group_used_count", "topk_group"},
	[F_ROUTER_EPS] = {"router_jitter_eps", "(0.01)", "router_jitter_noise"},
	[F_BETA_FAST] = {"rope.beta_fast", "rope.scaling.yarn_beta_fast", "rope_scaling.beta_fast"},
	[F_BETA_SLOW] = {"rope.beta_slow", "rope.scaling.yarn_beta_slow", "rope_scaling.beta_slow"},
	[F_YARN_LOG_MUL] = {"rope.yarn_log_multiplier", "rope.scaling.yarn_log_multiplier",
			    "rope_scaling.mscale_all_dim' (x 0.1"},
	[F_ROPE_MSCALE] = {"rope.mscale", "rope.scaling.attn_factor",
			   "rope_scaling.attention_factor' / 'short_mscale"},
	[F_ROPE_MSCALE_LONG] = {"rope.mscale_long", "rope.scaling.attn_factor",
				"rope_scaling.long_mscale"},
	[F_SLIDING_WINDOW] = {"sliding_window", "attention.sliding_window", "sliding_window"},
	[F_SWIGLU_ALPHA] = {"swiglu_alpha", "(1.702)", "(1.702)"},
	[F_SWIGLU_LIMIT] = {"swiglu_limit", "(7)", "swiglu_limit"},
};

/* "config.json field 'rope_theta'", "GGUF key llama.rope.freq_base",
 * "hparams.rope.base", in a buffer of the caller's. */
static const char *fname(const moe_hparams *hp, int f, char *buf, size_t n)
{
	switch (hp->source) {
	case MOE_HP_SRC_HF:
		if (field_names[f].hf[0] == '(')
			snprintf(buf, n, "hparams.%s %s", field_names[f].uth, field_names[f].hf);
		else
			snprintf(buf, n, "config.json field '%s'", field_names[f].hf);
		break;
	case MOE_HP_SRC_GGUF:
		if (field_names[f].gguf[0] == '(')
			snprintf(buf, n, "hparams.%s %s", field_names[f].uth, field_names[f].gguf);
		else
			snprintf(buf, n, "GGUF key %s.%s", hp->arch[0] ? hp->arch : "ARCH",
				 field_names[f].gguf);
		break;
	default:
		snprintf(buf, n, "hparams.%s", field_names[f].uth);
	}
	return buf;
}

#define FN(f) fname(hp, (f), nb, sizeof nb)

/* ------------------------------------------------------ fields alone */

static int count_in(const moe_hparams *hp, int f, uint32_t v, uint32_t lo, uint32_t hi,
		    moe_error *e)
{
	char nb[128];
	if (v < lo || v > hi)
		return moe_err(e, MOE_EFORMAT, "hparams: %s is %u: must be from %u to %u", FN(f), v,
			       lo, hi);
	return 0;
}

/* Finite, > 0 and <= hi, also once rounded to the float UTH metadata stores
 * (moe_hparams_to_json), so that the converter and the loader, which sees
 * the rounded value, always agree.  NaN fails every comparison, so !(v > 0)
 * catches it. */
static int real_in(const moe_hparams *hp, int f, double v, double hi, moe_error *e)
{
	char nb[128];
	if (!isfinite(v))
		return moe_err(e, MOE_EFORMAT, "hparams: %s is %g: must be a finite number", FN(f),
			       v);
	/* |v| <= hi is far inside float range: the conversion is defined */
	if (!(v > 0) || v > hi || !((float)v > 0) || (double)(float)v > hi)
		return moe_err(e, MOE_EFORMAT, "hparams: %s is %g: must be > 0 and <= %g", FN(f), v,
			       hi);
	return 0;
}

/* The fields of issue 14's architectures (MLA, grouped routing, the
 * sparsemixer, YaRN/LongRoPE details, sliding windows, clamped SwiGLU). */
static int check_issue14(const moe_hparams *hp, moe_error *e)
{
	char nb[128], nb2[128];
	MOE_TRY(real_in(hp, F_KQ_SCALE, hp->kq_scale, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_ROUTER_EPS, hp->router_jitter_eps, 1.0, e));
	MOE_TRY(real_in(hp, F_BETA_FAST, hp->rope_beta_fast, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_BETA_SLOW, hp->rope_beta_slow, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_ROPE_MSCALE, hp->rope_mscale, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_ROPE_MSCALE_LONG, hp->rope_mscale_long, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_SWIGLU_ALPHA, hp->swiglu_alpha, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_SWIGLU_LIMIT, hp->swiglu_limit, MOE_HP_MAX_REAL, e));
	/* 0 is allowed (no YaRN attention factor) */
	if (!isfinite(hp->rope_yarn_log_mul) || hp->rope_yarn_log_mul < 0 ||
	    hp->rope_yarn_log_mul > MOE_HP_MAX_REAL)
		return moe_err(e, MOE_EFORMAT, "hparams: %s is %g: must be from 0 to %g",
			       FN(F_YARN_LOG_MUL), hp->rope_yarn_log_mul, MOE_HP_MAX_REAL);
	MOE_TRY(count_in(hp, F_SLIDING_WINDOW, hp->sliding_window, 0, MOE_HP_MAX_CTX, e));
	MOE_TRY(count_in(hp, F_EXPERT_GROUPS, hp->expert_groups, 1,
			 hp->n_expert ? hp->n_expert : 1, e));
	MOE_TRY(count_in(hp, F_EXPERT_GROUPS_USED, hp->expert_groups_used, 1, hp->expert_groups, e));
	if (hp->n_expert % hp->expert_groups)
		return moe_err(e, MOE_EFORMAT, "hparams: %s (%u) is not a multiple of %s (%u)",
			       fname(hp, F_N_EXPERT, nb2, sizeof nb2), hp->n_expert,
			       FN(F_EXPERT_GROUPS), hp->expert_groups);
	/* groups are ranked by their best two experts (V3): each needs two */
	if (hp->expert_groups > 1 && hp->expert_group_score == MOE_GROUP_SCORE_TOP2SUM &&
	    hp->n_expert / hp->expert_groups < 2)
		return moe_err(e, MOE_EFORMAT, "hparams: %s (%u) leaves fewer than 2 experts per "
					       "group", FN(F_EXPERT_GROUPS), hp->expert_groups);
	/* the kept groups must hold the experts chosen */
	if (hp->expert_groups > 1 &&
	    (uint64_t)hp->expert_groups_used * (hp->n_expert / hp->expert_groups) < hp->n_expert_used)
		return moe_err(e, MOE_EFORMAT, "hparams: %s (%u) keeps fewer experts than %s (%u)",
			       FN(F_EXPERT_GROUPS_USED), hp->expert_groups_used,
			       fname(hp, F_N_EXPERT_USED, nb2, sizeof nb2), hp->n_expert_used);
	if (hp->expert_router == MOE_ROUTER_SPARSEMIXER && hp->n_expert && hp->n_expert_used != 2)
		return moe_err(e, MOE_EFORMAT, "hparams: %s is %u: the sparsemixer router chooses "
					       "exactly 2 experts",
			       FN(F_N_EXPERT_USED), hp->n_expert_used);
	if (hp->attention == MOE_ATTN_MLA) {
		/* the latent, and a no-rope part besides the rope part */
		MOE_TRY(count_in(hp, F_KV_LORA_RANK, hp->kv_lora_rank, 1, MOE_HP_MAX_EMBD, e));
		if (hp->rope_head_dim < 2 || hp->rope_head_dim >= hp->head_dim ||
		    hp->n_rot != hp->rope_head_dim)
			return moe_err(e, MOE_EFORMAT, "hparams: %s is %u: multi-head latent attention "
						       "needs an even rope part from 2 to below the head "
						       "size %u (%s)",
				       FN(F_ROPE_HEAD_DIM), hp->rope_head_dim, hp->head_dim,
				       fname(hp, F_HEAD_DIM, nb2, sizeof nb2));
	}
	return 0;
}

int moe_hparams_check(const moe_hparams *hp, moe_error *e)
{
	char nb[128], nb2[128];
	const moe_arch_info *a = hp->arch[0] ? moe_arch_by_name(hp->arch) : NULL;
	if (hp->arch[0] && !a)
		return moe_err(e, MOE_EUNSUPPORTED, "hparams: architecture '%s' is not supported "
						    "(supported: %s)", hp->arch, moe_arch_supported_list());
	if ((unsigned)hp->rope_kind > MOE_ROPE_NEOX ||
	    (unsigned)hp->rope_scaling > MOE_ROPE_SCALING_LONGROPE ||
	    (unsigned)hp->attention > MOE_ATTN_MLA ||
	    (unsigned)hp->expert_group_score > MOE_GROUP_SCORE_TOP2SUM ||
	    (unsigned)hp->expert_router > MOE_ROUTER_SPARSEMIXER ||
	    (unsigned)hp->ffn_act > MOE_ACT_SWIGLU_OAI ||
	    (unsigned)hp->norm_kind > MOE_NORM_LAYER || (unsigned)hp->qk_norm > MOE_QK_NORM_FULL ||
	    (unsigned)hp->gating > MOE_GATING_SIGMOID)
		return moe_err(e, MOE_EINTERNAL, "hparams: enumeration out of range");
	/* Counts first: everything below multiplies them. */
	MOE_TRY(count_in(hp, F_N_VOCAB, hp->n_vocab, 1, MOE_HP_MAX_VOCAB, e));
	MOE_TRY(count_in(hp, F_N_EMBD, hp->n_embd, 1, MOE_HP_MAX_EMBD, e));
	MOE_TRY(count_in(hp, F_N_LAYER, hp->n_layer, 1, MOE_HP_MAX_LAYERS, e));
	MOE_TRY(count_in(hp, F_N_HEAD, hp->n_head, 1, MOE_HP_MAX_HEADS, e));
	MOE_TRY(count_in(hp, F_N_HEAD_KV, hp->n_head_kv, 1, hp->n_head, e));
	if (hp->n_head % hp->n_head_kv)
		return moe_err(e, MOE_EFORMAT, "hparams: %s (%u) is not a multiple of %s (%u)",
			       FN(F_N_HEAD), hp->n_head, fname(hp, F_N_HEAD_KV, nb2, sizeof nb2),
			       hp->n_head_kv);
	MOE_TRY(count_in(hp, F_HEAD_DIM, hp->head_dim, 1, MOE_HP_MAX_HEAD_DIM, e));
	MOE_TRY(count_in(hp, F_HEAD_DIM_V, hp->head_dim_v, 1, MOE_HP_MAX_HEAD_DIM, e));
	MOE_TRY(count_in(hp, F_N_CTX_TRAIN, hp->n_ctx_train, 0, MOE_HP_MAX_CTX, e));
	MOE_TRY(count_in(hp, F_N_FF, hp->n_ff, 0, MOE_HP_MAX_FF, e));
	MOE_TRY(count_in(hp, F_N_EXPERT, hp->n_expert, 0, MOE_HP_MAX_EXPERTS, e));
	MOE_TRY(count_in(hp, F_N_FF_EXP, hp->n_ff_exp, 0, MOE_HP_MAX_FF, e));
	MOE_TRY(count_in(hp, F_N_EXPERT_SHARED, hp->n_expert_shared, 0, MOE_HP_MAX_EXPERTS, e));
	MOE_TRY(count_in(hp, F_N_FF_SHEXP, hp->n_ff_shexp, 0, MOE_HP_MAX_FF, e));
	MOE_TRY(count_in(hp, F_N_LAYER_DENSE_LEAD, hp->n_layer_dense_lead, 0, hp->n_layer, e));
	MOE_TRY(count_in(hp, F_ROPE_ORIG_CTX, hp->rope_orig_ctx, 0, MOE_HP_MAX_CTX, e));
	MOE_TRY(count_in(hp, F_Q_LORA_RANK, hp->q_lora_rank, 0, MOE_HP_MAX_EMBD, e));
	MOE_TRY(count_in(hp, F_KV_LORA_RANK, hp->kv_lora_rank, 0, MOE_HP_MAX_EMBD, e));
	MOE_TRY(count_in(hp, F_ROPE_HEAD_DIM, hp->rope_head_dim, 0, hp->head_dim, e));
	if (hp->n_expert) {
		MOE_TRY(count_in(hp, F_N_EXPERT_USED, hp->n_expert_used, 1, hp->n_expert, e));
		MOE_TRY(count_in(hp, F_N_FF_EXP, hp->n_ff_exp, 1, MOE_HP_MAX_FF, e));
	} else if (hp->n_expert_used) {
		return moe_err(e, MOE_EFORMAT, "hparams: %s is %u without experts (%s is 0)",
			       FN(F_N_EXPERT_USED), hp->n_expert_used,
			       fname(hp, F_N_EXPERT, nb2, sizeof nb2));
	}
	/* dense layers: all of them without experts, else the leading ones */
	if (!hp->n_expert || hp->n_layer_dense_lead)
		MOE_TRY(count_in(hp, F_N_FF, hp->n_ff, 1, MOE_HP_MAX_FF, e));
	/* The rotation pairs dimensions; 0 would silently turn RoPE off. */
	if (hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
		return moe_err(e, MOE_EFORMAT, "hparams: %s gives %u rotary dimensions: must be even, "
					       "from 2 to the head size %u", FN(F_N_ROT), hp->n_rot,
			       hp->head_dim);
	/* Only multi-head latent attention has values of another size; the
	 * KV cache and attention of the other architectures assume one size. */
	if (a && strcmp(a->name, "deepseek2") && hp->head_dim_v != hp->head_dim)
		return moe_err(e, MOE_EFORMAT, "hparams: %s (%u) differs from %s (%u)",
			       FN(F_HEAD_DIM_V), hp->head_dim_v, fname(hp, F_HEAD_DIM, nb2, sizeof nb2),
			       hp->head_dim);
	MOE_TRY(real_in(hp, F_ROPE_BASE, hp->rope_base, MOE_HP_MAX_ROPE_BASE, e));
	MOE_TRY(real_in(hp, F_NORM_EPS, hp->norm_eps, 1.0, e));
	MOE_TRY(real_in(hp, F_ROPE_FACTOR, hp->rope_factor, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_EXPERT_WEIGHTS_SCALE, hp->expert_weights_scale, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_EMBEDDING_SCALE, hp->embedding_scale, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_RESIDUAL_SCALE, hp->residual_scale, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_ATTENTION_SCALE, hp->attention_scale, MOE_HP_MAX_REAL, e));
	MOE_TRY(real_in(hp, F_LOGIT_SCALE, hp->logit_scale, MOE_HP_MAX_REAL, e));
	return check_issue14(hp, e);
}

/* ------------------------------------------------------ against tensors */

static const moe_uth_tensor *uth_at(const void *ctx, size_t i)
{
	return &((const moe_uth *)ctx)->tensors[i];
}

static const moe_uth_tensor *uth_find(const void *ctx, const char *name)
{
	return moe_uth_find(ctx, name);
}

moe_tensor_set moe_tensor_set_uth(const moe_uth *u)
{
	return (moe_tensor_set){.count = u->n_tensors, .at = uth_at, .find = uth_find, .ctx = u};
}

typedef struct tcheck {
	const moe_hparams *hp;
	const moe_tensor_set *ts;
	moe_error *e;
} tcheck;

/* The field a wrong shape most likely comes from, for the message. */
static int tc_missing(tcheck *c, const char *name, int f, const char *why)
{
	char nb[128];
	const moe_hparams *hp = c->hp;
	return moe_err(c->e, MOE_EFORMAT, "tensor '%s' missing (%s %s)", name, FN(f), why);
}

/* A matrix of `rows` rows of `cols` values (ne = [cols, rows]).  f: the
 * field that sets the rows (for the message). */
static int tc_matrix(tcheck *c, const char *name, uint64_t rows, uint64_t cols, bool required,
		     int f, moe_error *e)
{
	char nb[128];
	const moe_hparams *hp = c->hp;
	const moe_uth_tensor *t = c->ts->find(c->ts->ctx, name);
	if (!t)
		return required ? moe_err(e, MOE_EFORMAT, "tensor '%s' missing", name) : 0;
	if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
		return moe_err(e, MOE_EFORMAT, "tensor '%s' has shape [%u, %u, %u, %u] but the "
					       "hparams (%s ...) give [%llu, %llu]",
			       name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], FN(f),
			       (unsigned long long)cols, (unsigned long long)rows);
	return 0;
}

/* A vector of n values (any shape holding n elements). */
static int tc_vector(tcheck *c, const char *name, uint64_t n, bool required, int f,
		     moe_error *e)
{
	char nb[128];
	const moe_hparams *hp = c->hp;
	const moe_uth_tensor *t = c->ts->find(c->ts->ctx, name);
	if (!t)
		return required ? moe_err(e, MOE_EFORMAT, "tensor '%s' missing", name) : 0;
	uint64_t count = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
	if (count != n)
		return moe_err(e, MOE_EFORMAT, "tensor '%s' has %llu values but the hparams (%s ...) "
					       "give %llu",
			       name, (unsigned long long)count, FN(f), (unsigned long long)n);
	return 0;
}

/* Every tensor the engine binds for layer il (mirrors lib/model/load.c). */
static int tc_layer(tcheck *c, uint32_t il, moe_error *e)
{
	const moe_hparams *hp = c->hp;
	char nm[96];
	uint64_t E = hp->n_embd, hd = hp->head_dim, nq = (uint64_t)hp->n_head * hd,
		 nkv = (uint64_t)hp->n_head_kv * hd, nv = (uint64_t)hp->n_head_kv * hp->head_dim_v,
		 no = (uint64_t)hp->n_head * hp->head_dim_v;
#define NAME(fmt, ...) (snprintf(nm, sizeof nm, fmt, __VA_ARGS__), nm)
	if (hp->attention == MOE_ATTN_MLA) {
		/* latent attention: queries direct or low-rank (attn_kv_a_mqa,
		 * attn_k_b and attn_v_b are checked by tc_issue14) */
		uint64_t qr = hp->q_lora_rank;
		MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_q.weight", il), nq, E, !qr, F_N_HEAD, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_q_a.weight", il), qr, E, qr, F_Q_LORA_RANK, e));
		MOE_TRY(tc_vector(c, NAME("blk.%u.attn_q_a_norm.weight", il), qr, qr, F_Q_LORA_RANK,
				  e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_q_b.weight", il), nq, qr, qr, F_Q_LORA_RANK, e));
		MOE_TRY(tc_vector(c, NAME("blk.%u.attn_kv_a_norm.weight", il), hp->kv_lora_rank, true,
				  F_KV_LORA_RANK, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_output.weight", il), E, no, true, F_N_HEAD, e));
		goto ffn;
	}
	MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_q.weight", il), nq, E, true, F_N_HEAD, e));
	MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_k.weight", il), nkv, E, true, F_N_HEAD_KV, e));
	MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_v.weight", il), nv, E, true, F_N_HEAD_KV, e));
	MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_output.weight", il), E, no, true, F_N_HEAD, e));
	/* Biases exactly when the hparams say so: ignoring present biases
	 * would run a different model. */
	static const char *const bias[] = {"attn_q", "attn_k", "attn_v"};
	uint64_t bn[] = {nq, nkv, nv};
	for (int i = 0; i < 3; i++) {
		NAME("blk.%u.%s.bias", il, bias[i]);
		if (hp->qkv_bias) {
			if (!c->ts->find(c->ts->ctx, nm))
				return tc_missing(c, nm, F_QKV_BIAS, "says the attention has biases");
			MOE_TRY(tc_vector(c, nm, bn[i], true, F_N_HEAD, e));
		} else if (c->ts->find(c->ts->ctx, nm)) {
			char nb[128];
			return moe_err(e, MOE_EFORMAT, "tensor '%s' is present but %s says the "
						       "attention has no biases", nm,
				       fname(hp, F_QKV_BIAS, nb, sizeof nb));
		}
	}
	if (hp->qk_norm != MOE_QK_NORM_NONE) {
		bool full = hp->qk_norm == MOE_QK_NORM_FULL;
		MOE_TRY(tc_vector(c, NAME("blk.%u.attn_q_norm.weight", il), full ? nq : hd, true,
				  F_HEAD_DIM, e));
		MOE_TRY(tc_vector(c, NAME("blk.%u.attn_k_norm.weight", il), full ? nkv : hd, true,
				  F_HEAD_DIM, e));
	}
ffn:
	MOE_TRY(tc_vector(c, NAME("blk.%u.ffn_norm.weight", il), E, true, F_N_EMBD, e));
	bool is_moe = hp->n_expert > 0 && il >= hp->n_layer_dense_lead;
	if (!is_moe) {
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_gate.weight", il), hp->n_ff, E, true, F_N_FF, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_up.weight", il), hp->n_ff, E, true, F_N_FF, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_down.weight", il), E, hp->n_ff, true, F_N_FF, e));
		return 0;
	}
	MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_gate_inp.weight", il), hp->n_expert, E, true,
			  F_N_EXPERT, e));
	MOE_TRY(tc_vector(c, NAME("blk.%u.exp_probs_b.bias", il), hp->n_expert, false, F_N_EXPERT,
			  e));
	for (uint32_t x = 0; x < hp->n_expert; x++) {
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_gate.%u.weight", il, x), hp->n_ff_exp, E, true,
				  F_N_FF_EXP, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_up.%u.weight", il, x), hp->n_ff_exp, E, true,
				  F_N_FF_EXP, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_down.%u.weight", il, x), E, hp->n_ff_exp, true,
				  F_N_FF_EXP, e));
	}
	if (hp->n_ff_shexp) {
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_gate_shexp.weight", il), hp->n_ff_shexp, E, true,
				  F_N_FF_SHEXP, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_up_shexp.weight", il), hp->n_ff_shexp, E, true,
				  F_N_FF_SHEXP, e));
		MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_down_shexp.weight", il), E, hp->n_ff_shexp, true,
				  F_N_FF_SHEXP, e));
		MOE_TRY(tc_vector(c, NAME("blk.%u.ffn_gate_inp_shexp.weight", il), E,
				  hp->shared_expert_gate, F_SHEXP_GATE, e));
	}
#undef NAME
	return 0;
}

/* A tensor of exactly ne (3 dimensions), for the per-head MLA matrices. */
static int tc_3d(tcheck *c, const char *name, uint64_t n0, uint64_t n1, uint64_t n2, int f,
		 moe_error *e)
{
	char nb[128];
	const moe_hparams *hp = c->hp;
	const moe_uth_tensor *t = c->ts->find(c->ts->ctx, name);
	if (!t)
		return moe_err(e, MOE_EFORMAT, "tensor '%s' missing", name);
	if (t->ne[0] != n0 || t->ne[1] != n1 || t->ne[2] != n2 || t->ne[3] != 1)
		return moe_err(e, MOE_EFORMAT, "tensor '%s' has shape [%u, %u, %u, %u] but the "
					       "hparams (%s ...) give [%llu, %llu, %llu]",
			       name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], FN(f),
			       (unsigned long long)n0, (unsigned long long)n1, (unsigned long long)n2);
	return 0;
}

/* The tensors issue 14's features add, for every architecture (the others
 * are checked by tc_layer only where the engine runs them). */
static int tc_issue14(tcheck *c, moe_error *e)
{
	const moe_hparams *hp = c->hp;
	char nm[96];
#define NAME(fmt, ...) (snprintf(nm, sizeof nm, fmt, __VA_ARGS__), nm)
	if (hp->rope_scaling == MOE_ROPE_SCALING_LONGROPE) {
		MOE_TRY(tc_vector(c, "rope_factors_short.weight", hp->n_rot / 2, true, F_N_ROT, e));
		MOE_TRY(tc_vector(c, "rope_factors_long.weight", hp->n_rot / 2, true, F_N_ROT, e));
	}
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		if (hp->attn_sinks)
			MOE_TRY(tc_vector(c, NAME("blk.%u.attn_sinks.weight", il), hp->n_head, true,
					  F_N_HEAD, e));
		if (hp->attention == MOE_ATTN_MLA) {
			uint64_t L = hp->kv_lora_rank, R = hp->rope_head_dim, N = hp->head_dim - R;
			MOE_TRY(tc_matrix(c, NAME("blk.%u.attn_kv_a_mqa.weight", il), L + R, hp->n_embd,
					  true, F_KV_LORA_RANK, e));
			MOE_TRY(tc_3d(c, NAME("blk.%u.attn_k_b.weight", il), N, L, hp->n_head,
				      F_KV_LORA_RANK, e));
			MOE_TRY(tc_3d(c, NAME("blk.%u.attn_v_b.weight", il), L, hp->head_dim_v,
				      hp->n_head, F_HEAD_DIM_V, e));
		}
		bool is_moe = hp->n_expert > 0 && il >= hp->n_layer_dense_lead;
		if (is_moe && hp->n_ff_shexp) {
			uint64_t E = hp->n_embd, S = hp->n_ff_shexp;
			MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_gate_shexp.weight", il), S, E, true,
					  F_N_FF_SHEXP, e));
			MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_up_shexp.weight", il), S, E, true,
					  F_N_FF_SHEXP, e));
			MOE_TRY(tc_matrix(c, NAME("blk.%u.ffn_down_shexp.weight", il), E, S, true,
					  F_N_FF_SHEXP, e));
		}
		for (uint32_t x = 0; hp->expert_bias && is_moe && x < hp->n_expert; x++) {
			MOE_TRY(tc_vector(c, NAME("blk.%u.ffn_gate.%u.bias", il, x), hp->n_ff_exp, true,
					  F_N_FF_EXP, e));
			MOE_TRY(tc_vector(c, NAME("blk.%u.ffn_up.%u.bias", il, x), hp->n_ff_exp, true,
					  F_N_FF_EXP, e));
			MOE_TRY(tc_vector(c, NAME("blk.%u.ffn_down.%u.bias", il, x), hp->n_embd, true,
					  F_N_EMBD, e));
		}
	}
#undef NAME
	return 0;
}

int moe_hparams_check_tensors(const moe_hparams *hp, const moe_tensor_set *ts, moe_error *e)
{
	char nb[128], nb2[128];
	tcheck c = {hp, ts, e};
	const moe_arch_info *a = moe_arch_by_name(hp->arch);
	/* Nothing may lie outside the layers and experts the hparams declare:
	 * a smaller num_hidden_layers would silently run a truncated model. */
	for (size_t i = 0; i < ts->count; i++) {
		const moe_uth_tensor *t = ts->at(ts->ctx, i);
		if (t->layer != MOE_UTH_NONE && t->layer >= hp->n_layer)
			return moe_err(e, MOE_EFORMAT, "tensor '%s' belongs to layer %u but %s is %u",
				       t->name, t->layer, FN(F_N_LAYER), hp->n_layer);
		if (t->expert != MOE_UTH_NONE && t->expert >= hp->n_expert)
			return moe_err(e, MOE_EFORMAT, "tensor '%s' belongs to expert %u but %s is %u",
				       t->name, t->expert, FN(F_N_EXPERT), hp->n_expert);
	}
	if (!ts->find(ts->ctx, "token_embd.weight"))
		return moe_err(e, MOE_EFORMAT, "tensor 'token_embd.weight' missing");
	const moe_uth_tensor *emb = ts->find(ts->ctx, "token_embd.weight");
	if (emb->ne[1] != hp->n_vocab)
		return moe_err(e, MOE_EFORMAT, "tensor 'token_embd.weight' has %u rows but %s is %u",
			       emb->ne[1], FN(F_N_VOCAB), hp->n_vocab);
	if (emb->ne[0] != hp->n_embd)
		return moe_err(e, MOE_EFORMAT, "tensor 'token_embd.weight' has rows of %u but %s is %u",
			       emb->ne[0], FN(F_N_EMBD), hp->n_embd);
	MOE_TRY(tc_matrix(&c, "token_embd.weight", hp->n_vocab, hp->n_embd, true, F_N_VOCAB, e));
	if (!hp->tied_embeddings && !ts->find(ts->ctx, "output.weight"))
		return tc_missing(&c, "output.weight", F_TIED, "says the output is not tied");
	MOE_TRY(tc_matrix(&c, "output.weight", hp->n_vocab, hp->n_embd, false, F_N_VOCAB, e));
	MOE_TRY(tc_vector(&c, "output_norm.weight", hp->n_embd, true, F_N_EMBD, e));
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		char nm[64];
		snprintf(nm, sizeof nm, "blk.%u.attn_norm.weight", il);
		if (!ts->find(ts->ctx, nm))
			return moe_err(e, MOE_EFORMAT, "layer %u has no tensors ('%s' missing) but %s "
						       "is %u", il, nm,
				       fname(hp, F_N_LAYER, nb2, sizeof nb2), hp->n_layer);
		MOE_TRY(tc_vector(&c, nm, hp->n_embd, true, F_N_EMBD, e));
		if (a && a->runs)
			MOE_TRY(tc_layer(&c, il, e));
	}
	return tc_issue14(&c, e);
}

/* ------------------------------------------------------ the engine */

int moe_hparams_check_runnable(const moe_hparams *hp, moe_error *e)
{
	const moe_arch_info *a = moe_arch_by_name(hp->arch);
	if (!a || !a->runs)
		return moe_err(e, MOE_EUNSUPPORTED, "architecture '%s' can be converted but not run "
						    "yet (runs: %s)", hp->arch, moe_arch_runnable_list());
	if (hp->rope_scaling == MOE_ROPE_SCALING_LLAMA3)
		return moe_err(e, MOE_EUNSUPPORTED, "llama3 RoPE scaling is not supported yet");
	return 0;
}

int moe_hparams_validate(const moe_hparams *hp, const moe_tensor_set *ts, bool to_run,
			 moe_error *e)
{
	MOE_TRY(moe_hparams_check(hp, e));
	if (to_run)
		MOE_TRY(moe_hparams_check_runnable(hp, e));
	return moe_hparams_check_tensors(hp, ts, e);
}
