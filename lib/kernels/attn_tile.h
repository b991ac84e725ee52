/* kernels/attn_tile.h — the tiled attention kernel (flash-attention style),
 * written once with GCC/clang vector extensions and compiled once per ISA:
 * attn_generic.c, attn_avx2.c and attn_avx512.c define the vector width
 * ATTN_VW, the fused multiply-add VFMA (unfused in generic), VSPLAT, the F16
 * row decoder f16_row(), optionally ATTN_F16_KEYS with f16_vload() (ATTN_VW
 * halves to a vector), optionally ATTN_F16_STORE with f16_vstore() (the
 * level's F16 cache write, at the end of this file) and ATTN_NAME, then
 * include this file.
 *
 * What one call does (kernels.h, moe_attn_tile): for the query rows of one
 * KV head (tokens x the heads sharing it), walk the sequence's KV blocks in
 * position order; per block, decode the keys once into a float tile
 * transposed [head_dim][keys] (a tile of one group of rows on a level with
 * F16 loads, ATTN_F16_KEYS, reads an F16 cache's keys in place instead)
 * and the values into float rows [keys][dims],
 * then for each row: scores of its keys (lanes along the keys, one chain of
 * multiply-adds over the dimensions per key), online softmax (running max m
 * and sum l: a new block rescales both by exp(m_old - m_new)) and the
 * weighted sum of values.  Where the level defines ATTN_GROUP4, four rows
 * with the same keys (a token's query heads, as in a GQA group of 4 or 8)
 * take the softmax and the values together (softmax4, values4), with each
 * row's own operations in its own order.
 *
 * Batch invariance: a row's arithmetic depends only on its own query and
 * its own key range, never on the other rows of the tile — each score lane
 * is its own chain; a block is skipped for a row whose range misses it (so
 * the row's state is as if the block was never walked); its scores,
 * exponentials, the block sum (chunks in key order, then lanes in order)
 * and its value accumulation (keys in order) are the same whatever rows
 * share the tile or how many keys the tile decoded.  Decode (one token) and
 * prefill (many) therefore give the same bits for a token.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float vf __attribute__((vector_size(ATTN_VW * 4)));
typedef int32_t vi __attribute__((vector_size(ATTN_VW * 4)));

/* Tiles are padded to 16 keys and 16 value dims whatever the ISA's width,
 * so that moe_attn_work_bytes is one size for every level. */
#define PAD 16
#define ROUND(n) (((n) + PAD - 1) / PAD * PAD)

/* Value accumulators per key in row_values: 4, or 8 where the ISA defines
 * ATTN_VACC 8 (16 vector registers hold 8 sums, the weight and a load). */
#ifndef ATTN_VACC
#define ATTN_VACC 4
#endif

