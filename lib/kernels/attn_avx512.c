/* kernels/attn_avx512.c — the tiled attention kernel (attn_tile.h) with
 * AVX-512F: vectors of 16 floats, fused multiply-add, F16 keys and values
 * decoded with vcvtph2ps.  Compiled with $(AVX512_CFLAGS). */
#include <immintrin.h>

#include "kernels/kernels_int.h"

#define ATTN_VW 16
#define ATTN_NAME moe_attn_avx512
#define VSPLAT(x) ((vf)_mm512_set1_ps(x))
#define VFMA(a, b, c) ((vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))

static void f16_row(const uint16_t *src, float *dst, int n)
{
	int i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
	for (; i < n; i++)
		dst[i] = _cvtsh_ss(src[i]);
}

/* ATTN_VW keys of one dimension straight from the F16 cache: attn_tile.h
 * converts keys in the score loop for tiles of one group of rows. */
#define ATTN_F16_KEYS 1
#define f16_vload(p) ((vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p))))

/* The F16 cache write (attn_tile.h's ATTN_F16_STORE): ATTN_VW floats to
 * halves with vcvtps2ph, rounding to nearest even. */
#define ATTN_F16_STORE moe_f16_store_avx512
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define f16_vstore(x, y) \
	_mm256_storeu_si256((__m256i *)(y), _mm512_cvtps_ph(_mm512_loadu_ps(x), F16_RNE))

#include "kernels/attn_tile.h"
