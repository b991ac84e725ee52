/* uth.c — UTH v1 reader and validator: the role table, the header/record
 * encoders shared with the writer, the name and expert-group hash tables, and
 * moe_uth_parse/open/verify.  Validation is complete before a moe_uth is
 * handed out, so code using it may trust every offset and size.
 */
#include "format/uth_int.h"
#include "quant.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

struct moe_uth_index {
	moe_uth_nameset names;
	moe_uth_groupset groups;
};

/* ----------------------------------------------------------------- roles */

static const char *const role_names[MOE_UTH_ROLE_COUNT] = {
	[MOE_UTH_ROLE_TOKEN_EMBD] = "token_embd",
	[MOE_UTH_ROLE_OUTPUT_NORM] = "output_norm",
	[MOE_UTH_ROLE_OUTPUT] = "output",
	[MOE_UTH_ROLE_ATTN_NORM] = "attn_norm",
	[MOE_UTH_ROLE_ATTN_Q] = "attn_q",
	[MOE_UTH_ROLE_ATTN_K] = "attn_k",
	[MOE_UTH_ROLE_ATTN_V] = "attn_v",
	[MOE_UTH_ROLE_ATTN_OUTPUT] = "attn_output",
	[MOE_UTH_ROLE_ATTN_Q_BIAS] = "attn_q_bias",
	[MOE_UTH_ROLE_ATTN_K_BIAS] = "attn_k_bias",
	[MOE_UTH_ROLE_ATTN_V_BIAS] = "attn_v_bias",
	[MOE_UTH_ROLE_ATTN_Q_NORM] = "attn_q_norm",
	[MOE_UTH_ROLE_ATTN_K_NORM] = "attn_k_norm",
	[MOE_UTH_ROLE_FFN_NORM] = "ffn_norm",
	[MOE_UTH_ROLE_FFN_GATE] = "ffn_gate",
	[MOE_UTH_ROLE_FFN_UP] = "ffn_up",
	[MOE_UTH_ROLE_FFN_DOWN] = "ffn_down",
	[MOE_UTH_ROLE_FFN_GATE_INP] = "ffn_gate_inp",
	[MOE_UTH_ROLE_FFN_GATE_SHEXP] = "ffn_gate_shexp",
	[MOE_UTH_ROLE_FFN_UP_SHEXP] = "ffn_up_shexp",
	[MOE_UTH_ROLE_FFN_DOWN_SHEXP] = "ffn_down_shexp",
	[MOE_UTH_ROLE_FFN_GATE_INP_SHEXP] = "ffn_gate_inp_shexp",
	[MOE_UTH_ROLE_TOKENIZER_TOKENS] = "tokenizer_tokens",
	[MOE_UTH_ROLE_TOKENIZER_TOKEN_OFFSETS] = "tokenizer_token_offsets",
	[MOE_UTH_ROLE_TOKENIZER_SCORES] = "tokenizer_scores",
	[MOE_UTH_ROLE_TOKENIZER_TOKEN_TYPES] = "tokenizer_token_types",
	[MOE_UTH_ROLE_TOKENIZER_MERGES] = "tokenizer_merges",
	[MOE_UTH_ROLE_TOKENIZER_MERGE_OFFSETS] = "tokenizer_merge_offsets",
	[MOE_UTH_ROLE_ATTN_OUTPUT_BIAS] = "attn_output_bias",
	[MOE_UTH_ROLE_ATTN_NORM_BIAS] = "attn_norm_bias",
	[MOE_UTH_ROLE_FFN_NORM_BIAS] = "ffn_norm_bias",
	[MOE_UTH_ROLE_OUTPUT_NORM_BIAS] = "output_norm_bias",
	[MOE_UTH_ROLE_OUTPUT_BIAS] = "output_bias",
	[MOE_UTH_ROLE_ATTN_Q_A] = "attn_q_a",
	[MOE_UTH_ROLE_ATTN_Q_A_NORM] = "attn_q_a_norm",
	[MOE_UTH_ROLE_ATTN_Q_B] = "attn_q_b",
	[MOE_UTH_ROLE_ATTN_KV_A_MQA] = "attn_kv_a_mqa",
	[MOE_UTH_ROLE_ATTN_KV_A_NORM] = "attn_kv_a_norm",
	[MOE_UTH_ROLE_ATTN_KV_B] = "attn_kv_b",
	[MOE_UTH_ROLE_ATTN_K_B] = "attn_k_b",
	[MOE_UTH_ROLE_ATTN_V_B] = "attn_v_b",
	[MOE_UTH_ROLE_FFN_EXP_PROBS_B] = "ffn_exp_probs_b",
	[MOE_UTH_ROLE_ROPE_FREQS] = "rope_freqs",
	[MOE_UTH_ROLE_ATTN_QKV] = "attn_qkv",
	[MOE_UTH_ROLE_FFN_GATE_INP_BIAS] = "ffn_gate_inp_bias",
	[MOE_UTH_ROLE_ATTN_POST_NORM] = "attn_post_norm",
	[MOE_UTH_ROLE_FFN_POST_NORM] = "ffn_post_norm",
	[MOE_UTH_ROLE_OTHER] = "other",
	[MOE_UTH_ROLE_ATTN_SINKS] = "attn_sinks",
	[MOE_UTH_ROLE_FFN_GATE_BIAS] = "ffn_gate_bias",
	[MOE_UTH_ROLE_FFN_UP_BIAS] = "ffn_up_bias",
	[MOE_UTH_ROLE_FFN_DOWN_BIAS] = "ffn_down_bias",
	[MOE_UTH_ROLE_ROPE_FACTORS_SHORT] = "rope_factors_short",
	[MOE_UTH_ROLE_ROPE_FACTORS_LONG] = "rope_factors_long",
};