static inline vf vload(const float *p)
{
	vf v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void vstore(float *p, vf v)
{
	memcpy(p, &v, sizeof v);
}

static inline vf vselect(vi mask, vf a, vf b) /* mask ? a : b per lane */
{
	return (vf)((mask & (vi)a) | (~mask & (vi)b));
}

static inline vf vmax(vf a, vf b)
{
	return vselect(a > b, a, b);
}

/* exp(x) for x <= 0 (0 below -87, where it would leave the float range):
 * x = n ln2 + r with n = round(x / ln2) (ln2 in two parts, so r is exact
 * enough), |r| <= ln2/2, e^r by its Taylor series to r^7 (the next term is
 * below 6e-9 of the result), times 2^n built in the exponent bits.  Pure
 * IEEE operations per lane: the same bits in every lane and every call. */
static inline vf vexp(vf x)
{
	const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f,
		    ln2_lo = -2.12194440054690583e-4f, round = 12582912.0f; /* 1.5 * 2^23 */
	vi keep = x >= VSPLAT(-87.0f);
	x = vmax(x, VSPLAT(-87.0f));
	vf n = (x * log2e + round) - round;
	vf r = VFMA(n, VSPLAT(-ln2_hi), x);
	r = VFMA(n, VSPLAT(-ln2_lo), r);
	vf p = VSPLAT(1.0f / 5040);
	p = VFMA(p, r, VSPLAT(1.0f / 720));
	p = VFMA(p, r, VSPLAT(1.0f / 120));
	p = VFMA(p, r, VSPLAT(1.0f / 24));
	p = VFMA(p, r, VSPLAT(1.0f / 6));
	p = VFMA(p, r, VSPLAT(0.5f));
	p = VFMA(p, r, VSPLAT(1.0f));
	p = VFMA(p, r, VSPLAT(1.0f));
	vi e = (__builtin_convertvector(n, vi) + 127) << 23;
	return (vf)((vi)(p * (vf)e) & keep);
}

static inline float sexp(float x) /* the same, one value */
{
	return vexp(VSPLAT(x))[0];
}

static inline vi isplat(int x)
{
	vi v;
	for (int i = 0; i < ATTN_VW; i++)
		v[i] = x;
	return v;
}

static inline vi key_index(int j)
{
	vi v;
	for (int i = 0; i < ATTN_VW; i++)
		v[i] = j + i;
	return v;
}

/* Keys [ja, jb) of the block of positions from blk * block_tokens into the float
 * tiles: kt[d * ktw + j] (F16: unless kt is NULL), vr[j * vw + d]. */
static void decode_block(const moe_attn_tile *t, int blk, int ja, int jb, float *kt, int ktw,
			 float *vr, int vw)
{
	int hd = t->head_dim, hdv = t->head_dim_v, bt = t->block_tokens;
	const uint8_t *k = t->k[blk], *v = t->v[blk];
	if (t->kv_type == MOE_F16) {
		/* K is stored transposed: dimension d's keys are contiguous */
		for (int d = 0; kt && d < hd; d++)
			f16_row((const uint16_t *)k + (size_t)d * bt + ja, kt + (size_t)d * ktw + ja,
				jb - ja);
		for (int j = ja; j < jb; j++)
			f16_row((const uint16_t *)(v + (size_t)j * t->row_bytes), vr + (size_t)j * vw,
				hdv);
		return;
	}
	/* Q8_0 rows: d * q per 32-value block */
	for (int j = ja; j < jb; j++) {
		const moe_block_q8_0 *kb = (const moe_block_q8_0 *)(k + (size_t)j * t->row_bytes);
		const moe_block_q8_0 *vb = (const moe_block_q8_0 *)(v + (size_t)j * t->row_bytes);
		for (int b = 0; b < hd / MOE_QK; b++) {
			float s = moe_f16_to_f32(kb[b].d);
			for (int i = 0; i < MOE_QK; i++)
				kt[(size_t)(b * MOE_QK + i) * ktw + j] = s * (float)kb[b].qs[i];
		}
		for (int b = 0; b < hdv / MOE_QK; b++) {
			float s = moe_f16_to_f32(vb[b].d);
			float *o = vr + (size_t)j * vw + b * MOE_QK;
			for (int i = 0; i < MOE_QK; i++)
				o[i] = s * (float)vb[b].qs[i];
		}
	}
}

/* Ask for block blk's keys and values [0, jb) of an F16 cache while the
 * block before it is computed: a decode step walks every sequence's whole
 * cache, far more than fits in L2, and without this each block's loads
 * wait on memory one line after another (the conversions took most of
 * the attention's time).  Prefetches change no result. */
static void prefetch_block(const moe_attn_tile *t, int blk, int jb)
{
	const char *k = (const char *)t->k[blk], *v = (const char *)t->v[blk];
	size_t bt2 = (size_t)t->block_tokens * 2;
	for (int d = 0; d < t->head_dim; d++) /* K transposed: jb keys a dimension */
		for (size_t o = 0; o < (size_t)jb * 2; o += 64)
			__builtin_prefetch(k + d * bt2 + o);
	for (int j = 0; j < jb; j++)
		for (size_t o = 0; o < (size_t)t->head_dim_v * 2; o += 64)
			__builtin_prefetch(v + j * t->row_bytes + o);
}

/* Where the scores read key chunk c of dimension d: the float tile (kt,
 * row stride ktw), or, where the level defines ATTN_F16_KEYS and f16_vload, the F16 block
 * itself (kh, row stride block_tokens), converted as it is loaded.  A tile
 * of at most four rows reads each key once (scores4), so converting in
 * the loop saves the tile's store and reload; the floats are the same
 * (F16 -> F32 is exact).  Callers pass a constant choice, so each inlined
 * copy keeps one branch. */
typedef struct {
	const float *kt;
	const uint16_t *kh;
	size_t w;
} keys;

static inline __attribute__((always_inline)) vf kload(keys k, int d, int c)
{
#ifdef ATTN_F16_KEYS
	if (k.kh)
		return f16_vload(k.kh + (size_t)d * k.w + c);
#endif
	return vload(k.kt + (size_t)d * k.w + c);
}

/* s_r[j] = q_r . k_j for four rows and the key chunks covering [ja, jb):
 * one chain over the dimensions per lane, two chunks at a time; s rows
 * ktw apart. */
static inline __attribute__((always_inline)) void scores4(const float *const q[4], int hd, keys kt,
							  int ktw, int ja, int jb, float *s)
{
	int c = ja / ATTN_VW * ATTN_VW;
	for (; c + ATTN_VW < jb; c += 2 * ATTN_VW) {
		vf a0 = VSPLAT(0), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
		for (int d = 0; d < hd; d++) {
			vf k0 = kload(kt, d, c), k1 = kload(kt, d, c + ATTN_VW);
			vf q0 = VSPLAT(q[0][d]), q1 = VSPLAT(q[1][d]), q2 = VSPLAT(q[2][d]),
			   q3 = VSPLAT(q[3][d]);
			a0 = VFMA(q0, k0, a0), b0 = VFMA(q0, k1, b0);
			a1 = VFMA(q1, k0, a1), b1 = VFMA(q1, k1, b1);
			a2 = VFMA(q2, k0, a2), b2 = VFMA(q2, k1, b2);
			a3 = VFMA(q3, k0, a3), b3 = VFMA(q3, k1, b3);
		}
		vstore(s + 0 * ktw + c, a0), vstore(s + 0 * ktw + c + ATTN_VW, b0);
		vstore(s + 1 * ktw + c, a1), vstore(s + 1 * ktw + c + ATTN_VW, b1);
		vstore(s + 2 * ktw + c, a2), vstore(s + 2 * ktw + c + ATTN_VW, b2);
		vstore(s + 3 * ktw + c, a3), vstore(s + 3 * ktw + c + ATTN_VW, b3);
	}
	if (c < jb) {
		vf a0 = VSPLAT(0), a1 = a0, a2 = a0, a3 = a0;
		for (int d = 0; d < hd; d++) {
			vf k0 = kload(kt, d, c);
			a0 = VFMA(VSPLAT(q[0][d]), k0, a0);
			a1 = VFMA(VSPLAT(q[1][d]), k0, a1);
			a2 = VFMA(VSPLAT(q[2][d]), k0, a2);
			a3 = VFMA(VSPLAT(q[3][d]), k0, a3);
		}
		vstore(s + 0 * ktw + c, a0);
		vstore(s + 1 * ktw + c, a1);
		vstore(s + 2 * ktw + c, a2);
		vstore(s + 3 * ktw + c, a3);
	}
}

/* The same for one row (the rows left over from fours): each lane the same
 * chain as in scores4, so a row's scores do not depend on which is used. */
static inline __attribute__((always_inline)) void scores1(const float *q, int hd, keys kt, int ja,
							  int jb, float *s)
{
	int c = ja / ATTN_VW * ATTN_VW;
	for (; c + ATTN_VW < jb; c += 2 * ATTN_VW) {
		vf a0 = VSPLAT(0), b0 = a0;
		for (int d = 0; d < hd; d++) {
			vf q0 = VSPLAT(q[d]);
			a0 = VFMA(q0, kload(kt, d, c), a0);
			b0 = VFMA(q0, kload(kt, d, c + ATTN_VW), b0);
		}
		vstore(s + c, a0), vstore(s + c + ATTN_VW, b0);
	}
	if (c < jb) {
		vf a0 = VSPLAT(0);
		for (int d = 0; d < hd; d++)
			a0 = VFMA(VSPLAT(q[d]), kload(kt, d, c), a0);
		vstore(s + c, a0);
	}
}

/* One row's softmax for keys [a, b) of a block: s holds its raw scores
 * (overwritten with the weights), *m and *l its running max and sum;
 * returns the factor its weighted sum takes before this block's values. */
static float row_softmax(const moe_attn_tile *t, float *s, int a, int b, float *m, float *l)
{
	int c0 = a / ATTN_VW * ATTN_VW;
	vf mx = VSPLAT(-INFINITY);
	for (int c = c0; c < b; c += ATTN_VW) {
		vi idx = key_index(c);
		vf x = vselect((idx >= isplat(a)) & (idx < isplat(b)), vload(s + c) * t->scale, VSPLAT(-INFINITY));
		vstore(s + c, x);
		mx = vmax(mx, x);
	}
	float mb = -INFINITY;
	for (int i = 0; i < ATTN_VW; i++)
		mb = mx[i] > mb ? mx[i] : mb;
	float mn = *m > mb ? *m : mb;
	float alpha = sexp(*m - mn); /* 0 for the row's first block (m = -inf) */
	vf sum = VSPLAT(0);
	for (int c = c0; c < b; c += ATTN_VW) {
		vf p = vexp(vload(s + c) - mn);
		vstore(s + c, p);
		sum += p;
	}
	float bs = 0;
	for (int i = 0; i < ATTN_VW; i++)
		bs += sum[i];
	*l = *l * alpha + bs;
	*m = mn;
	return alpha;
}

/* One row's weighted sum acc[vw] over keys [a, b): times alpha, then the
 * values' multiply-adds with the weights s, keys in order for each dim. */
static void row_values(const float *s, int a, int b, const float *vr, int vw, float *acc,
		       float alpha)
{
	int d = 0;
#if ATTN_VACC >= 8
	/* eight chains per key where the ISA has the registers: the chains
	 * are latency-bound, so more of them in flight is faster; each dim's
	 * chain (keys in order) is the same whatever the split */
	for (; d + 8 * ATTN_VW <= vw; d += 8 * ATTN_VW) {
		const float *ad = acc + d;
		vf o0 = vload(ad) * alpha, o1 = vload(ad + ATTN_VW) * alpha,
		   o2 = vload(ad + 2 * ATTN_VW) * alpha, o3 = vload(ad + 3 * ATTN_VW) * alpha,
		   o4 = vload(ad + 4 * ATTN_VW) * alpha, o5 = vload(ad + 5 * ATTN_VW) * alpha,
		   o6 = vload(ad + 6 * ATTN_VW) * alpha, o7 = vload(ad + 7 * ATTN_VW) * alpha;
		for (int j = a; j < b; j++) {
			const float *v = vr + (size_t)j * vw + d;
			vf p = VSPLAT(s[j]);
			o0 = VFMA(p, vload(v), o0);
			o1 = VFMA(p, vload(v + ATTN_VW), o1);
			o2 = VFMA(p, vload(v + 2 * ATTN_VW), o2);
			o3 = VFMA(p, vload(v + 3 * ATTN_VW), o3);
			o4 = VFMA(p, vload(v + 4 * ATTN_VW), o4);
			o5 = VFMA(p, vload(v + 5 * ATTN_VW), o5);
			o6 = VFMA(p, vload(v + 6 * ATTN_VW), o6);
			o7 = VFMA(p, vload(v + 7 * ATTN_VW), o7);
		}
		vstore(acc + d, o0), vstore(acc + d + ATTN_VW, o1);
		vstore(acc + d + 2 * ATTN_VW, o2), vstore(acc + d + 3 * ATTN_VW, o3);
		vstore(acc + d + 4 * ATTN_VW, o4), vstore(acc + d + 5 * ATTN_VW, o5);
		vstore(acc + d + 6 * ATTN_VW, o6), vstore(acc + d + 7 * ATTN_VW, o7);
	}
#endif
	for (; d + 4 * ATTN_VW <= vw; d += 4 * ATTN_VW) {
		vf o0 = vload(acc + d) * alpha, o1 = vload(acc + d + ATTN_VW) * alpha,
		   o2 = vload(acc + d + 2 * ATTN_VW) * alpha, o3 = vload(acc + d + 3 * ATTN_VW) * alpha;
		for (int j = a; j < b; j++) {
			const float *v = vr + (size_t)j * vw + d;
			vf p = VSPLAT(s[j]);
			o0 = VFMA(p, vload(v), o0);
			o1 = VFMA(p, vload(v + ATTN_VW), o1);
			o2 = VFMA(p, vload(v + 2 * ATTN_VW), o2);
			o3 = VFMA(p, vload(v + 3 * ATTN_VW), o3);
		}
		vstore(acc + d, o0), vstore(acc + d + ATTN_VW, o1);
		vstore(acc + d + 2 * ATTN_VW, o2), vstore(acc + d + 3 * ATTN_VW, o3);
	}
	for (; d < vw; d += ATTN_VW) {
		vf o = vload(acc + d) * alpha;
		for (int j = a; j < b; j++)
			o = VFMA(VSPLAT(s[j]), vload(vr + (size_t)j * vw + d), o);
		vstore(acc + d, o);
	}
}

#ifdef ATTN_GROUP4
/* row_softmax for four rows with the same keys [a, b), scores s ktw apart,
 * m, l and alpha[4] theirs: each phase for the four rows in turn, so that
 * their chains (the max over the chunks, then over the lanes, the
 * exponentials, the sums) overlap; one row's were mostly waiting on
 * latency.  The four alphas come from one vexp, lane r from row r's
 * difference, as sexp's splat: vexp is lane-wise, the same bits.  Each
 * row's operations are row_softmax's, in its order. */
static void softmax4(const moe_attn_tile *t, float *s, int ktw, int a, int b, float *m, float *l,
		     float alpha[4])
{
	float *sr[4] = {s, s + ktw, s + 2 * (size_t)ktw, s + 3 * (size_t)ktw};
	int c0 = a / ATTN_VW * ATTN_VW;
	vf mx[4], sum[4], mv[4], dm = VSPLAT(0);
	float mn[4];
	_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) mx[r] = VSPLAT(-INFINITY);
	for (int c = c0; c < b; c += ATTN_VW) {
		vi idx = key_index(c), in = (idx >= isplat(a)) & (idx < isplat(b));
		_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
			vf x = vselect(in, vload(sr[r] + c) * t->scale, VSPLAT(-INFINITY));
			vstore(sr[r] + c, x);
			mx[r] = vmax(mx[r], x);
		}
	}
	_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
		float mb = -INFINITY;
		for (int i = 0; i < ATTN_VW; i++)
			mb = mx[r][i] > mb ? mx[r][i] : mb;
		mn[r] = m[r] > mb ? m[r] : mb;
		dm[r] = m[r] - mn[r];
		mv[r] = VSPLAT(mn[r]);
		sum[r] = VSPLAT(0);
	}
	vf al = vexp(dm); /* lanes past 3: vexp(0), unused */
	for (int c = c0; c < b; c += ATTN_VW)
		_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
			vf p = vexp(vload(sr[r] + c) - mv[r]);
			vstore(sr[r] + c, p);
			sum[r] += p;
		}
	_Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
		float bs = 0;
		for (int i = 0; i < ATTN_VW; i++)
			bs += sum[r][i];
		l[r] = l[r] * al[r] + bs;
		m[r] = mn[r];
		alpha[r] = al[r];
	}
}

