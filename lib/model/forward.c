/* forward.c — the transformer forward pass over a batch of tokens.
 *
 * One decoder layer, as in the papers (shapes for a batch of B tokens):
 *
 *   xn   = RMSNorm(x) * attn_norm                         [B, n_embd]
 *   q,k,v = xn Wq^T (+bq), xn Wk^T (+bk), xn Wv^T (+bv)    [B, H*hd], [B, Hkv*hd]
 *   (q/k RMSNorm per head (Qwen3) or over the projection (OLMoE))
 *   q,k  = RoPE(q, k, position)                           interleaved pairs or NeoX halves
 *   K,V cache[pos..pos+B) = k, v
 *   a    = softmax(q K^T / sqrt(hd), causal) V            [B, H*hd] (GQA: H/Hkv q heads per kv head)
 *   x   += a Wo^T
 *   xn   = RMSNorm(x) * ffn_norm
 *   dense: x += (silu(xn Wg^T) * (xn Wu^T)) Wd^T
 *   MoE:   p = softmax(xn Wr^T); top-k experts (renormalised if the model says so);
 *          x += sum_k p_k * FFN_k(xn)  (+ sigmoid(xn ws) * FFN_shared(xn))
 *
 * Then logits = RMSNorm(x) * out_norm W_out^T for the last token (or all).
 * MoE tokens are grouped by expert so each expert's weights are read once
 * per batch. */
#include "generate.h"
#include "model.h"
#include "quant.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct moe_ctx {
	const moe_model *m;
	const moe_kernels *k;
	moe_pool *pool;
	int n_ctx, n_batch, pos, kv_type;
	size_t kv_row_bytes;      /* bytes of one position's K in one layer */
	size_t kv_head_bytes;     /* bytes of one head's slice of that row */
	/* K: [n_layer][n_ctx][kv dims] in kv_type, so a head's key is a row
	 * slice.  V: for F16 transposed, [n_layer][kv dims][n_ctx], so the
	 * weighted sum over positions is one dot product per output dimension;
	 * for Q8_0 (blocks run along a row) like K. */
	uint8_t *kcache, *vcache;
	bool v_trans;
	int n_threads;
	float *att_scratch;       /* per thread: scores [n_ctx] + q row [hd] */
	void *qx_scratch;         /* per thread: q quantised for the K dot products */
	size_t qx_bytes;
	/* activations for one batch */
	float *x, *xn, *q, *kb, *vb, *att, *tmp, *gate, *up, *moe_out, *router, *logits_xn;
	float *xe, *de;           /* gathered expert inputs / outputs [B, n_embd] */
	float *rope_cos, *rope_sin; /* [B, n_rot/2] for the batch's positions */
	int32_t *sel;             /* [B, k] chosen experts */
	float *selw;              /* [B, k] their weights */
	int32_t *tokens;          /* [n_ctx] the tokens in the cache */
	int32_t *tok_of;          /* tokens routed to the current expert */
	float *w_of;
	void *scratch;
	size_t scratch_size;
	/* expert-parallel decode: per thread, buffers for up to EXP_PAR_MAX
	 * tokens of one expert and a partial sum of the layer's output */
	float *ex_buf;
	size_t ex_stride;         /* floats per thread in ex_buf */
	uint8_t *ex_scratch;
	size_t ex_scratch_size;   /* bytes per thread */
	moe_route_fn route_fn;
	void *route_user;
};

/* Batches of at most this many tokens run their experts in parallel (one
 * whole expert per thread at a time); larger batches split each expert's
 * rows over the threads instead. */
#define EXP_PAR_MAX 8

/* ------------------------------------------------------------ helpers */

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps)
{
	double ss = 0;
	for (int64_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] * scale * w[i];
}

static float silu(float x)
{
	return x / (1.0f + expf(-x));
}

static void matmul(moe_ctx *c, const moe_weight *w, const float *X, int64_t n_tok, float *Y,
		   int64_t ldy)
{
	moe_matmul(c->k, c->pool, w->dtype, w->data, w->rows, w->cols, X, w->cols, n_tok, Y, ldy,
		   c->scratch);
}

static void row_to_float(const moe_ctx *c, int dtype, const void *src, float *dst, int64_t n)
{
	moe_to_float_fn f = c->k->to_float[dtype];
	if (!f)
		f = moe_type_get(dtype)->to_float;
	f(src, dst, n);
}

