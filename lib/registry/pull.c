/* pull.c — moe_pull: source -> files on disk (hub cache, URL download or a
 * local path) -> UTH through the converter -> the store and the registry.
 *
 * One pull of a NAME:TAG at a time (an flock in $store/locks), so a second
 * concurrent pull of the same model waits and then finds it registered; two
 * pulls of different names that share files meet at the per-blob locks of
 * the hub cache, so every file is downloaded once. */
#include "convert.h"
#include "registry_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void stage(const moe_pull_opts *o, const char *msg)
{
	if (o->progress) {
		moe_pull_event ev = {.kind = MOE_PULL_EV_STAGE, .msg = msg};
		o->progress(o->user, &ev);
	}
}

static void file_event(const moe_pull_opts *o, int kind, const char *file, int i, int n,
		       uint64_t size, uint64_t all_done, uint64_t all_total, const char *msg)
{
	if (o->progress) {
		moe_pull_event ev = {.kind = kind, .msg = msg, .file = file, .file_index = i,
				     .n_files = n, .file_done = size, .file_total = size,
				     .all_done = all_done, .all_total = all_total};
		o->progress(o->user, &ev);
	}
}

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcasecmp(s + a - b, suf);
}

static bool exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* Name of a model from a file or URL: base name without extensions or the
 * split suffix, restricted to name characters. */
static void derive_name(const char *s, char *out, size_t n)
{
	const char *b = s;
	size_t len = strlen(s);
	while (len > 1 && s[len - 1] == '/')
		len--;
	for (size_t i = 0; i < len; i++)
		if (s[i] == '/')
			b = s + i + 1;
	size_t bl = (size_t)(s + len - b);
	const char *q = memchr(b, '?', bl);
	if (q)
		bl = (size_t)(q - b);
	char tmp[512];
	if (bl >= sizeof tmp)
		bl = sizeof tmp - 1;
	memcpy(tmp, b, bl);
	tmp[bl] = '\0';
	unsigned no, cnt;
	size_t pl;
	if (moe_gguf_split_name(tmp, &no, &cnt, &pl))
		tmp[pl] = '\0';
	static const char *const exts[] = {".gguf", ".uth", ".zip", ".tgz", ".zst", ".gz", ".xz",
					   ".bz2", ".tar"};
	for (bool again = true; again;) {
		again = false;
		for (size_t i = 0; i < sizeof exts / sizeof *exts; i++)
			if (ends_with(tmp, exts[i]) && strlen(tmp) > strlen(exts[i])) {
				tmp[strlen(tmp) - strlen(exts[i])] = '\0';
				again = true;
			}
	}
	size_t k = 0;
	for (char *c = tmp; *c && k + 1 < n; c++)
		out[k++] = isalnum((unsigned char)*c) || *c == '-' || *c == '_' || *c == '.' ? *c : '-';
	out[k] = '\0';
	while (out[0] == '.' || out[0] == '-')
		memmove(out, out + 1, strlen(out));
	if (!out[0])
		snprintf(out, n, "model");
}

/* --------------------------------------------------------------- locks */

static int name_lock(const char *store, const char *name, const char *tag, int *fd, moe_error *e)
{
	char dir[4200], path[4800], flat[400];
	snprintf(dir, sizeof dir, "%s/locks", store);
	MOE_TRY(moe_mkdir_p(dir, e));
	snprintf(flat, sizeof flat, "%s:%s", name, tag);
	for (char *c = flat; *c; c++)
		if (*c == '/')
			*c = '%';
	snprintf(path, sizeof path, "%s/%s.lock", dir, flat);
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (*fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot open lock: %s", path, strerror(errno));
	if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
		moe_log(MOE_LOG_INFO, "another moe-pull of %s:%s is running; waiting", name, tag);
		while (flock(*fd, LOCK_EX) != 0)
			if (errno != EINTR) {
				close(*fd);
				return moe_err(e, MOE_EIO, "%s: cannot lock: %s", path, strerror(errno));
			}
	}
	return 0;
}

