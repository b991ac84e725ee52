/* search.c — the weight quantisers: for every block a search for the scales
 * (and minimums) that minimise the importance-weighted squared error
 *
 *     E = sum_i w_i (x_i - dequant(q)_i)^2
 *
 * instead of round-to-nearest from the block maximum.  w_i is the importance
 * of input column i (the mean square of the activations it multiplies, from
 * an importance matrix) or 1 without one: E is then the expected squared
 * error of the tensor's output, sum_j E[a_j^2] (W - Q)_ij^2, for activations
 * with uncorrelated columns.
 *
 * One search, three shapes of grid:
 *   x ~ d q            q integer in [qmin, qmax]   (Q4_0 Q5_0 Q8_0, the groups
 *                                                   of Q3_K Q6_K, sub-scales)
 *   x ~ d q + m        q integer in [0, nmax]      (Q4_1 Q5_1, the groups of
 *                                                   Q2_K Q4_K Q5_K with m <= 0)
 *   x ~ d k[q]         k a code book               (IQ4_NL, IQ4_XS groups)
 * For a set of candidate scales around the one that maps the block's
 * extreme to the end of the grid, the codes are rounded, then (d, m) refitted
 * by weighted least squares for those codes; the best candidate is refined
 * by alternating "nearest codes for (d, m)" and "best (d, m) for the codes"
 * (each step can only lower E).  The K-quants do this per group, then fit
 * the quantised group scales to the super-block scale the same way (weighted
 * by how much each group's error moves with its scale), try each group's
 * scale code +-1, and round the elements once more on the final grid.
 * Stored f16 scales are rounded before the final codes are chosen, so the
 * codes are the nearest for the scales the decoder sees.
 *
 * The layouts are those of quant/blocks.h (= GGUF); the decoders are in
 * legacy.c and kquants.c.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant.h"
#include "quant/blocks.h"

#define H2F(h) moe_f16_to_f32(h)
#define F2H(f) moe_f32_to_f16(f)

/* Candidates each side of the extreme-to-grid-end scale, relative step. */
#define N_STEPS 10
#define STEP 0.02f
#define N_REFINE 4

static inline int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Weights of a group: the caller's, or ones when there are none or they
 * are all zero (a column no token ever used still deserves a sane code). */
static const float *group_weights(const float *w, int n, float *ones)
{
	if (w) {
		for (int i = 0; i < n; i++)
			if (w[i] > 0.0f)
				return w;
	}
	for (int i = 0; i < n; i++)
		ones[i] = 1.0f;
	return ones;
}

static float signed_max(const float *x, int n, float *amax)
{
	float a = 0.0f, m = 0.0f;
	for (int i = 0; i < n; i++) {
		if (fabsf(x[i]) > a) {
			a = fabsf(x[i]);
			m = x[i];
		}
	}
	*amax = a;
	return m;
}

/* ------------------------------------------------ x ~ d q, q in [lo, hi] */

/* Nearest codes for scale d and their error. */
static double err_scale(const float *x, const float *w, int n, float d, int lo, int hi, int *q)
{
	double err = 0.0;
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int i = 0; i < n; i++) {
		int v = d != 0.0f ? clampi(moe_nearest_int(x[i] * id), lo, hi) : 0;
		if (q)
			q[i] = v;
		double r = x[i] - (double)d * v;
		err += w[i] * r * r;
	}
	return err;
}

/* Codes for inverse scale iscale, then the least-squares d for them.
 * Returns the error of (d, codes). */
static double fit_scale(const float *x, const float *w, int n, float iscale, int lo, int hi,
			int *q, float *d)
{
	double sxq = 0, sqq = 0, sxx = 0;
	for (int i = 0; i < n; i++) {
		int v = clampi(moe_nearest_int(iscale * x[i]), lo, hi);
		q[i] = v;
		sxq += (double)w[i] * x[i] * v;
		sqq += (double)w[i] * v * v;
		sxx += (double)w[i] * x[i] * x[i];
	}
	if (sqq <= 0.0) {
		*d = 0.0f;
		return sxx;
	}
	*d = (float)(sxq / sqq);
	double err = sxx - sxq * sxq / sqq;
	return err > 0.0 ? err : 0.0;
}

