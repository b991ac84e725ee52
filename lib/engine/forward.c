/* forward.c — the transformer forward pass over one step: B tokens that may
 * belong to different sequences at different positions.
 *
 * One decoder layer, as in the papers (shapes for a step of B tokens):
 *
 *   xn   = RMSNorm(x) * attn_norm                         [B, n_embd]
 *   q,k,v = xn Wq^T (+bq), xn Wk^T (+bk), xn Wv^T (+bv)    [B, H*hd], [B, Hkv*hd]
 *   (q/k RMSNorm per head (Qwen3) or over the projection (OLMoE))
 *   q,k  = RoPE(q, k, the token's position)               interleaved pairs or NeoX halves
 *   K,V of the token's sequence at its position = k, v    (paged: kv.c)
 *   a    = softmax(q K^T / sqrt(hd), causal) V            per sequence [B, H*hd]
 *                                                         (GQA: H/Hkv q heads per kv head)
 *   x   += a Wo^T
 *   xn   = RMSNorm(x) * ffn_norm
 *   dense: x += (silu(xn Wg^T) * (xn Wu^T)) Wd^T
 *   MoE:   p = softmax(xn Wr^T); top-k experts (renormalised if the model says so);
 *          the step's chosen experts come from the expert store;
 *          x += sum_k p_k * FFN_k(xn)  (+ sigmoid(xn ws) * FFN_shared(xn))
 *
 * Then logits = RMSNorm(x) * out_norm W_out^T for the tokens that want them.
 *
 * MoE tokens of the whole step are grouped by expert, so each expert's
 * weights are read once per step whatever sequences chose it.  Nothing a
 * token computes depends on the other tokens of its step: the products are
 * per token (kernels reduce in a fixed order per output element), and the
 * expert outputs of a token are summed in the order of its choices. */
#include "engine/engine_int.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

/* The model's norm: RMSNorm, or LayerNorm with its bias (phimoe). */
static void norm(const moe_hparams *hp, float *y, const float *x, const float *w, const float *b,
		 int64_t n)
{
	if (hp->norm_kind == MOE_NORM_LAYER)
		moe_layernorm(y, x, w, b, n, hp->norm_eps);
	else
		rmsnorm(y, x, w, n, hp->norm_eps);
}

static float silu(float x)
{
	return x / (1.0f + expf(-x));
}

static void observe(moe_engine *eng, const moe_weight *w, int layer, int expert, const float *x,
		    int64_t n)
{
	if (eng->observe_fn)
		eng->observe_fn(eng->observe_user, &(moe_matmul_obs){w, layer, expert, x, n, 0, 0});
}

/* Per-token work of a step (norms, RoPE, cache writes, residuals) over the
 * pool: thread ith takes tokens ith, ith + nth, ...  A token's results
 * depend only on its own rows, so the split changes no bit.  A step of few
 * tokens runs it on the calling thread: the work is a few microseconds a
 * token, less than a pool wake costs; with 8 sequences it was about 4% of
 * a decode step's CPU time, all of it on one thread while the others wait. */
typedef void (*token_fn)(moe_engine *eng, int il, int t);

typedef struct {
	moe_engine *eng;
	token_fn fn;
	int il, B;
} token_job;

static void token_worker(void *arg, int ith, int nth)
{
	token_job *j = arg;
	for (int t = ith; t < j->B; t += nth)
		j->fn(j->eng, j->il, t);
}

static void per_token(moe_engine *eng, int il, int B, token_fn fn)
{
	token_job j = {eng, fn, il, B};
	if (B >= 2 * eng->n_threads)
		moe_pool_run(eng->pool, token_worker, &j);
	else
		token_worker(&j, 0, 1);
}

/* Y[n x w->rows] (row stride ldy) = X[n x w->cols] W^T, over the pool. */
static void matmul(moe_engine *eng, const moe_weight *w, int layer, const float *X, int64_t n,
		   float *Y, int64_t ldy)
{
	observe(eng, w, layer, -1, X, n);
	moe_matmul(eng->k, eng->pool, w->dtype, w->data, w->rows, w->cols, X, w->cols, n, Y, ldy,
		   eng->scratch);
}

/* Several products of one input, in one pool job: Y_i[n x w_i->rows] =
 * X W_i^T.  X is quantised once per activation type (by the caller's
 * thread for a few tokens, else by the pool), into the scratch's third of
 * the first product that pairs with that type (scratch_of). */
typedef struct {
	moe_engine *eng;
	int n_w;
	const moe_weight *w[3];
	float *y[3];
	const float *x;
	int64_t n;
	size_t scratch_stride;
} products_job;

/* Which third of the scratch holds product i's quantised X: that of the
 * first product whose weights pair with the same activation type (q, k and
 * v usually all do: one quantisation instead of three). */
static int scratch_of(const moe_weight *const *w, int i)
{
	int t = moe_type_get(w[i]->dtype)->vec_dot_type;
	for (int p = 0; p < i; p++)
		if (moe_type_get(w[p]->dtype)->vec_dot_type == t && w[p]->cols == w[i]->cols)
			return p;
	return i;
}

static void products_quantize(void *arg, int ith, int nth)
{
	products_job *j = arg;
	for (int i = 0; i < j->n_w; i++)
		if (scratch_of(j->w, i) == i)
			moe_matmul_quantize(j->eng->k, j->w[i]->dtype, j->w[i]->cols, j->x,
					    j->w[i]->cols, j->n,
					    (uint8_t *)j->eng->scratch + i * j->scratch_stride, ith, nth);
}

