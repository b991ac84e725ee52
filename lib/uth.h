/* uth.h — UTH v1, the model container: reader (mmap), validator and writer.
 *
 * A UTH file is [header 4096 B][directory n x 64 B][names][metadata JSON]
 * [zero padding][tensor data, each tensor on a 4096-byte boundary]; man/uth.5
 * describes every byte.
 *
 * How to use (reading): moe_uth_open() maps a file read-only and validates
 * the header, the directory and the metadata (checksums included) before it
 * returns; after that every moe_uth_tensor lies inside the file, is aligned and
 * has a size matching its dtype and shape, so moe_uth_data() can be used
 * without further checks.  Tensor data checksums are checked only on request
 * (moe_uth_verify, which reads the whole file).  moe_uth_parse() does the same
 * on a memory image.  Close with moe_uth_close().
 *
 * How to use (writing): create a writer, describe every tensor with
 * moe_uth_writer_add() (name, dtype, shape, layer/expert/role and a callback
 * that produces the bytes), set the metadata JSON, then moe_uth_writer_write()
 * into a moe_out and commit it.  The writer needs every data checksum before
 * the data (the directory comes first): on a seekable output it patches the
 * header and directory at the end; on a pipe it calls each fill callback twice
 * (a hashing pass, then a writing pass).  Both give byte-identical files.
 */
#ifndef MOE_UTH_H
#define MOE_UTH_H

#include "core.h"

#define MOE_UTH_MAGIC "UTH\0v1\0\0" /* 8 bytes */
#define MOE_UTH_VERSION 1u
#define MOE_UTH_HEADER_SIZE 4096u
#define MOE_UTH_RECORD_SIZE 64u
#define MOE_UTH_ALIGN 4096u
#define MOE_UTH_NONE 0xFFFFu /* layer/expert: not part of a layer/expert */

/* Header flags. */
#define MOE_UTH_FLAG_VOCAB_ONLY 0x1u /* tokenizer only, no weights */
#define MOE_UTH_FLAGS_KNOWN 0x1u

/* Data layouts (record byte 3). */
#define MOE_UTH_LAYOUT_PLAIN 0u /* rows of ne[0] elements, blocks in order */
/* Rows interleaved in groups of four, block column by block column, scales
 * first (man/uth.5 LAYOUTS; quant.h moe_repack_*): Q8_0 and Q4_K matrices. */
#define MOE_UTH_LAYOUT_R4 1u

/* Tensor roles: stable on-disk ids, never renumbered.  Names equal the GGUF
 * base tensor names ("attn_q" for "blk.N.attn_q.weight"). */
