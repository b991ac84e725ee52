/* arch.c — the architecture table (what each architecture is, whether the
 * engine runs it) and the canonical tensor names. */
#include "arch.h"
#include "uth.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const hf_llama[] = {"LlamaForCausalLM", "MistralForCausalLM",
				       "MixtralForCausalLM", NULL};
static const char *const hf_qwen2[] = {"Qwen2ForCausalLM", NULL};
static const char *const hf_qwen2moe[] = {"Qwen2MoeForCausalLM", NULL};
static const char *const hf_qwen3[] = {"Qwen3ForCausalLM", NULL};
static const char *const hf_qwen3moe[] = {"Qwen3MoeForCausalLM", NULL};
static const char *const hf_olmoe[] = {"OlmoeForCausalLM", NULL};
static const char *const hf_deepseek2[] = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", NULL};
/* transformers' class is PhimoeForCausalLM; the published Phi-3.5-MoE
 * config.json says PhiMoEForCausalLM (its remote code). */
static const char *const hf_phimoe[] = {"PhimoeForCausalLM", "PhiMoEForCausalLM", NULL};
static const char *const hf_granitemoe[] = {"GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM",
					    NULL};
static const char *const hf_gptoss[] = {"GptOssForCausalLM", NULL};

/* Llama, Mistral and Mixtral share one forward pass (Mixtral = Llama with
 * expert FFNs), as in GGUF, where all three say "llama".  The last column
 * says whether the engine runs the architecture (the others convert). */
static const moe_arch_info arch_table[] = {
	{"llama", "llama", hf_llama, MOE_ROPE_NORM, MOE_QK_NORM_NONE, MOE_NORM_RMS, true, true,
	 true},
	{"qwen2", "qwen2", hf_qwen2, MOE_ROPE_NEOX, MOE_QK_NORM_NONE, MOE_NORM_RMS, false, false,
	 true},
	{"qwen2moe", "qwen2moe", hf_qwen2moe, MOE_ROPE_NEOX, MOE_QK_NORM_NONE, MOE_NORM_RMS, false,
	 false, true},
	{"qwen3", "qwen3", hf_qwen3, MOE_ROPE_NEOX, MOE_QK_NORM_HEAD, MOE_NORM_RMS, false, false,
	 true},
	{"qwen3moe", "qwen3moe", hf_qwen3moe, MOE_ROPE_NEOX, MOE_QK_NORM_HEAD, MOE_NORM_RMS, true,
	 false, true},
	{"olmoe", "olmoe", hf_olmoe, MOE_ROPE_NEOX, MOE_QK_NORM_FULL, MOE_NORM_RMS, false, false,
	 true},
	{"deepseek2", "deepseek2", hf_deepseek2, MOE_ROPE_NORM, MOE_QK_NORM_NONE, MOE_NORM_RMS,
	 false, false, true},
	{"phimoe", "phimoe", hf_phimoe, MOE_ROPE_NEOX, MOE_QK_NORM_NONE, MOE_NORM_LAYER, true, false,
	 true},
	{"granitemoe", "granitemoe", hf_granitemoe, MOE_ROPE_NORM, MOE_QK_NORM_NONE, MOE_NORM_RMS,
	 true, true, true},
	{"gpt-oss", "gpt-oss", hf_gptoss, MOE_ROPE_NEOX, MOE_QK_NORM_NONE, MOE_NORM_RMS, true, false,
	 true},
};
#define N_ARCH (sizeof arch_table / sizeof arch_table[0])

const moe_arch_info *moe_arch_by_name(const char *name)
{
	for (size_t i = 0; i < N_ARCH; i++)
		if (!strcmp(arch_table[i].name, name))
			return &arch_table[i];
	return NULL;
}

const moe_arch_info *moe_arch_by_gguf(const char *gguf_arch)
{
	for (size_t i = 0; i < N_ARCH; i++)
		if (!strcmp(arch_table[i].gguf_name, gguf_arch))
			return &arch_table[i];
	return NULL;
}

