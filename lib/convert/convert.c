/* convert.c — GGUF / Hugging Face snapshot -> UTH.
 *
 * The conversion is a plan: one entry per output tensor saying where its
 * bytes come from (source, offset, rows, dtype) and what to do on the way
 * (dtype change, the Llama q/k row permutation).  The UTH writer then pulls
 * each tensor's bytes through plan_fill() in file order, so memory stays
 * bounded whatever the model size, and output to a pipe works in one pass.
 *
 * Canonical form: tensor names as in GGUF, experts split one tensor per
 * (layer, expert) and grouped so one read loads one expert; q/k rows in the
 * order GGUF's Llama RoPE expects (HF Llama checkpoints use the half-split
 * order and are permuted here), hyper-parameters in arch.h's vocabulary. */
#include "convert.h"
#include "arch.h"
#include "gguf.h"
#include "hf.h"
#include "quant.h"
#include "text.h"
#include "uth.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_float_type(int t)
{
	return t == MOE_F32 || t == MOE_F16 || t == MOE_BF16;
}

typedef struct plan_tensor {
	moe_uth_tensor desc;
	char name[96];
	moe_src *src;
	uint64_t src_off;   /* first byte of this tensor's rows in src */
	int src_dtype;
	uint64_t n_rows, row_elems;
	uint32_t perm_heads; /* q/k permutation: heads (0 = none) */
	/* fill state: a block of source rows and one converted output row */
	uint8_t *block;
	uint64_t block_r0, block_n;
	uint8_t *row;
	int64_t row_idx;
	float *fbuf;
	uint64_t sort_key;
	moe_repack_fill repack; /* --repack: wraps plan_fill (desc.layout R4) */
	/* A gather (MLA's per-head k_b/v_b from kv_b, gpt-oss's interleaved
	 * and transposed experts): output element (i2, i1, i0) is source
	 * element g_base + i2 g_stride[2] + i1 g_stride[1] + i0 g_stride[0],
	 * counted from src_off; the g_count source elements are decoded to
	 * float once, and freed when the tensor's last byte is produced. */
	bool gather;
	uint64_t g_stride[3], g_base, g_count;
	float *g_src;
	bool search; /* encode with moe-quant's search, not from_float */
	/* MXFP4 from HF (gpt-oss): one expert's slice of a blocks tensor
	 * (src_off: rows of in/32 x 16 bytes, two elements a byte, element 2m
	 * in the low nibble of byte m) and of its scales tensor (mx_scale_off:
	 * one exponent byte per 32 elements); output row r is slice row
	 * mx_mul r + mx_add, repacked into GGUF's block (exponent, then element
	 * j in the low and j + 16 in the high nibble of qs[j]).  The slice is
	 * read once, freed when the tensor's last byte is produced. */
	bool mx;
	moe_src *mx_scale_src;
	uint64_t mx_scale_off, mx_mul, mx_add, mx_rows;
	uint8_t *mx_blocks, *mx_scales;
} plan_tensor;

typedef struct plan {
	moe_arena arena;
	plan_tensor *t;
	size_t n, cap;
	const char *input;
	moe_src *mem_src[4]; /* tensors made from config.json values */
	size_t n_mem_src;
	bool reference_quant; /* moe_convert_opts.reference_quant */
	bool repack;          /* moe_convert_opts.repack */
} plan;

static int plan_push(plan *p, plan_tensor **out, moe_error *e)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 256;
		plan_tensor *t = realloc(p->t, cap * sizeof *t);
		if (!t)
			return moe_err(e, MOE_ENOMEM, "out of memory planning %zu tensors", cap);
		p->t = t;
		p->cap = cap;
	}
	*out = &p->t[p->n++];
	memset(*out, 0, sizeof **out);
	(*out)->row_idx = -1;
	return 0;
}

static void plan_free(plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->t[i].block);
		free(p->t[i].row);
		free(p->t[i].fbuf);
		free(p->t[i].g_src);
		free(p->t[i].mx_blocks);
		free(p->t[i].mx_scales);
		moe_repack_fill_free(&p->t[i].repack);
	}
	for (size_t i = 0; i < p->n_mem_src; i++)
		moe_src_close(p->mem_src[i]);
	free(p->t);
	moe_arena_free(&p->arena);
}

/* Rows of the canonical order come from source rows: with the Llama q/k
 * permutation, within each head of d rows, output row i*2+j is source row
 * j*(d/2)+i (half-split -> interleaved pairs). */
static uint64_t src_row_of(const plan_tensor *t, uint64_t r)
{
	if (!t->perm_heads)
		return r;
	uint64_t d = t->n_rows / t->perm_heads, h = r / d, k = r % d;
	uint64_t i = k / 2, j = k % 2;
	return h * d + j * (d / 2) + i;
}

/* Load the block of source rows holding `sr`: a whole head when permuting
 * (so archive sources are still read front to back), else ~4 MiB of rows. */
static int load_block(plan_tensor *t, uint64_t sr, uint64_t in_row_bytes, moe_error *e)
{
	uint64_t n = t->perm_heads ? t->n_rows / t->perm_heads : ((4u << 20) / in_row_bytes) + 1;
	uint64_t r0 = t->perm_heads ? sr / n * n : sr;
	if (r0 + n > t->n_rows)
		n = t->n_rows - r0;
	if (!t->block || n > t->block_n) {
		free(t->block);
		t->block = malloc(n * in_row_bytes);
		if (!t->block)
			return moe_err(e, MOE_ENOMEM, "out of memory reading tensor '%s'", t->name);
	}
	MOE_TRY(moe_src_read(t->src, t->src_off + r0 * in_row_bytes, t->block,
			     (size_t)(n * in_row_bytes), e));
	t->block_r0 = r0;
	t->block_n = n;
	return 0;
}

/* t->fbuf (one row of floats) encoded into t->row: quantised types by
 * moe-quant's searching quantiser (the one implementation of weight
 * quantisation) unless the reference rounding was asked for. */
static void encode_row(plan_tensor *t)
{
	if (t->search) {
		moe_quant_rows(t->desc.dtype, t->fbuf, t->row, 1, (int64_t)t->row_elems, NULL, NULL,
			       NULL);
		return;
	}
	moe_type_get(t->desc.dtype)->from_float(t->fbuf, t->row, (int64_t)t->row_elems);
}

/* Output row r of a gather into t->row. */
static int gather_row(plan_tensor *t, uint64_t r, moe_error *e)
{
	if (!t->g_src) {
		uint64_t nb;
		MOE_TRY(moe_type_nbytes(t->src_dtype, t->g_count, &nb, e));
		uint8_t *raw = malloc(nb ? nb : 1);
		t->g_src = malloc(t->g_count * sizeof(float));
		if (!raw || !t->g_src) {
			free(raw);
			return moe_err(e, MOE_ENOMEM, "out of memory converting '%s'", t->name);
		}
		int rc = moe_src_read(t->src, t->src_off, raw, nb, e);
		if (rc == 0)
			moe_type_get(t->src_dtype)->to_float(raw, t->g_src, (int64_t)t->g_count);
		free(raw);
		MOE_TRY(rc);
	}
	uint64_t i1 = r % t->desc.ne[1], i2 = r / t->desc.ne[1];
	uint64_t at = t->g_base + i2 * t->g_stride[2] + i1 * t->g_stride[1];
	for (uint64_t i0 = 0; i0 < t->row_elems; i0++)
		t->fbuf[i0] = t->g_src[at + i0 * t->g_stride[0]];
	encode_row(t);
	return 0;
}