enum moe_uth_role {
	MOE_UTH_ROLE_TOKEN_EMBD = 1,
	MOE_UTH_ROLE_OUTPUT_NORM = 2,
	MOE_UTH_ROLE_OUTPUT = 3,
	MOE_UTH_ROLE_ATTN_NORM = 4,
	MOE_UTH_ROLE_ATTN_Q = 5,
	MOE_UTH_ROLE_ATTN_K = 6,
	MOE_UTH_ROLE_ATTN_V = 7,
	MOE_UTH_ROLE_ATTN_OUTPUT = 8,
	MOE_UTH_ROLE_ATTN_Q_BIAS = 9,
	MOE_UTH_ROLE_ATTN_K_BIAS = 10,
	MOE_UTH_ROLE_ATTN_V_BIAS = 11,
	MOE_UTH_ROLE_ATTN_Q_NORM = 12,
	MOE_UTH_ROLE_ATTN_K_NORM = 13,
	MOE_UTH_ROLE_FFN_NORM = 14,
	MOE_UTH_ROLE_FFN_GATE = 15,
	MOE_UTH_ROLE_FFN_UP = 16,
	MOE_UTH_ROLE_FFN_DOWN = 17,
	MOE_UTH_ROLE_FFN_GATE_INP = 18, /* router */
	MOE_UTH_ROLE_FFN_GATE_SHEXP = 19,
	MOE_UTH_ROLE_FFN_UP_SHEXP = 20,
	MOE_UTH_ROLE_FFN_DOWN_SHEXP = 21,
	MOE_UTH_ROLE_FFN_GATE_INP_SHEXP = 22,
	MOE_UTH_ROLE_TOKENIZER_TOKENS = 23,
	MOE_UTH_ROLE_TOKENIZER_TOKEN_OFFSETS = 24,
	MOE_UTH_ROLE_TOKENIZER_SCORES = 25,
	MOE_UTH_ROLE_TOKENIZER_TOKEN_TYPES = 26,
	MOE_UTH_ROLE_TOKENIZER_MERGES = 27,
	MOE_UTH_ROLE_TOKENIZER_MERGE_OFFSETS = 28,
	MOE_UTH_ROLE_ATTN_OUTPUT_BIAS = 29,
	MOE_UTH_ROLE_ATTN_NORM_BIAS = 30,
	MOE_UTH_ROLE_FFN_NORM_BIAS = 31,
	MOE_UTH_ROLE_OUTPUT_NORM_BIAS = 32,
	MOE_UTH_ROLE_OUTPUT_BIAS = 33,
	MOE_UTH_ROLE_ATTN_Q_A = 34,
	MOE_UTH_ROLE_ATTN_Q_A_NORM = 35,
	MOE_UTH_ROLE_ATTN_Q_B = 36,
	MOE_UTH_ROLE_ATTN_KV_A_MQA = 37,
	MOE_UTH_ROLE_ATTN_KV_A_NORM = 38,
	MOE_UTH_ROLE_ATTN_KV_B = 39,
	MOE_UTH_ROLE_ATTN_K_B = 40,
	MOE_UTH_ROLE_ATTN_V_B = 41,
	MOE_UTH_ROLE_FFN_EXP_PROBS_B = 42, /* expert score bias */
	MOE_UTH_ROLE_ROPE_FREQS = 43,
	MOE_UTH_ROLE_ATTN_QKV = 44,
	MOE_UTH_ROLE_FFN_GATE_INP_BIAS = 45,
	MOE_UTH_ROLE_ATTN_POST_NORM = 46,
	MOE_UTH_ROLE_FFN_POST_NORM = 47,
	MOE_UTH_ROLE_OTHER = 48, /* anything else; the name says what */
	MOE_UTH_ROLE_ATTN_SINKS = 49,        /* per-head sink logit (gpt-oss) */
	MOE_UTH_ROLE_FFN_GATE_BIAS = 50,     /* expert biases (gpt-oss): blk.N.ffn_gate.E.bias */
	MOE_UTH_ROLE_FFN_UP_BIAS = 51,
	MOE_UTH_ROLE_FFN_DOWN_BIAS = 52,
	MOE_UTH_ROLE_ROPE_FACTORS_SHORT = 53, /* LongRoPE divisors (phimoe), head_dim/2 */
	MOE_UTH_ROLE_ROPE_FACTORS_LONG = 54,
	MOE_UTH_ROLE_COUNT = 55  /* valid ids are 1 .. MOE_UTH_ROLE_COUNT-1 */
};

/* Name of a role id ("ffn_gate_inp"), or NULL if the id is unknown. */
const char *moe_uth_role_name(int role);
/* Role id for a name (exact, lower case), or -1 if unknown. */
int moe_uth_role_from_name(const char *name);

/* One tensor as described by its directory record. */
typedef struct moe_uth_tensor {
	const char *name;      /* NUL-terminated; points into the file (reader) */
	uint16_t dtype;        /* moe_dtype id (quant.h) */
	uint16_t layer;        /* MOE_UTH_NONE if not in a layer */
	uint16_t expert;       /* MOE_UTH_NONE if not an expert's tensor */
	uint16_t role;         /* enum moe_uth_role */
	uint8_t n_dims;        /* 1..4 */
	uint8_t layout;        /* MOE_UTH_LAYOUT_*; the reader has checked it fits
				* the dtype, shape and role (moe_repack_check) */
	uint32_t ne[4];        /* shape, fastest dimension first; unused = 1 */
	uint64_t offset;       /* absolute file offset of the data, 4096-aligned */
	uint64_t size;         /* bytes of data */
	uint32_t scale_offset; /* 0: scales interleaved (the only v1 value) */
	uint64_t xxh3;         /* XXH3-64 (seed 0) of the data */
} moe_uth_tensor;