const char *moe_uth_role_name(int role)
{
	if (role <= 0 || role >= MOE_UTH_ROLE_COUNT)
		return NULL;
	return role_names[role];
}

int moe_uth_role_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int i = 1; i < MOE_UTH_ROLE_COUNT; i++)
		if (strcmp(role_names[i], name) == 0)
			return i;
	return -1;
}

/* ------------------------------------------------------------- encoders */

void moe_uth_hdr_encode(const moe_uth_hdr *h, uint8_t *buf)
{
	memset(buf, 0, MOE_UTH_HEADER_SIZE);
	memcpy(buf + MOE_UTH_H_MAGIC, MOE_UTH_MAGIC, 8);
	moe_uth_put32(buf + MOE_UTH_H_VERSION, h->version);
	moe_uth_put32(buf + MOE_UTH_H_HEADER_SIZE, h->header_size);
	moe_uth_put64(buf + MOE_UTH_H_FILE_SIZE, h->file_size);
	moe_uth_put64(buf + MOE_UTH_H_N_TENSORS, h->n_tensors);
	moe_uth_put64(buf + MOE_UTH_H_DIR_OFFSET, h->dir_offset);
	moe_uth_put64(buf + MOE_UTH_H_DIR_SIZE, h->dir_size);
	moe_uth_put64(buf + MOE_UTH_H_NAMES_OFFSET, h->names_offset);
	moe_uth_put64(buf + MOE_UTH_H_NAMES_SIZE, h->names_size);
	moe_uth_put64(buf + MOE_UTH_H_META_OFFSET, h->meta_offset);
	moe_uth_put64(buf + MOE_UTH_H_META_SIZE, h->meta_size);
	moe_uth_put64(buf + MOE_UTH_H_DATA_OFFSET, h->data_offset);
	moe_uth_put64(buf + MOE_UTH_H_DATA_SIZE, h->data_size);
	moe_uth_put32(buf + MOE_UTH_H_ALIGNMENT, h->alignment);
	moe_uth_put32(buf + MOE_UTH_H_FLAGS, h->flags);
	moe_uth_put64(buf + MOE_UTH_H_META_XXH3, h->meta_xxh3);
	moe_uth_put64(buf + MOE_UTH_H_HEADER_XXH3, XXH3_64bits(buf, MOE_UTH_H_HEADER_XXH3));
}

static void hdr_decode(const uint8_t *buf, moe_uth_hdr *h)
{
	h->version = moe_uth_le32(buf + MOE_UTH_H_VERSION);
	h->header_size = moe_uth_le32(buf + MOE_UTH_H_HEADER_SIZE);
	h->file_size = moe_uth_le64(buf + MOE_UTH_H_FILE_SIZE);
	h->n_tensors = moe_uth_le64(buf + MOE_UTH_H_N_TENSORS);
	h->dir_offset = moe_uth_le64(buf + MOE_UTH_H_DIR_OFFSET);
	h->dir_size = moe_uth_le64(buf + MOE_UTH_H_DIR_SIZE);
	h->names_offset = moe_uth_le64(buf + MOE_UTH_H_NAMES_OFFSET);
	h->names_size = moe_uth_le64(buf + MOE_UTH_H_NAMES_SIZE);
	h->meta_offset = moe_uth_le64(buf + MOE_UTH_H_META_OFFSET);
	h->meta_size = moe_uth_le64(buf + MOE_UTH_H_META_SIZE);
	h->data_offset = moe_uth_le64(buf + MOE_UTH_H_DATA_OFFSET);
	h->data_size = moe_uth_le64(buf + MOE_UTH_H_DATA_SIZE);
	h->alignment = moe_uth_le32(buf + MOE_UTH_H_ALIGNMENT);
	h->flags = moe_uth_le32(buf + MOE_UTH_H_FLAGS);
	h->meta_xxh3 = moe_uth_le64(buf + MOE_UTH_H_META_XXH3);
	h->header_xxh3 = moe_uth_le64(buf + MOE_UTH_H_HEADER_XXH3);
}

