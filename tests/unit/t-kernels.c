/* t-kernels.c — the compute kernels against independent references.
 *
 * 1. Every generic dot product against a double-precision sum of quant.h's
 *    reference decoders: to_float(weights) . to_float(quantised activations).
 *    Both sides see the same quantised values, so only float rounding
 *    separates them.
 * 2. Every kernel of every ISA table this CPU supports (vec_dot and the
 *    tiled gemm) against the generic one.
 * 3. The activation quantisers of each ISA against the generic ones, and
 *    the row decoders (to_float) against quant.h's, bit for bit.
 * 4. moe_matmul (1, 3, 17 tokens; 1, 2, 3 threads; odd row counts; strided
 *    X and Y) against a plain loop of generic quantiser + generic vec_dot.
 *
 * Tolerances are relative to sum |w_i| |x_i| (the size of the terms, so
 * cancellation in the result cannot make a correct kernel fail):
 *   - generic vs double reference: 2e-5.  The integer block sums are exact;
 *     what remains is float accumulation over at most a few hundred blocks
 *     (or n/4 elements per partial sum for float weights).
 *   - SIMD vs generic: 2e-5 for every type.  The SIMD kernels compute the
 *     same integer sums; only the order of the float accumulation differs.
 *   A single wrong element among the n <= 1024 used here moves the result by
 *   about 1/n of the scale, far above these bounds.
 *
 * Run also with MOE_ISA=generic (t-kernels-generic.sh) so moe_kernels_get's
 * override is exercised; the table walk in 2.-4. covers every level anyway.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels.h"
#include "quant/blocks.h"
#include "tap.h"
#include "testrand.h"

#define TOL_REF 2e-5
#define TOL_SIMD 2e-5

/* Roughly normal, with an occasional outlier as real activations have. */
static float grand(void)
{
	float v = (frand() + frand() + frand() + frand()) * 0.87f;
	if (rnd32() % 97 == 0)
		v *= 12.0f;
	return v;
}

static const int weight_types[] = {
	MOE_F32, MOE_F16, MOE_BF16, MOE_Q8_0, MOE_Q4_0, MOE_Q4_1, MOE_Q5_0, MOE_Q5_1,
	MOE_Q2_K, MOE_Q3_K, MOE_Q4_K, MOE_Q5_K, MOE_Q6_K, MOE_IQ4_NL, MOE_IQ4_XS, MOE_MXFP4,
};
#define N_WEIGHT_TYPES (int)(sizeof(weight_types) / sizeof(weight_types[0]))

static size_t nbytes(int dtype, int64_t n)
{
	uint64_t nb = 0;
	if (moe_type_nbytes(dtype, (uint64_t)n, &nb, NULL) < 0)
		abort();
	return (size_t)nb;
}

static uint16_t rand_scale_f16(float lo, float hi, bool allow_negative)
{
	float v = lo + (hi - lo) * (frand() * 0.5f + 0.5f);
	if (allow_negative && (rnd32() & 1))
		v = -v;
	return moe_f32_to_f16(v);
}

#define SET16(blk, field, val)                                                 \
	do {                                                                   \
		uint16_t v_ = (val);                                           \
		memcpy((uint8_t *)(blk) + offsetof(__typeof__(*(blk)), field), &v_, 2); \
	} while (0)

/* Random bytes everywhere (every code, every scale bit pattern), then the
 * float fields set to sane values so sums stay finite. */
static void random_blocks(int dtype, void *dst, int64_t n)
{
	const moe_type_traits *t = moe_type_get(dtype);
	int64_t nb = n / t->block_size;
	uint8_t *p = dst;

	for (size_t i = 0; i < nb * t->type_size; i++)
		p[i] = (uint8_t)rnd32();
	for (int64_t i = 0; i < nb; i++) {
		uint8_t *b = p + i * t->type_size;
		switch (dtype) {
		case MOE_Q4_0:
			SET16((moe_block_q4_0 *)b, d, rand_scale_f16(0.01f, 0.2f, true));
			break;
		case MOE_Q5_0:
			SET16((moe_block_q5_0 *)b, d, rand_scale_f16(0.01f, 0.1f, true));
			break;
		case MOE_Q8_0:
			SET16((moe_block_q8_0 *)b, d, rand_scale_f16(0.001f, 0.02f, true));
			break;
		case MOE_IQ4_NL:
			SET16((moe_block_iq4_nl *)b, d, rand_scale_f16(0.001f, 0.02f, true));
			break;
		case MOE_Q4_1:
			SET16((moe_block_q4_1 *)b, d, rand_scale_f16(0.01f, 0.2f, false));
			SET16((moe_block_q4_1 *)b, m, rand_scale_f16(0.1f, 1.5f, true));
			break;
		case MOE_Q5_1:
			SET16((moe_block_q5_1 *)b, d, rand_scale_f16(0.01f, 0.1f, false));
			SET16((moe_block_q5_1 *)b, m, rand_scale_f16(0.1f, 1.5f, true));
			break;
		case MOE_Q2_K:
			SET16((moe_block_q2_k *)b, d, rand_scale_f16(0.01f, 0.1f, false));
			SET16((moe_block_q2_k *)b, dmin, rand_scale_f16(0.01f, 0.1f, false));
			break;
		case MOE_Q3_K:
			SET16((moe_block_q3_k *)b, d, rand_scale_f16(0.001f, 0.02f, true));
			break;
		case MOE_Q4_K:
			SET16((moe_block_q4_k *)b, d, rand_scale_f16(0.001f, 0.01f, false));
			SET16((moe_block_q4_k *)b, dmin, rand_scale_f16(0.001f, 0.02f, false));
			break;
		case MOE_Q5_K:
			SET16((moe_block_q5_k *)b, d, rand_scale_f16(0.0005f, 0.005f, false));
			SET16((moe_block_q5_k *)b, dmin, rand_scale_f16(0.001f, 0.02f, false));
			break;
		case MOE_Q6_K:
			SET16((moe_block_q6_k *)b, d, rand_scale_f16(0.0001f, 0.001f, true));
			break;
		case MOE_IQ4_XS:
			SET16((moe_block_iq4_xs *)b, d, rand_scale_f16(0.0001f, 0.001f, true));
			break;
		case MOE_MXFP4:
			((moe_block_mxfp4 *)b)->e = (uint8_t)(120 + rnd32() % 8);
			break;
		default: break;
		}
	}
}

