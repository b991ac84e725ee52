/* arch_deepseek2.c — what DeepSeek-V2 / V2-Lite / V3 / R1 (GGUF
 * "deepseek2") compute differently from the Llama family: multi-head
 * latent attention (MLA) and DeepSeek's router.  Written from the published
 * definition (modeling_deepseek.py of the V2 and V3 checkpoints; the
 * DeepSeek-V2 paper, section 2.1) as tests/ref/arch_deepseek2.py is.
 *
 * MLA, for a step of B tokens (H heads of nope + rope dims, latent kv_lora):
 *
 *   q    = xn Wq^T, or (RMSNorm(xn Wqa^T) * q_a_norm) Wqb^T   [B, H, nope+rope]
 *   kv   = xn Wkva^T                                          [B, kv_lora+rope]
 *   c    = RMSNorm(kv[:kv_lora]) * kv_a_norm                   the latent
 *   kpe  = RoPE(kv[kv_lora:])                                 one rope key for all heads
 *   cache row of the token's position = c ++ kpe              (kv_lora + rope values)
 *   per head h (absorbed: the keys and values are never expanded):
 *     q_lat = Wkb[h] q_nope                                   [kv_lora]
 *     s_p   = (q_lat . c_p + RoPE(q_pe) . kpe_p) * kq_scale   one dot with the cache row
 *     o_lat = sum_p softmax(s)_p c_p                          [kv_lora]
 *     out_h = Wvb[h] o_lat                                    [hdv]
 *   x   += out Wo^T
 *
 * The expanded form (key_h = Wkb[h]^T c ++ kpe, value_h = Wvb[h] c) gives
 * the same numbers (tests/ref checks the two equal within 1e-10) but would
 * cache H * (nope + rope + hdv) values per token and layer instead of
 * kv_lora + rope: 8.9x more for V2-Lite, 71x for V3.  Prefill and decode
 * both use the absorbed form, so a token's result does not depend on its
 * step.  kq_scale is mscale^2 / sqrt(nope + rope) with YaRN's attention
 * factor mscale (lib/arch/hparams.c); RoPE's own magnitude stays 1.
 *
 * The router: softmax (V2) or sigmoid (V3) scores; the choice adds the
 * score-correction bias (V3) and, with groups, keeps the experts of the
 * best expert_groups_used groups (ranked by their best score, V2, or the
 * sum of their two best, V3; the others' choice values set to 0, as the
 * published code masks them); the weights are the scores (without the
 * bias) of the chosen experts, normalised and scaled in forward.c's route. */
#include "engine/engine_int.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Heads one attention task handles together: each cached row is converted
 * to floats once for all of them (more heads, fewer conversions, fewer
 * tasks to spread over the threads). */
#define MLA_HEADS 4

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

int moe_deepseek2_init(moe_engine *eng, moe_error *e)
{
	const moe_model *m = eng->m;
	const moe_hparams *hp = &m->hp;
	moe_arena *a = &eng->arena;
	size_t B = (size_t)eng->n_batch, nth = (size_t)eng->n_threads, H = hp->n_head;
	size_t lat = hp->kv_lora_rank, row = lat + hp->rope_head_dim;
	size_t nx = hp->n_expert ? hp->n_expert : 1;
	if (!(eng->ds.choice = moe_arena_alloc(a, 2 * nx * sizeof(float), 64)) ||
	    !(eng->ds.groups = moe_arena_alloc(a, nx * sizeof(int32_t), 64)))
		return moe_err(e, MOE_ENOMEM, "out of memory for the engine's buffers");
	if (hp->attention != MOE_ATTN_MLA)
		return 0;
	/* one head's product (k_b: nope columns, v_b: kv_lora columns) for B tokens */
	size_t scr = 64;
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		scr = max_sz(scr, moe_matmul_scratch(L->wk_b.dtype, L->wk_b.cols, (int64_t)B));
		scr = max_sz(scr, moe_matmul_scratch(L->wv_b.dtype, L->wv_b.cols, (int64_t)B));
	}
	int act = moe_type_get(eng->kv_type)->vec_dot_type;
	uint64_t qb = 0;
	if (act != MOE_F32)
		MOE_TRY(moe_type_nbytes(act, (uint64_t)row, &qb, e));
	if (scr == SIZE_MAX)
		return moe_err(e, MOE_ERANGE, "engine: scratch size overflows");
	eng->ds.scratch_bytes = (scr + 63) & ~(size_t)63;
	eng->ds.qx_bytes = ((size_t)qb + 127) & ~(size_t)63;
	eng->ds.score_stride = MLA_HEADS * (size_t)eng->n_ctx + row + lat * (size_t)eng->kv.block_tokens + 16;
	if (!(eng->ds.qa = moe_arena_alloc(a, B * max_sz(hp->q_lora_rank, 1) * sizeof(float), 64)) ||
	    !(eng->ds.kva = moe_arena_alloc(a, B * row * sizeof(float), 64)) ||
	    !(eng->ds.qcat = moe_arena_alloc(a, B * H * row * sizeof(float), 64)) ||
	    !(eng->ds.olat = moe_arena_alloc(a, B * H * lat * sizeof(float), 64)) ||
	    !(eng->ds.scores = moe_arena_alloc(a, nth * eng->ds.score_stride * sizeof(float), 64)) ||
	    !(eng->ds.scratch = moe_arena_alloc(a, nth * eng->ds.scratch_bytes, 64)) ||
	    !(eng->ds.qx = moe_arena_alloc(a, nth * eng->ds.qx_bytes, 64)))
		return moe_err(e, MOE_ENOMEM, "out of memory for the engine's latent attention buffers");
	return 0;
}

