/* hparams.c — hyper-parameters from GGUF keys and Hugging Face config.json
 * into one vocabulary, and their JSON form in UTH metadata.
 *
 * Where both sources could disagree on conventions (which key holds the
 * expert FFN width, whether the output matrix is tied), values are derived
 * from what is unambiguous — usually the tensor shapes — so a model converted
 * from either source ends with the same hparams.  Every value is checked for
 * its type where it is read; ranges and consistency are checked once, by
 * moe_hparams_check (check.c). */
#include "arch.h"
#include "gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_hparams_set_defaults14(moe_hparams *hp)
{
	hp->attention = MOE_ATTN_MHA;
	hp->kq_scale = hp->head_dim ? 1.0 / sqrt((double)hp->head_dim) : 1.0;
	hp->expert_groups = hp->expert_groups_used = 1;
	hp->expert_group_score = MOE_GROUP_SCORE_MAX;
	hp->expert_router = MOE_ROUTER_TOPK;
	hp->router_jitter_eps = 0.01;
	hp->rope_beta_fast = 32.0;
	hp->rope_beta_slow = 1.0;
	hp->rope_yarn_log_mul = 0.0;
	hp->rope_yarn_truncate = true;
	hp->rope_mscale = hp->rope_mscale_long = 1.0;
	hp->sliding_window = 0;
	memset(hp->sliding_layers, 0, sizeof hp->sliding_layers);
	hp->attn_sinks = hp->expert_bias = false;
	hp->ffn_act = MOE_ACT_SILU;
	hp->swiglu_alpha = 1.702;
	hp->swiglu_limit = 7.0;
}

static void defaults(moe_hparams *hp, const moe_arch_info *a)
{
	memset(hp, 0, sizeof *hp);
	snprintf(hp->arch, sizeof hp->arch, "%s", a->name);
	hp->rope_kind = a->rope;
	hp->rope_base = 10000.0;
	hp->norm_eps = 1e-5;
	hp->norm_kind = a->norm;
	hp->qk_norm = a->qk_norm;
	hp->topk_renorm = a->topk_renorm;
	hp->expert_weights_scale = 1.0;
	hp->embedding_scale = hp->residual_scale = hp->attention_scale = hp->logit_scale = 1.0;
	hp->rope_factor = 1.0;
	moe_hparams_set_defaults14(hp);
	hp->kq_scale = 0; /* set by finish(): it depends on the head size */
}

/* YaRN's attention factor for a context `factor` times longer: 0.1 ln(s) + 1
 * (transformers' and llama.cpp's default), 1 when not extending. */
static double yarn_default_mscale(double factor)
{
	return factor > 1.0 ? 0.1 * log(factor) + 1.0 : 1.0;
}

/* Everything the architecture fixes once the source's values are read,
 * computed in the same float-rounded arithmetic whatever the source, so
 * that GGUF and HF inputs give the same metadata. */
static void finish(moe_hparams *hp, const moe_arch_info *a)
{
	const char *n = a->name;
	if (!strcmp(n, "deepseek2")) {
		hp->attention = MOE_ATTN_MLA;
		/* GGUF's MQA view says 1 KV head; the latent serves every head */
		hp->n_head_kv = hp->n_head;
		/* DeepSeek's RoPE keeps magnitude 1 (mscale / mscale_all_dim
		 * are equal in every published checkpoint); the attention
		 * factor goes into the q.k scale, squared. */
		hp->rope_mscale = hp->rope_mscale_long = 1.0;
		double m = 1.0;
		if (hp->rope_scaling == MOE_ROPE_SCALING_YARN && hp->rope_factor > 1.0)
			m = 1.0 + (double)(float)hp->rope_yarn_log_mul * log((double)(float)hp->rope_factor);
		hp->kq_scale = hp->head_dim ? m * m / sqrt((double)hp->head_dim) : 1.0;
		/* all groups kept = no group limit (a count above the groups is
		 * left for moe_hparams_check to refuse) */
		if (hp->expert_groups <= 1 || hp->expert_groups_used == hp->expert_groups) {
			hp->expert_groups = hp->expert_groups_used = 1;
			hp->expert_group_score = hp->gating == MOE_GATING_SIGMOID
							 ? MOE_GROUP_SCORE_TOP2SUM
							 : MOE_GROUP_SCORE_MAX;
		}
	} else {
		hp->expert_groups = hp->expert_groups_used = 1;
	}
	if (!strcmp(n, "granitemoe"))
		hp->kq_scale = hp->attention_scale;
	else if (!hp->kq_scale)
		hp->kq_scale = hp->head_dim ? 1.0 / sqrt((double)hp->head_dim) : 1.0;
	if (!strcmp(n, "gpt-oss")) {
		hp->attn_sinks = true;
		hp->expert_bias = true;
		hp->ffn_act = MOE_ACT_SWIGLU_OAI;
		hp->swiglu_alpha = 1.702;
	}
	if (!strcmp(n, "phimoe"))
		hp->expert_router = MOE_ROUTER_SPARSEMIXER;
	if (hp->rope_scaling != MOE_ROPE_SCALING_LONGROPE)
		hp->rope_mscale_long = hp->rope_mscale;
	if (!hp->sliding_window)
		memset(hp->sliding_layers, 0, sizeof hp->sliding_layers);
}

/* gpt-oss in GGUF: llama.cpp's pattern, the even layers slide; phimoe:
 * every layer when a window is given. */
static void sliding_all(moe_hparams *hp, uint32_t period)
{
	for (uint32_t il = 0; il < hp->n_layer && il < MOE_HP_MAX_LAYERS; il++)
		if (il % period == 0)
			hp->sliding_layers[il / 8] |= (uint8_t)(1u << (il % 8));
}

/* ------------------------------------------------------------- from GGUF */

static int gguf_u32(const moe_gguf *g, const char *arch, const char *key, uint32_t *out,
		    bool required, moe_error *e)
{
	char full[128];
	snprintf(full, sizeof full, "%s.%s", arch, key);
	uint64_t v;
	int rc = moe_gguf_get_u64(g, full, &v, e);
	if (rc == MOE_ENOTFOUND) {
		if (required)
			return moe_err(e, MOE_EFORMAT, "%s: required key %s missing", g->name, full);
		return 0;
	}
	if (rc < 0)
		return rc;
	if (v > UINT32_MAX)
		return moe_err(e, MOE_EFORMAT, "%s: key %s: value %llu too large", g->name, full,
			       (unsigned long long)v);
	*out = (uint32_t)v;
	return 0;
}