/* RoPE angles for the batch: pair i of position p turns by
 * p * base^(-2i/n_rot), with linear scaling (p / factor) or YaRN (a ramp
 * between interpolated and original angles over the pairs, by how many turns
 * a pair makes in the original context, and cos/sin scaled by
 * 1 + 0.1 ln(factor)).  Computed once per token, used by every head and layer. */
static void rope_tables(moe_ctx *c, int B)
{
	const moe_hparams *hp = &c->m->hp;
	int half = (int)hp->n_rot / 2;
	double factor = hp->rope_factor > 0 ? hp->rope_factor : 1.0, mscale = 1.0;
	double low = 0, high = 0;
	bool yarn = hp->rope_scaling == MOE_ROPE_SCALING_YARN && hp->rope_orig_ctx > 0;
	if (yarn) {
		/* the pair whose wavelength fits `turns` turns into the original context */
		double n = hp->n_rot, ctx = hp->rope_orig_ctx, lb = log(hp->rope_base);
		low = floor(n * log(ctx / (32.0 * 2 * M_PI)) / (2 * lb));  /* beta_fast = 32 */
		high = ceil(n * log(ctx / (1.0 * 2 * M_PI)) / (2 * lb));   /* beta_slow = 1 */
		low = low < 0 ? 0 : low;
		high = high > n - 1 ? n - 1 : high;
		mscale = 1.0 + 0.1 * log(factor);
	}
	for (int t = 0; t < B; t++) {
		double pos = c->pos + t;
		for (int i = 0; i < half; i++) {
			double theta = pos * pow(hp->rope_base, -2.0 * i / hp->n_rot);
			if (hp->rope_scaling == MOE_ROPE_SCALING_LINEAR) {
				theta /= factor;
			} else if (yarn) {
				double span = high - low > 0.001 ? high - low : 0.001;
				double ramp = (i - low) / span;
				ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
				theta = theta / factor * ramp + theta * (1 - ramp);
			}
			c->rope_cos[t * half + i] = (float)(cos(theta) * mscale);
			c->rope_sin[t * half + i] = (float)(sin(theta) * mscale);
		}
	}
}

/* Rotate one head vector of token t.  NORM pairs (2i, 2i+1); NEOX pairs
 * (i, i + n_rot/2); dimensions past n_rot pass through. */
static void rope(const moe_ctx *c, float *v, int t)
{
	const moe_hparams *hp = &c->m->hp;
	int half = (int)hp->n_rot / 2;
	const float *cs = c->rope_cos + t * half, *sn = c->rope_sin + t * half;
	bool neox = hp->rope_kind == MOE_ROPE_NEOX;
	for (int i = 0; i < half; i++) {
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		float x0 = v[a], x1 = v[b];
		v[a] = x0 * cs[i] - x1 * sn[i];
		v[b] = x0 * sn[i] + x1 * cs[i];
	}
}

/* ------------------------------------------------------------ context */

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

int moe_ctx_new(moe_ctx **out, const moe_model *m, const moe_ctx_params *p, moe_error *e)
{
	*out = NULL;
	const moe_hparams *hp = &m->hp;
	moe_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	c->m = m;
	c->k = moe_kernels_get();
	c->n_ctx = p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train && hp->n_ctx_train < 4096 ? (int)hp->n_ctx_train : 4096);
	c->n_batch = p->n_batch > 0 ? p->n_batch : 256;
	if (c->n_batch > c->n_ctx)
		c->n_batch = c->n_ctx;
	/* 0 (a zeroed struct) means the default; MOE_F32 is also 0, so an F32
	 * cache cannot be asked for — by design, F16 loses nothing measurable. */
	c->kv_type = p->kv_type ? p->kv_type : MOE_F16;
	int rc;
	if (c->kv_type != MOE_F16 && c->kv_type != MOE_Q8_0) {
		rc = moe_err(e, MOE_EINVAL, "KV cache type must be f16 or q8_0");
		goto fail;
	}
	/* Each head's key must be whole blocks of the cache type. */
	if (hp->head_dim % moe_type_get(c->kv_type)->block_size) {
		rc = moe_err(e, MOE_EINVAL, "a %s KV cache needs a head size that is a multiple of %u "
					    "(this model's is %u); use f16",
			     moe_type_name(c->kv_type), moe_type_get(c->kv_type)->block_size,
			     hp->head_dim);
		goto fail;
	}
	int nthreads = p->n_threads > 0 ? p->n_threads : moe_default_threads();
	if ((rc = moe_pool_create(&c->pool, nthreads, e)) < 0)
		goto fail;
	int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim;
	uint64_t rb;
	if ((rc = moe_type_nbytes(c->kv_type, (uint64_t)kvd, &rb, e)) < 0) {
		moe_err_prefix(e, "KV cache");
		goto fail;
	}
	c->kv_row_bytes = (size_t)rb;
	c->kv_head_bytes = c->kv_row_bytes / hp->n_head_kv; /* whole blocks, checked above */
	size_t kv_bytes = (size_t)hp->n_layer * c->n_ctx * c->kv_row_bytes;
	c->kcache = malloc(kv_bytes);
	c->vcache = malloc(kv_bytes);
	int64_t B = c->n_batch, E = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim;
	size_t ff = max_sz(max_sz(hp->n_ff, hp->n_ff_exp), hp->n_ff_shexp);
