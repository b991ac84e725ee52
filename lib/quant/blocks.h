/* quant/blocks.h — the byte layout of every quantised block (GGUF/ggml
 * compatible) and small helpers shared by the reference codecs and the
 * kernels.
 *
 * How to use: include after quant.h from library code that reads or writes
 * quantised data (lib/quant, lib/kernels).  The structs are packed so a block
 * may start at any byte offset (tensor data in a mapped file, a test buffer);
 * every layout has no padding, so packing changes only the alignment, never
 * the size, which the static assertions pin.  Multi-byte fields are little
 * endian, as on disk; the library only supports little-endian hosts.
 */
#ifndef MOE_QUANT_BLOCKS_H
#define MOE_QUANT_BLOCKS_H

#include <stdint.h>

#include "quant.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "moe quantised blocks assume a little-endian host"
#endif

#define MOE_PACKED __attribute__((packed))

/* Elements per block: 32 for the simple types, 256 for the K super-blocks. */
#define MOE_QK 32
#define MOE_QK_K 256
/* Bytes of packed 6-bit scales and mins in Q3_K/Q4_K/Q5_K. */
#define MOE_K_SCALE_SIZE 12

/* Q4_0: x = d * (q - 8), q in [0, 15].  Element j < 16 is the low nibble of
 * qs[j], element j + 16 the high nibble. */
typedef struct MOE_PACKED moe_block_q4_0 {
	uint16_t d; /* f16 scale */
	uint8_t qs[MOE_QK / 2];
} moe_block_q4_0;
_Static_assert(sizeof(moe_block_q4_0) == 18, "q4_0 block size");

/* Q4_1: x = d * q + m, q in [0, 15]; nibble order as Q4_0. */
typedef struct MOE_PACKED moe_block_q4_1 {
	uint16_t d; /* f16 scale */
	uint16_t m; /* f16 offset (the block minimum) */
	uint8_t qs[MOE_QK / 2];
} moe_block_q4_1;
_Static_assert(sizeof(moe_block_q4_1) == 20, "q4_1 block size");

/* Q5_0: x = d * (q - 16), q in [0, 31]: low four bits as Q4_0, bit 4 of
 * element j is bit j of the little-endian u32 qh. */
typedef struct MOE_PACKED moe_block_q5_0 {
	uint16_t d;
	uint8_t qh[4];
	uint8_t qs[MOE_QK / 2];
} moe_block_q5_0;
_Static_assert(sizeof(moe_block_q5_0) == 22, "q5_0 block size");

/* Q5_1: x = d * q + m, q in [0, 31]; bits as Q5_0. */
typedef struct MOE_PACKED moe_block_q5_1 {
	uint16_t d;
	uint16_t m;
	uint8_t qh[4];
	uint8_t qs[MOE_QK / 2];
} moe_block_q5_1;
_Static_assert(sizeof(moe_block_q5_1) == 24, "q5_1 block size");

/* Q8_0: x = d * q. */
typedef struct MOE_PACKED moe_block_q8_0 {
	uint16_t d;
	int8_t qs[MOE_QK];
} moe_block_q8_0;
_Static_assert(sizeof(moe_block_q8_0) == 34, "q8_0 block size");

/* Q8_0 in the R4 layout: block column b of four rows, their scales first
 * (moe_repack_group). */
typedef struct MOE_PACKED moe_block_q8_0x4 {
	uint16_t d[4];
	int8_t qs[4][MOE_QK];
} moe_block_q8_0x4;
_Static_assert(sizeof(moe_block_q8_0x4) == 4 * sizeof(moe_block_q8_0), "q8_0x4 block size");

/* Q8_1: x = d * q; s caches d * sum(q) for the Q4_1/Q5_1 dot products. */
typedef struct MOE_PACKED moe_block_q8_1 {
	uint16_t d;
	uint16_t s;
	int8_t qs[MOE_QK];
} moe_block_q8_1;
_Static_assert(sizeof(moe_block_q8_1) == 36, "q8_1 block size");

/* Q2_K: 16 groups of 16; scales[g] holds a 4-bit scale (low) and min (high):
 * x = d * sc * q - dmin * m, q in [0, 3].  See kquants.c for the bit order. */
