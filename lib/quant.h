/* quant.h — the weight types and their quantisation: every dtype's block
 * layout, size and reference conversions to and from float; the searching
 * weight quantisers; recipes (which tensor gets which type); importance
 * matrices; whole-model quantisation (moe-quant) and the per-expert planner.
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
 * The round-to-nearest references: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K and
 * MXFP4 produce the same bytes as ggml's reference quantisers; Q4_K, Q5_K,
 * Q6_K and IQ4_NL use a simpler scale choice than ggml (bytes differ, the
 * layout is the same).  Q2_K, Q3_K, IQ4_XS and the integer types have no
 * from_float (moe_quant_fn has quantisers for every weight type).
 *
 * A model: fill a moe_quant_opts (recipe from moe_quant_recipe_find, an
 * optional moe_imatrix from moe_imatrix_load, an optional expert plan from
 * moe_quant_plan_experts) and call moe_quant_model.
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

/* Kernel types of repacked layouts (quant/repack.c): in-memory ids, never
 * written to a file.  A tensor stored with a row-interleaved UTH layout
 * (uth.h, MOE_UTH_LAYOUT_R4) is bound with the kernel type
 * moe_repack_ktype(dtype, layout); its traits are the base type's (same
 * bytes per row, same activation type), so row strides and scratch sizes
 * stay what they were, and the kernel tables (kernels.h) hold its own
 * products.  moe_type_get() knows these ids; moe_type_from_name() and the
 * file readers do not. */
enum {
	MOE_Q8_0_R4 = 64, /* Q8_0, four rows interleaved (moe_block_q8_0x4) */
	MOE_Q4_K_R4 = 65, /* Q4_K, four rows interleaved (moe_block_q4_kx4) */
	MOE_KTYPE_MAX = 66 /* kernel table size: dtypes and kernel types */
};

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

/* ------------------------------------------------- recipes (quant/recipe.c) */

struct moe_uth_tensor;

typedef struct moe_quant_recipe {
	const char *name; /* "q4_k_m", or a type name for a plain type */
	int base, high;   /* the main type; the floor of the shared expert */
	int kind;         /* private: the rule set */
} moe_quant_recipe;

/* Space-separated recipe names. */
const char *moe_quant_recipe_names(void);
/* A recipe, or a plain type (every matrix that type), by name
 * (case-insensitive).  0 or MOE_ENOTFOUND. */
int moe_quant_recipe_find(const char *name, moe_quant_recipe *out);
/* The recipe's type for a tensor of a model with n_layer layers and
 * n_expert routed experts per layer (0: dense), before the row-size
 * fallback; -1 for tensors that are kept as they are (norms, biases,
 * router, tokenizer, 1-D). */
int moe_quant_recipe_type(const moe_quant_recipe *r, const struct moe_uth_tensor *t,
			  int n_layer, int n_expert);
/* True for the roles of weight matrices (the tensors that are quantised). */
bool moe_quant_role_is_matrix(int role);
/* dtype, or the type used instead when rows of ne0 elements are not whole
 * blocks of it (K-quants -> IQ4_NL / Q5_0 / Q5_1 / Q8_0, then F16). */
int moe_quant_fallback(int dtype, uint32_t ne0);
/* Bits per weight of a dtype (0 if unknown). */
double moe_quant_bpw(int dtype);

/* --------------------------------------- importance matrix (quant/imatrix.c)
 * Per tensor name, the mean square of each input column over the rows
 * (tokens) the tensor multiplied.  The forward pass calls moe_imatrix_add
 * with the input rows of every weight product (for an expert's tensor, only
 * the tokens routed to it; name = the UTH tensor name). */
typedef struct moe_imatrix moe_imatrix;

int moe_imatrix_new(moe_imatrix **out, moe_error *e);
void moe_imatrix_free(moe_imatrix *m);
/* Accumulate n_rows rows of n_cols activations x (row-major).  MOE_EINVAL
 * when n_cols differs from earlier calls for the name; MOE_ENOMEM. */
int moe_imatrix_add(moe_imatrix *m, const char *name, const float *x, int64_t n_rows,
		    int64_t n_cols, moe_error *e);
