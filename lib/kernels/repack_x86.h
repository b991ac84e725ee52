/* kernels/repack_x86.h — what the AVX2 and AVX-512 repacked-layout kernels
 * (repack_avx2.c, repack_avx512.c) share: the exact integer block sums of
 * one row of a Q8_0 R4 group (eight blocks at a time), the exact isum and
 * msum of one row of a Q4_K R4 super-block column, and the K-quant float
 * step both levels' plain kernels use.  Integer sums are
 * exact in any order, so how they are formed does not affect the results;
 * only the float sequence each file reproduces from its level's plain
 * kernel does.  Compiled with AVX2 (or more) enabled.
 */
#ifndef MOE_REPACK_X86_H
#define MOE_REPACK_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/hsum_x86.h"
#include "kernels/kernels_int.h"
#include "kernels/repack_loop.h"

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

INLINE int32_t rp_hsum8i(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(s);
}

/* Row i of Q4_K column c against y: isum = sum_g sc_g dot_g (each 64
 * elements j: low nibbles group 2j, high nibbles 2j+1) and msum = sum_g m_g
 * bsum_g.  Pairs of vpmaddubsw are at most 2 * 15 * 128, so exact. */
INLINE void rp_q4_k_sums(const moe_block_q4_kx4 *c, int i, const moe_block_q8_k *y,
			 int32_t *isum, int32_t *msum)
{
	uint32_t sm[4];
	moe_k4_unpack_scales(c->scales[i], sm);
	const uint8_t *sc = (const uint8_t *)sm, *mn = (const uint8_t *)sm + 8;
	const __m256i low = _mm256_set1_epi8(0x0F);
	__m256i acc = _mm256_setzero_si256();
	for (int j = 0; j < 4; j++) {
		__m256i q = _mm256_loadu_si256((const void *)(c->qs[i] + 32 * j));
		__m256i ql = _mm256_and_si256(q, low);
		__m256i qh = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
		__m256i a0 = _mm256_loadu_si256((const void *)(y->qs + 64 * j));
		__m256i a1 = _mm256_loadu_si256((const void *)(y->qs + 64 * j + 32));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(ql, a0),
							      _mm256_set1_epi16(sc[2 * j])));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(qh, a1),
							      _mm256_set1_epi16(sc[2 * j + 1])));
	}
	*isum = rp_hsum8i(acc);
	int32_t m = 0;
	for (int g = 0; g < 8; g++)
		m += mn[g] * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
	*msum = m;
}

/* The K-quant float step of avx2.c (ksb_step) and avx512.c: acc =
 * fma(isum, d dy, acc), then fnmadd(msum, dmin dy, acc). */
INLINE float rp_ksb_step(float acc, int32_t isum, int32_t msum, float d, float dmin, float dy)
{
	acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), isum),
					 _mm_mul_ss(_mm_set_ss(d), _mm_set_ss(dy)), _mm_set_ss(acc)));
	return _mm_cvtss_f32(_mm_fnmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), msum),
					   _mm_mul_ss(_mm_set_ss(dmin), _mm_set_ss(dy)),
					   _mm_set_ss(acc)));
}

/* One group by one token over Q4_K R4 with the K-quant order (both x86
 * levels; the loop around it is repack_loop.h's). */
INLINE void rp_q4_k_r4_tile(const moe_block_q4_kx4 *g, const moe_block_q8_k *y, int64_t nb,
			    float acc[4])
{
	for (int i = 0; i < 4; i++)
		acc[i] = 0.0f;
	for (int64_t b = 0; b < nb; b++)
		for (int i = 0; i < 4; i++) {
			int32_t is, ms;
			rp_q4_k_sums(&g[b], i, &y[b], &is, &ms);
			acc[i] = rp_ksb_step(acc[i], is, ms, moe_f16_to_f32(g[b].d[i]),
					     moe_f16_to_f32(g[b].dmin[i]), y[b].d);
		}
}

#endif
