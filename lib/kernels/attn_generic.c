/* kernels/attn_generic.c — the tiled attention kernel (attn_tile.h) in
 * portable C: vectors of 4 floats, multiply and add unfused.  The reference
 * the SIMD levels are tested against, and the attention of every CPU
 * without AVX2. */
#include "kernels/kernels_int.h"

#define ATTN_VW 4
#define ATTN_NAME moe_attn_generic
#define VSPLAT(x) ((vf){(x), (x), (x), (x)})
#define VFMA(a, b, c) ((a) * (b) + (c))

static void f16_row(const uint16_t *src, float *dst, int n)
{
	for (int i = 0; i < n; i++)
		dst[i] = moe_f16_to_f32(src[i]);
}

#include "kernels/attn_tile.h"

void moe_f16_store_generic(const float *x, uint16_t *y, int64_t n, int64_t ystride)
{
	for (int64_t i = 0; i < n; i++)
		y[i * ystride] = moe_f32_to_f16(x[i]);
}

size_t moe_attn_work_bytes(int head_dim, int head_dim_v, int block_tokens, int max_rows)
{
	size_t ktw = ROUND((size_t)block_tokens), vw = ROUND((size_t)head_dim_v);
	size_t floats = (size_t)head_dim * ktw + ktw * vw + 4 * ktw + (size_t)max_rows * (vw + 2);
	return floats * sizeof(float) + 64;
}