/* Work files of pulls that were killed: $store/tmp/<pid> of dead pids. */
static void clean_stale(const char *store)
{
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/tmp", store);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		char sub[4500];
		snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
		DIR *s = opendir(sub);
		struct dirent *f;
		while (s && (f = readdir(s))) {
			if (f->d_name[0] == '.' && (!f->d_name[1] || (f->d_name[1] == '.' && !f->d_name[2])))
				continue;
			char p[4800];
			snprintf(p, sizeof p, "%s/%s", sub, f->d_name);
			unlink(p);
		}
		if (s)
			closedir(s);
		rmdir(sub);
	}
	closedir(d);
}

/* ------------------------------------------------------------ the hub */

typedef struct fetched {
	char **paths;  /* local files (snapshot links) or the snapshot dir */
	size_t n;
	bool is_gguf;
	char input[8192]; /* what the converter reads */
	char revision[128];
} fetched;

static void fetched_free(fetched *f)
{
	moe_hub_free_list(f->paths, f->n);
	f->paths = NULL;
	f->n = 0;
}

static int add_path(fetched *f, const char *p, moe_error *e)
{
	char **q = realloc(f->paths, (f->n + 1) * sizeof *q);
	if (!q)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	f->paths = q;
	if (!(f->paths[f->n] = strdup(p)))
		return moe_err(e, MOE_ENOMEM, "out of memory");
	f->n++;
	return 0;
}

static void http_cfg(const moe_pull_opts *o, const moe_hub_env *env, moe_http_cfg *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->token = env ? env->token : NULL;
	if (env)
		moe_http_origin(env->endpoint, cfg->token_origin, sizeof cfg->token_origin);
	cfg->retries = o->retries;
	cfg->retry_wait = o->retry_wait;
	cfg->timeout = o->timeout;
	cfg->max_redirects = 10;
	cfg->cancel = o->cancel;
}

