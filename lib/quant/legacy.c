/* legacy.c — reference codecs of the 32-element block types: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL and MXFP4.
 *
 * The quantisers are the simple round-to-nearest references (no importance
 * weights).  For Q4_0 .. Q8_1 and MXFP4 they follow ggml's reference
 * quantisers step for step (scale from the unrounded block maximum, the same
 * rounding of the codes), so a tensor quantised here has the bytes ggml's
 * reference gives; IQ4_NL's is simpler than ggml's (one scale, no search).
 * All elements j < 16 of a block are in the low nibbles of qs[j], elements
 * j + 16 in the high nibbles.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant.h"
#include "quant/blocks.h"

const int8_t moe_kvalues_iq4nl[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

const int8_t moe_kvalues_mxfp4[16] = {
	0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

#define H2F(h) moe_f16_to_f32(h)
#define F2H(f) moe_f32_to_f16(f)

/* The element with the largest magnitude, with its sign (0 if all zero). */
static float signed_absmax(const float *x, int n, float *amax_out)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < n; j++) {
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	if (amax_out)
		*amax_out = amax;
	return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
	*mn = FLT_MAX;
	*mx = -FLT_MAX;
	for (int j = 0; j < n; j++) {
		if (x[j] < *mn)
			*mn = x[j];
		if (x[j] > *mx)
			*mx = x[j];
	}
}

static uint32_t load_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* --------------------------------------------------------------- Q4_0 */

void moe_q4_0_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q4_0 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d);
		for (int j = 0; j < MOE_QK / 2; j++) {
			y[j] = ((b->qs[j] & 0x0F) - 8) * d;
			y[j + 16] = ((b->qs[j] >> 4) - 8) * d;
		}
	}
}

/* d = max / -8 maps the extreme element to code 0 exactly; the other end
 * (+7) is one step short, which is why the sign of the extreme matters. */
void moe_q4_0_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q4_0 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		float d = signed_absmax(x, MOE_QK, NULL) / -8.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b->d = F2H(d);
		for (int j = 0; j < MOE_QK / 2; j++) {
			/* x*id is in [-8, 8]: +8.5 then truncation rounds
			 * half up; 16 happens only at the far end. */
			int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
			q0 = q0 > 15 ? 15 : q0;
			q1 = q1 > 15 ? 15 : q1;
			b->qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

/* --------------------------------------------------------------- Q4_1 */

void moe_q4_1_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q4_1 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d), m = H2F(b->m);
		for (int j = 0; j < MOE_QK / 2; j++) {
			y[j] = (b->qs[j] & 0x0F) * d + m;
			y[j + 16] = (b->qs[j] >> 4) * d + m;
		}
	}
}

void moe_q4_1_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q4_1 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		float mn, mx;
		min_max(x, MOE_QK, &mn, &mx);
		float d = (mx - mn) / 15.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b->d = F2H(d);
		b->m = F2H(mn);
		for (int j = 0; j < MOE_QK / 2; j++) {
			int q0 = (int)((x[j] - mn) * id + 0.5f);
			int q1 = (int)((x[j + 16] - mn) * id + 0.5f);
			q0 = q0 > 15 ? 15 : q0;
			q1 = q1 > 15 ? 15 : q1;
			b->qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

/* --------------------------------------------------------------- Q5_0 */

void moe_q5_0_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q5_0 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d);
		uint32_t qh = load_u32(b->qh);
		for (int j = 0; j < MOE_QK / 2; j++) {
			int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
			y[j] = (((b->qs[j] & 0x0F) | h0 << 4) - 16) * d;
			y[j + 16] = (((b->qs[j] >> 4) | h1 << 4) - 16) * d;
		}
	}
}

void moe_q5_0_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q5_0 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		float d = signed_absmax(x, MOE_QK, NULL) / -16.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		uint32_t qh = 0;
		b->d = F2H(d);
		for (int j = 0; j < MOE_QK / 2; j++) {
			int q0 = (int)(x[j] * id + 16.5f), q1 = (int)(x[j + 16] * id + 16.5f);
			q0 = q0 > 31 ? 31 : q0;
			q1 = q1 > 31 ? 31 : q1;
			b->qs[j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
			qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
		}
		memcpy(b->qh, &qh, 4);
	}
}

/* --------------------------------------------------------------- Q5_1 */

void moe_q5_1_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q5_1 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d), m = H2F(b->m);
		uint32_t qh = load_u32(b->qh);
		for (int j = 0; j < MOE_QK / 2; j++) {
			int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
			y[j] = ((b->qs[j] & 0x0F) | h0 << 4) * d + m;
			y[j + 16] = ((b->qs[j] >> 4) | h1 << 4) * d + m;
		}
	}
}

void moe_q5_1_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q5_1 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		float mn, mx;
		min_max(x, MOE_QK, &mn, &mx);
		float d = (mx - mn) / 31.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		uint32_t qh = 0;
		b->d = F2H(d);
		b->m = F2H(mn);
		for (int j = 0; j < MOE_QK / 2; j++) {
			int q0 = (int)((x[j] - mn) * id + 0.5f);
			int q1 = (int)((x[j + 16] - mn) * id + 0.5f);
			q0 = q0 > 31 ? 31 : q0;
			q1 = q1 > 31 ? 31 : q1;
			b->qs[j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
			qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
		}
		memcpy(b->qh, &qh, 4);
	}
}