#define ALLOC(ptr, count) (ptr) = malloc(max_sz((size_t)(count), 1) * sizeof *(ptr))
	ALLOC(c->x, B * E);
	ALLOC(c->xn, B * E);
	ALLOC(c->q, B * nq);
	ALLOC(c->kb, B * kvd);
	ALLOC(c->vb, B * kvd);
	ALLOC(c->att, B * nq);
	ALLOC(c->tmp, B * E);
	ALLOC(c->gate, B * ff);
	ALLOC(c->up, B * ff);
	ALLOC(c->moe_out, B * E);
	ALLOC(c->router, B * max_sz(hp->n_expert, 1));
	ALLOC(c->xe, B * E);
	ALLOC(c->de, B * E);
	c->n_threads = nthreads;
	ALLOC(c->att_scratch, (int64_t)nthreads * (c->n_ctx + hp->head_dim + 64));
	ALLOC(c->sel, B * max_sz(hp->n_expert_used, 1));
	ALLOC(c->selw, B * max_sz(hp->n_expert_used, 1));
	ALLOC(c->tok_of, max_sz((size_t)B, hp->n_expert)); /* tokens of an expert, or active experts */
	ALLOC(c->tokens, c->n_ctx);
	ALLOC(c->rope_cos, B * (hp->n_rot / 2 + 1));
	ALLOC(c->rope_sin, B * (hp->n_rot / 2 + 1));
	ALLOC(c->w_of, B);
#undef ALLOC
	/* scratch: the largest activation batch any matmul quantises */
	int dts[MOE_DTYPE_MAX] = {0};
	const moe_weight *ws[] = {&m->output, &m->tok_embd};
	for (size_t i = 0; i < 2; i++)
		dts[ws[i]->dtype] = 1;
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		dts[L->wq.dtype] = dts[L->wk.dtype] = dts[L->wv.dtype] = dts[L->wo.dtype] = 1;
		if (L->is_moe) {
			dts[L->router.dtype] = 1;
			for (uint32_t x = 0; x < hp->n_expert; x++)
				dts[L->exp_gate[x].dtype] = dts[L->exp_up[x].dtype] =
					dts[L->exp_down[x].dtype] = 1;
			if (L->sh_gate.data)
				dts[L->sh_gate.dtype] = dts[L->sh_up.dtype] = dts[L->sh_down.dtype] = 1;
			if (L->sh_router.data)
				dts[L->sh_router.dtype] = 1;
		} else {
			dts[L->ffn_gate.dtype] = dts[L->ffn_up.dtype] = dts[L->ffn_down.dtype] = 1;
		}
	}
	int64_t widest = max_sz(max_sz((size_t)E, (size_t)nq), ff);
	for (int d = 0; d < MOE_DTYPE_MAX; d++)
		if (dts[d])
			c->scratch_size = max_sz(c->scratch_size, moe_matmul_scratch(d, widest, B));
	c->scratch = malloc(max_sz(c->scratch_size, 64));
	/* q in the K type's activation type, one row per thread */
	uint64_t qxb = 0;
	int kv_act = moe_type_get(c->kv_type)->vec_dot_type;
	if (moe_type_nbytes(kv_act, hp->head_dim, &qxb, NULL) < 0)
		qxb = (uint64_t)hp->head_dim * sizeof(float);
	c->qx_bytes = (size_t)((qxb + 63) & ~(uint64_t)63);
	c->qx_scratch = malloc(c->qx_bytes * (size_t)nthreads);
	c->v_trans = c->kv_type != MOE_Q8_0;
	if (hp->n_expert) {
		/* xe, de, out [EXP_PAR_MAX x E] and gate, up [EXP_PAR_MAX x ff] */
		c->ex_stride = (size_t)EXP_PAR_MAX * (3 * (size_t)E + 2 * ff) + 16;
		c->ex_buf = malloc(c->ex_stride * (size_t)nthreads * sizeof(float));
		for (int d = 0; d < MOE_DTYPE_MAX; d++)
			if (dts[d])
				c->ex_scratch_size = max_sz(c->ex_scratch_size,
							    moe_matmul_scratch(d, widest, EXP_PAR_MAX));
		c->ex_scratch_size = (c->ex_scratch_size + 63) & ~(size_t)63;
		c->ex_scratch = malloc(max_sz(c->ex_scratch_size * (size_t)nthreads, 64));
		if (!c->ex_buf || !c->ex_scratch) {
			rc = moe_err(e, MOE_ENOMEM, "out of memory for expert buffers");
			goto fail;
		}
	}
	if (!c->kcache || !c->vcache || !c->x || !c->xn || !c->q || !c->kb || !c->vb || !c->att ||
	    !c->tmp || !c->gate || !c->up || !c->moe_out || !c->router || !c->xe || !c->de ||
	    !c->att_scratch || !c->qx_scratch || !c->sel || !c->selw || !c->tok_of || !c->w_of || !c->scratch || !c->rope_cos || !c->rope_sin || !c->tokens) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory for a %d-token context (%zu MiB KV cache)",
			     c->n_ctx, 2 * kv_bytes >> 20);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	moe_ctx_free(c);
	return rc;
}

