/* kernels.h — compute kernels: dot products that fuse dequantisation with the
 * multiply, activation quantisation, and matrix products over a thread pool.
 *
 * How to use: moe_kernels_get() returns the table for the ISA chosen once at
 * run time (moe_cpu_isa(), overridable with MOE_ISA); tests ask for every
 * level with moe_kernels_for().  Weights are never expanded to float: a
 * weight row of type T is multiplied with an activation row quantised to
 * T's vec_dot_type (quant.h: Q8_0, Q8_K, or F32 for float weights).
 *
 * moe_matmul computes Y[t][r] = sum_k W[r][k] * X[t][k] for all tokens t of a
 * batch (prefill) or a single token (decode), quantising X once and reusing
 * each weight block across tokens; threads split the rows (the tokens, when
 * there are few rows and many tokens).  Each waking of the pool costs a few
 * microseconds, so a forward pass that runs many small products per token
 * may prefer one pool job calling moe_matmul_quantize/moe_matmul_compute.
 *
 * Weights may start at any byte offset (mapped files); activations are
 * ordinary aligned floats.
 */
#ifndef MOE_KERNELS_H
#define MOE_KERNELS_H

#include "core.h"
#include "quant.h"

/* s = dot(w[0..n), x[0..n)); w of the weight type, x of its vec_dot_type;
 * n a multiple of the weight type's block size. */
typedef void (*moe_vec_dot_fn)(int64_t n, float *s, const void *w, const void *x);
/* Quantise n floats into the activation type (n a multiple of its block). */
typedef void (*moe_quantize_row_fn)(const float *x, void *y, int64_t n);
/* Many dot products at once: s[t * lds + r] = dot(w + r * ldw, x + t * ldx)
 * for r < nr, t < nt (ldw, ldx in bytes, lds in floats); any nr, nt >= 0.
 * For many tokens the SIMD levels unpack each tile of weight rows once into
 * an int8 working form and reuse it for every token (the prefill kernel);
 * for few they read the weights directly (decode).  Either way every value
 * is bit for bit what the same table's vec_dot gives for that row and token:
 * the reduction order per output is fixed (exact integer sums per block or
 * super-block, then one float sequence), so results do not depend on the
 * batch, the tile or the thread split. */
typedef void (*moe_gemm_fn)(int64_t n, int nr, int nt, const void *w, size_t ldw,
			    const void *x, size_t ldx, float *s, size_t lds);

/* One tile of attention (flash-attention style): the query rows of one KV
 * head — n_tok tokens of one sequence x the n_head query heads sharing that
 * KV head — against the sequence's paged KV cache.  Row (t, i) attends to
 * positions [lo[t], hi[t]) with softmax(scale * q.k) (plus the head's sink
 * logit, if any, in the denominator) and writes its weighted sum of values.
 *
 * The cache is paged: positions [b * block_tokens, (b + 1) * block_tokens)
 * of this layer and KV head are at k[b] and v[b] (the caller resolves the
 * sequence's block ids), laid out as
 *   F16:  K transposed, [dims][block_tokens] halves (dimension d of this
 *         head at (uint16_t *)k[b] + d * block_tokens); V rows.
 *   Q8_0: K and V rows.
 * Rows are row_bytes apart.  Only the entries of blocks holding a position
 * of some row's range are read: those before a sliding window's first block
 * need not be set (the cache may have given them back).
 *
 * Batch-invariant: a row's output is the same bits whatever other rows are
 * in the tile (kernels/attn_tile.h says how).  Levels differ from each
 * other only by rounding. */
typedef struct moe_attn_tile {
	int kv_type;                  /* MOE_F16 or MOE_Q8_0 */
	int head_dim, head_dim_v, block_tokens;
	const uint8_t *const *k;      /* [block] this KV head's keys in the block */
	const uint8_t *const *v;      /* [block] its values */
	size_t row_bytes;
	int n_tok, n_head;
	const float *q;               /* row (t, i) at q + t * q_stride + i * head_dim */
	int64_t q_stride;
	float *out;                   /* row (t, i) at out + t * out_stride + i * head_dim_v */
	int64_t out_stride;
	const int32_t *lo, *hi;       /* [n_tok] */
	const float *sink;            /* [n_head] or NULL */
	float scale;
	float *work;                  /* moe_attn_work_bytes(), 64-byte aligned, per thread */
} moe_attn_tile;

typedef void (*moe_attn_fn)(const moe_attn_tile *t);

