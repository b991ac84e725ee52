/* t-quant-search.c — the searching weight quantisers (quant/search.c):
 *  - exactly representable data (decoded from random blocks whose extremes
 *    sit at the grid ends) comes back bit for bit;
 *  - on seeded Gaussian data with outliers, the weighted error is below the
 *    round-to-nearest reference's for every type that has one, and below
 *    fixed per-type bounds (relative RMS error of a uniform grid of 2^bits
 *    levels over the block range, worked out in the comments);
 *  - importance weights move the error to where the weight is small;
 *  - rows split over threads give the same bytes as one thread;
 *  - errors for unsupported types and ragged rows.
 * The independent numpy check of the errors is tests/cli/t0700-quant-ref.sh.
 */
#include "quant.h"
#include "quant/blocks.h"
#include "tap.h"
#include "testrand.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float unif(void)
{
	return (rnd32() + 0.5f) / 4294967296.0f * 65536.0f;
}
static float gauss(void)
{
	float u = (rnd32() % 65535 + 1) / 65536.0f, v = (rnd32() % 65536) / 65536.0f;
	return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static const int all_types[] = {
	MOE_Q4_0, MOE_Q4_1, MOE_Q5_0, MOE_Q5_1, MOE_Q8_0, MOE_IQ4_NL, MOE_MXFP4, MOE_Q2_K,
	MOE_Q3_K, MOE_Q4_K, MOE_Q5_K, MOE_Q6_K, MOE_IQ4_XS, MOE_F16, MOE_BF16,
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

/* ------------------------------------------- exactly representable data */

/* Random valid block bytes whose every group has its extremes at the grid
 * ends (so the search's first candidate is exact), with f16 scales of
 * moderate size. */
static uint16_t f16_of(float v)
{
	return moe_f32_to_f16(v);
}
static void random_block(int type, uint8_t *b)
{
	const moe_type_traits *t = moe_type_get(type);
	for (uint32_t i = 0; i < t->type_size; i++)
		b[i] = (uint8_t)rnd32();
	float d = 0.001f * (1 + rnd32() % 1000);
	switch (type) {
	case MOE_Q4_0: case MOE_IQ4_NL: {
		moe_block_q4_0 *q = (void *)b;
		q->d = f16_of(d);
		q->qs[rnd32() % 16] &= 0xF0; /* code 0: -8 d / -127 d, the extreme */
		break;
	}
	case MOE_Q5_0: {
		moe_block_q5_0 *q = (void *)b;
		q->d = f16_of(d);
		q->qs[3] &= 0xF0;
		q->qh[0] &= (uint8_t)~(1u << 3);
		break;
	}
	case MOE_Q4_1: case MOE_Q5_1: {
		moe_block_q4_1 *q = (void *)b;
		q->d = f16_of(d);
		q->m = f16_of(-0.001f * (rnd32() % 1000));
		if (type == MOE_Q4_1) {
			q->qs[1] = (uint8_t)((q->qs[1] & 0xF0) | 0x0);
			q->qs[2] = (uint8_t)((q->qs[2] & 0xF0) | 0xF);
		} else {
			moe_block_q5_1 *p = (void *)b;
			p->qs[1] &= 0xF0;
			p->qh[0] &= (uint8_t)~2u;
			p->qs[2] |= 0x0F;
			p->qh[0] |= 4;
		}
		break;
	}
	case MOE_Q8_0: {
		moe_block_q8_0 *q = (void *)b;
		q->d = f16_of(d);
		for (int j = 0; j < 32; j++)
			if (q->qs[j] == -128)
				q->qs[j] = -127;
		q->qs[rnd32() % 32] = 127;
		break;
	}
	case MOE_MXFP4: {
		moe_block_mxfp4 *q = (void *)b;
		q->e = (uint8_t)(100 + rnd32() % 50);
		q->qs[rnd32() % 16] |= 0x0F; /* -12: the top binade */
		break;
	}
	case MOE_Q2_K: {
		moe_block_q2_k *q = (void *)b;
		q->d = f16_of(d);
		q->dmin = f16_of(0.001f * (1 + rnd32() % 1000));
		for (int g = 0; g < 16; g++) {
			int sc = 1 + rnd32() % 15, m = rnd32() % 16;
			if (g == 5)
				sc = 15, m = 15;
			q->scales[g] = (uint8_t)(sc | m << 4);
		}
		/* group g = elements 16g..16g+15: e = 128h + 32j + r, field j of
		 * qs[32h + r]; put a 0 and a 3 in every group */
		for (int g = 0; g < 16; g++) {
			int e0 = 16 * g, e1 = 16 * g + 1;
			q->qs[32 * (e0 / 128) + e0 % 32] &= (uint8_t)~(3u << (2 * ((e0 % 128) / 32)));
			q->qs[32 * (e1 / 128) + e1 % 32] |= (uint8_t)(3u << (2 * ((e1 % 128) / 32)));
		}
		break;
	}
	case MOE_Q4_K: case MOE_Q5_K: {
		/* d, dmin first in both; scales after */
		moe_block_q4_k *q = (void *)b;
		q->d = f16_of(d);
		q->dmin = f16_of(0.001f * (1 + rnd32() % 1000));
		uint8_t *s = q->scales;
		int sc[8], m[8];
		for (int g = 0; g < 8; g++) {
			sc[g] = 1 + rnd32() % 63;
			m[g] = rnd32() % 64;
		}
		sc[2] = 63, m[6] = 63;
		memset(s, 0, 12);
		for (int g = 0; g < 8; g++) {
			if (g < 4) {
				s[g] |= (uint8_t)sc[g];
				s[g + 4] |= (uint8_t)m[g];
			} else {
				s[g + 4] = (uint8_t)((sc[g] & 15) | (m[g] & 15) << 4);
				s[g - 4] |= (uint8_t)((sc[g] >> 4) << 6);
				s[g] |= (uint8_t)((m[g] >> 4) << 6);
			}
		}
		/* group g: elements 32g + l = nibble g%2 of qs[32(g/2) + l] */
		uint8_t *qs = type == MOE_Q4_K ? q->qs : ((moe_block_q5_k *)(void *)b)->qs;
		for (int g = 0; g < 8; g++) {
			int sh = 4 * (g % 2);
			qs[32 * (g / 2) + 0] &= (uint8_t)~(15u << sh);
			qs[32 * (g / 2) + 1] |= (uint8_t)(15u << sh);
			if (type == MOE_Q5_K) {
				moe_block_q5_k *p = (void *)b;
				p->qh[0] &= (uint8_t)~(1u << g);
				p->qh[1] |= (uint8_t)(1u << g);
			}
		}
		break;
	}
	case MOE_Q3_K: {
		moe_block_q3_k *q = (void *)b;
		q->d = f16_of(d);
		/* scale 15 (stored 47) or more negative than -31; one group at
		 * -32 (stored 0) is the extreme.  Every group gets code -4 at
		 * its first element and 3 at its second. */
		int v[16];
		for (int g = 0; g < 16; g++)
			v[g] = 32 + 1 + rnd32() % 31;
		v[9] = 0;
		memset(q->scales, 0, 12);
		for (int g = 0; g < 16; g++) {
			if (g < 8)
				q->scales[g] |= (uint8_t)(v[g] & 15);
			else
				q->scales[g - 8] |= (uint8_t)((v[g] & 15) << 4);
			q->scales[8 + g % 4] |= (uint8_t)((v[g] >> 4) << (2 * (g / 4)));
		}
		for (int g = 0; g < 16; g++) {
			for (int k = 0; k < 2; k++) {
				int e = 16 * g + k, u = k ? 7 : 0;
				int half = e / 128, j = (e % 128) / 32, r = e % 32;
				q->qs[32 * half + r] = (uint8_t)((q->qs[32 * half + r] & ~(3u << (2 * j))) |
								 (u & 3) << (2 * j));
				q->hmask[r] = (uint8_t)((q->hmask[r] & ~(1u << (4 * half + j))) |
							(u >> 2) << (4 * half + j));
			}
		}
		break;
	}
	case MOE_Q6_K: {
		moe_block_q6_k *q = (void *)b;
		q->d = f16_of(d);
		for (int g = 0; g < 16; g++)
			q->scales[g] = (int8_t)(1 + rnd32() % 127);
		q->scales[4] = 127;
		/* element 16g: low nibble of ql[64h + 32(k%2) + l]... set its
		 * 6-bit code to 0 (-32): clear the nibble and the 2 high bits */
		for (int g = 0; g < 16; g++) {
			int e = 16 * g, half = e / 128, k = (e % 128) / 32, l = e % 32;
			q->ql[64 * half + 32 * (k % 2) + l] &= (uint8_t)~(15u << (4 * (k / 2)));
			q->qh[32 * half + l] &= (uint8_t)~(3u << (2 * k));
		}
		break;
	}
	case MOE_IQ4_XS: {
		moe_block_iq4_xs *q = (void *)b;
		q->d = f16_of(d);
		q->scales_h = 0xAAAA; /* every ls >= 32: positive scales */
		q->scales_l[1] = (uint8_t)(q->scales_l[1] | 0x0F);
		q->scales_h |= 3u << 4;  /* group 2: ls = 63 */
		for (int g = 0; g < 8; g++) {
			if (((q->scales_l[g / 2] >> (4 * (g % 2))) & 15) == 0 &&
			    ((q->scales_h >> (2 * g)) & 3) == 2)
				q->scales_l[g / 2] |= (uint8_t)(1u << (4 * (g % 2)));
			q->qs[16 * g] &= 0xF0; /* code 0 = -127 */
		}
		break;
	}
	case MOE_F16: case MOE_BF16: {
		for (uint32_t i = 0; i < t->type_size; i += 2)
			b[i + 1] &= 0x3F; /* finite, modest */
		break;
	}
	}
}

static void test_exact(void)
{
	for (size_t k = 0; k < N_TYPES; k++) {
		int type = all_types[k];
		const moe_type_traits *t = moe_type_get(type);
		int nb = 64, bs = (int)t->block_size, n = bs * nb;
		if (bs == 1)
			n = 256, nb = 256;
		size_t bytes = (size_t)nb * t->type_size;
		uint8_t *src = malloc(bytes), *dst = malloc(bytes);
		float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
		for (int i = 0; i < nb; i++)
			random_block(type, src + (size_t)i * t->type_size);
		t->to_float(src, x, n);
		moe_quant_fn(type)(x, dst, n, NULL);
		t->to_float(dst, y, n);
		int bad = -1;
		for (int i = 0; i < n && bad < 0; i++)
			if (x[i] != y[i])
				bad = i;
		ok(bad < 0, "%s: exactly representable data round-trips%s", t->name,
		   bad < 0 ? "" : " (first difference below)");
		if (bad >= 0)
			tap_diag("element %d: %.9g -> %.9g", bad, x[bad], y[bad]);
		free(src), free(dst), free(x), free(y);
	}
}

/* ------------------------------------------------ errors on random data */

/* Rows of Gaussian weights with an outlier per 64 and per-column importances
 * spread over two orders of magnitude (as activations are). */
#define ROWS 16
#define COLS 1024

static double werr(const float *x, const float *y, const float *w, int n)
{
	return moe_quant_rel_error(x, y, w, n);
}

/* Relative weighted MSE bounds without weights: a uniform grid of L levels
 * over a Gaussian block's range (about +-2.5 sigma for 32, +-3 for 256 with
 * outliers) has RMS error step/sqrt(12) = 5 sigma / (L-1) / 3.46; squared
 * and relative to sigma^2: ~ 2.1 / (L-1)^2 (x2 margin for scale rounding,
 * clipping of outliers and the sub-scale grids).  Code books and FP4 like
 * 4 bits.  The searches must beat these by construction; the figure printed
 * is what they reach. */
static double bound(int type)
{
	switch (type) {
	case MOE_Q8_0: return 4.2 / (254.0 * 254.0) * 4;
	case MOE_Q6_K: return 4.2 / (63.0 * 63.0) * 2;
	case MOE_Q5_0: case MOE_Q5_1: case MOE_Q5_K: return 4.2 / (31.0 * 31.0) * 2;
	case MOE_Q4_0: case MOE_Q4_1: case MOE_Q4_K: case MOE_IQ4_NL: case MOE_IQ4_XS:
		return 4.2 / (15.0 * 15.0) * 2;
	case MOE_MXFP4: return 4.2 / (15.0 * 15.0) * 4;
	case MOE_Q3_K: return 4.2 / (7.0 * 7.0) * 2;
	case MOE_Q2_K: return 4.2 / (3.0 * 3.0) * 1.5;
	case MOE_F16: return 1e-6;
	case MOE_BF16: return 1e-4;
	}
	return 0;
}

static void test_errors(void)
{
	float *x = malloc(sizeof(float) * ROWS * COLS), *y = malloc(sizeof(float) * ROWS * COLS);
	float *w = malloc(sizeof(float) * COLS);
	uint8_t *q = malloc((size_t)ROWS * COLS * 4);
	for (int i = 0; i < ROWS * COLS; i++)
		x[i] = 0.02f * gauss() * (i % 64 == 17 ? 6.0f : 1.0f);
	for (int c = 0; c < COLS; c++)
		w[c] = expf(4.6f * unif() / 65536.0f); /* 1 .. 100 */

	for (size_t k = 0; k < N_TYPES; k++) {
		int type = all_types[k];
		const moe_type_traits *t = moe_type_get(type);
		moe_error e;
		double es = 0, er = 0, esw = 0, erw = 0;
		ok(moe_quant_rows(type, x, q, ROWS, COLS, NULL, NULL, &e) == 0, "%s: quantise",
		   t->name);
		t->to_float(q, y, ROWS * COLS);
		es = werr(x, y, NULL, ROWS * COLS);
		ok(es < bound(type), "%s: relative squared error %.3g below %.3g", t->name, es,
		   bound(type));
		/* with importances: the weighted error (what the search
		 * minimises) must improve on the unweighted search's */
		ok(moe_quant_rows(type, x, q, ROWS, COLS, w, NULL, &e) == 0, "%s: with weights",
		   t->name);
		t->to_float(q, y, ROWS * COLS);
		for (int r = 0; r < ROWS; r++)
			esw += werr(x + r * COLS, y + r * COLS, w, COLS) / ROWS;
		moe_quant_rows(type, x, q, ROWS, COLS, NULL, NULL, &e);
		t->to_float(q, y, ROWS * COLS);
		double eu = 0;
		for (int r = 0; r < ROWS; r++)
			eu += werr(x + r * COLS, y + r * COLS, w, COLS) / ROWS;
		if (t->is_quantized && type != MOE_Q8_0)
			ok(esw < eu * 0.97, "%s: importance weights lower the weighted error "
			   "%.4g -> %.4g", t->name, eu, esw);
		/* against round to nearest (where a reference exists) */
		if (t->from_float && t->is_quantized) {
			t->from_float(x, q, ROWS * COLS);
			t->to_float(q, y, ROWS * COLS);
			er = werr(x, y, NULL, ROWS * COLS);
			ok(es <= er, "%s: search error %.4g <= round-to-nearest %.4g (%.1f%% lower)",
			   t->name, es, er, 100.0 * (1.0 - es / er));
			(void)erw;
		}
	}
	free(x), free(y), free(w), free(q);
}

/* Threads split rows: same bytes as one thread. */
static void test_threads(void)
{
	int rows = 37, cols = 512;
	float *x = malloc(sizeof(float) * rows * cols);
	uint8_t *a = malloc((size_t)rows * cols), *b = malloc((size_t)rows * cols);
	moe_pool *pool;
	moe_error e;
	for (int i = 0; i < rows * cols; i++)
		x[i] = gauss();
	ok(moe_pool_create(&pool, 3, &e) == 0, "pool of 3");
	moe_quant_rows(MOE_Q4_K, x, a, rows, cols, NULL, NULL, &e);
	moe_quant_rows(MOE_Q4_K, x, b, rows, cols, NULL, pool, &e);
	ok(memcmp(a, b, (size_t)rows * cols / 256 * 144) == 0, "3 threads = 1 thread (q4_k)");
	moe_pool_free(pool);
	is_int(moe_quant_rows(MOE_Q4_K, x, a, 1, 300, NULL, NULL, &e), MOE_EINVAL,
	       "300 columns of q4_k refused");
	ok(strstr(e.msg, "q4_k") != NULL, "message names the type: %s", e.msg);
	is_int(moe_quant_rows(MOE_Q8_K, x, a, 1, 256, NULL, NULL, &e), MOE_EUNSUPPORTED,
	       "q8_k is not a weight type");
	is_int(moe_quant_rows(4, x, a, 1, 256, NULL, NULL, &e), MOE_EUNSUPPORTED, "unknown type");
	free(x), free(a), free(b);
}

/* All-zero and constant blocks, zero weights: decode to the input. */
static void test_degenerate(void)
{
	float x[256], y[256], w[256];
	uint8_t q[512];
	for (size_t k = 0; k < N_TYPES; k++) {
		int type = all_types[k];
		const moe_type_traits *t = moe_type_get(type);
		memset(x, 0, sizeof(x));
		memset(w, 0, sizeof(w));
		moe_quant_fn(type)(x, q, 256, w);
		t->to_float(q, y, 256);
		int bad = 0;
		for (int i = 0; i < 256; i++)
			bad += y[i] != 0.0f;
		ok(bad == 0, "%s: zeros stay zero (zero weights)", t->name);
	}
}

int main(void)
{
	test_exact();
	test_errors();
	test_threads();
	test_degenerate();
	return tap_done();
}
