/* load.c — bind a UTH file's tensors to the model structure.
 *
 * Weights are pointers into the mapped file; only small vectors stored in a
 * type other than F32 (norms, biases) are converted, once, at load.  Every
 * tensor the architecture needs is checked for presence, shape and a
 * supported type before inference can start, so the forward pass never has
 * to. */
#include "model.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

static int own(moe_model *m, void *p, moe_error *e)
{
	void **o = realloc(m->owned, (m->n_owned + 1) * sizeof *o);
	if (!o) {
		free(p);
		return moe_err(e, MOE_ENOMEM, "out of memory loading model");
	}
	m->owned = o;
	m->owned[m->n_owned++] = p;
	return 0;
}

/* A matrix [heads x rows x cols] (heads 1: an ordinary matrix), bound as
 * one of heads*rows rows; the shapes come from the metadata, so a file
 * whose tensors disagree with it is refused (buffers are sized from it). */
static int get_heads(moe_model *m, const char *name, int64_t heads, int64_t rows, int64_t cols,
		     bool required, moe_weight *w, moe_error *e)
{
	memset(w, 0, sizeof *w);
	const moe_uth_tensor *t = moe_uth_find(m->file, name);
	if (!t) {
		if (required)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s' missing", m->file->path, name);
		return 0;
	}
	if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != heads || t->ne[3] != 1)
		return moe_err(e, MOE_EFORMAT,
			       "%s: tensor '%s' has shape [%u, %u, %u, %u], expected [%lld, %lld, %lld]",
			       m->file->path, name, t->ne[0], t->ne[1], t->ne[2], t->ne[3],
			       (long long)cols, (long long)rows, (long long)heads);
	/* A repacked layout is bound as its kernel type (quant.h): the same
	 * bytes, read in place by that layout's products. */
	int kt = moe_repack_ktype(t->dtype, t->layout);
	if (kt < 0)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': layout %u has no kernels for %s",
			       m->file->path, name, t->layout, moe_type_name(t->dtype));
	if (moe_kernels_check(moe_kernels_get(), kt, t->ne[0], e) < 0)
		return moe_err_prefix(e, "%s: tensor '%s'", m->file->path, name);
	uint64_t rb;
	MOE_TRY(moe_type_nbytes(kt, t->ne[0], &rb, e));
	w->name = t->name;
	w->data = moe_uth_data(m->file, t);
	w->dtype = kt;
	w->rows = (int64_t)t->ne[1] * t->ne[2];
	w->cols = t->ne[0];
	w->row_bytes = (size_t)rb;
	return 0;
}

/* A matrix [rows x cols]. */
static int get_weight(moe_model *m, const char *name, int64_t rows, int64_t cols, bool required,
		      moe_weight *w, moe_error *e)
{
	return get_heads(m, name, 1, rows, cols, required, w, e);
}

/* A vector of n floats; converted to F32 if stored otherwise. */
static int get_vec(moe_model *m, const char *name, int64_t n, bool required, const float **out,
		   moe_error *e)
{
	*out = NULL;
	const moe_uth_tensor *t = moe_uth_find(m->file, name);
	if (!t) {
		if (required)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s' missing", m->file->path, name);
		return 0;
	}
	uint64_t count = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
	if (count != (uint64_t)n)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s' has %llu elements, expected %lld",
			       m->file->path, name, (unsigned long long)count, (long long)n);
	if (t->dtype == MOE_F32) {
		*out = moe_uth_data(m->file, t);
		return 0;
	}
	const moe_type_traits *tr = moe_type_get(t->dtype);
	if (!tr || n % tr->block_size)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s': type %s not usable for a vector",
			       m->file->path, name, moe_type_name(t->dtype));
	float *f = malloc((size_t)n * sizeof *f);
	if (!f)
		return moe_err(e, MOE_ENOMEM, "out of memory loading '%s'", name);
	tr->to_float(moe_uth_data(m->file, t), f, n);
	MOE_TRY(own(m, f, e));
	*out = f;
	return 0;
}

#define NAME(fmt, ...) (snprintf(nm, sizeof nm, fmt, __VA_ARGS__), nm)