/* Weights: the reference quantiser of random floats when quant.h has one
 * (mode 0), else random valid blocks. */
static void make_weights(int dtype, void *dst, int64_t n, int mode)
{
	const moe_type_traits *t = moe_type_get(dtype);

	if ((mode == 0 || !t->is_quantized) && t->from_float) {
		float *f = malloc((size_t)n * sizeof(float));
		for (int64_t i = 0; i < n; i++)
			f[i] = grand() * 0.1f;
		t->from_float(f, dst, n);
		free(f);
	} else {
		random_blocks(dtype, dst, n);
	}
}

static void make_floats(float *x, int64_t n, int kind)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = kind == 1 ? 0.0f : kind == 2 ? grand() * 1e-3f : grand();
}

/* Activations of weight type dtype: quantised with the generic quantiser,
 * or the floats themselves for float weights. */
static void *make_act(const moe_kernels *gen, int dtype, const float *x, int64_t n)
{
	int at = moe_type_get(dtype)->vec_dot_type;
	void *q = malloc(nbytes(at, n));
	if (at == MOE_F32)
		memcpy(q, x, (size_t)n * sizeof(float));
	else
		gen->quantize_row[at](x, q, n);
	return q;
}

/* Double reference and the scale sum |w||x| of one row pair. */
static double ref_dot(int dtype, const void *w, const void *xq, int64_t n, double *scale)
{
	int at = moe_type_get(dtype)->vec_dot_type;
	float *fw = malloc((size_t)n * sizeof(float)), *fx = malloc((size_t)n * sizeof(float));
	double s = 0.0, sc = 0.0;

	moe_type_get(dtype)->to_float(w, fw, n);
	moe_type_get(at)->to_float(xq, fx, n);
	for (int64_t i = 0; i < n; i++) {
		s += (double)fw[i] * fx[i];
		sc += fabs((double)fw[i] * fx[i]);
	}
	free(fw);
	free(fx);
	*scale = sc;
	return s;
}

static bool close_enough(double got, double want, double scale, double tol)
{
	return isfinite(got) && fabs(got - want) <= tol * scale + 1e-30;
}

static const moe_kernels *tables[MOE_ISA_COUNT];

/* SIMD against generic: TOL_SIMD, except where a level rounds the
 * activations (BF16 weights on avx512bf16: each x to bf16, a relative error
 * of at most 2^-9 per term, so at most 2^-9 of sum |w||x| in all, plus the
 * float accumulation).  Those kernels are also checked bit for bit against
 * an emulation of their arithmetic (test_bf16_emulation). */
#define TOL_BF16_ACT (0x1p-9 + 2e-5)
static double tol_simd(const moe_kernels *k, int dt)
{
	return k->isa == MOE_ISA_AVX512BF16 && dt == MOE_BF16 ? TOL_BF16_ACT : TOL_SIMD;
}
static int n_tables;

/* ------------------------------------------------------------ dot products */

/* Failures and the worst relative error of one comparison. */
typedef struct {
	int fails, cases;
	double worst;
} tally;

static void tally_add(tally *t, double got, double want, double scale, double tol,
		      const char *what)
{
	t->cases++;
	if (!close_enough(got, want, scale, tol)) {
		if (t->fails++ < 5)
			printf("# %s: %.9g, want %.9g (scale %g)\n", what, got, want, scale);
	} else if (scale > 0 && fabs(got - want) / scale > t->worst) {
		t->worst = fabs(got - want) / scale;
	}
}

/* One row pair of type dt and length n: generic against the reference, each
 * SIMD table against generic. */
static void vec_dot_case(int dt, int64_t n, int mode, int kind, tally *ref, tally simd[MOE_ISA_COUNT])
{
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	void *w = malloc(nbytes(dt, n));
	float *x = malloc((size_t)n * sizeof(float));
	char what[128];

	make_weights(dt, w, n, mode);
	make_floats(x, n, kind);
	void *xq = make_act(gen, dt, x, n);
	double scale, want = ref_dot(dt, w, xq, n, &scale);
	float got = NAN;
	gen->vec_dot[dt](n, &got, w, xq);
	snprintf(what, sizeof(what), "%s n=%lld mode %d kind %d generic", moe_type_name(dt),
		 (long long)n, mode, kind);
	tally_add(ref, got, want, scale, TOL_REF, what);
	for (int k = 1; k < n_tables; k++) {
		float s = NAN;
		tables[k]->vec_dot[dt](n, &s, w, xq);
		snprintf(what, sizeof(what), "%s n=%lld mode %d kind %d %s", moe_type_name(dt),
			 (long long)n, mode, kind, moe_isa_name(tables[k]->isa));
		tally_add(&simd[k], s, got, scale, tol_simd(tables[k], dt), what);
	}
	free(w);
	free(x);
	free(xq);
}

static void test_vec_dot(void)
{
	for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
		int dt = weight_types[ti];
		const moe_type_traits *t = moe_type_get(dt);
		tally ref = {0}, simd[MOE_ISA_COUNT] = {{0}};
		/* One block, an odd number of blocks (SIMD steps take two),
		 * and a long row; float types get lengths with SIMD tails. */
		int64_t bs = t->block_size;
		const int64_t sizes[3] = {bs == 1 ? 37 : bs, bs == 1 ? 1000 : 3 * bs, 1024};

		for (int si = 0; si < 3; si++)
			for (int mode = 0; mode < 2; mode++)
				for (int kind = 0; kind < 3; kind++)
					vec_dot_case(dt, sizes[si], mode, kind, &ref, simd);
		ok(ref.fails == 0,
		   "%s: generic vec_dot matches the reference (%d cases, worst %.2g)", t->name,
		   ref.cases, ref.worst);
		for (int k = 1; k < n_tables; k++)
			ok(simd[k].fails == 0, "%s: %s vec_dot matches generic (worst %.2g)",
			   t->name, moe_isa_name(tables[k]->isa), simd[k].worst);
	}
}

/* The tiled kernels for every tile shape and remainder, with odd strides,
 * for a row of n elements, against the generic vec_dot. */