/* row_values for four rows with the same keys [a, b) (the query heads of
 * one token), weights s ktw apart, sums acc vw apart: each value vector is
 * loaded once for the four rows, 8 sums in registers (4 rows x 2 vectors).
 * Row by row, every key's value row (hdv floats) was loaded again for
 * each row: 9 loads to 8 multiply-adds a key (perf, mixtral-s pp512 at
 * avx2: that loop was near half of the attention's samples).  Each row's
 * chain per dim (times alpha, then keys in order) is row_values', so the
 * bits are the same. */
static void values4(const float *s, int ktw, int a, int b, const float *vr, int vw, float *acc,
		    const float alpha[4])
{
	const float *s0 = s, *s1 = s + ktw, *s2 = s + 2 * (size_t)ktw, *s3 = s + 3 * (size_t)ktw;
	float *c0 = acc, *c1 = acc + vw, *c2 = acc + 2 * (size_t)vw, *c3 = acc + 3 * (size_t)vw;
	_Static_assert(PAD % (2 * ATTN_VW) == 0, "vw (a multiple of PAD) in steps of two vectors");
	for (int d = 0; d < vw; d += 2 * ATTN_VW) {
		vf o0 = vload(c0 + d) * alpha[0], p0 = vload(c0 + d + ATTN_VW) * alpha[0];
		vf o1 = vload(c1 + d) * alpha[1], p1 = vload(c1 + d + ATTN_VW) * alpha[1];
		vf o2 = vload(c2 + d) * alpha[2], p2 = vload(c2 + d + ATTN_VW) * alpha[2];
		vf o3 = vload(c3 + d) * alpha[3], p3 = vload(c3 + d + ATTN_VW) * alpha[3];
		for (int j = a; j < b; j++) {
			const float *v = vr + (size_t)j * vw + d;
			vf v0 = vload(v), v1 = vload(v + ATTN_VW), w;
			w = VSPLAT(s0[j]), o0 = VFMA(w, v0, o0), p0 = VFMA(w, v1, p0);
			w = VSPLAT(s1[j]), o1 = VFMA(w, v0, o1), p1 = VFMA(w, v1, p1);
			w = VSPLAT(s2[j]), o2 = VFMA(w, v0, o2), p2 = VFMA(w, v1, p2);
			w = VSPLAT(s3[j]), o3 = VFMA(w, v0, o3), p3 = VFMA(w, v1, p3);
		}
		vstore(c0 + d, o0), vstore(c0 + d + ATTN_VW, p0);
		vstore(c1 + d, o1), vstore(c1 + d + ATTN_VW, p1);
		vstore(c2 + d, o2), vstore(c2 + d + ATTN_VW, p2);
		vstore(c3 + d, o3), vstore(c3 + d + ATTN_VW, p3);
	}
}
#endif