/* Output row r of an MXFP4 repack (see plan_tensor) into t->row. */
static int mx_row(plan_tensor *t, uint64_t r, moe_error *e)
{
	uint64_t nb = t->row_elems / 32;
	if (!t->mx_blocks) {
		t->mx_blocks = malloc(t->mx_rows * nb * 16);
		t->mx_scales = malloc(t->mx_rows * nb);
		if (!t->mx_blocks || !t->mx_scales)
			return moe_err(e, MOE_ENOMEM, "out of memory converting '%s'", t->name);
		MOE_TRY(moe_src_read(t->src, t->src_off, t->mx_blocks, (size_t)(t->mx_rows * nb * 16), e));
		MOE_TRY(moe_src_read(t->mx_scale_src, t->mx_scale_off, t->mx_scales,
				     (size_t)(t->mx_rows * nb), e));
	}
	uint64_t sr = t->mx_mul * r + t->mx_add;
	const uint8_t *hb = t->mx_blocks + sr * nb * 16, *sc = t->mx_scales + sr * nb;
	for (uint64_t b = 0; b < nb; b++) {
		uint8_t code[32], *out = t->row + b * 17;
		for (int m = 0; m < 16; m++) {
			code[2 * m] = hb[b * 16 + (uint64_t)m] & 0xF;
			code[2 * m + 1] = hb[b * 16 + (uint64_t)m] >> 4;
		}
		out[0] = sc[b];
		for (int j = 0; j < 16; j++)
			out[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
	}
	return 0;
}

static int plan_fill(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e)
{
	plan_tensor *t = ctx;
	if (t->gather || t->mx) {
		uint64_t out_row;
		MOE_TRY(moe_type_nbytes(t->desc.dtype, t->row_elems, &out_row, e));
		if (!t->row) {
			t->row = malloc(out_row);
			t->fbuf = malloc(t->row_elems * sizeof(float));
			if (!t->row || !t->fbuf)
				return moe_err(e, MOE_ENOMEM, "out of memory converting '%s'", t->name);
		}
		uint8_t *dst = buf;
		while (n > 0) {
			uint64_t r = off / out_row, within = off % out_row;
			if ((int64_t)r != t->row_idx) {
				MOE_TRY(t->mx ? mx_row(t, r, e) : gather_row(t, r, e));
				t->row_idx = (int64_t)r;
			}
			size_t k = (size_t)(out_row - within) < n ? (size_t)(out_row - within) : n;
			memcpy(dst, t->row + within, k);
			dst += k;
			off += k;
			n -= k;
		}
		/* the whole tensor produced: drop the decoded source (a pipe's
		 * second pass decodes it again) */
		if (off == out_row * t->n_rows) {
			free(t->g_src);
			free(t->mx_blocks);
			free(t->mx_scales);
			t->g_src = NULL;
			t->mx_blocks = t->mx_scales = NULL;
			t->row_idx = -1;
		}
		return 0;
	}
	if (!t->perm_heads && t->src_dtype == t->desc.dtype)
		return moe_src_read(t->src, t->src_off + off, buf, n, e);

	uint64_t in_row, out_row;
	MOE_TRY(moe_type_nbytes(t->src_dtype, t->row_elems, &in_row, e));
	MOE_TRY(moe_type_nbytes(t->desc.dtype, t->row_elems, &out_row, e));
	const moe_type_traits *ti = moe_type_get(t->src_dtype);
	if (!t->row) {
		t->row = malloc(out_row);
		t->fbuf = malloc(t->row_elems * sizeof(float));
		if (!t->row || !t->fbuf)
			return moe_err(e, MOE_ENOMEM, "out of memory converting '%s'", t->name);
	}
	uint8_t *dst = buf;
	while (n > 0) {
		uint64_t r = off / out_row, within = off % out_row;
		if ((int64_t)r != t->row_idx) {
			uint64_t sr = src_row_of(t, r);
			if (!t->block || sr < t->block_r0 || sr >= t->block_r0 + t->block_n)
				MOE_TRY(load_block(t, sr, in_row, e));
			const uint8_t *s = t->block + (sr - t->block_r0) * in_row;
			if (t->src_dtype == t->desc.dtype) {
				memcpy(t->row, s, out_row);
			} else {
				ti->to_float(s, t->fbuf, (int64_t)t->row_elems);
				encode_row(t);
			}
			t->row_idx = (int64_t)r;
		}
		size_t k = (size_t)(out_row - within) < n ? (size_t)(out_row - within) : n;
		memcpy(dst, t->row + within, k);
		dst += k;
		off += k;
		n -= k;
	}
	return 0;
}

/* Order: token embedding first, then layer by layer (the layer's own
 * tensors by role, then expert after expert), output last. */
static uint64_t sort_key(const moe_uth_tensor *d)
{
	uint64_t group = d->role == MOE_UTH_ROLE_OUTPUT_NORM || d->role == MOE_UTH_ROLE_OUTPUT ||
					 d->role == MOE_UTH_ROLE_OUTPUT_NORM_BIAS ||
					 d->role == MOE_UTH_ROLE_OUTPUT_BIAS
				 ? 2
			 : d->layer == MOE_UTH_NONE ? 0
						    : 1;
	uint64_t layer = d->layer == MOE_UTH_NONE ? 0 : d->layer;
	uint64_t expert = d->expert == MOE_UTH_NONE ? 0 : (uint64_t)d->expert + 1;
	return group << 60 | layer << 40 | expert << 16 | d->role;
}

static int cmp_plan(const void *a, const void *b)
{
	const plan_tensor *x = a, *y = b;
	if (x->sort_key != y->sort_key)
		return x->sort_key < y->sort_key ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Fill the descriptor of an output tensor. ne is fastest first. */
static int plan_add(plan *p, const moe_tensor_place *pl, int out_dtype, uint32_t n_dims,
		    const uint64_t ne[4], moe_src *src, uint64_t src_off, int src_dtype,
		    uint32_t perm_heads, moe_error *e)
{
	plan_tensor *t = NULL;
	MOE_TRY(plan_push(p, &t, e));
	snprintf(t->name, sizeof t->name, "%s", pl->name);
	t->desc.name = t->name;
	t->desc.dtype = (uint16_t)out_dtype;
	t->desc.layer = pl->layer < 0 ? MOE_UTH_NONE : (uint16_t)pl->layer;
	t->desc.expert = pl->expert < 0 ? MOE_UTH_NONE : (uint16_t)pl->expert;
	t->desc.role = (uint16_t)pl->role;
	t->desc.n_dims = (uint8_t)n_dims;
	t->desc.layout = MOE_UTH_LAYOUT_PLAIN;
	uint64_t rows = 1;
	for (int i = 0; i < 4; i++) {
		uint64_t v = i < (int)n_dims ? ne[i] : 1;
		if (v == 0 || v > UINT32_MAX)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': dimension %d is %llu", p->input,
				       pl->name, i, (unsigned long long)v);
		t->desc.ne[i] = (uint32_t)v;
		if (i > 0 && !moe_mul_u64(rows, v, &rows))
			return moe_err(e, MOE_ERANGE, "%s: tensor '%s': size overflow", p->input,
				       pl->name);
	}
	t->src = src;
	t->src_off = src_off;
	t->src_dtype = src_dtype;
	t->n_rows = rows;
	t->row_elems = t->desc.ne[0];
	if (perm_heads) {
		uint64_t d = rows / perm_heads;
		if (rows % perm_heads || d % 2)
			return moe_err(e, MOE_EFORMAT,
				       "%s: tensor '%s': %llu rows cannot be split into %u heads of even size",
				       p->input, pl->name, (unsigned long long)rows, perm_heads);
	}
	t->perm_heads = perm_heads;
	t->sort_key = sort_key(&t->desc);
	const moe_type_traits *tt = moe_type_get(out_dtype);
	t->search = !p->reference_quant && tt && tt->is_quantized && moe_quant_fn(out_dtype);
	/* The output must be encodable and the source decodable. */
	if (src_dtype != out_dtype && (!moe_type_get(out_dtype) || !moe_type_get(out_dtype)->from_float))
		return moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s': cannot convert to %s", p->input,
			       pl->name, moe_type_name(out_dtype));
	return 0;
}

/* Add a gathered tensor (see plan_tensor): `count` source elements from
 * element `first` of the source tensor at src_off, strides fastest first. */
static int plan_add_gather(plan *p, const moe_tensor_place *pl, int out_dtype, uint32_t n_dims,
			   const uint64_t ne[4], moe_src *src, uint64_t src_off, int src_dtype,
			   uint64_t first, uint64_t count, uint64_t base, const uint64_t stride[3],
			   moe_error *e)
{
	const moe_type_traits *ti = moe_type_get(src_dtype);
	if (!ti || !ti->to_float || first % ti->block_size || count % ti->block_size)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s': cannot split a %s source here",
			       p->input, pl->name, moe_type_name(src_dtype));
	uint64_t skip;
	MOE_TRY(moe_type_nbytes(src_dtype, first, &skip, e));
	MOE_TRY(plan_add(p, pl, out_dtype, n_dims, ne, src, src_off + skip, src_dtype, 0, e));
	plan_tensor *t = &p->t[p->n - 1];
	/* the last element gathered must lie inside the decoded range */
	uint64_t last = base;
	for (int d = 0; d < 3; d++)
		last += (ne[d] - 1) * stride[d];
	if (last >= count)
		return moe_err(e, MOE_EINTERNAL, "%s: tensor '%s': gather out of range", p->input,
			       pl->name);
	t->gather = true;
	t->g_base = base;
	t->g_count = count;
	memcpy(t->g_stride, stride, sizeof t->g_stride);
	return 0;
}

