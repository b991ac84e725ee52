/* kernels/repack_generic.c — products over the repacked (row-interleaved)
 * layouts in plain C: the reference the SIMD levels are tested against, and
 * what every level uses for a repacked type it has no kernel of its own for.
 *
 * A repacked matrix (quant.h, moe_repack_*) keeps four rows per group, one
 * block column after another, so these kernels are only gemms (four rows
 * per pass; nr is always a multiple of four: the loader accepts the layout
 * only for such matrices and moe_matmul splits rows in multiples of four).
 * Each output runs exactly the float sequence of this level's plain vec_dot
 * (generic.c), so a repacked model's logits are the plain model's bits.
 */
#include <config.h>

#include "kernels/kernels_int.h"
#include "kernels/repack_loop.h"

#define H2F(h) moe_f16_to_f32(h)

/* generic.c's Q8_0 order: acc += dw * dx * S_b, block after block. */
static inline __attribute__((always_inline)) void
q8_0_r4_tile(const moe_block_q8_0x4 *g, const moe_block_q8_0 *y, int64_t nb, float acc[4])
{
	for (int i = 0; i < 4; i++)
		acc[i] = 0.0f;
	for (int64_t b = 0; b < nb; b++)
		for (int i = 0; i < 4; i++) {
			int sum = 0;
			for (int j = 0; j < MOE_QK; j++)
				sum += g[b].qs[i][j] * y[b].qs[j];
			acc[i] += H2F(g[b].d[i]) * H2F(y[b].d) * (float)sum;
		}
}
MOE_REPACK_R4_GEMM(q8_0_r4_gemm, moe_block_q8_0x4, moe_block_q8_0, MOE_QK, q8_0_r4_tile)

/* generic.c's Q4_K order: acc += dy * (d * isum - dmin * msum), super-block
 * after super-block. */
static inline __attribute__((always_inline)) void
q4_k_r4_tile(const moe_block_q4_kx4 *g, const moe_block_q8_k *y, int64_t nb, float acc[4])
{
	for (int i = 0; i < 4; i++)
		acc[i] = 0.0f;
	for (int64_t b = 0; b < nb; b++)
		for (int i = 0; i < 4; i++) {
			int32_t sumi = 0, summ = 0;
			for (int q = 0; q < 8; q++) {
				uint8_t sc, m;
				moe_k4_scale_min(g[b].scales[i], q, &sc, &m);
				const uint8_t *c = g[b].qs[i] + 32 * (q / 2);
				const int8_t *a = y[b].qs + 32 * q;
				int shift = 4 * (q % 2), sum = 0;
				for (int l = 0; l < 32; l++)
					sum += ((c[l] >> shift) & 0x0F) * a[l];
				sumi += sc * sum;
				summ += m * (y[b].bsums[2 * q] + y[b].bsums[2 * q + 1]);
			}
			acc[i] += y[b].d * (H2F(g[b].d[i]) * (float)sumi -
					    H2F(g[b].dmin[i]) * (float)summ);
		}
}
MOE_REPACK_R4_GEMM(q4_k_r4_gemm, moe_block_q4_kx4, moe_block_q8_k, MOE_QK_K, q4_k_r4_tile)

void moe_repack_fill_generic(moe_kernels *k)
{
	k->gemm[MOE_Q8_0_R4] = q8_0_r4_gemm;
	k->gemm[MOE_Q4_K_R4] = q4_k_r4_gemm;
}
