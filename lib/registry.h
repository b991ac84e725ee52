/* registry.h — get models by name: the model registry (sqlite3), downloads
 * from the Hugging Face hub or plain URLs (libcurl) into the Hugging Face
 * cache layout, conversion to UTH, and name -> file resolution for every tool.
 *
 * How to use:
 *  - Tools that take a model call moe_registry_resolve(arg, &path, &e): an
 *    existing file is returned as is, anything else is looked up as a
 *    registry name ("org/name", "org/name:TAG" or the last part "name").  It
 *    never touches the network.
 *  - moe-pull fills a moe_pull_opts and calls moe_pull(): the source is
 *    fetched (or found in the cache), verified, converted to UTH, stored as
 *    $XDG_DATA_HOME/moe/models/<sha256>.uth and registered under a name.
 *  - moe_registry_open / _list / _get / _rm / _tag / _repair manage the
 *    names.  Every change is one transaction; the database is in WAL mode
 *    with a busy timeout, so pulls and readers in several processes are safe.
 *
 * Where things live (see moe-pull(1)):
 *   store   $MOE_STORE, else $XDG_DATA_HOME/moe (~/.local/share/moe):
 *           registry.db, models/<sha256>.uth and models/<sha256>.json (the
 *           names of that file, from which 'moe-pull repair' rebuilds a lost
 *           database)
 *   hub     $HF_HUB_CACHE, else $HF_HOME/hub (~/.cache/huggingface/hub), in
 *           huggingface_hub's layout: models--ORG--NAME/{blobs,snapshots,refs}
 *   URLs    $XDG_CACHE_HOME/moe/downloads
 * Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (else
 * the file $HF_HOME/token), HF_HUB_OFFLINE=1 (no network at all).
 *
 * All functions return 0 or a negative MOE_E* code with a message in *e.
 */
#ifndef MOE_REGISTRY_H
#define MOE_REGISTRY_H

#include "core.h"

#include <jansson.h>

/* ------------------------------------------------------------ resolution */

/* Turn a tool's model argument into a UTH path (*path is malloc'd).  An
 * existing file is returned unchanged; otherwise `arg` is a registry name
 * NAME[:TAG], where NAME may also be the part after the last '/'.  Without a
 * tag: the only tag, else "latest".  Returns MOE_ENOTFOUND (message lists
 * the names that exist), MOE_EINVAL (ambiguous: lists the candidates),
 * MOE_EFORMAT (corrupt database: names it and the recovery command) or
 * MOE_EIO.  Updates the entry's last-used time when the store is writable. */
int moe_registry_resolve(const char *arg, char **path, moe_error *e);

/* --------------------------------------------------------------- registry */

typedef struct moe_registry moe_registry;

typedef struct moe_registry_entry {
	char name[256];
	char tag[128];
	char source[1024];   /* as given to moe-pull, e.g. "Qwen/X-GGUF:Q4_K_M" */
	char revision[128];  /* commit the files came from ("" for URLs, paths) */
	char sha256[65];     /* of the UTH file */
	uint64_t size;       /* bytes of the UTH file */
	char architecture[64];
	uint64_t parameters;
	char weight_types[256]; /* comma-separated, e.g. "q4_k,q6_k,f32" */
	int64_t created;     /* unix seconds */
	int64_t last_used;   /* unix seconds, 0 = never */
	char path[4096];     /* the UTH file */
} moe_registry_entry;

/* The store directory (see above) into buf. */
int moe_registry_store_dir(char *buf, size_t n, moe_error *e);

/* Open (creating if needed, unless `readonly`) the registry of the store.
 * A corrupt database gives MOE_EFORMAT naming the file and the recovery
 * command ('moe-pull repair'). */
int moe_registry_open(moe_registry **out, bool readonly, moe_error *e);
void moe_registry_close(moe_registry *r);

