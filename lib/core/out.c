/* out.c — output files that appear whole or not at all.
 *
 * Data goes to a temporary file in the target's directory (so rename is
 * atomic), which commit fsyncs and renames into place.  A failure, a signal
 * or a forgotten commit leaves no half-written output behind.  "-" writes to
 * stdout directly; when stdout is a regular file it is still seekable, so
 * writers that patch headers afterwards produce the same bytes either way. */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Temporary files to remove if a signal ends the program. Fixed-size so the
 * handler touches no allocator. */
#define MAX_PENDING 16
static char *volatile pending[MAX_PENDING];

static void pending_add(char *tmp)
{
	for (int i = 0; i < MAX_PENDING; i++)
		if (!pending[i]) {
			pending[i] = tmp;
			return;
		}
}

static void pending_del(const char *tmp)
{
	for (int i = 0; i < MAX_PENDING; i++)
		if (pending[i] == tmp)
			pending[i] = NULL;
}

static void on_signal(int sig)
{
	for (int i = 0; i < MAX_PENDING; i++)
		if (pending[i])
			unlink(pending[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

void moe_out_install_signal_cleanup(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
}

int moe_out_open(moe_out *o, const char *path, moe_error *e)
{
	memset(o, 0, sizeof *o);
	o->fd = -1;
	if (strcmp(path, "-") == 0) {
		struct stat st;
		int fl = fcntl(STDOUT_FILENO, F_GETFL);
		o->fd = STDOUT_FILENO;
		o->is_stdout = true;
		o->path = strdup("(stdout)");
		if (!o->path)
			return moe_err(e, MOE_ENOMEM, "out of memory");
		/* A regular file (not appending) can be patched in place; remember
		 * where we start so offsets stay relative to our first byte. */
		off_t here = lseek(STDOUT_FILENO, 0, SEEK_CUR);
		o->seekable = fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode) && here == 0 &&
			      fl >= 0 && !(fl & O_APPEND);
		return 0;
	}
	/* The result replaces the target by rename: only ever a regular file
	 * (a device node or FIFO would be replaced, not written to). */
	struct stat tst;
	if (stat(path, &tst) == 0 && !S_ISREG(tst.st_mode))
		return moe_err(e, MOE_EINVAL, "%s: exists and is not a regular file (not replaced)",
			       path);
	o->path = strdup(path);
	char *dircopy = strdup(path), *basecopy = strdup(path);
	if (!o->path || !dircopy || !basecopy) {
		free(dircopy);
		free(basecopy);
		free(o->path);
		o->path = NULL;
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	size_t n = strlen(path) + 32;
	o->tmp = malloc(n);
	if (o->tmp)
		snprintf(o->tmp, n, "%s/.%s.tmp.XXXXXX", dirname(dircopy), basename(basecopy));
	free(dircopy);
	free(basecopy);
	if (!o->tmp) {
		free(o->path);
		o->path = NULL;
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd < 0) {
		int rc = moe_err(e, MOE_EIO, "%s: cannot create output file: %s", path, strerror(errno));
		free(o->tmp);
		free(o->path);
		o->tmp = o->path = NULL;
		return rc;
	}
	pending_add(o->tmp);
	/* mkostemp makes 0600; give the result the usual 0666 & ~umask. */
	mode_t um = umask(0);
	umask(um);
	fchmod(o->fd, 0666 & ~um);
	o->seekable = true;
	return 0;
}

/* All n bytes at *at (pwrite) or at the file position (write), retrying
 * short writes and EINTR; *at advances by what was written. */
static int write_all(moe_out *o, const void *buf, size_t n, bool positioned, uint64_t *at,
		     moe_error *e)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = positioned ? pwrite(o->fd, p, n, (off_t)*at) : write(o->fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return moe_err(e, MOE_EIO, "%s: write failed: %s", o->path, strerror(errno));
		}
		p += w;
		n -= (size_t)w;
		*at += (uint64_t)w;
	}
	return 0;
}

int moe_out_write(moe_out *o, const void *buf, size_t n, moe_error *e)
{
	return write_all(o, buf, n, false, &o->pos, e);
}

int moe_out_pad(moe_out *o, uint64_t align, moe_error *e)
{
	static const char zeros[4096];
	uint64_t target;
	if (!moe_align_u64(o->pos, align, &target))
		return moe_err(e, MOE_ERANGE, "%s: offset overflow while padding", o->path);
	while (o->pos < target) {
		uint64_t k = target - o->pos;
		MOE_TRY(moe_out_write(o, zeros, k > sizeof zeros ? sizeof zeros : (size_t)k, e));
	}
	return 0;
}

int moe_out_pwrite(moe_out *o, uint64_t off, const void *buf, size_t n, moe_error *e)
{
	if (!o->seekable)
		return moe_err(e, MOE_EINTERNAL, "%s: output is not seekable", o->path);
	return write_all(o, buf, n, true, &off, e);
}

int moe_out_commit(moe_out *o, moe_error *e)
{
	int rc = 0;
	if (o->is_stdout) {
		/* fsync fails with EINVAL on pipes and terminals; that is fine. */
		if (fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS)
			rc = moe_err(e, MOE_EIO, "(stdout): fsync failed: %s", strerror(errno));
		free(o->path);
		o->path = NULL;
		o->fd = -1;
		return rc;
	}
	if (o->fd < 0)
		return moe_err(e, MOE_EINTERNAL, "output already closed");
	if (fsync(o->fd) != 0)
		rc = moe_err(e, MOE_EIO, "%s: fsync failed: %s", o->path, strerror(errno));
	if (close(o->fd) != 0 && rc == 0)
		rc = moe_err(e, MOE_EIO, "%s: close failed: %s", o->path, strerror(errno));
	o->fd = -1;
	if (rc == 0 && rename(o->tmp, o->path) != 0)
		rc = moe_err(e, MOE_EIO, "%s: cannot rename into place: %s", o->path, strerror(errno));
	if (rc != 0)
		unlink(o->tmp);
	pending_del(o->tmp);
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
	return rc;
}

void moe_out_abort(moe_out *o)
{
	if (!o->is_stdout && o->fd >= 0) {
		close(o->fd);
		unlink(o->tmp);
	}
	if (o->tmp)
		pending_del(o->tmp);
	o->fd = -1;
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
}

static int stat_path_or_std(const char *path, int std_fd, struct stat *st)
{
	return strcmp(path, "-") ? stat(path, st) : fstat(std_fd, st);
}

int moe_out_check_not_input(const char *output, const char *input, moe_error *e)
{
	struct stat so, si;
	if (stat_path_or_std(output, STDOUT_FILENO, &so) != 0 ||
	    stat_path_or_std(input, STDIN_FILENO, &si) != 0)
		return 0;
	/* pipes and terminals on both sides are no file to destroy */
	if (!S_ISREG(so.st_mode) || si.st_dev != so.st_dev || si.st_ino != so.st_ino)
		return 0;
	return moe_err(e, MOE_EINVAL, "%s: the output is the input file", output);
}
