/* gguf.h — reader for GGUF files (versions 2 and 3), the container of ggml /
 * llama.cpp: typed key/value metadata, tensor infos and an aligned data blob.
 *
 * How to use: open a byte source (moe_src_open_file or _mem), then
 * moe_gguf_open(&g, src, &e).  On success every key/value pair and every
 * tensor info has been parsed and validated (sizes, offsets, alignment,
 * overlaps, duplicates), but no tensor data has been read; look things up
 * with moe_gguf_find / moe_gguf_find_tensor or the typed getters, or walk
 * g->kv[0..n_kv) and g->tensors[0..n_tensors) in file order.  Tensor data
 * lives at [t->offset, t->offset + t->size) of the source (absolute offsets);
 * read it with moe_gguf_read_tensor or moe_src_read.  All strings and arrays
 * belong to the moe_gguf and stay valid until moe_gguf_close, which does not
 * close the source (it is borrowed and must outlive the moe_gguf).
 *
 * Errors name the source and the field, e.g.
 * "m.gguf: tensor 'blk.0.attn_q.weight': data [4096, 8192) past end of file (size 5000)".
 * Metadata memory is a small multiple of the metadata's size on disk.
 */
#ifndef MOE_GGUF_H
#define MOE_GGUF_H

#include "core.h"

/* KV value types, as on disk. */
enum {
	MOE_GGUF_T_UINT8 = 0,
	MOE_GGUF_T_INT8 = 1,
	MOE_GGUF_T_UINT16 = 2,
	MOE_GGUF_T_INT16 = 3,
	MOE_GGUF_T_UINT32 = 4,
	MOE_GGUF_T_INT32 = 5,
	MOE_GGUF_T_FLOAT32 = 6,
	MOE_GGUF_T_BOOL = 7,
	MOE_GGUF_T_STRING = 8,
	MOE_GGUF_T_ARRAY = 9,
	MOE_GGUF_T_UINT64 = 10,
	MOE_GGUF_T_INT64 = 11,
	MOE_GGUF_T_FLOAT64 = 12,
	MOE_GGUF_T_COUNT = 13
};

#define MOE_GGUF_DEFAULT_ALIGNMENT 32
#define MOE_GGUF_MAX_DIMS 4
/* Arrays of arrays deeper than this are rejected (bounds the recursion). */
#define MOE_GGUF_MAX_ARRAY_DEPTH 8

/* A string from the file: len bytes at ptr, plus a NUL terminator that is
 * not counted.  Values may contain any bytes (token strings can be raw,
 * non-UTF-8 bytes, even NUL); keys and tensor names never contain NUL. */
typedef struct moe_gguf_str {
	uint64_t len;
	const char *ptr;
} moe_gguf_str;

typedef struct moe_gguf_value moe_gguf_value;
struct moe_gguf_value {
	int type; /* MOE_GGUF_T_* */
	union {
		uint64_t u64; /* UINT8, UINT16, UINT32, UINT64 */
		int64_t i64;  /* INT8, INT16, INT32, INT64 */
		double f64;   /* FLOAT32 (exactly widened), FLOAT64 */
		bool b;       /* BOOL */
		moe_gguf_str str;
		struct {
			int type;   /* element type */
			uint64_t n; /* element count */
			/* numeric and BOOL: n packed native-endian elements of
			 * that type (bool as uint8_t 0/1); STRING:
			 * moe_gguf_str[n]; ARRAY: moe_gguf_value[n] (each of
			 * type ARRAY).  Never NULL, even when n is 0. */
			const void *data;
		} arr;
	};
};

typedef struct moe_gguf_kv {
	const char *key; /* NUL-terminated, no embedded NUL */
	moe_gguf_value v;
} moe_gguf_kv;

typedef struct moe_gguf_tensor {
	const char *name;  /* NUL-terminated, no embedded NUL */
	int dtype;         /* ggml type id == moe_dtype (lib/quant.h) */
	uint32_t n_dims;   /* 1..4 */
	uint64_t ne[MOE_GGUF_MAX_DIMS]; /* fastest first; unused dims = 1 */
	uint64_t n_elems;  /* product of ne */
	uint64_t offset;   /* absolute byte offset in the source */
	uint64_t size;     /* bytes */
} moe_gguf_tensor;

typedef struct moe_gguf {
	moe_src *src;         /* borrowed */
	const char *name;     /* copy of src->name, for messages */
	uint32_t version;     /* 2 or 3 */
	uint32_t alignment;   /* general.alignment or 32 */
	uint64_t data_offset; /* absolute start of the data section (may equal
				 or exceed the file size if there are no tensors) */
	uint64_t n_kv;
	moe_gguf_kv *kv;
	uint64_t n_tensors;
	moe_gguf_tensor *tensors;
	moe_arena arena; /* owns everything above */
	/* private: open-addressing hash indexes (slot = index + 1, 0 = empty) */
	uint32_t *kv_index, *tensor_index;
	uint64_t kv_index_cap, tensor_index_cap; /* powers of two */
} moe_gguf;

/* Parse the GGUF header, metadata and tensor infos of src.  Returns 0 and
 * sets *out, or MOE_EFORMAT (malformed/truncated), MOE_EUNSUPPORTED (GGUF v1
 * or a future version, unknown tensor type), MOE_ENOMEM, or the source's
 * MOE_EIO; *out is NULL on error. */
int moe_gguf_open(moe_gguf **out, moe_src *src, moe_error *e);
/* Free everything (not the source). NULL is a no-op. */
void moe_gguf_close(moe_gguf *g);

/* The pair with this key, or NULL. */
const moe_gguf_kv *moe_gguf_find(const moe_gguf *g, const char *key);
/* The tensor with this name, or NULL. */
const moe_gguf_tensor *moe_gguf_find_tensor(const moe_gguf *g, const char *name);

/* Typed getters.  All return 0 and store the value, MOE_ENOTFOUND if the
 * key is absent, or MOE_EFORMAT if the value's type does not fit:
 *  _u64: any integer type with a value >= 0;
 *  _i64: any integer type with a value <= INT64_MAX;
 *  _f64: FLOAT32, FLOAT64 or any integer type (converted);
 *  _bool: BOOL;  _str: STRING (out points to the NUL-terminated copy; use
 *  moe_gguf_find for the length if it may contain NUL);
 *  _arr: ARRAY, storing the element type, count and data as in
 *  moe_gguf_value.arr. */
int moe_gguf_get_u64(const moe_gguf *g, const char *key, uint64_t *out, moe_error *e);
int moe_gguf_get_i64(const moe_gguf *g, const char *key, int64_t *out, moe_error *e);
int moe_gguf_get_f64(const moe_gguf *g, const char *key, double *out, moe_error *e);
int moe_gguf_get_bool(const moe_gguf *g, const char *key, bool *out, moe_error *e);
int moe_gguf_get_str(const moe_gguf *g, const char *key, const char **out, moe_error *e);
int moe_gguf_get_arr(const moe_gguf *g, const char *key, int *elem_type, uint64_t *n,
		     const void **data, moe_error *e);

/* Read a tensor's bytes into buf (t->size bytes).  Returns 0, MOE_ERANGE if
 * the size does not fit in size_t, or the source's error. */
int moe_gguf_read_tensor(const moe_gguf *g, const moe_gguf_tensor *t, void *buf,
			 moe_error *e);

/* Name of a KV value type ("uint32", "string", ...; "?" if unknown). */
const char *moe_gguf_type_name(int type);
/* Bytes of one element of a numeric/BOOL type, 0 for STRING, ARRAY, unknown. */
size_t moe_gguf_type_size(int type);

#endif