void moe_uth_rec_encode(const moe_uth_tensor *t, uint32_t name_offset, uint16_t name_len,
			uint8_t *rec)
{
	memset(rec, 0, MOE_UTH_RECORD_SIZE);
	moe_uth_put16(rec + MOE_UTH_R_DTYPE, t->dtype);
	rec[MOE_UTH_R_N_DIMS] = t->n_dims;
	rec[MOE_UTH_R_LAYOUT] = t->layout;
	moe_uth_put32(rec + MOE_UTH_R_NAME_OFFSET, name_offset);
	for (int i = 0; i < 4; i++)
		moe_uth_put32(rec + MOE_UTH_R_NE + 4 * i, t->ne[i]);
	moe_uth_put64(rec + MOE_UTH_R_DATA_OFFSET, t->offset);
	moe_uth_put64(rec + MOE_UTH_R_DATA_SIZE, t->size);
	moe_uth_put32(rec + MOE_UTH_R_SCALE_OFFSET, t->scale_offset);
	moe_uth_put16(rec + MOE_UTH_R_LAYER, t->layer);
	moe_uth_put16(rec + MOE_UTH_R_EXPERT, t->expert);
	moe_uth_put16(rec + MOE_UTH_R_ROLE, t->role);
	moe_uth_put16(rec + MOE_UTH_R_NAME_LEN, name_len);
	moe_uth_put64(rec + MOE_UTH_R_XXH3, t->xxh3);
}

int moe_uth_tensor_nbytes(uint16_t dtype, uint8_t n_dims, const uint32_t ne[4],
			  uint64_t *out, char *msg, size_t msg_n)
{
	const moe_type_traits *tt = moe_type_get(dtype);
	uint64_t nel = 1, nb;

	if (!tt) {
		snprintf(msg, msg_n, "dtype %u is unknown", dtype);
		return MOE_EFORMAT;
	}
	if (n_dims < 1 || n_dims > 4) {
		snprintf(msg, msg_n, "n_dims %u is not in 1..4", n_dims);
		return MOE_EFORMAT;
	}
	for (int i = 0; i < 4; i++) {
		if (i < n_dims && ne[i] == 0) {
			snprintf(msg, msg_n, "ne[%d] is 0", i);
			return MOE_EFORMAT;
		}
		if (i >= n_dims && ne[i] != 1) {
			snprintf(msg, msg_n, "ne[%d] = %u but must be 1 (n_dims %u)", i, ne[i],
				 n_dims);
			return MOE_EFORMAT;
		}
		if (!moe_mul_u64(nel, ne[i], &nel)) {
			snprintf(msg, msg_n, "element count overflows");
			return MOE_ERANGE;
		}
	}
	/* Plain rows: every row is a whole number of blocks. */
	if (ne[0] % tt->block_size != 0) {
		snprintf(msg, msg_n, "ne[0] = %u is not a multiple of the %s block size %u",
			 ne[0], tt->name, tt->block_size);
		return MOE_EFORMAT;
	}
	if (!moe_mul_u64(nel / tt->block_size, tt->type_size, &nb)) {
		snprintf(msg, msg_n, "data size overflows");
		return MOE_ERANGE;
	}
	*out = nb;
	return 0;
}

/* ---------------------------------------------------------- hash tables */

static uint64_t hash_str(const char *s)
{
	return XXH3_64bits(s, strlen(s));
}

/* Whether a slot is used and, if so, its key's hash. */
typedef bool (*slot_hash_fn)(const void *slot, uint64_t *hash);

/* Both sets are open-addressing tables with linear probing and a power-of-
 * two capacity.  Returns the table of twice *cap slots (64 at first) of
 * `size` bytes holding the used slots of `slots`, which it frees, and
 * updates *cap; NULL when out of memory (slots and *cap unchanged). */
static void *table_grow(void *slots, size_t *cap, size_t size, slot_hash_fn slot_hash)
{
	size_t ncap = *cap ? *cap * 2 : 64;
	unsigned char *old = slots, *ns = calloc(ncap, size);
	uint64_t h, unused;

	if (!ns)
		return NULL;
	for (size_t i = 0; i < *cap; i++) {
		if (!slot_hash(old + i * size, &h))
			continue;
		size_t j = h & (ncap - 1);
		while (slot_hash(ns + j * size, &unused))
			j = (j + 1) & (ncap - 1);
		memcpy(ns + j * size, old + i * size, size);
	}
	free(slots);
	*cap = ncap;
	return ns;
}

