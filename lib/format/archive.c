/* archive.c — archive input through libarchive: one scan that lists the
 * entries (and lets the caller cache small ones), then byte sources over
 * members that share one forward-only decompressing reader.
 *
 * Why one shared reader: a compressed tar cannot seek, so reaching member k
 * means decompressing everything before it.  With a reader per member,
 * reading n shards in order would decompress O(n^2) bytes; with one shared
 * reader that only ever moves forward (and reopens when asked to go back)
 * reading in archive order costs a single pass.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "hf.h"

#define AR_BLOCK ((size_t)1 << 16)
/* Bounds the entry list on hostile archives (tens of bytes per entry). */
#define AR_MAX_ENTRIES ((uint64_t)1 << 24)

struct moe_archive {
	char *path;
	moe_arena arena; /* entry paths */
	moe_archive_entry *ent;
	uint64_t n_ent, cap_ent;
	int refs; /* the opener's reference + one per source */
	pthread_mutex_t lock;

	/* The shared reader: rd is positioned in the data of entry next - 1
	 * (if next > 0) at byte pos. */
	struct archive *rd;
	uint64_t next, pos;
	uint64_t reopens;
	unsigned char *scratch; /* AR_BLOCK bytes for skipping */

	/* During the scan only. */
	struct archive *scan;
	moe_archive_entry *scan_ent;
	uint64_t scan_pos; /* bytes of scan_ent read so far */
};

typedef struct ar_member {
	moe_src src;
	moe_archive *ar;
	uint64_t index;
	char *path; /* normalised entry path */
	char *name; /* "archive:path" */
} ar_member;

static int ar_lib_err(moe_archive *ar, struct archive *a, const char *what, moe_error *e)
{
	const char *msg = archive_error_string(a);
	int err = archive_errno(a);
	int code = MOE_EFORMAT;

	if (err == ENOENT)
		code = MOE_ENOTFOUND;
	else if (err == ENOMEM)
		code = MOE_ENOMEM;
	else if (err == EIO || err == EACCES || err == EISDIR || err == EPERM)
		code = MOE_EIO;
	return moe_err(e, code, "%s: %s%s", ar->path, what, msg ? msg : "unknown libarchive error");
}

