/* kernels/generic.c — the reference kernels in plain C: a dot product for
 * every weight type with its activation type (quant.h's vec_dot_type), and
 * the activation quantisers.
 *
 * These define the results the SIMD kernels are tested against, so they are
 * written for clarity: integer sums per block exactly as the formats define
 * them, one float scale per block.  Offsets and minimums never touch the
 * per-element loop: they are folded in through the activation block sums
 * (Q8_K bsums, or a sum of the Q8_1 codes).
 */
#include <string.h>

#include "kernels/kernels_int.h"

#define H2F(h) moe_f16_to_f32(h)

/* ----------------------------------------------------------- float weights */

/* Four partial sums keep the dependency chains short; the order is fixed so
 * results are reproducible.  load(pw, i) is weight element i as a float. */
#define MOE_DOT_FLOAT(name, load)                                                      \
	static void name(int64_t n, float *s, const void *w, const void *x)            \
	{                                                                              \
		const uint8_t *pw = w;                                                 \
		const float *px = x;                                                   \
		float acc[4] = {0};                                                    \
		int64_t i = 0;                                                         \
		for (; i + 4 <= n; i += 4) {                                           \
			for (int j = 0; j < 4; j++)                                    \
				acc[j] += load(pw, i + j) * px[i + j];                 \
		}                                                                      \
		for (; i < n; i++)                                                     \
			acc[0] += load(pw, i) * px[i];                                 \
		*s = (acc[0] + acc[1]) + (acc[2] + acc[3]);                            \
	}

/* The weights may be unaligned in the mapped file: memcpy, not a cast. */
static inline float load_f32(const uint8_t *pw, int64_t i)
{
	float v;
	memcpy(&v, pw + 4 * i, 4);
	return v;
}

static inline float load_f16(const uint8_t *pw, int64_t i)
{
	uint16_t h;
	memcpy(&h, pw + 2 * i, 2);
	return moe_f16_to_f32(h);
}

static inline float load_bf16(const uint8_t *pw, int64_t i)
{
	uint16_t h;
	memcpy(&h, pw + 2 * i, 2);
	return moe_bf16_to_f32(h);
}

MOE_DOT_FLOAT(moe_vec_dot_f32_f32_generic, load_f32)
MOE_DOT_FLOAT(moe_vec_dot_f16_f32_generic, load_f16)
MOE_DOT_FLOAT(moe_vec_dot_bf16_f32_generic, load_bf16)

/* ------------------------------------------------- 32-element block types */

/* The integer sums of one block's codes times its activation codes y[32],
 * one function per way of storing the codes.  Code j of the first 16 pairs
 * with y[j]; the high nibbles hold codes 16-31 and pair with y[j + 16]. */

/* Sum of the 32 codes of an activation block. */
static int q8_sum(const int8_t *q)
{
	int s = 0;
	for (int j = 0; j < MOE_QK; j++)
		s += q[j];
	return s;
}

/* 4-bit codes (Q4_0, Q4_1). */
static int dot_nibbles(const uint8_t *qs, const int8_t *y)
{
	int sum = 0;
	for (int j = 0; j < MOE_QK / 2; j++)
		sum += (qs[j] & 0x0F) * y[j] + (qs[j] >> 4) * y[j + 16];
	return sum;
}

static uint32_t load_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* 5-bit codes (Q5_0, Q5_1): the nibble plus bit j of the u32 qh. */
static int dot_5bit(const uint8_t *qs, const uint8_t *qh, const int8_t *y)
{
	uint32_t h = load_u32(qh);
	int sum = 0;
	for (int j = 0; j < MOE_QK / 2; j++) {
		int q0 = (qs[j] & 0x0F) | ((h >> j) & 1) << 4;
		int q1 = (qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4;
		sum += q0 * y[j] + q1 * y[j + 16];
	}
	return sum;
}

/* Code-book nibbles (IQ4_NL, MXFP4, an IQ4_XS group): the table values are
 * integers, so the sum stays integral. */
static int dot_book(const int8_t *kv, const uint8_t *qs, const int8_t *y)
{
	int sum = 0;
	for (int j = 0; j < MOE_QK / 2; j++)
		sum += kv[qs[j] & 0x0F] * y[j] + kv[qs[j] >> 4] * y[j + 16];
	return sum;
}

/* x = d * q + m: d * dy * sum(q * y) + m * dy * sum(y).  The sum of the
 * codes is recomputed rather than taken from Q8_1's s, which is rounded to
 * f16 and would cost about 3 decimal digits of the offset term. */
static inline float dot_offset_block(uint16_t d, uint16_t m, const moe_block_q8_1 *y, int sum)
{
	float dy = H2F(y->d);
	return H2F(d) * dy * (float)sum + H2F(m) * dy * (float)q8_sum(y->qs);
}

static void moe_vec_dot_q8_0_q8_0_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q8_0 *b = w;
	const moe_block_q8_0 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		int sum = 0;
		for (int j = 0; j < MOE_QK; j++)
			sum += b[i].qs[j] * y[i].qs[j];
		acc += H2F(b[i].d) * H2F(y[i].d) * (float)sum;
	}
	*s = acc;
}