void ATTN_NAME(const moe_attn_tile *t)
{
	int hd = t->head_dim, hdv = t->head_dim_v, bt = t->block_tokens;
	int R = t->n_tok * t->n_head, ktw = ROUND(bt), vw = ROUND(hdv);
	float *kt = t->work, *vr = kt + (size_t)hd * ktw, *s = vr + (size_t)ktw * vw;
	float *acc = s + 4 * (size_t)ktw, *m = acc + (size_t)R * vw, *l = m + R;
	int lo = INT32_MAX, hi = 0;
	for (int i = 0; i < t->n_tok; i++) {
		lo = t->lo[i] < lo ? t->lo[i] : lo;
		hi = t->hi[i] > hi ? t->hi[i] : hi;
	}
	memset(acc, 0, (size_t)R * vw * sizeof *acc);
	for (int r = 0; r < R; r++)
		m[r] = -INFINITY, l[r] = 0;
	/* blocks before the earliest range start (a sliding window) are never read */
	for (int p0 = lo / bt * bt; p0 < hi; p0 += bt) {
		int ja = (lo > p0 ? lo : p0) - p0, jb = (hi < p0 + bt ? hi : p0 + bt) - p0;
		const uint16_t *kh = NULL;
#ifdef ATTN_F16_KEYS
		/* one group of rows reads each key once: convert in the loop;
		 * whole chunks stay inside a dimension's block_tokens keys */
		if (t->kv_type == MOE_F16 && R <= 4 && bt % ATTN_VW == 0)
			kh = (const uint16_t *)t->k[p0 / bt];
#endif
		if (t->kv_type == MOE_F16 && p0 + bt < hi)
			prefetch_block(t, p0 / bt + 1, (hi < p0 + 2 * bt ? hi : p0 + 2 * bt) - p0 - bt);
		decode_block(t, p0 / bt, ja, jb, kh ? NULL : kt, ktw, vr, vw);
		keys kf = {.kt = kt, .w = (size_t)ktw}, k16 = {.kh = kh, .w = (size_t)bt};
		/* rows in fours, then one by one */
		for (int r0 = 0; r0 < R; r0 += 4) {
			int nr = R - r0 < 4 ? R - r0 : 4;
			const float *q[4];
			for (int i = 0; i < nr; i++) {
				int r = r0 + i;
				q[i] = t->q + (int64_t)(r / t->n_head) * t->q_stride +
				       (int64_t)(r % t->n_head) * hd;
			}
			/* the keys these rows see: in a causal tile's last block
			 * the early rows see few of the keys decoded */
			int ga = INT32_MAX, gb = 0;
			for (int i = 0; i < nr; i++) {
				int tok = (r0 + i) / t->n_head;
				int a = (t->lo[tok] > p0 ? t->lo[tok] : p0) - p0;
				int b = (t->hi[tok] < p0 + bt ? t->hi[tok] : p0 + bt) - p0;
				if (a < b)
					ga = a < ga ? a : ga, gb = b > gb ? b : gb;
			}
			if (ga >= gb)
				continue;
			if (nr == 4 && kh)
				scores4(q, hd, k16, ktw, ga, gb, s);
			else if (nr == 4)
				scores4(q, hd, kf, ktw, ga, gb, s);
			else if (kh)
				for (int i = 0; i < nr; i++)
					scores1(q[i], hd, k16, ga, gb, s + (size_t)i * ktw);
			else
				for (int i = 0; i < nr; i++)
					scores1(q[i], hd, kf, ga, gb, s + (size_t)i * ktw);
			int ra[4], rb[4]; /* each row's keys [ra, rb) in this block */
			for (int i = 0; i < nr; i++) {
				int tok = (r0 + i) / t->n_head;
				ra[i] = (t->lo[tok] > p0 ? t->lo[tok] : p0) - p0;
				rb[i] = (t->hi[tok] < p0 + bt ? t->hi[tok] : p0 + bt) - p0;
			}
#ifdef ATTN_GROUP4
			/* a token's query heads: four rows, one key range */
			if (nr == 4 && ra[0] < rb[0] && ra[1] == ra[0] && ra[2] == ra[0] &&
			    ra[3] == ra[0] && rb[1] == rb[0] && rb[2] == rb[0] && rb[3] == rb[0]) {
				float alpha[4];
				softmax4(t, s, ktw, ra[0], rb[0], m + r0, l + r0, alpha);
				values4(s, ktw, ra[0], rb[0], vr, vw, acc + (size_t)r0 * vw, alpha);
				continue;
			}
#endif
			for (int i = 0; i < nr; i++) {
				int r = r0 + i;
				if (ra[i] >= rb[i])
					continue;
				float alpha = row_softmax(t, s + (size_t)i * ktw, ra[i], rb[i], &m[r], &l[r]);
				row_values(s + (size_t)i * ktw, ra[i], rb[i], vr, vw, acc + (size_t)r * vw,
					   alpha);
			}
		}
	}
	for (int r = 0; r < R; r++) {
		float f = 1.0f;
		if (t->sink) { /* one more logit in the denominator, no value */
			float sk = t->sink[r % t->n_head], mn = m[r] > sk ? m[r] : sk;
			f = sexp(m[r] - mn);
			l[r] = l[r] * f + sexp(sk - mn);
		}
		f = l[r] > 0 ? f / l[r] : 0.0f;
		float *o = t->out + (int64_t)(r / t->n_head) * t->out_stride +
			   (int64_t)(r % t->n_head) * hdv;
		const float *ar = acc + (size_t)r * vw;
		int d = 0;
		for (; d + ATTN_VW <= hdv; d += ATTN_VW)
			vstore(o + d, vload(ar + d) * f);
		for (; d < hdv; d++)
			o[d] = ar[d] * f;
	}
}

#ifdef ATTN_F16_STORE
/* The F16 cache write of the level (kernels.h, moe_f16_store_fn), ATTN_VW
 * floats a conversion with f16_vstore(x, y) (ATTN_VW halves to y), the
 * rest one by one.  vcvtps2ph rounds to nearest even, gives infinity past
 * 65520, half subnormals whatever MXCSR.FTZ says, and quiets a NaN keeping
 * its top payload bits: moe_f32_to_f16's rules (t-attn checks every
 * level). */
void ATTN_F16_STORE(const float *x, uint16_t *y, int64_t n, int64_t ystride)
{
	int64_t i = 0;
	for (; i + ATTN_VW <= n; i += ATTN_VW) {
		if (ystride == 1) {
			f16_vstore(x + i, y + i);
		} else {
			uint16_t h[ATTN_VW];
			f16_vstore(x + i, h);
			for (int j = 0; j < ATTN_VW; j++)
				y[(i + j) * ystride] = h[j];
		}
	}
	for (; i < n; i++)
		y[i * ystride] = moe_f32_to_f16(x[i]);
}
#endif