/* Ordinary (grouped) attention: q, k, v, output, biases, q/k norms. */
static int bind_attention(moe_model *m, int il, moe_layer *L, moe_error *e)
{
	const moe_hparams *hp = &m->hp;
	char nm[96];
	int64_t E = hp->n_embd, hd = hp->head_dim, nq = (int64_t)hp->n_head * hd,
		nkv = (int64_t)hp->n_head_kv * hd;
	MOE_TRY(get_weight(m, NAME("blk.%d.attn_q.weight", il), nq, E, true, &L->wq, e));
	MOE_TRY(get_weight(m, NAME("blk.%d.attn_k.weight", il), nkv, E, true, &L->wk, e));
	MOE_TRY(get_weight(m, NAME("blk.%d.attn_v.weight", il), (int64_t)hp->n_head_kv * hp->head_dim_v,
			   E, true, &L->wv, e));
	MOE_TRY(get_weight(m, NAME("blk.%d.attn_output.weight", il), E,
			   (int64_t)hp->n_head * hp->head_dim_v, true, &L->wo, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_q.bias", il), nq, hp->qkv_bias, &L->bq, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_k.bias", il), nkv, hp->qkv_bias, &L->bk, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_v.bias", il), (int64_t)hp->n_head_kv * hp->head_dim_v,
			hp->qkv_bias, &L->bv, e));
	if (hp->qk_norm != MOE_QK_NORM_NONE) {
		bool full = hp->qk_norm == MOE_QK_NORM_FULL;
		MOE_TRY(get_vec(m, NAME("blk.%d.attn_q_norm.weight", il), full ? nq : hd, true,
				&L->q_norm, e));
		MOE_TRY(get_vec(m, NAME("blk.%d.attn_k_norm.weight", il), full ? nkv : hd, true,
				&L->k_norm, e));
	}
	return 0;
}

/* Multi-head latent attention (deepseek2): see moe_layer. */
static int bind_mla(moe_model *m, int il, moe_layer *L, moe_error *e)
{
	const moe_hparams *hp = &m->hp;
	char nm[96];
	int64_t E = hp->n_embd, H = hp->n_head, nq = H * hp->head_dim, lat = hp->kv_lora_rank,
		R = hp->rope_head_dim, qr = hp->q_lora_rank;
	if (qr) {
		MOE_TRY(get_weight(m, NAME("blk.%d.attn_q_a.weight", il), qr, E, true, &L->wq_a, e));
		MOE_TRY(get_vec(m, NAME("blk.%d.attn_q_a_norm.weight", il), qr, true, &L->q_a_norm, e));
		MOE_TRY(get_weight(m, NAME("blk.%d.attn_q_b.weight", il), nq, qr, true, &L->wq_b, e));
	} else {
		MOE_TRY(get_weight(m, NAME("blk.%d.attn_q.weight", il), nq, E, true, &L->wq, e));
	}
	MOE_TRY(get_weight(m, NAME("blk.%d.attn_kv_a_mqa.weight", il), lat + R, E, true, &L->wkv_a,
			   e));
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_kv_a_norm.weight", il), lat, true, &L->kv_a_norm, e));
	MOE_TRY(get_heads(m, NAME("blk.%d.attn_k_b.weight", il), H, lat, hp->head_dim - R, true,
			  &L->wk_b, e));
	MOE_TRY(get_heads(m, NAME("blk.%d.attn_v_b.weight", il), H, hp->head_dim_v, lat, true,
			  &L->wv_b, e));
	MOE_TRY(get_weight(m, NAME("blk.%d.attn_output.weight", il), E, H * hp->head_dim_v, true,
			   &L->wo, e));
	return 0;
}