static int fetch_hub(const moe_pull_opts *o, const moe_source *src, const moe_hub_env *env,
		     const moe_registry_entry *have, bool *up_to_date, fetched *f, moe_error *e)
{
	const char *rev = o->revision ? o->revision : "main";
	char repo_dir[4400];
	MOE_TRY(moe_cache_repo_dir(env, src->repo, repo_dir, sizeof repo_dir, e));
	char **files = NULL;
	size_t n = 0, *sel = NULL, n_sel = 0;
	char commit[128] = "";
	int rc;
	moe_http_cfg cfg;
	http_cfg(o, env, &cfg);
	CURL *h = NULL;
	moe_hub_file *meta = NULL;
	if (env->offline) {
		stage(o, "offline: looking in the Hugging Face cache");
		rc = moe_cache_read_ref(repo_dir, rev, commit, e);
		if (rc == MOE_ENOTFOUND)
			moe_err_prefix(e, "HF_HUB_OFFLINE is set and %s is not in the cache", src->repo);
		if (rc == 0 && have && !strcmp(have->revision, commit)) {
			*up_to_date = true;
			return 0;
		}
		if (rc == 0)
			rc = moe_cache_list_snapshot(repo_dir, commit, &files, &n, e);
	} else {
		stage(o, "resolving");
		h = curl_easy_init();
		rc = h ? moe_hub_list(h, env, &cfg, src->repo, rev, &files, &n, commit, e)
		       : moe_err(e, MOE_ENOMEM, "curl_easy_init failed");
		if (rc == 0 && have && !strcmp(have->revision, commit)) {
			*up_to_date = true;
			goto out;
		}
	}
	if (rc == 0)
		rc = moe_hub_select(files, n, src->repo, src->quant, o->include, o->n_include, &sel,
				    &n_sel, &f->is_gguf, e);
	if (rc < 0)
		goto out;
	snprintf(f->revision, sizeof f->revision, "%s", commit);
	meta = calloc(n_sel, sizeof *meta);
	if (!meta) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto out;
	}
	uint64_t all_total = 0, all_done = 0;
	if (!env->offline) {
		/* pin every file to the listed commit */
		for (size_t i = 0; i < n_sel && rc == 0; i++) {
			rc = moe_hub_head(h, env, &cfg, src->repo, commit, files[sel[i]], &meta[i], e);
			if (rc == 0 && strcmp(meta[i].commit, commit))
				rc = moe_err(e, MOE_EFORMAT, "%s: HEAD says commit %s, the listing %s",
					     files[sel[i]], meta[i].commit, commit);
			if (rc == 0 && meta[i].size != UINT64_MAX)
				all_total += meta[i].size;
		}
		if (rc == 0) {
			char blobs[4500];
			snprintf(blobs, sizeof blobs, "%s/blobs", repo_dir);
			rc = moe_mkdir_p(blobs, e);
		}
		for (size_t i = 0; i < n_sel && rc == 0; i++) {
			const char *file = files[sel[i]];
			char blob[4800];
			snprintf(blob, sizeof blob, "%s/blobs/%s", repo_dir, meta[i].etag);
			const char *how = "cached";
			if (!exists(blob)) {
				int lfd;
				rc = moe_cache_lock(env, src->repo, meta[i].etag, &lfd, e);
				if (rc < 0)
					break;
				if (!exists(blob)) {
					bool hex40 = strlen(meta[i].etag) == 40;
					moe_dl d = {
						.cfg = &cfg,
						.url = meta[i].url,
						.dest = blob,
						.display = file,
						.size = meta[i].size,
						.sha256 = meta[i].lfs ? meta[i].etag : NULL,
						.sha1_blob = !meta[i].lfs && hex40 ? meta[i].etag : NULL,
						.connections = o->connections > 0 ? o->connections : 4,
						.progress = o->progress,
						.user = o->user,
						.file_index = (int)i,
						.n_files = (int)n_sel,
						.all_base = all_done,
						.all_total = all_total,
					};
					rc = moe_download(&d, e);
					how = d.resumed ? "resumed" : "downloaded";
				}
				moe_cache_unlock(lfd);
				if (rc < 0)
					break;
			}
			file_event(o, MOE_PULL_EV_FILE_END, file, (int)i, (int)n_sel, meta[i].size,
				   all_done + meta[i].size, all_total, how);
			if (meta[i].size != UINT64_MAX)
				all_done += meta[i].size;
			rc = moe_cache_link(repo_dir, commit, file, meta[i].etag, e);
		}
		if (rc == 0)
			rc = moe_cache_write_ref(repo_dir, rev, commit, e);
	}
	for (size_t i = 0; i < n_sel && rc == 0; i++) {
		char p[4800];
		snprintf(p, sizeof p, "%s/snapshots/%s/%s", repo_dir, commit, files[sel[i]]);
		if (env->offline && !exists(p))
			rc = moe_err(e, MOE_ENOTFOUND, "HF_HUB_OFFLINE is set and %s is not in the cache", p);
		else
			rc = add_path(f, p, e);
	}
	if (rc == 0 && !f->is_gguf)
		snprintf(f->input, sizeof f->input, "%s/snapshots/%s", repo_dir, commit);
	else if (rc == 0 && f->n == 1)
		snprintf(f->input, sizeof f->input, "%s", f->paths[0]);
out:
	free(meta);
	free(sel);
	moe_hub_free_list(files, n);
	if (h)
		curl_easy_cleanup(h);
	return rc;
}

/* ---------------------------------------------------------------- URLs */

