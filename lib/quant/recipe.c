/* recipe.c — which type each tensor gets: the recipes (llama-quantize's
 * mixes, MoE-aware), plain types, the fallback for rows that are not whole
 * super-blocks.  The table in man/moe-quant.1 documents exactly this code.
 */
#include <string.h>
#include <strings.h>

#include "quant.h"
#include "uth.h"

typedef struct recipe {
	const char *name;
	int base;  /* ffn_gate/up, attn_q/k, embedding ... */
	int high;  /* floor of the shared expert (MoE-aware rule) */
	int kind;  /* which rule set of assign() applies */
} recipe;

enum { R_Q2_K, R_Q3_K_S, R_Q3_K_M, R_Q3_K_L, R_Q4_K_S, R_Q4_K_M, R_Q5_K_S, R_Q5_K_M,
       R_Q6_K, R_Q8_0, R_IQ4_XS, R_PLAIN };

static const recipe recipes[] = {
	{"q2_k", MOE_Q2_K, MOE_Q4_K, R_Q2_K},
	{"q3_k_s", MOE_Q3_K, MOE_Q4_K, R_Q3_K_S},
	{"q3_k_m", MOE_Q3_K, MOE_Q5_K, R_Q3_K_M},
	{"q3_k_l", MOE_Q3_K, MOE_Q5_K, R_Q3_K_L},
	{"q4_k_s", MOE_Q4_K, MOE_Q5_K, R_Q4_K_S},
	{"q4_k_m", MOE_Q4_K, MOE_Q6_K, R_Q4_K_M},
	{"q5_k_s", MOE_Q5_K, MOE_Q6_K, R_Q5_K_S},
	{"q5_k_m", MOE_Q5_K, MOE_Q6_K, R_Q5_K_M},
	{"q6_k", MOE_Q6_K, MOE_Q6_K, R_Q6_K},
	{"q8_0", MOE_Q8_0, MOE_Q8_0, R_Q8_0},
	{"iq4_xs", MOE_IQ4_XS, MOE_Q5_K, R_IQ4_XS},
};
#define N_RECIPES (sizeof(recipes) / sizeof(recipes[0]))

const char *moe_quant_recipe_names(void)
{
	return "q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k q8_0 iq4_xs";
}

int moe_quant_recipe_find(const char *name, moe_quant_recipe *out)
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < N_RECIPES; i++) {
		if (strcasecmp(name, recipes[i].name) == 0) {
			out->name = recipes[i].name;
			out->base = recipes[i].base;
			out->high = recipes[i].high;
			out->kind = recipes[i].kind;
			return 0;
		}
	}
	int t = moe_type_from_name(name);
	if (t >= 0 && moe_quant_fn(t)) {
		out->name = moe_type_name(t);
		out->base = out->high = t;
		out->kind = R_PLAIN;
		return 0;
	}
	return MOE_ENOTFOUND;
}

bool moe_quant_role_is_matrix(int role)
{
	switch (role) {
	case MOE_UTH_ROLE_TOKEN_EMBD: case MOE_UTH_ROLE_OUTPUT:
	case MOE_UTH_ROLE_ATTN_Q: case MOE_UTH_ROLE_ATTN_K: case MOE_UTH_ROLE_ATTN_V:
	case MOE_UTH_ROLE_ATTN_OUTPUT: case MOE_UTH_ROLE_ATTN_QKV:
	case MOE_UTH_ROLE_FFN_GATE: case MOE_UTH_ROLE_FFN_UP: case MOE_UTH_ROLE_FFN_DOWN:
	case MOE_UTH_ROLE_FFN_GATE_SHEXP: case MOE_UTH_ROLE_FFN_UP_SHEXP:
	case MOE_UTH_ROLE_FFN_DOWN_SHEXP:
	case MOE_UTH_ROLE_ATTN_Q_A: case MOE_UTH_ROLE_ATTN_Q_B: case MOE_UTH_ROLE_ATTN_KV_A_MQA:
	case MOE_UTH_ROLE_ATTN_KV_B: case MOE_UTH_ROLE_ATTN_K_B: case MOE_UTH_ROLE_ATTN_V_B:
		return true;
	}
	return false;
}

double moe_quant_bpw(int dtype)
{
	const moe_type_traits *t = moe_type_get(dtype);
	return t ? 8.0 * t->type_size / t->block_size : 0.0;
}