static int gguf_f64(const moe_gguf *g, const char *arch, const char *key, double *out,
		    moe_error *e)
{
	char full[128];
	snprintf(full, sizeof full, "%s.%s", arch, key);
	int rc = moe_gguf_get_f64(g, full, out, e);
	return rc == MOE_ENOTFOUND ? 0 : rc;
}

static int gguf_bool(const moe_gguf *g, const char *arch, const char *key, bool *out,
		     moe_error *e)
{
	char full[128];
	snprintf(full, sizeof full, "%s.%s", arch, key);
	int rc = moe_gguf_get_bool(g, full, out, e);
	return rc == MOE_ENOTFOUND ? 0 : rc;
}

/* Dimension `dim` (0 = fastest) of the first tensor named by fmt with layer
 * l, or 0 if there is none. */
static uint64_t gguf_dim(const moe_gguf *g, const char *name, int dim)
{
	const moe_gguf_tensor *t = moe_gguf_find_tensor(g, name);
	if (!t || (uint32_t)dim >= t->n_dims)
		return 0;
	/* saturated, so that a dimension over 32 bits fails the range checks
	 * instead of wrapping into a plausible count */
	return t->ne[dim] > UINT32_MAX ? UINT32_MAX : t->ne[dim];
}

/* First layer index at which `base` (e.g. "ffn_gate_exps") exists, or -1. */
static int gguf_first_layer_with(const moe_gguf *g, uint32_t n_layer, const char *base)
{
	char name[96];
	for (uint32_t l = 0; l < n_layer; l++) {
		snprintf(name, sizeof name, "blk.%u.%s.weight", l, base);
		if (moe_gguf_find_tensor(g, name))
			return (int)l;
	}
	return -1;
}