static int fetch_url(const moe_pull_opts *o, const moe_source *src, const moe_hub_env *env,
		     fetched *f, moe_error *e)
{
	char dir[4096], base[256], dest[4600];
	MOE_TRY(moe_path_cache(dir, sizeof dir - 16, e));
	strcat(dir, "/downloads");
	MOE_TRY(moe_mkdir_p(dir, e));
	/* the URL's hash keeps two files of one name apart */
	moe_digest *d;
	MOE_TRY(moe_digest_new(&d, MOE_DIGEST_SHA256, e));
	moe_digest_update(d, src->url, strlen(src->url));
	char uh[65];
	moe_digest_hex(d, uh);
	moe_digest_free(d);
	derive_name(src->url, base, sizeof base);
	const char *ext = "";
	char path_only[4096];
	snprintf(path_only, sizeof path_only, "%s", src->url);
	char *qm = strchr(path_only, '?');
	if (qm)
		*qm = '\0';
	static const char *const known[] = {".gguf", ".uth", ".tar.zst", ".tar.gz", ".tgz", ".tar.xz",
					    ".tar", ".zip"};
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (ends_with(path_only, known[i])) {
			ext = known[i];
			break;
		}
	if (!ext[0])
		return moe_err(e, MOE_EUNSUPPORTED,
			       "%s: cannot tell the format from the name (expected .gguf, .uth, "
			       ".tar.*, .zip)",
			       src->url);
	/* downloads/<url hash>/<name>: the file keeps its own name (which the
	 * converter records as provenance) and two URLs never collide */
	snprintf(dest, sizeof dest, "%s/%.16s", dir, uh);
	MOE_TRY(moe_mkdir_p(dest, e));
	snprintf(dest, sizeof dest, "%s/%.16s/%s%s", dir, uh, base, ext);
	f->is_gguf = !strcmp(ext, ".gguf");
	int rc = 0;
	if (!exists(dest)) {
		if (env->offline)
			return moe_err(e, MOE_ENOTFOUND, "HF_HUB_OFFLINE is set and %s was never downloaded",
				       src->url);
		char lockp[4700];
		snprintf(lockp, sizeof lockp, "%s.lock", dest);
		int lfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (lfd < 0)
			return moe_err(e, MOE_EIO, "%s: cannot open lock: %s", lockp, strerror(errno));
		while (flock(lfd, LOCK_EX) != 0 && errno == EINTR)
			;
		if (!exists(dest)) {
			moe_http_cfg cfg;
			/* the token only if the URL is on the hub's own origin */
			http_cfg(o, env, &cfg);
			CURL *h = curl_easy_init();
			moe_http_resp *r = calloc(1, sizeof *r);
			moe_http_req q = {.method = MOE_HTTP_HEAD, .url = src->url, .follow = true};
			stage(o, "resolving");
			rc = h && r ? moe_http_request(h, &cfg, &q, r, NULL, NULL, e)
				    : moe_err(e, MOE_ENOMEM, "out of memory");
			uint64_t size = UINT64_MAX;
			char linked[256] = "";
			if (rc == 0 && r->status >= 200 && r->status < 300) {
				/* a hub resolve URL tells the sha256 of an LFS file */
				if (r->has_linked_size)
					size = r->linked_size;
				else if (r->has_length)
					size = r->content_length;
				const char *le = r->linked_etag;
				if (le[0] == '"')
					le++;
				if (strlen(le) >= 64) {
					memcpy(linked, le, 64);
					linked[64] = '\0';
				}
			} else if (rc == 0 && r->status != 405 && r->status != 501) {
				char st[512];
				moe_http_status_text(r, st, sizeof st);
				rc = moe_err(e, r->status == 404 ? MOE_ENOTFOUND : MOE_ENET, "%s: %s", src->url, st);
			}
			free(r);
			if (h)
				curl_easy_cleanup(h);
			if (rc == 0) {
				moe_dl dl = {.cfg = &cfg, .url = src->url, .dest = dest, .display = base,
					     .size = size,
					     .sha256 = o->sha256 ? o->sha256 : linked[0] ? linked : NULL,
					     .connections = o->connections > 0 ? o->connections : 4,
					     .progress = o->progress, .user = o->user, .n_files = 1,
					     .all_total = size};
				rc = moe_download(&dl, e);
				if (rc == 0)
					file_event(o, MOE_PULL_EV_FILE_END, base, 0, 1, size, size, size,
						   dl.resumed ? "resumed" : "downloaded");
			}
		}
		flock(lfd, LOCK_UN);
		close(lfd);
		if (rc < 0)
			return rc;
	} else if (o->sha256) {
		char hex[65];
		MOE_TRY(moe_sha256_file(dest, hex, e));
		if (strcasecmp(hex, o->sha256))
			return moe_err(e, MOE_ECHECKSUM, "%s: sha256 is %s, expected %s", dest, hex, o->sha256);
	}
	snprintf(f->input, sizeof f->input, "%s", dest);
	return add_path(f, dest, e);
}

/* ------------------------------------------------------- store and info */

