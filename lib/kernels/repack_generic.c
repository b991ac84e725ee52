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

/* generic.c's Q4_K order: acc += dy * (d * isum - dmin * msum), super-block
 * after super-block. */
static void q4_k_r4_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			 size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / MOE_QK_K;

	for (int r = 0; r + 4 <= nr; r += 4) {
		const moe_block_q4_kx4 *g = (const void *)((const uint8_t *)w + (size_t)r * ldw);
		for (int t = 0; t < nt; t++) {
			const moe_block_q8_k *y = (const void *)((const uint8_t *)x + (size_t)t * ldx);
			float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
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
			for (int i = 0; i < 4; i++)
				s[(size_t)t * lds + (size_t)r + i] = acc[i];
		}
	}
}

void moe_repack_fill_generic(moe_kernels *k)
{
	k->gemm[MOE_Q8_0_R4] = q8_0_r4_gemm;
	k->gemm[MOE_Q4_K_R4] = q4_k_r4_gemm;
}