static void products_compute(void *arg, int ith, int nth)
{
	products_job *j = arg;
	for (int i = 0; i < j->n_w; i++) {
		const moe_weight *w = j->w[i];
		moe_matmul_compute(j->eng->k, w->dtype, w->data, w->rows, w->cols, j->x, w->cols, j->n,
				   j->y[i], w->rows,
				   (uint8_t *)j->eng->scratch + scratch_of(j->w, i) * j->scratch_stride,
				   ith, nth);
	}
}

/* (quantized: X's rows are already in the scratch, as products_row puts
 * them) */
static void products(moe_engine *eng, int layer, const float *X, int64_t n, int n_w,
		     const moe_weight *const *w, float *const *Y, bool quantized)
{
	products_job j = {.eng = eng, .n_w = n_w, .x = X, .n = n,
			  .scratch_stride = eng->scratch_bytes};
	for (int i = 0; i < n_w; i++) {
		observe(eng, w[i], layer, -1, X, n);
		j.w[i] = w[i];
		j.y[i] = Y[i];
	}
	if (!quantized && n >= 2 * (int64_t)eng->n_threads)
		moe_pool_run(eng->pool, products_quantize, &j);
	else if (!quantized)
		products_quantize(&j, 0, 1);
	moe_pool_run(eng->pool, products_compute, &j);
}

/* Row t of X (stride w[i]->cols) quantised for products of w[0..n_w), where
 * products() would put it. */
static void products_row(moe_engine *eng, const float *X, int t, int n_w,
			 const moe_weight *const *w)
{
	for (int i = 0; i < n_w; i++) {
		if (scratch_of(w, i) != i)
			continue;
		size_t rb = moe_matmul_scratch(w[i]->dtype, w[i]->cols, 1);
		moe_matmul_quantize(eng->k, w[i]->dtype, w[i]->cols, X + t * w[i]->cols, w[i]->cols,
				    1, (uint8_t *)eng->scratch + i * eng->scratch_bytes + t * rb, 0, 1);
	}
}

static void row_to_float(const moe_engine *eng, int dtype, const void *src, float *dst, int64_t n)
{
	moe_to_float_fn f = eng->k->to_float[dtype];
	if (!f)
		f = moe_type_get(dtype)->to_float;
	f(src, dst, n);
}

/* RoPE angles for the step: pair i of position p turns by
 * p * base^(-2i/n_rot), with linear scaling (p / factor) or YaRN (a ramp
 * between interpolated and original angles over the pairs, by how many turns
 * a pair makes in the original context, and cos/sin scaled by
 * 1 + 0.1 ln(factor)).  Computed once per token, used by every head and layer. */
static void rope_tables(moe_engine *eng, const moe_step_token *st, int B)
{
	const moe_hparams *hp = &eng->m->hp;
	int half = (int)hp->n_rot / 2;
	double factor = hp->rope_factor > 0 ? hp->rope_factor : 1.0, mscale = 1.0;
	double low = 0, high = 0;
	bool yarn = hp->rope_scaling == MOE_ROPE_SCALING_YARN && hp->rope_orig_ctx > 0;
	if (yarn) {
		/* the pair whose wavelength fits `turns` turns into the original context */
		double n = hp->n_rot, ctx = hp->rope_orig_ctx, lb = log(hp->rope_base);
		low = n * log(ctx / (hp->rope_beta_fast * 2 * M_PI)) / (2 * lb);  /* 32 */
		high = n * log(ctx / (hp->rope_beta_slow * 2 * M_PI)) / (2 * lb); /* 1 */
		if (hp->rope_yarn_truncate) /* gpt-oss keeps the ends fractional */
			low = floor(low), high = ceil(high);
		low = low < 0 ? 0 : low;
		high = high > n - 1 ? n - 1 : high;
		mscale = hp->rope_mscale; /* 1 + 0.1 ln(factor) unless the model says */
	}
	/* LongRoPE (phimoe): per-pair divisors and magnitude, the short set
	 * while the token's position is within the original context (per
	 * token, so a token's rotation never depends on its step) */
	const float *lr = NULL;
	for (int t = 0; t < B; t++) {
		double pos = st[t].pos;
		if (hp->rope_scaling == MOE_ROPE_SCALING_LONGROPE) {
			bool lng = (uint64_t)st[t].pos + 1 > hp->rope_orig_ctx;
			lr = lng ? eng->m->rope_long : eng->m->rope_short;
			mscale = lng ? hp->rope_mscale_long : hp->rope_mscale;
		}
		for (int i = 0; i < half; i++) {
			double theta = pos * pow(hp->rope_base, -2.0 * i / hp->n_rot);
			if (lr)
				theta /= lr[i];
			if (hp->rope_scaling == MOE_ROPE_SCALING_LINEAR) {
				theta /= factor;
			} else if (yarn) {
				double span = high - low > 0.001 ? high - low : 0.001;
				double ramp = (i - low) / span;
				ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
				theta = theta / factor * ramp + theta * (1 - ramp);
			}
			eng->rope_cos[t * half + i] = (float)(cos(theta) * mscale);
			eng->rope_sin[t * half + i] = (float)(sin(theta) * mscale);
		}
	}
}