/* ---------------------------------------------------------------- reader */

typedef struct moe_uth_index moe_uth_index; /* private lookup tables */

typedef struct moe_uth {
	const char *path;       /* name used in messages */
	int fd;                 /* -1 for an image from moe_uth_parse */
	const uint8_t *map;     /* the whole file */
	uint64_t file_size;
	uint32_t flags;         /* MOE_UTH_FLAG_* */
	uint64_t n_tensors;
	moe_uth_tensor *tensors; /* directory order (= data order) */
	const char *meta;       /* metadata JSON, copied and NUL-terminated */
	size_t meta_len;        /* bytes, without the NUL */
	uint64_t data_offset;   /* start of the data section */
	uint64_t data_size;
	moe_uth_index *index;   /* private: name and (layer, expert) lookup */
	bool owns_map;          /* private: munmap on close */
} moe_uth;

/* Map `path` read-only (MAP_SHARED) and validate it fully except for the
 * tensor data checksums.  Returns 0, MOE_EIO (open/stat/mmap failed),
 * MOE_EFORMAT / MOE_ERANGE / MOE_ECHECKSUM (malformed file; the message names
 * the file and the field) or MOE_ENOMEM; *out is NULL on error. */
int moe_uth_open(moe_uth **out, const char *path, moe_error *e);

/* Validate a memory image of a whole file (`size` bytes, not copied; it must
 * outlive the result).  `name` is used in messages.  Same checks and errors
 * as moe_uth_open. */
int moe_uth_parse(const char *name, const uint8_t *buf, uint64_t size, moe_uth **out,
		  moe_error *e);

/* Check every tensor's data against its xxh3 (reads the whole data section).
 * Returns 0 or MOE_ECHECKSUM naming the first bad tensor. */
int moe_uth_verify(const moe_uth *u, moe_error *e);
/* Check one tensor's data, either in the map (data == NULL) or in a caller's
 * copy of t->size bytes (e.g. read with O_DIRECT).  0 or MOE_ECHECKSUM. */
int moe_uth_verify_tensor(const moe_uth *u, const moe_uth_tensor *t, const void *data,
			  moe_error *e);

/* The tensor with this name, or NULL. O(1). */
const moe_uth_tensor *moe_uth_find(const moe_uth *u, const char *name);
/* The tensors of one expert: index of the first and count (adjacent in the
 * directory and in the file, so one read of [first->offset,
 * last->offset + last->size) loads them all).  Returns 0 or MOE_ENOTFOUND. */
int moe_uth_expert(const moe_uth *u, uint16_t layer, uint16_t expert, size_t *first,
		   size_t *count);
/* Pointer to the tensor's data in the map (never NULL for a tensor of u). */
const void *moe_uth_data(const moe_uth *u, const moe_uth_tensor *t);
/* Unmap and free; NULL is fine. */
void moe_uth_close(moe_uth *u);

/* -------------------------------------------------------- stream reader */

/* Reading a UTH file front to back (a pipe, or a file without mapping it;
 * lib/format/uth_stream.c).  moe_uth_stream_open reads and validates
 * everything before the data (the checks of moe_uth_open); the directory is
 * then available from moe_uth_stream_info (its tensors' data are NOT mapped:
 * never call moe_uth_data on it).  Data are read with moe_uth_stream_read in
 * directory order, in pieces of any size; a tensor's checksum is checked
 * when its last byte is read.  moe_uth_stream_finish reads (and checks) what
 * is left and refuses trailing bytes. */