static int copy_file(const char *from, const char *to, moe_error *e)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return moe_err(e, MOE_EIO, "%s: cannot open: %s", from, strerror(errno));
	moe_out o;
	int rc = moe_out_open(&o, to, e);
	if (rc < 0) {
		close(in);
		return rc;
	}
	enum { B = 8 << 20 };
	char *buf = malloc(B);
	if (!buf)
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	for (;;) {
		if (rc < 0)
			break;
		ssize_t n = read(in, buf, B);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = moe_err(e, MOE_EIO, "%s: read failed: %s", from, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		rc = moe_out_write(&o, buf, (size_t)n, e);
	}
	free(buf);
	close(in);
	if (rc == 0)
		return moe_out_commit(&o, e);
	moe_out_abort(&o);
	return rc;
}

static int describe(const char *uth, moe_registry_entry *en, moe_error *e)
{
	json_t *info;
	MOE_TRY(moe_model_info(uth, &info, e));
	snprintf(en->architecture, sizeof en->architecture, "%s",
		 json_string_value(json_object_get(info, "architecture"))
			 ? json_string_value(json_object_get(info, "architecture"))
			 : "");
	en->parameters = (uint64_t)json_integer_value(json_object_get(info, "n_params"));
	const char *k;
	json_t *v;
	size_t used = 0;
	en->weight_types[0] = '\0';
	json_object_foreach(json_object_get(info, "dtypes"), k, v) {
		/* integer tensors are tokenizer tables, not weights */
		if (k[0] == 'i' || k[0] == 'u')
			continue;
		int w = snprintf(en->weight_types + used, sizeof en->weight_types - used, "%s%s",
				 used ? "," : "", k);
		if (w < 0 || (size_t)w >= sizeof en->weight_types - used)
			break;
		used += (size_t)w;
	}
	json_decref(info);
	return 0;
}

/* --------------------------------------------------------------- pull */

