/* hub.c — Hugging Face hub conventions: the environment variables
 * huggingface_hub reads, what a source string means, the repo listing
 * (GET /api/models/ORG/NAME/revision/REV), which files a pull takes, and the
 * HEAD request on /ORG/NAME/resolve/REV/FILE that tells a file's commit,
 * ETag (sha256 of LFS files), size and download location. */
#include "registry_int.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* A listing bigger than this is refused (the largest real repos list a few
 * thousand files: well under 1 MB). */
#define LIST_MAX ((size_t)16 << 20)

static bool env_true(const char *name)
{
	const char *v = getenv(name);
	return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "on"));
}

static int set_path(char *dst, size_t n, moe_error *e, const char *fmt, const char *a,
		    const char *b)
{
	int k = snprintf(dst, n, fmt, a, b);
	if (k < 0 || (size_t)k >= n)
		return moe_err(e, MOE_ERANGE, "path too long: %s%s", a, b);
	return 0;
}

int moe_hub_env_load(moe_hub_env *env, moe_error *e)
{
	memset(env, 0, sizeof *env);
	const char *ep = getenv("HF_ENDPOINT");
	if (!ep || !*ep)
		ep = "https://huggingface.co";
	if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))
		return moe_err(e, MOE_EINVAL, "HF_ENDPOINT '%s' is not an http(s) URL", ep);
	MOE_TRY(set_path(env->endpoint, sizeof env->endpoint, e, "%s%s", ep, ""));
	size_t n = strlen(env->endpoint);
	while (n > 0 && env->endpoint[n - 1] == '/')
		env->endpoint[--n] = '\0';

	const char *home = getenv("HF_HOME");
	if (home && *home) {
		MOE_TRY(set_path(env->hf_home, sizeof env->hf_home, e, "%s%s", home, ""));
	} else {
		const char *xdg = getenv("XDG_CACHE_HOME");
		const char *h = getenv("HOME");
		if (xdg && *xdg)
			MOE_TRY(set_path(env->hf_home, sizeof env->hf_home, e, "%s%s", xdg, "/huggingface"));
		else if (h && *h)
			MOE_TRY(set_path(env->hf_home, sizeof env->hf_home, e, "%s%s", h,
					 "/.cache/huggingface"));
		else
			return moe_err(e, MOE_EINVAL, "neither HF_HOME nor HOME is set");
	}
	const char *cache = getenv("HF_HUB_CACHE");
	if (!cache || !*cache)
		cache = getenv("HUGGINGFACE_HUB_CACHE");
	if (cache && *cache)
		MOE_TRY(set_path(env->cache, sizeof env->cache, e, "%s%s", cache, ""));
	else
		MOE_TRY(set_path(env->cache, sizeof env->cache, e, "%s%s", env->hf_home, "/hub"));

	env->offline = env_true("HF_HUB_OFFLINE");
	const char *tok = getenv("HF_TOKEN");
	if (tok && *tok) {
		env->token = strdup(tok);
	} else {
		char path[4200];
		const char *tp = getenv("HF_TOKEN_PATH");
		if (tp && *tp)
			snprintf(path, sizeof path, "%s", tp);
		else
			snprintf(path, sizeof path, "%s/token", env->hf_home);
		char *buf;
		size_t len;
		moe_error ig = {0};
		if (moe_read_file(path, 64 * 1024, &buf, &len, &ig) == 0) {
			while (len && isspace((unsigned char)buf[len - 1]))
				buf[--len] = '\0';
			if (len)
				env->token = buf;
			else
				free(buf);
		}
	}
	/* A token is a header value: refuse bytes that would split the header. */
	if (env->token)
		for (const char *c = env->token; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f) {
				moe_hub_env_free(env);
				return moe_err(e, MOE_EINVAL, "HF token contains control characters");
			}
	return 0;
}

void moe_hub_env_free(moe_hub_env *env)
{
	free(env->token);
	env->token = NULL;
}

static bool repo_part_ok(const char *s, size_t n)
{
	if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!(isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'))
			return false;
		if (c == '.' && i + 1 < n && s[i + 1] == '.')
			return false;
	}
	return true;
}

