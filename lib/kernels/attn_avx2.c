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

/* The F16 cache write (attn_tile.h's ATTN_F16_STORE): ATTN_VW floats to
 * halves with vcvtps2ph, rounding to nearest even. */
#define ATTN_F16_STORE moe_f16_store_avx2
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define f16_vstore(x, y) \
	_mm_storeu_si128((__m128i *)(y), _mm256_cvtps_ph(_mm256_loadu_ps(x), F16_RNE))

#include "kernels/attn_tile.h"