const moe_arch_info *moe_arch_by_hf(const char *hf_arch)
{
	for (size_t i = 0; i < N_ARCH; i++)
		for (const char *const *n = arch_table[i].hf_names; *n; n++)
			if (!strcmp(*n, hf_arch))
				return &arch_table[i];
	return NULL;
}

const char *moe_arch_supported_list(void)
{
	return "llama, mistral, mixtral, qwen2, qwen2moe, qwen3, qwen3moe, olmoe, deepseek2, "
	       "phimoe, granitemoe, gpt-oss";
}

static char runnable_list[256];

/* from the table's "runs" column, so the message cannot disagree with what
 * the loader accepts (llama's entry also stands for mistral and mixtral,
 * which share its forward pass) */
static void build_runnable_list(void)
{
	size_t len = 0;
	for (size_t i = 0; i < N_ARCH; i++) {
		if (!arch_table[i].runs)
			continue;
		const char *name = strcmp(arch_table[i].name, "llama") ? arch_table[i].name
								: "llama, mistral, mixtral";
		len += (size_t)snprintf(runnable_list + len, sizeof runnable_list - len, "%s%s",
					len ? ", " : "", name);
	}
}

const char *moe_arch_runnable_list(void)
{
	/* once: moe-serve loads models from several threads */
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, build_runnable_list);
	return runnable_list;
}

/* ------------------------------------------------------- tensor names */

/* GGUF base name -> role, for names that differ from the role name. */
static int role_of_base(const char *base, bool is_bias)
{
	char buf[80];
	if (!strcmp(base, "exp_probs_b"))
		return MOE_UTH_ROLE_FFN_EXP_PROBS_B;
	snprintf(buf, sizeof buf, "%s%s", base, is_bias ? "_bias" : "");
	int r = moe_uth_role_from_name(buf);
	return r > 0 ? r : -1;
}

int moe_arch_place_canonical(const char *name, moe_tensor_place *p, moe_error *e)
{
	memset(p, 0, sizeof *p);
	p->layer = p->expert = -1;
	if (strlen(name) >= sizeof p->name)
		return moe_err(e, MOE_EFORMAT, "tensor name '%.60s...' too long", name);
	snprintf(p->name, sizeof p->name, "%s", name);
	char base[64], kind[16];
	unsigned l, x;
	int n = 0;
	if (sscanf(name, "blk.%u.%63[a-z_].%u.%15[a-z]%n", &l, base, &x, kind, &n) == 4 &&
	    name[n] == '\0') {
		p->layer = (int)l;
		p->expert = (int)x;
	} else if (n = 0, sscanf(name, "blk.%u.%63[a-z_0-9].%15[a-z]%n", &l, base, kind, &n) == 3 &&
		   name[n] == '\0') {
		p->layer = (int)l;
	} else if (n = 0, sscanf(name, "%63[a-z_].%15[a-z]%n", base, kind, &n) == 2 &&
		   name[n] == '\0') {
	} else {
		return moe_err(e, MOE_ENOTFOUND, "tensor '%s': name not understood", name);
	}
	if (strcmp(kind, "weight") && strcmp(kind, "bias"))
		return moe_err(e, MOE_ENOTFOUND, "tensor '%s': name not understood", name);
	if (p->layer > 0xFFFE || p->expert > 0xFFFE)
		return moe_err(e, MOE_EFORMAT, "tensor '%s': layer or expert index too large", name);
	p->role = role_of_base(base, !strcmp(kind, "bias"));
	if (p->role < 0)
		return moe_err(e, MOE_ENOTFOUND, "tensor '%s': unknown tensor kind '%s'", name, base);
	return 0;
}

/* HF suffix (after "model.layers.N.") -> GGUF base. '#' stands for the
 * expert index. */
