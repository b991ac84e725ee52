/* registry_int.h — what the files of lib/registry share (not installed).
 *
 *   digest.c    sha256 / git-blob sha1 through OpenSSL's libcrypto
 *   http.c      one libcurl request with manual redirects, header limits,
 *               the token only for the hub's own origin, retries
 *   hub.c       HF environment, source parsing, repo listing, file choice
 *   cache.c     the Hugging Face cache layout, locks, offline lookups
 *   download.c  resumable, verified, optionally parallel file download
 *   gguf_join.c split GGUF shards -> one GGUF
 *   db.c        the sqlite3 registry and name resolution
 *   pull.c      moe_pull: the steps above in order
 */
#ifndef MOE_REGISTRY_INT_H
#define MOE_REGISTRY_INT_H

#include "registry.h"

#include <curl/curl.h>

/* ---------------------------------------------------------------- digest */

typedef struct moe_digest moe_digest; /* opaque EVP context */
enum { MOE_DIGEST_SHA256, MOE_DIGEST_SHA1 };
int moe_digest_new(moe_digest **out, int kind, moe_error *e);
void moe_digest_update(moe_digest *d, const void *p, size_t n);
/* Lowercase hex into hex (65 bytes for sha256, 41 for sha1). */
void moe_digest_hex(moe_digest *d, char *hex);
void moe_digest_free(moe_digest *d);
/* Hash bytes [0, len) of an open fd (len = -1: to the end) into d. */
int moe_digest_fd(moe_digest *d, int fd, int64_t len, const char *name, moe_error *e);
/* sha256 of a whole file. */
int moe_sha256_file(const char *path, char hex[65], moe_error *e);

/* ------------------------------------------------------------------ http */

/* What the transfer settings are; shared by every request of one pull. */
typedef struct moe_http_cfg {
	const char *token;     /* bearer token or NULL */
	char token_origin[512]; /* scheme://host:port that may see it */
	int retries;
	double retry_wait;
	double timeout;
	int max_redirects;
	volatile int *cancel;  /* the pull's cancel flag (moe_pull_opts) or NULL */
} moe_http_cfg;

#define MOE_HTTP_HEADER_MAX (64 * 1024) /* all response headers together */
#define MOE_HTTP_ERRBODY_MAX 4096

typedef struct moe_http_resp {
	long status;
	char url[4096];          /* final URL (after redirects we followed) */
	char location[4096];     /* Location of a redirect we did not follow */
	char etag[256];
	char linked_etag[256];   /* X-Linked-Etag */
	char repo_commit[128];   /* X-Repo-Commit */
	char error_code[128];    /* X-Error-Code */
	char error_message[256]; /* X-Error-Message */
	bool has_linked_size, has_length, accept_ranges, has_content_range;
	uint64_t linked_size;    /* X-Linked-Size */
	uint64_t content_length;
	uint64_t range_start, range_total; /* Content-Range: bytes S-E/T */
	double retry_after;      /* seconds, 0 if absent */
	/* private, used while the request runs */
	size_t header_bytes;
	bool header_overflow;
	char body[MOE_HTTP_ERRBODY_MAX + 1]; /* an error answer's first bytes */
	size_t body_len;
} moe_http_resp;

/* Body sink: called with the response's data only for a 2xx status; return
 * n to continue, anything else aborts the transfer (set your own error). */
typedef size_t (*moe_http_sink)(void *user, const moe_http_resp *r, const void *p, size_t n);

enum { MOE_HTTP_HEAD, MOE_HTTP_GET };

typedef struct moe_http_req {
	int method;
	const char *url;
	bool follow;           /* follow redirects (else the 3xx is returned) */
	bool range;            /* send Range: bytes=range_from-[range_to-1] */
	uint64_t range_from, range_to; /* range_to 0 = open end */
	moe_http_sink sink;
	void *user;
	volatile int *cancel;  /* nonzero aborts (parallel downloads) */
} moe_http_req;

/* One request (with redirects as asked), no retries.  Returns 0 when an
 * HTTP answer arrived (any status: look at r->status), MOE_ENET for a
 * transport failure (message has curl's reason), MOE_EFORMAT for a hostile
 * answer (too many redirects, headers over MOE_HTTP_HEADER_MAX, bad
 * Location).  `h` is a reusable easy handle (curl_easy_init). */