/* x = d * (q - 8): the -8 becomes -8 * sum(y) per block. */
static void moe_vec_dot_q4_0_q8_0_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q4_0 *b = w;
	const moe_block_q8_0 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		int sum = dot_nibbles(b[i].qs, y[i].qs) - 8 * q8_sum(y[i].qs);
		acc += H2F(b[i].d) * H2F(y[i].d) * (float)sum;
	}
	*s = acc;
}

static void moe_vec_dot_q4_1_q8_1_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q4_1 *b = w;
	const moe_block_q8_1 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++)
		acc += dot_offset_block(b[i].d, b[i].m, &y[i], dot_nibbles(b[i].qs, y[i].qs));
	*s = acc;
}

/* x = d * (q - 16), as Q4_0. */
static void moe_vec_dot_q5_0_q8_0_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q5_0 *b = w;
	const moe_block_q8_0 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		int sum = dot_5bit(b[i].qs, b[i].qh, y[i].qs) - 16 * q8_sum(y[i].qs);
		acc += H2F(b[i].d) * H2F(y[i].d) * (float)sum;
	}
	*s = acc;
}

static void moe_vec_dot_q5_1_q8_1_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q5_1 *b = w;
	const moe_block_q8_1 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++)
		acc += dot_offset_block(b[i].d, b[i].m, &y[i],
					dot_5bit(b[i].qs, b[i].qh, y[i].qs));
	*s = acc;
}

static void moe_vec_dot_iq4_nl_q8_0_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_iq4_nl *b = w;
	const moe_block_q8_0 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		int sum = dot_book(moe_kvalues_iq4nl, b[i].qs, y[i].qs);
		acc += H2F(b[i].d) * H2F(y[i].d) * (float)sum;
	}
	*s = acc;
}

static void moe_vec_dot_mxfp4_q8_0_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_mxfp4 *b = w;
	const moe_block_q8_0 *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		int sum = dot_book(moe_kvalues_mxfp4, b[i].qs, y[i].qs);
		acc += moe_e8m0_to_f32_half(b[i].e) * H2F(y[i].d) * (float)sum;
	}
	*s = acc;
}

/* ------------------------------------------------------------ K-quants */

/* Element order inside the super-blocks is documented in lib/quant/kquants.c;
 * activations (Q8_K) are in plain element order.  Integer sums per group are
 * scaled by the group's integer scale and summed per super-block (they fit
 * in 32 bits: at most 256 * 63 * 127 * 63); the float scales apply once per
 * super-block. */

static void moe_vec_dot_q2_k_q8_k_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q2_k *b = w;
	const moe_block_q8_k *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		int32_t sumi = 0, summ = 0;
		for (int e = 0; e < MOE_QK_K; e += 16) {
			int half = e / 128, j = (e % 128) / 32, l0 = e % 32, g = e / 16;
			int sum = 0;
			for (int l = 0; l < 16; l++) {
				int q = (b[i].qs[32 * half + l0 + l] >> (2 * j)) & 3;
				sum += q * y[i].qs[e + l];
			}
			sumi += (b[i].scales[g] & 0x0F) * sum;
			summ += (b[i].scales[g] >> 4) * y[i].bsums[g];
		}
		acc += y[i].d * (H2F(b[i].d) * (float)sumi - H2F(b[i].dmin) * (float)summ);
	}
	*s = acc;
}

static void moe_vec_dot_q3_k_q8_k_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q3_k *b = w;
	const moe_block_q8_k *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		int32_t sumi = 0;
		for (int e = 0; e < MOE_QK_K; e += 16) {
			int half = e / 128, j = (e % 128) / 32, r0 = e % 32, g = e / 16;
			int sum = 0;
			for (int l = 0; l < 16; l++) {
				int r = r0 + l;
				int q = (b[i].qs[32 * half + r] >> (2 * j)) & 3;
				int hi = (b[i].hmask[r] >> (4 * half + j)) & 1;
				sum += (q - (hi ? 0 : 4)) * y[i].qs[e + l];
			}
			sumi += (moe_k3_scale(b[i].scales, g) - 32) * sum;
		}
		acc += y[i].d * H2F(b[i].d) * (float)sumi;
	}
	*s = acc;
}

/* Q4_K / Q5_K: eight groups of 32 with 6-bit scale and min codes; qh holds
 * Q5_K's fifth bits (bit g of qh[l] for element l of group g), NULL for Q4_K.
 * *sumi = sum of sc * (q . y), *summ = sum of m * sum(y), per super-block. */
static void k4_sums(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
		    const moe_block_q8_k *y, int32_t *sumi, int32_t *summ)
{
	*sumi = *summ = 0;
	for (int g = 0; g < 8; g++) {
		uint8_t sc, m;
		moe_k4_scale_min(scales, g, &sc, &m);
		const uint8_t *q = qs + 32 * (g / 2);
		const int8_t *a = y->qs + 32 * g;
		int shift = 4 * (g % 2), sum = 0;
		for (int l = 0; l < 32; l++) {
			int v = (q[l] >> shift) & 0x0F;
			if (qh)
				v |= ((qh[l] >> g) & 1) << 4;
			sum += v * a[l];
		}
		*sumi += sc * sum;
		*summ += m * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
	}
}