/* The type of a split or transposed tensor: what was asked (--type) or the
 * source's float type; a row that is not whole blocks falls back to F16, a
 * block-quantised GGUF source to Q8_0 (rows of 32) or F16. */
static int split_type(int want, int src_dtype, uint64_t row)
{
	if (want < 0)
		want = is_float_type(src_dtype) ? src_dtype : MOE_Q8_0;
	if (row % moe_type_get(want)->block_size)
		return is_float_type(want) ? want : MOE_F16;
	return want;
}

/* DeepSeek's kv_b (H(N+V) rows of L: per head N k_nope rows then V value
 * rows) as the absorbed form's per-head matrices: attn_k_b [N, L, H]
 * (k_b[h] = the k rows transposed, L rows of N) and attn_v_b [L, V, H]. */
static int plan_split_kv_b(plan *p, const moe_hparams *hp, int layer, const uint64_t ne[4],
			   uint32_t n_dims, moe_src *src, uint64_t off, int src_dtype, int want,
			   moe_error *e)
{
	uint64_t H = hp->n_head, R = hp->rope_head_dim, N = hp->head_dim - R, V = hp->head_dim_v,
		 L = hp->kv_lora_rank;
	if (hp->attention != MOE_ATTN_MLA || n_dims != 2 || ne[0] != L || ne[1] != H * (N + V))
		return moe_err(e, MOE_EFORMAT, "%s: layer %d: attn_kv_b has shape [%llu, %llu] but "
					       "the hparams give [%llu, %llu] (kv_lora_rank, heads x "
					       "(no-rope + value head size))",
			       p->input, layer, (unsigned long long)ne[0], (unsigned long long)ne[1],
			       (unsigned long long)L, (unsigned long long)(H * (N + V)));
	moe_tensor_place pl;
	char nm[96];
	uint64_t count = ne[0] * ne[1];
	snprintf(nm, sizeof nm, "blk.%d.attn_k_b.weight", layer);
	MOE_TRY(moe_arch_place_canonical(nm, &pl, e));
	uint64_t nk[4] = {N, L, H, 1}, sk[3] = {L, 1, (N + V) * L};
	MOE_TRY(plan_add_gather(p, &pl, split_type(want, src_dtype, N), 3, nk, src, off, src_dtype, 0,
				count, 0, sk, e));
	snprintf(nm, sizeof nm, "blk.%d.attn_v_b.weight", layer);
	MOE_TRY(moe_arch_place_canonical(nm, &pl, e));
	uint64_t nv[4] = {L, V, H, 1}, sv[3] = {1, L, (N + V) * L};
	return plan_add_gather(p, &pl, split_type(want, src_dtype, L), 3, nv, src, off, src_dtype, 0,
			       count, N * L, sv, e);
}

/* ------------------------------------------------------------- GGUF */

static const char *const stacked_bases[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
static const char *const split_bases[] = {"ffn_gate", "ffn_up", "ffn_down"};

static int plan_gguf(plan *p, const moe_gguf *g, const moe_hparams *hp, moe_error *e)
{
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const moe_gguf_tensor *gt = &g->tensors[i];
		unsigned l;
		char base[64];
		int n = 0;
		int stacked = -1;
		/* gpt-oss's expert biases [F or D, experts]: one row per expert */
		if (sscanf(gt->name, "blk.%u.%63[a-z_].bias%n", &l, base, &n) == 2 &&
		    gt->name[n] == '\0')
			for (int k = 0; k < 3; k++)
				if (!strcmp(base, stacked_bases[k]))
					stacked = k;
		if (stacked >= 0) {
			if (gt->n_dims != 2 || gt->ne[1] == 0 || gt->ne[1] > 0xFFFE || l > 0xFFFE ||
			    gt->size % gt->ne[1])
				return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected 2 dimensions "
							       "[out, experts]", p->input, gt->name);
			uint64_t slice = gt->size / gt->ne[1];
			for (uint64_t x = 0; x < gt->ne[1]; x++) {
				moe_tensor_place pl;
				char nm[96];
				snprintf(nm, sizeof nm, "blk.%u.%s.%llu.bias", l, split_bases[stacked],
					 (unsigned long long)x);
				MOE_TRY(moe_arch_place_canonical(nm, &pl, e));
				uint64_t ne[4] = {gt->ne[0], 1, 1, 1};
				MOE_TRY(plan_add(p, &pl, gt->dtype, 1, ne, g->src, gt->offset + x * slice,
						 gt->dtype, 0, e));
			}
			continue;
		}
		n = 0;
		/* older deepseek2 GGUFs: kv_b unsplit */
		if (sscanf(gt->name, "blk.%u.attn_kv_b.weight%n", &l, &n) == 1 && gt->name[n] == '\0' &&
		    l <= 0xFFFE) {
			uint64_t ne[4] = {gt->ne[0], gt->ne[1], 1, 1};
			MOE_TRY(plan_split_kv_b(p, hp, (int)l, ne, gt->n_dims, g->src, gt->offset,
						gt->dtype, -1, e));
			continue;
		}
		n = 0;
		if (sscanf(gt->name, "blk.%u.%63[a-z_].weight%n", &l, base, &n) == 2 &&
		    gt->name[n] == '\0')
			for (int k = 0; k < 3; k++)
				if (!strcmp(base, stacked_bases[k]))
					stacked = k;
		if (stacked >= 0) {
			/* ne = [cols, rows, n_expert]: one contiguous slice per expert. */
			if (gt->n_dims != 3 || gt->ne[2] == 0 || gt->size % gt->ne[2])
				return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected 3 dimensions "
							       "[in, out, experts]",
					       p->input, gt->name);
			uint64_t n_exp = gt->ne[2], slice = gt->size / n_exp;
			if (n_exp > 0xFFFE || l > 0xFFFE)
				return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': too many experts or layers",
					       p->input, gt->name);
			for (uint64_t x = 0; x < n_exp; x++) {
				moe_tensor_place pl;
				char nm[96];
				snprintf(nm, sizeof nm, "blk.%u.%s.%llu.weight", l, split_bases[stacked],
					 (unsigned long long)x);
				MOE_TRY(moe_arch_place_canonical(nm, &pl, e));
				uint64_t ne[4] = {gt->ne[0], gt->ne[1], 1, 1};
				MOE_TRY(plan_add(p, &pl, gt->dtype, 2, ne, g->src, gt->offset + x * slice,
						 gt->dtype, 0, e));
			}
			continue;
		}
		moe_tensor_place pl;
		const char *cname = gt->name;
		char renamed[96];
		/* gpt-oss: llama.cpp calls the pre-MoE norm post_attention_norm */
		n = 0;
		if (!strcmp(hp->arch, "gpt-oss") &&
		    sscanf(gt->name, "blk.%u.post_attention_norm.weight%n", &l, &n) == 1 &&
		    gt->name[n] == '\0') {
			snprintf(renamed, sizeof renamed, "blk.%u.ffn_norm.weight", l);
			cname = renamed;
		}
		int rc = moe_arch_place_canonical(cname, &pl, e);
		if (rc == MOE_ENOTFOUND) {
			/* Keep what we do not know under its own name. */
			memset(&pl, 0, sizeof pl);
			if (strlen(gt->name) >= sizeof pl.name)
				return moe_err(e, MOE_EFORMAT, "%s: tensor name '%.60s...' too long",
					       p->input, gt->name);
			snprintf(pl.name, sizeof pl.name, "%s", gt->name);
			pl.role = MOE_UTH_ROLE_OTHER;
			pl.layer = pl.expert = -1;
			moe_log(MOE_LOG_WARN, "%s: tensor '%s' has no known role; kept as 'other'",
				p->input, gt->name);
		} else if (rc < 0) {
			return moe_err_prefix(e, "%s", p->input);
		}
		MOE_TRY(plan_add(p, &pl, gt->dtype, gt->n_dims, gt->ne, g->src, gt->offset, gt->dtype,
				 0, e));
	}
	return 0;
}

/* ------------------------------------------------------- safetensors */


/* Float types, and the block types whose reference quantiser produces the
 * same bytes as ggml's (quant.h): round-to-nearest, no importance matrix. */
bool moe_convert_type_ok(int t)
{
	return is_float_type(t) || t == MOE_Q8_0 || t == MOE_Q4_0 || t == MOE_Q4_1 ||
	       t == MOE_Q5_0 || t == MOE_Q5_1;
}