static bool nameslot_hash(const void *slot, uint64_t *hash)
{
	const struct moe_uth_nameslot *ns = slot;
	if (!ns->key)
		return false;
	*hash = hash_str(ns->key);
	return true;
}

static int nameset_grow(moe_uth_nameset *s)
{
	struct moe_uth_nameslot *ns = table_grow(s->slot, &s->cap, sizeof(*ns), nameslot_hash);

	if (!ns)
		return MOE_ENOMEM;
	s->slot = ns;
	return 0;
}

int moe_uth_nameset_add(moe_uth_nameset *s, const char *key, size_t idx, size_t *dup)
{
	/* Keep the load factor at most 1/2 so probes stay short. */
	if ((s->n + 1) * 2 > s->cap)
		MOE_TRY(nameset_grow(s));
	size_t j = hash_str(key) & (s->cap - 1);
	while (s->slot[j].key) {
		if (strcmp(s->slot[j].key, key) == 0) {
			*dup = s->slot[j].idx;
			return 1;
		}
		j = (j + 1) & (s->cap - 1);
	}
	s->slot[j].key = key;
	s->slot[j].idx = idx;
	s->n++;
	return 0;
}

long long moe_uth_nameset_get(const moe_uth_nameset *s, const char *key)
{
	if (!s->cap)
		return -1;
	size_t j = hash_str(key) & (s->cap - 1);
	while (s->slot[j].key) {
		if (strcmp(s->slot[j].key, key) == 0)
			return (long long)s->slot[j].idx;
		j = (j + 1) & (s->cap - 1);
	}
	return -1;
}