/* Rotate one head vector of token t.  NORM pairs (2i, 2i+1); NEOX pairs
 * (i, i + n_rot/2); dimensions past n_rot pass through. */
static void rope(const moe_engine *eng, float *v, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	int half = (int)hp->n_rot / 2;
	const float *cs = eng->rope_cos + t * half, *sn = eng->rope_sin + t * half;
	bool neox = hp->rope_kind == MOE_ROPE_NEOX;
	for (int i = 0; i < half; i++) {
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		float x0 = v[a], x1 = v[b];
		v[a] = x0 * cs[i] - x1 * sn[i];
		v[b] = x0 * sn[i] + x1 * cs[i];
	}
}

/* ----------------------------------------------------------- attention */

typedef struct {
	moe_engine *eng;
	int il, n_items;
	atomic_int next; /* the next (tile, KV head) to take */
} attn_job;

/* Each thread takes (tile, KV head) items: a tile is up to attn_tile_tokens
 * consecutive tokens of one sequence, and with the query heads sharing the
 * KV head they are the rows of one kernel call (kernels.h, moe_attn_tile),
 * which decodes each block of keys and values once for all of them.  A
 * row's result does not depend on its tile, so a token gets the same bits
 * in a prefill batch as alone. */
static void attn_worker(void *arg, int ith, int nth)
{
	attn_job *j = arg;
	moe_engine *eng = j->eng;
	const moe_hparams *hp = &eng->m->hp;
	int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, hd = (int)hp->head_dim;
	int hdv = (int)hp->head_dim_v, group = H / Hkv, bt = eng->kv.block_tokens;
	/* the model's own q.k multiplier where it has one (Granite's
	 * attention_scale), else 1/sqrt(hd) */
	float scale = fabs(hp->kq_scale * sqrt((double)hd) - 1.0) > 1e-6 ? (float)hp->kq_scale
									  : 1.0f / sqrtf((float)hd);
	/* sliding-window layers (gpt-oss): a token sees its last `window` positions */
	int window = moe_hparams_layer_slides(hp, (uint32_t)j->il) ? (int)hp->sliding_window : 0;
	const float *sinks = eng->m->layers[j->il].sinks; /* gpt-oss */
	int32_t lo[ATTN_TILE_ROWS], hi[ATTN_TILE_ROWS];
	const uint8_t **kp = eng->attn_blocks + (size_t)ith * 2 * eng->kv.n_blocks;
	const uint8_t **vp = kp + eng->kv.n_blocks;
	(void)nth;
	for (int it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_items;) {
		/* the last tiles first: they have the most keys, and the
		 * threads finish together when the short ones come last */
		int tile = j->n_items / Hkv - 1 - it / Hkv, g = it % Hkv, t0 = eng->attn_first[tile];
		int n = eng->attn_first[tile + 1] - t0;
		int first = INT32_MAX, last = 0;
		for (int i = 0; i < n; i++) {
			hi[i] = eng->st[t0 + i].pos + 1; /* causal */
			lo[i] = window && hi[i] > window ? hi[i] - window : 0;
			first = lo[i] < first ? lo[i] : first;
			last = hi[i] > last ? hi[i] : last;
		}
		/* the blocks the tile reads: from the earliest row's window
		 * (kv.c may have given back the blocks before it) to the latest
		 * row's position */
		size_t koff = eng->k_trans ? (size_t)g * hd * bt * sizeof(uint16_t)
					   : (size_t)g * eng->kv_head_bytes;
		const int32_t *blocks = eng->st[t0].seq->blocks;
		for (int b = first / bt; b <= (last - 1) / bt; b++) {
			kp[b] = moe_kv_k(eng, blocks[b], j->il) + koff;
			vp[b] = moe_kv_v(eng, blocks[b], j->il) + (size_t)g * eng->kv_head_bytes;
		}
		moe_attn_tile t = {
			.kv_type = eng->kv_type, .head_dim = hd, .head_dim_v = hdv, .block_tokens = bt,
			.k = kp, .v = vp, .row_bytes = eng->kv_row_bytes,
			.n_tok = n, .n_head = group,
			.q = eng->q + (int64_t)t0 * H * hd + (int64_t)g * group * hd,
			.q_stride = (int64_t)H * hd,
			.out = eng->att + (int64_t)t0 * H * hdv + (int64_t)g * group * hdv,
			.out_stride = (int64_t)H * hdv,
			.lo = lo, .hi = hi, .sink = sinks ? sinks + g * group : NULL, .scale = scale,
			.work = (float *)(eng->attn_work + (size_t)ith * eng->attn_work_bytes),
		};
		eng->k->attn(&t);
	}
}

/* Store token t's k and v at its position in its sequence's block (an F16
 * cache keeps K transposed: engine_int.h). */
static void cache_store(moe_engine *eng, int il, int t, const float *k, const float *v,
			int64_t kvd)
{
	const moe_step_token *st = &eng->st[t];
	int bt = eng->kv.block_tokens, block = st->seq->blocks[st->pos / bt], slot = st->pos % bt;
	uint8_t *kb = moe_kv_k(eng, block, il), *vb = moe_kv_v(eng, block, il);
	if (eng->kv_type == MOE_F16) { /* the level's vector conversion */
		eng->k->f16_store(v, (uint16_t *)(vb + (size_t)slot * eng->kv_row_bytes), kvd, 1);
		if (eng->k_trans)
			eng->k->f16_store(k, (uint16_t *)kb + slot, kvd, bt);
		else
			eng->k->f16_store(k, (uint16_t *)(kb + (size_t)slot * eng->kv_row_bytes), kvd, 1);
		return;
	}
	const moe_type_traits *kt = moe_type_get(eng->kv_type);
	kt->from_float(v, vb + (size_t)slot * eng->kv_row_bytes, kvd);
	kt->from_float(k, kb + (size_t)slot * eng->kv_row_bytes, kvd);
}