static void gemm_case(const moe_kernels *k, int dt, int64_t n)
{
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	const moe_type_traits *t = moe_type_get(dt);
	/* Rows: every count to 18 and a few past two 16-row tiles (the
	 * prefill GEMMs go 8 or 16 rows at a time). */
	const int at = t->vec_dot_type, maxr = 35, maxt = 10;
	static const int nrs[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
				  12, 13, 14, 15, 16, 17, 18, 31, 32, 33, 35};
	/* Odd strides: weights may sit anywhere; float activations are floats. */
	const size_t wb = nbytes(dt, n) + 7, xb = nbytes(at, n) + (at == MOE_F32 ? 4 : 3);
	const size_t lds = maxr + 2;
	uint8_t *w = malloc(wb * maxr), *xq = malloc(xb * maxt);
	float *x = malloc((size_t)n * sizeof(float)), *s = malloc(sizeof(float) * lds * maxt);
	float *want = malloc(sizeof(float) * maxr * maxt);
	double *scale = malloc(sizeof(double) * maxr * maxt);
	tally tl = {0};
	int outside = 0;

	for (int r = 0; r < maxr; r++)
		make_weights(dt, w + r * wb, n, r & 1);
	for (int i = 0; i < maxt; i++) {
		make_floats(x, n, i == 3 ? 1 : 0);
		void *q = make_act(gen, dt, x, n);
		memcpy(xq + i * xb, q, nbytes(at, n));
		free(q);
		for (int r = 0; r < maxr; r++) {
			gen->vec_dot[dt](n, &want[i * maxr + r], w + r * wb, xq + i * xb);
			ref_dot(dt, w + r * wb, xq + i * xb, n, &scale[i * maxr + r]);
		}
	}
	/* The table's own vec_dot: the tiled kernel must give the same bits
	 * (batch invariance, whatever the tile shape). */
	float *own = malloc(sizeof(float) * maxr * maxt);
	int differ = 0;
	for (int i = 0; i < maxt; i++)
		for (int r = 0; r < maxr; r++)
			k->vec_dot[dt](n, &own[i * maxr + r], w + r * wb, xq + i * xb);
	for (size_t ri = 0; ri < sizeof(nrs) / sizeof(nrs[0]); ri++) {
		const int nr = nrs[ri];
		for (int nt = 0; nt <= maxt; nt++) {
			for (size_t i = 0; i < lds * maxt; i++)
				s[i] = -12345.0f;
			k->gemm[dt](n, nr, nt, w, wb, xq, xb, s, lds);
			for (int i = 0; i < maxt; i++) {
				for (int r = 0; r < (int)lds; r++) {
					float got = s[i * lds + r];
					if (i >= nt || r >= nr) {
						outside += got != -12345.0f;
						continue;
					}
					differ += memcmp(&got, &own[i * maxr + r], sizeof got) != 0;
					char what[96];
					snprintf(what, sizeof(what), "%s %s nr=%d nt=%d r=%d t=%d",
						 moe_isa_name(k->isa), t->name, nr, nt, r, i);
					tally_add(&tl, got, want[i * maxr + r], scale[i * maxr + r],
						  tol_simd(k, dt), what);
				}
			}
		}
	}
	ok(tl.fails == 0 && outside == 0,
	   "%s: %s gemm matches generic vec_dot for every tile shape, n=%lld (%d values, "
	   "worst %.2g, %d written outside)",
	   t->name, moe_isa_name(k->isa), (long long)n, tl.cases, tl.worst, outside);
	ok(differ == 0, "%s: %s gemm equals its own vec_dot bit for bit, n=%lld (%d differ)",
	   t->name, moe_isa_name(k->isa), (long long)n, differ);
	free(own);
	free(w);
	free(xq);
	free(x);
	free(s);
	free(want);
	free(scale);
}

static void test_gemm(void)
{
	/* Row lengths in blocks: the 32-element kernels go four blocks at a
	 * time in runs of 16, so 1, 2, 3 and 35 (two runs and three) cover
	 * every partial step, 18 a run and two; 7 and 13 end a run inside its
	 * second and fourth quad (AVX-512 Q8_0 picks its scales four blocks
	 * at a time); K-quants: one super-block and nine (more than one
	 * unpacked chunk of the prefill GEMM). */
	static const int64_t b32_blocks[] = {1, 2, 3, 7, 13, 18, 35}, kq_blocks[] = {1, 9};
	for (int k = 0; k < n_tables; k++) {
		for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
			const int dt = weight_types[ti];
			const int64_t bs = moe_type_get(dt)->block_size;
			if (!tables[k]->gemm[dt])
				continue;
			if (bs == 1) {
				gemm_case(tables[k], dt, 150);
				continue;
			}
			const int64_t *nbl = bs == MOE_QK_K ? kq_blocks : b32_blocks;
			const size_t count = bs == MOE_QK_K ? 2 : 7;
			for (size_t i = 0; i < count; i++)
				gemm_case(tables[k], dt, nbl[i] * bs);
		}
	}
}

/* The avxvnni level is the avx2 kernel body with vpdpbusd for its dot
 * product step, which never differs from vpmaddubsw + vpmaddwd where the
 * latter cannot saturate: every type's products (decode and tiles) must be
 * the avx2 level's bits. */