int moe_source_parse(const char *s, moe_source *src, moe_error *e)
{
	memset(src, 0, sizeof *src);
	if (!s || !*s)
		return moe_err(e, MOE_EINVAL, "empty source");
	if (!strncmp(s, "https://", 8) || !strncmp(s, "http://", 7)) {
		if (strlen(s) >= sizeof src->url)
			return moe_err(e, MOE_EINVAL, "URL too long");
		src->kind = MOE_SRC_URL;
		strcpy(src->url, s);
		return 0;
	}
	bool hf = !strncmp(s, "hf://", 5);
	struct stat st;
	if (!hf && (s[0] == '/' || s[0] == '.' || s[0] == '~' || stat(s, &st) == 0)) {
		if (strlen(s) >= sizeof src->path)
			return moe_err(e, MOE_EINVAL, "path too long");
		src->kind = MOE_SRC_PATH;
		strcpy(src->path, s);
		return 0;
	}
	const char *r = hf ? s + 5 : s;
	const char *slash = strchr(r, '/');
	const char *colon = strchr(r, ':');
	size_t rlen = colon ? (size_t)(colon - r) : strlen(r);
	if (!slash || slash > r + rlen || !repo_part_ok(r, (size_t)(slash - r)) ||
	    !repo_part_ok(slash + 1, (size_t)(r + rlen - slash - 1)))
		return moe_err(e, MOE_EINVAL,
			       "'%s' is neither a file nor a Hugging Face repo (ORG/NAME[:QUANT]) "
			       "nor an http(s) URL",
			       s);
	src->kind = MOE_SRC_HUB;
	memcpy(src->repo, r, rlen);
	src->repo[rlen] = '\0';
	if (colon) {
		const char *q = colon + 1;
		if (!*q || strlen(q) >= sizeof src->quant)
			return moe_err(e, MOE_EINVAL, "'%s': bad quantisation after ':'", s);
		for (const char *c = q; *c; c++)
			if (!(isalnum((unsigned char)*c) || *c == '_' || *c == '-' || *c == '.'))
				return moe_err(e, MOE_EINVAL, "'%s': bad quantisation after ':'", s);
		strcpy(src->quant, q);
	}
	return 0;
}

bool moe_hub_safe_name(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 1024 || name[0] == '/')
		return false;
	const char *p = name;
	for (;;) {
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!end)
			break;
		p = end + 1;
	}
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		if (*c < 0x20 || *c == 0x7f || *c == '\\')
			return false;
	return true;
}

/* Commits and ETags become directory and file names: letters and digits only. */
static bool token_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]))
			return false;
	return true;
}

/* ------------------------------------------------------------- listing */

typedef struct membuf {
	char *p;
	size_t len, cap, max;
	bool overflow;
} membuf;

static size_t mem_sink(void *user, const moe_http_resp *r, const void *p, size_t n)
{
	membuf *m = user;
	if (m->len + n > m->max) {
		m->overflow = true;
		return 0;
	}
	if (m->len + n + 1 > m->cap) {
		size_t cap = m->cap ? m->cap : 65536;
		while (cap < m->len + n + 1)
			cap *= 2;
		char *q = realloc(m->p, cap);
		if (!q)
			return 0;
		m->p = q;
		m->cap = cap;
	}
	memcpy(m->p + m->len, p, n);
	m->len += n;
	m->p[m->len] = '\0';
	return n;
}

static int mem_retry(void *user, moe_http_req *q, moe_error *e)
{
	membuf *m = user;
	m->len = 0;
	return 0;
}

static char *escape(CURL *h, const char *s)
{
	return curl_easy_escape(h, s, 0);
}

void moe_hub_free_list(char **files, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(files[i]);
	free(files);
}

static int not_ok(const moe_http_resp *r, const char *what, moe_error *e)
{
	char st[512];
	moe_http_status_text(r, st, sizeof st);
	int code = r->status == 404 ? MOE_ENOTFOUND : MOE_ENET;
	return moe_err(e, code, "%s: %s", what, st);
}

