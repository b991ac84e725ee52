/* types.c — the dtype traits table, name and size look-ups, the half and
 * bfloat16 scalar conversions and the codecs of the plain (unquantised)
 * types.  The block codecs live in legacy.c (32-element blocks) and
 * kquants.c (256-element super-blocks).
 */
#include <string.h>
#include <strings.h>

#include "quant.h"
#include "quant/blocks.h"

/* ------------------------------------------------- scalar conversions */

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

float moe_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1F;
	uint32_t man = h & 0x3FF;

	if (exp == 0x1F) /* inf, or NaN with its payload (and quiet bit) kept */
		return bits_f32(sign | 0x7F800000 | man << 13);
	if (exp == 0) {
		if (man == 0)
			return bits_f32(sign);
		/* Subnormal man * 2^-24: normalise, as every half subnormal is
		 * a normal float. */
		exp = 127 - 14;
		while (!(man & 0x400)) {
			man <<= 1;
			exp--;
		}
		return bits_f32(sign | exp << 23 | (man & 0x3FF) << 13);
	}
	return bits_f32(sign | (exp + 127 - 15) << 23 | man << 13);
}

uint16_t moe_f32_to_f16(float f)
{
	uint32_t x = f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t h, rem;

	x &= 0x7FFFFFFF;
	if (x > 0x7F800000) /* NaN: keep it quiet and keep the top payload bits */
		return sign | 0x7E00 | (uint16_t)((x >> 13) & 0x3FF);
	/* 65520 is the midpoint between 65504 (odd mantissa) and 65536:
	 * from there on everything rounds to infinity. */
	if (x >= 0x477FF000)
		return sign | 0x7C00;
	if (x < 0x38800000) { /* below 2^-14: a half subnormal or zero */
		uint32_t e = x >> 23, man = (x & 0x7FFFFF) | 0x800000, shift;
		if (e < 102) /* below 2^-25: rounds to zero */
			return sign;
		/* value = man * 2^(e-150); in units of 2^-24 that is
		 * man >> (126 - e), shift in [14, 24]. */
		shift = 126 - e;
		h = man >> shift;
		rem = man & ((1u << shift) - 1);
		if (rem > 1u << (shift - 1) || (rem == 1u << (shift - 1) && (h & 1)))
			h++; /* may carry into the smallest normal: still right */
		return sign | (uint16_t)h;
	}
	h = (x - ((uint32_t)(127 - 15) << 23)) >> 13;
	rem = x & 0x1FFF;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++; /* a carry into the exponent is the correct result */
	return sign | (uint16_t)h;
}

float moe_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t moe_f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);

	/* Truncating a NaN whose payload sits in the low half would give inf:
	 * force the quiet bit. */
	if ((x & 0x7FFFFFFF) > 0x7F800000)
		return (uint16_t)((x >> 16) | 0x0040);
	x += 0x7FFF + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

/* ------------------------------------------------------ plain codecs */

/* Source data may sit at any byte offset of a mapped file, so elements are
 * loaded with memcpy (which compiles to plain loads). */

static void f32_to_float(const void *src, float *dst, int64_t n)
{
	if (n > 0)
		memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f32_from_float(const float *src, void *dst, int64_t n)
{
	if (n > 0)
		memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		dst[i] = moe_f16_to_f32(h);
	}
}

static void f16_from_float(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h = moe_f32_to_f16(src[i]);
		memcpy(p + 2 * i, &h, 2);
	}
}

static void bf16_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		dst[i] = moe_bf16_to_f32(h);
	}
}

static void bf16_from_float(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h = moe_f32_to_bf16(src[i]);
		memcpy(p + 2 * i, &h, 2);
	}
}

static void f64_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		double v;
		memcpy(&v, p + 8 * i, 8);
		dst[i] = (float)v;
	}
}

static void f64_from_float(const float *src, void *dst, int64_t n)
{
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		double v = src[i];
		memcpy(p + 8 * i, &v, 8);
	}
}

/* Integer tensors (token ids, positions, masks) decode to their values as
 * float; large i32/i64 values round to the nearest float. */
#define MOE_INT_TO_FLOAT(fn, type)                                             \
	static void fn(const void *src, float *dst, int64_t n)                 \
	{                                                                      \
		const uint8_t *p = src;                                        \
		for (int64_t i = 0; i < n; i++) {                              \
			type v;                                                \
			memcpy(&v, p + sizeof(type) * i, sizeof(type));        \
			dst[i] = (float)v;                                     \
		}                                                              \
	}

MOE_INT_TO_FLOAT(i8_to_float, int8_t)
MOE_INT_TO_FLOAT(i16_to_float, int16_t)
MOE_INT_TO_FLOAT(i32_to_float, int32_t)
MOE_INT_TO_FLOAT(i64_to_float, int64_t)

/* ------------------------------------------------------------- table */