/* Best d for x ~ d q, q in [lo, hi] (lo < 0 < hi, or lo == 0 for
 * non-negative data); codes in q.  Returns the error. */
static double search_scale(const float *x, const float *w, int n, int lo, int hi, float *d_out,
			   int *q)
{
	float amax, max = signed_max(x, n, &amax);
	int tq[MOE_QK_K];
	double best = DBL_MAX;
	float bd = 0.0f;

	if (amax == 0.0f) {
		memset(q, 0, sizeof(int) * (size_t)n);
		*d_out = 0.0f;
		return 0.0;
	}
	/* Map the extreme to either end of the grid (they differ for
	 * asymmetric grids such as [-8, 7]).  Wide grids (Q8_0, sub-scales)
	 * have an error that is jagged in the scale, with minima about 1/hi
	 * apart: search them finer. */
	int nsteps = N_STEPS;
	float step = STEP;
	if (hi - lo > 64) {
		nsteps = 48;
		step = 0.25f / (float)hi;
	}
	for (int side = 0; side < 2; side++) {
		int end = side ? lo : hi;
		if (end == 0)
			continue;
		for (int k = -nsteps; k <= nsteps; k++) {
			float iscale = end * (1.0f + step * k) / max;
			float d;
			double err = fit_scale(x, w, n, iscale, lo, hi, tq, &d);
			if (err < best) {
				best = err;
				bd = d;
				memcpy(q, tq, sizeof(int) * (size_t)n);
			}
		}
	}
	for (int it = 0; it < N_REFINE && bd != 0.0f; it++) {
		float d;
		double err = fit_scale(x, w, n, 1.0f / bd, lo, hi, tq, &d);
		if (!(err < best))
			break;
		best = err;
		bd = d;
		memcpy(q, tq, sizeof(int) * (size_t)n);
	}
	*d_out = bd;
	return best;
}

/* -------------------------------------- x ~ d q + m, q in [0, nmax] */

static double err_scale_min(const float *x, const float *w, int n, float d, float m, int nmax,
			    int *q)
{
	double err = 0.0;
	float id = d > 0.0f ? 1.0f / d : 0.0f;
	for (int i = 0; i < n; i++) {
		int v = d > 0.0f ? clampi(moe_nearest_int((x[i] - m) * id), 0, nmax) : 0;
		if (q)
			q[i] = v;
		double r = x[i] - ((double)d * v + m);
		err += w[i] * r * r;
	}
	return err;
}

/* Least-squares (d, m) for fixed codes; with nonpos, m is kept <= 0 (the
 * K-quants store -m as an unsigned code).  Returns the error. */
static double fit_scale_min(const float *x, const float *w, int n, const int *q, bool nonpos,
			    float *d, float *m)
{
	double s1 = 0, sq = 0, sqq = 0, sx = 0, sxq = 0;
	for (int i = 0; i < n; i++) {
		s1 += w[i];
		sq += (double)w[i] * q[i];
		sqq += (double)w[i] * q[i] * q[i];
		sx += (double)w[i] * x[i];
		sxq += (double)w[i] * x[i] * q[i];
	}
	double det = s1 * sqq - sq * sq, dd, mm;
	if (det > 1e-12 * s1 * sqq && det > 0) {
		dd = (s1 * sxq - sq * sx) / det;
		mm = (sqq * sx - sq * sxq) / det;
	} else {
		dd = 0;
		mm = s1 > 0 ? sx / s1 : 0;
	}
	if (nonpos && mm > 0) {
		mm = 0;
		dd = sqq > 0 ? sxq / sqq : 0;
	}
	if (dd < 0) { /* codes ordered against the data: use the mean alone */
		dd = 0;
		mm = s1 > 0 ? sx / s1 : 0;
		if (nonpos && mm > 0)
			mm = 0;
	}
	*d = (float)dd;
	*m = (float)mm;
	double err = 0;
	for (int i = 0; i < n; i++) {
		double r = x[i] - (dd * q[i] + mm);
		err += w[i] * r * r;
	}
	return err;
}