/* Split the step's tokens into attention tiles: runs of up to
 * attn_tile_tokens consecutive tokens of one sequence.  Returns how many. */
static int attn_tiles(moe_engine *eng, int B)
{
	int n = 0;
	for (int t = 0; t < B;) {
		int t1 = t + 1;
		while (t1 < B && t1 - t < eng->attn_tile_tokens && eng->st[t1].seq == eng->st[t].seq)
			t1++;
		eng->attn_first[n++] = t;
		t = t1;
	}
	eng->attn_first[n] = B;
	return n;
}

/* Token t's q and k after the products: biases, q/k norms, RoPE; then its
 * k and v go into the cache. */
static void qk_prep(moe_engine *eng, int il, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	const moe_layer *L = &eng->m->layers[il];
	int64_t hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
	int64_t nq = H * hd, kvd = Hkv * hd;
	float *q = eng->q + t * nq, *k = eng->kb + t * kvd, *v = eng->vb + t * kvd;
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
		rope(eng, q + h * hd, t);
	for (int64_t h = 0; h < Hkv; h++)
		rope(eng, k + h * hd, t);
	cache_store(eng, il, t, k, v, kvd);
}

/* Token t's attention input: the norm, then its row quantised for the q, k
 * and v products (in this job rather than one more of its own). */
static void attn_in(moe_engine *eng, int il, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	const moe_layer *L = &eng->m->layers[il];
	int64_t E = hp->n_embd;
	const moe_weight *qkv[] = {&L->wq, &L->wk, &L->wv};
	norm(hp, eng->xn + t * E, eng->x + t * E, L->attn_norm, L->attn_norm_b, E);
	products_row(eng, eng->xn, t, 3, qkv);
}

/* The next layer's attention input norm, in the job that ends this layer
 * (one pool wake fewer a layer); the first layer's comes from moe_forward,
 * and MLA layers norm their own input. */
static void next_attn_in(moe_engine *eng, int il, int t)
{
	if ((uint32_t)il + 1 < eng->m->hp.n_layer && eng->m->hp.attention != MOE_ATTN_MLA)
		attn_in(eng, il + 1, t);
}

/* Whether a step of B tokens runs each expert whole on one thread
 * (compute_experts), which is when expert_worker can take its tokens' rows
 * from ffn_q; otherwise each expert runs over all threads (and the
 * observer sees every product's float input). */
static bool experts_whole_per_thread(const moe_engine *eng, int B)
{
	return B <= EXP_PAR_MAX && !eng->observe_fn;
}

/* Token t's FFN input quantised for the layer's experts (engine_int.h,
 * ffn_q), when the step runs them whole per thread. */
static void ffn_q_row(moe_engine *eng, int il, int t)
{
	int64_t E = eng->m->hp.n_embd;
	if (eng->ffn_q_on && eng->ffn_q_dtype[il] >= 0)
		moe_matmul_quantize(eng->k, eng->ffn_q_dtype[il], E, eng->xn + t * E, E, 1,
				    eng->ffn_q + (size_t)t * eng->ffn_q_bytes, 0, 1);
}

/* x += (a Wo^T + bo) * the residual scale, then the FFN's input norm. */
static void attn_out(moe_engine *eng, int il, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	const moe_layer *L = &eng->m->layers[il];
	int64_t E = hp->n_embd;
	float rs = (float)hp->residual_scale; /* Granite; 1 (exact) elsewhere */
	float *x = eng->x + t * E, *o = eng->tmp + t * E;
	if (L->bo)
		for (int64_t i = 0; i < E; i++)
			o[i] += L->bo[i];
	for (int64_t i = 0; i < E; i++)
		x[i] += o[i] * rs;
	norm(hp, eng->xn + t * E, x, L->ffn_norm, L->ffn_norm_b, E);
	ffn_q_row(eng, il, t);
}

static void ffn_in(moe_engine *eng, int il, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	const moe_layer *L = &eng->m->layers[il];
	int64_t E = hp->n_embd;
	norm(hp, eng->xn + t * E, eng->x + t * E, L->ffn_norm, L->ffn_norm_b, E);
	ffn_q_row(eng, il, t);
}

/* The attention block of layer il on xn (normed by the previous layer's
 * end, or moe_forward), x += its output; ends with the FFN's input norm in
 * xn. */
