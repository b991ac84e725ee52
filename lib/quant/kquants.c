/* kquants.c — reference codecs of the 256-element super-block types: Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, Q8_K and IQ4_XS.
 *
 * The decoders are exact transcriptions of the layouts in blocks.h.  The
 * quantisers of Q4_K, Q5_K and Q6_K are the *simple* references: one
 * round-to-nearest pass per group, no importance weights and no scale
 * search, so they are deterministic and easy to check but a little less
 * accurate than ggml's searching quantisers (which produce different bytes).
 * Q8_K follows ggml's reference exactly.  Q2_K, Q3_K and IQ4_XS have no
 * quantiser yet.
 */
#include <math.h>
#include <string.h>

#include "quant.h"
#include "quant/blocks.h"

#define H2F(h) moe_f16_to_f32(h)
#define F2H(f) moe_f32_to_f16(f)

/* ------------------------------------------------------------- Q2_K */

/* Element e = 128n + 32j + 16h + l (n < 2, j < 4, h < 2, l < 16) is the
 * 2-bit field j of qs[32n + 16h + l]; its group is e / 16. */
void moe_q2_k_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q2_k *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = H2F(b->d), dmin = H2F(b->dmin);
		for (int e = 0; e < MOE_QK_K; e++) {
			int half = e / 128, j = (e % 128) / 32, l = e % 32;
			int q = (b->qs[32 * half + l] >> (2 * j)) & 3;
			uint8_t sc = b->scales[e / 16];
			y[e] = d * (sc & 0x0F) * q - dmin * (sc >> 4);
		}
	}
}

/* ------------------------------------------------------------- Q3_K */

/* Low 2 bits as Q2_K; the third bit of element e = 128n + 32j + r (r < 32)
 * is bit 4n + j of hmask[r], and a clear bit means "minus 4". */
void moe_q3_k_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q3_k *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = H2F(b->d);
		float dl[16];
		for (int g = 0; g < 16; g++)
			dl[g] = d * (moe_k3_scale(b->scales, g) - 32);
		for (int e = 0; e < MOE_QK_K; e++) {
			int half = e / 128, j = (e % 128) / 32, r = e % 32;
			int q = (b->qs[32 * half + r] >> (2 * j)) & 3;
			int hi = (b->hmask[r] >> (4 * half + j)) & 1;
			y[e] = dl[e / 16] * (q - (hi ? 0 : 4));
		}
	}
}

/* -------------------------------------------------------- Q4_K / Q5_K */

/* Element e = 64p + 32h + l (p < 4, h < 2, l < 32) is nibble h of
 * qs[32p + l]; Q5_K adds bit 2p + h of qh[l] as the fifth bit.  Group e/32
 * has scale d * sc and offset -dmin * m. */
void moe_q4_k_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q4_k *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = H2F(b->d), dmin = H2F(b->dmin);
		for (int g = 0; g < 8; g++) {
			uint8_t sc, m;
			moe_k4_scale_min(b->scales, g, &sc, &m);
			float dl = d * sc, ml = dmin * m;
			const uint8_t *q = b->qs + 32 * (g / 2);
			int shift = 4 * (g % 2);
			for (int l = 0; l < 32; l++)
				y[32 * g + l] = dl * ((q[l] >> shift) & 0x0F) - ml;
		}
	}
}

void moe_q5_k_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q5_k *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = H2F(b->d), dmin = H2F(b->dmin);
		for (int g = 0; g < 8; g++) {
			uint8_t sc, m;
			moe_k4_scale_min(b->scales, g, &sc, &m);
			float dl = d * sc, ml = dmin * m;
			const uint8_t *q = b->qs + 32 * (g / 2);
			int shift = 4 * (g % 2);
			for (int l = 0; l < 32; l++) {
				int v = ((q[l] >> shift) & 0x0F) | ((b->qh[l] >> g) & 1) << 4;
				y[32 * g + l] = dl * v - ml;
			}
		}
	}
}

/* Smallest half not below v (v >= 0): scales rounded up keep every group's
 * range representable after the 6-bit scale codes are rounded up too. */
static uint16_t f16_up(float v)
{
	uint16_t h = F2H(v);
	if (H2F(h) < v && h < 0x7C00)
		h++;
	return h;
}

