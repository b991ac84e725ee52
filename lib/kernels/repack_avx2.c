/* kernels/repack_avx2.c — the repacked-layout products at the AVX2 level.
 *
 * Each output runs avx2.c's plain Q8_0 float sequence (its "reduction
 * order" comment): eight partials, lane j taking the blocks b with
 * b % 8 == j, P = fma(float(S_b), dw_b * dx_b, P), then hsum8 in the same
 * tree; so a repacked model's results are the plain model's bits.  The
 * weights of a four-row group are one contiguous stream.  Q4_K runs the
 * K-quant order both x86 levels share (repack_x86.h).
 */
#include <config.h>

#include "kernels/repack_x86.h"

INLINE void q8_0_r4_tile(const moe_block_q8_0x4 *g, const moe_block_q8_0 *y, int64_t nb,
			 float out[4])
{
	__m256 P[4];
	for (int i = 0; i < 4; i++)
		P[i] = _mm256_setzero_ps();
	for (int64_t b0 = 0; b0 < nb; b0 += 8) {
		const int nv = nb - b0 < 8 ? (int)(nb - b0) : 8;
		uint16_t h[8];
		rp_act_scales(y, b0, nv, h, 8);
		const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const void *)h));
		for (int i = 0; i < 4; i++) {
			rp_row_scales(g, i, b0, nv, h, 8);
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const void *)h));
			__m256i S = rp_q8_0_sums8(g, i, y, b0, nv);
			P[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(dw, dx), P[i]);
		}
	}
	for (int i = 0; i < 4; i++)
		out[i] = hsum8(P[i]);
}
MOE_REPACK_R4_GEMM(q8_0_r4_gemm, moe_block_q8_0x4, moe_block_q8_0, MOE_QK, q8_0_r4_tile)

/* Q4_K: the K-quant order ("the K-quant reduction order" in avx2.c). */
MOE_REPACK_R4_GEMM(q4_k_r4_gemm, moe_block_q4_kx4, moe_block_q8_k, MOE_QK_K, rp_q4_k_r4_tile)

void moe_repack_fill_avx2(moe_kernels *k)
{
	k->gemm[MOE_Q8_0_R4] = q8_0_r4_gemm;
	k->gemm[MOE_Q4_K_R4] = q4_k_r4_gemm;
}
