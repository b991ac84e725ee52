/* hf.h — reader for Hugging Face model snapshots: config.json, the tokenizer
 * files and safetensors weights (one file or shards listed by
 * model.safetensors.index.json), from a directory or from inside a .tar,
 * .tar.gz, .tar.zst (any filter libarchive knows) or .zip archive, which is
 * read in place and never unpacked to disk.
 *
 * How to use: moe_hf_open(&h, path, &e) with a snapshot directory or an
 * archive.  On success the small JSON files are in memory as NUL-terminated
 * strings, and every tensor of every shard has been parsed and validated
 * (dtype, shape, size, bounds, packing, duplicates, index consistency), but
 * no tensor data has been read.  h->tensors[0..n_tensors) is sorted by name;
 * moe_hf_find looks one up.  A tensor's bytes are
 * [t->offset, t->offset + t->size) of t->src (absolute offsets), read with
 * moe_src_read(t->src, t->offset + off, buf, n, &e).  The sources belong to
 * the moe_hf; everything stays valid until moe_hf_close.
 *
 * Archives: a tensor source inside a compressed archive cannot seek.  All
 * sources of one archive share a single decompressing reader (reads are
 * serialised by a mutex): a read at or after the current position skips
 * forward, a read before it reopens the archive and skips to the member again.
 * Reading tensors in order of (t->shard, t->offset) is therefore one forward
 * pass over the archive; other orders are correct but may decompress the
 * archive many times.  Memory stays bounded: only the JSON files and the
 * safetensors headers are cached, the tensor data never is.
 *
 * The snapshot inside an archive is the directory holding config.json (the
 * top level or any subdirectory); if the shallowest config.json exists in
 * more than one directory the archive is rejected as ambiguous.  Entries
 * whose path is absolute or has a ".." component make the whole archive
 * invalid; the files we use must be regular files (not symbolic or hard
 * links) and appear once.
 */
#ifndef MOE_HF_H
#define MOE_HF_H

#include "core.h"

/* Small JSON files (config.json, tokenizer.json, ...) larger than this are
 * rejected: they are read whole into memory. */
#define MOE_HF_JSON_MAX ((size_t)64 << 20)
/* Safetensors headers larger than this are rejected (the reference
 * implementation's limit is 100 MB too). */
#define MOE_ST_HEADER_MAX ((uint64_t)100000000)
/* Archives: total bytes of JSON files and safetensors headers cached while
 * scanning (bounds memory on hostile archives). */
#define MOE_HF_CACHE_MAX ((uint64_t)512 << 20)

typedef struct moe_archive moe_archive;

typedef struct moe_hf_tensor {
	const char *name;
	int dtype;          /* moe_dtype: F32, F16, BF16, F64, I8, I16, I32, I64 */
	bool u8;            /* safetensors U8 (dtype is then MOE_I8, for the size):
			     * raw bytes, e.g. gpt-oss's MXFP4 blocks and scales */
	uint32_t n_dims;    /* 0..4 (0 = scalar) */
	uint64_t shape[4];  /* as in safetensors: slowest-varying first; unused = 1 */
	uint32_t shard;     /* index into moe_hf.shards */
	moe_src *src;       /* the shard's bytes */
	uint64_t offset;    /* absolute offset of the data in src */
	uint64_t size;      /* bytes */
} moe_hf_tensor;

typedef struct moe_hf_shard {
	const char *name; /* file name as in the index, e.g. "model-00001-of-00002.safetensors" */
	moe_src *src;
} moe_hf_shard;

typedef struct moe_hf {
	const char *path;             /* as given to moe_hf_open */
	bool is_archive;
	char *config_json;            /* always present */
	char *tokenizer_json;         /* NULL if absent */
	char *tokenizer_config_json;  /* NULL if absent (may hold chat_template) */
	char *generation_config_json; /* NULL if absent */
	uint64_t n_tensors;
	moe_hf_tensor *tensors;       /* sorted by name (strcmp) */
	/* Shards in the order that reads them in one pass: file name order for
	 * a directory, member order for an archive. */
	uint32_t n_shards;
	moe_hf_shard *shards;
	/* private */
	moe_archive *archive; /* NULL for a directory */
	moe_arena arena;
} moe_hf;

/* Open a snapshot: `path` is a directory (by stat) or else an archive.
 * Returns 0, or MOE_ENOTFOUND (path, config.json, a weights file or a shard
 * missing), MOE_EFORMAT (malformed JSON/safetensors/index, bad archive entry),
 * MOE_EUNSUPPORTED (a dtype moe has no type for, archive too large to scan),
 * MOE_EIO, MOE_ERANGE or MOE_ENOMEM; *out is NULL on error. */
int moe_hf_open(moe_hf **out, const char *path, moe_error *e);
/* Close all sources and free everything (NULL is fine). */
void moe_hf_close(moe_hf *h);
/* JSON written by Python may hold integers no 64-bit parser takes, such as
 * tokenizer_config.json's "model_max_length": int(1e30).  This rewrites
 * every integer literal outside the int64 range as a real (appending
 * ".0"), so the file parses and the value is range-checked where it is used.
 * *text (malloc'd, NUL-terminated) may be replaced.  moe_hf_open applies it
 * to every JSON file it reads.  Returns 0 or MOE_ENOMEM. */