static double search_scale_min(const float *x, const float *w, int n, int nmax, bool nonpos,
			       float *d_out, float *m_out, int *q)
{
	float mn = x[0], mx = x[0];
	int tq[MOE_QK_K];
	double best = DBL_MAX;
	float bd = 0.0f, bm = 0.0f;

	for (int i = 1; i < n; i++) {
		mn = x[i] < mn ? x[i] : mn;
		mx = x[i] > mx ? x[i] : mx;
	}
	if (nonpos && mn > 0.0f)
		mn = 0.0f;
	if (mx <= mn) { /* constant block */
		memset(q, 0, sizeof(int) * (size_t)n);
		*d_out = 0.0f;
		*m_out = mn;
		return 0.0;
	}
	for (int k = -N_STEPS; k <= N_STEPS; k++) {
		float iscale = nmax * (1.0f + STEP * k) / (mx - mn);
		for (int i = 0; i < n; i++)
			tq[i] = clampi(moe_nearest_int(iscale * (x[i] - mn)), 0, nmax);
		float d, m;
		double err = fit_scale_min(x, w, n, tq, nonpos, &d, &m);
		if (err < best) {
			best = err;
			bd = d;
			bm = m;
			memcpy(q, tq, sizeof(int) * (size_t)n);
		}
	}
	for (int it = 0; it < N_REFINE && bd > 0.0f; it++) {
		float d, m;
		err_scale_min(x, w, n, bd, bm, nmax, tq);
		double err = fit_scale_min(x, w, n, tq, nonpos, &d, &m);
		if (!(err < best))
			break;
		best = err;
		bd = d;
		bm = m;
		memcpy(q, tq, sizeof(int) * (size_t)n);
	}
	*d_out = bd;
	*m_out = bm;
	return best;
}

/* ---------------------------------------------- x ~ d k[q], a code book */

/* Index of the entry of the sorted 16-entry table nearest to v. */
static int nearest_code(const int8_t *kv, float v)
{
	int lo = 0, hi = 15;
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		if (v < kv[mid])
			hi = mid;
		else
			lo = mid;
	}
	return v - kv[lo] <= kv[hi] - v ? lo : hi;
}

static double err_book(const float *x, const float *w, int n, float d, int *q)
{
	double err = 0.0;
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int i = 0; i < n; i++) {
		int v = nearest_code(moe_kvalues_iq4nl, x[i] * id);
		if (q)
			q[i] = v;
		double r = x[i] - (double)d * moe_kvalues_iq4nl[v];
		err += w[i] * r * r;
	}
	return err;
}

static double fit_book(const float *x, const float *w, int n, float iscale, int *q, float *d)
{
	double sxk = 0, skk = 0, sxx = 0;
	for (int i = 0; i < n; i++) {
		int v = nearest_code(moe_kvalues_iq4nl, x[i] * iscale);
		double k = moe_kvalues_iq4nl[v];
		q[i] = v;
		sxk += w[i] * x[i] * k;
		skk += w[i] * k * k;
		sxx += (double)w[i] * x[i] * x[i];
	}
	*d = skk > 0 ? (float)(sxk / skk) : 0.0f;
	double err = skk > 0 ? sxx - sxk * sxk / skk : sxx;
	return err > 0 ? err : 0;
}

static double search_book(const float *x, const float *w, int n, float *d_out, int *q)
{
	float amax, max = signed_max(x, n, &amax);
	int tq[MOE_QK_K];
	double best = DBL_MAX;
	float bd = 0.0f;

	if (amax == 0.0f) {
		for (int i = 0; i < n; i++)
			q[i] = nearest_code(moe_kvalues_iq4nl, 0.0f);
		*d_out = 0.0f;
		return 0.0;
	}
	/* The table runs from -127 to +113: try both ends for the extreme. */
	for (int side = 0; side < 2; side++) {
		float end = side ? -127.0f : 113.0f;
		for (int k = -N_STEPS; k <= N_STEPS; k++) {
			float d;
			double err = fit_book(x, w, n, end * (1.0f + STEP * k) / max, tq, &d);
			if (err < best) {
				best = err;
				bd = d;
				memcpy(q, tq, sizeof(int) * (size_t)n);
			}
		}
	}
	for (int it = 0; it < N_REFINE && bd != 0.0f; it++) {
		float d;
		double err = fit_book(x, w, n, 1.0f / bd, tq, &d);
		if (!(err < best))
			break;
		best = err;
		bd = d;
		memcpy(q, tq, sizeof(int) * (size_t)n);
	}
	*d_out = bd;
	return best;
}

