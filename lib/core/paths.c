/* paths.c — XDG base directories (with a "moe" suffix), mkdir -p, and the
 * monotonic clock. */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

double moe_time_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* $VAR/moe if VAR is set to an absolute path (XDG says relative values are
 * invalid and must be ignored), else $HOME/fallback/moe. */
static int xdg_dir(char *buf, size_t n, const char *var, const char *fallback, moe_error *e)
{
	const char *base = getenv(var);
	int w;
	if (base && base[0] == '/') {
		w = snprintf(buf, n, "%s/moe", base);
	} else {
		const char *home = getenv("HOME");
		if (!home || home[0] != '/')
			return moe_err(e, MOE_EINVAL, "neither %s nor HOME is set to an absolute path", var);
		w = snprintf(buf, n, "%s/%s/moe", home, fallback);
	}
	if (w < 0 || (size_t)w >= n)
		return moe_err(e, MOE_ERANGE, "%s path too long", var);
	return 0;
}

int moe_path_cache(char *buf, size_t n, moe_error *e)
{
	return xdg_dir(buf, n, "XDG_CACHE_HOME", ".cache", e);
}

int moe_path_data(char *buf, size_t n, moe_error *e)
{
	return xdg_dir(buf, n, "XDG_DATA_HOME", ".local/share", e);
}

int moe_path_config(char *buf, size_t n, moe_error *e)
{
	return xdg_dir(buf, n, "XDG_CONFIG_HOME", ".config", e);
}

int moe_mkdir_p(const char *path, moe_error *e)
{
	size_t len = strlen(path);
	if (len == 0 || len >= 4096)
		return moe_err(e, MOE_EINVAL, "mkdir: bad path length %zu", len);
	char tmp[4096];
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1;; p++) {
		if (*p == '/' || *p == '\0') {
			char c = *p;
			*p = '\0';
			if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
				return moe_err(e, MOE_EIO, "%s: cannot create directory: %s", tmp,
					       strerror(errno));
			*p = c;
			if (c == '\0')
				break;
		}
	}
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return moe_err(e, MOE_EIO, "%s: not a directory", path);
	return 0;
}