static int ceil_code(float v, float unit, int max)
{
	if (!(unit > 0.0f))
		return 0;
	int c = (int)ceilf(v / unit);
	return c < 0 ? 0 : c > max ? max : c;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fills d, dmin, the 12 packed
 * scale bytes and the codes L[256] in [0, nmax].
 *
 * Per group of 32 the grid is -m + s * q with m = -min(0, min x) (codes
 * rounded up so the grid starts at or below the smallest element) and
 * s >= (max x + m) / nmax (rounded up so it reaches the largest), then each
 * element takes the nearest grid point.  The error is at most s / 2. */
static void k4_quantise(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
			uint8_t *scales, uint8_t *L)
{
	float mins[8], mx[8], need[8], max_min = 0.0f, max_need = 0.0f;
	uint8_t ls[8], lm[8];

	for (int g = 0; g < 8; g++) {
		float lo = 0.0f, hi = x[32 * g];
		for (int l = 0; l < 32; l++) {
			float v = x[32 * g + l];
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
		}
		mins[g] = -lo;
		mx[g] = hi;
		max_min = mins[g] > max_min ? mins[g] : max_min;
	}
	*dmin_out = f16_up(max_min / 63.0f);
	float dmin = H2F(*dmin_out);
	for (int g = 0; g < 8; g++) {
		lm[g] = (uint8_t)ceil_code(mins[g], dmin, 63);
		need[g] = (mx[g] + dmin * lm[g]) / nmax;
		if (need[g] < 0.0f)
			need[g] = 0.0f;
		max_need = need[g] > max_need ? need[g] : max_need;
	}
	*d_out = f16_up(max_need / 63.0f);
	float d = H2F(*d_out);
	for (int g = 0; g < 8; g++)
		ls[g] = (uint8_t)ceil_code(need[g], d, 63);

	/* Pack: groups 0-3 in the low 6 bits of bytes g (scale) and g+4 (min);
	 * groups 4-7 as nibbles of byte g+4 plus the top bits of bytes g-4
	 * and g. */
	memset(scales, 0, MOE_K_SCALE_SIZE);
	for (int g = 0; g < 8; g++) {
		if (g < 4) {
			scales[g] |= ls[g];
			scales[g + 4] |= lm[g];
		} else {
			scales[g + 4] = (uint8_t)((ls[g] & 0x0F) | (lm[g] & 0x0F) << 4);
			scales[g - 4] |= (uint8_t)((ls[g] >> 4) << 6);
			scales[g] |= (uint8_t)((lm[g] >> 4) << 6);
		}
	}

	for (int g = 0; g < 8; g++) {
		float s = d * ls[g], m = dmin * lm[g];
		for (int l = 0; l < 32; l++) {
			int q = 0;
			if (s > 0.0f) {
				q = moe_nearest_int((x[32 * g + l] + m) / s);
				q = q < 0 ? 0 : q > nmax ? nmax : q;
			}
			L[32 * g + l] = (uint8_t)q;
		}
	}
}

void moe_q4_k_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q4_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		uint8_t L[MOE_QK_K];
		uint16_t d, dmin;
		k4_quantise(x, 15, &d, &dmin, b->scales, L);
		b->d = d;
		b->dmin = dmin;
		for (int p = 0; p < 4; p++)
			for (int l = 0; l < 32; l++)
				b->qs[32 * p + l] =
					(uint8_t)(L[64 * p + l] | L[64 * p + 32 + l] << 4);
	}
}

void moe_q5_k_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q5_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		uint8_t L[MOE_QK_K];
		uint16_t d, dmin;
		k4_quantise(x, 31, &d, &dmin, b->scales, L);
		b->d = d;
		b->dmin = dmin;
		memset(b->qh, 0, sizeof(b->qh));
		for (int p = 0; p < 4; p++) {
			for (int l = 0; l < 32; l++) {
				int lo = L[64 * p + l], hi = L[64 * p + 32 + l];
				b->qs[32 * p + l] = (uint8_t)((lo & 0x0F) | (hi & 0x0F) << 4);
				b->qh[l] |= (uint8_t)((lo >> 4) << (2 * p) |
						      (hi >> 4) << (2 * p + 1));
			}
		}
	}
}

/* ------------------------------------------------------------- Q6_K */

/* Element e = 128n + 32k + l (n < 2, k < 4, l < 32): low nibble from
 * ql[64n + 32(k%2) + l] (nibble k/2), high 2 bits from field k of
 * qh[32n + l]; the group (scale) is e / 16. */
void moe_q6_k_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q6_k *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = H2F(b->d);
		for (int e = 0; e < MOE_QK_K; e++) {
			int half = e / 128, k = (e % 128) / 32, l = e % 32;
			int lo = (b->ql[64 * half + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
			int hi = (b->qh[32 * half + l] >> (2 * k)) & 3;
			y[e] = d * b->scales[e / 16] * ((lo | hi << 4) - 32);
		}
	}
}

/* Simple reference after ggml's round-to-nearest path: each group of 16
 * gets scale max/-32 (its extreme element maps to code -32 exactly), the
 * group scales are quantised to int8 against the stored super-block scale
 * (the largest becomes -128), and elements are rounded to [-32, 31] with
 * the stored scales. */