void moe_uth_nameset_free(moe_uth_nameset *s)
{
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

static size_t hash_u32(uint32_t k)
{
	uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull;
	return (size_t)(x >> 32);
}

static bool groupslot_hash(const void *slot, uint64_t *hash)
{
	const struct moe_uth_groupslot *gs = slot;
	if (!gs->used)
		return false;
	*hash = hash_u32(gs->key);
	return true;
}

static int groupset_grow(moe_uth_groupset *s)
{
	struct moe_uth_groupslot *ns = table_grow(s->slot, &s->cap, sizeof(*ns), groupslot_hash);

	if (!ns)
		return MOE_ENOMEM;
	s->slot = ns;
	return 0;
}

struct moe_uth_groupslot *moe_uth_groupset_get(moe_uth_groupset *s, uint32_t key, bool insert)
{
	if (insert && (s->n + 1) * 2 > s->cap && groupset_grow(s) < 0)
		return NULL;
	if (!s->cap)
		return NULL;
	size_t j = hash_u32(key) & (s->cap - 1);
	while (s->slot[j].used) {
		if (s->slot[j].key == key)
			return &s->slot[j];
		j = (j + 1) & (s->cap - 1);
	}
	if (!insert)
		return NULL;
	s->slot[j].used = true;
	s->slot[j].key = key;
	s->slot[j].first = 0;
	s->slot[j].count = 0;
	s->n++;
	return &s->slot[j];
}

void moe_uth_groupset_free(moe_uth_groupset *s)
{
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

/* --------------------------------------------------------------- parser */

static bool all_zero(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* The header: identity, checksum, then the section table in its fixed order
 * [header][directory][names][metadata][pad][data], each check overflow-safe. */
static int check_header(const char *fn, const uint8_t *buf, uint64_t size, moe_uth_hdr *h,
			moe_error *e)
{
	uint64_t t, names_end, meta_end, data_start;

	if (size < MOE_UTH_HEADER_SIZE)
		return moe_err(e, MOE_EFORMAT, "%s: file is %llu bytes, shorter than the %u-byte "
			       "UTH header", fn, (unsigned long long)size, MOE_UTH_HEADER_SIZE);
	if (memcmp(buf, MOE_UTH_MAGIC, 8) != 0)
		return moe_err(e, MOE_EFORMAT, "%s: bad magic (not a UTH v1 file)", fn);
	hdr_decode(buf, h);
	if (h->version != MOE_UTH_VERSION)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: header: version %u is not supported "
			       "(expected %u)", fn, h->version, MOE_UTH_VERSION);
	if (h->header_size != MOE_UTH_HEADER_SIZE)
		return moe_err(e, MOE_EFORMAT, "%s: header: header_size %u is not %u", fn,
			       h->header_size, MOE_UTH_HEADER_SIZE);
	uint64_t hx = XXH3_64bits(buf, MOE_UTH_H_HEADER_XXH3);
	if (hx != h->header_xxh3)
		return moe_err(e, MOE_ECHECKSUM, "%s: header checksum mismatch (stored %016llx, "
			       "computed %016llx)", fn, (unsigned long long)h->header_xxh3,
			       (unsigned long long)hx);
	if (!all_zero(buf + MOE_UTH_H_END, MOE_UTH_HEADER_SIZE - MOE_UTH_H_END))
		return moe_err(e, MOE_EFORMAT, "%s: header: reserved bytes %u..%u are not zero",
			       fn, MOE_UTH_H_END, MOE_UTH_HEADER_SIZE - 1);
	if (h->file_size != size)
		return moe_err(e, MOE_EFORMAT, "%s: header: file_size %llu does not match the "
			       "actual size %llu (truncated or extended file)", fn,
			       (unsigned long long)h->file_size, (unsigned long long)size);
	if (h->alignment != MOE_UTH_ALIGN)
		return moe_err(e, MOE_EFORMAT, "%s: header: alignment %u is not %u", fn,
			       h->alignment, MOE_UTH_ALIGN);
	if (h->flags & ~MOE_UTH_FLAGS_KNOWN)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: header: unknown flags 0x%x", fn,
			       h->flags & ~MOE_UTH_FLAGS_KNOWN);
	if (h->dir_offset != MOE_UTH_HEADER_SIZE)
		return moe_err(e, MOE_EFORMAT, "%s: header: dir_offset %llu is not %u", fn,
			       (unsigned long long)h->dir_offset, MOE_UTH_HEADER_SIZE);
	if (!moe_mul_u64(h->n_tensors, MOE_UTH_RECORD_SIZE, &t))
		return moe_err(e, MOE_ERANGE, "%s: header: n_tensors %llu overflows the "
			       "directory size", fn, (unsigned long long)h->n_tensors);
	if (t != h->dir_size)
		return moe_err(e, MOE_EFORMAT, "%s: header: dir_size %llu is not n_tensors %llu "
			       "x %u", fn, (unsigned long long)h->dir_size,
			       (unsigned long long)h->n_tensors, MOE_UTH_RECORD_SIZE);
	if (!moe_range_ok(h->dir_offset, h->dir_size, size))
		return moe_err(e, MOE_ERANGE, "%s: header: directory [%llu, +%llu) is outside "
			       "the file (size %llu)", fn, (unsigned long long)h->dir_offset,
			       (unsigned long long)h->dir_size, (unsigned long long)size);
	if (h->names_offset != h->dir_offset + h->dir_size)
		return moe_err(e, MOE_EFORMAT, "%s: header: names_offset %llu does not follow "
			       "the directory (expected %llu)", fn,
			       (unsigned long long)h->names_offset,
			       (unsigned long long)(h->dir_offset + h->dir_size));
	if (!moe_range_ok(h->names_offset, h->names_size, size))
		return moe_err(e, MOE_ERANGE, "%s: header: names [%llu, +%llu) is outside the "
			       "file (size %llu)", fn, (unsigned long long)h->names_offset,
			       (unsigned long long)h->names_size, (unsigned long long)size);
	names_end = h->names_offset + h->names_size;
	if (h->meta_offset != names_end)
		return moe_err(e, MOE_EFORMAT, "%s: header: meta_offset %llu does not follow the "
			       "names (expected %llu)", fn, (unsigned long long)h->meta_offset,
			       (unsigned long long)names_end);
	if (!moe_range_ok(h->meta_offset, h->meta_size, size))
		return moe_err(e, MOE_ERANGE, "%s: header: metadata [%llu, +%llu) is outside "
			       "the file (size %llu)", fn, (unsigned long long)h->meta_offset,
			       (unsigned long long)h->meta_size, (unsigned long long)size);
	meta_end = h->meta_offset + h->meta_size;
	/* meta_end <= size < 2^64, so aligning it cannot overflow for a real
	 * image; check anyway. */
	if (!moe_align_u64(meta_end, MOE_UTH_ALIGN, &data_start))
		return moe_err(e, MOE_ERANGE, "%s: header: metadata end overflows", fn);
	if (h->data_offset != data_start)
		return moe_err(e, MOE_EFORMAT, "%s: header: data_offset %llu is not the metadata "
			       "end rounded up to %u (expected %llu)", fn,
			       (unsigned long long)h->data_offset, MOE_UTH_ALIGN,
			       (unsigned long long)data_start);
	if (h->data_offset > size)
		return moe_err(e, MOE_ERANGE, "%s: header: data_offset %llu is past the end of "
			       "the file (size %llu)", fn, (unsigned long long)h->data_offset,
			       (unsigned long long)size);
	if (h->data_size != size - h->data_offset)
		return moe_err(e, MOE_EFORMAT, "%s: header: data_size %llu is not file_size - "
			       "data_offset (%llu)", fn, (unsigned long long)h->data_size,
			       (unsigned long long)(size - h->data_offset));
	uint64_t mx = XXH3_64bits(buf + h->dir_offset, meta_end - h->dir_offset);
	if (mx != h->meta_xxh3)
		return moe_err(e, MOE_ECHECKSUM, "%s: meta checksum mismatch over directory, "
			       "names and metadata (stored %016llx, computed %016llx)", fn,
			       (unsigned long long)h->meta_xxh3, (unsigned long long)mx);
	if (!all_zero(buf + meta_end, h->data_offset - meta_end))
		return moe_err(e, MOE_EFORMAT, "%s: padding after the metadata (bytes %llu..%llu) "
			       "is not zero", fn, (unsigned long long)meta_end,
			       (unsigned long long)(h->data_offset - 1));
	return 0;
}

static int check_meta(const char *fn, moe_uth *u, const uint8_t *p, uint64_t n, moe_error *e)
{
	json_error_t je;
	json_t *j;

	if (n > SIZE_MAX - 1)
		return moe_err(e, MOE_ERANGE, "%s: metadata too large", fn);
	/* jansson checks UTF-8; raw NUL bytes are refused (they would cut the
	 * C string handed to users). */
	if (memchr(p, 0, n))
		return moe_err(e, MOE_EFORMAT, "%s: metadata: not valid JSON (contains a NUL "
			       "byte)", fn);
	j = json_loadb((const char *)p, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return moe_err(e, MOE_EFORMAT, "%s: metadata: not valid JSON: %s at byte %d", fn,
			       je.text, je.position);
	bool obj = json_is_object(j);
	json_decref(j);
	if (!obj)
		return moe_err(e, MOE_EFORMAT, "%s: metadata: JSON is not an object", fn);
	char *m = malloc((size_t)n + 1);
	if (!m)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", fn);
	memcpy(m, p, (size_t)n);
	m[n] = 0;
	u->meta = m;
	u->meta_len = (size_t)n;
	return 0;
}

#define TERR(code, ...)                                                                  \
	moe_err(e, code, "%s: tensor %llu%s%s%s: %s", fn, (unsigned long long)i,          \
		name ? " '" : "", name ? name : "", name ? "'" : "",                       \
		(snprintf(msg, sizeof(msg), __VA_ARGS__), msg))

/* One directory record: decode it into *t and check it on its own and
 * against the previous tensor (data order) and the tables (names,
 * expert groups). */
static int check_record(const char *fn, moe_uth *u, const moe_uth_hdr *h, uint64_t i,
			const uint8_t *buf, moe_error *e)
{
	const uint8_t *rec = buf + h->dir_offset + i * MOE_UTH_RECORD_SIZE;
	const char *names = (const char *)buf + h->names_offset;
	moe_uth_tensor *t = &u->tensors[i];
	const char *name = NULL;
	char msg[256];
	uint64_t nb;
	int rc;

	uint32_t name_off = moe_uth_le32(rec + MOE_UTH_R_NAME_OFFSET);
	uint16_t name_len = moe_uth_le16(rec + MOE_UTH_R_NAME_LEN);
	/* name_off + name_len + 1 cannot overflow: u32 + u16 + 1 < 2^64. */
	if ((uint64_t)name_off + name_len + 1 > h->names_size)
		return TERR(MOE_ERANGE, "name_offset %u + name_len %u is outside the names "
			    "(%llu bytes)", name_off, name_len, (unsigned long long)h->names_size);
	if (names[name_off + name_len] != 0)
		return TERR(MOE_EFORMAT, "name at name_offset %u is not NUL-terminated after "
			    "name_len %u bytes", name_off, name_len);
	if (name_len == 0)
		return TERR(MOE_EFORMAT, "name_len is 0 (empty name)");
	if (memchr(names + name_off, 0, name_len))
		return TERR(MOE_EFORMAT, "name at name_offset %u contains a NUL before name_len "
			    "%u", name_off, name_len);
	name = names + name_off;

	t->name = name;
	t->dtype = moe_uth_le16(rec + MOE_UTH_R_DTYPE);
	t->n_dims = rec[MOE_UTH_R_N_DIMS];
	t->layout = rec[MOE_UTH_R_LAYOUT];
	for (int k = 0; k < 4; k++)
		t->ne[k] = moe_uth_le32(rec + MOE_UTH_R_NE + 4 * k);
	t->offset = moe_uth_le64(rec + MOE_UTH_R_DATA_OFFSET);
	t->size = moe_uth_le64(rec + MOE_UTH_R_DATA_SIZE);
	t->scale_offset = moe_uth_le32(rec + MOE_UTH_R_SCALE_OFFSET);
	t->layer = moe_uth_le16(rec + MOE_UTH_R_LAYER);
	t->expert = moe_uth_le16(rec + MOE_UTH_R_EXPERT);
	t->role = moe_uth_le16(rec + MOE_UTH_R_ROLE);
	t->xxh3 = moe_uth_le64(rec + MOE_UTH_R_XXH3);

	if (moe_uth_le32(rec + MOE_UTH_R_RESERVED) != 0)
		return TERR(MOE_EFORMAT, "reserved bytes 52..55 are not zero");
	/* Kernel-type ids (quant.h, >= MOE_DTYPE_MAX) never appear in a file. */
	if (t->dtype >= MOE_DTYPE_MAX || !moe_type_get(t->dtype))
		return TERR(MOE_EUNSUPPORTED, "dtype %u is unknown", t->dtype);
	if (!moe_uth_role_name(t->role))
		return TERR(MOE_EFORMAT, "role %u is unknown", t->role);
	if (!moe_repack_layout_name(t->layout))
		return TERR(MOE_EUNSUPPORTED, "layout %u is unknown", t->layout);
	if (t->scale_offset != 0)
		return TERR(MOE_EFORMAT, "scale_offset %u must be 0 for layout %u",
			    t->scale_offset, t->layout);
	rc = moe_uth_tensor_nbytes(t->dtype, t->n_dims, t->ne, &nb, msg, sizeof(msg));
	if (rc < 0) {
		char m2[256];
		memcpy(m2, msg, sizeof(m2));
		return TERR(rc, "%s", m2);
	}
	if (moe_repack_check(t->layout, t->dtype, t->n_dims, t->ne, t->role, msg, sizeof(msg)) < 0) {
		char m2[256];
		memcpy(m2, msg, sizeof(m2));
		return TERR(MOE_EFORMAT, "%s", m2);
	}
	if (t->size != nb)
		return TERR(MOE_EFORMAT, "data_size %llu does not match dtype %s and shape "
			    "[%u, %u, %u, %u] (expected %llu)", (unsigned long long)t->size,
			    moe_type_name(t->dtype), t->ne[0], t->ne[1], t->ne[2], t->ne[3],
			    (unsigned long long)nb);
	if (t->offset % MOE_UTH_ALIGN != 0)
		return TERR(MOE_EFORMAT, "data_offset %llu is not aligned to %u",
			    (unsigned long long)t->offset, MOE_UTH_ALIGN);
	if (t->offset < h->data_offset || !moe_range_ok(t->offset, t->size, u->file_size))
		return TERR(MOE_ERANGE, "data [%llu, +%llu) is outside the data section "
			    "[%llu, %llu)", (unsigned long long)t->offset,
			    (unsigned long long)t->size, (unsigned long long)h->data_offset,
			    (unsigned long long)u->file_size);
	if (i > 0) {
		const moe_uth_tensor *p = &u->tensors[i - 1];
		if (t->offset < p->offset + p->size)
			return TERR(MOE_EFORMAT, "data_offset %llu overlaps or precedes tensor "
				    "'%s' (data must follow directory order; previous ends at "
				    "%llu)", (unsigned long long)t->offset, p->name,
				    (unsigned long long)(p->offset + p->size));
	}

	size_t dup;
	rc = moe_uth_nameset_add(&u->index->names, name, (size_t)i, &dup);
	if (rc < 0)
		return moe_err(e, rc, "%s: out of memory", fn);
	if (rc == 1)
		return TERR(MOE_EFORMAT, "duplicate name (also tensor %zu)", dup);

	if (t->expert != MOE_UTH_NONE) {
		uint32_t key = (uint32_t)t->layer << 16 | t->expert;
		const moe_uth_tensor *p = i > 0 ? &u->tensors[i - 1] : NULL;
		struct moe_uth_groupslot *g = moe_uth_groupset_get(&u->index->groups, key, true);
		if (!g)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", fn);
		if (g->count == 0) {
			g->first = (size_t)i;
		} else if (!p || p->layer != t->layer || p->expert != t->expert) {
			return TERR(MOE_EFORMAT, "expert (layer %u, expert %u) is not adjacent: "
				    "its tensors are split (first is '%s')", t->layer, t->expert,
				    u->tensors[g->first].name);
		}
		g->count++;
	}
	return 0;
}

int moe_uth_parse(const char *name, const uint8_t *buf, uint64_t size, moe_uth **out,
		  moe_error *e)
{
	moe_uth_hdr h = { 0 };
	moe_uth *u;
	char *fn;
	int rc;

	*out = NULL;
	if (!name)
		name = "(memory)";
	u = calloc(1, sizeof(*u));
	fn = strdup(name);
	if (!u || !fn) {
		free(u);
		free(fn);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", name);
	}
	u->path = fn;
	u->fd = -1;
	u->map = buf;
	u->file_size = size;

	rc = check_header(fn, buf, size, &h, e);
	if (rc < 0)
		goto fail;
	u->flags = h.flags;
	u->n_tensors = h.n_tensors;
	u->data_offset = h.data_offset;
	u->data_size = h.data_size;
	rc = check_meta(fn, u, buf + h.meta_offset, h.meta_size, e);
	if (rc < 0)
		goto fail;
	/* n_tensors <= size / 64, so this allocation is bounded by the file. */
	u->index = calloc(1, sizeof(*u->index));
	if (h.n_tensors > SIZE_MAX / sizeof(moe_uth_tensor))
		u->tensors = NULL;
	else
		u->tensors = calloc(h.n_tensors ? (size_t)h.n_tensors : 1, sizeof(moe_uth_tensor));
	if (!u->index || !u->tensors) {
		rc = moe_err(e, MOE_ENOMEM, "%s: out of memory for %llu tensors", fn,
			     (unsigned long long)h.n_tensors);
		goto fail;
	}
	for (uint64_t i = 0; i < h.n_tensors; i++) {
		rc = check_record(fn, u, &h, i, buf, e);
		if (rc < 0)
			goto fail;
	}
	*out = u;
	return 0;
fail:
	moe_uth_close(u);
	return rc;
}

int moe_uth_open(moe_uth **out, const char *path, moe_error *e)
{
	struct stat st;
	void *map;
	int fd, rc;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = moe_err(e, MOE_EIO, "%s: cannot stat: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = moe_err(e, MOE_EIO, "%s: not a regular file (UTH files are mapped; "
			     "use a file, not a pipe)", path);
		goto fail;
	}
	if ((uint64_t)st.st_size < MOE_UTH_HEADER_SIZE) {
		rc = moe_err(e, MOE_EFORMAT, "%s: file is %llu bytes, shorter than the %u-byte "
			     "UTH header", path, (unsigned long long)st.st_size,
			     MOE_UTH_HEADER_SIZE);
		goto fail;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		rc = moe_err(e, MOE_ERANGE, "%s: file too large to map", path);
		goto fail;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = moe_err(e, MOE_EIO, "%s: cannot mmap: %s", path, strerror(errno));
		goto fail;
	}
	rc = moe_uth_parse(path, map, (uint64_t)st.st_size, out, e);
	if (rc < 0) {
		munmap(map, (size_t)st.st_size);
		goto fail;
	}
	(*out)->fd = fd;
	(*out)->owns_map = true;
	return 0;
fail:
	close(fd);
	return rc;
}

int moe_uth_verify_tensor(const moe_uth *u, const moe_uth_tensor *t, const void *data,
			  moe_error *e)
{
	if (!data)
		data = u->map + t->offset;
	uint64_t x = XXH3_64bits(data, (size_t)t->size);
	if (x != t->xxh3)
		return moe_err(e, MOE_ECHECKSUM, "%s: tensor '%s': data checksum mismatch "
			       "(stored %016llx, computed %016llx)", u->path, t->name,
			       (unsigned long long)t->xxh3, (unsigned long long)x);
	return 0;
}

int moe_uth_verify(const moe_uth *u, moe_error *e)
{
	for (uint64_t i = 0; i < u->n_tensors; i++)
		MOE_TRY(moe_uth_verify_tensor(u, &u->tensors[i], NULL, e));
	return 0;
}

const moe_uth_tensor *moe_uth_find(const moe_uth *u, const char *name)
{
	long long i = moe_uth_nameset_get(&u->index->names, name);
	return i < 0 ? NULL : &u->tensors[i];
}

int moe_uth_expert(const moe_uth *u, uint16_t layer, uint16_t expert, size_t *first,
		   size_t *count)
{
	struct moe_uth_groupslot *g;

	if (expert == MOE_UTH_NONE)
		return MOE_ENOTFOUND;
	g = moe_uth_groupset_get(&u->index->groups, (uint32_t)layer << 16 | expert, false);
	if (!g || !g->count)
		return MOE_ENOTFOUND;
	*first = g->first;
	*count = g->count;
	return 0;
}

const void *moe_uth_data(const moe_uth *u, const moe_uth_tensor *t)
{
	return u->map + t->offset;
}

void moe_uth_close(moe_uth *u)
{
	if (!u)
		return;
	if (u->owns_map)
		munmap((void *)u->map, (size_t)u->file_size);
	if (u->fd >= 0)
		close(u->fd);
	if (u->index) {
		moe_uth_nameset_free(&u->index->names);
		moe_uth_groupset_free(&u->index->groups);
		free(u->index);
	}
	free(u->tensors);
	free((char *)u->meta);
	free((char *)u->path);
	free(u);
}
