/* hf.c — Hugging Face snapshots: the small JSON files, the safetensors
 * shards (single file or index + shards), from a directory or an archive.
 *
 * An archive is scanned once (archive.c): while it passes, the JSON files
 * with a name we use and the header of every *.safetensors member are
 * cached, so opening a snapshot inside a .tar.zst decompresses it only
 * once; the snapshot directory is known only at the end of the scan.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "hf.h"

#define HF_INDEX "model.safetensors.index.json"
#define HF_SINGLE "model.safetensors"

/* Entry flag set by the scan: the JSON file is over MOE_HF_JSON_MAX. */
#define HF_TOO_BIG 1

static const char *const hf_json_names[] = {
	"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
	HF_INDEX,
};

typedef struct hf_ctx {
	moe_hf *h;
	const char *root;   /* archive: snapshot directory inside it ("" = top level) */
	uint64_t cached;    /* archive scan: bytes cached so far */
} hf_ctx;

/* A shard while loading: sorted into read order before tensors get their
 * shard index. */
typedef struct hf_pend {
	moe_hf_shard sh;
	uint64_t order;
	moe_hf_tensor *t;
	uint64_t n;
} hf_pend;

static const char *hf_basename(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static bool hf_has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* ------------------------------------------------------------ archive scan */

/* Append up to `max` more bytes of the current entry to ent->data (kept
 * NUL-terminated), charging the cache budget. */
static int hf_cache_bytes(hf_ctx *c, moe_archive *ar, moe_archive_entry *ent, uint64_t max,
			  moe_error *e)
{
	while (max > 0) {
		size_t chunk = max < ((size_t)1 << 20) ? (size_t)max : (size_t)1 << 20;
		size_t got;
		char *p;

		if (c->cached + chunk > MOE_HF_CACHE_MAX)
			return moe_err(e, MOE_EUNSUPPORTED,
				       "%s: more than %llu bytes of JSON files and safetensors headers",
				       moe_archive_path(ar), (unsigned long long)MOE_HF_CACHE_MAX);
		p = realloc(ent->data, ent->data_len + chunk + 1);
		if (!p)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", moe_archive_path(ar));
		ent->data = p;
		MOE_TRY(moe_archive_scan_read(ar, p + ent->data_len, chunk, &got, e));
		ent->data_len += got;
		p[ent->data_len] = '\0';
		c->cached += got;
		max -= got;
		if (got < chunk)
			break;
	}
	return 0;
}

static int hf_scan_cb(void *user, moe_archive *ar, moe_archive_entry *ent, moe_error *e)
{
	hf_ctx *c = user;
	const char *base = hf_basename(ent->path);

	for (size_t i = 0; i < sizeof(hf_json_names) / sizeof(hf_json_names[0]); i++) {
		if (strcmp(base, hf_json_names[i]) != 0)
			continue;
		if (ent->size > MOE_HF_JSON_MAX) {
			ent->flag = HF_TOO_BIG;
			return 0;
		}
		/* A size of 0 may mean unknown: then read one byte past the
		 * limit to see whether the file is over it. */
		MOE_TRY(hf_cache_bytes(c, ar, ent, ent->size ? ent->size : MOE_HF_JSON_MAX + 1, e));
		if (ent->data_len > MOE_HF_JSON_MAX) {
			ent->flag = HF_TOO_BIG;
			c->cached -= ent->data_len;
			free(ent->data);
			ent->data = NULL;
			ent->data_len = 0;
		}
		return 0;
	}
	if (hf_has_suffix(base, ".safetensors")) {
		const unsigned char *d;
		uint64_t n = 0;

		MOE_TRY(hf_cache_bytes(c, ar, ent, 8, e));
		if (ent->data_len < 8)
			return 0; /* rejected as too short if used */
		d = ent->data;
		for (int i = 7; i >= 0; i--)
			n = n << 8 | d[i];
		/* An impossible length is reported when the shard is used. */
		if (n > MOE_ST_HEADER_MAX || (ent->size && n > ent->size - 8))
			return 0;
		MOE_TRY(hf_cache_bytes(c, ar, ent, n, e));
	}
	return 0;
}

static int hf_depth(const char *path)
{
	int depth = 0;

	for (const char *p = path; *p; p++)
		depth += *p == '/';
	return depth;
}

/* The snapshot is the directory of the shallowest config.json (deeper ones
 * belong to sub-models, e.g. sentence-transformers' 1_Pooling/). */
static int hf_find_root(hf_ctx *c, moe_error *e)
{
	moe_archive *ar = c->h->archive;
	const moe_archive_entry *best = NULL;
	int best_depth = 0;
	char *root;
	size_t len;

	for (uint64_t i = 0; i < moe_archive_count(ar); i++) {
		const moe_archive_entry *ent = moe_archive_entry_at(ar, i);

		if (strcmp(hf_basename(ent->path), "config.json") != 0)
			continue;
		if (!best || hf_depth(ent->path) < best_depth) {
			best = ent;
			best_depth = hf_depth(ent->path);
		}
	}
	if (!best)
		return moe_err(e, MOE_ENOTFOUND,
			       "%s: missing config.json (no snapshot in the archive)", c->h->path);
	/* The same path twice is reported by hf_ar_lookup. */
	for (uint64_t i = 0; i < moe_archive_count(ar); i++) {
		const moe_archive_entry *ent = moe_archive_entry_at(ar, i);

		if (strcmp(hf_basename(ent->path), "config.json") == 0 &&
		    hf_depth(ent->path) == best_depth && strcmp(ent->path, best->path) != 0)
			return moe_err(e, MOE_EFORMAT,
				       "%s: several snapshots: '%.150s' and '%.150s' (one config.json expected)",
				       c->h->path, best->path, ent->path);
	}
	len = (size_t)(hf_basename(best->path) - best->path);
	root = moe_arena_strndup(&c->h->arena, best->path, len ? len - 1 : 0);
	if (!root)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", c->h->path);
	c->root = root;
	return 0;
}

/* The entry of snapshot file `name`: *out is NULL if absent (an error if
 * `required`).  A file we use must be a single regular file. */
static int hf_ar_lookup(hf_ctx *c, const char *name, bool required, moe_archive_entry **out,
			moe_error *e)
{
	moe_archive *ar = c->h->archive;
	size_t rl = strlen(c->root);
	moe_archive_entry *found = NULL;

	*out = NULL;
	for (uint64_t i = 0; i < moe_archive_count(ar); i++) {
		moe_archive_entry *ent = moe_archive_entry_at(ar, i);
		const char *p = ent->path;

		if (rl) {
			if (strncmp(p, c->root, rl) != 0 || p[rl] != '/')
				continue;
			p += rl + 1;
		}
		if (strcmp(p, name) != 0)
			continue;
		if (found)
			return moe_err(e, MOE_EFORMAT, "%s: entry '%.200s' appears more than once",
				       c->h->path, ent->path);
		found = ent;
	}
	if (!found) {
		if (required)
			return moe_err(e, MOE_ENOTFOUND, "%s: missing %s%s%s", c->h->path, c->root,
				       rl ? "/" : "", name);
		return 0;
	}
	if (found->type == MOE_AR_SYMLINK)
		return moe_err(e, MOE_EFORMAT,
			       "%s: entry '%.200s' is a symbolic link (not followed)", c->h->path,
			       found->path);
	if (found->type == MOE_AR_HARDLINK)
		return moe_err(e, MOE_EFORMAT, "%s: entry '%.200s' is a hard link (not followed)",
			       c->h->path, found->path);
	if (found->type != MOE_AR_FILE)
		return moe_err(e, MOE_EFORMAT, "%s: entry '%.200s' is not a regular file",
			       c->h->path, found->path);
	*out = found;
	return 0;
}

/* ------------------------------------------------------ the two layouts */

/* "dir/name" or "archive.tar:root/name", for messages and file access. */
static char *hf_label(hf_ctx *c, const char *name)
{
	moe_hf *h = c->h;
	size_t n = strlen(h->path) + strlen(c->root ? c->root : "") + strlen(name) + 3;
	char *s = moe_arena_alloc(&h->arena, n, 1);

	if (!s)
		return NULL;
	if (!h->is_archive)
		snprintf(s, n, "%s/%s", h->path, name);
	else if (c->root[0])
		snprintf(s, n, "%s:%s/%s", h->path, c->root, name);
	else
		snprintf(s, n, "%s:%s", h->path, name);
	return s;
}

/* Whether snapshot file `name` exists (a directory follows symbolic links:
 * the Hugging Face cache links snapshot files to blobs). */
static int hf_exists(hf_ctx *c, const char *name, bool *yes, moe_error *e)
{
	struct stat st;
	moe_archive_entry *ent;
	char *path;

	*yes = false;
	if (c->h->is_archive) {
		MOE_TRY(hf_ar_lookup(c, name, false, &ent, e));
		*yes = ent != NULL;
		return 0;
	}
	path = hf_label(c, name);
	if (!path)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", c->h->path);
	if (stat(path, &st) == 0) {
		*yes = true;
		return 0;
	}
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	return moe_err(e, MOE_EIO, "%s: %s", path, strerror(errno));
}

/* ------------------------------------------------------- JSON from Python */

/* Whether the digits of an integer literal (no sign) exceed what a 64-bit
 * signed integer holds (jansson refuses those as "too big integer"). */
static bool hf_int_too_big(const char *d, size_t n, bool neg)
{
	const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
	while (n > 1 && *d == '0')
		d++, n--;
	return n > 19 || (n == 19 && memcmp(d, lim, 19) > 0);
}

int moe_hf_json_relax(char **text, moe_error *e)
{
	char *s = *text;
	size_t extra = 0, len = strlen(s);
	/* Two passes over the text: count the literals to rewrite, then copy
	 * with ".0" after each.  Numbers only occur outside strings and start
	 * with '-' or a digit (true/false/null hold no digits). */
	for (int pass = 0; pass < 2; pass++) {
		char *out = NULL, *o = NULL;
		if (pass == 1) {
			if (!extra)
				return 0;
			out = malloc(len + extra + 1);
			if (!out)
				return moe_err(e, MOE_ENOMEM, "out of memory reading JSON");
			o = out;
		}
		size_t i = 0;
		while (i < len) {
			char c = s[i];
			if (c == '"') {
				size_t j = i + 1;
				while (j < len && s[j] != '"')
					j += s[j] == '\\' && j + 1 < len ? 2 : 1;
				j = j < len ? j + 1 : len;
				if (o)
					memcpy(o, s + i, j - i), o += j - i;
				i = j;
				continue;
			}
			if (c == '-' || (c >= '0' && c <= '9')) {
				size_t j = i + (c == '-'), d0 = j;
				while (j < len && s[j] >= '0' && s[j] <= '9')
					j++;
				bool integer = j >= len || (s[j] != '.' && s[j] != 'e' && s[j] != 'E');
				bool big = integer && j > d0 && hf_int_too_big(s + d0, j - d0, c == '-');
				if (o) {
					memcpy(o, s + i, j - i), o += j - i;
					if (big)
						*o++ = '.', *o++ = '0';
				} else if (big) {
					extra += 2;
				}
				i = j;
				continue;
			}
			if (o)
				*o++ = c;
			i++;
		}
		if (o) {
			*o = '\0';
			free(*text);
			*text = out;
		}
	}
	return 0;
}

/* Read snapshot file `name` whole into *out (NULL if absent and optional);
 * integers too big for 64 bits are rewritten as reals (moe_hf_json_relax). */
static int hf_read_json(hf_ctx *c, const char *name, bool required, char **out, moe_error *e)
{
	moe_archive_entry *ent;
	bool yes;

	*out = NULL;
	if (c->h->is_archive) {
		MOE_TRY(hf_ar_lookup(c, name, required, &ent, e));
		if (!ent)
			return 0;
		if (ent->flag == HF_TOO_BIG)
			return moe_err(e, MOE_EFORMAT, "%s: file too large (limit %zu bytes)",
				       hf_label(c, name), MOE_HF_JSON_MAX);
		if (!ent->data)
			return moe_err(e, MOE_EINTERNAL, "%s: not cached by the scan",
				       hf_label(c, name));
		*out = ent->data;
		ent->data = NULL;
		return moe_hf_json_relax(out, e);
	}
	MOE_TRY(hf_exists(c, name, &yes, e));
	if (!yes) {
		if (required)
			return moe_err(e, MOE_ENOTFOUND, "%s: missing %s", c->h->path, name);
		return 0;
	}
	MOE_TRY(moe_read_file(hf_label(c, name), MOE_HF_JSON_MAX, out, NULL, e));
	return moe_hf_json_relax(out, e);
}

/* Open shard `name` and parse its header into p. */
static int hf_open_shard(hf_ctx *c, const char *name, hf_pend *p, moe_error *e)
{
	moe_hf *h = c->h;
	moe_archive_entry *ent;
	unsigned char first8[8] = { 0 };
	uint64_t n;
	char *path;
	bool yes;

	p->sh.name = moe_arena_strndup(&h->arena, name, strlen(name));
	if (!p->sh.name)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", h->path);
	if (!h->is_archive) {
		MOE_TRY(hf_exists(c, name, &yes, e));
		if (!yes)
			return moe_err(e, MOE_ENOTFOUND, "%s: missing shard %s", h->path, name);
		path = hf_label(c, name);
		if (!path)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", h->path);
		MOE_TRY(moe_src_open_file(&p->sh.src, path, e));
		return moe_safetensors_read(p->sh.src, &h->arena, &p->t, &p->n, e);
	}

	MOE_TRY(hf_ar_lookup(c, name, false, &ent, e));
	if (!ent)
		return moe_err(e, MOE_ENOTFOUND, "%s: missing shard %s%s%s", h->path, c->root,
			       c->root[0] ? "/" : "", name);
	p->order = ent->index;
	MOE_TRY(moe_archive_src(h->archive, ent, &p->sh.src, e));
	/* The scan cached the header of every *.safetensors member; a shard
	 * with another name is read through its source (one more pass). */
	if (ent->data_len >= 8) {
		memcpy(first8, ent->data, 8);
		MOE_TRY(moe_safetensors_header_len(p->sh.src->name, first8, ent->size, &n, e));
		if (ent->data_len == 8 + n) {
			MOE_TRY(moe_safetensors_parse(p->sh.src->name, (const char *)ent->data + 8,
						      n, 8 + n, ent->size - 8 - n, p->sh.src,
						      &h->arena, &p->t, &p->n, e));
			free(ent->data);
			ent->data = NULL;
			ent->data_len = 0;
			return 0;
		}
	}
	return moe_safetensors_read(p->sh.src, &h->arena, &p->t, &p->n, e);
}

/* ----------------------------------------------------------- the weights */

/* Shard names from the index are joined to the snapshot directory: they
 * must name a file in it, nothing else. */
static bool hf_plain_name(const char *s)
{
	return s[0] && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/') &&
	       !strchr(s, '\\');
}

static int hf_cmp_pend(const void *a, const void *b)
{
	const hf_pend *x = a, *y = b;

	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return strcmp(x->sh.name, y->sh.name);
}

static int hf_cmp_name(const void *a, const void *b)
{
	return strcmp(((const moe_hf_tensor *)a)->name, ((const moe_hf_tensor *)b)->name);
}

/* Merge the shards' tensors into h->tensors sorted by name. */
static int hf_merge(hf_ctx *c, hf_pend *pend, uint32_t np, moe_error *e)
{
	moe_hf *h = c->h;
	uint64_t total = 0, k = 0;

	if (np > 1)
		qsort(pend, np, sizeof(*pend), hf_cmp_pend);
	h->shards = moe_arena_alloc(&h->arena, (size_t)np * sizeof(*h->shards),
				    _Alignof(moe_hf_shard));
	if (!h->shards)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", h->path);
	for (uint32_t i = 0; i < np; i++) {
		h->shards[i] = pend[i].sh;
		pend[i].sh.src = NULL; /* now owned by h */
		total += pend[i].n;    /* each n is bounded by its header's size */
	}
	h->n_shards = np;
	if (total) {
		if (total > SIZE_MAX / sizeof(*h->tensors))
			return moe_err(e, MOE_ERANGE, "%s: too many tensors", h->path);
		h->tensors = moe_arena_alloc(&h->arena, (size_t)total * sizeof(*h->tensors),
					     _Alignof(moe_hf_tensor));
		if (!h->tensors)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", h->path);
	}
	for (uint32_t i = 0; i < np; i++) {
		for (uint64_t j = 0; j < pend[i].n; j++) {
			h->tensors[k] = pend[i].t[j];
			h->tensors[k].shard = i;
			h->tensors[k].src = h->shards[i].src;
			k++;
		}
	}
	h->n_tensors = total;
	if (total > 1)
		qsort(h->tensors, total, sizeof(*h->tensors), hf_cmp_name);
	for (uint64_t i = 1; i < total; i++)
		if (strcmp(h->tensors[i - 1].name, h->tensors[i].name) == 0)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s' is in both %s and %s",
				       h->path, h->tensors[i].name,
				       h->shards[h->tensors[i - 1].shard].name,
				       h->shards[h->tensors[i].shard].name);
	return 0;
}

