/* uth_stream.c — reading a UTH file front to back, from a pipe or a file,
 * without mapping it: the header, directory, names and metadata are read
 * first and validated by the same code as moe_uth_parse (on a sparse image:
 * an anonymous mapping of the file's size of which only the prefix is ever
 * touched, so validation cannot drift from the mmap reader's), then the
 * tensors' data arrive in directory order, each checked against its xxh3
 * when its last byte has been read.  Memory: the prefix plus the caller's
 * buffers.
 */
#include "format/uth_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

/* A directory larger than this is not a model (4 M tensors of metadata). */
#define PREFIX_MAX ((uint64_t)1 << 30)

struct moe_uth_stream {
	moe_uth *u;
	int fd;
	bool own_fd;
	char *name;
	uint8_t *image;      /* sparse image: the prefix is filled in */
	size_t image_size;
	uint64_t pos;        /* bytes consumed from the input */
	size_t cur;          /* tensor being read (or next to start) */
	bool started;        /* cur has been started */
	uint64_t cur_done;   /* bytes of it read */
	XXH3_state_t *hash;
};

static int read_full(moe_uth_stream *s, void *buf, size_t n, uint64_t *got, moe_error *e)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = read(s->fd, (uint8_t *)buf + done, n - done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return moe_err(e, MOE_EIO, "%s: read error: %s", s->name, strerror(errno));
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	s->pos += done;
	*got = done;
	return 0;
}

static int truncated(moe_uth_stream *s, const char *what, moe_error *e)
{
	return moe_err(e, MOE_EFORMAT, "%s: truncated: the input ended at byte %llu, inside %s "
		       "(the header says the file has %llu bytes)", s->name,
		       (unsigned long long)s->pos, what, (unsigned long long)s->u->file_size);
}

/* Read and drop n bytes (padding between tensors). */
static int skip(moe_uth_stream *s, uint64_t n, const char *what, moe_error *e)
{
	uint8_t buf[65536];
	while (n > 0) {
		size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		uint64_t got;
		MOE_TRY(read_full(s, buf, k, &got, e));
		if (got < k)
			return truncated(s, what, e);
		n -= k;
	}
	return 0;
}

int moe_uth_stream_open(moe_uth_stream **out, const char *path, moe_error *e)
{
	moe_uth_stream *s = calloc(1, sizeof(*s));
	uint8_t hdr[MOE_UTH_HEADER_SIZE];
	uint64_t got;
	int rc;

	*out = NULL;
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s->image = MAP_FAILED;
	bool std = strcmp(path, "-") == 0;
	s->name = strdup(std ? "(stdin)" : path);
	s->hash = XXH3_createState();
	if (!s->name || !s->hash) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto fail;
	}
	if (std) {
		s->fd = 0;
	} else {
		s->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (s->fd < 0) {
			rc = moe_err(e, MOE_EIO, "%s: cannot open: %s", path, strerror(errno));
			goto fail;
		}
		s->own_fd = true;
		posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	rc = read_full(s, hdr, sizeof(hdr), &got, e);
	if (rc < 0)
		goto fail;
	if (got < sizeof(hdr)) {
		rc = moe_err(e, MOE_EFORMAT, "%s: input is %llu bytes, shorter than the %u-byte "
			     "UTH header", s->name, (unsigned long long)got, MOE_UTH_HEADER_SIZE);
		goto fail;
	}
	if (memcmp(hdr, MOE_UTH_MAGIC, 8) != 0) {
		rc = moe_err(e, MOE_EFORMAT, "%s: bad magic (not a UTH v1 file)", s->name);
		goto fail;
	}
	/* Only the two sizes that bound the reads are taken before validation;
	 * moe_uth_parse checks them with everything else. */
	uint64_t file_size = moe_uth_le64(hdr + MOE_UTH_H_FILE_SIZE);
	uint64_t data_offset = moe_uth_le64(hdr + MOE_UTH_H_DATA_OFFSET);
	if (data_offset < MOE_UTH_HEADER_SIZE || data_offset > file_size ||
	    data_offset > PREFIX_MAX || file_size > SIZE_MAX / 2) {
		rc = moe_err(e, MOE_EFORMAT, "%s: header: data_offset %llu / file_size %llu are "
			     "not plausible", s->name, (unsigned long long)data_offset,
			     (unsigned long long)file_size);
		goto fail;
	}
	s->image_size = (size_t)file_size;
	s->image = mmap(NULL, s->image_size, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s->image == MAP_FAILED) {
		rc = moe_err(e, MOE_ENOMEM, "%s: cannot reserve %llu bytes of address space: %s",
			     s->name, (unsigned long long)file_size, strerror(errno));
		goto fail;
	}
	memcpy(s->image, hdr, sizeof(hdr));
	rc = read_full(s, s->image + sizeof(hdr), (size_t)data_offset - sizeof(hdr), &got, e);
	if (rc < 0)
		goto fail;
	if (got < data_offset - sizeof(hdr)) {
		rc = moe_err(e, MOE_EFORMAT, "%s: truncated: the input ended at byte %llu, inside "
			     "the directory/metadata (data starts at %llu)", s->name,
			     (unsigned long long)s->pos, (unsigned long long)data_offset);
		goto fail;
	}
	rc = moe_uth_parse(s->name, s->image, file_size, &s->u, e);
	if (rc < 0)
		goto fail;
	s->cur = 0;
	*out = s;
	return 0;
fail:
	moe_uth_stream_close(s);
	return rc;
}