void moe_ctx_free(moe_ctx *c)
{
	if (!c)
		return;
	moe_pool_free(c->pool);
	void *bufs[] = {c->kcache, c->vcache, c->x, c->xn, c->q, c->kb, c->vb, c->att, c->tmp,
			c->gate, c->up, c->moe_out, c->router, c->xe, c->de, c->att_scratch, c->qx_scratch, c->sel,
			c->selw, c->tok_of, c->w_of, c->scratch, c->rope_cos, c->rope_sin, c->tokens, c->ex_buf, c->ex_scratch};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
	free(c);
}

int moe_ctx_pos(const moe_ctx *c)
{
	return c->pos;
}

int moe_ctx_n_ctx(const moe_ctx *c)
{
	return c->n_ctx;
}

uint32_t moe_ctx_n_vocab(const moe_ctx *c)
{
	return c->m->hp.n_vocab;
}

void moe_ctx_truncate(moe_ctx *c, int pos)
{
	if (pos >= 0 && pos < c->pos)
		c->pos = pos;
}

void moe_ctx_set_route_callback(moe_ctx *c, moe_route_fn fn, void *user)
{
	c->route_fn = fn;
	c->route_user = user;
}

/* ----------------------------------------------------------- attention */

typedef struct {
	moe_ctx *c;
	int il, B, pos0;
} attn_job;

/* Each thread takes (token, head) pairs: scores q.k against the cache with
 * the K type's dot kernel, causal softmax, then the weighted sum of values
 * (one dot product per output dimension over the transposed V). */
static void attn_worker(void *arg, int ith, int nth)
{
	attn_job *j = arg;
	moe_ctx *c = j->c;
	const moe_hparams *hp = &c->m->hp;
	const moe_kernels *k = c->k;
	int H = (int)hp->n_head, hd = (int)hp->head_dim, hdv = (int)hp->head_dim_v;
	int group = H / (int)hp->n_head_kv;
	float scale = 1.0f / sqrtf((float)hd);
	float *scores = c->att_scratch + (size_t)ith * (c->n_ctx + hd + 64);
	float *vrow = scores + c->n_ctx;
	void *qx = (uint8_t *)c->qx_scratch + (size_t)ith * c->qx_bytes;
	int kv_act = moe_type_get(c->kv_type)->vec_dot_type;
	moe_vec_dot_fn kdot = k->vec_dot[c->kv_type];
	const uint8_t *kbase = c->kcache + (size_t)j->il * c->n_ctx * c->kv_row_bytes;
	const uint8_t *vbase = c->vcache + (size_t)j->il * c->n_ctx * c->kv_row_bytes;
	size_t elt = sizeof(uint16_t); /* transposed V is F16 */
	for (int th = ith; th < j->B * H; th += nth) {
		int t = th / H, h = th % H, g = h / group;
		int n_pos = j->pos0 + t + 1; /* causal: positions 0..pos0+t */
		const float *q = c->q + (int64_t)t * H * hd + (int64_t)h * hd;
		const void *qa = q;
		if (kv_act != MOE_F32) {
			k->quantize_row[kv_act](q, qx, hd);
			qa = qx;
		}
		size_t koff = (size_t)g * c->kv_head_bytes;
		float mx = -FLT_MAX;
		for (int p = 0; p < n_pos; p++) {
			float s;
			kdot(hd, &s, kbase + (size_t)p * c->kv_row_bytes + koff, qa);
			s *= scale;
			scores[p] = s;
			mx = s > mx ? s : mx;
		}
		double sum = 0;
		for (int p = 0; p < n_pos; p++)
			sum += (scores[p] = expf(scores[p] - mx));
		float inv = (float)(1.0 / sum);
		for (int p = 0; p < n_pos; p++)
			scores[p] *= inv;
		float *o = c->att + (int64_t)t * H * hdv + (int64_t)h * hdv;
		if (c->v_trans) {
			for (int d = 0; d < hdv; d++) {
				const uint8_t *vt = vbase + ((size_t)g * hdv + d) * c->n_ctx * elt;
				kdot(n_pos, &o[d], vt, scores);
			}
		} else {
			memset(o, 0, (size_t)hdv * sizeof *o);
			size_t voff = (size_t)g * c->kv_head_bytes; /* hdv == hd (load.c) */
			for (int p = 0; p < n_pos; p++) {
				row_to_float(c, c->kv_type, vbase + (size_t)p * c->kv_row_bytes + voff, vrow, hdv);
				for (int d = 0; d < hdv; d++)
					o[d] += scores[p] * vrow[d];
			}
		}
	}
}