typedef struct MOE_PACKED moe_block_q2_k {
	uint8_t scales[MOE_QK_K / 16];
	uint8_t qs[MOE_QK_K / 4];
	uint16_t d;
	uint16_t dmin;
} moe_block_q2_k;
_Static_assert(sizeof(moe_block_q2_k) == 84, "q2_k block size");

/* Q3_K: 16 groups of 16, 6-bit signed scales (stored + 32):
 * x = d * (sc - 32) * (q - 4), q in [0, 7] (low 2 bits in qs, bit 2 in hmask). */
typedef struct MOE_PACKED moe_block_q3_k {
	uint8_t hmask[MOE_QK_K / 8];
	uint8_t qs[MOE_QK_K / 4];
	uint8_t scales[MOE_K_SCALE_SIZE];
	uint16_t d;
} moe_block_q3_k;
_Static_assert(sizeof(moe_block_q3_k) == 110, "q3_k block size");

/* Q4_K: 8 groups of 32, 6-bit scale and min per group:
 * x = d * sc * q - dmin * m, q in [0, 15]. */
typedef struct MOE_PACKED moe_block_q4_k {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[MOE_K_SCALE_SIZE];
	uint8_t qs[MOE_QK_K / 2];
} moe_block_q4_k;
_Static_assert(sizeof(moe_block_q4_k) == 144, "q4_k block size");

/* Q4_K in the R4 layout: super-block column i of four rows, the scales of
 * all four (d, dmin, the packed 6-bit scales) before their codes
 * (moe_repack_group). */
typedef struct MOE_PACKED moe_block_q4_kx4 {
	uint16_t d[4];
	uint16_t dmin[4];
	uint8_t scales[4][MOE_K_SCALE_SIZE];
	uint8_t qs[4][MOE_QK_K / 2];
} moe_block_q4_kx4;
_Static_assert(sizeof(moe_block_q4_kx4) == 4 * sizeof(moe_block_q4_k), "q4_kx4 block size");

/* Q5_K: as Q4_K with a fifth bit per element in qh, q in [0, 31]. */
typedef struct MOE_PACKED moe_block_q5_k {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[MOE_K_SCALE_SIZE];
	uint8_t qh[MOE_QK_K / 8];
	uint8_t qs[MOE_QK_K / 2];
} moe_block_q5_k;
_Static_assert(sizeof(moe_block_q5_k) == 176, "q5_k block size");

/* Q6_K: 16 groups of 16, signed 8-bit scales: x = d * sc * (q - 32),
 * q in [0, 63] (low 4 bits in ql, high 2 bits in qh). */
typedef struct MOE_PACKED moe_block_q6_k {
	uint8_t ql[MOE_QK_K / 2];
	uint8_t qh[MOE_QK_K / 4];
	int8_t scales[MOE_QK_K / 16];
	uint16_t d;
} moe_block_q6_k;
_Static_assert(sizeof(moe_block_q6_k) == 210, "q6_k block size");

/* Q8_K: the activation type of the K-quants: x = d * q with an f32 scale;
 * bsums[g] = sum of q over elements 16g .. 16g+15. */
typedef struct MOE_PACKED moe_block_q8_k {
	float d;
	int8_t qs[MOE_QK_K];
	int16_t bsums[MOE_QK_K / 16];
} moe_block_q8_k;
_Static_assert(sizeof(moe_block_q8_k) == 292, "q8_k block size");

/* IQ4_NL: x = d * moe_kvalues_iq4nl[q]; nibble order as Q4_0. */
typedef struct MOE_PACKED moe_block_iq4_nl {
	uint16_t d;
	uint8_t qs[MOE_QK / 2];
} moe_block_iq4_nl;
_Static_assert(sizeof(moe_block_iq4_nl) == 18, "iq4_nl block size");

/* IQ4_XS: 8 groups of 32 sharing the IQ4_NL code book, each with a 6-bit
 * scale (stored + 32): low 4 bits in scales_l (nibble g%2 of byte g/2), high
 * 2 bits at bit 2g of scales_h.  x = d * (ls - 32) * kvalues[q]. */
typedef struct MOE_PACKED moe_block_iq4_xs {
	uint16_t d;
	uint16_t scales_h;
	uint8_t scales_l[MOE_QK_K / 64];
	uint8_t qs[MOE_QK_K / 2];
} moe_block_iq4_xs;
_Static_assert(sizeof(moe_block_iq4_xs) == 136, "iq4_xs block size");