/* ---------------------------------------------------------- Q8_0/Q8_1 */

void moe_q8_0_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q8_0 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d);
		for (int j = 0; j < MOE_QK; j++)
			y[j] = b->qs[j] * d;
	}
}

/* Codes of x with scale amax/127 (roundf: half away from zero); returns d
 * and the sum of the codes. */
static float q8_block(const float *x, int8_t *q, int *sum)
{
	float amax;
	signed_absmax(x, MOE_QK, &amax);
	float d = amax / 127.0f;
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	int s = 0;
	for (int j = 0; j < MOE_QK; j++) {
		q[j] = (int8_t)roundf(x[j] * id);
		s += q[j];
	}
	*sum = s;
	return d;
}

void moe_q8_0_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q8_0 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		int8_t q[MOE_QK];
		int sum;
		b->d = F2H(q8_block(x, q, &sum));
		memcpy(b->qs, q, MOE_QK);
	}
}

void moe_q8_1_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_q8_1 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d);
		for (int j = 0; j < MOE_QK; j++)
			y[j] = b->qs[j] * d;
	}
}

void moe_q8_1_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_q8_1 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		int8_t q[MOE_QK];
		int sum;
		float d = q8_block(x, q, &sum);
		b->d = F2H(d);
		b->s = F2H(sum * d);
		memcpy(b->qs, q, MOE_QK);
	}
}

/* ------------------------------------------------------------- IQ4_NL */

void moe_iq4_nl_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_iq4_nl *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = H2F(b->d);
		for (int j = 0; j < MOE_QK / 2; j++) {
			y[j] = d * moe_kvalues_iq4nl[b->qs[j] & 0x0F];
			y[j + 16] = d * moe_kvalues_iq4nl[b->qs[j] >> 4];
		}
	}
}

/* Index of the table entry nearest to v (table sorted ascending; ties go to
 * the lower entry). */
static int nearest_iq4nl(float v)
{
	int best = 0;
	float err = fabsf(v - moe_kvalues_iq4nl[0]);
	for (int k = 1; k < 16; k++) {
		float e = fabsf(v - moe_kvalues_iq4nl[k]);
		if (e < err) {
			err = e;
			best = k;
		}
	}
	return best;
}

/* Simple reference: the extreme element maps to the table end -127, so
 * d = max / -127, and every other element takes the nearest table entry.
 * (ggml searches several scales with importance weights; this does not.) */
void moe_iq4_nl_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_iq4_nl *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		float d = signed_absmax(x, MOE_QK, NULL) / -127.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b->d = F2H(d);
		for (int j = 0; j < MOE_QK / 2; j++) {
			int q0 = nearest_iq4nl(x[j] * id), q1 = nearest_iq4nl(x[j + 16] * id);
			b->qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

/* -------------------------------------------------------------- MXFP4 */

void moe_mxfp4_to_float(const void *src, float *y, int64_t n)
{
	const moe_block_mxfp4 *b = src;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, y += MOE_QK) {
		float d = moe_e8m0_to_f32_half(b->e);
		for (int j = 0; j < MOE_QK / 2; j++) {
			y[j] = moe_kvalues_mxfp4[b->qs[j] & 0x0F] * d;
			y[j + 16] = moe_kvalues_mxfp4[b->qs[j] >> 4] * d;
		}
	}
}

/* Nearest of the 16 codes for v at half-scale d (first one wins a tie). */
static int nearest_mxfp4(float v, float d)
{
	int best = 0;
	float err = fabsf(moe_kvalues_mxfp4[0] * d - v);
	for (int k = 1; k < 16; k++) {
		float e = fabsf(moe_kvalues_mxfp4[k] * d - v);
		if (e < err) {
			err = e;
			best = k;
		}
	}
	return best;
}

/* As ggml: exponent floor(log2(amax)) - 2, so the block maximum lands in the
 * top binade of E2M1 (4 .. 6, clipped at 6).  The exponent is clamped to the
 * E8M0 range, which ggml leaves to chance for very small or huge blocks. */
void moe_mxfp4_from_float(const float *x, void *dst, int64_t n)
{
	moe_block_mxfp4 *b = dst;
	for (int64_t i = 0; i < n / MOE_QK; i++, b++, x += MOE_QK) {
		float amax;
		signed_absmax(x, MOE_QK, &amax);
		int e = 0;
		if (amax > 0.0f && isfinite(amax)) {
			e = (int)floorf(log2f(amax)) - 2 + 127;
			e = e < 0 ? 0 : e > 254 ? 254 : e;
		}
		float d = moe_e8m0_to_f32_half((uint8_t)e);
		b->e = (uint8_t)e;
		for (int j = 0; j < MOE_QK / 2; j++) {
			int q0 = nearest_mxfp4(x[j], d), q1 = nearest_mxfp4(x[j + 16], d);
			b->qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}