/* ---------------------------------------------------- sub-scale fitting */

/* Quantise G group scales s[g] to D * c[g], c in [lo, hi], with weights
 * W[g] (how much group g's error grows per unit of scale error squared).
 * D is rounded to f16 (returned as its bits); codes are the nearest for the
 * rounded D. */
static uint16_t fit_subscales(const float *s, const float *W, int G, int lo, int hi, int *c)
{
	float ones[16], d;
	const float *ww = group_weights(W, G, ones);
	search_scale(s, ww, G, lo, hi, &d, c);
	uint16_t h = F2H(d);
	float d16 = H2F(h);
	if (d16 == 0.0f || !isfinite(d16)) {
		memset(c, 0, sizeof(int) * (size_t)G);
		return isfinite(d16) ? h : 0;
	}
	err_scale(s, ww, G, d16, lo, hi, c);
	return h;
}

/* ------------------------------------------------------------ packing */

static void pack_nibbles32(uint8_t *qs, const int *q)
{
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

/* 5-bit codes in [0, 31]: the fifth bits to qh (bit j = code j's), the low
 * four to qs (Q5_0 and Q5_1 share the layout). */
static void pack_5bit32(uint8_t *qs, uint8_t *qh, int *q)
{
	uint32_t h = 0;
	for (int j = 0; j < MOE_QK; j++) {
		h |= (uint32_t)(q[j] >> 4) << j;
		q[j] &= 0x0F;
	}
	pack_nibbles32(qs, q);
	memcpy(qh, &h, 4);
}

/* ----------------------------------------------- 32-element block types */

/* One 32-element block: x[32] with weights ww[32] into the block at blk. */
typedef void (*block_quant_fn)(const float *x, const float *ww, void *blk);

/* Every 32-element block type loops the same way: the block's slice of the
 * importance weights (or ones), then the type's own block function. */
static void quant_blocks32(const float *x, void *dst, int64_t n, const float *w, size_t bsize,
			   block_quant_fn quant_block)
{
	uint8_t *b = dst;
	float ones[MOE_QK];
	for (int64_t i = 0; i < n / MOE_QK; i++, b += bsize, x += MOE_QK)
		quant_block(x, group_weights(w ? w + i * MOE_QK : NULL, MOE_QK, ones), b);
}

/* Q4_0 / Q5_0 / Q8_0: x = d q, q in [lo, hi], with f16 d (returned as its
 * bits); codes chosen for the stored (rounded) d. */
static uint16_t scale_block(const float *x, const float *ww, int lo, int hi, int *q)
{
	float d;
	search_scale(x, ww, MOE_QK, lo, hi, &d, q);
	uint16_t h = F2H(d);
	err_scale(x, ww, MOE_QK, H2F(h), lo, hi, q);
	return h;
}

static void block_q4_0(const float *x, const float *ww, void *blk)
{
	moe_block_q4_0 *b = blk;
	int q[MOE_QK];
	b->d = scale_block(x, ww, -8, 7, q);
	for (int j = 0; j < MOE_QK; j++)
		q[j] += 8;
	pack_nibbles32(b->qs, q);
}

static void block_q5_0(const float *x, const float *ww, void *blk)
{
	moe_block_q5_0 *b = blk;
	int q[MOE_QK];
	b->d = scale_block(x, ww, -16, 15, q);
	for (int j = 0; j < MOE_QK; j++)
		q[j] += 16;
	pack_5bit32(b->qs, b->qh, q);
}

static void block_q8_0(const float *x, const float *ww, void *blk)
{
	moe_block_q8_0 *b = blk;
	int q[MOE_QK];
	/* [-127, 127]: the SIMD kernels negate codes. */
	b->d = scale_block(x, ww, -127, 127, q);
	for (int j = 0; j < MOE_QK; j++)
		b->qs[j] = (int8_t)q[j];
}

/* Q4_1 / Q5_1: x = d q + m with f16 d and m; codes chosen for the stored
 * (rounded) pair. */
static void scale_min_block(const float *x, const float *ww, int nmax, uint16_t *dh,
			    uint16_t *mh, int *q)
{
	float d, m;
	search_scale_min(x, ww, MOE_QK, nmax, false, &d, &m, q);
	*dh = F2H(d);
	*mh = F2H(m);
	err_scale_min(x, ww, MOE_QK, H2F(*dh), H2F(*mh), nmax, q);
}

static void block_q4_1(const float *x, const float *ww, void *blk)
{
	moe_block_q4_1 *b = blk;
	int q[MOE_QK];
	uint16_t dh, mh;
	scale_min_block(x, ww, 15, &dh, &mh, q);
	b->d = dh; /* via locals: the block is packed */
	b->m = mh;
	pack_nibbles32(b->qs, q);
}

static void block_q5_1(const float *x, const float *ww, void *blk)
{
	moe_block_q5_1 *b = blk;
	int q[MOE_QK];
	uint16_t dh, mh;
	scale_min_block(x, ww, 31, &dh, &mh, q);
	b->d = dh; /* via locals: the block is packed */
	b->m = mh;
	pack_5bit32(b->qs, b->qh, q);
}

static void block_iq4_nl(const float *x, const float *ww, void *blk)
{
	moe_block_iq4_nl *b = blk;
	int q[MOE_QK];
	float d;
	search_book(x, ww, MOE_QK, &d, q);
	b->d = F2H(d);
	err_book(x, ww, MOE_QK, H2F(b->d), q);
	pack_nibbles32(b->qs, q);
}

/* MXFP4: the scale is a power of two, so the search is over the exponent:
 * the one that puts the maximum in E2M1's top binade and its neighbours. */
static double mxfp4_err(const float *x, const float *ww, int e, int *q)
{
	float d = moe_e8m0_to_f32_half((uint8_t)e);
	double err = 0;
	for (int j = 0; j < MOE_QK; j++) {
		int best = 0;
		float be = fabsf(x[j]);
		for (int k = 1; k < 16; k++) {
			float r = fabsf(x[j] - moe_kvalues_mxfp4[k] * d);
			if (r < be) {
				be = r;
				best = k;
			}
		}
		q[j] = best;
		err += (double)ww[j] * be * be;
	}
	return err;
}

static void block_mxfp4(const float *x, const float *ww, void *blk)
{
	moe_block_mxfp4 *b = blk;
	int q[MOE_QK], bq[MOE_QK];
	float amax;
	signed_max(x, MOE_QK, &amax);
	int e0 = 0;
	if (amax > 0.0f && isfinite(amax))
		e0 = (int)floorf(log2f(amax)) - 2 + 127;
	double best = DBL_MAX;
	int be = 0;
	for (int e = e0 - 1; e <= e0 + 1; e++) {
		if (e < 0 || e > 254)
			continue;
		double err = mxfp4_err(x, ww, e, q);
		if (err < best) {
			best = err;
			be = e;
			memcpy(bq, q, sizeof(q));
		}
	}
	if (best == DBL_MAX) { /* e0 far outside: clamp like the reference */
		be = e0 < 0 ? 0 : 254;
		mxfp4_err(x, ww, be, bq);
	}
	b->e = (uint8_t)be;
	pack_nibbles32(b->qs, bq);
}

/* quant_<name>: moe_quant_fn's entry for a 32-element block type. */
#define QUANT_BLOCKS32(name)                                                                  \
	static void quant_##name(const float *x, void *dst, int64_t n, const float *w)        \
	{                                                                                     \
		quant_blocks32(x, dst, n, w, sizeof(moe_block_##name), block_##name);         \
	}
QUANT_BLOCKS32(q4_0)
QUANT_BLOCKS32(q4_1)
QUANT_BLOCKS32(q5_0)
QUANT_BLOCKS32(q5_1)
QUANT_BLOCKS32(q8_0)
QUANT_BLOCKS32(iq4_nl)
QUANT_BLOCKS32(mxfp4)

/* ------------------------------------------------------- K super-blocks */

/* Scale-and-min K-quants: G groups of n = 256 / G elements, codes in
 * [0, nmax], sub-scale and sub-min codes in [0, cmax].  Fills the codes
 * L[256], the super scales and the sub codes sc[G], mc[G]. */
static void kquant_scale_min(const float *x, const float *w, int G, int nmax, int cmax,
			     uint16_t *dh, uint16_t *dminh, int *sc, int *mc, int *L)
{
	int n = MOE_QK_K / G;
	float s[16], m[16], Ws[16], Wm[16], ones[MOE_QK_K];
	const float *wg[16];

	for (int g = 0; g < G; g++) {
		const float *xg = x + n * g;
		wg[g] = group_weights(w ? w + n * g : NULL, n, ones + n * g);
		float d, mm;
		search_scale_min(xg, wg[g], n, nmax, true, &d, &mm, L + n * g);
		s[g] = d;
		m[g] = -mm; /* >= 0 */
		double sqq = 0, s1 = 0;
		for (int i = 0; i < n; i++) {
			sqq += (double)wg[g][i] * L[n * g + i] * L[n * g + i];
			s1 += wg[g][i];
		}
		Ws[g] = (float)sqq;
		Wm[g] = (float)s1;
	}
	*dh = fit_subscales(s, Ws, G, 0, cmax, sc);
	*dminh = fit_subscales(m, Wm, G, 0, cmax, mc);
	float d = H2F(*dh), dmin = H2F(*dminh);

	/* Each group's codes on the final grid; a neighbouring scale or min
	 * code may fit the group better than the one rounded above. */
	for (int g = 0; g < G; g++) {
		const float *xg = x + n * g;
		int tq[MOE_QK], bs = sc[g], bm = mc[g];
		double best = err_scale_min(xg, wg[g], n, d * sc[g], -dmin * mc[g], nmax, L + n * g);
		for (int ds = -1; ds <= 1; ds++) {
			for (int dm = -1; dm <= 1; dm++) {
				int cs = sc[g] + ds, cm = mc[g] + dm;
				if ((!ds && !dm) || cs < 0 || cs > cmax || cm < 0 || cm > cmax)
					continue;
				double err = err_scale_min(xg, wg[g], n, d * cs, -dmin * cm, nmax, tq);
				if (err < best) {
					best = err;
					bs = cs;
					bm = cm;
					memcpy(L + n * g, tq, sizeof(int) * (size_t)n);
				}
			}
		}
		sc[g] = bs;
		mc[g] = bm;
	}
}

/* Scale-only K-quants (Q3_K, Q6_K, IQ4_XS groups): codes in [lo, hi] (or
 * the IQ4 code book when lo == hi == 0), signed sub-scale codes in
 * [clo, chi].  Returns the super scale's f16 bits. */
static uint16_t kquant_scale(const float *x, const float *w, int G, int lo, int hi, int clo,
			     int chi, int *sc, int *L)
{
	int n = MOE_QK_K / G;
	bool book = lo == 0 && hi == 0;
	float s[16], Ws[16], ones[MOE_QK_K];
	const float *wg[16];

	for (int g = 0; g < G; g++) {
		const float *xg = x + n * g;
		wg[g] = group_weights(w ? w + n * g : NULL, n, ones + n * g);
		float d;
		if (book)
			search_book(xg, wg[g], n, &d, L + n * g);
		else
			search_scale(xg, wg[g], n, lo, hi, &d, L + n * g);
		s[g] = d;
		double sqq = 0;
		for (int i = 0; i < n; i++) {
			double k = book ? moe_kvalues_iq4nl[L[n * g + i]] : L[n * g + i];
			sqq += wg[g][i] * k * k;
		}
		Ws[g] = (float)sqq;
	}
	uint16_t dh = fit_subscales(s, Ws, G, clo, chi, sc);
	float d = H2F(dh);
	for (int g = 0; g < G; g++) {
		const float *xg = x + n * g;
		int tq[MOE_QK], bs = sc[g];
		double best = book ? err_book(xg, wg[g], n, d * sc[g], L + n * g)
				   : err_scale(xg, wg[g], n, d * sc[g], lo, hi, L + n * g);
		for (int ds = -1; ds <= 1; ds += 2) {
			int cs = sc[g] + ds;
			if (cs < clo || cs > chi)
				continue;
			double err = book ? err_book(xg, wg[g], n, d * cs, tq)
					  : err_scale(xg, wg[g], n, d * cs, lo, hi, tq);
			if (err < best) {
				best = err;
				bs = cs;
				memcpy(L + n * g, tq, sizeof(int) * (size_t)n);
			}
		}
		sc[g] = bs;
	}
	return dh;
}

static void quant_q2_k(const float *x, void *dst, int64_t n, const float *w)
{
	moe_block_q2_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		int L[MOE_QK_K], sc[16], mc[16];
		uint16_t dh, dminh;
		kquant_scale_min(x, w ? w + i * MOE_QK_K : NULL, 16, 3, 15, &dh, &dminh,
				 sc, mc, L);
		b->d = dh;
		b->dmin = dminh;
		for (int g = 0; g < 16; g++)
			b->scales[g] = (uint8_t)(sc[g] | mc[g] << 4);
		/* element 128h + 32j + r: field j of qs[32h + r] */
		memset(b->qs, 0, sizeof(b->qs));
		for (int e = 0; e < MOE_QK_K; e++)
			b->qs[32 * (e / 128) + e % 32] |= (uint8_t)(L[e] << (2 * ((e % 128) / 32)));
	}
}

static void quant_q3_k(const float *x, void *dst, int64_t n, const float *w)
{
	moe_block_q3_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		int L[MOE_QK_K], sc[16];
		b->d = kquant_scale(x, w ? w + i * MOE_QK_K : NULL, 16, -4, 3, -32, 31, sc, L);
		memset(b->scales, 0, sizeof(b->scales));
		for (int g = 0; g < 16; g++) {
			int v = sc[g] + 32;
			if (g < 8)
				b->scales[g] |= (uint8_t)(v & 0x0F);
			else
				b->scales[g - 8] |= (uint8_t)((v & 0x0F) << 4);
			b->scales[8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));
		}
		memset(b->qs, 0, sizeof(b->qs));
		memset(b->hmask, 0, sizeof(b->hmask));
		for (int e = 0; e < MOE_QK_K; e++) {
			int u = L[e] + 4, half = e / 128, j = (e % 128) / 32, r = e % 32;
			b->qs[32 * half + r] |= (uint8_t)((u & 3) << (2 * j));
			b->hmask[r] |= (uint8_t)((u >> 2) << (4 * half + j));
		}
	}
}