int moe_http_once(CURL *h, const moe_http_cfg *cfg, const moe_http_req *q, moe_http_resp *r,
		  moe_error *e);
/* moe_http_once with retries on transport errors, 429 and 5xx (waiting
 * Retry-After or the doubling backoff).  `on_retry` (may be NULL) runs
 * before each new attempt and may change q (resume offsets); it returns <0
 * to stop. */
typedef int (*moe_http_retry_fn)(void *user, moe_http_req *q, moe_error *e);
int moe_http_request(CURL *h, const moe_http_cfg *cfg, moe_http_req *q, moe_http_resp *r,
		     moe_http_retry_fn on_retry, void *user, moe_error *e);
/* One response header line as curl hands it over (len bytes, not
 * NUL-terminated, CRLF included): a status line starts r afresh, the
 * headers above are stored (cut to their fields' size), others ignored.
 * Returns len, or 0 once the headers pass MOE_HTTP_HEADER_MAX
 * (r->header_overflow; curl then aborts the transfer). */
size_t moe_http_parse_header(moe_http_resp *r, const char *line, size_t len);
/* "HTTP 404 (EntryNotFound: ...)" style text for a non-2xx answer. */
void moe_http_status_text(const moe_http_resp *r, char *buf, size_t n);
/* scheme://host:port of a URL (port made explicit). */
int moe_http_origin(const char *url, char *buf, size_t n);
/* Sleep in small steps (seconds). */
void moe_http_sleep(double s);

/* ------------------------------------------------------------------- hub */

typedef struct moe_hub_env {
	char endpoint[1024]; /* no trailing slash */
	char hf_home[4096];
	char cache[4096];    /* HF_HUB_CACHE */
	char *token;         /* malloc'd or NULL */
	bool offline;
} moe_hub_env;

int moe_hub_env_load(moe_hub_env *env, moe_error *e);
void moe_hub_env_free(moe_hub_env *env);

enum { MOE_SRC_HUB, MOE_SRC_URL, MOE_SRC_PATH };

typedef struct moe_source {
	int kind;
	char repo[256];   /* org/name */
	char quant[64];   /* ":QUANT" part, "" if none */
	char url[4096];   /* URL sources */
	char path[4096];  /* path sources */
} moe_source;

/* Classify and validate a source string. */
int moe_source_parse(const char *s, moe_source *src, moe_error *e);
/* A repo-relative file name that is safe to place under a directory:
 * relative, no "..", ".", or empty parts, no backslash or control bytes. */
bool moe_hub_safe_name(const char *name);

/* The files of a revision (strdup'd names in *files, *n) and its commit. */
int moe_hub_list(CURL *h, const moe_hub_env *env, const moe_http_cfg *cfg, const char *repo,
		 const char *revision, char ***files, size_t *n, char commit[128], moe_error *e);
void moe_hub_free_list(char **files, size_t n);
/* The parse behind moe_hub_list: the JSON of /api/models/REPO/revision/REV
 * (len bytes; `what` names it in messages).  MOE_EFORMAT for a listing
 * without "sha" or "siblings", a bad commit id, an entry without
 * rfilename or with an unsafe name (moe_hub_safe_name); nothing is kept. */
int moe_hub_parse_list(const char *text, size_t len, const char *what, char ***files, size_t *n,
		       char commit[128], moe_error *e);

/* Choose what to fetch from a repo listing: --include globs, else the GGUF
 * file(s) of `quant`, else the only GGUF model, else a safetensors
 * snapshot (config, tokenizer, weights).  *sel holds indexes into files.
 * *is_gguf tells which kind was chosen. */
int moe_hub_select(char *const *files, size_t n, const char *repo, const char *quant,
		   const char *const *include, size_t n_include, size_t **sel, size_t *n_sel,
		   bool *is_gguf, moe_error *e);

/* A file's resolve metadata, from a HEAD request as huggingface_hub makes
 * it: the commit, the ETag (sha256 for LFS files, git blob sha1 otherwise),
 * the size and the URL to GET (the CDN for LFS files). */