/* Store one token's k and v at position p of layer il. */
static void cache_store(moe_ctx *c, int il, int p, const float *k, const float *v, int64_t kvd)
{
	size_t off = ((size_t)il * c->n_ctx + (size_t)p) * c->kv_row_bytes;
	const moe_type_traits *kt = moe_type_get(c->kv_type);
	kt->from_float(k, c->kcache + off, kvd);
	if (!c->v_trans) {
		kt->from_float(v, c->vcache + off, kvd);
		return;
	}
	uint8_t *vl = c->vcache + (size_t)il * c->n_ctx * c->kv_row_bytes;
	for (int64_t d = 0; d < kvd; d++)
		((uint16_t *)vl)[d * c->n_ctx + p] = moe_f32_to_f16(v[d]);
}

static void attention(moe_ctx *c, int il, int B)
{
	const moe_model *m = c->m;
	const moe_hparams *hp = &m->hp;
	const moe_layer *L = &m->layers[il];
	int64_t E = hp->n_embd, hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
	int64_t nq = H * hd, kvd = Hkv * hd;

	for (int t = 0; t < B; t++)
		rmsnorm(c->xn + t * E, c->x + t * E, L->attn_norm, E, hp->norm_eps);
	matmul(c, &L->wq, c->xn, B, c->q, nq);
	matmul(c, &L->wk, c->xn, B, c->kb, kvd);
	matmul(c, &L->wv, c->xn, B, c->vb, kvd);
	for (int t = 0; t < B; t++) {
		float *q = c->q + t * nq, *k = c->kb + t * kvd, *v = c->vb + t * kvd;
		if (L->bq)
			for (int64_t i = 0; i < nq; i++)
				q[i] += L->bq[i];
		if (L->bk)
			for (int64_t i = 0; i < kvd; i++)
				k[i] += L->bk[i];
		if (L->bv)
			for (int64_t i = 0; i < kvd; i++)
				v[i] += L->bv[i];
		if (hp->qk_norm == MOE_QK_NORM_FULL) {
			rmsnorm(q, q, L->q_norm, nq, hp->norm_eps);
			rmsnorm(k, k, L->k_norm, kvd, hp->norm_eps);
		} else if (hp->qk_norm == MOE_QK_NORM_HEAD) {
			for (int64_t h = 0; h < H; h++)
				rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->norm_eps);
			for (int64_t h = 0; h < Hkv; h++)
				rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->norm_eps);
		}
		for (int64_t h = 0; h < H; h++)
			rope(c, q + h * hd, t);
		for (int64_t h = 0; h < Hkv; h++)
			rope(c, k + h * hd, t);
		cache_store(c, il, c->pos + t, k, v, kvd);
	}
	attn_job j = {c, il, B, c->pos};
	moe_pool_run(c->pool, attn_worker, &j);
	matmul(c, &L->wo, c->att, B, c->tmp, E);
	for (int64_t i = 0; i < B * E; i++)
		c->x[i] += c->tmp[i];
}

/* ----------------------------------------------------------------- FFN */