int moe_hub_parse_list(const char *text, size_t len, const char *what, char ***files, size_t *n,
		       char commit[128], moe_error *e)
{
	*files = NULL;
	*n = 0;
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	json_t *sha = json_object_get(j, "sha");
	json_t *sib = json_object_get(j, "siblings");
	int rc = 0;
	if (!json_is_object(j) || !json_is_string(sha) || !json_is_array(sib))
		rc = moe_err(e, MOE_EFORMAT, "%s: the hub's file listing is not what it should be "
					     "(no \"sha\" or \"siblings\")", what);
	else if (!token_ok(json_string_value(sha), 64))
		rc = moe_err(e, MOE_EFORMAT, "%s: bad commit id '%.80s' in the listing", what,
			     json_string_value(sha));
	else {
		strcpy(commit, json_string_value(sha));
		size_t cnt = json_array_size(sib);
		*files = calloc(cnt ? cnt : 1, sizeof **files);
		if (!*files)
			rc = moe_err(e, MOE_ENOMEM, "out of memory");
		for (size_t i = 0; rc == 0 && i < cnt; i++) {
			const char *f = json_string_value(json_object_get(json_array_get(sib, i), "rfilename"));
			if (!f)
				rc = moe_err(e, MOE_EFORMAT, "%s: listing entry %zu has no rfilename", what, i);
			else if (!moe_hub_safe_name(f))
				rc = moe_err(e, MOE_EFORMAT,
					     "%s: the server listed an unsafe file name '%.200s' "
					     "(absolute, '..' or control characters); refusing it",
					     what, f);
			else if (!((*files)[(*n)++] = strdup(f)))
				rc = moe_err(e, MOE_ENOMEM, "out of memory");
		}
	}
	json_decref(j);
	if (rc < 0) {
		moe_hub_free_list(*files, *n);
		*files = NULL;
		*n = 0;
	}
	return rc;
}

int moe_hub_list(CURL *h, const moe_hub_env *env, const moe_http_cfg *cfg, const char *repo,
		 const char *revision, char ***files, size_t *n, char commit[128], moe_error *e)
{
	*files = NULL;
	*n = 0;
	char *rev = escape(h, revision);
	if (!rev)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	char url[4096];
	snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", env->endpoint, repo, rev);
	curl_free(rev);
	membuf m = {.max = LIST_MAX};
	moe_http_req q = {.method = MOE_HTTP_GET, .url = url, .follow = true, .sink = mem_sink, .user = &m};
	moe_http_resp *r = calloc(1, sizeof *r);
	if (!r)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	int rc = moe_http_request(h, cfg, &q, r, mem_retry, &m, e);
	char what[600];
	snprintf(what, sizeof what, "%s (revision %s)", repo, revision);
	if (rc < 0 && m.overflow)
		rc = moe_err(e, MOE_EFORMAT, "%s: file listing larger than %zu bytes", what, LIST_MAX);
	else if (rc == 0 && r->status != 200)
		rc = not_ok(r, what, e);
	if (rc == 0)
		rc = moe_hub_parse_list(m.p ? m.p : "", m.len, what, files, n, commit, e);
	free(m.p);
	free(r);
	return rc;
}

/* ------------------------------------------------------------ selection */

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcasecmp(s + a - b, suf);
}

static const char *base_name(const char *s)
{
	const char *b = strrchr(s, '/');
	return b ? b + 1 : s;
}

bool moe_gguf_split_name(const char *name, unsigned *no, unsigned *count, size_t *prefix_len)
{
	/* ...-NNNNN-of-MMMMM.gguf */
	size_t n = strlen(name);
	if (n < 20 || !ends_with(name, ".gguf"))
		return false;
	const char *t = name + n - 5 - 15; /* "-00001-of-00003" */
	unsigned a, b;
	char tail[8];
	if (t[0] != '-' || sscanf(t, "-%5u-of-%5u%7s", &a, &b, tail) != 3 || strcasecmp(tail, ".gguf"))
		return false;
	for (int i = 1; i < 15; i++)
		if ((i < 6 || i > 9) && !isdigit((unsigned char)t[i]))
			return false;
	if (a == 0 || b == 0 || a > b)
		return false;
	*no = a;
	*count = b;
	*prefix_len = (size_t)(t - name);
	return true;
}

/* The GGUF "model" a file belongs to: its name without the split suffix. */
static size_t model_key_len(const char *f)
{
	unsigned no, cnt;
	size_t pl;
	return moe_gguf_split_name(f, &no, &cnt, &pl) ? pl : strlen(f) - 5;
}