/* As moe_imatrix_add for matrix `part` of a stack of n_parts (a 3-D tensor
 * used per slice, deepseek2's per-head attn_k_b / attn_v_b): the entry holds
 * n_parts x n_cols values, part-major, as llama.cpp stores such tensors; its
 * rows are counted with part 0 (every part sees the same rows). */
int moe_imatrix_add_part(moe_imatrix *m, const char *name, const float *x, int64_t n_rows,
			 int64_t n_cols, int part, int n_parts, moe_error *e);
/* Mean squares of a tensor's n_cols columns (NULL if absent or another
 * width); *rows (may be NULL) gets the rows accumulated. */
const float *moe_imatrix_get(const moe_imatrix *m, const char *name, int64_t n_cols,
			     uint64_t *rows);
/* As moe_imatrix_get, also finding expert `expert` of layer `layer` as a
 * slice of llama.cpp's merged "blk.L.<role>_exps.weight". */
const float *moe_imatrix_for(const moe_imatrix *m, const char *name, int layer, int expert,
			     const char *role, int64_t n_cols);
size_t moe_imatrix_count(const moe_imatrix *m);
/* Write our format (atomically; "-" = stdout).  0 or MOE_EIO/MOE_ENOMEM. */
int moe_imatrix_save(const moe_imatrix *m, const char *path, moe_error *e);
/* Read our format or llama.cpp's legacy imatrix.dat (detected by the
 * magic).  MOE_EIO, MOE_EFORMAT / MOE_ECHECKSUM naming the file and field. */
int moe_imatrix_load(moe_imatrix **out, const char *path, moe_error *e);

/* ----------------------------------------- whole models (quant/model.c) */

typedef struct moe_uth moe_uth;

typedef struct moe_quant_tensor_type {
	const char *regex; /* PCRE2, matched anywhere in the tensor name */
	int dtype;
} moe_quant_tensor_type;

/* Called after every piece written: the tensor, bytes done / total. */
typedef void (*moe_quant_progress_fn)(void *ctx, const char *tensor, uint64_t done,
				      uint64_t total);

typedef struct moe_quant_opts {
	const char *in, *out;          /* UTH paths or "-" */
	moe_quant_recipe recipe;
	const moe_quant_tensor_type *tensor_types; /* first match wins */
	size_t n_tensor_types;
	const moe_imatrix *imatrix;    /* NULL: unweighted */
	const char *imatrix_name;      /* for the metadata */
	const int *expert_types;       /* [plan_n_layer][plan_n_expert] dtype or -1 */
	int plan_n_layer, plan_n_expert;
	const char *plan_desc;         /* for the metadata */
	bool allow_requantize;
	bool repack;                   /* write the row-interleaved layout where it applies */
	int threads;
	moe_quant_progress_fn progress;
	void *progress_ctx;
} moe_quant_opts;

typedef struct moe_quant_result {
	size_t n_tensors, n_quantized;
	uint64_t in_bytes, out_bytes;
} moe_quant_result;

/* The output type of every tensor of u (types[u->n_tensors]): recipe, then
 * the expert plan, then the first matching --tensor-type, then the row-size
 * fallback; non-matrices keep their type.  MOE_EINVAL for a bad regex or an
 * already quantised tensor that would change type without
 * allow_requantize. */
int moe_quant_assign(const moe_uth *u, const moe_quant_opts *o, int *types, moe_error *e);

/* Quantise o->in into o->out (atomically; no output is left on error).
 * Returns 0 or the first error (input format, checksum, truncation, I/O). */
int moe_quant_model(const moe_quant_opts *o, moe_quant_result *res, moe_error *e);

/* ------------------------------------ repacked layouts (quant/repack.c) */

/* A repacked layout stores a matrix's rows (Q8_0, Q4_K) in groups of four, block column
 * by block column, each column's four scales before their codes (the UTH
 * man page, LAYOUTS): a tile of four rows is one contiguous stream, and a
 * kernel computes four rows per pass over the activations.  Only matrices
 * the engine multiplies (not the embedding table, which it reads by row)
 * with a whole number of row groups can be repacked. */

/* The kernel type for a tensor of `dtype` stored with UTH `layout`: dtype
 * itself for the plain layout, MOE_Q8_0_R4 etc. for a repacked one, -1 if
 * the pair has no kernel type. */