typedef struct moe_uth_stream moe_uth_stream;

/* path "-" reads standard input.  Returns 0, MOE_EIO, MOE_ENOMEM, or the
 * errors of moe_uth_parse (a truncated prefix is MOE_EFORMAT). */
int moe_uth_stream_open(moe_uth_stream **out, const char *path, moe_error *e);
const moe_uth *moe_uth_stream_info(const moe_uth_stream *s);
/* The next n bytes of tensor i into buf.  i is the current tensor or, once
 * that is read to its end, the next one (nothing is skipped unchecked; read
 * the rest with moe_uth_stream_finish).  Returns 0,
 * MOE_EIO, MOE_EFORMAT (input truncated), MOE_ECHECKSUM (at the tensor's
 * end), MOE_EINVAL (out of order / past the tensor's end). */
int moe_uth_stream_read(moe_uth_stream *s, size_t i, void *buf, size_t n, moe_error *e);
/* Read to the declared end, checking remaining tensors; MOE_EFORMAT on
 * trailing data or a truncated tail. */
int moe_uth_stream_finish(moe_uth_stream *s, moe_error *e);
/* NULL is fine; closes the file it opened (never stdin). */
void moe_uth_stream_close(moe_uth_stream *s);

/* ---------------------------------------------------------------- writer */

/* Produce bytes [off, off + n) of a tensor's data into buf.  Called with
 * increasing off starting at 0 and n <= 4 MiB; on a non-seekable output the
 * whole sequence is run twice and must produce the same bytes both times.
 * Return 0 or a negative MOE_E* code (with e filled). */
typedef int (*moe_uth_fill_fn)(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e);

typedef struct moe_uth_writer moe_uth_writer;

/* Returns 0 or MOE_ENOMEM. */
int moe_uth_writer_new(moe_uth_writer **out, moe_error *e);
/* Describe the next tensor (directory order = data order).  From `desc` the
 * name (copied), dtype, n_dims, ne, layout, scale_offset, layer, expert and
 * role are used; offset, size and xxh3 are ignored (size is computed from
 * dtype and shape).  Returns MOE_EINVAL naming the tensor for an unknown
 * dtype/role/layout, bad n_dims or shape, a shape that is not a whole number
 * of blocks, an empty/too long/duplicate name, or an expert whose tensors
 * would not be adjacent; MOE_ERANGE for sizes overflowing the format. */
int moe_uth_writer_add(moe_uth_writer *w, const moe_uth_tensor *desc, moe_uth_fill_fn fill,
		       void *ctx, moe_error *e);
/* Same, with the data in memory (size bytes computed from the shape; not
 * copied: it must stay valid until moe_uth_writer_write returns). */
int moe_uth_writer_add_mem(moe_uth_writer *w, const moe_uth_tensor *desc, const void *data,
			   moe_error *e);
/* Set the metadata (copied).  It must be a UTF-8 JSON object; MOE_EINVAL
 * otherwise.  Default: "{}". */
/* Tensors described so far, in directory order (size filled in; offset and
 * xxh3 only after writing).  For summaries of what a write would produce. */
size_t moe_uth_writer_count(const moe_uth_writer *w);
const moe_uth_tensor *moe_uth_writer_tensor(const moe_uth_writer *w, size_t i);
int moe_uth_writer_set_meta(moe_uth_writer *w, const char *json, size_t len, moe_error *e);
/* Header flags (MOE_UTH_FLAG_*). */
void moe_uth_writer_set_flags(moe_uth_writer *w, uint32_t flags);
/* Write the whole file to `out`, which must be freshly opened (pos 0).  The
 * caller commits or aborts `out`.  Returns 0, a fill callback's error
 * (prefixed with the tensor name), MOE_EIO, MOE_ENOMEM or MOE_EINVAL. */
int moe_uth_writer_write(moe_uth_writer *w, moe_out *out, moe_error *e);
/* NULL is fine. */
void moe_uth_writer_free(moe_uth_writer *w);

#endif