static bool is_delim(char c)
{
	return c == '\0' || c == '-' || c == '.' || c == '/' || c == '_';
}

/* QUANT appears in f as a whole token, case-insensitively. "_" counts as a
 * delimiter before the token but the token must not continue with "_X"
 * (Q4_K must not pick Q4_K_M). */
static bool quant_match(const char *f, const char *quant)
{
	size_t q = strlen(quant);
	for (const char *p = f; *p; p++) {
		if (strncasecmp(p, quant, q))
			continue;
		char before = p == f ? '\0' : p[-1];
		char after = p[q];
		if (is_delim(before) && (after == '\0' || after == '-' || after == '.' || after == '/'))
			return true;
	}
	return false;
}

static bool is_mmproj(const char *f)
{
	return !strncasecmp(base_name(f), "mmproj", 6);
}

static int push(size_t **sel, size_t *n, size_t i, moe_error *e)
{
	size_t *s = realloc(*sel, (*n + 1) * sizeof **sel);
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s[(*n)++] = i;
	*sel = s;
	return 0;
}

/* The distinct GGUF models among candidates, as a message list. */
static void list_models(char *const *files, const size_t *cand, size_t nc, char *buf, size_t n)
{
	buf[0] = '\0';
	size_t used = 0;
	for (size_t i = 0; i < nc; i++) {
		const char *f = files[cand[i]];
		size_t kl = model_key_len(f);
		bool seen = false;
		for (size_t j = 0; j < i; j++)
			if (model_key_len(files[cand[j]]) == kl && !strncmp(files[cand[j]], f, kl))
				seen = true;
		if (seen)
			continue;
		int k = snprintf(buf + used, n - used, "%s%.*s.gguf", used ? ", " : "", (int)kl, f);
		if (k < 0 || (size_t)k >= n - used)
			break;
		used += (size_t)k;
	}
}

/* From GGUF candidates, the files of exactly one model (all its shards). */
static int pick_gguf(char *const *files, const size_t *cand, size_t nc, const char *repo,
		     const char *quant, size_t **sel, size_t *n_sel, moe_error *e)
{
	char models[1500];
	list_models(files, cand, nc, models, sizeof models);
	const char *first = files[cand[0]];
	size_t kl = model_key_len(first);
	for (size_t i = 1; i < nc; i++)
		if (model_key_len(files[cand[i]]) != kl || strncmp(files[cand[i]], first, kl))
			return moe_err(e, MOE_EINVAL,
				       "%s%s%s: several GGUF models match; pick one with :QUANT or "
				       "--include: %s",
				       repo, quant[0] ? ":" : "", quant, models);
	unsigned no, cnt;
	size_t pl;
	if (moe_gguf_split_name(first, &no, &cnt, &pl)) {
		/* every shard 1..cnt exactly once */
		for (unsigned k = 1; k <= cnt; k++) {
			size_t found = SIZE_MAX;
			for (size_t i = 0; i < nc; i++) {
				unsigned a, b;
				size_t p2;
				if (moe_gguf_split_name(files[cand[i]], &a, &b, &p2) && a == k && b == cnt)
					found = cand[i];
			}
			if (found == SIZE_MAX)
				return moe_err(e, MOE_ENOTFOUND, "%s: split GGUF %.*s is missing shard %u of %u",
					       repo, (int)pl, first, k, cnt);
			MOE_TRY(push(sel, n_sel, found, e));
		}
		return 0;
	}
	return push(sel, n_sel, cand[0], e);
}

static const char *const SNAPSHOT_FILES[] = {
	"config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
	"generation_config.json", "special_tokens_map.json", "tokenizer.model",
};

