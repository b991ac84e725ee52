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

#define H2F(h) moe_f16_to_f32(h)

/* generic.c's Q8_0 order: acc += dw * dx * S_b, block after block. */
static void q8_0_r4_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			 size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / MOE_QK;

	for (int r = 0; r + 4 <= nr; r += 4) {
		const moe_block_q8_0x4 *g = (const void *)((const uint8_t *)w + (size_t)r * ldw);
		for (int t = 0; t < nt; t++) {
			const moe_block_q8_0 *y = (const void *)((const uint8_t *)x + (size_t)t * ldx);
			float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
			for (int64_t b = 0; b < nb; b++)
				for (int i = 0; i < 4; i++) {
					int sum = 0;
					for (int j = 0; j < MOE_QK; j++)
						sum += g[b].qs[i][j] * y[b].qs[j];
					acc[i] += H2F(g[b].d[i]) * H2F(y[b].d) * (float)sum;
				}
			for (int i = 0; i < 4; i++)
				s[(size_t)t * lds + (size_t)r + i] = acc[i];
		}
	}
}

void moe_repack_fill_generic(moe_kernels *k)
{
	k->gemm[MOE_Q8_0_R4] = q8_0_r4_gemm;
}