int moe_pull(const moe_pull_opts *o, moe_registry_entry *out, moe_error *e)
{
	memset(out, 0, sizeof *out);
	pthread_once(&curl_once, curl_init);
	moe_source src;
	MOE_TRY(moe_source_parse(o->source, &src, e));
	if (src.kind != MOE_SRC_HUB && (o->revision || o->n_include))
		return moe_err(e, MOE_EINVAL, "--revision and --include apply to Hugging Face repos only");
	if (src.kind == MOE_SRC_PATH && !exists(src.path))
		return moe_err(e, MOE_ENOTFOUND, "%s: %s", src.path, strerror(errno));
	char name[256], tag[128];
	if (o->name) {
		MOE_TRY(moe_registry_split_name(o->name, name, sizeof name, tag, sizeof tag, e));
		if (!tag[0])
			strcpy(tag, src.kind == MOE_SRC_HUB && src.quant[0] ? src.quant : "latest");
	} else if (src.kind == MOE_SRC_HUB) {
		snprintf(name, sizeof name, "%s", src.repo);
		snprintf(tag, sizeof tag, "%s", src.quant[0] ? src.quant : "latest");
	} else {
		derive_name(src.kind == MOE_SRC_URL ? src.url : src.path, name, sizeof name);
		strcpy(tag, "latest");
	}
	moe_hub_env env;
	MOE_TRY(moe_hub_env_load(&env, e));
	char store[4096] = "", work[4400] = "";
	int rc = moe_registry_store_dir(store, sizeof store, e);
	int lfd = -1;
	moe_registry *reg = NULL;
	fetched f = {0};
	if (rc == 0 && !o->download_only) {
		rc = moe_mkdir_p(store, e);
		if (rc == 0)
			rc = name_lock(store, name, tag, &lfd, e);
		if (rc == 0)
			rc = moe_registry_open(&reg, false, e);
	}
	if (rc < 0)
		goto out;
	/* What NAME:TAG holds now, if it came from this source. */
	moe_registry_entry have, *havep = NULL;
	moe_error ig = {0};
	{
		char full[400];
		snprintf(full, sizeof full, "%s:%s", name, tag);
		if (reg && moe_registry_get(reg, full, &have, &ig) == 0 && !strcmp(have.name, name) &&
		    !strcmp(have.tag, tag) && !strcmp(have.source, o->source) && exists(have.path) &&
		    !o->n_include && o->out_type < 0)
			havep = &have;
	}
	bool up_to_date = false;
	if (src.kind == MOE_SRC_HUB)
		rc = fetch_hub(o, &src, &env, o->download_only ? NULL : havep, &up_to_date, &f, e);
	else if (src.kind == MOE_SRC_URL)
		rc = fetch_url(o, &src, &env, &f, e);
	else
		snprintf(f.input, sizeof f.input, "%s", src.path);
	if (rc < 0)
		goto out;
	if (up_to_date) {
		stage(o, "up to date");
		*out = have;
		goto out;
	}
	if (o->download_only) {
		snprintf(out->source, sizeof out->source, "%s", o->source);
		/* A split GGUF's shards are reported by their directory. */
		bool shards = f.is_gguf && f.n > 1;
		const char *got = shards ? f.paths[0] : f.input[0] ? f.input : (f.n ? f.paths[0] : "");
		size_t len = strlen(got);
		if (len >= sizeof out->path) {
			/* No file system opens such a path, but say so rather than cut it. */
			rc = moe_err(e, MOE_EINVAL, "%.200s...: downloaded path longer than %zu bytes",
				     got, sizeof out->path - 1);
			goto out;
		}
		memcpy(out->path, got, len + 1);
		char *sl = shards ? strrchr(out->path, '/') : NULL;
		if (sl)
			*sl = '\0';
		goto out;
	}
	clean_stale(store);
	snprintf(work, sizeof work, "%s/tmp/%ld", store, (long)getpid());
	rc = moe_mkdir_p(work, e);
	if (rc < 0)
		goto out;
	char joined[4700] = "", tmp_uth[4700];
	if (f.is_gguf && f.n > 1) {
		char base[256];
		derive_name(f.paths[0], base, sizeof base);
		snprintf(joined, sizeof joined, "%s/%s.gguf", work, base);
		stage(o, "joining split GGUF");
		rc = moe_gguf_join(f.paths, f.n, joined, e);
		if (rc < 0)
			goto out;
		snprintf(f.input, sizeof f.input, "%s", joined);
	}
	snprintf(tmp_uth, sizeof tmp_uth, "%s/model.uth", work);
	if (ends_with(f.input, ".uth")) {
		stage(o, "copying");
		rc = copy_file(f.input, tmp_uth, e);
	} else {
		stage(o, "converting");
		moe_convert_opts co = {.input = f.input, .output = tmp_uth, .out_type = o->out_type};
		rc = moe_convert(&co, e);
	}
	if (joined[0])
		unlink(joined);
	if (rc < 0)
		goto out;
	stage(o, "verifying");
	moe_registry_entry en = {0};
	snprintf(en.name, sizeof en.name, "%s", name);
	snprintf(en.tag, sizeof en.tag, "%s", tag);
	snprintf(en.source, sizeof en.source, "%s", o->source);
	snprintf(en.revision, sizeof en.revision, "%s", f.revision);
	struct stat st;
	rc = moe_sha256_file(tmp_uth, en.sha256, e);
	if (rc == 0 && stat(tmp_uth, &st) != 0)
		rc = moe_err(e, MOE_EIO, "%s: %s", tmp_uth, strerror(errno));
	if (rc == 0)
		rc = describe(tmp_uth, &en, e);
	if (rc < 0)
		goto out;
	en.size = (uint64_t)st.st_size;
	en.created = (int64_t)time(NULL);
	stage(o, "registering");
	rc = moe_registry_add(reg, tmp_uth, &en, e);
	if (rc == 0)
		*out = en;
out:
	/* nothing of this pull's work files stays behind */
	if (!o->download_only && store[0]) {
		char p[4800];
		snprintf(p, sizeof p, "%s/tmp/%ld/model.uth", store, (long)getpid());
		unlink(p);
		snprintf(p, sizeof p, "%s/tmp/%ld", store, (long)getpid());
		rmdir(p);
	}
	fetched_free(&f);
	moe_registry_close(reg);
	if (lfd >= 0) {
		flock(lfd, LOCK_UN);
		close(lfd);
	}
	moe_hub_env_free(&env);
	return rc;
}