int moe_hub_select(char *const *files, size_t n, const char *repo, const char *quant,
		   const char *const *include, size_t n_include, size_t **sel, size_t *n_sel,
		   bool *is_gguf, moe_error *e)
{
	*sel = NULL;
	*n_sel = 0;
	*is_gguf = false;
	int rc = 0;
	if (n_include) {
		bool config = false, gguf = false;
		for (size_t i = 0; i < n && rc == 0; i++)
			for (size_t k = 0; k < n_include; k++)
				if (fnmatch(include[k], files[i], 0) == 0) {
					rc = push(sel, n_sel, i, e);
					config |= !strcmp(files[i], "config.json");
					gguf |= ends_with(files[i], ".gguf");
					break;
				}
		if (rc == 0 && *n_sel == 0)
			rc = moe_err(e, MOE_ENOTFOUND, "%s: no file matches --include", repo);
		*is_gguf = gguf && !config;
		if (rc == 0 && *is_gguf) {
			/* the GGUF files chosen must form one model */
			size_t *g = NULL, ng = 0;
			for (size_t i = 0; i < *n_sel && rc == 0; i++)
				if (ends_with(files[(*sel)[i]], ".gguf"))
					rc = push(&g, &ng, (*sel)[i], e);
			size_t *one = NULL, n_one = 0;
			if (rc == 0)
				rc = pick_gguf(files, g, ng, repo, "", &one, &n_one, e);
			free(g);
			if (rc == 0) {
				free(*sel);
				*sel = one;
				*n_sel = n_one;
			} else
				free(one);
		}
		goto out;
	}
	size_t *cand = NULL, nc = 0;
	for (size_t i = 0; i < n && rc == 0; i++)
		if (ends_with(files[i], ".gguf") && !is_mmproj(files[i]) &&
		    (!quant[0] || quant_match(files[i], quant)))
			rc = push(&cand, &nc, i, e);
	if (rc == 0 && quant[0]) {
		if (nc == 0) {
			size_t *all = NULL, na = 0;
			for (size_t i = 0; i < n && rc == 0; i++)
				if (ends_with(files[i], ".gguf") && !is_mmproj(files[i]))
					rc = push(&all, &na, i, e);
			char models[1500] = "none";
			if (na)
				list_models(files, all, na, models, sizeof models);
			free(all);
			rc = moe_err(e, MOE_ENOTFOUND, "%s: no GGUF file for quantisation '%s'; the repo has: %s",
				     repo, quant, models);
		} else {
			*is_gguf = true;
			rc = pick_gguf(files, cand, nc, repo, quant, sel, n_sel, e);
		}
		free(cand);
		goto out;
	}
	bool config = false, st = false;
	for (size_t i = 0; i < n; i++) {
		config |= !strcmp(files[i], "config.json");
		st |= !strchr(files[i], '/') && ends_with(files[i], ".safetensors");
	}
	if (rc == 0 && config && st) {
		for (size_t i = 0; i < n && rc == 0; i++) {
			bool want = !strchr(files[i], '/') && ends_with(files[i], ".safetensors");
			for (size_t k = 0; k < sizeof SNAPSHOT_FILES / sizeof *SNAPSHOT_FILES; k++)
				want |= !strcmp(files[i], SNAPSHOT_FILES[k]);
			if (want)
				rc = push(sel, n_sel, i, e);
		}
	} else if (rc == 0 && nc) {
		*is_gguf = true;
		rc = pick_gguf(files, cand, nc, repo, "", sel, n_sel, e);
	} else if (rc == 0) {
		rc = moe_err(e, MOE_ENOTFOUND,
			     "%s: no model files (neither GGUF nor config.json with safetensors)", repo);
	}
	free(cand);
out:
	if (rc < 0) {
		free(*sel);
		*sel = NULL;
		*n_sel = 0;
	}
	return rc;
}

/* ----------------------------------------------------------------- HEAD */

/* W/"abc" or "abc" -> abc */
static void norm_etag(const char *in, char *out, size_t n)
{
	if (!strncmp(in, "W/", 2))
		in += 2;
	size_t len = strlen(in);
	if (len >= 2 && in[0] == '"' && in[len - 1] == '"')
		in++, len -= 2;
	if (len >= n)
		len = n - 1;
	memcpy(out, in, len);
	out[len] = '\0';
}