static void pack_k4_scales(uint8_t *scales, const int *ls, const int *lm)
{
	memset(scales, 0, MOE_K_SCALE_SIZE);
	for (int g = 0; g < 8; g++) {
		if (g < 4) {
			scales[g] |= (uint8_t)ls[g];
			scales[g + 4] |= (uint8_t)lm[g];
		} else {
			scales[g + 4] = (uint8_t)((ls[g] & 0x0F) | (lm[g] & 0x0F) << 4);
			scales[g - 4] |= (uint8_t)((ls[g] >> 4) << 6);
			scales[g] |= (uint8_t)((lm[g] >> 4) << 6);
		}
	}
}

/* Q4_K / Q5_K super-block: eight groups of 32 with 6-bit sub-scale and
 * sub-min codes; the low nibbles of elements 64p + l and 64p + 32 + l share
 * qs[32p + l]; Q5_K's fifth bits go to qh (bits 2p and 2p + 1 of qh[l]),
 * NULL for Q4_K.  dm[0], dm[1]: the f16 d and dmin (the blocks are packed:
 * the caller stores them). */
static void quant_k4_block(const float *x, const float *w, int nmax, uint16_t *dm,
			   uint8_t *scales, uint8_t *qs, uint8_t *qh)
{
	int L[MOE_QK_K], sc[8], mc[8];
	kquant_scale_min(x, w, 8, nmax, 63, &dm[0], &dm[1], sc, mc, L);
	pack_k4_scales(scales, sc, mc);
	if (qh)
		memset(qh, 0, MOE_QK_K / 8);
	for (int p = 0; p < 4; p++) {
		for (int l = 0; l < 32; l++) {
			int lo = L[64 * p + l], hi = L[64 * p + 32 + l];
			qs[32 * p + l] = (uint8_t)((lo & 0x0F) | (hi & 0x0F) << 4);
			if (qh)
				qh[l] |= (uint8_t)((lo >> 4) << (2 * p) | (hi >> 4) << (2 * p + 1));
		}
	}
}

