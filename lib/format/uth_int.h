/* uth_int.h — what the UTH reader (uth.c) and writer (uth_write.c) share:
 * little-endian field access, the header struct with its encoder, and the two
 * hash tables (tensor names; (layer, expert) groups) both sides use to
 * enforce unique names and expert adjacency.  Not a public header.
 */
#ifndef MOE_UTH_INT_H
#define MOE_UTH_INT_H

#include "uth.h"

/* ----------------------------------------------------- little endian */

static inline uint16_t moe_uth_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t moe_uth_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t moe_uth_le64(const uint8_t *p)
{
	return (uint64_t)moe_uth_le32(p) | (uint64_t)moe_uth_le32(p + 4) << 32;
}
static inline void moe_uth_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void moe_uth_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}
static inline void moe_uth_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

/* ------------------------------------------------------------ header */

/* Byte offsets of the header fields (man/uth.5, "FILE HEADER"). */
enum {
	MOE_UTH_H_MAGIC = 0,
	MOE_UTH_H_VERSION = 8,
	MOE_UTH_H_HEADER_SIZE = 12,
	MOE_UTH_H_FILE_SIZE = 16,
	MOE_UTH_H_N_TENSORS = 24,
	MOE_UTH_H_DIR_OFFSET = 32,
	MOE_UTH_H_DIR_SIZE = 40,
	MOE_UTH_H_NAMES_OFFSET = 48,
	MOE_UTH_H_NAMES_SIZE = 56,
	MOE_UTH_H_META_OFFSET = 64,
	MOE_UTH_H_META_SIZE = 72,
	MOE_UTH_H_DATA_OFFSET = 80,
	MOE_UTH_H_DATA_SIZE = 88,
	MOE_UTH_H_ALIGNMENT = 96,
	MOE_UTH_H_FLAGS = 100,
	MOE_UTH_H_META_XXH3 = 104,
	MOE_UTH_H_HEADER_XXH3 = 112,
	MOE_UTH_H_END = 120, /* bytes [120, 4096) are zero */
};

/* Byte offsets of the fields of a 64-byte directory record. */
enum {
	MOE_UTH_R_DTYPE = 0,
	MOE_UTH_R_N_DIMS = 2,
	MOE_UTH_R_LAYOUT = 3,
	MOE_UTH_R_NAME_OFFSET = 4,
	MOE_UTH_R_NE = 8,
	MOE_UTH_R_DATA_OFFSET = 24,
	MOE_UTH_R_DATA_SIZE = 32,
	MOE_UTH_R_SCALE_OFFSET = 40,
	MOE_UTH_R_LAYER = 44,
	MOE_UTH_R_EXPERT = 46,
	MOE_UTH_R_ROLE = 48,
	MOE_UTH_R_NAME_LEN = 50,
	MOE_UTH_R_RESERVED = 52,
	MOE_UTH_R_XXH3 = 56,
};

typedef struct moe_uth_hdr {
	uint32_t version, header_size;
	uint64_t file_size, n_tensors;
	uint64_t dir_offset, dir_size;
	uint64_t names_offset, names_size;
	uint64_t meta_offset, meta_size;
	uint64_t data_offset, data_size;
	uint32_t alignment, flags;
	uint64_t meta_xxh3, header_xxh3;
} moe_uth_hdr;

/* Fill buf (MOE_UTH_HEADER_SIZE bytes) from h, computing header_xxh3. */
void moe_uth_hdr_encode(const moe_uth_hdr *h, uint8_t *buf);
/* Encode a directory record. */
void moe_uth_rec_encode(const moe_uth_tensor *t, uint32_t name_offset, uint16_t name_len,
			uint8_t *rec);
/* Size of a tensor from dtype and shape, with the shape checks both sides
 * make (n_dims 1..4, no zero dimension, unused dimensions 1, ne[0] a whole
 * number of blocks, no overflow).  On error writes a message (without file
 * or tensor prefix) to msg and returns MOE_EFORMAT/MOE_ERANGE. */
int moe_uth_tensor_nbytes(uint16_t dtype, uint8_t n_dims, const uint32_t ne[4],
			  uint64_t *out, char *msg, size_t msg_n);

/* ------------------------------------------------------- hash tables */

/* Set of tensor names -> directory index (names are not copied). */
typedef struct moe_uth_nameset {
	struct moe_uth_nameslot {
		const char *key; /* NULL: empty */
		size_t idx;
	} *slot;
	size_t cap, n; /* cap: power of two */
} moe_uth_nameset;

/* Insert (name, idx); if the name is present already, return its index in
 * *dup and 1.  Returns 0 when inserted, MOE_ENOMEM. */
int moe_uth_nameset_add(moe_uth_nameset *s, const char *key, size_t idx, size_t *dup);
/* Index of name, or -1. */
long long moe_uth_nameset_get(const moe_uth_nameset *s, const char *key);
void moe_uth_nameset_free(moe_uth_nameset *s);

/* (layer, expert) -> first directory index and tensor count. */
typedef struct moe_uth_groupset {
	struct moe_uth_groupslot {
		uint32_t key; /* layer << 16 | expert */
		bool used;
		size_t first, count;
	} *slot;
	size_t cap, n;
} moe_uth_groupset;

/* The slot for key, inserting an empty one (count 0) if absent; NULL on
 * allocation failure. */
struct moe_uth_groupslot *moe_uth_groupset_get(moe_uth_groupset *s, uint32_t key, bool insert);
void moe_uth_groupset_free(moe_uth_groupset *s);

#endif