int moe_hparams_from_gguf(moe_hparams *hp, const moe_gguf *g, moe_error *e)
{
	const char *garch;
	int rc = moe_gguf_get_str(g, "general.architecture", &garch, e);
	if (rc == MOE_ENOTFOUND)
		return moe_err(e, MOE_EFORMAT, "%s: key general.architecture missing", g->name);
	MOE_TRY(rc);
	const moe_arch_info *a = moe_arch_by_gguf(garch);
	if (!a)
		return moe_err(e, MOE_EUNSUPPORTED,
			       "%s: architecture '%s' is not supported (supported: %s)", g->name,
			       garch, moe_arch_supported_list());
	defaults(hp, a);
	hp->source = MOE_HP_SRC_GGUF;
	const char *k = a->gguf_name;
	MOE_TRY(gguf_u32(g, k, "context_length", &hp->n_ctx_train, false, e));
	MOE_TRY(gguf_u32(g, k, "embedding_length", &hp->n_embd, true, e));
	MOE_TRY(gguf_u32(g, k, "block_count", &hp->n_layer, true, e));
	MOE_TRY(gguf_u32(g, k, "attention.head_count", &hp->n_head, true, e));
	hp->n_head_kv = hp->n_head;
	MOE_TRY(gguf_u32(g, k, "attention.head_count_kv", &hp->n_head_kv, false, e));
	MOE_TRY(gguf_u32(g, k, "attention.key_length", &hp->head_dim, false, e));
	MOE_TRY(gguf_u32(g, k, "attention.value_length", &hp->head_dim_v, false, e));
	MOE_TRY(gguf_u32(g, k, "rope.dimension_count", &hp->n_rot, false, e));
	MOE_TRY(gguf_f64(g, k, "rope.freq_base", &hp->rope_base, e));
	/* whichever epsilon the file has, as it is: moe_hparams_check judges it */
	char eps_key[128];
	snprintf(eps_key, sizeof eps_key, "%s.attention.layer_norm_rms_epsilon", k);
	if (moe_gguf_find(g, eps_key))
		MOE_TRY(gguf_f64(g, k, "attention.layer_norm_rms_epsilon", &hp->norm_eps, e));
	else
		MOE_TRY(gguf_f64(g, k, "attention.layer_norm_epsilon", &hp->norm_eps, e));
	MOE_TRY(gguf_u32(g, k, "expert_count", &hp->n_expert, false, e));
	MOE_TRY(gguf_u32(g, k, "expert_used_count", &hp->n_expert_used, false, e));
	MOE_TRY(gguf_u32(g, k, "expert_shared_count", &hp->n_expert_shared, false, e));
	MOE_TRY(gguf_u32(g, k, "leading_dense_block_count", &hp->n_layer_dense_lead, false, e));
	MOE_TRY(gguf_bool(g, k, "expert_weights_norm", &hp->topk_renorm, e));
	MOE_TRY(gguf_f64(g, k, "expert_weights_scale", &hp->expert_weights_scale, e));
	uint32_t gating = 0;
	MOE_TRY(gguf_u32(g, k, "expert_gating_func", &gating, false, e));
	hp->gating = gating == 2 ? MOE_GATING_SIGMOID : MOE_GATING_SOFTMAX;
	MOE_TRY(gguf_u32(g, k, "attention.q_lora_rank", &hp->q_lora_rank, false, e));
	MOE_TRY(gguf_u32(g, k, "attention.kv_lora_rank", &hp->kv_lora_rank, false, e));
	MOE_TRY(gguf_f64(g, k, "embedding_scale", &hp->embedding_scale, e));
	MOE_TRY(gguf_f64(g, k, "residual_scale", &hp->residual_scale, e));
	MOE_TRY(gguf_f64(g, k, "attention.scale", &hp->attention_scale, e));
	MOE_TRY(gguf_f64(g, k, "logit_scale", &hp->logit_scale, e));

	const moe_gguf_kv *st = NULL;
	char key[128];
	snprintf(key, sizeof key, "%s.rope.scaling.type", k);
	st = moe_gguf_find(g, key);
	if (st && st->v.type == MOE_GGUF_T_STRING) {
		const char *s = st->v.str.ptr;
		hp->rope_scaling = !strcmp(s, "linear") ? MOE_ROPE_SCALING_LINEAR
				   : !strcmp(s, "yarn") ? MOE_ROPE_SCALING_YARN
							: MOE_ROPE_SCALING_NONE;
	}
	MOE_TRY(gguf_f64(g, k, "rope.scaling.factor", &hp->rope_factor, e));
	MOE_TRY(gguf_u32(g, k, "rope.scaling.original_context_length", &hp->rope_orig_ctx, false, e));
	if (moe_gguf_find_tensor(g, "rope_factors_long.weight"))
		hp->rope_scaling = MOE_ROPE_SCALING_LONGROPE;
	if (hp->rope_scaling == MOE_ROPE_SCALING_NONE)
		hp->rope_factor = 1.0, hp->rope_orig_ctx = 0;
	if (hp->rope_scaling == MOE_ROPE_SCALING_LONGROPE)
		hp->rope_factor = 1.0;
	MOE_TRY(gguf_f64(g, k, "rope.scaling.yarn_beta_fast", &hp->rope_beta_fast, e));
	MOE_TRY(gguf_f64(g, k, "rope.scaling.yarn_beta_slow", &hp->rope_beta_slow, e));
	MOE_TRY(gguf_f64(g, k, "rope.scaling.yarn_log_multiplier", &hp->rope_yarn_log_mul, e));
	if (hp->rope_scaling == MOE_ROPE_SCALING_YARN)
		hp->rope_mscale = yarn_default_mscale((double)(float)hp->rope_factor);
	/* llama.cpp's converter writes Phi's LongRoPE mscale (one for both) as
	 * attn_factor; for YaRN it would be the attention factor itself */
	MOE_TRY(gguf_f64(g, k, "rope.scaling.attn_factor", &hp->rope_mscale, e));
	hp->rope_mscale_long = hp->rope_mscale;
	/* GGUF has no key for gpt-oss's ramp rounding: the published
	 * config.json says truncate false */
	if (!strcmp(a->name, "gpt-oss"))
		hp->rope_yarn_truncate = false;
	MOE_TRY(gguf_u32(g, k, "expert_group_count", &hp->expert_groups, false, e));
	MOE_TRY(gguf_u32(g, k, "expert_group_used_count", &hp->expert_groups_used, false, e));
	hp->expert_group_score = hp->gating == MOE_GATING_SIGMOID ? MOE_GROUP_SCORE_TOP2SUM
								  : MOE_GROUP_SCORE_MAX;
	MOE_TRY(gguf_u32(g, k, "attention.sliding_window", &hp->sliding_window, false, e));
	/* current deepseek2 GGUFs: key_length is the MQA view (latent + rope);
	 * the head size proper is key_length_mla */
	MOE_TRY(gguf_u32(g, k, "attention.key_length_mla", &hp->head_dim, false, e));
	MOE_TRY(gguf_u32(g, k, "attention.value_length_mla", &hp->head_dim_v, false, e));

	/* The layer count bounds the tensor lookups below: refuse an absurd
	 * one before looping over it. */
	if (hp->n_layer > MOE_HP_MAX_LAYERS)
		return moe_err(e, MOE_EFORMAT, "%s: key %s.block_count is %u: at most %u layers",
			       g->name, k, hp->n_layer, MOE_HP_MAX_LAYERS);
	/* Shapes settle what keys leave open. */
	hp->n_vocab = (uint32_t)gguf_dim(g, "token_embd.weight", 1);
	if (!hp->n_vocab) {
		const moe_gguf_kv *toks = moe_gguf_find(g, "tokenizer.ggml.tokens");
		if (toks && toks->v.type == MOE_GGUF_T_ARRAY && toks->v.arr.n <= UINT32_MAX)
			hp->n_vocab = (uint32_t)toks->v.arr.n;
	}
	uint32_t n_ff_key = 0;
	MOE_TRY(gguf_u32(g, k, "feed_forward_length", &n_ff_key, false, e));
	int dense = gguf_first_layer_with(g, hp->n_layer, "ffn_gate");
	if (dense < 0)
		dense = gguf_first_layer_with(g, hp->n_layer, "ffn_up");
	char name[96];
	if (dense >= 0) {
		snprintf(name, sizeof name, "blk.%d.ffn_up.weight", dense);
		hp->n_ff = (uint32_t)gguf_dim(g, name, 1);
	}
	int moe_l = gguf_first_layer_with(g, hp->n_layer, "ffn_up_exps");
	if (moe_l >= 0) {
		snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", moe_l);
		hp->n_ff_exp = (uint32_t)gguf_dim(g, name, 1);
	} else if (hp->n_expert > 0) {
		/* Older Mixtral GGUFs: one tensor per expert. */
		for (uint32_t l = 0; l < hp->n_layer && !hp->n_ff_exp; l++) {
			snprintf(name, sizeof name, "blk.%u.ffn_up.0.weight", l);
			hp->n_ff_exp = (uint32_t)gguf_dim(g, name, 1);
		}
	}
	if (hp->n_expert > 0 && hp->n_layer_dense_lead == 0 && dense >= 0 && moe_l > dense)
		hp->n_layer_dense_lead = (uint32_t)moe_l;
	int sh = gguf_first_layer_with(g, hp->n_layer, "ffn_up_shexp");
	if (sh >= 0) {
		snprintf(name, sizeof name, "blk.%d.ffn_up_shexp.weight", sh);
		hp->n_ff_shexp = (uint32_t)gguf_dim(g, name, 1);
		snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", sh);
		hp->shared_expert_gate = moe_gguf_find_tensor(g, name) != NULL;
		if (!hp->n_expert_shared)
			hp->n_expert_shared = 1;
	}
	if (!hp->n_ff && hp->n_expert == 0)
		hp->n_ff = n_ff_key;
	hp->qkv_bias = moe_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
	hp->tied_embeddings = g->n_tensors > 0 && !moe_gguf_find_tensor(g, "output.weight");
	if (!hp->head_dim && hp->n_head)
		hp->head_dim = hp->n_embd / hp->n_head;
	if (!hp->head_dim_v)
		hp->head_dim_v = hp->head_dim;
	if (!hp->n_rot)
		hp->n_rot = hp->head_dim;
	/* deepseek2 keeps the rotated part of each head separately. */
	if (!strcmp(a->name, "deepseek2"))
		MOE_TRY(gguf_u32(g, k, "rope.dimension_count", &hp->rope_head_dim, false, e));
	if (hp->sliding_window)
		sliding_all(hp, !strcmp(a->name, "gpt-oss") ? 2 : 1);
	finish(hp, a);
	return 0;
}