typedef struct {
	const moe_kernels *k;
	const moe_weight *wg, *wu;
	const float *x;
	int m;
	float *g, *u;
	void *scratch;
} gate_up_job;

static void gate_up_quantize(void *arg, int ith, int nth)
{
	gate_up_job *j = arg;
	moe_matmul_quantize(j->k, j->wg->dtype, j->wg->cols, j->x, j->wg->cols, j->m, j->scratch,
			    ith, nth);
}

static void gate_up_compute(void *arg, int ith, int nth)
{
	gate_up_job *j = arg;
	int64_t ff = j->wg->rows, E = j->wg->cols;
	moe_matmul_compute(j->k, j->wg->dtype, j->wg->data, ff, E, j->x, E, j->m, j->g, ff,
			   j->scratch, ith, nth);
	moe_matmul_compute(j->k, j->wu->dtype, j->wu->data, ff, E, j->x, E, j->m, j->u, ff,
			   j->scratch, ith, nth);
}

/* g = x Wg^T and u = x Wu^T, fused: both read the same input, so it is
 * quantised once and both products run in one pool job (pool may be NULL). */
static void gate_up(const moe_kernels *k, moe_pool *pool, const moe_weight *wg,
		    const moe_weight *wu, const float *x, int m, float *g, float *u, void *scratch)
{
	int64_t ff = wg->rows, E = wg->cols;
	if (wg->dtype != wu->dtype || wu->cols != E || wu->rows != ff) {
		moe_matmul(k, pool, wg->dtype, wg->data, ff, E, x, E, m, g, ff, scratch);
		moe_matmul(k, pool, wu->dtype, wu->data, ff, E, x, E, m, u, ff, scratch);
		return;
	}
	gate_up_job j = {k, wg, wu, x, m, g, u, scratch};
	if (moe_type_get(wg->dtype)->vec_dot_type != MOE_F32) {
		if (pool && m >= 2 * moe_pool_threads(pool))
			moe_pool_run(pool, gate_up_quantize, &j);
		else
			gate_up_quantize(&j, 0, 1);
	}
	if (pool)
		moe_pool_run(pool, gate_up_compute, &j);
	else
		gate_up_compute(&j, 0, 1);
}

/* out[t] = (silu(x Wg^T) * (x Wu^T)) Wd^T for m rows of x. */
static void swiglu_ffn(moe_ctx *c, const moe_weight *wg, const moe_weight *wu,
		       const moe_weight *wd, const float *x, int m, float *out)
{
	int64_t ff = wg->rows;
	gate_up(c->k, c->pool, wg, wu, x, m, c->gate, c->up, c->scratch);
	for (int64_t i = 0; i < (int64_t)m * ff; i++)
		c->gate[i] = silu(c->gate[i]) * c->up[i];
	matmul(c, wd, c->gate, m, out, wd->rows);
}

/* The tokens of the batch routed to expert x: their indices, routing
 * weights and normalised inputs (rows of xe).  Returns how many. */
static int gather_expert(const moe_ctx *c, int B, int x, int32_t *tok, float *w, float *xe)
{
	int64_t E = c->m->hp.n_embd;
	int k = (int)c->m->hp.n_expert_used, m = 0;
	for (int t = 0; t < B; t++)
		for (int q = 0; q < k; q++)
			if (c->sel[(int64_t)t * k + q] == x) {
				tok[m] = t;
				w[m] = c->selw[(int64_t)t * k + q];
				memcpy(xe + (int64_t)m * E, c->xn + (int64_t)t * E, (size_t)E * sizeof(float));
				m++;
			}
	return m;
}

typedef struct {
	moe_ctx *c;
	const moe_layer *L;
	int B;
	int n_active;
	const int32_t *active; /* experts with tokens */
} expert_job;

/* One thread runs whole experts, single-threaded, into its own partial
 * output; the caller adds the partials. */