static void test_avxvnni_same(void)
{
	const moe_kernels *a2 = moe_kernels_for(MOE_ISA_AVX2), *vn = moe_kernels_for(MOE_ISA_AVXVNNI);
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	if (!a2 || !vn)
		return;
	const int nr = 9, nt = 7;
	for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
		const int dt = weight_types[ti], at = moe_type_get(dt)->vec_dot_type;
		const int64_t bs = moe_type_get(dt)->block_size, n = 9 * (bs > 1 ? bs : 32);
		const size_t wb = nbytes(dt, n), xb = nbytes(at, n);
		uint8_t *w = malloc(wb * nr), *xq = malloc(xb * nt);
		float *x = malloc(sizeof(float) * (size_t)n), s[2][9 * 7], d[2][9 * 7];
		for (int r = 0; r < nr; r++)
			make_weights(dt, w + r * wb, n, r & 1);
		for (int t = 0; t < nt; t++) {
			make_floats(x, n, t == 2);
			void *q = make_act(gen, dt, x, n);
			memcpy(xq + t * xb, q, xb);
			free(q);
		}
		const moe_kernels *k2[2] = {a2, vn};
		for (int j = 0; j < 2; j++) {
			if (k2[j]->gemm[dt])
				k2[j]->gemm[dt](n, nr, nt, w, wb, xq, xb, s[j], nr);
			for (int t = 0; t < nt; t++)
				for (int r = 0; r < nr; r++)
					k2[j]->vec_dot[dt](n, &d[j][t * nr + r], w + r * wb, xq + t * xb);
		}
		bool same = !memcmp(d[0], d[1], sizeof d[0]) &&
			    (!a2->gemm[dt] || !memcmp(s[0], s[1], sizeof s[0]));
		ok(same && !a2->gemm[dt] == !vn->gemm[dt], "%s: avxvnni gives avx2's bits",
		   moe_type_name(dt));
		free(w);
		free(xq);
		free(x);
	}
}

/* ---------------------------------------------------------------- quantisers */

typedef struct {
	int scale, code, off_by_one, sum;
} qdiff;

/* Q8_K blocks a (generic) and b (SIMD): the f32 scale, the codes, and b's
 * bsums against b's own codes. */
static void cmp_q8_k(const uint8_t *a, const uint8_t *b, int64_t n, qdiff *q)
{
	const moe_block_q8_k *ba = (const void *)a, *bb = (const void *)b;
	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		q->scale += fabsf(ba[i].d - bb[i].d) > 1e-6f * fabsf(ba[i].d);
		for (int j = 0; j < MOE_QK_K; j++) {
			int dlt = abs(ba[i].qs[j] - bb[i].qs[j]);
			q->code += dlt > 1;
			q->off_by_one += dlt == 1;
		}
		for (int g = 0; g < 16; g++) {
			int sum = 0;
			for (int j = 0; j < 16; j++)
				sum += bb[i].qs[16 * g + j];
			q->sum += sum != bb[i].bsums[g];
		}
	}
}

/* Q8_0 / Q8_1 blocks: the f16 scale bit for bit, the codes, and Q8_1's
 * s = f16(d * sum): the same bits as generic when the codes agree, else
 * within the two f16 roundings of d * sum. */
static void cmp_q8_01(int at, const uint8_t *a, const uint8_t *b, int64_t n, qdiff *q)
{
	size_t bs = at == MOE_Q8_0 ? sizeof(moe_block_q8_0) : sizeof(moe_block_q8_1);
	size_t qoff = at == MOE_Q8_0 ? offsetof(moe_block_q8_0, qs) : offsetof(moe_block_q8_1, qs);
	for (int64_t i = 0; i < n / MOE_QK; i++) {
		const uint8_t *pa = a + i * bs, *pb = b + i * bs;
		int sum = 0, same = 1;
		q->scale += memcmp(pa, pb, 2) != 0;
		for (int j = 0; j < MOE_QK; j++) {
			int dlt = abs((int8_t)pa[qoff + j] - (int8_t)pb[qoff + j]);
			q->code += dlt > 1;
			q->off_by_one += dlt == 1;
			same &= dlt == 0;
			sum += (int8_t)pb[qoff + j];
		}
		if (at != MOE_Q8_1)
			continue;
		if (same) {
			q->sum += memcmp(pa + 2, pb + 2, 2) != 0;
		} else {
			uint16_t d, hs;
			memcpy(&d, pb, 2);
			memcpy(&hs, pb + 2, 2);
			float want = sum * moe_f16_to_f32(d), got = moe_f16_to_f32(hs);
			q->sum += fabsf(got - want) > 2e-3f * fabsf(want) + 1e-7f;
		}
	}
}

static void test_quantizers(void)
{
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	static const int act_types[] = {MOE_Q8_0, MOE_Q8_1, MOE_Q8_K};
	const int64_t n = 1024;
	float *x = malloc(n * sizeof(float));

	for (int k = 1; k < n_tables; k++) {
		for (int ai = 0; ai < 3; ai++) {
			int at = act_types[ai];
			moe_quantize_row_fn q = tables[k]->quantize_row[at];
			if (!q || q == gen->quantize_row[at])
				continue;
			size_t nb = nbytes(at, n);
			uint8_t *a = malloc(nb), *b = malloc(nb);
			qdiff d = {0};
			for (int kind = 0; kind < 4; kind++) {
				make_floats(x, n, kind == 3 ? 0 : kind);
				if (kind == 3) /* a zero block among large ones */
					memset(x + 256, 0, 256 * sizeof(float));
				gen->quantize_row[at](x, a, n);
				memset(b, 0x55, nb);
				q(x, b, n);
				if (at == MOE_Q8_K)
					cmp_q8_k(a, b, n, &d);
				else
					cmp_q8_01(at, a, b, n, &d);
			}
			ok(d.scale == 0 && d.code == 0 && d.sum == 0,
			   "%s: %s quantiser matches generic (scales %d, codes off by >1 %d, "
			   "sums %d; %d codes off by 1)",
			   moe_type_name(at), moe_isa_name(tables[k]->isa), d.scale, d.code, d.sum,
			   d.off_by_one);
			free(a);
			free(b);
		}
	}
	free(x);
}

/* ------------------------------------------------------------ row decoders */

/* Every table's to_float against quant.h's reference, bit for bit (the
 * conversions are exact), on lengths that leave SIMD tails. */
static void test_to_float(void)
{
	static const int64_t lens[] = {1, 7, 16, 37, 1000};

	for (int k = 0; k < n_tables; k++) {
		for (int dt = 0; dt < MOE_DTYPE_MAX; dt++) {
			const moe_type_traits *t = moe_type_get(dt);
			if (!t || !t->from_float || t->block_size != 1)
				continue;
			int bad = 0;
			if (!tables[k]->to_float[dt]) {
				ok(0, "%s: %s has a to_float", t->name,
				   moe_isa_name(tables[k]->isa));
				continue;
			}
			for (int li = 0; li < 5; li++) {
				int64_t n = lens[li];
				float *f = malloc(n * sizeof(float));
				float *a = malloc(n * sizeof(float));
				float *b = malloc((n + 1) * sizeof(float));
				void *enc = malloc(nbytes(dt, n));
				for (int64_t i = 0; i < n; i++)
					f[i] = i % 5 == 4 ? grand() * 1e-6f : grand() * 100.0f;
				t->from_float(f, enc, n);
				t->to_float(enc, a, n);
				b[n] = 12345.0f;
				tables[k]->to_float[dt](enc, b, n);
				bad += memcmp(a, b, n * sizeof(float)) != 0 || b[n] != 12345.0f;
				free(f);
				free(a);
				free(b);
				free(enc);
			}
			ok(bad == 0, "%s: %s to_float equals the reference", t->name,
			   moe_isa_name(tables[k]->isa));
		}
	}
}