/* ------------------------------------------------------------ products */

/* Y_h = X_h W[h]^T for every head h, each head's rows of W a matrix of its
 * own (rows_per_head x w->cols): X_h = x + h*xs (row stride ldx), Y_h = y +
 * h*ys (row stride ldy), B tokens.  Threads take whole heads, each product
 * on one thread (the same bits as over the pool: kernels.h). */
typedef struct {
	moe_engine *eng;
	const moe_weight *w;
	int64_t rows, B;
	const float *x;
	int64_t ldx, xs;
	float *y;
	int64_t ldy, ys;
	/* absorbing queries: copy each head's rope part after its latent part */
	const float *pe;
} heads_job;

static void heads_worker(void *arg, int ith, int nth)
{
	heads_job *j = arg;
	moe_engine *eng = j->eng;
	const moe_hparams *hp = &eng->m->hp;
	const moe_weight *w = j->w;
	void *scr = eng->ds.scratch + (size_t)ith * eng->ds.scratch_bytes;
	int64_t H = hp->n_head, R = hp->rope_head_dim, hd = hp->head_dim;
	for (int64_t h = ith; h < H; h += nth) {
		const uint8_t *wh = (const uint8_t *)w->data + (size_t)(h * j->rows) * w->row_bytes;
		const float *x = j->x + h * j->xs;
		float *y = j->y + h * j->ys;
		moe_matmul_quantize(eng->k, w->dtype, w->cols, x, j->ldx, j->B, scr, 0, 1);
		moe_matmul_compute(eng->k, w->dtype, wh, j->rows, w->cols, x, j->ldx, j->B, y, j->ldy,
				   scr, 0, 1);
		if (j->pe)
			for (int64_t t = 0; t < j->B; t++)
				memcpy(y + t * j->ldy + j->rows, j->pe + t * H * hd + h * hd,
				       (size_t)R * sizeof(float));
	}
}

/* The activation observer (moe_engine_set_observer) sees each head's
 * product as matrix h of the stacked tensor: row t of head h is x + t*ldx +
 * h*xs, one call per token (the rows are not contiguous). */
static void observe_heads(moe_engine *eng, const moe_weight *w, int il, const float *x,
			  int64_t ldx, int64_t xs, int B)
{
	if (!eng->observe_fn)
		return;
	int H = (int)eng->m->hp.n_head;
	for (int h = 0; h < H; h++)
		for (int t = 0; t < B; t++)
			eng->observe_fn(eng->observe_user, &(moe_matmul_obs){
				w, il, -1, x + t * ldx + h * xs, 1, h, H});
}

/* ----------------------------------------------------------- attention */

typedef struct {
	moe_engine *eng;
	int il, B;
} mla_job;

/* Tasks are (token, group of MLA_HEADS heads).  Per head: scores against
 * every cached row of the token's sequence (one dot product of the
 * absorbed query with the row), causal softmax.  Then block by block, the
 * block's latents are converted once into floats, transposed ([kv_lora]
 * [block_tokens]), so that each head's output dimension d gains one dot
 * product of its weights with column d (the kernel's float dot).  Blocks
 * in position order: the same sums whatever else the step holds. */