static void expert_worker(void *arg, int ith, int nth)
{
	expert_job *j = arg;
	moe_ctx *c = j->c;
	const moe_hparams *hp = &c->m->hp;
	int64_t E = hp->n_embd, ff = hp->n_ff_exp;
	float *xe = c->ex_buf + (size_t)ith * c->ex_stride;
	float *de = xe + EXP_PAR_MAX * E, *out = de + EXP_PAR_MAX * E;
	float *g = out + EXP_PAR_MAX * E, *u = g + EXP_PAR_MAX * ff;
	void *scr = c->ex_scratch + (size_t)ith * c->ex_scratch_size;
	int32_t tok[EXP_PAR_MAX];
	float w[EXP_PAR_MAX];
	memset(out, 0, (size_t)j->B * E * sizeof *out);
	for (int a = ith; a < j->n_active; a += nth) {
		int x = j->active[a], m = gather_expert(c, j->B, x, tok, w, xe);
		const moe_weight *wg = &j->L->exp_gate[x], *wu = &j->L->exp_up[x], *wd = &j->L->exp_down[x];
		gate_up(c->k, NULL, wg, wu, xe, m, g, u, scr);
		for (int64_t i = 0; i < (int64_t)m * ff; i++)
			g[i] = silu(g[i]) * u[i];
		moe_matmul(c->k, NULL, wd->dtype, wd->data, wd->rows, wd->cols, g, ff, m, de, E, scr);
		for (int i = 0; i < m; i++)
			for (int64_t q = 0; q < E; q++)
				out[(int64_t)tok[i] * E + q] += w[i] * de[(int64_t)i * E + q];
	}
}

/* Top-k of n values (k small): indices in decreasing order. */
static void top_k(const float *v, int n, int k, int32_t *idx)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			bool taken = false;
			for (int q = 0; q < j; q++)
				taken |= idx[q] == i;
			if (!taken && (best < 0 || v[i] > v[best]))
				best = i;
		}
		idx[j] = best;
	}
}

static void moe_ffn(moe_ctx *c, int il, int B)
{
	const moe_hparams *hp = &c->m->hp;
	const moe_layer *L = &c->m->layers[il];
	int64_t E = hp->n_embd;
	int nx = (int)hp->n_expert, k = (int)hp->n_expert_used;

	/* route: softmax (or sigmoid) over all experts, keep the top k */
	matmul(c, &L->router, c->xn, B, c->router, nx);
	for (int t = 0; t < B; t++) {
		float *r = c->router + (int64_t)t * nx;
		if (hp->gating == MOE_GATING_SIGMOID) {
			for (int i = 0; i < nx; i++)
				r[i] = 1.0f / (1.0f + expf(-r[i]));
		} else {
			float mx = -FLT_MAX;
			for (int i = 0; i < nx; i++)
				mx = r[i] > mx ? r[i] : mx;
			double s = 0;
			for (int i = 0; i < nx; i++)
				s += (r[i] = expf(r[i] - mx));
			for (int i = 0; i < nx; i++)
				r[i] = (float)(r[i] / s);
		}
		int32_t *sel = c->sel + (int64_t)t * k;
		float *w = c->selw + (int64_t)t * k;
		top_k(r, nx, k, sel);
		double sum = 0;
		for (int j = 0; j < k; j++)
			sum += (w[j] = r[sel[j]]);
		for (int j = 0; j < k; j++) {
			if (hp->topk_renorm)
				w[j] = (float)(w[j] / sum);
			w[j] *= (float)hp->expert_weights_scale;
		}
		if (c->route_fn)
			c->route_fn(c->route_user, il, sel, w, k);
	}
	memset(c->moe_out, 0, (size_t)B * E * sizeof *c->moe_out);
	if (B <= EXP_PAR_MAX) {
		/* small batch (decode): whole experts per thread */
		int32_t *active = c->tok_of; /* reused as the list of experts with tokens */
		int n_active = 0;
		for (int x = 0; x < nx; x++)
			for (int q = 0; q < B * k; q++)
				if (c->sel[q] == x) {
					active[n_active++] = x;
					break;
				}
		expert_job j = {c, L, B, n_active, active};
		moe_pool_run(c->pool, expert_worker, &j);
		int nth = moe_pool_threads(c->pool);
		for (int th = 0; th < nth && th < n_active; th++) {
			const float *part = c->ex_buf + (size_t)th * c->ex_stride + 2 * EXP_PAR_MAX * E;
			for (int64_t i = 0; i < (int64_t)B * E; i++)
				c->moe_out[i] += part[i];
		}
		goto shared;
	}
	/* each expert once per batch, over the tokens routed to it */
	for (int x = 0; x < nx; x++) {
		int m = gather_expert(c, B, x, c->tok_of, c->w_of, c->xe);
		if (!m)
			continue;
		swiglu_ffn(c, &L->exp_gate[x], &L->exp_up[x], &L->exp_down[x], c->xe, m, c->de);
		for (int i = 0; i < m; i++) {
			float *o = c->moe_out + (int64_t)c->tok_of[i] * E, *d = c->de + (int64_t)i * E;
			for (int64_t q = 0; q < E; q++)
				o[q] += c->w_of[i] * d[q];
		}
	}
shared:
	if (L->sh_gate.data) {
		swiglu_ffn(c, &L->sh_gate, &L->sh_up, &L->sh_down, c->xn, B, c->de);
		float gate[1];
		for (int t = 0; t < B; t++) {
			float g = 1.0f;
			if (L->sh_router.data) {
				matmul(c, &L->sh_router, c->xn + (int64_t)t * E, 1, gate, 1);
				g = 1.0f / (1.0f + expf(-gate[0]));
			}
			for (int64_t q = 0; q < E; q++)
				c->moe_out[(int64_t)t * E + q] += g * c->de[(int64_t)t * E + q];
		}
	}
	for (int64_t i = 0; i < (int64_t)B * E; i++)
		c->x[i] += c->moe_out[i];
}

