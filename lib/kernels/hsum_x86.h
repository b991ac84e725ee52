/* kernels/hsum_x86.h — the horizontal sums the x86 kernels share.  Their
 * trees are part of each level's fixed reduction order: a repacked product
 * (repack_*.c) gives its plain kernel's bits only if it ends with the same
 * tree, so every file takes them from here.  For files compiled with AVX2
 * enabled; hsum16 only where AVX-512F is. */
#ifndef MOE_HSUM_X86_H
#define MOE_HSUM_X86_H

#include <immintrin.h>

/* Lanes j + j+4, then + j+2, then the two that are left. */
static inline __attribute__((always_inline)) float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) int hsum8i(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(s);
}

#ifdef __AVX512F__
/* The sum of 16 partials in the fixed tree: lanes j + j+8, then + j+4,
 * then + j+2, then the two that are left. */
static inline __attribute__((always_inline)) float hsum16(__m512 v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
				 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
	return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}
#endif

#endif