/* gpt-oss's MXFP4 experts as the published checkpoints store them (what
 * is "oai_gate_up_exps.blocks" or "oai_down_exps.blocks"): U8 blocks
 * (E, R, C/32, 16) and scales (E, R, C/32), R output rows of C inputs —
 * gate_up R = 2F (gate rows even, up rows odd) of C = D, down R = D of
 * C = F — repacked per expert into UTH's MXFP4 (GGUF's block layout), so
 * that GGUF and HF give the same bytes. */
static int plan_hf_mxfp4(plan *p, const moe_hf *h, const moe_hparams *hp,
			 const moe_hf_tensor *ht, int layer, const char *what, moe_error *e)
{
	bool gate_up = !strncmp(what, "oai_gate_up", 11);
	uint64_t E = hp->n_expert, D = hp->n_embd, F = hp->n_ff_exp;
	uint64_t R = gate_up ? 2 * F : D, C = gate_up ? D : F;
	/* the scales tensor: the same name with _scales for _blocks */
	char sname[256];
	const char *suf = strstr(ht->name, "_blocks");
	if (!suf || strlen(ht->name) >= sizeof sname)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': not a _blocks name", p->input,
			       ht->name);
	snprintf(sname, sizeof sname, "%.*s_scales%s", (int)(suf - ht->name), ht->name, suf + 7);
	const moe_hf_tensor *st = NULL;
	for (uint64_t i = 0; i < h->n_tensors && !st; i++)
		if (!strcmp(h->tensors[i].name, sname))
			st = &h->tensors[i];
	if (!st)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': its exponents '%s' are missing",
			       p->input, ht->name, sname);
	if (C % 32)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': MXFP4 rows of %llu inputs are not "
					       "whole blocks of 32", p->input, ht->name,
			       (unsigned long long)C);
	const moe_hf_tensor *both[2] = {ht, st};
	for (int k = 0; k < 2; k++) {
		const moe_hf_tensor *x = both[k];
		uint64_t want[4] = {E, R, C / 32, 16};
		uint32_t dims = k ? 3 : 4;
		bool ok = x->u8 && x->n_dims == dims;
		for (uint32_t d = 0; ok && d < dims; d++)
			ok = x->shape[d] == want[d];
		if (!ok)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected U8 of shape (%llu, %llu, "
						       "%llu%s) from num_local_experts, hidden_size and "
						       "intermediate_size", p->input, x->name,
				       (unsigned long long)E, (unsigned long long)R,
				       (unsigned long long)(C / 32), k ? "" : ", 16");
	}
	uint64_t nb = C / 32;
	for (uint64_t x = 0; x < E; x++)
		for (int part = 0; part < (gate_up ? 2 : 1); part++) {
			const char *b = !gate_up ? "ffn_down" : part ? "ffn_up" : "ffn_gate";
			char nm[96];
			moe_tensor_place pl;
			snprintf(nm, sizeof nm, "blk.%d.%s.%llu.weight", layer, b, (unsigned long long)x);
			MOE_TRY(moe_arch_place_canonical(nm, &pl, e));
			uint64_t ne[4] = {C, gate_up ? F : D, 1, 1};
			MOE_TRY(plan_add(p, &pl, MOE_MXFP4, 2, ne, ht->src, ht->offset + x * R * nb * 16,
					 MOE_MXFP4, 0, e));
			plan_tensor *t = &p->t[p->n - 1];
			t->mx = true;
			t->mx_scale_src = st->src;
			t->mx_scale_off = st->offset + x * R * nb;
			t->mx_mul = gate_up ? 2 : 1;
			t->mx_add = (uint64_t)part;
			t->mx_rows = R;
		}
	return 0;
}

/* gpt-oss's stacked experts (names from moe_arch_map_hf_name, "oai_...";
 * shapes slowest first): gate_up_proj (E, D, 2F) with gate in the even and
 * up in the odd columns, down_proj (E, F, D) — both [in, out], transposed
 * here to rows of inputs — and their biases (E, 2F) interleaved the same
 * way and (E, D); split into one tensor per expert. */
static int plan_hf_oai(plan *p, const moe_hf *h, const moe_hparams *hp,
		       const moe_hf_tensor *ht, int layer, const char *what, int want, moe_error *e)
{
	if (strstr(what, ".blocks"))
		return plan_hf_mxfp4(p, h, hp, ht, layer, what, e);
	if (strstr(what, ".scales")) {
		/* read with their blocks */
		char bname[256];
		const char *suf = strstr(ht->name, "_scales");
		bool found = false;
		if (suf && strlen(ht->name) < sizeof bname) {
			snprintf(bname, sizeof bname, "%.*s_blocks%s", (int)(suf - ht->name), ht->name,
				 suf + 7);
			for (uint64_t i = 0; i < h->n_tensors && !found; i++)
				found = !strcmp(h->tensors[i].name, bname);
		}
		return found ? 0 : moe_err(e, MOE_EFORMAT, "%s: tensor '%s': MXFP4 exponents "
							   "without their blocks", p->input, ht->name);
	}
	if (ht->u8)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s': dtype U8 is only read for "
						    "MXFP4 blocks and scales", p->input, ht->name);
	bool gate_up = !strncmp(what, "oai_gate_up", 11), bias = strstr(what, ".bias") != NULL;
	uint64_t E = hp->n_expert, D = hp->n_embd, F = hp->n_ff_exp;
	uint64_t want_shape[3] = {E, bias ? (gate_up ? 2 * F : D) : gate_up ? D : F,
				  gate_up ? 2 * F : D};
	uint32_t want_dims = bias ? 2 : 3;
	bool ok = ht->n_dims == want_dims;
	for (uint32_t d = 0; ok && d < want_dims; d++)
		ok = ht->shape[d] == want_shape[d];
	if (!ok)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected shape (%llu, %llu%s%llu) "
					       "from num_local_experts, hidden_size and "
					       "intermediate_size",
			       p->input, ht->name, (unsigned long long)want_shape[0],
			       (unsigned long long)want_shape[1], bias ? "" : ", ",
			       bias ? 0ull : (unsigned long long)want_shape[2]);
	for (uint64_t x = 0; x < E; x++)
		for (int part = 0; part < (gate_up ? 2 : 1); part++) {
			const char *b = !gate_up ? "ffn_down" : part ? "ffn_up" : "ffn_gate";
			char nm[96];
			moe_tensor_place pl;
			snprintf(nm, sizeof nm, "blk.%d.%s.%llu.%s", layer, b, (unsigned long long)x,
				 bias ? "bias" : "weight");
			MOE_TRY(moe_arch_place_canonical(nm, &pl, e));
			if (bias) {
				uint64_t n = gate_up ? F : D, w = gate_up ? 2 * F : D;
				uint64_t ne[4] = {n, 1, 1, 1}, st[3] = {gate_up ? 2 : 1, 0, 0};
				MOE_TRY(plan_add_gather(p, &pl, MOE_F32, 1, ne, ht->src, ht->offset,
							ht->dtype, x * w, w, (uint64_t)part, st, e));
			} else if (gate_up) {
				uint64_t ne[4] = {D, F, 1, 1}, st[3] = {2 * F, 2, 0};
				MOE_TRY(plan_add_gather(p, &pl, split_type(want, ht->dtype, D), 2, ne,
							ht->src, ht->offset, ht->dtype, x * D * 2 * F,
							D * 2 * F, (uint64_t)part, st, e));
			} else {
				uint64_t ne[4] = {F, D, 1, 1}, st[3] = {D, 1, 0};
				MOE_TRY(plan_add_gather(p, &pl, split_type(want, ht->dtype, F), 2, ne,
							ht->src, ht->offset, ht->dtype, x * F * D, F * D,
							0, st, e));
			}
		}
	return 0;
}

/* Phi-3.5-MoE's LongRoPE factors live in config.json (rope_scaling.
 * short_factor / long_factor); GGUF and UTH keep them as the F32 tensors
 * rope_factors_short.weight / rope_factors_long.weight. */