/* All entries sorted by name and tag: *out is a malloc'd array. */
int moe_registry_list(moe_registry *r, moe_registry_entry **out, size_t *n, moe_error *e);
/* One entry by NAME[:TAG] (same matching as moe_registry_resolve). */
int moe_registry_get(moe_registry *r, const char *name, moe_registry_entry *out, moe_error *e);
/* Remove a name; the file goes when no name refers to it any more.
 * *file_removed tells which happened (may be NULL). */
int moe_registry_rm(moe_registry *r, const char *name, bool *file_removed, moe_error *e);
/* Give the model NAME a second name NEWNAME[:TAG] (replacing what NEWNAME
 * named before). */
int moe_registry_tag(moe_registry *r, const char *name, const char *newname, moe_error *e);
/* Entry as JSON (new reference). */
json_t *moe_registry_entry_json(const moe_registry_entry *en);

/* Move a database that cannot be opened aside (registry.db.corrupt-TIME)
 * and rebuild it from the models/<sha256>.json files.  *n_restored counts
 * the names restored. */
int moe_registry_repair(size_t *n_restored, char *moved_to, size_t moved_n, moe_error *e);

/* ------------------------------------------------------------------ pull */

/* Progress of a pull, reported to the caller's callback (from one thread
 * at a time).  Byte counts cover data fetched in this run plus what was
 * already on disk when it resumed. */
enum {
	MOE_PULL_EV_STAGE,    /* msg: what happens now ("resolving", "converting", ...) */
	MOE_PULL_EV_FILE,     /* a file starts: file, file_total */
	MOE_PULL_EV_BYTES,    /* file_done of file_total, all_done of all_total */
	MOE_PULL_EV_FILE_END, /* file finished (msg: "downloaded", "cached", "resumed") */
};

typedef struct moe_pull_event {
	int kind;
	const char *msg;
	const char *file;
	int file_index, n_files;
	uint64_t file_done, file_total;
	uint64_t all_done, all_total;
	double elapsed; /* seconds since this file started */
} moe_pull_event;

typedef void (*moe_pull_progress_fn)(void *user, const moe_pull_event *ev);

typedef struct moe_pull_opts {
	const char *source;    /* org/name[:QUANT], hf://org/name, https://URL, or a path */
	const char *revision;  /* branch, tag or commit (hub only); NULL = "main" */
	const char *const *include; /* glob patterns of repo files to fetch (hub only) */
	size_t n_include;
	const char *name;      /* register as NAME[:TAG]; NULL = derived from source */
	const char *sha256;    /* expected sha256 of a URL download (optional) */
	int connections;       /* parallel ranges per large file; 0 = 4 */
	int retries;           /* attempts per request after the first; <0 = 5 */
	double retry_wait;     /* first backoff in seconds (doubles); 0 = 1 */
	double timeout;        /* connect and no-progress timeout, s; 0 = 30 */
	int out_type;          /* -1 keep source types, else a moe_convert type */
	bool download_only;    /* fetch into the cache, do not convert or register */
	moe_pull_progress_fn progress;
	void *user;
	volatile int *cancel;  /* nonzero (set from another thread): stop — checked
				* about every second even while a server stalls;
				* the file being downloaded is removed and
				* moe_pull fails with MOE_EIO "cancelled" */
} moe_pull_opts;

/* Fetch, verify, convert and register.  On success *out describes the new
 * entry (with download_only, only out->source and out->path — the snapshot
 * directory or downloaded file — are set).  Errors: MOE_ENET (network, after
 * retries; HTTP statuses are named), MOE_ECHECKSUM (sha256 mismatch: the
 * file was deleted; the message names it), MOE_ENOTFOUND (repo, revision,
 * file, quant; lists what exists), MOE_EINVAL (ambiguous choice, bad
 * source), MOE_EFORMAT (hostile or malformed server answer), MOE_EIO. */
int moe_pull(const moe_pull_opts *o, moe_registry_entry *out, moe_error *e);

#endif