int moe_repack_ktype(int dtype, unsigned layout);
/* The base (file) dtype of a kernel type: itself for a file dtype. */
int moe_repack_base(int ktype);
/* Rows per group of a layout (1 for plain, 4 for R4; 0 if unknown). */
unsigned moe_repack_rows(unsigned layout);
/* Name of a layout for messages and --info ("plain", "r4"; NULL if
 * unknown). */
const char *moe_repack_layout_name(unsigned layout);
/* 0 if a tensor of this dtype, shape and role may be stored with `layout`;
 * otherwise MOE_EFORMAT with a message (no file or tensor prefix) in msg:
 * a dtype without the layout, not a 2-D matrix, rows not a multiple of the
 * group, or a role the engine does not multiply. */
int moe_repack_check(unsigned layout, int dtype, uint8_t n_dims, const uint32_t ne[4], int role,
		     char *msg, size_t msg_n);
/* True if moe_repack_check accepts layout R4 for the tensor (writers use it
 * to choose which tensors --repack changes). */
bool moe_repack_eligible(int dtype, uint8_t n_dims, const uint32_t ne[4], int role);
/* Repack one group of rows: `plain` holds moe_repack_rows(layout) rows of
 * `cols` elements of dtype (row_bytes apart), `out` receives them in the
 * layout (the same number of bytes).  moe_unrepack_group is the inverse. */
void moe_repack_group(unsigned layout, int dtype, int64_t cols, const void *plain, void *out);
void moe_unrepack_group(unsigned layout, int dtype, int64_t cols, const void *packed,
			void *plain);

/* A moe_uth_fill_fn that repacks what another produces: set the fields
 * below, pass the struct as the fill context, free with
 * moe_repack_fill_free().  Reads the inner fill in order, one row group at
 * a time (starting again when asked for offset 0, as the pipe writer's two
 * passes do). */
typedef struct moe_repack_fill {
	int (*inner)(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e);
	void *inner_ctx;
	unsigned layout;
	int dtype;
	int64_t cols;
	/* private */
	uint8_t *plain, *packed;
	uint64_t group;   /* group held in packed, or UINT64_MAX */
} moe_repack_fill;
int moe_repack_fill_fn(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e);
void moe_repack_fill_free(moe_repack_fill *f);

/* ----------------------------------- per-expert precision (quant/plan.c) */

typedef struct moe_quant_plan {
	int n_layer, n_expert;
	int *types;          /* [n_layer][n_expert] dtype, -1 for absent experts */
	double *freq;        /* [n_layer][n_expert] routing frequency */
	uint64_t size;       /* predicted output file bytes */
	double cost;         /* sum of frequency x weighted squared error */
	double cost_uniform; /* the same with every expert at the recipe's type */
	uint64_t size_uniform; /* predicted bytes with the recipe's types */
} moe_quant_plan;

/* Choose each routed expert's type from the ladder (ascending bits;
 * ladder[0] must be the smallest) so that the expected error — routing
 * frequency x the expert's importance-weighted squared quantisation error,
 * measured by quantising sampled rows — is least while the whole output
 * stays within `size` bytes.  o gives the input (a file: it is read twice),
 * recipe, imatrix and overrides for everything else.  profile is a
 * moe-bench --expert-stats JSON file.  MOE_EINVAL when even the smallest
 * rung does not fit. */
int moe_quant_plan_experts(const moe_quant_opts *o, const char *profile, uint64_t size,
			   const int *ladder, int n_ladder, moe_quant_plan *plan, moe_error *e);
void moe_quant_plan_free(moe_quant_plan *plan);

/* For a piped input that must be read twice (the plan, then the
 * quantisation): copy standard input, 1 MiB at a time, into a temporary file
 * in $TMPDIR (default /tmp) that is unlinked at once, so its space is freed
 * when *fd is closed or the process ends, however it ends.  path (path_size
 * bytes) gets "/dev/fd/N", a name moe_quant_plan_experts and moe_quant_model
 * can open.  MOE_EIO naming the directory (cannot create, disk full) or
 * standard input (read error). */
int moe_quant_spool_stdin(int *fd, char *path, size_t path_size, moe_error *e);

#endif