static int plan_hf_longrope(plan *p, const moe_hparams *hp, const char *config_json, moe_error *e)
{
	static const char *const keys[2] = {"short_factor", "long_factor"};
	static const char *const names[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
	json_t *cfg = json_loads(config_json, 0, NULL);
	json_t *rs = json_object_get(cfg, "rope_scaling");
	int rc = 0;
	for (int k = 0; k < 2 && rc == 0; k++) {
		json_t *arr = json_object_get(rs, keys[k]);
		size_t n = hp->n_rot / 2;
		if (!json_is_array(arr) || json_array_size(arr) != n) {
			rc = moe_err(e, MOE_EFORMAT, "%s: config.json: rope_scaling.%s must be a list of "
						     "%zu numbers (half the rotary dimensions)",
				     p->input, keys[k], n);
			break;
		}
		float *v = moe_arena_alloc(&p->arena, n * sizeof *v, sizeof(float));
		if (!v || p->n_mem_src == sizeof p->mem_src / sizeof p->mem_src[0]) {
			rc = moe_err(e, MOE_ENOMEM, "out of memory");
			break;
		}
		for (size_t i = 0; i < n && rc == 0; i++) {
			json_t *x = json_array_get(arr, i);
			double d = json_number_value(x);
			if (!json_is_number(x) || !isfinite(d) || !(d > 0) || d > MOE_HP_MAX_REAL)
				rc = moe_err(e, MOE_EFORMAT, "%s: config.json: rope_scaling.%s[%zu] must "
							     "be a positive number",
					     p->input, keys[k], i);
			v[i] = (float)d;
		}
		moe_src *src;
		if (rc == 0)
			rc = moe_src_open_mem(&src, names[k], v, n * sizeof *v, e);
		if (rc == 0) {
			p->mem_src[p->n_mem_src++] = src;
			moe_tensor_place pl;
			uint64_t ne[4] = {n, 1, 1, 1};
			rc = moe_arch_place_canonical(names[k], &pl, e);
			if (rc == 0)
				rc = plan_add(p, &pl, MOE_F32, 1, ne, src, 0, MOE_F32, 0, e);
		}
	}
	json_decref(cfg);
	return rc;
}

static int plan_hf(plan *p, const moe_hf *h, const moe_arch_info *a, const moe_hparams *hp,
		   int out_type, moe_error *e)
{
	if (hp->rope_scaling == MOE_ROPE_SCALING_LONGROPE)
		MOE_TRY(plan_hf_longrope(p, hp, h->config_json, e));
	for (uint64_t i = 0; i < h->n_tensors; i++) {
		const moe_hf_tensor *ht = &h->tensors[i];
		moe_tensor_place pl;
		int rc = moe_arch_map_hf_name(a, ht->name, &pl, e);
		if (rc == MOE_ENOTFOUND) {
			/* Rotary caches and the like are recomputed, not stored. */
			if (strstr(ht->name, "rotary_emb.inv_freq"))
				continue;
			return moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s' is not part of a known %s "
							    "layout",
				       p->input, ht->name, a->name);
		}
		MOE_TRY(rc);
		/* U8: gpt-oss's MXFP4 blocks and scales (plan_hf_oai checks) */
		bool mx_part = ht->u8 && strstr(pl.name, ".oai_");
		if (!is_float_type(ht->dtype) && !mx_part)
			return moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s': dtype %s is not a weight "
							    "type (F32, F16, BF16)",
				       p->input, ht->name, ht->u8 ? "u8" : moe_type_name(ht->dtype));
		if (pl.role == MOE_UTH_ROLE_OUTPUT && hp->tied_embeddings)
			continue;
		/* safetensors shape is slowest first; UTH/GGUF fastest first. */
		uint32_t nd = ht->n_dims ? ht->n_dims : 1;
		uint64_t ne[4] = {1, 1, 1, 1};
		for (uint32_t d = 0; d < ht->n_dims; d++)
			ne[d] = ht->shape[ht->n_dims - 1 - d];
		/* Vectors and the router stay F32 (they are small and precision
		 * matters); matrices get --type. */
		int dst = ht->dtype;
		bool keep_f32 = nd == 1 || pl.role == MOE_UTH_ROLE_FFN_GATE_INP ||
				pl.role == MOE_UTH_ROLE_FFN_GATE_INP_SHEXP;
		if (keep_f32)
			dst = MOE_F32;
		else if (out_type >= 0 && ne[0] % moe_type_get(out_type)->block_size == 0)
			dst = out_type;
		else if (out_type >= 0)
			dst = MOE_F16; /* rows that do not split into blocks */

		uint32_t perm = 0;
		if (a->permute_hf_qk && (pl.role == MOE_UTH_ROLE_ATTN_Q || pl.role == MOE_UTH_ROLE_ATTN_Q_BIAS))
			perm = hp->n_head;
		if (a->permute_hf_qk && (pl.role == MOE_UTH_ROLE_ATTN_K || pl.role == MOE_UTH_ROLE_ATTN_K_BIAS))
			perm = hp->n_head_kv;

		if (pl.role == MOE_UTH_ROLE_ATTN_KV_B) {
			MOE_TRY(plan_split_kv_b(p, hp, pl.layer, ne, nd, ht->src, ht->offset, ht->dtype,
						out_type, e));
			continue;
		}
		const char *oai = strstr(pl.name, ".oai_");
		if (oai) {
			MOE_TRY(plan_hf_oai(p, h, hp, ht, pl.layer, oai + 1, out_type, e));
			continue;
		}
		if (strstr(pl.name, ".ffn_gate_up_shexp.")) {
			/* GraniteMoeShared: (2S, D), the gate rows then the up rows */
			if (nd != 2 || ne[1] % 2)
				return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected an even number "
							       "of rows (gate and up)",
					       p->input, ht->name);
			uint64_t row_bytes;
			MOE_TRY(moe_type_nbytes(ht->dtype, ne[0], &row_bytes, e));
			for (int part = 0; part < 2; part++) {
				moe_tensor_place sp;
				char nm[96];
				snprintf(nm, sizeof nm, "blk.%d.%s.weight", pl.layer,
					 part ? "ffn_up_shexp" : "ffn_gate_shexp");
				MOE_TRY(moe_arch_place_canonical(nm, &sp, e));
				uint64_t ne2[4] = {ne[0], ne[1] / 2, 1, 1};
				MOE_TRY(plan_add(p, &sp, dst, 2, ne2, ht->src,
						 ht->offset + (uint64_t)part * (ne[1] / 2) * row_bytes,
						 ht->dtype, 0, e));
			}
			continue;
		}
		if (pl.expert < 0 && strstr(pl.name, "_exps.")) {
			/* GraniteMoE: [E, 2*ff, embd] gate|up and [E, embd, ff] down. */
			if (ht->n_dims != 3)
				return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected 3 dimensions",
					       p->input, ht->name);
			uint64_t n_exp = ht->shape[0], rows = ht->shape[1], cols = ht->shape[2];
			uint64_t row_bytes;
			MOE_TRY(moe_type_nbytes(ht->dtype, cols, &row_bytes, e));
			bool fused = strstr(pl.name, "gate_up") != NULL;
			if (fused && rows % 2)
				return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': odd fused gate/up rows",
					       p->input, ht->name);
			for (uint64_t x = 0; x < n_exp && x < 0xFFFF; x++) {
				for (int part = 0; part < (fused ? 2 : 1); part++) {
					moe_tensor_place ep;
					char nm[96];
					const char *b = !fused ? "ffn_down" : part ? "ffn_up" : "ffn_gate";
					uint64_t r = fused ? rows / 2 : rows;
					snprintf(nm, sizeof nm, "blk.%d.%s.%llu.weight", pl.layer, b,
						 (unsigned long long)x);
					MOE_TRY(moe_arch_place_canonical(nm, &ep, e));
					uint64_t ne2[4] = {cols, r, 1, 1};
					uint64_t off = ht->offset + (x * rows + (uint64_t)part * r) * row_bytes;
					MOE_TRY(plan_add(p, &ep, out_type >= 0 ? out_type : ht->dtype, 2,
							 ne2, ht->src, off, ht->dtype, 0, e));
				}
			}
			continue;
		}
		MOE_TRY(plan_add(p, &pl, dst, nd, ne, ht->src, ht->offset, ht->dtype, perm, e));
		if (nd == 1 && perm) {
			/* a permuted bias: each element is a row */
			plan_tensor *t = &p->t[p->n - 1];
			t->n_rows = t->desc.ne[0];
			t->row_elems = 1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ metadata */

/* The sampling defaults of generation_config.json a runner can use, each
 * range-checked as moe-run checks the same option on its command line
 * (a count may be an integral real; nothing out of range is kept or
 * silently dropped: it is an error naming the field). */
static int generation_json(const char *text, const char *input, json_t **out, moe_error *e)
{
	static const struct { const char *key; double lo, hi; bool integral; } keys[] = {
		{"temperature", 0, 100, false},       {"top_p", 0, 1, false},
		{"top_k", 0, 1 << 30, true},          {"min_p", 0, 1, false},
		{"repetition_penalty", 1e-3, 100, false}, {"max_new_tokens", 0, 1 << 30, true},
	};
	*out = NULL;
	if (!text)
		return 0;
	json_error_t je;
	json_t *g = json_loads(text, 0, &je);
	if (!json_is_object(g)) {
		json_decref(g);
		return moe_err(e, MOE_EFORMAT, "%s: generation_config.json: %s", input,
			       g ? "not a JSON object" : je.text);
	}
	json_t *o = json_object();
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		json_t *v = json_object_get(g, keys[i].key);
		if (!v || json_is_null(v))
			continue;
		double d = json_number_value(v);
		if (!json_is_number(v) || !(d >= keys[i].lo && d <= keys[i].hi) ||
		    (keys[i].integral && d != floor(d))) {
			json_decref(o);
			json_decref(g);
			return moe_err(e, MOE_EFORMAT, "%s: generation_config.json: field '%s' must be %s "
						       "from %g to %g", input, keys[i].key,
				       keys[i].integral ? "an integer" : "a number", keys[i].lo,
				       keys[i].hi);
		}
		json_object_set_new(o, keys[i].key, keys[i].integral ? json_integer((json_int_t)d)
								     : json_real(d));
	}
	json_decref(g);
	*out = o;
	return 0;
}