static void attention(moe_engine *eng, int il, int B)
{
	const moe_model *m = eng->m;
	const moe_hparams *hp = &m->hp;
	const moe_layer *L = &m->layers[il];
	int64_t E = hp->n_embd, Hkv = hp->n_head_kv;

	if (hp->attention == MOE_ATTN_MLA) { /* deepseek2: arch_deepseek2.c */
		moe_mla_attention(eng, il, B);
		per_token(eng, il, B, ffn_in);
		return;
	}
	/* q, k and v read the same input: one job */
	const moe_weight *qkv[] = {&L->wq, &L->wk, &L->wv};
	float *out[] = {eng->q, eng->kb, eng->vb};
	products(eng, il, eng->xn, B, 3, qkv, out, true);
	per_token(eng, il, B, qk_prep);
	attn_job j = {eng, il, attn_tiles(eng, B) * (int)Hkv, 0};
	moe_pool_run(eng->pool, attn_worker, &j);
	matmul(eng, &L->wo, il, eng->att, B, eng->tmp, E);
	per_token(eng, il, B, attn_out);
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

/* g[m x ff] = act(g + bg, u + bu): SwiGLU, or gpt-oss's clamped variant;
 * the biases (gpt-oss's experts) may be NULL. */
static void glu(const moe_hparams *hp, float *g, const float *u, int m, int64_t ff,
		const float *bg, const float *bu)
{
	if (hp->ffn_act != MOE_ACT_SWIGLU_OAI && !bg && !bu) {
		for (int64_t i = 0; i < (int64_t)m * ff; i++)
			g[i] = silu(g[i]) * u[i];
		return;
	}
	float lim = (float)hp->swiglu_limit, alpha = (float)hp->swiglu_alpha;
	for (int64_t i = 0; i < (int64_t)m * ff; i++) {
		float a = g[i] + (bg ? bg[i % ff] : 0.0f), b = u[i] + (bu ? bu[i % ff] : 0.0f);
		if (hp->ffn_act == MOE_ACT_SWIGLU_OAI) {
			a = a < lim ? a : lim;
			b = b < -lim ? -lim : b > lim ? lim : b;
			g[i] = (b + 1.0f) * a / (1.0f + expf(-alpha * a));
		} else {
			g[i] = silu(a) * b;
		}
	}
}

/* out[m x n_embd] = (silu(x Wg^T) * (x Wu^T)) Wd^T over the pool. */
static void swiglu_ffn(moe_engine *eng, int il, int expert, const moe_weight *wg,
		       const moe_weight *wu, const moe_weight *wd, const float *x, int m, float *out)
{
	int64_t ff = wg->rows;
	/* an expert's biases (gpt-oss) */
	const moe_layer *L = il >= 0 ? &eng->m->layers[il] : NULL;
	bool eb = expert >= 0 && L && L->exp_gate_b;
	observe(eng, wg, il, expert, x, m);
	observe(eng, wu, il, expert, x, m);
	gate_up(eng->k, eng->pool, wg, wu, x, m, eng->gate, eng->up, eng->scratch);
	glu(&eng->m->hp, eng->gate, eng->up, m, ff, eb ? L->exp_gate_b[expert] : NULL,
	    eb ? L->exp_up_b[expert] : NULL);
	observe(eng, wd, il, expert, eng->gate, m);
	moe_matmul(eng->k, eng->pool, wd->dtype, wd->data, wd->rows, wd->cols, eng->gate, ff, m, out,
		   wd->rows, eng->scratch);
	if (eb)
		for (int64_t i = 0; i < (int64_t)m * wd->rows; i++)
			out[i] += L->exp_down_b[expert][i % wd->rows];
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

/* Router: softmax (or sigmoid) over all experts, keep the top k per token. */
static void route(moe_engine *eng, int il, int B)
{
	const moe_hparams *hp = &eng->m->hp;
	const moe_layer *L = &eng->m->layers[il];
	int nx = (int)hp->n_expert, k = (int)hp->n_expert_used;
	matmul(eng, &L->router, il, eng->xn, B, eng->router, nx);
	if (L->router_b) /* gpt-oss */
		for (int t = 0; t < B; t++)
			for (int i = 0; i < nx; i++)
				eng->router[(int64_t)t * nx + i] += L->router_b[i];
	for (int t = 0; t < B; t++) {
		float *r = eng->router + (int64_t)t * nx;
		if (hp->expert_router == MOE_ROUTER_SPARSEMIXER) { /* phimoe: k is 2 */
			int32_t *sel = eng->chosen + (int64_t)t * k;
			float *w = eng->chosen_weight + (int64_t)t * k;
			moe_sparsemixer(r, nx, hp->router_jitter_eps, sel, w);
			if (eng->route_fn)
				eng->route_fn(eng->route_user, il, sel, w, k);
			continue;
		}
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
		int32_t *sel = eng->chosen + (int64_t)t * k;
		float *w = eng->chosen_weight + (int64_t)t * k;
		if (L->exp_probs_b || hp->expert_groups > 1) /* DeepSeek */
			moe_route_deepseek(eng, L->exp_probs_b, r, k, sel);
		else
			top_k(r, nx, k, sel);
		double sum = 0;
		for (int j = 0; j < k; j++)
			sum += (w[j] = r[sel[j]]);
		for (int j = 0; j < k; j++) {
			if (hp->topk_renorm)
				w[j] = (float)(w[j] / sum);
			w[j] *= (float)hp->expert_weights_scale;
		}
		if (eng->route_fn)
			eng->route_fn(eng->route_user, il, sel, w, k);
	}
}

/* Group the step's (token, choice) slots by expert: active[0..n) the
 * experts chosen, in id order; order[first_of[a] .. + count_of[a]) their
 * slots in token order.  Returns n. */
static int group_by_expert(moe_engine *eng, int B)
{
	const moe_hparams *hp = &eng->m->hp;
	int nx = (int)hp->n_expert, k = (int)hp->n_expert_used, n = 0;
	int32_t *count = eng->count_of, *first = eng->first_of;
	memset(count, 0, (size_t)nx * sizeof *count);
	for (int s = 0; s < B * k; s++)
		count[eng->chosen[s]]++;
	int pos = 0;
	for (int x = 0; x < nx; x++) {
		first[x] = pos;
		pos += count[x];
	}
	for (int s = 0; s < B * k; s++)
		eng->order[first[eng->chosen[s]]++] = s;
	for (int x = 0; x < nx; x++) {
		first[x] -= count[x];
		if (count[x]) {
			eng->active[n] = x;
			/* compact to the active list */
			first[n] = first[x];
			count[n] = count[x];
			n++;
		}
	}
	return n;
}

/* Expert a's rows: gather the normalised inputs of its slots into xe. */
static void gather_rows(const moe_engine *eng, int a, float *xe)
{
	int64_t E = eng->m->hp.n_embd;
	int k = (int)eng->m->hp.n_expert_used;
	for (int i = 0; i < eng->count_of[a]; i++) {
		int slot = eng->order[eng->first_of[a] + i];
		memcpy(xe + (int64_t)i * E, eng->xn + (int64_t)(slot / k) * E, (size_t)E * sizeof(float));
	}
}

/* expert_out[slot] = weight of the slot * down row i, for expert a's slots. */
static void scatter_rows(moe_engine *eng, int a, const float *down)
{
	int64_t E = eng->m->hp.n_embd;
	for (int i = 0; i < eng->count_of[a]; i++) {
		int slot = eng->order[eng->first_of[a] + i];
		float w = eng->chosen_weight[slot], *o = eng->expert_out + (int64_t)slot * E;
		const float *d = down + (int64_t)i * E;
		for (int64_t q = 0; q < E; q++)
			o[q] = w * d[q];
	}
}

typedef struct {
	moe_engine *eng;
	const int *which;  /* [n] indices into eng->active to compute */
	int n;
	atomic_int next;   /* the next of which[] to take */
	int il;
} expert_job;

/* Small steps: each thread runs whole experts on its own (one pool wake per
 * layer instead of three per expert), taking the next one when it is done
 * with the last, so threads that drew experts with fewer tokens take more.
 * Which thread runs an expert does not change its results. */
static void expert_worker(void *arg, int ith, int nth)
{
	expert_job *j = arg;
	moe_engine *eng = j->eng;
	const moe_hparams *hp = &eng->m->hp;
	int64_t E = hp->n_embd, ff = hp->n_ff_exp;
	float *xe = eng->par_buf + (size_t)ith * eng->par_stride;
	float *de = xe + EXP_PAR_MAX * E, *g = de + EXP_PAR_MAX * E, *u = g + EXP_PAR_MAX * ff;
	void *scr = eng->par_scratch + (size_t)ith * eng->par_scratch_bytes;
	(void)nth;
	for (int w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n;) {
		int a = j->which[w];
		const moe_expert *x = &eng->active_w[a];
		int m = eng->count_of[a];
		if (eng->ffn_q_on && eng->ffn_q_dtype[j->il] >= 0) {
			/* the tokens' rows quantised by attn_out: the same bits
			 * gate_up would make of them */
			size_t rb = eng->ffn_q_bytes;
			for (int i = 0; i < m; i++) {
				int tok = eng->order[eng->first_of[a] + i] / (int)hp->n_expert_used;
				memcpy((uint8_t *)scr + i * rb, eng->ffn_q + (size_t)tok * rb, rb);
			}
			moe_matmul_compute(eng->k, x->gate->dtype, x->gate->data, ff, E, xe, E, m, g, ff,
					   scr, 0, 1);
			moe_matmul_compute(eng->k, x->up->dtype, x->up->data, ff, E, xe, E, m, u, ff, scr,
					   0, 1);
		} else {
			gather_rows(eng, a, xe);
			gate_up(eng->k, NULL, x->gate, x->up, xe, m, g, u, scr);
		}
		const moe_layer *L = &eng->m->layers[j->il];
		int id = eng->active[a];
		glu(hp, g, u, m, ff, L->exp_gate_b ? L->exp_gate_b[id] : NULL,
		    L->exp_up_b ? L->exp_up_b[id] : NULL);
		moe_matmul(eng->k, NULL, x->down->dtype, x->down->data, x->down->rows, x->down->cols, g,
			   ff, m, de, E, scr);
		if (L->exp_down_b)
			for (int64_t i = 0; i < (int64_t)m * E; i++)
				de[i] += L->exp_down_b[id][i % E];
		scatter_rows(eng, a, de);
	}
}

/* Router lookahead (streamed stores): apply the routers of the next
 * xs->lookahead layers (at least 1) to this layer's pre-FFN state to guess
 * their experts, and let the store start reading them while this layer
 * computes.  Only a hint: it never changes what a layer chooses. */
static void lookahead(moe_engine *eng, int il, int B)
{
	const moe_hparams *hp = &eng->m->hp;
	int nx = (int)hp->n_expert, k = (int)hp->n_expert_used;
	int ahead = eng->experts->lookahead > 1 ? eng->experts->lookahead : 1;
	if (nx > 256 || k > 64 || eng->observe_fn)
		return;
	for (int d = 1; d <= ahead && (uint32_t)(il + d) < hp->n_layer; d++) {
		const moe_layer *N = &eng->m->layers[il + d];
		if (!N->is_moe)
			continue;
		int64_t E = hp->n_embd;
		for (int t = 0; t < B; t++)
			rmsnorm(eng->tmp + t * E, eng->x + t * E, N->ffn_norm, E, hp->norm_eps);
		/* a few tokens on the calling thread: a router is a few thousand
		 * dot products a token, less than waking the pool costs */
		moe_matmul(eng->k, B <= EXP_PAR_MAX ? NULL : eng->pool, N->router.dtype,
			   N->router.data, N->router.rows, N->router.cols, eng->tmp, N->router.cols, B,
			   eng->router, nx, eng->scratch);
		uint64_t mask[4] = {0};
		int32_t sel[64], ids[256], n = 0;
		for (int t = 0; t < B; t++) {
			top_k(eng->router + (int64_t)t * nx, nx, k, sel);
			for (int j = 0; j < k; j++)
				mask[sel[j] >> 6] |= 1ull << (sel[j] & 63);
		}
		for (int x = 0; x < nx; x++)
			if (mask[x >> 6] >> (x & 63) & 1)
				ids[n++] = x;
		eng->experts->prefetch(eng->experts, il + d, ids, n);
	}
}

/* Experts which[0..n) of the layer (indices into eng->active), each writing
 * only its own rows of expert_out. */
static void compute_experts(moe_engine *eng, int il, int B, int *which, int n)
{
	if (experts_whole_per_thread(eng, B)) {
		/* Most tokens first (insertion sort, stable): the threads take
		 * the next expert as they finish, and ending on the small ones
		 * leaves the least time with one thread idle before the layer's
		 * barrier (longest-processing-time order). */
		for (int w = 1; w < n; w++) {
			int a = which[w], c = eng->count_of[a], v = w;
			for (; v > 0 && eng->count_of[which[v - 1]] < c; v--)
				which[v] = which[v - 1];
			which[v] = a;
		}
		expert_job j = {eng, which, n, 0, il};
		/* one expert (a streamed expert that just arrived) is one thread's
		 * work: run it here rather than wait for a worker to wake from its
		 * sleep during the read just to find nothing left to take */
		if (n == 1)
			expert_worker(&j, 0, 1);
		else
			moe_pool_run(eng->pool, expert_worker, &j);
		return;
	}
	/* each expert over all threads, for the tokens routed to it */
	for (int w = 0; w < n; w++) {
		int a = which[w];
		const moe_expert *x = &eng->active_w[a];
		gather_rows(eng, a, eng->expert_in);
		swiglu_ffn(eng, il, eng->active[a], x->gate, x->up, x->down, eng->expert_in,
			   eng->count_of[a], eng->down_out);
		scatter_rows(eng, a, eng->down_out);
	}
}

/* The seam: ask the store for every chosen expert at once, then compute
 * each one as soon as it is in memory — the resident ones first, then the
 * missing ones in the order their reads complete, so the disk reads the
 * next experts while the CPU runs the current ones (double buffering).  An
 * expert writes only its own rows of expert_out and moe_ffn sums a token's
 * experts in the order it chose them, so the order in which experts are
 * computed does not change a bit of the result. */
static int run_experts(moe_engine *eng, int il, int B, int n_active, moe_error *e)
{
	moe_expert_store *xs = eng->experts;
	int *arrived = eng->arrived;
	int n;
	if (xs->acquire_start) {
		memset(eng->active_w, 0, (size_t)n_active * sizeof *eng->active_w);
		n = xs->acquire_start(xs, il, eng->active, n_active, eng->active_w, arrived, e);
	} else {
		n = xs->acquire(xs, il, eng->active, n_active, eng->active_w, e);
		for (int a = 0; a < n_active; a++)
			arrived[a] = a;
		n = n < 0 ? n : n_active;
	}
	if (n < 0)
		return n;
	if (xs->prefetch)
		lookahead(eng, il, B);
	for (int done = 0;;) {
		if (n)
			compute_experts(eng, il, B, arrived, n);
		if ((done += n) >= n_active)
			break;
		if ((n = xs->acquire_wait(xs, il, eng->active, n_active, eng->active_w, arrived, e)) <= 0)
			return n < 0 ? n : moe_err(e, MOE_EINTERNAL, "the expert store lost an expert");
	}
	xs->release(xs, il, eng->active, n_active);
	return 0;
}

/* x += token t's experts in the order it chose them, then the shared one. */
static void combine(moe_engine *eng, int il, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	int64_t E = hp->n_embd;
	int k = (int)hp->n_expert_used;
	bool shared = eng->m->layers[il].sh_gate.data != NULL;
	const float *eo = eng->expert_out + (int64_t)t * k * E;
	float *x = eng->x + (int64_t)t * E;
	for (int64_t q = 0; q < E; q++) {
		float s = 0;
		for (int c = 0; c < k; c++)
			s += eo[(int64_t)c * E + q];
		if (shared)
			s += eng->shared_out[(int64_t)t * E + q];
		x[q] += s * (float)hp->residual_scale;
	}
	next_attn_in(eng, il, t);
}

/* x += token t's dense FFN output. */
static void dense_out(moe_engine *eng, int il, int t)
{
	const moe_hparams *hp = &eng->m->hp;
	int64_t E = hp->n_embd;
	float *x = eng->x + t * E;
	const float *o = eng->tmp + t * E;
	for (int64_t i = 0; i < E; i++)
		x[i] += o[i] * (float)hp->residual_scale;
	next_attn_in(eng, il, t);
}

static int moe_ffn(moe_engine *eng, int il, int B, moe_error *e)
{
	const moe_hparams *hp = &eng->m->hp;
	const moe_layer *L = &eng->m->layers[il];
	int64_t E = hp->n_embd;

	route(eng, il, B);
	MOE_TRY(run_experts(eng, il, B, group_by_expert(eng, B), e));

	bool shared = L->sh_gate.data != NULL;
	if (shared) {
		swiglu_ffn(eng, il, -1, &L->sh_gate, &L->sh_up, &L->sh_down, eng->xn, B, eng->shared_out);
		float gate[1];
		for (int t = 0; t < B; t++) {
			float g = 1.0f;
			if (L->sh_router.data) {
				matmul(eng, &L->sh_router, il, eng->xn + (int64_t)t * E, 1, gate, 1);
				g = 1.0f / (1.0f + expf(-gate[0]));
			}
			for (int64_t q = 0; q < E; q++)
				eng->shared_out[(int64_t)t * E + q] *= g;
		}
	}
	per_token(eng, il, B, combine);
	return 0;
}

/* The FFN of layer il on xn (normed by attention()), x += its output. */
static int ffn(moe_engine *eng, int il, int B, moe_error *e)
{
	const moe_layer *L = &eng->m->layers[il];
	if (L->is_moe)
		return moe_ffn(eng, il, B, e);
	swiglu_ffn(eng, il, -1, &L->ffn_gate, &L->ffn_up, &L->ffn_down, eng->xn, B, eng->tmp);
	per_token(eng, il, B, dense_out);
	return 0;
}

/* ---------------------------------------------------------------- step */

/* B <= n_batch tokens whose blocks are reserved and ids checked. */
int moe_forward(moe_engine *eng, const moe_step_token *st, int B, moe_error *e)
{
	const moe_model *m = eng->m;
	const moe_hparams *hp = &m->hp;
	int64_t E = hp->n_embd;
	eng->st = st;
	eng->ffn_q_on = experts_whole_per_thread(eng, B);
	for (int t = 0; t < B; t++)
		row_to_float(eng, m->tok_embd.dtype,
			     (const uint8_t *)m->tok_embd.data + (size_t)st[t].id * m->tok_embd.row_bytes,
			     eng->x + t * E, E);
	if (hp->embedding_scale != 1.0) /* Granite's embedding multiplier */
		for (int64_t i = 0; i < (int64_t)B * E; i++)
			eng->x[i] *= (float)hp->embedding_scale;
	rope_tables(eng, st, B);
	if (hp->attention != MOE_ATTN_MLA)
		per_token(eng, 0, B, attn_in);
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		attention(eng, (int)il, B);
		MOE_TRY(ffn(eng, (int)il, B, e));
	}
	if (eng->hidden_fn)
		for (int t = 0; t < B; t++) {
			rmsnorm(eng->xn, eng->x + (int64_t)t * E, m->out_norm, E, hp->norm_eps);
			eng->hidden_fn(eng->hidden_user, st[t].seq, st[t].pos, eng->xn, (int)E);
		}
	int n = 0;
	for (int t = 0; t < B; t++)
		if (st[t].logits) {
			norm(hp, eng->xn + (int64_t)n * E, eng->x + (int64_t)t * E, m->out_norm,
			     m->out_norm_b, E);
			eng->want[n++] = t;
		}
	if (!n)
		return 0;
	uint32_t nv = hp->n_vocab;
	/* straight into the callers' rows when they follow one another (one
	 * logits array for the batch, as moe-bench gives), else through
	 * out_rows */
	float *rows = st[eng->want[0]].logits;
	for (int i = 1; i < n; i++)
		if (st[eng->want[i]].logits != rows + (size_t)i * nv)
			rows = eng->out_rows;
	matmul(eng, &m->output, -1, eng->xn, n, rows, nv);
	if (m->out_bias) /* phimoe's lm_head bias */
		for (int i = 0; i < n; i++)
			for (uint32_t v = 0; v < nv; v++)
				rows[(size_t)i * nv + v] += m->out_bias[v];
	if (hp->logit_scale != 1.0) /* Granite divides the logits */
		for (size_t i = 0; i < (size_t)n * nv; i++)
			rows[i] /= (float)hp->logit_scale;
	if (rows == eng->out_rows)
		for (int i = 0; i < n; i++)
			memcpy(st[eng->want[i]].logits, rows + (size_t)i * nv, nv * sizeof(float));
	return 0;
}

/* ---------------------------------------- for the architecture files */

void moe_fwd_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps)
{
	rmsnorm(y, x, w, n, eps);
}

void moe_fwd_rope(const moe_engine *eng, float *v, int t)
{
	rope(eng, v, t);
}

void moe_fwd_products(moe_engine *eng, int layer, const float *X, int64_t n, int n_w,
		      const moe_weight *const *w, float *const *Y)
{
	products(eng, layer, X, n, n_w, w, Y, false);
}

void moe_fwd_matmul(moe_engine *eng, const moe_weight *w, int layer, const float *X, int64_t n,
		    float *Y, int64_t ldy)
{
	matmul(eng, w, layer, X, n, Y, ldy);
}

void moe_fwd_top_k(const float *v, int n, int k, int32_t *idx)
{
	top_k(v, n, k, idx);
}