int moe_hf_json_relax(char **text, moe_error *e);
/* Tensor by exact name, or NULL. */
const moe_hf_tensor *moe_hf_find(const moe_hf *h, const char *name);

/* ------------------------------------------------------ safetensors parser */

/* Validate the 8-byte little-endian header length at the start of a
 * safetensors file of file_size bytes and store it in *header_len.
 * Returns MOE_EFORMAT (file shorter than 8 bytes, header longer than the
 * file, header over MOE_ST_HEADER_MAX); messages start with `name`. */
int moe_safetensors_header_len(const char *name, const unsigned char first8[8],
			       uint64_t file_size, uint64_t *header_len, moe_error *e);

/* Parse a safetensors header: the n bytes of JSON `json` (not necessarily
 * NUL-terminated), describing a data section of data_size bytes that starts
 * at absolute offset data_base of `src` (normally 8 + n).  `src` (may be
 * NULL) is stored in every tensor, shard is set to 0.  Fills *out with an
 * arena-allocated array of *n_out tensors sorted by offset (names are
 * arena copies).  Every tensor is checked: dtype known and supported, at most
 * 4 dims, element count and byte size without overflow, size equal to
 * end - begin, within the data section, and the tensors together packed
 * exactly from 0 to data_size with no gap or overlap; no duplicate names;
 * "__metadata__" must map strings to strings.
 * Returns MOE_EFORMAT (messages "name: tensor 'x': ..."), MOE_EUNSUPPORTED
 * (a valid safetensors dtype like U8 or F8_E4M3 that moe has no type for),
 * MOE_ERANGE or MOE_ENOMEM. */
int moe_safetensors_parse(const char *name, const char *json, size_t n, uint64_t data_base,
			  uint64_t data_size, moe_src *src, moe_arena *arena,
			  moe_hf_tensor **out, uint64_t *n_out, moe_error *e);

/* Read the header of the safetensors file behind `src` and parse it as
 * above (names in messages are src->name).  Returns what the two functions
 * above return, or MOE_EIO from the source. */
int moe_safetensors_read(moe_src *src, moe_arena *arena, moe_hf_tensor **out,
			 uint64_t *n_out, moe_error *e);

/* ------------------------------------------------------- archive input */

/* One archive entry, as found by the scan. */
enum { MOE_AR_FILE, MOE_AR_DIR, MOE_AR_SYMLINK, MOE_AR_HARDLINK, MOE_AR_OTHER };

typedef struct moe_archive_entry {
	const char *path; /* normalised: no leading "./", no "." or empty parts */
	uint64_t index;   /* ordinal of the header in the archive, from 0 */
	uint64_t size;    /* data bytes (counted during the scan if the header lacks it) */
	int type;         /* MOE_AR_* */
	/* Filled by the scan callback: malloc'd bytes from the start of the
	 * entry (freed by moe_archive_close unless taken, i.e. set to NULL),
	 * and a flag for the callback's own use. */
	void *data;
	size_t data_len;
	int flag;
} moe_archive_entry;

/* Called for every regular file during moe_archive_open, positioned at the
 * start of its data; may read with moe_archive_scan_read and set ent->data.
 * A negative return aborts the scan with that error. */
typedef int (*moe_archive_scan_fn)(void *user, moe_archive *ar, moe_archive_entry *ent,
				   moe_error *e);

/* Open an archive (tar or zip, compressed with any filter libarchive
 * supports) and scan all entries once, rejecting absolute paths and ".."
 * components.  Returns MOE_ENOTFOUND/MOE_EIO (cannot open), MOE_EFORMAT (not
 * an archive, corrupt, bad entry path), MOE_ENOMEM, or the callback's error. */
int moe_archive_open(moe_archive **out, const char *path, moe_archive_scan_fn fn, void *user,
		     moe_error *e);
/* During a scan callback: read up to n bytes of the current entry's data,
 * continuing where the last call stopped; *got < n only at the end of the
 * entry.  Returns MOE_EFORMAT if the archive is corrupt. */
int moe_archive_scan_read(moe_archive *ar, void *buf, size_t n, size_t *got, moe_error *e);
/* The archive's path, and its entries in archive order. */
const char *moe_archive_path(const moe_archive *ar);
uint64_t moe_archive_count(const moe_archive *ar);
moe_archive_entry *moe_archive_entry_at(moe_archive *ar, uint64_t i);
/* A source reading the data of a regular-file entry (see the top of this
 * file for the access pattern).  The source keeps the archive alive: it may
 * be closed before or after the archive.  Returns MOE_EINVAL if the entry is
 * not a regular file, MOE_ENOMEM. */
int moe_archive_src(moe_archive *ar, const moe_archive_entry *ent, moe_src **out, moe_error *e);
/* How many times the shared reader has (re)opened the archive after the scan
 * (a measure of how well the read order suits the archive). */
uint64_t moe_archive_reopens(const moe_archive *ar);
/* Drop the caller's reference (NULL is fine); the memory goes when the last
 * source is closed too. */
void moe_archive_close(moe_archive *ar);

#endif