/* llama-quantize's "use more bits" layers: the first and last eighth and
 * every third layer in between. */
static bool more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int at_least(int t, int floor)
{
	return moe_quant_bpw(floor) > moe_quant_bpw(t) ? floor : t;
}

int moe_quant_recipe_type(const moe_quant_recipe *r, const moe_uth_tensor *t, int n_layer,
			  int n_expert)
{
	int role = t->role, i = t->layer == MOE_UTH_NONE ? 0 : t->layer, n = n_layer > 0 ? n_layer : 1;
	int ty = r->base;

	if (!moe_quant_role_is_matrix(role) || t->n_dims < 2)
		return -1; /* kept as it is */
	if (r->kind == R_PLAIN)
		return r->base;

	switch (role) {
	case MOE_UTH_ROLE_OUTPUT:
		ty = r->kind == R_Q8_0 ? MOE_Q8_0 : MOE_Q6_K;
		break;
	case MOE_UTH_ROLE_ATTN_V:
	case MOE_UTH_ROLE_ATTN_QKV:
		switch (r->kind) {
		case R_Q2_K: ty = MOE_Q3_K; break;
		case R_Q3_K_M: ty = i < 2 ? MOE_Q5_K : MOE_Q4_K; break;
		case R_Q3_K_L: ty = MOE_Q5_K; break;
		case R_Q4_K_S: ty = i < 4 ? MOE_Q5_K : MOE_Q4_K; break;
		case R_Q4_K_M: case R_Q5_K_M: ty = more_bits(i, n) ? MOE_Q6_K : r->base; break;
		case R_IQ4_XS: ty = MOE_Q4_K; break;
		}
		break;
	case MOE_UTH_ROLE_FFN_DOWN:
	case MOE_UTH_ROLE_FFN_DOWN_SHEXP:
		switch (r->kind) {
		case R_Q2_K: ty = MOE_Q3_K; break;
		case R_Q3_K_M:
			ty = i < n / 16 ? MOE_Q5_K : more_bits(i, n) ? MOE_Q4_K : MOE_Q3_K;
			break;
		case R_Q3_K_L: ty = MOE_Q5_K; break;
		case R_Q4_K_S: ty = i < n / 8 ? MOE_Q5_K : MOE_Q4_K; break;
		case R_Q4_K_M: case R_Q5_K_M: ty = more_bits(i, n) ? MOE_Q6_K : r->base; break;
		}
		break;
	case MOE_UTH_ROLE_ATTN_OUTPUT:
		switch (r->kind) {
		case R_Q2_K: ty = MOE_Q3_K; break;
		case R_Q3_K_M: ty = MOE_Q4_K; break;
		case R_Q3_K_L: ty = MOE_Q5_K; break;
		}
		break;
	}
	/* MoE-aware: attention is a small share of an MoE model, so its K and
	 * V projections get Q8_0 and the output projection at least Q5_K
	 * (llama-quantize does this for 8 experts; here for 8 or more). */
	if (n_expert >= 8) {
		if (role == MOE_UTH_ROLE_ATTN_K || role == MOE_UTH_ROLE_ATTN_V ||
		    role == MOE_UTH_ROLE_ATTN_QKV)
			ty = MOE_Q8_0;
		else if (role == MOE_UTH_ROLE_ATTN_OUTPUT)
			ty = at_least(ty, MOE_Q5_K);
	}
	/* The shared expert sees every token, so it never drops below the
	 * recipe's high type. */
	if (role == MOE_UTH_ROLE_FFN_GATE_SHEXP || role == MOE_UTH_ROLE_FFN_UP_SHEXP ||
	    role == MOE_UTH_ROLE_FFN_DOWN_SHEXP)
		ty = at_least(ty, r->high);
	return ty;
}

int moe_quant_fallback(int dtype, uint32_t ne0)
{
	const moe_type_traits *t = moe_type_get(dtype);
	if (!t || ne0 % t->block_size == 0)
		return dtype;
	switch (dtype) {
	case MOE_Q2_K: case MOE_Q3_K: case MOE_IQ4_XS: dtype = MOE_IQ4_NL; break;
	case MOE_Q4_K: dtype = MOE_Q5_0; break;
	case MOE_Q5_K: dtype = MOE_Q5_1; break;
	case MOE_Q6_K: dtype = MOE_Q8_0; break;
	}
	t = moe_type_get(dtype);
	return ne0 % t->block_size == 0 ? dtype : MOE_F16;
}