static void quant_q4_k(const float *x, void *dst, int64_t n, const float *w)
{
	moe_block_q4_k *b = dst;
	uint16_t dm[2];
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		quant_k4_block(x, w ? w + i * MOE_QK_K : NULL, 15, dm, b->scales, b->qs, NULL);
		b->d = dm[0];
		b->dmin = dm[1];
	}
}

static void quant_q5_k(const float *x, void *dst, int64_t n, const float *w)
{
	moe_block_q5_k *b = dst;
	uint16_t dm[2];
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		quant_k4_block(x, w ? w + i * MOE_QK_K : NULL, 31, dm, b->scales, b->qs, b->qh);
		b->d = dm[0];
		b->dmin = dm[1];
	}
}

static void quant_q6_k(const float *x, void *dst, int64_t n, const float *w)
{
	moe_block_q6_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		int L[MOE_QK_K], sc[16];
		/* sub-scales in [-127, 127] (int8 without -128, symmetric) */
		b->d = kquant_scale(x, w ? w + i * MOE_QK_K : NULL, 16, -32, 31, -127, 127, sc, L);
		for (int g = 0; g < 16; g++)
			b->scales[g] = (int8_t)sc[g];
		uint8_t U[MOE_QK_K];
		for (int e = 0; e < MOE_QK_K; e++)
			U[e] = (uint8_t)(L[e] + 32);
		for (int half = 0; half < 2; half++) {
			const uint8_t *Lh = U + 128 * half;
			for (int l = 0; l < 32; l++) {
				b->ql[64 * half + l] = (uint8_t)((Lh[l] & 0x0F) | (Lh[64 + l] & 0x0F) << 4);
				b->ql[64 * half + 32 + l] =
					(uint8_t)((Lh[32 + l] & 0x0F) | (Lh[96 + l] & 0x0F) << 4);
				b->qh[32 * half + l] = (uint8_t)(Lh[l] >> 4 | (Lh[32 + l] >> 4) << 2 |
								 (Lh[64 + l] >> 4) << 4 |
								 (Lh[96 + l] >> 4) << 6);
			}
		}
	}
}