static int ar_new_reader(moe_archive *ar, struct archive **out, moe_error *e)
{
	struct archive *a = archive_read_new();
	int rc;

	*out = NULL;
	if (!a)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", ar->path);
	/* tar (ustar, pax, gnu) and zip, with any compression filter. */
	if (archive_read_support_filter_all(a) < ARCHIVE_WARN ||
	    archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_support_format_zip(a) != ARCHIVE_OK) {
		rc = ar_lib_err(ar, a, "", e);
		archive_read_free(a);
		return rc;
	}
	/* libarchive opens the path itself, blocking: refuse a FIFO or a device
	 * first (probed without blocking). */
	int fd = open(ar->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd >= 0) {
		bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
		close(fd);
		if (!regular) {
			archive_read_free(a);
			return moe_err(e, MOE_EFORMAT, "%s: not a regular file", ar->path);
		}
	}
	if (archive_read_open_filename(a, ar->path, AR_BLOCK) != ARCHIVE_OK) {
		rc = ar_lib_err(ar, a, "not a readable tar or zip archive: ", e);
		archive_read_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

/* The entry's name, or NULL if libarchive cannot give one. */
static const char *ar_raw_name(struct archive_entry *ae)
{
	const char *p = archive_entry_pathname(ae);

	return p ? p : archive_entry_pathname_utf8(ae);
}

/* Normalise `raw` into out (room for strlen(raw) + 1 bytes): drop empty and
 * "." parts.  Absolute paths and ".." parts are errors: this reader never
 * writes to disk, but such an entry only appears in a crafted archive. */
static int ar_norm(const moe_archive *ar, const char *raw, char *out, moe_error *e)
{
	const char *s = raw;
	size_t o = 0;

	if (raw[0] == '/')
		return moe_err(e, MOE_EFORMAT, "%s: entry '%.200s': path escapes the archive",
			       ar->path, raw);
	while (*s) {
		const char *c = s;
		size_t cl = strcspn(s, "/");

		s += cl;
		if (*s == '/')
			s++;
		if (cl == 0 || (cl == 1 && c[0] == '.'))
			continue;
		if (cl == 2 && c[0] == '.' && c[1] == '.')
			return moe_err(e, MOE_EFORMAT,
				       "%s: entry '%.200s': path escapes the archive", ar->path, raw);
		if (o)
			out[o++] = '/';
		memcpy(out + o, c, cl);
		o += cl;
	}
	out[o] = '\0';
	return 0;
}

static int ar_type(struct archive_entry *ae)
{
	if (archive_entry_hardlink(ae))
		return MOE_AR_HARDLINK;
	switch (archive_entry_filetype(ae)) {
	case AE_IFREG:
		return MOE_AR_FILE;
	case AE_IFDIR:
		return MOE_AR_DIR;
	case AE_IFLNK:
		return MOE_AR_SYMLINK;
	default:
		return MOE_AR_OTHER;
	}
}

static int ar_add(moe_archive *ar, struct archive_entry *ae, uint64_t index, bool *size_known,
		  moe_error *e)
{
	const char *raw = ar_raw_name(ae);
	moe_archive_entry *ent;
	char *p;

	*size_known = false;
	if (!raw)
		return moe_err(e, MOE_EFORMAT, "%s: entry #%llu has no usable name", ar->path,
			       (unsigned long long)index);
	if (ar->n_ent == ar->cap_ent) {
		uint64_t cap = ar->cap_ent ? 2 * ar->cap_ent : 64;
		moe_archive_entry *n;

		if (ar->n_ent >= AR_MAX_ENTRIES)
			return moe_err(e, MOE_EUNSUPPORTED, "%s: more than %llu entries", ar->path,
				       (unsigned long long)AR_MAX_ENTRIES);
		n = realloc(ar->ent, cap * sizeof(*n));
		if (!n)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", ar->path);
		ar->ent = n;
		ar->cap_ent = cap;
	}
	p = moe_arena_alloc(&ar->arena, strlen(raw) + 1, 1);
	if (!p)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", ar->path);
	MOE_TRY(ar_norm(ar, raw, p, e));
	ent = &ar->ent[ar->n_ent++];
	memset(ent, 0, sizeof(*ent));
	ent->path = p;
	ent->index = index;
	ent->type = ar_type(ae);
	*size_known = archive_entry_size_is_set(ae) && archive_entry_size(ae) >= 0;
	ent->size = *size_known ? (uint64_t)archive_entry_size(ae) : 0;
	return 0;
}

int moe_archive_scan_read(moe_archive *ar, void *buf, size_t n, size_t *got, moe_error *e)
{
	size_t total = 0;

	*got = 0;
	if (!ar->scan || !ar->scan_ent)
		return moe_err(e, MOE_EINTERNAL, "%s: moe_archive_scan_read outside a scan",
			       ar->path);
	while (total < n) {
		la_ssize_t r = archive_read_data(ar->scan, (char *)buf + total, n - total);

		if (r < 0)
			return moe_err(e, MOE_EFORMAT, "%s: entry '%.200s': %s", ar->path,
				       ar->scan_ent->path, archive_error_string(ar->scan));
		if (r == 0)
			break;
		total += (size_t)r;
	}
	*got = total;
	ar->scan_pos += total;
	return 0;
}

/* Read the rest of the current entry to learn its size (zip entries
 * written to a stream may not record it in the header). */
static int ar_read_rest(moe_archive *ar, moe_error *e)
{
	size_t got;

	do {
		MOE_TRY(moe_archive_scan_read(ar, ar->scratch, AR_BLOCK, &got, e));
	} while (got == AR_BLOCK);
	return 0;
}

static void ar_free(moe_archive *ar)
{
	for (uint64_t i = 0; i < ar->n_ent; i++)
		free(ar->ent[i].data);
	free(ar->ent);
	if (ar->rd)
		archive_read_free(ar->rd);
	if (ar->scan)
		archive_read_free(ar->scan);
	moe_arena_free(&ar->arena);
	pthread_mutex_destroy(&ar->lock);
	free(ar->scratch);
	free(ar->path);
	free(ar);
}

static void ar_unref(moe_archive *ar)
{
	int left;

	pthread_mutex_lock(&ar->lock);
	left = --ar->refs;
	pthread_mutex_unlock(&ar->lock);
	if (left == 0)
		ar_free(ar);
}

static int ar_scan(moe_archive *ar, moe_archive_scan_fn fn, void *user, moe_error *e)
{
	MOE_TRY(ar_new_reader(ar, &ar->scan, e));
	for (uint64_t idx = 0;; idx++) {
		struct archive_entry *ae;
		moe_archive_entry *ent;
		bool size_known;
		int r = archive_read_next_header(ar->scan, &ae);

		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return ar_lib_err(ar, ar->scan, "", e);
		MOE_TRY(ar_add(ar, ae, idx, &size_known, e));
		ent = &ar->ent[ar->n_ent - 1];
		if (ent->type != MOE_AR_FILE)
			continue;
		ar->scan_ent = ent;
		ar->scan_pos = 0;
		if (fn) {
			int rc = fn(user, ar, ent, e);

			if (rc < 0)
				return rc;
		}
		if (!size_known) {
			MOE_TRY(ar_read_rest(ar, e));
			ent->size = ar->scan_pos;
		}
		ar->scan_ent = NULL;
	}
	archive_read_free(ar->scan);
	ar->scan = NULL;
	return 0;
}

int moe_archive_open(moe_archive **out, const char *path, moe_archive_scan_fn fn, void *user,
		     moe_error *e)
{
	moe_archive *ar = calloc(1, sizeof(*ar));
	int rc;

	*out = NULL;
	if (!ar)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	if (pthread_mutex_init(&ar->lock, NULL) != 0) {
		free(ar);
		return moe_err(e, MOE_ENOMEM, "%s: cannot create a mutex", path);
	}
	moe_arena_init(&ar->arena, 1 << 16);
	ar->refs = 1;
	ar->path = strdup(path);
	ar->scratch = malloc(AR_BLOCK);
	if (!ar->path || !ar->scratch) {
		ar_free(ar);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	}
	rc = ar_scan(ar, fn, user, e);
	if (rc < 0) {
		ar_free(ar);
		return rc;
	}
	*out = ar;
	return 0;
}

const char *moe_archive_path(const moe_archive *ar)
{
	return ar->path;
}

uint64_t moe_archive_count(const moe_archive *ar)
{
	return ar->n_ent;
}

moe_archive_entry *moe_archive_entry_at(moe_archive *ar, uint64_t i)
{
	return i < ar->n_ent ? &ar->ent[i] : NULL;
}

uint64_t moe_archive_reopens(const moe_archive *ar)
{
	return ar->reopens;
}

void moe_archive_close(moe_archive *ar)
{
	if (ar)
		ar_unref(ar);
}

/* ------------------------------------------------------ member sources */

static void ar_drop_reader(moe_archive *ar)
{
	if (ar->rd)
		archive_read_free(ar->rd);
	ar->rd = NULL;
	ar->next = 0;
	ar->pos = 0;
}

/* The header at m->index must be the entry the scan saw there. */
static int ar_verify(moe_archive *ar, ar_member *m, struct archive_entry *ae, moe_error *e)
{
	const char *raw = ar_raw_name(ae);
	char *p;
	int rc = 0;

	if (!raw || ar_type(ae) != MOE_AR_FILE)
		return moe_err(e, MOE_EFORMAT, "%s: archive changed since it was opened",
			       m->name);
	p = malloc(strlen(raw) + 1);
	if (!p)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", m->name);
	if (ar_norm(ar, raw, p, e) < 0 || strcmp(p, m->path) != 0 ||
	    (archive_entry_size_is_set(ae) && (uint64_t)archive_entry_size(ae) != m->src.size))
		rc = moe_err(e, MOE_EFORMAT, "%s: archive changed since it was opened", m->name);
	free(p);
	return rc;
}

/* Position the shared reader at byte off of member m: forward if it is at
 * or before that point, else reopen the archive. */
static int ar_seek(moe_archive *ar, ar_member *m, uint64_t off, moe_error *e)
{
	bool usable = ar->rd && (ar->next <= m->index ||
				 (ar->next == m->index + 1 && ar->pos <= off));

	if (!usable) {
		ar_drop_reader(ar);
		MOE_TRY(ar_new_reader(ar, &ar->rd, e));
		ar->reopens++;
	}
	while (ar->next <= m->index) {
		struct archive_entry *ae;
		int r = archive_read_next_header(ar->rd, &ae);

		if (r == ARCHIVE_EOF)
			return moe_err(e, MOE_EFORMAT, "%s: archive changed since it was opened",
				       m->name);
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return ar_lib_err(ar, ar->rd, "", e);
		if (ar->next == m->index)
			MOE_TRY(ar_verify(ar, m, ae, e));
		ar->next++;
		ar->pos = 0;
	}
	while (ar->pos < off) {
		uint64_t want = off - ar->pos;
		la_ssize_t r = archive_read_data(ar->rd, ar->scratch,
						 want < AR_BLOCK ? (size_t)want : AR_BLOCK);

		if (r < 0)
			return moe_err(e, MOE_EFORMAT, "%s: %s", m->name,
				       archive_error_string(ar->rd));
		if (r == 0)
			return moe_err(e, MOE_EFORMAT, "%s: unexpected end of data at offset %llu",
				       m->name, (unsigned long long)ar->pos);
		ar->pos += (uint64_t)r;
	}
	return 0;
}

static int ar_read_at(moe_src *s, uint64_t off, void *buf, size_t n, moe_error *e)
{
	ar_member *m = s->impl;
	moe_archive *ar = m->ar;
	size_t total = 0;
	int rc;

	if (!moe_range_ok(off, n, s->size))
		return moe_err(e, MOE_ERANGE,
			       "%s: read of %zu bytes at offset %llu past end (size %llu)", s->name, n,
			       (unsigned long long)off, (unsigned long long)s->size);
	if (n == 0)
		return 0;
	pthread_mutex_lock(&ar->lock);
	rc = ar_seek(ar, m, off, e);
	while (rc == 0 && total < n) {
		la_ssize_t r = archive_read_data(ar->rd, (char *)buf + total, n - total);

		if (r < 0)
			rc = moe_err(e, MOE_EFORMAT, "%s: %s", s->name,
				     archive_error_string(ar->rd));
		else if (r == 0)
			rc = moe_err(e, MOE_EFORMAT, "%s: unexpected end of data at offset %llu",
				     s->name, (unsigned long long)ar->pos);
		else {
			total += (size_t)r;
			ar->pos += (uint64_t)r;
		}
	}
	/* After an error the reader's state is unknown: start afresh next time. */
	if (rc < 0)
		ar_drop_reader(ar);
	pthread_mutex_unlock(&ar->lock);
	return rc;
}

static void ar_src_close(moe_src *s)
{
	ar_member *m = s->impl;
	moe_archive *ar = m->ar;

	free(m->path);
	free(m->name);
	free(m);
	ar_unref(ar);
}

int moe_archive_src(moe_archive *ar, const moe_archive_entry *ent, moe_src **out, moe_error *e)
{
	ar_member *m;
	size_t n;

	*out = NULL;
	if (ent->type != MOE_AR_FILE)
		return moe_err(e, MOE_EINVAL, "%s: entry '%s' is not a regular file", ar->path,
			       ent->path);
	m = calloc(1, sizeof(*m));
	n = strlen(ar->path) + strlen(ent->path) + 2;
	if (m) {
		m->path = strdup(ent->path);
		m->name = malloc(n);
	}
	if (!m || !m->path || !m->name) {
		if (m) {
			free(m->path);
			free(m->name);
		}
		free(m);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", ar->path);
	}
	snprintf(m->name, n, "%s:%s", ar->path, ent->path);
	m->ar = ar;
	m->index = ent->index;
	m->src.name = m->name;
	m->src.size = ent->size;
	m->src.read_at = ar_read_at;
	m->src.close = ar_src_close;
	m->src.impl = m;
	pthread_mutex_lock(&ar->lock);
	ar->refs++;
	pthread_mutex_unlock(&ar->lock);
	*out = &m->src;
	return 0;
}