/* ------------------------------------------------------------------ matmul */

/* One weight type through one table: every token count, pool and row
 * count, with strided X and Y (Y's padding must stay untouched). */
static void matmul_case(const moe_kernels *k, int dt, moe_pool *pools[3], const int threads[3])
{
	static const int tokens[] = {1, 3, 17}, row_counts[] = {37, 5};
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	const moe_type_traits *t = moe_type_get(dt);
	const int64_t cols = 512, ldx = cols + 5;
	const int max_rows = 37, max_tok = 17, ldy = max_rows + 3;
	size_t wb = nbytes(dt, cols), sb = moe_matmul_scratch(dt, cols, max_tok);
	uint8_t *W = malloc(wb * max_rows);
	float *X = malloc(sizeof(float) * ldx * max_tok);
	float *Y = malloc(sizeof(float) * ldy * max_tok);
	float *want = malloc(sizeof(float) * max_rows * max_tok);
	double *scale = malloc(sizeof(double) * max_rows * max_tok);
	void *scratch = malloc(sb ? sb : 1);
	tally tl = {0};
	int outside = 0, runs = 0;

	for (int r = 0; r < max_rows; r++)
		make_weights(dt, W + r * wb, cols, r % 3 == 0);
	for (int i = 0; i < max_tok; i++) {
		make_floats(X + i * ldx, cols, i == 2 ? 1 : 0);
		void *xq = make_act(gen, dt, X + i * ldx, cols);
		for (int r = 0; r < max_rows; r++) {
			gen->vec_dot[dt](cols, &want[i * max_rows + r], W + r * wb, xq);
			ref_dot(dt, W + r * wb, xq, cols, &scale[i * max_rows + r]);
		}
		free(xq);
	}
	for (int nti = 0; nti < 3; nti++) {
		for (int thi = 0; thi < 3; thi++) {
			for (int ri = 0; ri < 2; ri++) {
				int nt = tokens[nti], rows = row_counts[ri];
				for (size_t i = 0; i < (size_t)ldy * max_tok; i++)
					Y[i] = -777.0f;
				moe_matmul(k, pools[thi], dt, W, rows, cols, X, ldx, nt, Y, ldy,
					   scratch);
				runs++;
				for (int i = 0; i < max_tok; i++) {
					for (int r = 0; r < ldy; r++) {
						float got = Y[i * ldy + r];
						if (i >= nt || r >= rows) {
							outside += got != -777.0f;
							continue;
						}
						char what[96];
						snprintf(what, sizeof(what),
							 "%s %s t=%d r=%d (%d tok, %d thr, "
							 "%d rows)",
							 moe_isa_name(k->isa), t->name, i, r, nt,
							 threads[thi], rows);
						tally_add(&tl, got, want[i * max_rows + r],
							  scale[i * max_rows + r], tol_simd(k, dt),
							  what);
					}
				}
			}
		}
	}
	ok(tl.fails == 0 && outside == 0,
	   "%s: %s moe_matmul matches the plain loop (%d runs, act %s, %d written outside)",
	   t->name, moe_isa_name(k->isa), runs, moe_type_name(t->vec_dot_type), outside);
	free(W);
	free(X);
	free(Y);
	free(want);
	free(scale);
	free(scratch);
}

/* Batch invariance (the engine's guarantee): a token's row of Y is bit for
 * bit the same whether moe_matmul computes it alone (decode), in a batch of
 * any size (prefill, the tiled kernels), at any position in the batch, or
 * with any number of threads. */
static void invariance_case(const moe_kernels *k, int dt, moe_pool *pools[3])
{
	static const int row_counts[] = {37, 131};
	static const struct { int first, count; } batches[] = {{0, 70}, {5, 23}, {1, 2}, {40, 17}};
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	const moe_type_traits *t = moe_type_get(dt);
	const int64_t cols = 2304, ldx = cols + 3; /* 9 super-blocks: more than one unpacked chunk */
	const int max_rows = 131, max_tok = 70;
	size_t wb = nbytes(dt, cols), sb = moe_matmul_scratch(dt, cols, max_tok);
	uint8_t *W = malloc(wb * max_rows);
	float *X = malloc(sizeof(float) * ldx * max_tok);
	float *Y = malloc(sizeof(float) * max_rows * max_tok);
	float *one = malloc(sizeof(float) * max_rows * max_tok);
	void *scratch = malloc(sb ? sb : 1);
	int diffs = 0, runs = 0;

	(void)gen;
	for (int r = 0; r < max_rows; r++)
		make_weights(dt, W + r * wb, cols, r % 3 == 0);
	for (int i = 0; i < max_tok; i++)
		make_floats(X + i * ldx, cols, i % 7 == 2 ? 1 : 0);
	for (int ri = 0; ri < 2; ri++) {
		int rows = row_counts[ri];
		for (int i = 0; i < max_tok; i++)
			moe_matmul(k, NULL, dt, W, rows, cols, X + i * ldx, ldx, 1,
				   one + (size_t)i * max_rows, max_rows, scratch);
		for (int bi = 0; bi < 4; bi++) {
			for (int thi = 0; thi < 3; thi++) {
				int first = batches[bi].first, nt = batches[bi].count;
				moe_matmul(k, pools[thi], dt, W, rows, cols, X + first * ldx, ldx, nt,
					   Y, max_rows, scratch);
				runs++;
				for (int i = 0; i < nt; i++)
					diffs += memcmp(Y + (size_t)i * max_rows,
							one + (size_t)(first + i) * max_rows,
							sizeof(float) * rows) != 0;
			}
		}
	}
	ok(diffs == 0, "%s: %s batched results bit-identical to single tokens (%d runs, %d rows differ)",
	   t->name, moe_isa_name(k->isa), runs, diffs);
	free(W);
	free(X);
	free(Y);
	free(one);
	free(scratch);
}