static void mla_worker(void *arg, int ith, int nth)
{
	mla_job *j = arg;
	moe_engine *eng = j->eng;
	const moe_hparams *hp = &eng->m->hp;
	const moe_kernels *k = eng->k;
	int H = (int)hp->n_head, lat = (int)hp->kv_lora_rank, row = lat + (int)hp->rope_head_dim;
	int bt = eng->kv.block_tokens, n_ctx = eng->n_ctx, groups = (H + MLA_HEADS - 1) / MLA_HEADS;
	float scale = (float)hp->kq_scale;
	float *scores = eng->ds.scores + (size_t)ith * eng->ds.score_stride;
	float *vrow = scores + (size_t)MLA_HEADS * n_ctx, *cols = vrow + row;
	void *qx = eng->ds.qx + (size_t)ith * eng->ds.qx_bytes;
	int act = moe_type_get(eng->kv_type)->vec_dot_type;
	moe_vec_dot_fn kdot = k->vec_dot[eng->kv_type], fdot = k->vec_dot[MOE_F32];
	size_t rowb = eng->kv_row_bytes;
	for (int task = ith; task < j->B * groups; task += nth) {
		int t = task / groups, h0 = task % groups * MLA_HEADS;
		int hn = H - h0 < MLA_HEADS ? H - h0 : MLA_HEADS;
		const moe_seq *s = eng->st[t].seq;
		int n_pos = eng->st[t].pos + 1;
		for (int i = 0; i < hn; i++) {
			const void *qa = eng->ds.qcat + ((size_t)t * H + h0 + i) * row;
			if (act != MOE_F32) {
				k->quantize_row[act](qa, qx, row);
				qa = qx;
			}
			float *sc = scores + (size_t)i * n_ctx, mx = -FLT_MAX;
			for (int p = 0; p < n_pos; p++) {
				const uint8_t *r = moe_kv_k(eng, s->blocks[p / bt], j->il) +
						   (size_t)(p % bt) * rowb;
				kdot(row, &sc[p], r, qa);
				sc[p] *= scale;
				mx = sc[p] > mx ? sc[p] : mx;
			}
			double sum = 0;
			for (int p = 0; p < n_pos; p++)
				sum += (sc[p] = expf(sc[p] - mx));
			float inv = (float)(1.0 / sum);
			for (int p = 0; p < n_pos; p++)
				sc[p] *= inv;
		}
		float *o = eng->ds.olat + ((size_t)t * H + h0) * lat;
		memset(o, 0, (size_t)hn * lat * sizeof *o);
		moe_to_float_fn to_float = k->to_float[eng->kv_type];
		if (!to_float)
			to_float = moe_type_get(eng->kv_type)->to_float;
		for (int b0 = 0; b0 < n_pos; b0 += bt) {
			int nb = n_pos - b0 < bt ? n_pos - b0 : bt;
			const uint8_t *blk = moe_kv_k(eng, s->blocks[b0 / bt], j->il);
			for (int p = 0; p < nb; p++) {
				to_float(blk + (size_t)p * rowb, vrow, row);
				for (int d = 0; d < lat; d++)
					cols[(size_t)d * bt + p] = vrow[d];
			}
			for (int i = 0; i < hn; i++) {
				const float *w = scores + (size_t)i * n_ctx + b0;
				float *oh = o + (size_t)i * lat;
				for (int d = 0; d < lat; d++) {
					float part;
					fdot(nb, &part, cols + (size_t)d * bt, w);
					oh[d] += part;
				}
			}
		}
	}
}

