/* source.c — byte sources with random access: files (pread) and memory.
 * Parsers read through moe_src so the same code serves files, buffers and
 * archive members (lib/format/archive.c). */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
	moe_src src;
	int fd;
	char *name;
} file_src;

static int file_read_at(moe_src *s, uint64_t off, void *buf, size_t n, moe_error *e)
{
	file_src *f = (file_src *)s;
	if (!moe_range_ok(off, n, s->size))
		return moe_err(e, MOE_EFORMAT, "%s: read of %zu bytes at offset %llu past end of file (size %llu)",
			       s->name, n, (unsigned long long)off, (unsigned long long)s->size);
	char *p = buf;
	while (n > 0) {
		ssize_t r = pread(f->fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return moe_err(e, MOE_EIO, "%s: read failed: %s", s->name, strerror(errno));
		}
		if (r == 0)
			return moe_err(e, MOE_EFORMAT, "%s: unexpected end of file at offset %llu",
				       s->name, (unsigned long long)off);
		p += r;
		off += (uint64_t)r;
		n -= (size_t)r;
	}
	return 0;
}

static void file_close(moe_src *s)
{
	file_src *f = (file_src *)s;
	close(f->fd);
	free(f->name);
	free(f);
}

int moe_src_open_file(moe_src **out, const char *path, moe_error *e)
{
	/* Non-blocking, so that a FIFO (or a device) is refused below instead
	 * of blocking open() for ever; regular files ignore the flag. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return moe_err(e, errno == ENOENT ? MOE_ENOTFOUND : MOE_EIO, "%s: %s", path,
			       strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return moe_err(e, MOE_EIO, "%s: not a regular file", path);
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	file_src *f = calloc(1, sizeof *f);
	char *name = strdup(path);
	if (!f || !name) {
		free(f);
		free(name);
		close(fd);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	}
	f->fd = fd;
	f->name = name;
	f->src.name = name;
	f->src.size = (uint64_t)st.st_size;
	f->src.read_at = file_read_at;
	f->src.close = file_close;
	f->src.impl = f;
	*out = &f->src;
	return 0;
}

typedef struct {
	moe_src src;
	const uint8_t *data;
	char *name;
} mem_src;

static int mem_read_at(moe_src *s, uint64_t off, void *buf, size_t n, moe_error *e)
{
	mem_src *m = (mem_src *)s;
	if (!moe_range_ok(off, n, s->size))
		return moe_err(e, MOE_EFORMAT, "%s: read of %zu bytes at offset %llu past end (size %llu)",
			       s->name, n, (unsigned long long)off, (unsigned long long)s->size);
	if (n)
		memcpy(buf, m->data + off, n);
	return 0;
}

static void mem_close(moe_src *s)
{
	mem_src *m = (mem_src *)s;
	free(m->name);
	free(m);
}

int moe_src_open_mem(moe_src **out, const char *name, const void *data, uint64_t size,
		     moe_error *e)
{
	mem_src *m = calloc(1, sizeof *m);
	char *nm = strdup(name ? name : "(memory)");
	if (!m || !nm) {
		free(m);
		free(nm);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	m->data = data;
	m->name = nm;
	m->src.name = nm;
	m->src.size = size;
	m->src.read_at = mem_read_at;
	m->src.close = mem_close;
	m->src.impl = m;
	*out = &m->src;
	return 0;
}

void moe_src_close(moe_src *s)
{
	if (s && s->close)
		s->close(s);
}

int moe_read_file(const char *path, size_t max_size, char **out, size_t *len, moe_error *e)
{
	moe_src *s;
	MOE_TRY(moe_src_open_file(&s, path, e));
	if (s->size > max_size) {
		int rc = moe_err(e, MOE_EFORMAT, "%s: file too large (%llu bytes, limit %zu)", path,
				 (unsigned long long)s->size, max_size);
		moe_src_close(s);
		return rc;
	}
	char *buf = malloc((size_t)s->size + 1);
	if (!buf) {
		moe_src_close(s);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	}
	int rc = moe_src_read(s, 0, buf, (size_t)s->size, e);
	if (rc < 0) {
		free(buf);
		moe_src_close(s);
		return rc;
	}
	buf[s->size] = '\0';
	if (len)
		*len = (size_t)s->size;
	*out = buf;
	moe_src_close(s);
	return 0;
}