static void test_invariance(void)
{
	static const int threads[] = {1, 2, 3};
	moe_pool *pools[3];
	for (int i = 0; i < 3; i++)
		if (moe_pool_create(&pools[i], threads[i], NULL) < 0)
			abort();
	for (int k = 0; k < n_tables; k++)
		for (int ti = 0; ti < N_WEIGHT_TYPES; ti++)
			invariance_case(tables[k], weight_types[ti], pools);
	for (int i = 0; i < 3; i++)
		moe_pool_free(pools[i]);
}

/* The level table: parents below their children with a subset of their
 * features, and a CPU lacking any feature a level's file is compiled for
 * never gets that level (the AVX-512 kernels use VNNI: a CPU with AVX-512
 * and no VNNI gets AVX2; AVX-VNNI is a branch of its own under AVX2, and a
 * CPU with both AVX-512 and AVX-VNNI gets AVX-512). */
static void test_isa_table(void)
{
	const unsigned a512 = moe_isa_info_get(MOE_ISA_AVX512)->features;
	const unsigned a2 = moe_isa_info_get(MOE_ISA_AVX2)->features;
	bool sane = true;
	for (int i = 0; i < MOE_ISA_COUNT; i++) {
		const moe_isa_info *in = moe_isa_info_get((moe_isa)i);
		sane = sane && in && (int)in->isa == i && in->parent < i;
		if (in && in->parent >= 0)
			sane = sane && (moe_isa_info_get((moe_isa)in->parent)->features &
					~in->features) == 0;
	}
	ok(sane && !moe_isa_info_get(MOE_ISA_COUNT), "level table: parents below, features nested");
	const unsigned abf = moe_isa_info_get(MOE_ISA_AVX512BF16)->features;
	is_int(moe_cpu_isa_for(abf), MOE_ISA_AVX512BF16, "avx512 and avx512bf16: avx512bf16");
	is_int(moe_cpu_isa_for(abf | MOE_CPU_AVXVNNI), MOE_ISA_AVX512BF16,
	       "avx512, avx512bf16 and avx-vnni: avx512bf16");
	is_int(moe_cpu_isa_for(a512), MOE_ISA_AVX512, "all avx512 features: avx512");
	is_int(moe_cpu_isa_for(abf & ~MOE_CPU_AVX512VNNI), MOE_ISA_AVX2,
	       "avx512bf16 without vnni: avx2");
	is_int(moe_cpu_isa_for(a512 & ~MOE_CPU_AVX512VNNI), MOE_ISA_AVX2,
	       "avx512 without vnni: avx2");
	is_int(moe_cpu_isa_for(a512 & ~MOE_CPU_AVX512BW), MOE_ISA_AVX2, "avx512 without bw: avx2");
	is_int(moe_cpu_isa_for(a2 & ~MOE_CPU_F16C), MOE_ISA_GENERIC, "avx2 without f16c: generic");
	is_int(moe_cpu_isa_for(a2 | MOE_CPU_AVXVNNI), MOE_ISA_AVXVNNI, "avx2 and avx-vnni: avxvnni");
	is_int(moe_cpu_isa_for(a512 | MOE_CPU_AVXVNNI), MOE_ISA_AVX512,
	       "avx512 and avx-vnni: avx512");
	is_int(moe_cpu_isa_for((a512 & ~MOE_CPU_AVX512VNNI) | MOE_CPU_AVXVNNI), MOE_ISA_AVXVNNI,
	       "avx512 without its vnni, with avx-vnni: avxvnni");
	is_int(moe_cpu_isa_for((a2 & ~MOE_CPU_FMA) | MOE_CPU_AVXVNNI), MOE_ISA_GENERIC,
	       "avx-vnni without fma: generic");
	is_int(moe_cpu_isa_for(0), MOE_ISA_GENERIC, "no features: generic");
	is_int(moe_cpu_feature_parse("avx512bf16, avx512vnni,bogus"),
	       MOE_CPU_AVX512BF16 | MOE_CPU_AVX512VNNI, "feature list parsed");
	/* Whatever MOE_CPU_DISABLE hides (t-kernels-isa.sh), no table needs it. */
	unsigned f = moe_cpu_features();
	bool fits = true;
	for (int i = 0; i < MOE_ISA_COUNT; i++)
		if (moe_kernels_for((moe_isa)i))
			fits = fits && (moe_isa_info_get((moe_isa)i)->features & ~f) == 0;
	ok(fits, "every built table's features are present (cpu %#x)", f);
	/* configure leaves out levels the compiler cannot build; no table,
	 * and moe_kernels_get, may name one. */
	bool only_built = moe_isa_built(moe_kernels_get()->isa);
	for (int i = 0; i < MOE_ISA_COUNT; i++)
		if (moe_kernels_for((moe_isa)i))
			only_built = only_built && moe_isa_built((moe_isa)i);
	ok(only_built, "tables only for the levels this build has");
	const char *dis = getenv("MOE_CPU_DISABLE");
	if (dis && *dis)
		ok((f & moe_cpu_feature_parse(dis)) == 0, "MOE_CPU_DISABLE=%s hides them", dis);
	const char *want = getenv("MOE_TEST_EXPECT_ISA");
	if (want && *want)
		is_str(moe_isa_name(moe_kernels_get()->isa), want, "kernels chosen: %s", want);
}

static void test_matmul(void)
{
	static const int threads[] = {1, 2, 3};
	moe_pool *pools[3] = {NULL};
	moe_error e;

	for (int i = 1; i < 3; i++) {
		if (moe_pool_create(&pools[i], threads[i], &e) < 0) {
			ok(0, "create a pool of %d threads: %s", threads[i], e.msg);
			return;
		}
	}
	for (int k = 0; k < n_tables; k++)
		for (int ti = 0; ti < N_WEIGHT_TYPES; ti++)
			matmul_case(tables[k], weight_types[ti], pools, threads);
	for (int i = 1; i < 3; i++)
		moe_pool_free(pools[i]);
}