typedef struct moe_hub_file {
	char commit[128];
	char etag[256];
	bool lfs;
	uint64_t size;
	char url[4096];
} moe_hub_file;
int moe_hub_head(CURL *h, const moe_hub_env *env, const moe_http_cfg *cfg, const char *repo,
		 const char *revision, const char *file, moe_hub_file *out, moe_error *e);

/* ----------------------------------------------------------------- cache */

/* Paths inside $HF_HUB_CACHE/models--ORG--NAME. */
int moe_cache_repo_dir(const moe_hub_env *env, const char *repo, char *buf, size_t n,
		       moe_error *e);
/* Write refs/<revision> = commit (atomically), unless revision is the commit. */
int moe_cache_write_ref(const char *repo_dir, const char *revision, const char *commit,
			moe_error *e);
/* The commit a revision points at, offline: refs/<revision>, or the
 * revision itself if snapshots/<revision> exists. */
int moe_cache_read_ref(const char *repo_dir, const char *revision, char commit[128],
		       moe_error *e);
/* All regular files (following links) under snapshots/<commit>, relative
 * names, strdup'd. */
int moe_cache_list_snapshot(const char *repo_dir, const char *commit, char ***files, size_t *n,
			    moe_error *e);
/* Make snapshots/<commit>/<file> a relative link to blobs/<etag>. */
int moe_cache_link(const char *repo_dir, const char *commit, const char *file,
		   const char *etag, moe_error *e);
/* An exclusive lock file (flock), as huggingface_hub's filelock takes:
 * $HF_HUB_CACHE/.locks/models--ORG--NAME/<etag>.lock.  Returns the fd. */
int moe_cache_lock(const moe_hub_env *env, const char *repo, const char *etag, int *fd,
		   moe_error *e);
void moe_cache_unlock(int fd);

/* -------------------------------------------------------------- download */

typedef struct moe_dl {
	const moe_http_cfg *cfg;
	const char *url;        /* GET this */
	const char *dest;       /* final path (appears only when verified) */
	const char *display;    /* name in messages and progress */
	uint64_t size;          /* expected size; UINT64_MAX = unknown */
	const char *sha256;     /* expected (hex) or NULL */
	const char *sha1_blob;  /* expected git blob sha1 (hex) or NULL */
	int connections;
	/* progress */
	moe_pull_progress_fn progress;
	void *user;
	int file_index, n_files;
	uint64_t all_base, all_total; /* bytes of earlier files, of all files */
	bool resumed;          /* out: an .incomplete file was continued */
} moe_dl;

/* Download to dest + ".incomplete" (resuming it), verify, rename to dest. */
int moe_download(moe_dl *d, moe_error *e);
/* The chunk of a parallel download. */
#define MOE_DL_CHUNK ((uint64_t)16 << 20)
/* Read the resume state DEST.moe-parts.done ("moe-parts 1 SIZE CHUNK" then one
 * finished chunk number a line): marks done[k] for each k < n_chunks.
 * Returns false if it is missing or for another size or chunk size.  Out of
 * download.c so the fuzz target can feed it bytes. */
bool moe_dl_read_state(const char *state, uint64_t size, bool *done, uint64_t n_chunks);

/* ------------------------------------------------------------- gguf join */

/* Files "X-00001-of-00003.gguf": true and the shard number and count. */
bool moe_gguf_split_name(const char *name, unsigned *no, unsigned *count, size_t *prefix_len);
/* Join split GGUF shards (in order) into one GGUF written atomically. */
int moe_gguf_join(char *const *shards, size_t n, const char *out, moe_error *e);

/* -------------------------------------------------------------------- db */

/* Insert or replace NAME:TAG for a file already in the store (the caller
 * passes the temporary UTH file; it is renamed to models/<sha>.uth inside
 * the transaction so 'rm' can never delete it under us). */
int moe_registry_add(moe_registry *r, const char *tmp_uth, moe_registry_entry *en,
		     moe_error *e);
/* Split NAME[:TAG] (tag "" if absent) and validate. */
int moe_registry_split_name(const char *s, char *name, size_t nn, char *tag, size_t tn,
			    moe_error *e);

#endif
