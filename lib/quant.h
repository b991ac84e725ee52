/* quant.h — the weight type table: every dtype's block layout, size and
 * reference conversions to and from float.
 *
 * How to use: look a type up with moe_type_get(id); its block_size elements
 * are stored in type_size bytes.  to_float decodes n elements (n a multiple
 * of block_size; a trailing partial block is ignored); from_float (NULL where
 * no reference quantiser exists yet) encodes them.  Neither can fail nor
 * allocates; the encoded data may start at any byte address (blocks are
 * packed, loads are unaligned-safe); from_float expects finite input.  Ids
 * are the on-disk ids of UTH v1 and equal GGUF's ggml_type ids for the same
 * block layout; they are never renumbered.
 *
 * from_float is the simple round-to-nearest reference (the engine uses it
 * for activations and the KV cache, where ggml's exact rounding matters).
 * Weights are quantised with moe_quant_rows() below: a search for the
 * scales that minimise the importance-weighted squared error.
 *
 * The round-to-nearest references:  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K and
 * MXFP4 produce the same bytes as ggml's reference quantisers; Q4_K, Q5_K,
 * Q6_K and IQ4_NL use a simpler scale choice than ggml (bytes differ, the
 * layout is the same).  Q2_K, Q3_K, IQ4_XS and the integer types decode only.
 *
 * The block structs themselves (for kernels) are in quant/blocks.h.
 */
#ifndef MOE_QUANT_H
#define MOE_QUANT_H

#include "core.h"

typedef enum moe_dtype {
	MOE_F32 = 0,
	MOE_F16 = 1,
	MOE_Q4_0 = 2,
	MOE_Q4_1 = 3,
	MOE_Q5_0 = 6,
	MOE_Q5_1 = 7,
	MOE_Q8_0 = 8,
	MOE_Q8_1 = 9,
	MOE_Q2_K = 10,
	MOE_Q3_K = 11,
	MOE_Q4_K = 12,
	MOE_Q5_K = 13,
	MOE_Q6_K = 14,
	MOE_Q8_K = 15,
	MOE_IQ4_NL = 20,
	MOE_IQ4_XS = 23,
	MOE_I8 = 24,
	MOE_I16 = 25,
	MOE_I32 = 26,
	MOE_I64 = 27,
	MOE_F64 = 28,
	MOE_BF16 = 30,
	MOE_MXFP4 = 39,
	MOE_DTYPE_MAX = 40 /* ids are < MOE_DTYPE_MAX */
} moe_dtype;

typedef void (*moe_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*moe_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct moe_type_traits {
	const char *name;       /* lower case, as on the command line: "q4_k" */
	uint32_t block_size;    /* elements per block (1 for plain types) */
	uint32_t type_size;     /* bytes per block */
	bool is_quantized;
	moe_to_float_fn to_float;     /* reference decoder; never NULL */
	moe_from_float_fn from_float; /* reference encoder or NULL */
	moe_dtype vec_dot_type;       /* activation type this weight pairs with
				       * (F32 for plain and integer types) */
} moe_type_traits;

/* Traits of a dtype id, or NULL if the id is unknown/unsupported (the
 * returned table entry is static and never changes). */
const moe_type_traits *moe_type_get(int dtype);
/* Name of a dtype ("?" if unknown). */
const char *moe_type_name(int dtype);
/* Id for a name (case-insensitive, "q4_k", "Q4_K", "bf16"), or -1. */
int moe_type_from_name(const char *name);
/* Bytes of n elements of dtype: MOE_EFORMAT if n is not a multiple of the
 * block size or the type is unknown, MOE_ERANGE on overflow. */
int moe_type_nbytes(int dtype, uint64_t n, uint64_t *out, moe_error *e);

/* Scalar half / bfloat16 conversions (round to nearest even; overflow goes
 * to infinity, subnormals are kept, NaN stays NaN with its sign).  Never
 * fail. */
float moe_f16_to_f32(uint16_t h);
uint16_t moe_f32_to_f16(float f);
float moe_bf16_to_f32(uint16_t h);
uint16_t moe_f32_to_bf16(float f);

/* ------------------------------------------------- weight quantisation
 * (quant/search.c, quant/rows.c) */

/* Quantise n elements (a multiple of the block size) of x into dst with the
 * searching quantiser; w is NULL (all weights 1) or n non-negative
 * importances aligned with x.  Cannot fail. */
typedef void (*moe_quantize_fn)(const float *x, void *dst, int64_t n, const float *w);

/* The searching quantiser of a dtype, or NULL if it has none (weights can be
 * stored as f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k
 * iq4_nl iq4_xs mxfp4). */
moe_quantize_fn moe_quant_fn(int dtype);

/* Quantise a matrix: nrows rows of ncols floats (row-major) into dst
 * (nrows * row bytes).  imatrix: NULL or ncols per-column importances (the
 * mean square of each input column, moe_imatrix), used for every row.
 * Rows are split over the pool's threads (pool may be NULL: one thread).
 * Returns 0, MOE_EUNSUPPORTED (no quantiser for dtype) or MOE_EINVAL (ncols
 * not a multiple of the block size). */
int moe_quant_rows(int dtype, const float *x, void *dst, int64_t nrows, int64_t ncols,
		   const float *imatrix, moe_pool *pool, moe_error *e);

/* Importance-weighted squared error sum_i w_i (x_i - y_i)^2 / sum_i w_i
 * x_i^2 of a quantised row against the original (w NULL: ones): the
 * relative error the planner and the tests use.  n elements. */
double moe_quant_rel_error(const float *x, const float *y, const float *w, int64_t n);

#endif