static const char *base_name(const char *path, char *buf, size_t n)
{
	snprintf(buf, n, "%s", path);
	size_t len = strlen(buf);
	while (len > 1 && buf[len - 1] == '/')
		buf[--len] = '\0';
	const char *s = strrchr(buf, '/');
	return s ? s + 1 : buf;
}

static int build_meta(json_t **out, const char *input, const char *source_format,
		      const char *source_arch, const moe_hparams *hp, const moe_vocab_data *vd,
		      const char *name, const char *gen_config, const plan *p, moe_error *e)
{
	json_t *m = json_object();
	json_object_set_new(m, "uth_metadata_version", json_integer(1));
	if (hp) {
		json_object_set_new(m, "architecture", json_string(hp->arch));
		json_object_set_new(m, "hparams", moe_hparams_to_json(hp));
	} else {
		json_object_set_new(m, "architecture", json_null());
	}
	json_t *tok = NULL;
	int rc = moe_vocab_data_to_json(vd, &tok, e);
	if (rc < 0) {
		json_decref(m);
		return rc;
	}
	json_object_set_new(m, "tokenizer", tok);
	json_object_set_new(m, "chat_template",
			    vd->chat_template ? json_string(vd->chat_template) : json_null());
	json_t *gen;
	rc = generation_json(gen_config, input, &gen, e);
	if (rc < 0) {
		json_decref(m);
		return rc;
	}
	if (gen)
		json_object_set_new(m, "generation", gen);
	/* What the file holds, per dtype: the "recipe" as converted. */
	json_t *types = json_object();
	for (size_t i = 0; i < p->n; i++) {
		const char *tn = moe_type_name(p->t[i].desc.dtype);
		json_t *c = json_object_get(types, tn);
		json_object_set_new(types, tn, json_integer(c ? json_integer_value(c) + 1 : 1));
	}
	json_t *q = json_object();
	json_object_set_new(q, "recipe", json_string("as-converted"));
	json_object_set_new(q, "tensor_types", types);
	json_object_set_new(m, "quantization", q);
	json_t *prov = json_object();
	char buf[4096];
	json_object_set_new(prov, "source", json_string(base_name(input, buf, sizeof buf)));
	json_object_set_new(prov, "source_format", json_string(source_format));
	json_object_set_new(prov, "source_architecture", json_string(source_arch ? source_arch : ""));
	json_object_set_new(prov, "converter", json_string("moe-convert " MOE_CONVERTER_VERSION));
	if (name && *name)
		json_object_set_new(prov, "name", json_string(name));
	json_object_set_new(m, "provenance", prov);
	*out = m;
	return 0;
}

/* --------------------------------------------------------------- driver */

typedef struct source {
	moe_src *src;
	moe_gguf *gguf;
	moe_hf *hf;
} source;

static void source_close(source *s)
{
	moe_gguf_close(s->gguf);
	moe_src_close(s->src);
	moe_hf_close(s->hf);
	memset(s, 0, sizeof *s);
}

/* A GGUF file starts with "GGUF"; a directory or anything else is tried as
 * a snapshot (directory or archive). */
static int source_open(source *s, const char *path, moe_error *e)
{
	memset(s, 0, sizeof *s);
	struct stat st;
	if (stat(path, &st) != 0)
		return moe_err(e, MOE_ENOTFOUND, "%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		MOE_TRY(moe_src_open_file(&s->src, path, e));
		char magic[4] = {0};
		if (s->src->size >= 4)
			MOE_TRY(moe_src_read(s->src, 0, magic, 4, e));
		if (!memcmp(magic, "GGUF", 4)) {
			int rc = moe_gguf_open(&s->gguf, s->src, e);
			if (rc < 0)
				source_close(s);
			return rc;
		}
		if (!memcmp(magic, "UTH", 4)) {
			source_close(s);
			return moe_err(e, MOE_EINVAL, "%s: already a UTH file", path);
		}
		size_t pl = strlen(path);
		if (pl > 5 && !strcmp(path + pl - 5, ".gguf")) {
			source_close(s);
			return moe_err(e, MOE_EFORMAT, "%s: bad magic: not a GGUF file (expected \"GGUF\")",
				       path);
		}
		moe_src_close(s->src);
		s->src = NULL;
	}
	return moe_hf_open(&s->hf, path, e);
}

/* The plan as the tensor set the hparams are validated against: sorted by
 * name for the lookups (add_plan_to_writer sorts it into file order later). */
static int cmp_plan_name(const void *a, const void *b)
{
	return strcmp(((const plan_tensor *)a)->name, ((const plan_tensor *)b)->name);
}

static const moe_uth_tensor *plan_at(const void *ctx, size_t i)
{
	const plan *p = ctx;
	return &p->t[i].desc;
}

static const moe_uth_tensor *plan_find(const void *ctx, const char *name)
{
	const plan *p = ctx;
	size_t lo = 0, hi = p->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, p->t[mid].name);
		if (!c)
			return &p->t[mid].desc;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* The shared validation (arch.h) on what will be written: the converter
 * refuses what the loader would refuse, naming the file and the field. */
static int plan_validate(plan *p, const moe_hparams *hp, moe_error *e)
{
	if (p->n)
		qsort(p->t, p->n, sizeof *p->t, cmp_plan_name);
	for (size_t i = 0; i < p->n; i++) {
		p->t[i].desc.name = p->t[i].name;
		if (i && !strcmp(p->t[i - 1].name, p->t[i].name))
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s' appears twice", p->input,
				       p->t[i].name);
	}
	moe_tensor_set ts = {.count = p->n, .at = plan_at, .find = plan_find, .ctx = p};
	if (moe_hparams_validate(hp, &ts, false, e) < 0)
		return moe_err_prefix(e, "%s", p->input);
	return 0;
}

/* The tokenizer must have tokens, and no more than the embedding has rows
 * (the loader refuses a token without a row). */
static int vocab_validate(const moe_vocab_data *vd, const moe_hparams *hp, const char *input,
			  moe_error *e)
{
	if (vd->model != MOE_VOCAB_NONE && vd->n_tokens == 0)
		return moe_err(e, MOE_EFORMAT, "%s: the tokenizer's vocabulary is empty", input);
	/* Only added (special) tokens: no text could be encoded. */
	uint32_t ordinary = 0;
	for (uint32_t i = 0; vd->model != MOE_VOCAB_NONE && vd->types && i < vd->n_tokens; i++)
		ordinary += vd->types[i] == MOE_TOKEN_NORMAL || vd->types[i] == MOE_TOKEN_BYTE;
	if (vd->model != MOE_VOCAB_NONE && vd->types && ordinary == 0)
		return moe_err(e, MOE_EFORMAT, "%s: the tokenizer's vocabulary is empty (%u special "
					       "tokens, no ordinary ones)", input, vd->n_tokens);
	if (hp && vd->n_tokens > hp->n_vocab)
		return moe_err(e, MOE_EFORMAT, "%s: the tokenizer has %u tokens but the model's "
					       "vocabulary (embedding rows) only %u",
			       input, vd->n_tokens, hp->n_vocab);
	return 0;
}