const moe_uth *moe_uth_stream_info(const moe_uth_stream *s)
{
	return s->u;
}

int moe_uth_stream_read(moe_uth_stream *s, size_t i, void *buf, size_t n, moe_error *e)
{
	const moe_uth *u = s->u;
	if (i >= u->n_tensors)
		return moe_err(e, MOE_EINVAL, "%s: no tensor %zu", s->name, i);
	const moe_uth_tensor *t = &u->tensors[i];
	if (!s->started || s->cur != i) {
		/* start tensor i: the next one in directory (= data) order */
		size_t next = s->started ? s->cur + 1 : 0;
		if (s->started && s->cur_done < u->tensors[s->cur].size)
			return moe_err(e, MOE_EINVAL, "%s: tensor '%s' was not read to its end",
				       s->name, u->tensors[s->cur].name);
		if (i != next)
			return moe_err(e, MOE_EINVAL, "%s: tensor '%s' read out of order (tensor %zu "
				       "is next; a stream is read front to back)", s->name, t->name,
				       next);
		MOE_TRY(skip(s, t->offset - s->pos, t->name, e));
		s->cur = i;
		s->started = true;
		s->cur_done = 0;
		XXH3_64bits_reset(s->hash);
	}
	if (n > t->size - s->cur_done)
		return moe_err(e, MOE_EINVAL, "%s: tensor '%s': read past its end", s->name,
			       t->name);
	uint64_t got;
	MOE_TRY(read_full(s, buf, n, &got, e));
	if (got < n) {
		char what[300];
		snprintf(what, sizeof(what), "tensor '%s'", t->name);
		return truncated(s, what, e);
	}
	XXH3_64bits_update(s->hash, buf, n);
	s->cur_done += n;
	if (s->cur_done == t->size) {
		uint64_t x = XXH3_64bits_digest(s->hash);
		if (x != t->xxh3)
			return moe_err(e, MOE_ECHECKSUM, "%s: tensor '%s': data checksum mismatch "
				       "(stored %016llx, computed %016llx)", s->name, t->name,
				       (unsigned long long)t->xxh3, (unsigned long long)x);
	}
	return 0;
}

int moe_uth_stream_finish(moe_uth_stream *s, moe_error *e)
{
	const moe_uth *u = s->u;
	for (size_t i = s->started ? s->cur : 0; i < u->n_tensors; i++) {
		if (s->started && i == s->cur && s->cur_done == u->tensors[i].size)
			continue;
		/* unread tensors: read and check them so a corrupt tail is
		 * still reported */
		uint8_t buf[65536];
		uint64_t left = u->tensors[i].size;
		if (s->started && i == s->cur)
			left -= s->cur_done;
		while (left > 0) {
			size_t k = left < sizeof(buf) ? (size_t)left : sizeof(buf);
			MOE_TRY(moe_uth_stream_read(s, i, buf, k, e));
			left -= k;
		}
	}
	MOE_TRY(skip(s, u->file_size - s->pos, "the padding at the end", e));
	uint8_t extra;
	uint64_t got;
	MOE_TRY(read_full(s, &extra, 1, &got, e));
	if (got)
		return moe_err(e, MOE_EFORMAT, "%s: trailing data after the %llu bytes the header "
			       "declares", s->name, (unsigned long long)u->file_size);
	return 0;
}

void moe_uth_stream_close(moe_uth_stream *s)
{
	if (!s)
		return;
	moe_uth_close(s->u);
	if (s->image != MAP_FAILED && s->image)
		munmap(s->image, s->image_size);
	if (s->own_fd)
		close(s->fd);
	if (s->hash)
		XXH3_freeState(s->hash);
	free(s->name);
	free(s);
}