/* ------------------------------------------------------------ from HF */

/* A count: a JSON integer, or a real with an integral value (Python writes
 * 4096.0 for a float that holds a count); huge integers arrive as reals
 * (moe_hf_json_relax) and are refused here by range, naming the field. */
static int js_u32(const json_t *cfg, const char *key, uint32_t *out, bool required,
		  moe_error *e)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v)) {
		if (required)
			return moe_err(e, MOE_EFORMAT, "config.json: required field '%s' missing", key);
		return 0;
	}
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0 || i > (json_int_t)UINT32_MAX)
			return moe_err(e, MOE_EFORMAT, "config.json: field '%s' is %lld: must be a count "
						       "from 0 to %u", key, (long long)i, UINT32_MAX);
		*out = (uint32_t)i;
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		/* compared as doubles before any conversion: no float->int overflow */
		if (!(d >= 0 && d <= (double)UINT32_MAX) || d != floor(d))
			return moe_err(e, MOE_EFORMAT, "config.json: field '%s' is %g: must be a count "
						       "from 0 to %u", key, d, UINT32_MAX);
		*out = (uint32_t)d;
		return 0;
	}
	return moe_err(e, MOE_EFORMAT, "config.json: field '%s' must be a non-negative integer", key);
}

static int js_f64(const json_t *cfg, const char *key, double *out, moe_error *e)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return moe_err(e, MOE_EFORMAT, "config.json: field '%s' must be a number", key);
	*out = json_number_value(v);
	return 0;
}