static int add_plan_to_writer(plan *p, moe_uth_writer *w, moe_error *e)
{
	if (p->n)
		qsort(p->t, p->n, sizeof *p->t, cmp_plan);
	for (size_t i = 0; i < p->n; i++) {
		plan_tensor *t = &p->t[i];
		t->desc.name = t->name;
		/* --repack: the matrices with a row-interleaved layout get it,
		 * rows repacked as they are produced (quant/repack.c). */
		if (p->repack && moe_repack_eligible(t->desc.dtype, t->desc.n_dims, t->desc.ne,
						     t->desc.role)) {
			t->desc.layout = MOE_UTH_LAYOUT_R4;
			t->repack = (moe_repack_fill){.inner = plan_fill, .inner_ctx = t,
						      .layout = MOE_UTH_LAYOUT_R4,
						      .dtype = t->desc.dtype,
						      .cols = t->desc.ne[0]};
			MOE_TRY(moe_uth_writer_add(w, &t->desc, moe_repack_fill_fn, &t->repack, e));
			continue;
		}
		MOE_TRY(moe_uth_writer_add(w, &t->desc, plan_fill, t, e));
	}
	return 0;
}

/* Build everything but the data: plan, vocabulary and metadata. */
typedef struct conversion {
	source src;
	plan plan;
	moe_hparams hp;
	bool has_hp;
	moe_vocab_data vd;
	moe_arena vocab_arena;
	json_t *meta;
	moe_uth_writer *w; /* every tensor described, metadata set */
} conversion;

static void conversion_free(conversion *c)
{
	moe_uth_writer_free(c->w);
	plan_free(&c->plan);
	moe_arena_free(&c->vocab_arena);
	json_decref(c->meta);
	source_close(&c->src);
}

static int conversion_prepare(conversion *c, const char *input, int out_type,
			      bool reference_quant, bool repack, moe_error *e)
{
	memset(c, 0, sizeof *c);
	moe_arena_init(&c->plan.arena, 0);
	moe_arena_init(&c->vocab_arena, 0);
	c->plan.input = input;
	c->plan.reference_quant = reference_quant;
	c->plan.repack = repack;
	MOE_TRY(source_open(&c->src, input, e));
	const char *name = NULL, *src_arch = NULL, *fmt, *gen = NULL;
	if (c->src.gguf) {
		moe_gguf *g = c->src.gguf;
		fmt = "gguf";
		if (out_type >= 0)
			return moe_err(e, MOE_EINVAL, "%s: --type applies to safetensors input; GGUF "
						      "tensors keep their types (use moe-quant)",
				       input);
		moe_gguf_get_str(g, "general.name", &name, NULL);
		moe_gguf_get_str(g, "general.architecture", &src_arch, NULL);
		if (g->n_tensors > 0) {
			/* the architecture first: its error is the most useful */
			MOE_TRY(moe_hparams_from_gguf(&c->hp, g, e));
			MOE_TRY(moe_hparams_check(&c->hp, e) < 0 ? moe_err_prefix(e, "%s", input) : 0);
			c->has_hp = true;
			MOE_TRY(plan_gguf(&c->plan, g, &c->hp, e));
			MOE_TRY(plan_validate(&c->plan, &c->hp, e));
		}
		MOE_TRY(moe_vocab_data_from_gguf(&c->vd, g, &c->vocab_arena, e));
		MOE_TRY(vocab_validate(&c->vd, c->has_hp ? &c->hp : NULL, input, e));
	} else {
		moe_hf *h = c->src.hf;
		fmt = "safetensors";
		bool lm_head = moe_hf_find(h, "lm_head.weight") != NULL;
		int rc = moe_hparams_from_hf(&c->hp, h->config_json, lm_head, e);
		if (rc < 0)
			return moe_err_prefix(e, "%s", input);
		if (moe_hparams_check(&c->hp, e) < 0)
			return moe_err_prefix(e, "%s", input);
		c->has_hp = true;
		json_t *cfg = json_loads(h->config_json, 0, NULL);
		const char *a = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
		src_arch = a ? moe_arena_strndup(&c->plan.arena, a, strlen(a)) : NULL;
		json_t *nm = json_object_get(cfg, "_name_or_path");
		if (json_is_string(nm))
			name = moe_arena_strndup(&c->plan.arena, json_string_value(nm),
						 strlen(json_string_value(nm)));
		json_decref(cfg);
		if (!h->tokenizer_json)
			return moe_err(e, MOE_ENOTFOUND, "%s: tokenizer.json missing", input);
		rc = moe_vocab_data_from_hf(&c->vd, h->tokenizer_json, h->tokenizer_config_json,
					    &c->vocab_arena, e);
		if (rc < 0)
			return moe_err_prefix(e, "%s", input);
		MOE_TRY(plan_hf(&c->plan, h, moe_arch_by_name(c->hp.arch), &c->hp, out_type, e));
		MOE_TRY(plan_validate(&c->plan, &c->hp, e));
		MOE_TRY(vocab_validate(&c->vd, &c->hp, input, e));
		gen = h->generation_config_json;
	}
	MOE_TRY(build_meta(&c->meta, input, fmt, src_arch, c->has_hp ? &c->hp : NULL, &c->vd, name,
			   gen, &c->plan, e));
	/* describe the output: tokenizer tables, then the weights in file order */
	MOE_TRY(moe_uth_writer_new(&c->w, e));
	MOE_TRY(moe_vocab_data_add_tensors(&c->vd, c->w, e));
	MOE_TRY(add_plan_to_writer(&c->plan, c->w, e));
	char *meta = json_dumps(c->meta, JSON_COMPACT | JSON_SORT_KEYS);
	if (!meta)
		return moe_err(e, MOE_ENOMEM, "out of memory writing metadata");
	int rc = moe_uth_writer_set_meta(c->w, meta, strlen(meta), e);
	free(meta);
	MOE_TRY(rc);
	if (c->plan.n == 0)
		moe_uth_writer_set_flags(c->w, MOE_UTH_FLAG_VOCAB_ONLY);
	return 0;
}

/* The output may not be a file the conversion reads: the input itself (a
 * GGUF or an archive) or, for a snapshot directory, one of its shards.
 * (moe_out_open refuses outputs that are not regular files.) */