/* Indexed by the on-disk id; holes (ids ggml uses for types we do not
 * support, e.g. the removed Q4_2/Q4_3 at 4 and 5) stay zeroed, i.e.
 * name == NULL, and moe_type_get() reports them as unknown. */
static const moe_type_traits traits[MOE_DTYPE_MAX] = {
	[MOE_F32] = {
		.name = "f32", .block_size = 1, .type_size = 4,
		.to_float = f32_to_float, .from_float = f32_from_float,
		.vec_dot_type = MOE_F32,
	},
	[MOE_F16] = {
		.name = "f16", .block_size = 1, .type_size = 2,
		.to_float = f16_to_float, .from_float = f16_from_float,
		.vec_dot_type = MOE_F32,
	},
	[MOE_BF16] = {
		.name = "bf16", .block_size = 1, .type_size = 2,
		.to_float = bf16_to_float, .from_float = bf16_from_float,
		.vec_dot_type = MOE_F32,
	},
	[MOE_F64] = {
		.name = "f64", .block_size = 1, .type_size = 8,
		.to_float = f64_to_float, .from_float = f64_from_float,
		.vec_dot_type = MOE_F32,
	},
	/* Integer types are never matmul weights; F32 is a placeholder. */
	[MOE_I8] = {
		.name = "i8", .block_size = 1, .type_size = 1,
		.to_float = i8_to_float, .vec_dot_type = MOE_F32,
	},
	[MOE_I16] = {
		.name = "i16", .block_size = 1, .type_size = 2,
		.to_float = i16_to_float, .vec_dot_type = MOE_F32,
	},
	[MOE_I32] = {
		.name = "i32", .block_size = 1, .type_size = 4,
		.to_float = i32_to_float, .vec_dot_type = MOE_F32,
	},
	[MOE_I64] = {
		.name = "i64", .block_size = 1, .type_size = 8,
		.to_float = i64_to_float, .vec_dot_type = MOE_F32,
	},
	[MOE_Q4_0] = {
		.name = "q4_0", .block_size = MOE_QK, .type_size = sizeof(moe_block_q4_0),
		.is_quantized = true,
		.to_float = moe_q4_0_to_float, .from_float = moe_q4_0_from_float,
		.vec_dot_type = MOE_Q8_0,
	},
	/* Types with an offset pair with Q8_1, whose cached d*sum(q) turns
	 * the offset term of the dot product into one multiply. */
	[MOE_Q4_1] = {
		.name = "q4_1", .block_size = MOE_QK, .type_size = sizeof(moe_block_q4_1),
		.is_quantized = true,
		.to_float = moe_q4_1_to_float, .from_float = moe_q4_1_from_float,
		.vec_dot_type = MOE_Q8_1,
	},
	[MOE_Q5_0] = {
		.name = "q5_0", .block_size = MOE_QK, .type_size = sizeof(moe_block_q5_0),
		.is_quantized = true,
		.to_float = moe_q5_0_to_float, .from_float = moe_q5_0_from_float,
		.vec_dot_type = MOE_Q8_0,
	},
	[MOE_Q5_1] = {
		.name = "q5_1", .block_size = MOE_QK, .type_size = sizeof(moe_block_q5_1),
		.is_quantized = true,
		.to_float = moe_q5_1_to_float, .from_float = moe_q5_1_from_float,
		.vec_dot_type = MOE_Q8_1,
	},
	[MOE_Q8_0] = {
		.name = "q8_0", .block_size = MOE_QK, .type_size = sizeof(moe_block_q8_0),
		.is_quantized = true,
		.to_float = moe_q8_0_to_float, .from_float = moe_q8_0_from_float,
		.vec_dot_type = MOE_Q8_0,
	},
	[MOE_Q8_1] = {
		.name = "q8_1", .block_size = MOE_QK, .type_size = sizeof(moe_block_q8_1),
		.is_quantized = true,
		.to_float = moe_q8_1_to_float, .from_float = moe_q8_1_from_float,
		.vec_dot_type = MOE_Q8_1,
	},
	[MOE_IQ4_NL] = {
		.name = "iq4_nl", .block_size = MOE_QK,
		.type_size = sizeof(moe_block_iq4_nl), .is_quantized = true,
		.to_float = moe_iq4_nl_to_float, .from_float = moe_iq4_nl_from_float,
		.vec_dot_type = MOE_Q8_0,
	},
	[MOE_MXFP4] = {
		.name = "mxfp4", .block_size = MOE_QK, .type_size = sizeof(moe_block_mxfp4),
		.is_quantized = true,
		.to_float = moe_mxfp4_to_float, .from_float = moe_mxfp4_from_float,
		.vec_dot_type = MOE_Q8_0,
	},
	[MOE_Q2_K] = {
		.name = "q2_k", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q2_k),
		.is_quantized = true,
		.to_float = moe_q2_k_to_float, .vec_dot_type = MOE_Q8_K,
	},
	[MOE_Q3_K] = {
		.name = "q3_k", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q3_k),
		.is_quantized = true,
		.to_float = moe_q3_k_to_float, .vec_dot_type = MOE_Q8_K,
	},
	[MOE_Q4_K] = {
		.name = "q4_k", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q4_k),
		.is_quantized = true,
		.to_float = moe_q4_k_to_float, .from_float = moe_q4_k_from_float,
		.vec_dot_type = MOE_Q8_K,
	},
	[MOE_Q5_K] = {
		.name = "q5_k", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q5_k),
		.is_quantized = true,
		.to_float = moe_q5_k_to_float, .from_float = moe_q5_k_from_float,
		.vec_dot_type = MOE_Q8_K,
	},
	[MOE_Q6_K] = {
		.name = "q6_k", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q6_k),
		.is_quantized = true,
		.to_float = moe_q6_k_to_float, .from_float = moe_q6_k_from_float,
		.vec_dot_type = MOE_Q8_K,
	},
	[MOE_Q8_K] = {
		.name = "q8_k", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q8_k),
		.is_quantized = true,
		.to_float = moe_q8_k_to_float, .from_float = moe_q8_k_from_float,
		.vec_dot_type = MOE_Q8_K,
	},
	[MOE_IQ4_XS] = {
		.name = "iq4_xs", .block_size = MOE_QK_K,
		.type_size = sizeof(moe_block_iq4_xs), .is_quantized = true,
		.to_float = moe_iq4_xs_to_float, .vec_dot_type = MOE_Q8_K,
	},
};