/* ------------------------------------------------------ dispatch and checks */

static void test_dispatch(void)
{
	const moe_kernels *k = moe_kernels_get();
	const char *req = getenv("MOE_ISA");
	moe_error e;

	ok(k != NULL && moe_kernels_for(MOE_ISA_GENERIC) != NULL, "tables exist");
	ok(k->isa <= moe_cpu_isa(), "chosen table (%s) not above moe_cpu_isa (%s)",
	   moe_isa_name(k->isa), moe_isa_name(moe_cpu_isa()));
	if (req && !strcasecmp(req, "generic"))
		is_int(k->isa, MOE_ISA_GENERIC, "MOE_ISA=generic selects the generic kernels");
	for (int i = 0; i < MOE_ISA_COUNT; i++) {
		const moe_kernels *t = moe_kernels_for((moe_isa)i);
		if (t)
			is_int(t->isa, i, "moe_kernels_for(%s) has that isa",
			       moe_isa_name((moe_isa)i));
	}
	ok(moe_kernels_for((moe_isa)7) == NULL, "unknown isa level gives NULL");

	for (int ti = 0; ti < N_WEIGHT_TYPES; ti++) {
		int dt = weight_types[ti];
		bool all = true;
		for (int i = 0; i < n_tables; i++)
			all = all && tables[i]->vec_dot[dt] &&
			      moe_kernels_check(tables[i], dt, 1024, NULL) == 0;
		ok(all, "%s: every table has a kernel", moe_type_name(dt));
	}
	is_int(moe_kernels_check(k, MOE_Q4_K, 100, &e), MOE_EFORMAT, "q4_k with 100 cols rejected");
	ok(strstr(e.msg, "q4_k") && strstr(e.msg, "100"), "message names type and cols: %s", e.msg);
	is_int(moe_kernels_check(k, MOE_Q4_0, 0, NULL), MOE_EFORMAT, "0 cols rejected");
	is_int(moe_kernels_check(k, MOE_I32, 64, NULL), MOE_EUNSUPPORTED, "i32 weights rejected");
	is_int(moe_kernels_check(k, 4, 64, NULL), MOE_EUNSUPPORTED, "unknown id 4 rejected");

	/* Hand-computed sizes: Q8_K block 292 bytes per 256, Q8_0 34 per 32. */
	is_int(moe_matmul_scratch(MOE_Q4_K, 512, 3), 3 * 2 * 292, "scratch q4_k 512 x 3");
	is_int(moe_matmul_scratch(MOE_Q4_0, 64, 5), 5 * 2 * 34, "scratch q4_0 64 x 5");
	is_int(moe_matmul_scratch(MOE_Q4_1, 64, 1), 2 * 36, "scratch q4_1 uses q8_1");
	is_int(moe_matmul_scratch(MOE_F16, 4096, 7), 0, "no scratch for f16");
	ok(moe_matmul_scratch(4, 64, 1) == SIZE_MAX, "unknown type: SIZE_MAX");
	ok(moe_matmul_scratch(MOE_Q8_0, (int64_t)1 << 60, (int64_t)1 << 20) == SIZE_MAX,
	   "overflow: SIZE_MAX");
}

/* A hand-computed product: Q8_0 weights all +2 with d = 0.5 (value 1.0);
 * activations 1 except x[5] = 127 and x[37] = -127, so each block has
 * amax 127, d = 1 and codes equal to the values: the dot is the sum, 62. */
static void test_golden(void)
{
	moe_block_q8_0 w[2], xq[2];
	float x[64];

	for (int i = 0; i < 2; i++) {
		w[i].d = moe_f32_to_f16(0.5f);
		memset(w[i].qs, 2, sizeof(w[i].qs));
	}
	for (int j = 0; j < 64; j++)
		x[j] = 1.0f;
	x[5] = 127.0f;
	x[37] = -127.0f;
	for (int k = 0; k < n_tables; k++) {
		float s = 0;
		tables[k]->quantize_row[MOE_Q8_0](x, xq, 64);
		tables[k]->vec_dot[MOE_Q8_0](64, &s, w, xq);
		is_near(s, 62.0, 1e-6, "%s: hand-computed q8_0 product",
			moe_isa_name(tables[k]->isa));
	}
}

/* ------------------------------------------------ bf16 arithmetic, emulated */

/* The avx512bf16 level's BF16 kernels against a plain C model of the
 * arithmetic kernels/avx512bf16.c's header describes, bit for bit: written
 * here from the Intel SDM's VCVTNE2PS2BF16 and VDPBF16PS pseudocode, not
 * from the kernel. */

static float f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t bits_of_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* convert_fp32_to_bfloat16: zeros and denormals to a signed zero, NaN
 * quieted, Inf kept, else round to nearest even. */
static uint16_t emu_bf16_round(float f)
{
	uint32_t u = bits_of_f32(f);
	if ((u & 0x7F800000u) == 0)
		return (uint16_t)((u >> 16) & 0x8000);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x40);
	if ((u & 0x7FFFFFFFu) == 0x7F800000u)
		return (uint16_t)(u >> 16);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* A float with a denormal made a zero of its sign (DAZ in, FTZ out). */
static float emu_flush(float f)
{
	return fpclassify(f) == FP_SUBNORMAL ? copysignf(0.0f, f) : f;
}

/* srcdest += make_fp32(a) * make_fp32(b): one rounding (the product is
 * exact), denormals flushed on the way in and out. */
static float emu_dp_step(float acc, uint16_t a, uint16_t b)
{
	float fa = emu_flush(f32_of_bits((uint32_t)a << 16));
	float fb = emu_flush(f32_of_bits((uint32_t)b << 16));
	return emu_flush(fmaf(fa, fb, emu_flush(acc)));
}

static float emu_bf16_dot(int64_t n, const uint16_t *w, const float *x)
{
	float lane[16];
	for (int j = 0; j < 16; j++)
		lane[j] = 0.0f;
	for (int64_t i = 0; i < n; i += 32) {
		for (int j = 0; j < 16; j++) {
			for (int e = 1; e >= 0; e--) { /* element 2j+1, then 2j */
				int64_t k = i + 2 * j + e;
				uint16_t wk = k < n ? w[k] : 0, xk = k < n ? emu_bf16_round(x[k]) : 0;
				lane[j] = emu_dp_step(lane[j], wk, xk);
			}
		}
	}
	for (int h = 8; h >= 1; h /= 2)
		for (int j = 0; j < h; j++)
			lane[j] = lane[j] + lane[j + h];
	return lane[0];
}