static int js_bool(const json_t *cfg, const char *key, bool *out, moe_error *e)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return moe_err(e, MOE_EFORMAT, "config.json: field '%s' must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int hf_from_config(moe_hparams *hp, const json_t *cfg, bool has_lm_head, moe_error *e)
{
	json_t *archs = json_object_get(cfg, "architectures");
	if (!json_is_array(archs) || json_array_size(archs) == 0 ||
	    !json_is_string(json_array_get(archs, 0)))
		return moe_err(e, MOE_EFORMAT, "config.json: field 'architectures' missing or not a "
					       "list of names");
	const char *hf_arch = json_string_value(json_array_get(archs, 0));
	const moe_arch_info *a = moe_arch_by_hf(hf_arch);
	if (!a)
		return moe_err(e, MOE_EUNSUPPORTED,
			       "config.json: architecture '%s' is not supported (supported: %s)",
			       hf_arch, moe_arch_supported_list());
	defaults(hp, a);
	hp->source = MOE_HP_SRC_HF;
	MOE_TRY(js_u32(cfg, "vocab_size", &hp->n_vocab, true, e));
	MOE_TRY(js_u32(cfg, "max_position_embeddings", &hp->n_ctx_train, false, e));
	MOE_TRY(js_u32(cfg, "hidden_size", &hp->n_embd, true, e));
	MOE_TRY(js_u32(cfg, "num_hidden_layers", &hp->n_layer, true, e));
	MOE_TRY(js_u32(cfg, "num_attention_heads", &hp->n_head, true, e));
	hp->n_head_kv = hp->n_head;
	MOE_TRY(js_u32(cfg, "num_key_value_heads", &hp->n_head_kv, false, e));
	MOE_TRY(js_u32(cfg, "head_dim", &hp->head_dim, false, e));
	MOE_TRY(js_f64(cfg, "rope_theta", &hp->rope_base, e));
	MOE_TRY(js_f64(cfg, "rms_norm_eps", &hp->norm_eps, e));
	if (a->norm == MOE_NORM_LAYER && json_object_get(cfg, "layer_norm_eps"))
		MOE_TRY(js_f64(cfg, "layer_norm_eps", &hp->norm_eps, e));
	uint32_t inter = 0;
	MOE_TRY(js_u32(cfg, "intermediate_size", &inter, false, e));
	uint32_t n_exp = 0;
	MOE_TRY(js_u32(cfg, "num_local_experts", &n_exp, false, e));
	if (!n_exp)
		MOE_TRY(js_u32(cfg, "num_experts", &n_exp, false, e));
	if (!n_exp)
		MOE_TRY(js_u32(cfg, "n_routed_experts", &n_exp, false, e));
	hp->n_expert = n_exp;
	if (n_exp) {
		MOE_TRY(js_u32(cfg, "num_experts_per_tok", &hp->n_expert_used, true, e));
		uint32_t moe_inter = 0;
		MOE_TRY(js_u32(cfg, "moe_intermediate_size", &moe_inter, false, e));
		hp->n_ff_exp = moe_inter ? moe_inter : inter;
		MOE_TRY(js_bool(cfg, "norm_topk_prob", &hp->topk_renorm, e));
		MOE_TRY(js_u32(cfg, "first_k_dense_replace", &hp->n_layer_dense_lead, false, e));
		/* Qwen2-MoE: one gated shared expert; DeepSeek: n ungated ones. */
		uint32_t sh = 0;
		MOE_TRY(js_u32(cfg, "shared_expert_intermediate_size", &sh, false, e));
		if (sh) {
			hp->n_ff_shexp = sh;
			hp->n_expert_shared = 1;
			hp->shared_expert_gate = true;
		}
		uint32_t n_sh = 0;
		MOE_TRY(js_u32(cfg, "n_shared_experts", &n_sh, false, e));
		if (n_sh) {
			/* in 64 bits: a product over 32 bits fails the range check */
			uint64_t w = (uint64_t)n_sh * hp->n_ff_exp;
			hp->n_expert_shared = n_sh;
			hp->n_ff_shexp = w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
		}
		if (hp->n_layer_dense_lead)
			hp->n_ff = inter;
		MOE_TRY(js_f64(cfg, "routed_scaling_factor", &hp->expert_weights_scale, e));
		json_t *sf = json_object_get(cfg, "scoring_func");
		if (json_is_string(sf) && !strcmp(json_string_value(sf), "sigmoid"))
			hp->gating = MOE_GATING_SIGMOID;
		/* DeepSeek-V3's configuration class defaults to sigmoid scoring */
		if (!json_is_string(sf) && !strcmp(hf_arch, "DeepseekV3ForCausalLM"))
			hp->gating = MOE_GATING_SIGMOID;
		if (json_is_string(sf) && strcmp(json_string_value(sf), "sigmoid") &&
		    strcmp(json_string_value(sf), "softmax"))
			return moe_err(e, MOE_EUNSUPPORTED, "config.json: scoring_func '%s' is not "
							    "supported (softmax, sigmoid)",
				       json_string_value(sf));
	} else {
		hp->n_ff = inter;
	}
	if (!strcmp(a->name, "deepseek2")) {
		MOE_TRY(js_u32(cfg, "q_lora_rank", &hp->q_lora_rank, false, e));
		MOE_TRY(js_u32(cfg, "kv_lora_rank", &hp->kv_lora_rank, false, e));
		MOE_TRY(js_u32(cfg, "qk_rope_head_dim", &hp->rope_head_dim, false, e));
		uint32_t nope = 0;
		MOE_TRY(js_u32(cfg, "qk_nope_head_dim", &nope, false, e));
		uint64_t hd = (uint64_t)nope + hp->rope_head_dim;
		hp->head_dim = hd > UINT32_MAX ? UINT32_MAX : (uint32_t)hd;
		MOE_TRY(js_u32(cfg, "v_head_dim", &hp->head_dim_v, false, e));
		hp->n_rot = hp->rope_head_dim;
	}
	if (!strcmp(a->name, "deepseek2")) {
		MOE_TRY(js_u32(cfg, "n_group", &hp->expert_groups, false, e));
		MOE_TRY(js_u32(cfg, "topk_group", &hp->expert_groups_used, false, e));
		/* V3's default method is noaux_tc, V2's greedy */
		json_t *tm = json_object_get(cfg, "topk_method");
		const char *m = json_is_string(tm) ? json_string_value(tm)
				: hp->gating == MOE_GATING_SIGMOID ? "noaux_tc" : "greedy";
		if (!strcmp(m, "greedy"))
			hp->expert_groups = hp->expert_groups_used = 1;
		else if (!strcmp(m, "group_limited_greedy"))
			hp->expert_group_score = MOE_GROUP_SCORE_MAX;
		else if (!strcmp(m, "noaux_tc"))
			hp->expert_group_score = MOE_GROUP_SCORE_TOP2SUM;
		else
			return moe_err(e, MOE_EUNSUPPORTED, "config.json: topk_method '%s' is not "
							    "supported (greedy, group_limited_greedy, "
							    "noaux_tc)", m);
	}
	if (!strcmp(a->name, "gpt-oss")) {
		MOE_TRY(js_u32(cfg, "sliding_window", &hp->sliding_window, false, e));
		MOE_TRY(js_f64(cfg, "swiglu_limit", &hp->swiglu_limit, e));
		json_t *lt = json_object_get(cfg, "layer_types");
		if (lt && !json_is_null(lt)) {
			if (!json_is_array(lt) || json_array_size(lt) != hp->n_layer)
				return moe_err(e, MOE_EFORMAT, "config.json: field 'layer_types' must be a "
							       "list of num_hidden_layers (%u) names",
					       hp->n_layer);
			for (uint32_t il = 0; il < hp->n_layer && il < MOE_HP_MAX_LAYERS; il++) {
				const char *t = json_string_value(json_array_get(lt, il));
				if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
					return moe_err(e, MOE_EFORMAT, "config.json: layer_types[%u] must "
								       "be \"sliding_attention\" or "
								       "\"full_attention\"", il);
				if (!strcmp(t, "sliding_attention"))
					hp->sliding_layers[il / 8] |= (uint8_t)(1u << (il % 8));
			}
		} else if (hp->sliding_window) {
			sliding_all(hp, 2);
		}
	}
	if (!strcmp(a->name, "phimoe")) {
		MOE_TRY(js_u32(cfg, "sliding_window", &hp->sliding_window, false, e));
		MOE_TRY(js_f64(cfg, "router_jitter_noise", &hp->router_jitter_eps, e));
		if (hp->sliding_window)
			sliding_all(hp, 1);
	}
	if (!strcmp(a->name, "granitemoe")) {
		uint32_t sh = 0;
		MOE_TRY(js_u32(cfg, "shared_intermediate_size", &sh, false, e));
		if (sh) {
			hp->n_ff_shexp = sh;
			hp->n_expert_shared = 1;
		}
		MOE_TRY(js_f64(cfg, "embedding_multiplier", &hp->embedding_scale, e));
		MOE_TRY(js_f64(cfg, "residual_multiplier", &hp->residual_scale, e));
		MOE_TRY(js_f64(cfg, "attention_multiplier", &hp->attention_scale, e));
		MOE_TRY(js_f64(cfg, "logits_scaling", &hp->logit_scale, e));
	}
	bool bias = false;
	MOE_TRY(js_bool(cfg, "attention_bias", &bias, e));
	hp->qkv_bias = bias || !strcmp(a->name, "qwen2") || !strcmp(a->name, "qwen2moe");
	bool tied = false;
	MOE_TRY(js_bool(cfg, "tie_word_embeddings", &tied, e));
	hp->tied_embeddings = tied || !has_lm_head;

	json_t *rs = json_object_get(cfg, "rope_scaling");
	if (json_is_object(rs)) {
		json_t *t = json_object_get(rs, "rope_type");
		if (!json_is_string(t))
			t = json_object_get(rs, "type");
		const char *ty = json_is_string(t) ? json_string_value(t) : "";
		if (!strcmp(ty, "linear"))
			hp->rope_scaling = MOE_ROPE_SCALING_LINEAR;
		else if (!strcmp(ty, "yarn"))
			hp->rope_scaling = MOE_ROPE_SCALING_YARN;
		else if (!strcmp(ty, "llama3"))
			hp->rope_scaling = MOE_ROPE_SCALING_LLAMA3;
		else if (!strcmp(ty, "longrope"))
			hp->rope_scaling = MOE_ROPE_SCALING_LONGROPE;
		else if (*ty && strcmp(ty, "default"))
			return moe_err(e, MOE_EUNSUPPORTED,
				       "config.json: rope_scaling type '%s' is not supported "
				       "(linear, yarn, llama3, longrope)", ty);
		if (hp->rope_scaling != MOE_ROPE_SCALING_NONE) {
			if (hp->rope_scaling != MOE_ROPE_SCALING_LONGROPE)
				MOE_TRY(js_f64(rs, "factor", &hp->rope_factor, e));
			MOE_TRY(js_u32(rs, "original_max_position_embeddings", &hp->rope_orig_ctx,
				       false, e));
			if (!hp->rope_orig_ctx)
				MOE_TRY(js_u32(cfg, "original_max_position_embeddings",
					       &hp->rope_orig_ctx, false, e));
		}
		if (hp->rope_scaling == MOE_ROPE_SCALING_YARN) {
			MOE_TRY(js_f64(rs, "beta_fast", &hp->rope_beta_fast, e));
			MOE_TRY(js_f64(rs, "beta_slow", &hp->rope_beta_slow, e));
			MOE_TRY(js_bool(rs, "truncate", &hp->rope_yarn_truncate, e));
			hp->rope_mscale = yarn_default_mscale((double)(float)hp->rope_factor);
			MOE_TRY(js_f64(rs, "attention_factor", &hp->rope_mscale, e));
			/* DeepSeek: mscale = 1 + 0.1 mscale_all_dim ln(factor), kept as
			 * GGUF's yarn_log_multiplier (0.1 mscale_all_dim) */
			double all = 0;
			MOE_TRY(js_f64(rs, "mscale_all_dim", &all, e));
			hp->rope_yarn_log_mul = (double)(float)(0.1 * all);
		}
		if (hp->rope_scaling == MOE_ROPE_SCALING_LONGROPE) {
			json_t *sm = json_object_get(rs, "short_mscale"), *lm = json_object_get(rs, "long_mscale");
			if (!json_is_number(sm) || !json_is_number(lm))
				return moe_err(e, MOE_EFORMAT, "config.json: rope_scaling.short_mscale and "
							       "long_mscale must be numbers (LongRoPE)");
			hp->rope_mscale = json_number_value(sm);
			hp->rope_mscale_long = json_number_value(lm);
		}
	}
	if (!hp->head_dim && hp->n_head)
		hp->head_dim = hp->n_embd / hp->n_head;
	if (!hp->head_dim_v)
		hp->head_dim_v = hp->head_dim;
	if (!hp->n_rot) {
		double partial = 1.0;
		MOE_TRY(js_f64(cfg, "partial_rotary_factor", &partial, e));
		/* checked as a double before it becomes a count */
		if (!(partial > 0 && partial <= 1))
			return moe_err(e, MOE_EFORMAT, "config.json: field 'partial_rotary_factor' is %g: "
						       "must be in (0, 1]", partial);
		hp->n_rot = (uint32_t)(hp->head_dim * partial);
	}
	finish(hp, a);
	return 0;
}

int moe_hparams_from_hf(moe_hparams *hp, const char *config_json, bool has_lm_head,
			moe_error *e)
{
	json_error_t je;
	json_t *cfg = json_loads(config_json, 0, &je);
	if (!cfg)
		return moe_err(e, MOE_EFORMAT, "config.json: line %d: %s", je.line, je.text);
	if (!json_is_object(cfg)) {
		json_decref(cfg);
		return moe_err(e, MOE_EFORMAT, "config.json: not a JSON object");
	}
	int rc = hf_from_config(hp, cfg, has_lm_head, e);
	json_decref(cfg);
	return rc;
}

/* ------------------------------------------------------------ JSON form */

static const char *rope_kind_name(moe_rope_kind k)
{
	return k == MOE_ROPE_NEOX ? "neox" : "norm";
}
static const char *rope_scaling_name(moe_rope_scaling s)
{
	switch (s) {
	case MOE_ROPE_SCALING_LINEAR: return "linear";
	case MOE_ROPE_SCALING_YARN: return "yarn";
	case MOE_ROPE_SCALING_LLAMA3: return "llama3";
	case MOE_ROPE_SCALING_LONGROPE: return "longrope";
	default: return "none";
	}
}
static const char *qk_norm_name(moe_qk_norm q)
{
	return q == MOE_QK_NORM_HEAD ? "per_head" : q == MOE_QK_NORM_FULL ? "full" : "none";
}

/* Round doubles to float precision so GGUF (f32 keys) and config.json
 * (decimal) sources print the same value. */
static json_t *jreal(double v)
{
	return json_real((double)(float)v);
}

json_t *moe_hparams_to_json(const moe_hparams *hp)
{
	json_t *o = json_object();
	json_t *rope = json_object();
	json_object_set_new(rope, "kind", json_string(rope_kind_name(hp->rope_kind)));
	json_object_set_new(rope, "base", jreal(hp->rope_base));
	json_object_set_new(rope, "n_rot", json_integer(hp->n_rot));
	json_object_set_new(rope, "scaling", json_string(rope_scaling_name(hp->rope_scaling)));
	json_object_set_new(rope, "factor", jreal(hp->rope_factor));
	json_object_set_new(rope, "orig_ctx", json_integer(hp->rope_orig_ctx));
	json_object_set_new(rope, "beta_fast", jreal(hp->rope_beta_fast));
	json_object_set_new(rope, "beta_slow", jreal(hp->rope_beta_slow));
	json_object_set_new(rope, "yarn_log_multiplier", jreal(hp->rope_yarn_log_mul));
	json_object_set_new(rope, "yarn_truncate", json_boolean(hp->rope_yarn_truncate));
	json_object_set_new(rope, "mscale", jreal(hp->rope_mscale));
	json_object_set_new(rope, "mscale_long", jreal(hp->rope_mscale_long));
#define U(k) json_object_set_new(o, #k, json_integer(hp->k))
	U(n_vocab); U(n_ctx_train); U(n_embd); U(n_layer); U(n_head); U(n_head_kv); U(head_dim);
	U(head_dim_v); U(n_ff); U(n_expert); U(n_expert_used); U(n_ff_exp); U(n_expert_shared);
	U(n_ff_shexp); U(n_layer_dense_lead); U(q_lora_rank); U(kv_lora_rank); U(rope_head_dim);
#undef U
	json_object_set_new(o, "rope", rope);
	json_object_set_new(o, "norm", json_string(hp->norm_kind == MOE_NORM_LAYER ? "layer" : "rms"));
	json_object_set_new(o, "norm_eps", jreal(hp->norm_eps));
	json_object_set_new(o, "qk_norm", json_string(qk_norm_name(hp->qk_norm)));
	json_object_set_new(o, "topk_renorm", json_boolean(hp->topk_renorm));
	json_object_set_new(o, "expert_gating",
			    json_string(hp->gating == MOE_GATING_SIGMOID ? "sigmoid" : "softmax"));
	json_object_set_new(o, "expert_weights_scale", jreal(hp->expert_weights_scale));
	json_object_set_new(o, "shared_expert_gate", json_boolean(hp->shared_expert_gate));
	json_object_set_new(o, "tied_embeddings", json_boolean(hp->tied_embeddings));
	json_object_set_new(o, "qkv_bias", json_boolean(hp->qkv_bias));
	json_object_set_new(o, "embedding_scale", jreal(hp->embedding_scale));
	json_object_set_new(o, "residual_scale", jreal(hp->residual_scale));
	json_object_set_new(o, "attention_scale", jreal(hp->attention_scale));
	json_object_set_new(o, "logit_scale", jreal(hp->logit_scale));
	json_object_set_new(o, "attention", json_string(hp->attention == MOE_ATTN_MLA ? "mla" : "mha"));
	json_object_set_new(o, "kq_scale", jreal(hp->kq_scale));
	json_object_set_new(o, "expert_groups", json_integer(hp->expert_groups));
	json_object_set_new(o, "expert_groups_used", json_integer(hp->expert_groups_used));
	json_object_set_new(o, "expert_group_score",
			    json_string(hp->expert_group_score == MOE_GROUP_SCORE_TOP2SUM ? "top2sum"
											   : "max"));
	json_object_set_new(o, "expert_router", json_string(hp->expert_router == MOE_ROUTER_SPARSEMIXER
								    ? "sparsemixer" : "topk"));
	json_object_set_new(o, "router_jitter_eps", jreal(hp->router_jitter_eps));
	json_object_set_new(o, "sliding_window", json_integer(hp->sliding_window));
	json_t *sl = json_array();
	for (uint32_t il = 0; il < hp->n_layer && il < MOE_HP_MAX_LAYERS; il++)
		if (moe_hparams_layer_slides(hp, il))
			json_array_append_new(sl, json_integer(il));
	json_object_set_new(o, "sliding_layers", sl);
	json_object_set_new(o, "attn_sinks", json_boolean(hp->attn_sinks));
	json_object_set_new(o, "expert_bias", json_boolean(hp->expert_bias));
	json_object_set_new(o, "ffn_act", json_string(hp->ffn_act == MOE_ACT_SWIGLU_OAI ? "swiglu_oai"
											: "silu"));
	json_object_set_new(o, "swiglu_alpha", jreal(hp->swiglu_alpha));
	json_object_set_new(o, "swiglu_limit", jreal(hp->swiglu_limit));
	return o;
}

static int jget_u32(const json_t *o, const char *k, uint32_t *out, moe_error *e)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > (json_int_t)UINT32_MAX)
		return moe_err(e, MOE_EFORMAT, "metadata: hparams.%s missing or not a count", k);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}