static void hf_pend_free(hf_pend *pend, uint32_t np)
{
	for (uint32_t i = 0; i < np; i++)
		moe_src_close(pend[i].sh.src);
	free(pend);
}

/* Every shard of the index, then the index's weight_map checked against
 * what the shards hold. */
static int hf_load_sharded(hf_ctx *c, moe_error *e)
{
	moe_hf *h = c->h;
	const char *label = hf_label(c, HF_INDEX);
	char *text = NULL;
	json_t *root = NULL, *wm, *v;
	json_error_t jerr;
	const char *key;
	hf_pend *pend = NULL;
	uint32_t np = 0, cap = 0;
	int rc;

	if (!label)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", h->path);
	MOE_TRY(hf_read_json(c, HF_INDEX, true, &text, e));
	root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (!root)
		return moe_err(e, MOE_EFORMAT, "%s: %s (line %d, column %d)", label, jerr.text,
			       jerr.line, jerr.column);
	wm = json_object_get(root, "weight_map");
	if (!json_is_object(wm)) {
		rc = moe_err(e, MOE_EFORMAT, "%s: weight_map missing or not an object", label);
		goto out;
	}
	if (json_object_size(wm) == 0) {
		rc = moe_err(e, MOE_EFORMAT, "%s: weight_map is empty", label);
		goto out;
	}
	/* The distinct shard names, opened in the order they first appear
	 * (the last one seen is checked first: names come in runs). */
	json_object_foreach(wm, key, v) {
		const char *s = json_string_value(v);
		bool seen = false;

		if (!s) {
			rc = moe_err(e, MOE_EFORMAT, "%s: weight_map '%s' is not a string", label,
				     key);
			goto out;
		}
		if (!hf_plain_name(s)) {
			rc = moe_err(e, MOE_EFORMAT,
				     "%s: weight_map '%s': shard '%.200s' is not a plain file name",
				     label, key, s);
			goto out;
		}
		for (uint32_t i = np; i-- > 0;)
			if (strcmp(pend[i].sh.name, s) == 0) {
				seen = true;
				break;
			}
		if (seen)
			continue;
		if (np == cap) {
			hf_pend *n;

			cap = cap ? 2 * cap : 8;
			n = realloc(pend, (size_t)cap * sizeof(*n));
			if (!n) {
				rc = moe_err(e, MOE_ENOMEM, "%s: out of memory", label);
				goto out;
			}
			pend = n;
		}
		memset(&pend[np], 0, sizeof(pend[np]));
		np++;
		rc = hf_open_shard(c, s, &pend[np - 1], e);
		if (rc < 0)
			goto out;
	}
	rc = hf_merge(c, pend, np, e);
	if (rc < 0)
		goto out;
	json_object_foreach(wm, key, v) {
		const moe_hf_tensor *t = moe_hf_find(h, key);
		const char *s = json_string_value(v);

		if (!t) {
			rc = moe_err(e, MOE_EFORMAT, "%s: tensor '%s' is not in %s", label, key, s);
			goto out;
		}
		if (strcmp(h->shards[t->shard].name, s) != 0) {
			rc = moe_err(e, MOE_EFORMAT, "%s: tensor '%s' is in %s, not in %s", label,
				     key, h->shards[t->shard].name, s);
			goto out;
		}
	}
out:
	hf_pend_free(pend, np);
	json_decref(root);
	return rc;
}