/* Values that exercise the edges.  kind 0: ordinary; 1: bf16 denormal
 * weights, float denormal activations, signed zeros, large magnitudes next
 * to small ones (rounding in the accumulation); 2: tiny values whose
 * products and sums are denormal (flushed) or just above. */
static void bf16_edge_values(uint16_t *w, float *x, int64_t n, int kind)
{
	for (int64_t i = 0; i < n; i++) {
		float wf = grand() * 0.1f, xf = grand();
		uint32_t pick = rnd32() % 16;
		if (kind == 1) {
			if (pick == 1)
				xf = f32_of_bits(rnd32() & 0x807FFFFFu); /* float denormal */
			else if (pick == 2)
				xf = -0.0f;
			else if (pick == 3)
				xf *= 3e4f;
		} else if (kind == 2) {
			wf *= 1e-19f, xf *= 1e-19f; /* products near 1e-40 */
		}
		w[i] = emu_bf16_round(wf);
		/* A bf16 denormal weight (or zero), and in kind 1 an activation
		 * large enough for its product to matter were it not read as 0. */
		if (kind >= 1 && pick == 0) {
			w[i] = (uint16_t)(rnd32() & 0x807F);
			if (kind == 1)
				xf = xf * 1e36f;
		}
		x[i] = xf;
	}
}

static void test_bf16_emulation(void)
{
	const moe_kernels *k = moe_kernels_for(MOE_ISA_AVX512BF16);
	if (!k) {
		tap_diag("no avx512bf16 on this CPU: its emulation checks not run");
		return;
	}
	/* Every tail length of a 32-element chunk, several chunks, long rows. */
	enum { MAXN = 1100, NR = 9, NT = 53 };
	uint16_t *w = malloc(sizeof(uint16_t) * MAXN * NR);
	float *x = malloc(sizeof(float) * MAXN * NT), *s = malloc(sizeof(float) * NR * NT);
	int dot_cases = 0, dot_differ = 0, gemm_cases = 0, gemm_differ = 0;

	for (int64_t n = 1; n <= MAXN; n += n < 70 ? 1 : 257) {
		for (int kind = 0; kind < 3; kind++) {
			bf16_edge_values(w, x, n, kind);
			float want = emu_bf16_dot(n, w, x), got = NAN;
			k->vec_dot[MOE_BF16](n, &got, w, x);
			dot_cases++;
			if (bits_of_f32(got) != bits_of_f32(want) && dot_differ++ < 5)
				printf("# bf16 vec_dot n=%lld kind %d: %a, emulated %a\n", (long long)n,
				       kind, got, want);
		}
	}
	/* The gemm over more tokens than one rounding chunk, ragged rows. */
	const int64_t lens[] = {31, 33, 1000};
	for (size_t li = 0; li < 3; li++) {
		int64_t n = lens[li];
		for (int r = 0; r < NR; r++)
			bf16_edge_values(w + r * n, x, n, 1);
		for (int t = 0; t < NT; t++)
			bf16_edge_values(w + (NR - 1) * n, x + t * n, n, 1);
		k->gemm[MOE_BF16](n, NR, NT, w, (size_t)n * 2, x, (size_t)n * 4, s, NR);
		for (int t = 0; t < NT; t++) {
			for (int r = 0; r < NR; r++) {
				float want = emu_bf16_dot(n, w + r * n, x + t * n);
				gemm_cases++;
				if (bits_of_f32(s[t * NR + r]) != bits_of_f32(want) &&
				    gemm_differ++ < 5)
					printf("# bf16 gemm n=%lld r=%d t=%d: %a, emulated %a\n",
					       (long long)n, r, t, s[t * NR + r], want);
			}
		}
	}
	is_int(dot_differ, 0, "avx512bf16: bf16 vec_dot equals the emulated vdpbf16ps (%d cases)",
	       dot_cases);
	is_int(gemm_differ, 0, "avx512bf16: bf16 gemm equals the emulation (%d values, %d tokens)",
	       gemm_cases, NT);
	/* The rounding itself, by hand (bf16 steps by 2^-7 above 1): 1 + 2^-8
	 * is a tie and goes to the even 1, 1 + 3 * 2^-8 a tie that goes up to
	 * the even 1 + 2^-6, and a denormal activation counts as 0. */
	uint16_t one[32];
	float xs[32] = {0};
	for (int i = 0; i < 32; i++)
		one[i] = 0x3F80; /* 1.0 */
	xs[0] = 1.0f + 0x1p-8f;
	xs[1] = 1.0f + 0x1.8p-7f;
	xs[2] = 0x1p-140f;
	float got = NAN;
	k->vec_dot[MOE_BF16](32, &got, one, xs);
	is_int((int)(bits_of_f32(got) == bits_of_f32(2.0f + 0x1p-6f)), 1,
	       "avx512bf16: hand-rounded activations give 2 + 2^-6 (%a)", got);
	free(w);
	free(x);
	free(s);
}

int main(void)
{
	for (int i = 0; i < MOE_ISA_COUNT; i++)
		if (moe_kernels_for((moe_isa)i))
			tables[n_tables++] = moe_kernels_for((moe_isa)i);
	printf("# tables:");
	for (int i = 0; i < n_tables; i++)
		printf(" %s", moe_isa_name(tables[i]->isa));
	printf("\n# built:");
	for (int i = 0; i < MOE_ISA_COUNT; i++)
		if (moe_isa_built((moe_isa)i))
			printf(" %s", moe_isa_name((moe_isa)i));
	printf("\n# kernels: %s\n", moe_isa_name(moe_kernels_get()->isa));

	test_dispatch();
	test_golden();
	test_vec_dot();
	test_gemm();
	test_avxvnni_same();
	test_quantizers();
	test_to_float();
	test_matmul();
	test_invariance();
	test_isa_table();
	test_bf16_emulation();
	return tap_done();
}