int moe_hub_head(CURL *h, const moe_hub_env *env, const moe_http_cfg *cfg, const char *repo,
		 const char *revision, const char *file, moe_hub_file *out, moe_error *e)
{
	memset(out, 0, sizeof *out);
	char *rev = escape(h, revision);
	char path[3000] = "";
	size_t pl = 0;
	/* escape each component, keep the slashes */
	for (const char *p = file; *p;) {
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char *c = curl_easy_escape(h, p, (int)len);
		if (!c || pl + strlen(c) + 2 >= sizeof path) {
			curl_free(c);
			curl_free(rev);
			return moe_err(e, MOE_ERANGE, "%s: file name too long", file);
		}
		pl += (size_t)sprintf(path + pl, "%s%s", pl ? "/" : "", c);
		curl_free(c);
		p = end ? end + 1 : p + len;
	}
	char url[4096];
	snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", env->endpoint, repo, rev ? rev : "", path);
	curl_free(rev);
	moe_http_resp *r = calloc(1, sizeof *r);
	if (!r)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	char what[1400];
	snprintf(what, sizeof what, "%s/%s (revision %s)", repo, file, revision);
	int rc = 0;
	char cur[4096];
	strcpy(cur, url);
	int max = cfg->max_redirects > 0 ? cfg->max_redirects : 10;
	for (int hop = 0;; hop++) {
		moe_http_req q = {.method = MOE_HTTP_HEAD, .url = cur, .follow = false};
		rc = moe_http_request(h, cfg, &q, r, NULL, NULL, e);
		if (rc < 0)
			break;
		bool redirect = r->status >= 300 && r->status < 400;
		if (redirect && !r->linked_etag[0] && !r->repo_commit[0]) {
			/* a renamed repo: ask again where it points */
			char next[4096];
			CURLU *u = curl_url();
			char *abs = NULL;
			bool ok = u && r->location[0] && curl_url_set(u, CURLUPART_URL, cur, 0) == CURLUE_OK &&
				  curl_url_set(u, CURLUPART_URL, r->location, 0) == CURLUE_OK &&
				  curl_url_get(u, CURLUPART_URL, &abs, 0) == CURLUE_OK && strlen(abs) < sizeof next;
			if (ok)
				strcpy(next, abs);
			curl_free(abs);
			curl_url_cleanup(u);
			if (!ok) {
				rc = moe_err(e, MOE_EFORMAT, "%s: redirect to an unusable location", what);
				break;
			}
			if (hop + 1 > max) {
				rc = moe_err(e, MOE_EFORMAT, "%s: more than %d redirects (a redirect loop?)",
					     what, max);
				break;
			}
			strcpy(cur, next);
			continue;
		}
		if (!redirect && r->status != 200) {
			rc = not_ok(r, what, e);
			break;
		}
		norm_etag(r->linked_etag[0] ? r->linked_etag : r->etag, out->etag, sizeof out->etag);
		out->lfs = r->linked_etag[0] != '\0';
		snprintf(out->commit, sizeof out->commit, "%s", r->repo_commit);
		if (!token_ok(out->commit, 64)) {
			rc = moe_err(e, MOE_EFORMAT, "%s: missing or bad X-Repo-Commit '%.80s'", what,
				     r->repo_commit);
			break;
		}
		if (!token_ok(out->etag, 128)) {
			rc = moe_err(e, MOE_EFORMAT, "%s: missing or bad ETag '%.80s'", what, out->etag);
			break;
		}
		if (out->lfs && strlen(out->etag) != 64) {
			rc = moe_err(e, MOE_EFORMAT, "%s: X-Linked-Etag '%.80s' is not a sha256", what,
				     out->etag);
			break;
		}
		out->size = r->has_linked_size ? r->linked_size
			    : (!redirect && r->has_length) ? r->content_length
							   : UINT64_MAX;
		if (redirect) {
			CURLU *u = curl_url();
			char *abs = NULL;
			bool ok = u && r->location[0] && curl_url_set(u, CURLUPART_URL, cur, 0) == CURLUE_OK &&
				  curl_url_set(u, CURLUPART_URL, r->location, 0) == CURLUE_OK &&
				  curl_url_get(u, CURLUPART_URL, &abs, 0) == CURLUE_OK &&
				  strlen(abs) < sizeof out->url;
			if (ok)
				strcpy(out->url, abs);
			curl_free(abs);
			curl_url_cleanup(u);
			if (!ok)
				rc = moe_err(e, MOE_EFORMAT, "%s: redirect to an unusable location", what);
		} else {
			strcpy(out->url, cur);
		}
		break;
	}
	free(r);
	return rc;
}