void moe_q6_k_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q6_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		float scales[16], max_scale = 0.0f, amax_scale = 0.0f;
		uint8_t L[MOE_QK_K];

		for (int g = 0; g < 16; g++) {
			float amax = 0.0f, max = 0.0f;
			for (int l = 0; l < 16; l++) {
				float v = x[16 * g + l];
				if (fabsf(v) > amax) {
					amax = fabsf(v);
					max = v;
				}
			}
			scales[g] = max / -32.0f;
			if (fabsf(scales[g]) > amax_scale) {
				amax_scale = fabsf(scales[g]);
				max_scale = scales[g];
			}
		}
		memset(b, 0, sizeof(*b));
		if (amax_scale == 0.0f)
			continue; /* all zero: d = 0 and every code 0 decodes to 0 */

		/* d = -max_scale / 128, its magnitude rounded up to a half so
		 * that every scale / d stays within [-128, 128]: small blocks
		 * whose d is a half subnormal would otherwise clip badly. */
		float dv = -max_scale / 128.0f;
		b->d = (uint16_t)(f16_up(fabsf(dv)) | (dv < 0 ? 0x8000 : 0));
		float d = H2F(b->d);
		for (int g = 0; g < 16; g++) {
			int sc = moe_nearest_int(scales[g] / d);
			b->scales[g] = (int8_t)(sc > 127 ? 127 : sc < -128 ? -128 : sc);
		}
		for (int g = 0; g < 16; g++) {
			float s = d * b->scales[g];
			for (int l = 0; l < 16; l++) {
				int q = 0;
				if (s != 0.0f) {
					q = moe_nearest_int(x[16 * g + l] / s);
					q = q < -32 ? -32 : q > 31 ? 31 : q;
				}
				L[16 * g + l] = (uint8_t)(q + 32);
			}
		}
		for (int half = 0; half < 2; half++) {
			const uint8_t *Lh = L + 128 * half;
			for (int l = 0; l < 32; l++) {
				b->ql[64 * half + l] =
					(uint8_t)((Lh[l] & 0x0F) | (Lh[64 + l] & 0x0F) << 4);
				b->ql[64 * half + 32 + l] =
					(uint8_t)((Lh[32 + l] & 0x0F) | (Lh[96 + l] & 0x0F) << 4);
				b->qh[32 * half + l] =
					(uint8_t)(Lh[l] >> 4 | (Lh[32 + l] >> 4) << 2 |
						  (Lh[64 + l] >> 4) << 4 | (Lh[96 + l] >> 4) << 6);
			}
		}
	}
}

/* ------------------------------------------------------------- Q8_K */

void moe_q8_k_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q8_k *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = b->d;
		for (int e = 0; e < MOE_QK_K; e++)
			y[e] = d * b->qs[e];
	}
}

/* As ggml: the extreme element maps to -127 (so codes stay in [-127, 127],
 * which the SIMD dot products rely on), d = 1 / iscale in f32. */
void moe_q8_k_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q8_k *b = dst;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, x += MOE_QK_K) {
		float amax = 0.0f, max = 0.0f;
		for (int e = 0; e < MOE_QK_K; e++) {
			if (fabsf(x[e]) > amax) {
				amax = fabsf(x[e]);
				max = x[e];
			}
		}
		memset(b, 0, sizeof(*b));
		if (amax == 0.0f)
			continue;
		float iscale = -127.0f / max;
		for (int e = 0; e < MOE_QK_K; e++) {
			int v = moe_nearest_int(iscale * x[e]);
			b->qs[e] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
		}
		for (int g = 0; g < MOE_QK_K / 16; g++) {
			int s = 0;
			for (int l = 0; l < 16; l++)
				s += b->qs[16 * g + l];
			b->bsums[g] = (int16_t)s;
		}
		b->d = 1.0f / iscale;
	}
}

/* ----------------------------------------------------------- IQ4_XS */

/* Group g of 32: elements 32g + l (l < 16) are the low nibbles of
 * qs[16g + l], elements 32g + 16 + l the high nibbles. */
void moe_iq4_xs_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_iq4_xs *b = src;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, b++, y += MOE_QK_K) {
		float d = H2F(b->d);
		uint16_t sh = b->scales_h;
		for (int g = 0; g < 8; g++) {
			int ls = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) |
				 ((sh >> (2 * g)) & 3) << 4;
			float dl = d * (ls - 32);
			const uint8_t *q = b->qs + 16 * g;
			for (int l = 0; l < 16; l++) {
				y[32 * g + l] = dl * moe_kvalues_iq4nl[q[l] & 0x0F];
				y[32 * g + 16 + l] = dl * moe_kvalues_iq4nl[q[l] >> 4];
			}
		}
	}
}
