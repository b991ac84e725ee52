/* kernels/kernels_int.h — what the per-ISA kernel files share with the
 * dispatcher (kernels.c): each fills a moe_kernels table, overriding only the
 * entries it implements, so every type falls back to the generic kernel.
 *
 * The SIMD files are compiled with their ISA's flags (kernels.mk); their
 * fill functions may themselves use those instructions, so the dispatcher
 * calls them only after checking the CPU.
 */
#ifndef MOE_KERNELS_INT_H
#define MOE_KERNELS_INT_H

#include "kernels.h"
#include "quant/blocks.h"

void moe_kernels_fill_generic(moe_kernels *k);
void moe_kernels_fill_avx2(moe_kernels *k);
void moe_kernels_fill_avx512(moe_kernels *k);
void moe_kernels_fill_avxvnni(moe_kernels *k);
void moe_kernels_fill_avx512bf16(moe_kernels *k);
/* The repacked-layout kernels per level (repack_*.c) */
void moe_repack_fill_generic(moe_kernels *k);
void moe_repack_fill_avx2(moe_kernels *k);
void moe_repack_fill_avx512(moe_kernels *k);
/* The attention tile per level (attn_*.c) */
void moe_attn_generic(const moe_attn_tile *t);
void moe_attn_avx2(const moe_attn_tile *t);
void moe_attn_avx512(const moe_attn_tile *t);
/* The F16 cache write per level (attn_*.c; kernels.c puts it in the table) */
void moe_f16_store_generic(const float *x, uint16_t *y, int64_t n, int64_t ystride);
void moe_f16_store_avx2(const float *x, uint16_t *y, int64_t n, int64_t ystride);
void moe_f16_store_avx512(const float *x, uint16_t *y, int64_t n, int64_t ystride);

/* A 64-byte aligned buffer of at least `size` bytes owned by the calling
 * thread (freed when it ends; the next call may move it), or NULL when it
 * cannot be had: the tiled kernels then fall back to their untiled form,
 * which gives the same results. */
void *moe_kernels_work_buffer(size_t size);

/* Q4_K/Q5_K scales and mins of one super-block as two 8-byte arrays
 * (sc[0..7], m[0..7]) from the 12 packed bytes, with word arithmetic: the
 * low 6 bits of bytes 0-7 hold groups 0-3, bytes 8-11 the low nibbles of
 * groups 4-7 whose top two bits are the spare bits 6-7 of bytes 0-7. */
static inline void moe_k4_unpack_scales(const uint8_t *s, uint32_t out[4])
{
	uint32_t a, b, c;
	__builtin_memcpy(&a, s, 4);
	__builtin_memcpy(&b, s + 4, 4);
	__builtin_memcpy(&c, s + 8, 4);
	out[0] = a & 0x3F3F3F3F;                                /* sc 0-3 */
	out[1] = (c & 0x0F0F0F0F) | ((a >> 2) & 0x30303030);    /* sc 4-7 */
	out[2] = b & 0x3F3F3F3F;                                /* m 0-3 */
	out[3] = ((c >> 4) & 0x0F0F0F0F) | ((b >> 2) & 0x30303030); /* m 4-7 */
}

#endif