void moe_mla_attention(moe_engine *eng, int il, int B)
{
	const moe_model *m = eng->m;
	const moe_hparams *hp = &m->hp;
	const moe_layer *L = &m->layers[il];
	int64_t E = hp->n_embd, H = hp->n_head, hd = hp->head_dim, R = hp->rope_head_dim;
	int64_t N = hd - R, lat = hp->kv_lora_rank, row = lat + R, qr = hp->q_lora_rank;
	int64_t hdv = hp->head_dim_v;
	float *q = eng->q, *kva = eng->ds.kva;

	for (int t = 0; t < B; t++)
		moe_fwd_rmsnorm(eng->xn + t * E, eng->x + t * E, L->attn_norm, E, hp->norm_eps);
	/* the queries (or their low-rank input) and the latent read xn: one job */
	const moe_weight *w[] = {qr ? &L->wq_a : &L->wq, &L->wkv_a};
	float *out[] = {qr ? eng->ds.qa : q, kva};
	moe_fwd_products(eng, il, eng->xn, B, 2, w, out);
	if (qr) {
		for (int t = 0; t < B; t++)
			moe_fwd_rmsnorm(eng->ds.qa + t * qr, eng->ds.qa + t * qr, L->q_a_norm, qr,
					hp->norm_eps);
		moe_fwd_matmul(eng, &L->wq_b, il, eng->ds.qa, B, q, H * hd);
	}
	/* the latent and the rope key into the cache; the queries' rope parts */
	const moe_type_traits *kt = moe_type_get(eng->kv_type);
	int bt = eng->kv.block_tokens;
	for (int t = 0; t < B; t++) {
		float *kv = kva + t * row;
		moe_fwd_rmsnorm(kv, kv, L->kv_a_norm, lat, hp->norm_eps);
		moe_fwd_rope(eng, kv + lat, t);
		for (int64_t h = 0; h < H; h++)
			moe_fwd_rope(eng, q + t * H * hd + h * hd + N, t);
		const moe_step_token *st = &eng->st[t];
		kt->from_float(kv, moe_kv_k(eng, st->seq->blocks[st->pos / bt], il) +
					   (size_t)(st->pos % bt) * eng->kv_row_bytes, row);
	}
	/* absorb: qcat[t, h] = Wkb[h] q_nope[t, h] ++ q_pe[t, h] */
	heads_job absorb = {eng, &L->wk_b, lat, B, q, H * hd, hd, eng->ds.qcat, H * row, row,
			    q + N};
	observe_heads(eng, &L->wk_b, il, q, H * hd, hd, B);
	moe_pool_run(eng->pool, heads_worker, &absorb);
	mla_job j = {eng, il, B};
	moe_pool_run(eng->pool, mla_worker, &j);
	/* out of the latent space: att[t, h] = Wvb[h] o_lat[t, h] */
	heads_job expand = {eng, &L->wv_b, hdv, B, eng->ds.olat, H * lat, lat, eng->att, H * hdv,
			    hdv, NULL};
	observe_heads(eng, &L->wv_b, il, eng->ds.olat, H * lat, lat, B);
	moe_pool_run(eng->pool, heads_worker, &expand);
	moe_fwd_matmul(eng, &L->wo, il, eng->att, B, eng->tmp, E);
	float rs = (float)hp->residual_scale;
	for (int64_t i = 0; i < B * E; i++)
		eng->x[i] += eng->tmp[i] * rs;
}

/* ---------------------------------------------------------------- router */

void moe_route_deepseek(moe_engine *eng, const float *bias, const float *scores, int k,
			int32_t *sel)
{
	const moe_hparams *hp = &eng->m->hp;
	int nx = (int)hp->n_expert, G = (int)hp->expert_groups, used = (int)hp->expert_groups_used;
	float *choice = eng->ds.choice, *gs = choice + nx;
	for (int i = 0; i < nx; i++)
		choice[i] = scores[i] + (bias ? bias[i] : 0.0f);
	if (G > 1 && used < G) {
		int per = nx / G;
		for (int g = 0; g < G; g++) {
			const float *c = choice + g * per;
			float b1 = -FLT_MAX, b2 = -FLT_MAX;
			for (int i = 0; i < per; i++) {
				if (c[i] > b1) {
					b2 = b1;
					b1 = c[i];
				} else if (c[i] > b2) {
					b2 = c[i];
				}
			}
			gs[g] = hp->expert_group_score == MOE_GROUP_SCORE_TOP2SUM ? b1 + b2 : b1;
		}
		moe_fwd_top_k(gs, G, used, eng->ds.groups);
		for (int g = 0; g < G; g++) {
			bool keep = false;
			for (int u = 0; u < used; u++)
				keep |= eng->ds.groups[u] == g;
			if (!keep)
				for (int i = 0; i < per; i++)
					choice[g * per + i] = 0.0f;
		}
	}
	moe_fwd_top_k(choice, nx, k, sel);
}
