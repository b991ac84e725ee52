/* cache.c — the Hugging Face cache layout, shared with huggingface_hub and
 * other tools:
 *
 *   $HF_HUB_CACHE/models--ORG--NAME/blobs/<etag>           file contents
 *                                  blobs/<etag>.incomplete a download in progress
 *                                  snapshots/<commit>/<file> -> ../../blobs/<etag>
 *                                  refs/<revision>          the commit, one line
 *   $HF_HUB_CACHE/.locks/models--ORG--NAME/<etag>.lock      flock() per blob
 *
 * The lock is the one huggingface_hub's filelock takes (flock on the same
 * path), so a moe-pull and a Python download of one blob never interleave. */
#include "registry_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int moe_cache_repo_dir(const moe_hub_env *env, const char *repo, char *buf, size_t n,
		       moe_error *e)
{
	char flat[300];
	size_t k = 0;
	for (const char *p = repo; *p && k + 3 < sizeof flat; p++) {
		if (*p == '/') {
			flat[k++] = '-';
			flat[k++] = '-';
		} else
			flat[k++] = *p;
	}
	flat[k] = '\0';
	int w = snprintf(buf, n, "%s/models--%s", env->cache, flat);
	if (w < 0 || (size_t)w >= n)
		return moe_err(e, MOE_ERANGE, "cache path too long");
	return 0;
}

static bool rev_ok(const char *rev)
{
	return moe_hub_safe_name(rev) && strlen(rev) < 200;
}

int moe_cache_write_ref(const char *repo_dir, const char *revision, const char *commit,
			moe_error *e)
{
	if (!strcmp(revision, commit))
		return 0;
	if (!rev_ok(revision))
		return moe_err(e, MOE_EINVAL, "revision '%s' cannot be stored as a ref", revision);
	char path[4400], tmp[4500];
	snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	MOE_TRY(moe_mkdir_p(path, e));
	*slash = '/';
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot create: %s", tmp, strerror(errno));
	size_t len = strlen(commit);
	bool ok = write(fd, commit, len) == (ssize_t)len && fsync(fd) == 0;
	int err = errno;
	close(fd);
	if (!ok || rename(tmp, path) != 0) {
		if (ok)
			err = errno;
		unlink(tmp);
		return moe_err(e, MOE_EIO, "%s: cannot write: %s", path, strerror(err));
	}
	return 0;
}

int moe_cache_read_ref(const char *repo_dir, const char *revision, char commit[128],
		       moe_error *e)
{
	if (!rev_ok(revision))
		return moe_err(e, MOE_EINVAL, "bad revision '%s'", revision);
	char path[4400];
	snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
	char *buf;
	size_t len;
	moe_error ig = {0};
	if (moe_read_file(path, 4096, &buf, &len, &ig) == 0) {
		while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\r'))
			buf[--len] = '\0';
		/* a NUL inside made the id "" (snapshots/ itself) or a prefix of
		 * it (found by fuzz-registry, tests/fuzz/registry/crash-ref-nul) */
		bool ok = len > 0 && len < 128 && strlen(buf) == len && !strchr(buf, '/') &&
			  strcmp(buf, "..") && strcmp(buf, ".");
		if (ok)
			strcpy(commit, buf);
		free(buf);
		if (ok)
			return 0;
		return moe_err(e, MOE_EFORMAT, "%s: not a commit id", path);
	}
	struct stat st;
	snprintf(path, sizeof path, "%s/snapshots/%s", repo_dir, revision);
	if (!strchr(revision, '/') && strlen(revision) < 128 && stat(path, &st) == 0 &&
	    S_ISDIR(st.st_mode)) {
		strcpy(commit, revision);
		return 0;
	}
	return moe_err(e, MOE_ENOTFOUND, "revision '%s' is not in the cache %s", revision, repo_dir);
}