static void quant_iq4_xs(const float *x, void *dst, int64_t n, const float *w)
{
	moe_block_iq4_xs *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		int L[MOE_QK_K], sc[8];
		b->d = kquant_scale(x, w ? w + i * MOE_QK_K : NULL, 8, 0, 0, -32, 31, sc, L);
		b->scales_h = 0;
		memset(b->scales_l, 0, sizeof(b->scales_l));
		for (int g = 0; g < 8; g++) {
			int ls = sc[g] + 32;
			b->scales_l[g / 2] |= (uint8_t)((ls & 0x0F) << (4 * (g % 2)));
			b->scales_h |= (uint16_t)((ls >> 4) << (2 * g));
			for (int l = 0; l < 16; l++)
				b->qs[16 * g + l] = (uint8_t)(L[32 * g + l] | L[32 * g + 16 + l] << 4);
		}
	}
}

/* ---------------------------------------------------- plain float types */

static void quant_plain(int dtype, const float *x, void *dst, int64_t n)
{
	moe_type_get(dtype)->from_float(x, dst, n);
}
static void quant_f32(const float *x, void *dst, int64_t n, const float *w)
{
	(void)w;
	quant_plain(MOE_F32, x, dst, n);
}
static void quant_f16(const float *x, void *dst, int64_t n, const float *w)
{
	(void)w;
	quant_plain(MOE_F16, x, dst, n);
}
static void quant_bf16(const float *x, void *dst, int64_t n, const float *w)
{
	(void)w;
	quant_plain(MOE_BF16, x, dst, n);
}

moe_quantize_fn moe_quant_fn(int dtype)
{
	switch (dtype) {
	case MOE_F32: return quant_f32;
	case MOE_F16: return quant_f16;
	case MOE_BF16: return quant_bf16;
	case MOE_Q4_0: return quant_q4_0;
	case MOE_Q4_1: return quant_q4_1;
	case MOE_Q5_0: return quant_q5_0;
	case MOE_Q5_1: return quant_q5_1;
	case MOE_Q8_0: return quant_q8_0;
	case MOE_IQ4_NL: return quant_iq4_nl;
	case MOE_MXFP4: return quant_mxfp4;
	case MOE_Q2_K: return quant_q2_k;
	case MOE_Q3_K: return quant_q3_k;
	case MOE_Q4_K: return quant_q4_k;
	case MOE_Q5_K: return quant_q5_k;
	case MOE_Q6_K: return quant_q6_k;
	case MOE_IQ4_XS: return quant_iq4_xs;
	default: return NULL;
	}
}