static int jget_f64(const json_t *o, const char *k, double *out, moe_error *e)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_number(v))
		return moe_err(e, MOE_EFORMAT, "metadata: hparams.%s missing or not a number", k);
	*out = json_number_value(v);
	return 0;
}
static int jget_bool(const json_t *o, const char *k, bool *out, moe_error *e)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_boolean(v))
		return moe_err(e, MOE_EFORMAT, "metadata: hparams.%s missing or not a boolean", k);
	*out = json_is_true(v);
	return 0;
}
static int jget_enum(const json_t *o, const char *k, const char *const *names, int *out,
		     moe_error *e)
{
	json_t *v = json_object_get(o, k);
	if (json_is_string(v))
		for (int i = 0; names[i]; i++)
			if (!strcmp(names[i], json_string_value(v))) {
				*out = i;
				return 0;
			}
	return moe_err(e, MOE_EFORMAT, "metadata: hparams.%s missing or not one of the known values",
		       k);
}

/* The fields added for issue 14 are optional: files written before them
 * take the defaults (what those files meant). */
static int jopt_u32(const json_t *o, const char *k, uint32_t *out, moe_error *e)
{
	return json_object_get(o, k) ? jget_u32(o, k, out, e) : 0;
}
static int jopt_f64(const json_t *o, const char *k, double *out, moe_error *e)
{
	return json_object_get(o, k) ? jget_f64(o, k, out, e) : 0;
}
static int jopt_bool(const json_t *o, const char *k, bool *out, moe_error *e)
{
	return json_object_get(o, k) ? jget_bool(o, k, out, e) : 0;
}
static int jopt_enum(const json_t *o, const char *k, const char *const *names, int *out,
		     moe_error *e)
{
	return json_object_get(o, k) ? jget_enum(o, k, names, out, e) : 0;
}