/* The R4 kernel type's bytes decoded in storage order: per block column
 * the four rows' 32 values in row order (n a multiple of 128; used only
 * where a kernel type must have a decoder, never on a row). */
static void q8_0_r4_to_float(const void *src, float *dst, int64_t n)
{
	const moe_block_q8_0x4 *b = src;
	for (int64_t i = 0; i < n / (4 * MOE_QK); i++)
		for (int r = 0; r < 4; r++) {
			float d = moe_f16_to_f32(b[i].d[r]);
			for (int j = 0; j < MOE_QK; j++)
				*dst++ = d * (float)b[i].qs[r][j];
		}
}

/* The same for Q4_K: per super-block column the four rows' 256 values
 * (n a multiple of 1024). */
static void q4_k_r4_to_float(const void *src, float *dst, int64_t n)
{
	const moe_block_q4_kx4 *b = src;
	for (int64_t i = 0; i < n / (4 * MOE_QK_K); i++)
		for (int r = 0; r < 4; r++) {
			moe_block_q4_k one;
			one.d = b[i].d[r];
			one.dmin = b[i].dmin[r];
			memcpy(one.scales, b[i].scales[r], sizeof one.scales);
			memcpy(one.qs, b[i].qs[r], sizeof one.qs);
			moe_q4_k_to_float(&one, dst, MOE_QK_K);
			dst += MOE_QK_K;
		}
}

/* Kernel types of repacked layouts (quant.h): the base type's sizes and
 * activation type; no encoder (moe_repack_group makes them). */
static const moe_type_traits ktraits[MOE_KTYPE_MAX - 64] = {
	[MOE_Q8_0_R4 - 64] = {
		.name = "q8_0_r4", .block_size = MOE_QK, .type_size = sizeof(moe_block_q8_0),
		.is_quantized = true, .to_float = q8_0_r4_to_float, .vec_dot_type = MOE_Q8_0,
	},
	[MOE_Q4_K_R4 - 64] = {
		.name = "q4_k_r4", .block_size = MOE_QK_K, .type_size = sizeof(moe_block_q4_k),
		.is_quantized = true, .to_float = q4_k_r4_to_float, .vec_dot_type = MOE_Q8_K,
	},
};

const moe_type_traits *moe_type_get(int dtype)
{
	if (dtype >= 64 && dtype < MOE_KTYPE_MAX)
		return &ktraits[dtype - 64];
	if (dtype < 0 || dtype >= MOE_DTYPE_MAX || !traits[dtype].name)
		return NULL;
	return &traits[dtype];
}

const char *moe_type_name(int dtype)
{
	const moe_type_traits *t = moe_type_get(dtype);
	return t ? t->name : "?";
}

int moe_type_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < MOE_DTYPE_MAX; i++)
		if (traits[i].name && strcasecmp(traits[i].name, name) == 0)
			return i;
	return -1;
}

int moe_type_nbytes(int dtype, uint64_t n, uint64_t *out, moe_error *e)
{
	const moe_type_traits *t = moe_type_get(dtype);

	if (!t)
		return moe_err(e, MOE_EFORMAT, "unknown dtype id %d", dtype);
	if (n % t->block_size)
		return moe_err(e, MOE_EFORMAT,
			       "%s: %llu elements is not a multiple of the block size %u",
			       t->name, (unsigned long long)n, t->block_size);
	if (!moe_mul_u64(n / t->block_size, t->type_size, out))
		return moe_err(e, MOE_ERANGE,
			       "%s: %llu elements take more than 2^64 bytes", t->name,
			       (unsigned long long)n);
	return 0;
}