static int bind_layer(moe_model *m, int il, moe_error *e)
{
	const moe_hparams *hp = &m->hp;
	moe_layer *L = &m->layers[il];
	char nm[96];
	int64_t E = hp->n_embd;
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_norm.weight", il), E, true, &L->attn_norm, e));
	if (hp->attention == MOE_ATTN_MLA)
		MOE_TRY(bind_mla(m, il, L, e));
	else
		MOE_TRY(bind_attention(m, il, L, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.ffn_norm.weight", il), E, true, &L->ffn_norm, e));
	/* LayerNorm's biases (phimoe), and the attention output's bias where
	 * the model has one */
	bool ln = hp->norm_kind == MOE_NORM_LAYER;
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_norm.bias", il), E, ln, &L->attn_norm_b, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.ffn_norm.bias", il), E, ln, &L->ffn_norm_b, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_output.bias", il), E, false, &L->bo, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.attn_sinks.weight", il), hp->n_head, hp->attn_sinks, &L->sinks,
			e));

	L->is_moe = hp->n_expert > 0 && (uint32_t)il >= hp->n_layer_dense_lead;
	if (!L->is_moe) {
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_gate.weight", il), hp->n_ff, E, true, &L->ffn_gate, e));
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_up.weight", il), hp->n_ff, E, true, &L->ffn_up, e));
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_down.weight", il), E, hp->n_ff, true, &L->ffn_down, e));
		return 0;
	}
	MOE_TRY(get_weight(m, NAME("blk.%d.ffn_gate_inp.weight", il), hp->n_expert, E, true, &L->router, e));
	MOE_TRY(get_vec(m, NAME("blk.%d.ffn_gate_inp.bias", il), hp->n_expert, false, &L->router_b, e));
	/* DeepSeek-V3's score-correction bias (for the choice of experts only) */
	MOE_TRY(get_vec(m, NAME("blk.%d.exp_probs_b.bias", il), hp->n_expert, false, &L->exp_probs_b,
			e));
	if (hp->expert_bias) {
		/* gpt-oss: each expert's gate, up and down biases */
		size_t n = hp->n_expert;
		L->exp_gate_b = calloc(n * 3, sizeof *L->exp_gate_b);
		if (!L->exp_gate_b)
			return moe_err(e, MOE_ENOMEM, "out of memory loading model");
		MOE_TRY(own(m, (void *)L->exp_gate_b, e));
		L->exp_up_b = L->exp_gate_b + n;
		L->exp_down_b = L->exp_up_b + n;
		for (size_t x = 0; x < n; x++) {
			MOE_TRY(get_vec(m, NAME("blk.%d.ffn_gate.%zu.bias", il, x), hp->n_ff_exp, true,
					&L->exp_gate_b[x], e));
			MOE_TRY(get_vec(m, NAME("blk.%d.ffn_up.%zu.bias", il, x), hp->n_ff_exp, true,
					&L->exp_up_b[x], e));
			MOE_TRY(get_vec(m, NAME("blk.%d.ffn_down.%zu.bias", il, x), E, true,
					&L->exp_down_b[x], e));
		}
	}
	size_t nx = hp->n_expert;
	L->exp_gate = calloc(nx * 3, sizeof(moe_weight));
	if (!L->exp_gate)
		return moe_err(e, MOE_ENOMEM, "out of memory loading model");
	L->exp_up = L->exp_gate + nx;
	L->exp_down = L->exp_up + nx;
	for (size_t x = 0; x < nx; x++) {
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_gate.%zu.weight", il, x), hp->n_ff_exp, E, true,
				   &L->exp_gate[x], e));
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_up.%zu.weight", il, x), hp->n_ff_exp, E, true,
				   &L->exp_up[x], e));
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_down.%zu.weight", il, x), E, hp->n_ff_exp, true,
				   &L->exp_down[x], e));
	}
	if (hp->n_ff_shexp) {
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_gate_shexp.weight", il), hp->n_ff_shexp, E, true,
				   &L->sh_gate, e));
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_up_shexp.weight", il), hp->n_ff_shexp, E, true,
				   &L->sh_up, e));
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_down_shexp.weight", il), E, hp->n_ff_shexp, true,
				   &L->sh_down, e));
		/* [n_embd] as llama.cpp writes it, or [n_embd x 1]: both one row */
		MOE_TRY(get_weight(m, NAME("blk.%d.ffn_gate_inp_shexp.weight", il), 1, E,
				   hp->shared_expert_gate, &L->sh_router, e));
	}
#undef NAME
	return 0;
}