static int from_json_issue14(moe_hparams *hp, const json_t *o, const json_t *rope, moe_error *e)
{
	static const char *const attn[] = {"mha", "mla", NULL};
	static const char *const gscore[] = {"max", "top2sum", NULL};
	static const char *const routers[] = {"topk", "sparsemixer", NULL};
	static const char *const acts[] = {"silu", "swiglu_oai", NULL};
	/* what the engine computed before these fields existed (the files of
	 * that time that it ran: ordinary attention scaled by 1/sqrt(head)) */
	moe_hparams_set_defaults14(hp);
	int v = (int)hp->attention;
	MOE_TRY(jopt_enum(o, "attention", attn, &v, e));
	hp->attention = (moe_attention)v;
	MOE_TRY(jopt_f64(o, "kq_scale", &hp->kq_scale, e));
	MOE_TRY(jopt_u32(o, "expert_groups", &hp->expert_groups, e));
	MOE_TRY(jopt_u32(o, "expert_groups_used", &hp->expert_groups_used, e));
	v = 0;
	MOE_TRY(jopt_enum(o, "expert_group_score", gscore, &v, e));
	hp->expert_group_score = (moe_group_score)v;
	v = 0;
	MOE_TRY(jopt_enum(o, "expert_router", routers, &v, e));
	hp->expert_router = (moe_router)v;
	MOE_TRY(jopt_f64(o, "router_jitter_eps", &hp->router_jitter_eps, e));
	MOE_TRY(jopt_f64(rope, "beta_fast", &hp->rope_beta_fast, e));
	MOE_TRY(jopt_f64(rope, "beta_slow", &hp->rope_beta_slow, e));
	MOE_TRY(jopt_f64(rope, "yarn_log_multiplier", &hp->rope_yarn_log_mul, e));
	MOE_TRY(jopt_bool(rope, "yarn_truncate", &hp->rope_yarn_truncate, e));
	/* YaRN's default attention factor, which is what the engine applied
	 * before the field existed */
	if (hp->rope_scaling == MOE_ROPE_SCALING_YARN)
		hp->rope_mscale = yarn_default_mscale((double)(float)hp->rope_factor);
	MOE_TRY(jopt_f64(rope, "mscale", &hp->rope_mscale, e));
	hp->rope_mscale_long = hp->rope_mscale;
	MOE_TRY(jopt_f64(rope, "mscale_long", &hp->rope_mscale_long, e));
	MOE_TRY(jopt_u32(o, "sliding_window", &hp->sliding_window, e));
	const json_t *sl = json_object_get(o, "sliding_layers");
	if (sl) {
		size_t i;
		const json_t *x;
		if (!json_is_array(sl))
			return moe_err(e, MOE_EFORMAT, "metadata: hparams.sliding_layers is not a list");
		json_array_foreach(sl, i, x) {
			json_int_t il = json_is_integer(x) ? json_integer_value(x) : -1;
			if (il < 0 || il >= (json_int_t)hp->n_layer || il >= (json_int_t)MOE_HP_MAX_LAYERS)
				return moe_err(e, MOE_EFORMAT, "metadata: hparams.sliding_layers[%zu] is "
							       "not a layer index below n_layer (%u)",
					       i, hp->n_layer);
			hp->sliding_layers[il / 8] |= (uint8_t)(1u << (il % 8));
		}
	}
	MOE_TRY(jopt_bool(o, "attn_sinks", &hp->attn_sinks, e));
	MOE_TRY(jopt_bool(o, "expert_bias", &hp->expert_bias, e));
	v = 0;
	MOE_TRY(jopt_enum(o, "ffn_act", acts, &v, e));
	hp->ffn_act = (moe_ffn_act)v;
	MOE_TRY(jopt_f64(o, "swiglu_alpha", &hp->swiglu_alpha, e));
	MOE_TRY(jopt_f64(o, "swiglu_limit", &hp->swiglu_limit, e));
	return 0;
}

