/* kernels/repack_avx512.c — the repacked-layout products at the AVX-512
 * level.
 *
 * Each output runs avx512.c's plain Q8_0 float sequence (q8_0_tile):
 * sixteen partials, lane j taking the blocks b with b % 16 == j,
 * acc = fma(float(S_b), dw_b * dx_b, acc), then hsum16 in the same tree; so
 * a repacked model's results are the plain model's bits.  Q4_K runs the
 * K-quant order both x86 levels share (repack_x86.h).
 */
#include <config.h>

#include "kernels/repack_x86.h"

INLINE void q8_0_r4_tile(const moe_block_q8_0x4 *g, const moe_block_q8_0 *y, int64_t nb,
			 float out[4])
{
	__m512 acc[4];
	for (int i = 0; i < 4; i++)
		acc[i] = _mm512_setzero_ps();
	for (int64_t b0 = 0; b0 < nb; b0 += 16) {
		const int nv = nb - b0 < 16 ? (int)(nb - b0) : 16;
		const int nv1 = nv > 8 ? nv - 8 : 0;
		uint16_t h[16];
		rp_act_scales(y, b0, nv, h, 16);
		const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)h));
		for (int i = 0; i < 4; i++) {
			rp_row_scales(g, i, b0, nv, h, 16);
			__m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)h));
			__m256i lo = rp_q8_0_sums8(g, i, y, b0, nv < 8 ? nv : 8);
			__m256i hi = nv1 ? rp_q8_0_sums8(g, i, y, b0 + 8, nv1) : _mm256_setzero_si256();
			__m512i S = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
			acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, dx), acc[i]);
		}
	}
	for (int i = 0; i < 4; i++)
		out[i] = hsum16(acc[i]);
}
MOE_REPACK_R4_GEMM(q8_0_r4_gemm, moe_block_q8_0x4, moe_block_q8_0, MOE_QK, q8_0_r4_tile)

/* Q4_K: the K-quant order ("the K-quant reduction order" in avx512.c). */
MOE_REPACK_R4_GEMM(q4_k_r4_gemm, moe_block_q4_kx4, moe_block_q8_k, MOE_QK_K, rp_q4_k_r4_tile)

void moe_repack_fill_avx512(moe_kernels *k)
{
	k->gemm[MOE_Q8_0_R4] = q8_0_r4_gemm;
	k->gemm[MOE_Q4_K_R4] = q4_k_r4_gemm;
}