/* y[i * ystride] = x[i] as F16 for i < n: the F16 KV cache's writes
 * (ystride block_tokens for its transposed K, 1 for V).  Bit for bit
 * quant.h's moe_f32_to_f16 at every level: round to nearest even,
 * overflow to infinity, half subnormals, NaN quiet with its top payload
 * bits. */
typedef void (*moe_f16_store_fn)(const float *x, uint16_t *y, int64_t n, int64_t ystride);

/* Bytes of work buffer moe_attn_tile needs for up to max_rows rows. */
size_t moe_attn_work_bytes(int head_dim, int head_dim_v, int block_tokens, int max_rows);

typedef struct moe_kernels {
	moe_isa isa;
	/* Indexed by dtype or, for the repacked layouts, kernel type
	 * (quant.h MOE_Q8_0_R4 ...), which have a gemm and no vec_dot. */
	moe_vec_dot_fn vec_dot[MOE_KTYPE_MAX];           /* NULL: type unsupported */
	moe_quantize_row_fn quantize_row[MOE_KTYPE_MAX]; /* activation types */
	/* Fast row decoders (F16, BF16 at least; NULL: use quant.h's to_float).
	 * The KV cache and embeddings use them. */
	moe_to_float_fn to_float[MOE_KTYPE_MAX];
	/* Tiled products for the types this ISA has them for; NULL: moe_matmul
	 * loops over vec_dot instead (same results up to rounding). */
	moe_gemm_fn gemm[MOE_KTYPE_MAX];
	moe_attn_fn attn;                                /* never NULL */
	moe_f16_store_fn f16_store;                      /* never NULL */
} moe_kernels;

/* Kernels for the ISA chosen at run time. Never NULL. */
const moe_kernels *moe_kernels_get(void);
/* Kernels for a given ISA level (NULL if not built or not supported by the
 * CPU). */
const moe_kernels *moe_kernels_for(moe_isa isa);

/* 0 if moe_matmul can multiply `dtype` weights (or a repacked kernel type)
 * with `cols` columns;
 * MOE_EUNSUPPORTED for a type without a kernel, MOE_EFORMAT if cols is not a
 * positive multiple of the type's block size.  Check once when binding a
 * tensor: moe_matmul itself cannot report errors. */
int moe_kernels_check(const moe_kernels *k, int dtype, int64_t cols, moe_error *e);

/* Bytes of scratch moe_matmul needs for n_tokens rows of `cols` activations
 * quantised for weight type `dtype`: 0 when none is needed (float weights
 * read X directly) and SIZE_MAX for an unknown type or an overflowing size
 * (so that allocating it fails). */
size_t moe_matmul_scratch(int dtype, int64_t cols, int64_t n_tokens);

/* Y[t*ldy + r] = sum_k W[r][k] * X[t*ldx + k] for r < rows, t < n_tokens.
 * Batch-invariant: a token's row of Y is the same bits whatever n_tokens,
 * its position in X and the pool's thread count (activations are quantised
 * per token, and see moe_gemm_fn).
 * W: rows x cols of `dtype`, row stride = moe_type_nbytes(dtype, cols).
 * scratch: moe_matmul_scratch() bytes (activations quantised once).
 * pool may be NULL (single thread).  Cannot fail on valid arguments; on
 * arguments moe_kernels_check rejects it logs an error and fills Y with
 * NaN. */
void moe_matmul(const moe_kernels *k, moe_pool *pool, int dtype, const void *W, int64_t rows,
		int64_t cols, const float *X, int64_t ldx, int64_t n_tokens, float *Y, int64_t ldy,
		void *scratch);

/* The two halves of moe_matmul for callers that run their own pool job
 * (several products in one job, separated by their own barrier): thread
 * ith of nth quantises its share of the tokens of X into scratch, and after
 * every thread has done so, computes its share of Y.  Arguments as for
 * moe_matmul; X and ldx are also needed by compute (float weights use X
 * directly). */
void moe_matmul_quantize(const moe_kernels *k, int dtype, int64_t cols, const float *X,
			 int64_t ldx, int64_t n_tokens, void *scratch, int ith, int nth);
void moe_matmul_compute(const moe_kernels *k, int dtype, const void *W, int64_t rows,
			int64_t cols, const float *X, int64_t ldx, int64_t n_tokens, float *Y,
			int64_t ldy, const void *scratch, int ith, int nth);

#endif