static int check_output(const conversion *c, const char *input, const char *output,
			moe_error *e)
{
	/* "-": standard output may itself be redirected onto the input */
	MOE_TRY(moe_out_check_not_input(output, input, e));
	struct stat so, si;
	if (!strcmp(output, "-") ? fstat(STDOUT_FILENO, &so) != 0 : stat(output, &so) != 0)
		return 0;
	const moe_hf *h = c->src.hf;
	if (h && !h->is_archive)
		for (uint32_t i = 0; i < h->n_shards; i++) {
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", h->path, h->shards[i].name);
			if (stat(path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
				return moe_err(e, MOE_EINVAL, "%s: the output is an input file (%s)",
					       output, path);
		}
	return 0;
}

int moe_convert(const moe_convert_opts *o, moe_error *e)
{
	if (!o->input || !o->output)
		return moe_err(e, MOE_EINVAL, "input and output are required");
	if (o->out_type >= 0 && !moe_convert_type_ok(o->out_type))
		return moe_err(e, MOE_EINVAL, "--type must be one of %s", MOE_CONVERT_TYPES);
	conversion c;
	int rc = conversion_prepare(&c, o->input, o->out_type, o->reference_quant, o->repack, e);
	if (rc == 0)
		rc = check_output(&c, o->input, o->output, e);
	if (rc == 0) {
		moe_out out;
		rc = moe_out_open(&out, o->output, e);
		if (rc == 0) {
			rc = moe_uth_writer_write(c.w, &out, e);
			if (rc == 0)
				rc = moe_out_commit(&out, e);
			else
				moe_out_abort(&out);
		}
	}
	conversion_free(&c);
	return rc;
}

/* ---------------------------------------------------------------- info */

static json_t *summarise(const char *path, const char *format, const json_t *meta,
			 size_t n, const moe_uth_tensor *(*get)(void *, size_t), void *ctx,
			 uint32_t flags)
{
	json_t *info = json_object();
	json_object_set_new(info, "file", json_string(path));
	json_object_set_new(info, "format", json_string(format));
	json_object_set(info, "architecture", json_object_get(meta, "architecture"));
	json_t *prov_name = json_object_get(json_object_get(meta, "provenance"), "name");
	if (prov_name)
		json_object_set(info, "name", prov_name);
	if (json_object_get(meta, "hparams"))
		json_object_set(info, "hparams", json_object_get(meta, "hparams"));
	json_t *tok = json_object_get(meta, "tokenizer");
	if (tok)
		json_object_set(info, "tokenizer", tok);
	json_object_set_new(info, "vocab_only", json_boolean(flags & MOE_UTH_FLAG_VOCAB_ONLY));
	json_t *types = json_object();
	json_t *layouts = json_object(); /* layout name -> tensors */
	uint64_t total = 0, n_weights = 0;
	/* experts per layer: the distinct expert indices seen in each layer */
	json_t *epl = json_array();
	for (size_t i = 0; i < n; i++) {
		const moe_uth_tensor *t = get(ctx, i);
		const char *tn = moe_type_name(t->dtype);
		json_t *c = json_object_get(types, tn);
		if (!c) {
			c = json_object();
			json_object_set_new(c, "tensors", json_integer(0));
			json_object_set_new(c, "bytes", json_integer(0));
			json_object_set_new(types, tn, c);
		}
		json_object_set_new(c, "tensors",
				    json_integer(json_integer_value(json_object_get(c, "tensors")) + 1));
		json_object_set_new(c, "bytes", json_integer(json_integer_value(json_object_get(c, "bytes")) +
							     (json_int_t)t->size));
		const char *ln = moe_repack_layout_name(t->layout);
		ln = ln ? ln : "?";
		json_object_set_new(layouts, ln,
				    json_integer(json_integer_value(json_object_get(layouts, ln)) + 1));
		total += t->size;
		if (t->role < MOE_UTH_ROLE_TOKENIZER_TOKENS || t->role > MOE_UTH_ROLE_TOKENIZER_MERGE_OFFSETS) {
			uint64_t el = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
			n_weights += el;
		}
		if (t->layer != MOE_UTH_NONE && t->expert != MOE_UTH_NONE) {
			while (json_array_size(epl) <= t->layer)
				json_array_append_new(epl, json_integer(0));
			json_int_t cur = json_integer_value(json_array_get(epl, t->layer));
			if (t->expert + 1 > cur)
				json_array_set_new(epl, t->layer, json_integer(t->expert + 1));
		}
	}
	json_object_set_new(info, "n_tensors", json_integer((json_int_t)n));
	json_object_set_new(info, "bytes", json_integer((json_int_t)total));
	json_object_set_new(info, "n_params", json_integer((json_int_t)n_weights));
	json_object_set_new(info, "dtypes", types);
	json_object_set_new(info, "layouts", layouts);
	json_object_set_new(info, "experts_per_layer", epl);
	json_object_set(info, "chat_template", json_object_get(meta, "chat_template"));
	if (json_object_get(meta, "provenance"))
		json_object_set(info, "provenance", json_object_get(meta, "provenance"));
	if (json_object_get(meta, "quantization")) /* recipe and types (moe-quant) */
		json_object_set(info, "quantization", json_object_get(meta, "quantization"));
	return info;
}

static const moe_uth_tensor *uth_get(void *ctx, size_t i)
{
	return &((moe_uth *)ctx)->tensors[i];
}

static const moe_uth_tensor *writer_get(void *ctx, size_t i)
{
	return moe_uth_writer_tensor(ctx, i);
}

int moe_model_info(const char *path, json_t **out, moe_error *e)
{
	moe_src *s;
	MOE_TRY(moe_src_open_file(&s, path, e));
	char magic[4] = {0};
	int rc = s->size >= 4 ? moe_src_read(s, 0, magic, 4, e) : 0;
	moe_src_close(s);
	MOE_TRY(rc);
	if (!memcmp(magic, "UTH", 4)) {
		moe_uth *u;
		MOE_TRY(moe_uth_open(&u, path, e));
		json_t *meta = json_loadb(u->meta, u->meta_len, 0, NULL);
		*out = summarise(path, "uth", meta, u->n_tensors, uth_get, u, u->flags);
		json_decref(meta);
		moe_uth_close(u);
		return 0;
	}
	if (memcmp(magic, "GGUF", 4))
		return moe_err(e, MOE_EFORMAT, "%s: neither a UTH nor a GGUF file", path);
	conversion c;
	rc = conversion_prepare(&c, path, -1, false, false, e);
	if (rc == 0)
		*out = summarise(path, "gguf", c.meta, moe_uth_writer_count(c.w), writer_get, c.w,
				 c.plan.n ? 0 : MOE_UTH_FLAG_VOCAB_ONLY);
	conversion_free(&c);
	return rc;
}

static void appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int w = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
		va_end(ap);
		if (w < 0)
			return;
		if (*buf && (size_t)w < *cap - *len) {
			*len += (size_t)w;
			return;
		}
		size_t ncap = (*cap + (size_t)w + 1) * 2;
		char *nb = realloc(*buf, ncap);
		if (!nb)
			return;
		*buf = nb;
		*cap = ncap;
	}
}

static void human_bytes(uint64_t b, char *out, size_t n)
{
	const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = 0;
	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	snprintf(out, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

char *moe_model_info_text(const json_t *info)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	char hb[32];
	const json_t *arch = json_object_get(info, "architecture");
	appendf(&buf, &len, &cap, "file:          %s (%s)\n",
		json_string_value(json_object_get(info, "file")),
		json_string_value(json_object_get(info, "format")));
	appendf(&buf, &len, &cap, "architecture:  %s%s\n",
		json_is_string(arch) ? json_string_value(arch) : "(none)",
		json_is_true(json_object_get(info, "vocab_only")) ? " (vocabulary only)" : "");
	if (json_is_string(json_object_get(info, "name")))
		appendf(&buf, &len, &cap, "name:          %s\n",
			json_string_value(json_object_get(info, "name")));
	const json_t *hp = json_object_get(info, "hparams");
	if (hp) {
		const char *key;
		const json_t *v;
		appendf(&buf, &len, &cap, "hyper-parameters:\n");
		json_object_foreach((json_t *)hp, key, v) {
			if (json_is_object(v)) {
				const char *k2;
				const json_t *v2;
				json_object_foreach((json_t *)v, k2, v2) {
					char *s = json_dumps(v2, JSON_ENCODE_ANY);
					char dk[64];
					snprintf(dk, sizeof dk, "%s.%s", key, k2);
					appendf(&buf, &len, &cap, "  %-22s %s\n", dk, s ? s : "?");
					free(s);
				}
				continue;
			}
			char *s = json_dumps(v, JSON_ENCODE_ANY);
			appendf(&buf, &len, &cap, "  %-22s %s\n", key, s ? s : "?");
			free(s);
		}
	}
	const json_t *tok = json_object_get(info, "tokenizer");
	if (tok) {
		const json_t *m = json_object_get(tok, "model"), *pre = json_object_get(tok, "pre"),
			     *nt = json_object_get(tok, "n_tokens");
		appendf(&buf, &len, &cap, "tokenizer:     %s (pre-tokenizer %s), %lld tokens\n",
			json_is_string(m) ? json_string_value(m) : "?",
			json_is_string(pre) ? json_string_value(pre) : "?",
			(long long)json_integer_value(nt));
	}
	human_bytes((uint64_t)json_integer_value(json_object_get(info, "bytes")), hb, sizeof hb);
	appendf(&buf, &len, &cap, "tensors:       %lld, %s, %lld parameters\n",
		(long long)json_integer_value(json_object_get(info, "n_tensors")), hb,
		(long long)json_integer_value(json_object_get(info, "n_params")));
	const char *tn;
	const json_t *tv;
	json_object_foreach((json_t *)json_object_get(info, "dtypes"), tn, tv) {
		human_bytes((uint64_t)json_integer_value(json_object_get(tv, "bytes")), hb, sizeof hb);
		appendf(&buf, &len, &cap, "  %-8s %6lld tensors %12s\n", tn,
			(long long)json_integer_value(json_object_get(tv, "tensors")), hb);
	}
	appendf(&buf, &len, &cap, "layouts:      ");
	json_object_foreach((json_t *)json_object_get(info, "layouts"), tn, tv)
		appendf(&buf, &len, &cap, " %s %lld", tn, (long long)json_integer_value(tv));
	appendf(&buf, &len, &cap, "\n");
	const json_t *epl = json_object_get(info, "experts_per_layer");
	if (json_array_size(epl)) {
		appendf(&buf, &len, &cap, "experts per layer:");
		size_t i;
		const json_t *v;
		json_array_foreach(epl, i, v)
			appendf(&buf, &len, &cap, " %lld", (long long)json_integer_value(v));
		appendf(&buf, &len, &cap, "\n");
	}
	const json_t *ct = json_object_get(info, "chat_template");
	appendf(&buf, &len, &cap, "chat template: %s\n", json_is_string(ct) ? "yes" : "none");
	const json_t *q = json_object_get(info, "quantization");
	const char *qr = json_string_value(json_object_get(q, "recipe"));
	const char *qi = json_string_value(json_object_get(q, "imatrix"));
	if (qr && strcmp(qr, "as-converted") != 0) /* set by moe-quant */
		appendf(&buf, &len, &cap, "quantization:  %s%s%s\n", qr, qi ? ", imatrix " : "",
			qi ? qi : "");
	return buf;
}