static int hf_load_weights(hf_ctx *c, moe_error *e)
{
	hf_pend *p;
	bool single, index;
	int rc;

	/* Like transformers: a single model.safetensors wins over an index. */
	MOE_TRY(hf_exists(c, HF_SINGLE, &single, e));
	if (!single) {
		MOE_TRY(hf_exists(c, HF_INDEX, &index, e));
		if (!index)
			return moe_err(e, MOE_ENOTFOUND, "%s: missing %s (or %s with shards)",
				       c->h->path, HF_SINGLE, HF_INDEX);
		return hf_load_sharded(c, e);
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", c->h->path);
	rc = hf_open_shard(c, HF_SINGLE, p, e);
	if (rc == 0)
		rc = hf_merge(c, p, 1, e);
	hf_pend_free(p, 1);
	return rc;
}

/* ----------------------------------------------------------------- api */

static int hf_load(hf_ctx *c, moe_error *e)
{
	moe_hf *h = c->h;
	json_error_t jerr;
	json_t *cfg;

	MOE_TRY(hf_read_json(c, "config.json", true, &h->config_json, e));
	cfg = json_loads(h->config_json, 0, &jerr);
	if (!cfg)
		return moe_err(e, MOE_EFORMAT, "%s: %s (line %d, column %d)",
			       hf_label(c, "config.json"), jerr.text, jerr.line, jerr.column);
	if (!json_is_object(cfg)) {
		json_decref(cfg);
		return moe_err(e, MOE_EFORMAT, "%s: not a JSON object", hf_label(c, "config.json"));
	}
	json_decref(cfg);
	MOE_TRY(hf_read_json(c, "tokenizer.json", false, &h->tokenizer_json, e));
	MOE_TRY(hf_read_json(c, "tokenizer_config.json", false, &h->tokenizer_config_json, e));
	MOE_TRY(hf_read_json(c, "generation_config.json", false, &h->generation_config_json, e));
	return hf_load_weights(c, e);
}

int moe_hf_open(moe_hf **out, const char *path, moe_error *e)
{
	hf_ctx c = { 0 };
	struct stat st;
	moe_hf *h;
	int rc;

	*out = NULL;
	if (stat(path, &st) != 0)
		return moe_err(e, errno == ENOENT ? MOE_ENOTFOUND : MOE_EIO, "%s: %s", path,
			       strerror(errno));
	h = calloc(1, sizeof(*h));
	if (!h)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	moe_arena_init(&h->arena, 1 << 16);
	c.h = h;
	c.root = "";
	h->path = moe_arena_strndup(&h->arena, path, strlen(path));
	if (!h->path) {
		moe_hf_close(h);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	}
	h->is_archive = !S_ISDIR(st.st_mode);
	rc = 0;
	if (h->is_archive) {
		rc = moe_archive_open(&h->archive, path, hf_scan_cb, &c, e);
		if (rc == 0)
			rc = hf_find_root(&c, e);
	}
	if (rc == 0)
		rc = hf_load(&c, e);
	if (rc < 0) {
		moe_hf_close(h);
		return rc;
	}
	/* The cached headers and JSON files of members we did not use. */
	if (h->archive)
		for (uint64_t i = 0; i < moe_archive_count(h->archive); i++) {
			moe_archive_entry *ent = moe_archive_entry_at(h->archive, i);

			free(ent->data);
			ent->data = NULL;
			ent->data_len = 0;
		}
	*out = h;
	return 0;
}

void moe_hf_close(moe_hf *h)
{
	if (!h)
		return;
	for (uint32_t i = 0; i < h->n_shards; i++)
		moe_src_close(h->shards[i].src);
	moe_archive_close(h->archive);
	free(h->config_json);
	free(h->tokenizer_json);
	free(h->tokenizer_config_json);
	free(h->generation_config_json);
	moe_arena_free(&h->arena);
	free(h);
}

const moe_hf_tensor *moe_hf_find(const moe_hf *h, const char *name)
{
	moe_hf_tensor key = { .name = name };

	if (!h->n_tensors)
		return NULL;
	return bsearch(&key, h->tensors, h->n_tensors, sizeof(key), hf_cmp_name);
}
