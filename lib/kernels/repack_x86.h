/* kernels/repack_x86.h — what the AVX2 and AVX-512 repacked-layout kernels
 * (repack_avx2.c, repack_avx512.c) share: the exact integer block sums of
 * one row of a Q8_0 R4 group, eight blocks at a time.  Integer sums are
 * exact in any order, so how they are formed does not affect the results;
 * only the float sequence each file reproduces from its level's plain
 * kernel does.  Compiled with AVX2 (or more) enabled.
 */
#ifndef MOE_REPACK_X86_H
#define MOE_REPACK_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_int.h"

#define INLINE static inline __attribute__((always_inline))

/* sum w_j x_j per 32-bit lane for signed codes (|w| <= 128, |x| <= 127):
 * |w| unsigned with the sign moved onto x keeps vpmaddubsw's pairs exact. */
INLINE __m256i rp_dot_s8(__m256i w, __m256i x)
{
	__m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Lane j: the sum of the lanes of p[j]. */
INLINE __m256i rp_sum8(const __m256i p[8])
{
	__m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
	__m256i h2 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
	return _mm256_add_epi32(_mm256_permute2x128_si256(h1, h2, 0x20),
				_mm256_permute2x128_si256(h1, h2, 0x31));
}

/* Row i of group g, blocks b0 .. b0+nv-1 (nv <= 8) against the activation
 * blocks y: lane j = S_{b0+j}, lanes from nv on zero. */
INLINE __m256i rp_q8_0_sums8(const moe_block_q8_0x4 *g, int i, const moe_block_q8_0 *y,
			     int64_t b0, int nv)
{
	__m256i p[8];
	for (int j = 0; j < 8; j++)
		p[j] = j < nv ? rp_dot_s8(_mm256_loadu_si256((const void *)g[b0 + j].qs[i]),
					  _mm256_loadu_si256((const void *)y[b0 + j].qs))
			      : _mm256_setzero_si256();
	return rp_sum8(p);
}

/* f16 scales of row i (or the activations, y) for blocks b0 .. b0+nv-1,
 * as uint16 with zeros from nv on (n of them). */
INLINE void rp_row_scales(const moe_block_q8_0x4 *g, int i, int64_t b0, int nv, uint16_t *h,
			  int n)
{
	for (int j = 0; j < n; j++)
		h[j] = j < nv ? g[b0 + j].d[i] : 0;
}
INLINE void rp_act_scales(const moe_block_q8_0 *y, int64_t b0, int nv, uint16_t *h, int n)
{
	for (int j = 0; j < n; j++)
		h[j] = j < nv ? y[b0 + j].d : 0;
}

#endif