static int walk(const char *root, const char *rel, char ***files, size_t *n, size_t *cap,
		int depth, moe_error *e)
{
	if (depth > 16)
		return 0;
	char dir[8192];
	snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
	DIR *d = opendir(dir);
	if (!d)
		return moe_err(e, MOE_EIO, "%s: cannot read: %s", dir, strerror(errno));
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char sub[4096], full[8192];
		int k = snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
		if (k < 0 || (size_t)k >= sizeof sub)
			continue;
		snprintf(full, sizeof full, "%s/%s", root, sub);
		struct stat st;
		if (stat(full, &st) != 0)
			continue; /* a dangling link: the blob is gone */
		if (S_ISDIR(st.st_mode)) {
			rc = walk(root, sub, files, n, cap, depth + 1, e);
		} else if (S_ISREG(st.st_mode)) {
			if (*n == *cap) {
				size_t nc = *cap ? *cap * 2 : 32;
				char **f = realloc(*files, nc * sizeof *f);
				if (!f) {
					rc = moe_err(e, MOE_ENOMEM, "out of memory");
					break;
				}
				*files = f;
				*cap = nc;
			}
			if (!((*files)[*n] = strdup(sub)))
				rc = moe_err(e, MOE_ENOMEM, "out of memory");
			else
				(*n)++;
		}
	}
	closedir(d);
	return rc;
}

int moe_cache_list_snapshot(const char *repo_dir, const char *commit, char ***files, size_t *n,
			    moe_error *e)
{
	*files = NULL;
	*n = 0;
	size_t cap = 0;
	char root[4400];
	snprintf(root, sizeof root, "%s/snapshots/%s", repo_dir, commit);
	int rc = walk(root, "", files, n, &cap, 0, e);
	if (rc < 0) {
		moe_hub_free_list(*files, *n);
		*files = NULL;
		*n = 0;
	}
	return rc;
}

int moe_cache_link(const char *repo_dir, const char *commit, const char *file,
		   const char *etag, moe_error *e)
{
	char link[8192], target[4400], tmp[8300];
	int k = snprintf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, file);
	if (k < 0 || (size_t)k >= sizeof link)
		return moe_err(e, MOE_ERANGE, "%s: path too long", file);
	/* ../../blobs/<etag>, one more ../ per directory inside the snapshot */
	size_t t = 0;
	target[0] = '\0';
	for (const char *p = file; (p = strchr(p, '/')); p++)
		t += (size_t)snprintf(target + t, sizeof target - t, "../");
	snprintf(target + t, sizeof target - t, "../../blobs/%s", etag);
	char *slash = strrchr(link, '/');
	*slash = '\0';
	MOE_TRY(moe_mkdir_p(link, e));
	*slash = '/';
	char cur[4400];
	ssize_t len = readlink(link, cur, sizeof cur - 1);
	if (len >= 0) {
		cur[len] = '\0';
		if (!strcmp(cur, target))
			return 0;
	}
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", link, (long)getpid());
	unlink(tmp);
	if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
		int err = errno;
		unlink(tmp);
		return moe_err(e, MOE_EIO, "%s: cannot create link: %s", link, strerror(err));
	}
	return 0;
}

int moe_cache_lock(const moe_hub_env *env, const char *repo, const char *etag, int *fd,
		   moe_error *e)
{
	char repo_dir[4400], dir[4500], path[4800];
	MOE_TRY(moe_cache_repo_dir(env, repo, repo_dir, sizeof repo_dir, e));
	snprintf(dir, sizeof dir, "%s/.locks/%s", env->cache, strrchr(repo_dir, '/') + 1);
	MOE_TRY(moe_mkdir_p(dir, e));
	snprintf(path, sizeof path, "%s/%s.lock", dir, etag);
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (*fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot open lock: %s", path, strerror(errno));
	if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
		moe_log(MOE_LOG_INFO, "%s: another process is downloading this file; waiting", path);
		while (flock(*fd, LOCK_EX) != 0) {
			if (errno != EINTR) {
				int err = errno;
				close(*fd);
				return moe_err(e, MOE_EIO, "%s: cannot lock: %s", path, strerror(err));
			}
		}
	}
	return 0;
}

void moe_cache_unlock(int fd)
{
	if (fd >= 0) {
		flock(fd, LOCK_UN);
		close(fd);
	}
}