static void moe_vec_dot_q4_k_q8_k_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q4_k *b = w;
	const moe_block_q8_k *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		int32_t sumi, summ;
		k4_sums(b[i].scales, b[i].qs, NULL, &y[i], &sumi, &summ);
		acc += y[i].d * (H2F(b[i].d) * (float)sumi - H2F(b[i].dmin) * (float)summ);
	}
	*s = acc;
}

static void moe_vec_dot_q5_k_q8_k_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q5_k *b = w;
	const moe_block_q8_k *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		int32_t sumi, summ;
		k4_sums(b[i].scales, b[i].qs, b[i].qh, &y[i], &sumi, &summ);
		acc += y[i].d * (H2F(b[i].d) * (float)sumi - H2F(b[i].dmin) * (float)summ);
	}
	*s = acc;
}

/* x = d * sc * (q - 32): the -32 becomes -32 * bsum per group of 16. */
static void moe_vec_dot_q6_k_q8_k_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q6_k *b = w;
	const moe_block_q8_k *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		int32_t sumi = 0;
		for (int e = 0; e < MOE_QK_K; e += 16) {
			int half = e / 128, k = (e % 128) / 32, l0 = e % 32, g = e / 16;
			int sum = 0;
			const uint8_t *ql = b[i].ql + 64 * half + 32 * (k % 2) + l0;
			for (int l = 0; l < 16; l++) {
				int lo = (ql[l] >> (4 * (k / 2))) & 0x0F;
				int hi = (b[i].qh[32 * half + l0 + l] >> (2 * k)) & 3;
				sum += (lo | hi << 4) * y[i].qs[e + l];
			}
			sumi += b[i].scales[g] * (sum - 32 * y[i].bsums[g]);
		}
		acc += y[i].d * H2F(b[i].d) * (float)sumi;
	}
	*s = acc;
}

static void moe_vec_dot_iq4_xs_q8_k_generic(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_iq4_xs *b = w;
	const moe_block_q8_k *y = x;
	float acc = 0.0f;

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		int32_t sumi = 0;
		for (int g = 0; g < 8; g++) {
			int ls = ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) |
				 ((b[i].scales_h >> (2 * g)) & 3) << 4;
			const uint8_t *q = b[i].qs + 16 * g;
			const int8_t *a = y[i].qs + 32 * g;
			sumi += (ls - 32) * dot_book(moe_kvalues_iq4nl, q, a);
		}
		acc += y[i].d * H2F(b[i].d) * (float)sumi;
	}
	*s = acc;
}

/* ------------------------------------------------------------------ table */

void moe_kernels_fill_generic(moe_kernels *k)
{
	memset(k, 0, sizeof(*k));
	k->isa = MOE_ISA_GENERIC;

	k->vec_dot[MOE_F32] = moe_vec_dot_f32_f32_generic;
	k->vec_dot[MOE_F16] = moe_vec_dot_f16_f32_generic;
	k->vec_dot[MOE_BF16] = moe_vec_dot_bf16_f32_generic;
	k->vec_dot[MOE_Q8_0] = moe_vec_dot_q8_0_q8_0_generic;
	k->vec_dot[MOE_Q4_0] = moe_vec_dot_q4_0_q8_0_generic;
	k->vec_dot[MOE_Q4_1] = moe_vec_dot_q4_1_q8_1_generic;
	k->vec_dot[MOE_Q5_0] = moe_vec_dot_q5_0_q8_0_generic;
	k->vec_dot[MOE_Q5_1] = moe_vec_dot_q5_1_q8_1_generic;
	k->vec_dot[MOE_IQ4_NL] = moe_vec_dot_iq4_nl_q8_0_generic;
	k->vec_dot[MOE_MXFP4] = moe_vec_dot_mxfp4_q8_0_generic;
	k->vec_dot[MOE_Q2_K] = moe_vec_dot_q2_k_q8_k_generic;
	k->vec_dot[MOE_Q3_K] = moe_vec_dot_q3_k_q8_k_generic;
	k->vec_dot[MOE_Q4_K] = moe_vec_dot_q4_k_q8_k_generic;
	k->vec_dot[MOE_Q5_K] = moe_vec_dot_q5_k_q8_k_generic;
	k->vec_dot[MOE_Q6_K] = moe_vec_dot_q6_k_q8_k_generic;
	k->vec_dot[MOE_IQ4_XS] = moe_vec_dot_iq4_xs_q8_k_generic;

	/* The activation quantisers are quant.h's references. */
	k->quantize_row[MOE_Q8_0] = moe_q8_0_from_float;
	k->quantize_row[MOE_Q8_1] = moe_q8_1_from_float;
	k->quantize_row[MOE_Q8_K] = moe_q8_k_from_float;

	for (int t = 0; t < MOE_DTYPE_MAX; t++) {
		const moe_type_traits *tr = moe_type_get(t);
		if (tr)
			k->to_float[t] = tr->to_float;
	}
	k->attn = moe_attn_generic; /* attn_generic.c */
}