int moe_hparams_from_json(moe_hparams *hp, const json_t *o, moe_error *e)
{
	static const char *const rope_kinds[] = {"norm", "neox", NULL};
	static const char *const scalings[] = {"none", "linear", "yarn", "llama3", "longrope", NULL};
	static const char *const norms[] = {"rms", "layer", NULL};
	static const char *const qk[] = {"none", "per_head", "full", NULL};
	static const char *const gatings[] = {"softmax", "sigmoid", NULL};
	memset(hp, 0, sizeof *hp);
	if (!json_is_object(o))
		return moe_err(e, MOE_EFORMAT, "metadata: hparams missing");
#define U(k) MOE_TRY(jget_u32(o, #k, &hp->k, e))
	U(n_vocab); U(n_ctx_train); U(n_embd); U(n_layer); U(n_head); U(n_head_kv); U(head_dim);
	U(head_dim_v); U(n_ff); U(n_expert); U(n_expert_used); U(n_ff_exp); U(n_expert_shared);
	U(n_ff_shexp); U(n_layer_dense_lead); U(q_lora_rank); U(kv_lora_rank); U(rope_head_dim);
#undef U
	const json_t *rope = json_object_get(o, "rope");
	if (!json_is_object(rope))
		return moe_err(e, MOE_EFORMAT, "metadata: hparams.rope missing");
	int v;
	MOE_TRY(jget_enum(rope, "kind", rope_kinds, &v, e));
	hp->rope_kind = (moe_rope_kind)v;
	MOE_TRY(jget_enum(rope, "scaling", scalings, &v, e));
	hp->rope_scaling = (moe_rope_scaling)v;
	MOE_TRY(jget_f64(rope, "base", &hp->rope_base, e));
	MOE_TRY(jget_f64(rope, "factor", &hp->rope_factor, e));
	MOE_TRY(jget_u32(rope, "n_rot", &hp->n_rot, e));
	MOE_TRY(jget_u32(rope, "orig_ctx", &hp->rope_orig_ctx, e));
	MOE_TRY(jget_enum(o, "norm", norms, &v, e));
	hp->norm_kind = (moe_norm_kind)v;
	MOE_TRY(jget_enum(o, "qk_norm", qk, &v, e));
	hp->qk_norm = (moe_qk_norm)v;
	MOE_TRY(jget_enum(o, "expert_gating", gatings, &v, e));
	hp->gating = (moe_gating)v;
	MOE_TRY(jget_f64(o, "norm_eps", &hp->norm_eps, e));
	MOE_TRY(jget_bool(o, "topk_renorm", &hp->topk_renorm, e));
	MOE_TRY(jget_f64(o, "expert_weights_scale", &hp->expert_weights_scale, e));
	MOE_TRY(jget_bool(o, "shared_expert_gate", &hp->shared_expert_gate, e));
	MOE_TRY(jget_bool(o, "tied_embeddings", &hp->tied_embeddings, e));
	MOE_TRY(jget_bool(o, "qkv_bias", &hp->qkv_bias, e));
	MOE_TRY(jget_f64(o, "embedding_scale", &hp->embedding_scale, e));
	MOE_TRY(jget_f64(o, "residual_scale", &hp->residual_scale, e));
	MOE_TRY(jget_f64(o, "attention_scale", &hp->attention_scale, e));
	MOE_TRY(jget_f64(o, "logit_scale", &hp->logit_scale, e));
	MOE_TRY(from_json_issue14(hp, o, rope, e));
	return moe_hparams_check(hp, e);
}

