/* kernels/attn_avx2.c — the tiled attention kernel (attn_tile.h) with
 * AVX2/FMA/F16C: vectors of 8 floats, fused multiply-add, F16 keys and
 * values decoded with vcvtph2ps.  Compiled with $(AVX2_CFLAGS). */
#include <immintrin.h>

#include "kernels/kernels_int.h"

#define ATTN_VW 8
#define ATTN_VACC 8
#define ATTN_GROUP4 1
#define ATTN_NAME moe_attn_avx2
#define VSPLAT(x) ((vf)_mm256_set1_ps(x))
#define VFMA(a, b, c) ((vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))

static void f16_row(const uint16_t *src, float *dst, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	for (; i < n; i++)
		dst[i] = _cvtsh_ss(src[i]);
}

/* ATTN_VW keys of one dimension straight from the F16 cache: attn_tile.h
 * converts keys in the score loop for tiles of one group of rows. */
#define ATTN_F16_KEYS 1
#define f16_vload(p) ((vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))

#include "kernels/attn_tile.h"

/* vcvtps2ph rounds to nearest even, gives infinity past 65520, half
 * subnormals whatever MXCSR.FTZ says, and quiets a NaN keeping its top
 * payload bits: moe_f32_to_f16's rules (t-attn checks every level). */
#define MOE_CVT_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

void moe_f16_store_avx2(const float *x, uint16_t *y, int64_t n, int64_t ystride)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), MOE_CVT_RNE);
		if (ystride == 1) {
			_mm_storeu_si128((__m128i *)(y + i), h);
		} else {
			uint16_t tmp[8];
			memcpy(tmp, &h, sizeof tmp);
			for (int j = 0; j < 8; j++)
				y[(i + j) * ystride] = tmp[j];
		}
	}
	for (; i < n; i++)
		y[i * ystride] = moe_f32_to_f16(x[i]);
}