int moe_model_load(moe_model **out, const char *path, moe_error *e)
{
	*out = NULL;
	moe_model *m = calloc(1, sizeof *m);
	if (!m)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	int rc = moe_uth_open(&m->file, path, e);
	if (rc < 0)
		goto fail;
	json_error_t je;
	m->meta = json_loadb(m->file->meta, m->file->meta_len, 0, &je);
	if (!m->meta) {
		rc = moe_err(e, MOE_EFORMAT, "%s: metadata: %s", path, je.text);
		goto fail;
	}
	json_t *hpj = json_object_get(m->meta, "hparams");
	if (!hpj) {
		rc = moe_err(e, MOE_EINVAL, "%s: a vocabulary-only file has no model to run", path);
		goto fail;
	}
	if ((rc = moe_hparams_from_json(&m->hp, hpj, e)) < 0) {
		moe_err_prefix(e, "%s", path);
		goto fail;
	}
	const char *arch = json_string_value(json_object_get(m->meta, "architecture"));
	snprintf(m->hp.arch, sizeof m->hp.arch, "%s", arch ? arch : "");
	/* The validation the converter runs too (lib/arch.h), here also whether
	 * the engine runs the architecture (moe_hparams_check_runnable). */
	moe_tensor_set ts = moe_tensor_set_uth(m->file);
	if ((rc = moe_hparams_validate(&m->hp, &ts, true, e)) < 0) {
		moe_err_prefix(e, "%s", path);
		goto fail;
	}
	if (moe_uth_find(m->file, "tokenizer.tokens") &&
	    (rc = moe_tokenizer_load(&m->tok, m->file, e)) < 0)
		goto fail;
	/* Padding rows past the tokenizer are fine; tokens without a row are not. */
	if (m->tok && moe_tokenizer_n_tokens(m->tok) > m->hp.n_vocab) {
		rc = moe_err(e, MOE_EFORMAT, "%s: the tokenizer has %u tokens, the model only %u",
			     path, moe_tokenizer_n_tokens(m->tok), m->hp.n_vocab);
		goto fail;
	}
	const moe_hparams *hp = &m->hp;
	if ((rc = get_weight(m, "token_embd.weight", hp->n_vocab, hp->n_embd, true, &m->tok_embd, e)) < 0 ||
	    (rc = get_vec(m, "output_norm.weight", hp->n_embd, true, &m->out_norm, e)) < 0 ||
	    (rc = get_weight(m, "output.weight", hp->n_vocab, hp->n_embd, !hp->tied_embeddings,
			     &m->output, e)) < 0)
		goto fail;
	if (!m->output.data)
		m->output = m->tok_embd;
	bool longrope = hp->rope_scaling == MOE_ROPE_SCALING_LONGROPE;
	if ((rc = get_vec(m, "output_norm.bias", hp->n_embd, hp->norm_kind == MOE_NORM_LAYER,
			  &m->out_norm_b, e)) < 0 ||
	    (rc = get_vec(m, "output.bias", hp->n_vocab, false, &m->out_bias, e)) < 0 ||
	    (rc = get_vec(m, "rope_factors_short.weight", hp->n_rot / 2, longrope, &m->rope_short,
			  e)) < 0 ||
	    (rc = get_vec(m, "rope_factors_long.weight", hp->n_rot / 2, longrope, &m->rope_long,
			  e)) < 0)
		goto fail;
	m->layers = calloc(hp->n_layer, sizeof *m->layers);
	if (!m->layers) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t il = 0; il < hp->n_layer; il++)
		if ((rc = bind_layer(m, (int)il, e)) < 0)
			goto fail;
	if ((rc = moe_model_resident_new(m, e)) < 0)
		goto fail;
	*out = m;
	return 0;
fail:
	moe_model_free(m);
	return rc;
}

void moe_model_free(moe_model *m)
{
	if (!m)
		return;
	if (m->layers)
		for (uint32_t il = 0; il < m->hp.n_layer; il++)
			free(m->layers[il].exp_gate);
	free(m->layers);
	free(m->resident);
	for (size_t i = 0; i < m->n_owned; i++)
		free(m->owned[i]);
	free(m->owned);
	moe_tokenizer_free(m->tok);
	json_decref(m->meta);
	moe_uth_close(m->file);
	free(m);
}

static uint64_t wbytes(const moe_weight *w)
{
	return w->data ? (uint64_t)w->rows * w->row_bytes : 0;
}

uint64_t moe_model_active_bytes(const moe_model *m)
{
	const moe_hparams *hp = &m->hp;
	uint64_t b = wbytes(&m->output);
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		b += wbytes(&L->wq) + wbytes(&L->wk) + wbytes(&L->wv) + wbytes(&L->wo);
		/* latent attention (deepseek2; absent elsewhere) */
		b += wbytes(&L->wq_a) + wbytes(&L->wq_b) + wbytes(&L->wkv_a) + wbytes(&L->wk_b) +
		     wbytes(&L->wv_b);
		if (L->is_moe) {
			b += wbytes(&L->router) + wbytes(&L->sh_gate) + wbytes(&L->sh_up) +
			     wbytes(&L->sh_down) + wbytes(&L->sh_router);
			/* experts_used of the (equal-sized) experts */
			b += hp->n_expert_used * (wbytes(&L->exp_gate[0]) + wbytes(&L->exp_up[0]) +
						  wbytes(&L->exp_down[0]));
		} else {
			b += wbytes(&L->ffn_gate) + wbytes(&L->ffn_up) + wbytes(&L->ffn_down);
		}
	}
	return b;
}