static const struct { const char *hf, *base; } hf_layer_map[] = {
	{"input_layernorm", "attn_norm"},
	{"self_attn.q_proj", "attn_q"},
	{"self_attn.k_proj", "attn_k"},
	{"self_attn.v_proj", "attn_v"},
	{"self_attn.o_proj", "attn_output"},
	{"self_attn.q_norm", "attn_q_norm"},
	{"self_attn.k_norm", "attn_k_norm"},
	{"self_attn.q_a_proj", "attn_q_a"},
	{"self_attn.q_a_layernorm", "attn_q_a_norm"},
	{"self_attn.q_b_proj", "attn_q_b"},
	{"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
	{"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
	{"self_attn.kv_b_proj", "attn_kv_b"},
	{"post_attention_layernorm", "ffn_norm"},
	{"mlp.gate_proj", "ffn_gate"},
	{"mlp.up_proj", "ffn_up"},
	{"mlp.down_proj", "ffn_down"},
	{"mlp.gate", "ffn_gate_inp"},
	{"block_sparse_moe.gate", "ffn_gate_inp"},
	{"block_sparse_moe.router.layer", "ffn_gate_inp"},
	{"mlp.experts.#.gate_proj", "ffn_gate"},
	{"mlp.experts.#.up_proj", "ffn_up"},
	{"mlp.experts.#.down_proj", "ffn_down"},
	{"block_sparse_moe.experts.#.w1", "ffn_gate"},
	{"block_sparse_moe.experts.#.w3", "ffn_up"},
	{"block_sparse_moe.experts.#.w2", "ffn_down"},
	{"mlp.shared_expert.gate_proj", "ffn_gate_shexp"},
	{"mlp.shared_expert.up_proj", "ffn_up_shexp"},
	{"mlp.shared_expert.down_proj", "ffn_down_shexp"},
	{"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
	{"mlp.shared_experts.up_proj", "ffn_up_shexp"},
	{"mlp.shared_experts.down_proj", "ffn_down_shexp"},
	{"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
	{"mlp.router", "ffn_gate_inp"},
	{"shared_mlp.output_linear", "ffn_down_shexp"},
	/* GraniteMoE stacks its experts: handled by the converter. */
	{"block_sparse_moe.input_linear", "ffn_gate_up_exps"},
	{"block_sparse_moe.output_linear", "ffn_down_exps"},
	/* GraniteMoeShared: gate rows ++ up rows of the shared expert. */
	{"shared_mlp.input_linear", "ffn_gate_up_shexp"},
};

/* gpt-oss stacks its experts without a .weight suffix: (E, D, 2F) gate/up
 * interleaved in columns, (E, F, D) down, biases (E, 2F) and (E, D); the
 * published checkpoints hold MXFP4 blocks and scales instead.  Reported as
 * "blk.N.oai_<what>" for the converter to split. */
static const struct { const char *hf, *canon; } oai_experts[] = {
	{"mlp.experts.gate_up_proj", "oai_gate_up_exps.weight"},
	{"mlp.experts.gate_up_proj_bias", "oai_gate_up_exps.bias"},
	{"mlp.experts.down_proj", "oai_down_exps.weight"},
	{"mlp.experts.down_proj_bias", "oai_down_exps.bias"},
	{"mlp.experts.gate_up_proj_blocks", "oai_gate_up_exps.blocks"},
	{"mlp.experts.gate_up_proj_scales", "oai_gate_up_exps.scales"},
	{"mlp.experts.down_proj_blocks", "oai_down_exps.blocks"},
	{"mlp.experts.down_proj_scales", "oai_down_exps.scales"},
};

/* Match `s` against pattern `pat` where '#' matches a decimal number. */
static bool match_hash(const char *s, const char *pat, int *num)
{
	*num = -1;
	while (*pat) {
		if (*pat == '#') {
			if (*s < '0' || *s > '9')
				return false;
			long v = 0;
			while (*s >= '0' && *s <= '9') {
				v = v * 10 + (*s++ - '0');
				if (v > 0xFFFE)
					return false;
			}
			*num = (int)v;
			pat++;
		} else if (*s++ != *pat++) {
			return false;
		}
	}
	return *s == '\0';
}

int moe_arch_map_hf_name(const moe_arch_info *a, const char *hf, moe_tensor_place *p,
			 moe_error *e)
{
	(void)a;
	char canon[96];
	static const struct { const char *hf, *canon; } top[] = {
		{"model.embed_tokens.weight", "token_embd.weight"},
		{"model.norm.weight", "output_norm.weight"},
		{"model.norm.bias", "output_norm.bias"},
		{"lm_head.weight", "output.weight"},
		{"lm_head.bias", "output.bias"},
	};
	for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
		if (!strcmp(hf, top[i].hf))
			return moe_arch_place_canonical(top[i].canon, p, e);

	unsigned layer;
	int n = 0;
	if (sscanf(hf, "model.layers.%u.%n", &layer, &n) != 1 || n == 0 || layer > 0xFFFE)
		return moe_err(e, MOE_ENOTFOUND, "tensor '%s': name not understood", hf);
	const char *rest = hf + n;
	if (!strcmp(rest, "self_attn.sinks")) {
		snprintf(canon, sizeof canon, "blk.%u.attn_sinks.weight", layer);
		return moe_arch_place_canonical(canon, p, e);
	}
	for (size_t i = 0; i < sizeof oai_experts / sizeof oai_experts[0]; i++)
		if (!strcmp(rest, oai_experts[i].hf)) {
			memset(p, 0, sizeof *p);
			snprintf(p->name, sizeof p->name, "blk.%u.%s", layer, oai_experts[i].canon);
			p->layer = (int)layer;
			p->expert = -1;
			p->role = MOE_UTH_ROLE_FFN_GATE;
			return 0;
		}
	const char *dot = strrchr(rest, '.');
	if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias") &&
		     strcmp(dot, ".e_score_correction_bias")))
		return moe_err(e, MOE_ENOTFOUND, "tensor '%s': name not understood", hf);
	char stem[96];
	size_t sl = (size_t)(dot - rest);
	if (sl >= sizeof stem)
		return moe_err(e, MOE_ENOTFOUND, "tensor '%s': name not understood", hf);
	memcpy(stem, rest, sl);
	stem[sl] = '\0';
	if (!strcmp(dot, ".e_score_correction_bias") && !strcmp(stem, "mlp.gate")) {
		snprintf(canon, sizeof canon, "blk.%u.exp_probs_b.bias", layer);
		return moe_arch_place_canonical(canon, p, e);
	}
	const char *suffix = dot + 1;
	for (size_t i = 0; i < sizeof hf_layer_map / sizeof hf_layer_map[0]; i++) {
		int x;
		if (!match_hash(stem, hf_layer_map[i].hf, &x))
			continue;
		const char *base = hf_layer_map[i].base;
		if (!strcmp(base, "ffn_gate_up_exps") || !strcmp(base, "ffn_down_exps") ||
		    !strcmp(base, "ffn_gate_up_shexp")) {
			memset(p, 0, sizeof *p);
			snprintf(p->name, sizeof p->name, "blk.%u.%s.%s", layer, base, suffix);
			p->layer = (int)layer;
			p->expert = -1;
			p->role = !strcmp(base, "ffn_down_exps")       ? MOE_UTH_ROLE_FFN_DOWN
				  : !strcmp(base, "ffn_gate_up_shexp") ? MOE_UTH_ROLE_FFN_GATE_SHEXP
								       : MOE_UTH_ROLE_FFN_GATE;
			return 0;
		}
		if (x >= 0)
			snprintf(canon, sizeof canon, "blk.%u.%s.%d.%s", layer, base, x, suffix);
		else
			snprintf(canon, sizeof canon, "blk.%u.%s.%s", layer, base, suffix);
		return moe_arch_place_canonical(canon, p, e);
	}
	return moe_err(e, MOE_ENOTFOUND, "tensor '%s': name not understood", hf);
}