static void ffn(moe_ctx *c, int il, int B)
{
	const moe_hparams *hp = &c->m->hp;
	const moe_layer *L = &c->m->layers[il];
	int64_t E = hp->n_embd;
	for (int t = 0; t < B; t++)
		rmsnorm(c->xn + t * E, c->x + t * E, L->ffn_norm, E, hp->norm_eps);
	if (L->is_moe) {
		moe_ffn(c, il, B);
		return;
	}
	swiglu_ffn(c, &L->ffn_gate, &L->ffn_up, &L->ffn_down, c->xn, B, c->tmp);
	for (int64_t i = 0; i < (int64_t)B * E; i++)
		c->x[i] += c->tmp[i];
}

/* ---------------------------------------------------------------- eval */

static int eval_batch(moe_ctx *c, const int32_t *ids, int B, float *logits, bool all,
		      moe_error *e)
{
	const moe_model *m = c->m;
	const moe_hparams *hp = &m->hp;
	int64_t E = hp->n_embd;
	for (int t = 0; t < B; t++) {
		if (ids[t] < 0 || (uint32_t)ids[t] >= hp->n_vocab)
			return moe_err(e, MOE_EINVAL, "token id %d out of range (vocabulary %u)", ids[t],
				       hp->n_vocab);
		row_to_float(c, m->tok_embd.dtype,
			     (const uint8_t *)m->tok_embd.data + (size_t)ids[t] * m->tok_embd.row_bytes,
			     c->x + t * E, E);
	}
	rope_tables(c, B);
	memcpy(c->tokens + c->pos, ids, (size_t)B * sizeof *ids);
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		attention(c, (int)il, B);
		ffn(c, (int)il, B);
	}
	c->pos += B;
	if (!logits)
		return 0;
	int first = all ? 0 : B - 1, n = B - first;
	for (int t = first; t < B; t++)
		rmsnorm(c->xn + (int64_t)(t - first) * E, c->x + (int64_t)t * E, m->out_norm, E,
			hp->norm_eps);
	matmul(c, &m->output, c->xn, n, logits, hp->n_vocab);
	return 0;
}

int moe_ctx_eval(moe_ctx *c, const int32_t *ids, size_t n, float *logits, bool all_logits,
		 moe_error *e)
{
	if (n == 0)
		return 0;
	if (n > (size_t)(c->n_ctx - c->pos))
		return moe_err(e, MOE_ERANGE, "context full: %zu tokens do not fit (%d of %d used)", n,
			       c->pos, c->n_ctx);
	size_t done = 0;
	uint32_t nv = c->m->hp.n_vocab;
	while (done < n) {
		int B = (int)(n - done < (size_t)c->n_batch ? n - done : (size_t)c->n_batch);
		bool last = done + (size_t)B == n;
		float *out = NULL;
		if (logits && all_logits)
			out = logits + done * nv;
		else if (logits && last)
			out = logits;
		MOE_TRY(eval_batch(c, ids + done, B, out, all_logits, e));
		done += (size_t)B;
	}
	return 0;
}

int moe_ctx_eval_reuse(moe_ctx *c, const int32_t *ids, size_t n, float *logits, size_t *n_eval,
		       moe_error *e)
{
	size_t keep = 0;
	while (keep < n && keep < (size_t)c->pos && c->tokens[keep] == ids[keep])
		keep++;
	if (keep == n && n > 0)
		keep--; /* re-evaluate the last token for fresh logits */
	moe_ctx_truncate(c, (int)keep);
	if (n_eval)
		*n_eval = n - keep;
	return moe_ctx_eval(c, ids + keep, n - keep, logits, false, e);
}