/* MXFP4 (OCP microscaling): 32 FP4 E2M1 values with one E8M0 exponent.
 * ggml stores the FP4 values doubled (moe_kvalues_mxfp4, integers) and
 * halves the scale instead: x = kvalues[q] * 2^(e - 128).  Nibble order as
 * Q4_0. */
typedef struct MOE_PACKED moe_block_mxfp4 {
	uint8_t e;
	uint8_t qs[MOE_QK / 2];
} moe_block_mxfp4;
_Static_assert(sizeof(moe_block_mxfp4) == 17, "mxfp4 block size");

/* The non-linear 4-bit code book of IQ4_NL and IQ4_XS. */
extern const int8_t moe_kvalues_iq4nl[16];
/* FP4 E2M1 values times two: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives. */
extern const int8_t moe_kvalues_mxfp4[16];

/* 2^(e - 128): half the E8M0 scale, matching the doubled FP4 table.  e = 0
 * and 1 give the subnormals 2^-128 and 2^-127; e = 255 (NaN in the OCP
 * spec) decodes as 2^127 like ggml does. */
static inline float moe_e8m0_to_f32_half(uint8_t e)
{
	uint32_t bits = e < 2 ? (uint32_t)0x00200000 << e : (uint32_t)(e - 1) << 23;
	float f;
	__builtin_memcpy(&f, &bits, sizeof(f));
	return f;
}

/* Scale (6 bits) and min (6 bits) of group g in [0, 8) of the 12 packed
 * bytes of Q4_K/Q5_K: groups 0-3 use the low 6 bits of bytes g and g+4;
 * groups 4-7 take their low nibbles from byte g+4 and their top 2 bits from
 * the spare top bits of bytes g-4 (scale) and g (min). */
static inline void moe_k4_scale_min(const uint8_t *s, int g, uint8_t *sc, uint8_t *m)
{
	if (g < 4) {
		*sc = s[g] & 63;
		*m = s[g + 4] & 63;
	} else {
		*sc = (uint8_t)((s[g + 4] & 0x0F) | ((s[g - 4] >> 6) << 4));
		*m = (uint8_t)((s[g + 4] >> 4) | ((s[g] >> 6) << 4));
	}
}

/* Stored 6-bit scale (0..63, still biased by 32) of group g in [0, 16) of
 * Q3_K: low nibble from byte g (g < 8) or the high nibble of byte g-8; the
 * top 2 bits from byte 8 + g%4 at bit 2*(g/4). */
static inline int moe_k3_scale(const uint8_t *s, int g)
{
	int lo = g < 8 ? s[g] & 0x0F : s[g - 8] >> 4;
	int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
	return lo | hi << 4;
}

/* Round to nearest, ties to even (the default FP environment), as an int;
 * callers keep |x| well inside the int range. */
static inline int moe_nearest_int(float x)
{
	return (int)__builtin_lrintf(x);
}

/* ------------------------------------------------ reference codecs
 * Reached through moe_type_get(); declared here for the traits table and for
 * kernels that want to call a reference directly.  n is a multiple of the
 * type's block size (a trailing partial block is ignored). */
#define MOE_QUANT_CODEC(name)                                                  \
	void moe_##name##_to_float(const void *src, float *dst, int64_t n);    \
	void moe_##name##_from_float(const float *src, void *dst, int64_t n)

MOE_QUANT_CODEC(q4_0);
MOE_QUANT_CODEC(q4_1);
MOE_QUANT_CODEC(q5_0);
MOE_QUANT_CODEC(q5_1);
MOE_QUANT_CODEC(q8_0);
MOE_QUANT_CODEC(q8_1);
MOE_QUANT_CODEC(iq4_nl);
MOE_QUANT_CODEC(mxfp4);
MOE_QUANT_CODEC(q4_k);
MOE_QUANT_CODEC(q5_k);
MOE_QUANT_CODEC(q6_k);
MOE_QUANT_CODEC(q8_k);
/* Decoders only (no reference quantiser yet). */
void moe_q2_k_to_float(const void *src, float *dst, int64_t n);
void moe_q3_k_to_float(const void *src, float *dst, int64_t n);
void moe_iq4_xs_to_float(const void *src, float *dst, int64_t n);

#endif
