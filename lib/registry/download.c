/* download.c — one file, resumable, verified, optionally over several
 * connections.
 *
 * One connection appends to DEST.incomplete, which always holds a prefix of
 * the file with no holes, so an interrupted download (even by kill -9)
 * resumes from its size with a Range request — and huggingface_hub, which
 * resumes its own .incomplete files the same way, can continue ours; the
 * digest is computed while the bytes arrive.  Several connections (large
 * files) write ranges in place into DEST.moe-parts and list finished chunks
 * in DEST.moe-parts.done (see below).  Only a file whose size and digest
 * match is renamed to DEST: a mismatch deletes it.
 *
 * A server that answers a Range request with 200 (the whole file) makes us
 * start over from byte 0, once, on one connection; one that sends more
 * bytes than it announced is refused. */
#include "registry_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK MOE_DL_CHUNK
/* Files smaller than this go over one connection. */
#define PARALLEL_MIN (4 * CHUNK)

typedef struct dl_state {
	moe_dl *d;
	int fd;
	char incomplete[4200];
	uint64_t have; /* bytes in the .incomplete file */
	moe_digest *sha256, *sha1;
	double t0, last_emit;
	uint64_t start_have; /* have when this run started (for the rate) */
	/* sequential transfer */
	bool seq_checked;
	moe_error sink_err;
	int sink_code;
} dl_state;

static void emit(dl_state *s, int kind, const char *msg, uint64_t file_done)
{
	moe_dl *d = s->d;
	if (!d->progress)
		return;
	moe_pull_event ev = {
		.kind = kind,
		.msg = msg,
		.file = d->display,
		.file_index = d->file_index,
		.n_files = d->n_files,
		.file_done = file_done,
		.file_total = d->size,
		.all_done = d->all_base + file_done,
		.all_total = d->all_total,
		.elapsed = moe_time_now() - s->t0,
	};
	d->progress(d->user, &ev);
}

static void emit_bytes(dl_state *s, uint64_t done, bool force)
{
	double now = moe_time_now();
	if (!force && now - s->last_emit < 0.2)
		return;
	s->last_emit = now;
	emit(s, MOE_PULL_EV_BYTES, NULL, done);
}

/* Fresh digests (the git blob hash starts with "blob SIZE\0"). */
static int init_digests(dl_state *s, moe_error *e)
{
	moe_digest_free(s->sha256);
	moe_digest_free(s->sha1);
	s->sha256 = s->sha1 = NULL;
	MOE_TRY(moe_digest_new(&s->sha256, MOE_DIGEST_SHA256, e));
	if (s->d->sha1_blob && s->d->size != UINT64_MAX) {
		MOE_TRY(moe_digest_new(&s->sha1, MOE_DIGEST_SHA1, e));
		char hdr[64];
		int k = snprintf(hdr, sizeof hdr, "blob %llu", (unsigned long long)s->d->size);
		moe_digest_update(s->sha1, hdr, (size_t)k + 1); /* with the NUL */
	}
	return 0;
}

static int restart_from_zero(dl_state *s, moe_error *e)
{
	if (ftruncate(s->fd, 0) != 0)
		return moe_err(e, MOE_EIO, "%s: cannot truncate: %s", s->incomplete, strerror(errno));
	s->have = 0;
	return init_digests(s, e);
}

/* Append n bytes at s->have. */
static int append(dl_state *s, const void *p, size_t n, moe_error *e)
{
	const char *c = p;
	size_t left = n;
	uint64_t off = s->have;
	while (left) {
		ssize_t w = pwrite(s->fd, c, left, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return moe_err(e, MOE_EIO, "%s: write failed: %s", s->incomplete, strerror(errno));
		c += w;
		left -= (size_t)w;
		off += (uint64_t)w;
	}
	moe_digest_update(s->sha256, p, n);
	if (s->sha1)
		moe_digest_update(s->sha1, p, n);
	s->have += n;
	return 0;
}

/* ------------------------------------------------------- one connection */

static size_t seq_sink(void *user, const moe_http_resp *r, const void *p, size_t n)
{
	dl_state *s = user;
	moe_dl *d = s->d;
	if (!s->seq_checked) {
		s->seq_checked = true;
		if (r->status == 200 && s->have > 0) {
			moe_log(MOE_LOG_INFO, "%s: the server ignored the range; starting over",
				d->display);
			if (restart_from_zero(s, &s->sink_err) < 0)
				goto fail;
		} else if (r->status == 206 && (!r->has_content_range || r->range_start != s->have)) {
			s->sink_code = moe_err(&s->sink_err, MOE_EFORMAT,
					       "%s: the server sent a different range than asked "
					       "(from %llu, asked %llu)",
					       d->display, (unsigned long long)r->range_start,
					       (unsigned long long)s->have);
			return 0;
		}
		if (d->size != UINT64_MAX && r->has_length &&
		    (r->status == 200 ? r->content_length != d->size
				      : r->content_length > d->size - s->have)) {
			s->sink_code = moe_err(&s->sink_err, MOE_EFORMAT,
					       "%s: the server announces %llu bytes, the file has %llu",
					       d->display, (unsigned long long)r->content_length,
					       (unsigned long long)(d->size - (r->status == 200 ? 0 : s->have)));
			return 0;
		}
	}
	if (d->size != UINT64_MAX && n > d->size - s->have) {
		s->sink_code = moe_err(&s->sink_err, MOE_EFORMAT,
				       "%s: the server sent more than the %llu bytes of the file",
				       d->display, (unsigned long long)d->size);
		return 0;
	}
	if (append(s, p, n, &s->sink_err) < 0)
		goto fail;
	emit_bytes(s, s->have, false);
	return n;
fail:
	s->sink_code = s->sink_err.code;
	return 0;
}

static int seq_retry(void *user, moe_http_req *q, moe_error *e)
{
	dl_state *s = user;
	s->seq_checked = false;
	q->range = s->have > 0;
	q->range_from = s->have;
	return 0;
}

static int download_seq(dl_state *s, CURL *h, moe_error *e)
{
	moe_dl *d = s->d;
	int stalls = 0;
	int max_stalls = d->cfg->retries < 0 ? 5 : d->cfg->retries;
	while (d->size == UINT64_MAX || s->have < d->size) {
		uint64_t before = s->have;
		moe_http_req q = {.method = MOE_HTTP_GET, .url = d->url, .follow = true,
				  .sink = seq_sink, .user = s};
		seq_retry(s, &q, e);
		moe_http_resp *r = calloc(1, sizeof *r);
		if (!r)
			return moe_err(e, MOE_ENOMEM, "out of memory");
		s->sink_code = 0;
		int rc = moe_http_request(h, d->cfg, &q, r, seq_retry, s, e);
		long status = r->status;
		char st[512];
		moe_http_status_text(r, st, sizeof st);
		bool cl = r->has_length;
		free(r);
		if (s->sink_code) {
			*e = s->sink_err;
			return s->sink_code;
		}
		if (rc < 0)
			return rc;
		if (status == 416 && s->have > 0 && d->size == UINT64_MAX) {
			/* size unknown and nothing more to send: we have it all */
			break;
		}
		if (status < 200 || status >= 300)
			return moe_err(e, status == 404 ? MOE_ENOTFOUND : MOE_ENET, "%s: %s", d->url, st);
		if (d->size == UINT64_MAX) {
			if (cl || s->have > before)
				break;
		}
		if (s->have == before) {
			if (++stalls > max_stalls)
				return moe_err(e, MOE_ENET, "%s: the server keeps ending the transfer at %llu "
							    "of %llu bytes",
					       d->display, (unsigned long long)s->have,
					       (unsigned long long)d->size);
			moe_http_sleep(d->cfg->retry_wait > 0 ? d->cfg->retry_wait : 1);
		}
	}
	return 0;
}

/* ------------------------------------------------- several connections */

/* Several connections write their ranges straight into DEST.moe-parts (a
 * sparse file, never mistaken for a prefix by huggingface_hub) and append
 * the index of every finished chunk to DEST.moe-parts.done; a run that was
 * killed continues with the chunks that file does not list.  Copying ranges
 * into memory to append them in order was measured twice as slow as one
 * connection (an extra pass over every byte); written in place, the digest
 * is computed once at the end, from the page cache.  A chunk listed whose
 * bytes did not reach the disk (power loss) is caught by that digest. */
typedef struct par {
	dl_state *s;
	int fd, state_fd;
	const char *parts;
	pthread_mutex_t mu;
	uint64_t n_chunks;
	bool *done;          /* [n_chunks] */
	uint64_t next;       /* where to look for the next missing chunk */
	volatile int stop;
	bool no_ranges;      /* a 200 answered a range: give up parallel */
	int rc;
	moe_error err;
	uint64_t base_done;  /* bytes of chunks done before this run */
	uint64_t received;
} par;

typedef struct chunk_job {
	par *p;
	uint64_t k, from, to, got;
	bool checked;
} chunk_job;

static void par_fail(par *p, int rc, const moe_error *e)
{
	pthread_mutex_lock(&p->mu);
	if (!p->rc) {
		p->rc = rc;
		p->err = *e;
	}
	p->stop = 1;
	pthread_mutex_unlock(&p->mu);
}

static size_t chunk_sink(void *user, const moe_http_resp *r, const void *ptr, size_t n)
{
	chunk_job *j = user;
	par *p = j->p;
	moe_error e;
	if (!j->checked) {
		j->checked = true;
		if (r->status != 206) {
			pthread_mutex_lock(&p->mu);
			p->no_ranges = true;
			p->stop = 1;
			pthread_mutex_unlock(&p->mu);
			return 0;
		}
		if (!r->has_content_range || r->range_start != j->from + j->got) {
			par_fail(p, moe_err(&e, MOE_EFORMAT, "%s: the server sent a different range than asked",
					    p->s->d->display), &e);
			return 0;
		}
	}
	if (n > j->to - j->from - j->got) {
		par_fail(p, moe_err(&e, MOE_EFORMAT, "%s: the server sent more bytes than the range asked for",
				    p->s->d->display), &e);
		return 0;
	}
	const char *c = ptr;
	size_t left = n;
	while (left) {
		ssize_t w = pwrite(p->fd, c, left, (off_t)(j->from + j->got));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			par_fail(p, moe_err(&e, MOE_EIO, "%s: write failed: %s", p->parts, strerror(errno)), &e);
			return 0;
		}
		c += w;
		left -= (size_t)w;
		j->got += (uint64_t)w;
	}
	uint64_t rcv = __atomic_add_fetch(&p->received, n, __ATOMIC_RELAXED);
	if (pthread_mutex_trylock(&p->mu) == 0) {
		emit_bytes(p->s, p->base_done + rcv, false);
		pthread_mutex_unlock(&p->mu);
	}
	return n;
}

static int chunk_retry(void *user, moe_http_req *q, moe_error *e)
{
	chunk_job *j = user;
	j->checked = false;
	q->range_from = j->from + j->got;
	return 0;
}

static void *worker(void *arg)
{
	par *p = arg;
	moe_dl *d = p->s->d;
	CURL *h = curl_easy_init();
	moe_error e = {0};
	if (!h) {
		par_fail(p, moe_err(&e, MOE_ENOMEM, "curl_easy_init failed"), &e);
		return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->next < p->n_chunks && p->done[p->next])
			p->next++;
		if (p->stop || p->next >= p->n_chunks) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		chunk_job j = {.p = p, .k = p->next++};
		pthread_mutex_unlock(&p->mu);
		j.from = j.k * CHUNK;
		j.to = j.from + CHUNK < d->size ? j.from + CHUNK : d->size;
		moe_http_req q = {.method = MOE_HTTP_GET, .url = d->url, .follow = true, .range = true,
				  .range_from = j.from, .range_to = j.to, .sink = chunk_sink, .user = &j,
				  .cancel = &p->stop};
		moe_http_resp *r = calloc(1, sizeof *r);
		int rc = r ? moe_http_request(h, d->cfg, &q, r, chunk_retry, &j, &e)
			   : moe_err(&e, MOE_ENOMEM, "out of memory");
		if (rc == 0 && !p->stop) {
			if (r->status != 206) {
				char st[512];
				moe_http_status_text(r, st, sizeof st);
				rc = moe_err(&e, r->status == 404 ? MOE_ENOTFOUND : MOE_ENET, "%s: %s", d->url, st);
			} else if (j.got != j.to - j.from) {
				rc = moe_err(&e, MOE_ENET, "%s: range %llu-%llu ended after %llu bytes", d->display,
					     (unsigned long long)j.from, (unsigned long long)j.to,
					     (unsigned long long)j.got);
			}
		}
		free(r);
		if (p->stop)
			break;
		if (rc < 0) {
			par_fail(p, rc, &e);
			break;
		}
		/* the chunk's bytes are in the file: record it */
		char line[32];
		int len = snprintf(line, sizeof line, "%llu\n", (unsigned long long)j.k);
		pthread_mutex_lock(&p->mu);
		p->done[j.k] = true;
		bool ok = write(p->state_fd, line, (size_t)len) == len;
		pthread_mutex_unlock(&p->mu);
		if (!ok) {
			par_fail(p, moe_err(&e, MOE_EIO, "%s.done: write failed: %s", p->parts, strerror(errno)),
				 &e);
			break;
		}
	}
	curl_easy_cleanup(h);
	return NULL;
}

/* Read DEST.moe-parts.done (registry_int.h). */
bool moe_dl_read_state(const char *state, uint64_t size, bool *done, uint64_t n_chunks)
{
	char *buf;
	size_t len;
	moe_error ig = {0};
	if (moe_read_file(state, 1 << 20, &buf, &len, &ig) < 0)
		return false;
	unsigned long long sz, ch;
	int hdr = 0;
	bool ok = sscanf(buf, "moe-parts 1 %llu %llu\n%n", &sz, &ch, &hdr) == 2 && hdr > 0 &&
		  sz == size && ch == CHUNK;
	for (char *p = buf + hdr; ok && *p;) {
		char *nl = strchr(p, '\n');
		if (!nl)
			break; /* a line cut by kill -9: that chunk is redone */
		char *end;
		unsigned long long k = strtoull(p, &end, 10);
		if (end == nl && k < n_chunks)
			done[k] = true;
		p = nl + 1;
	}
	free(buf);
	return ok;
}

/* Fetch the whole file over several connections into `parts`.  *fallback
 * is set (and nothing is left behind) when the server ignores ranges. */
static int download_par(dl_state *s, const char *parts, const char *state, bool *fallback,
			moe_error *e)
{
	moe_dl *d = s->d;
	*fallback = false;
	par p = {.s = s, .fd = -1, .state_fd = -1, .parts = parts};
	p.n_chunks = (d->size + CHUNK - 1) / CHUNK;
	p.done = calloc((size_t)p.n_chunks, sizeof *p.done);
	if (!p.done)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	pthread_mutex_init(&p.mu, NULL);
	int rc = 0;
	bool resume = moe_dl_read_state(state, d->size, p.done, p.n_chunks);
	if (!resume) {
		unlink(parts);
		memset(p.done, 0, (size_t)p.n_chunks * sizeof *p.done);
	}
	p.fd = open(parts, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (p.fd < 0)
		rc = moe_err(e, MOE_EIO, "%s: cannot create: %s", parts, strerror(errno));
	if (rc == 0 && !resume) {
		char hdr[96];
		int n = snprintf(hdr, sizeof hdr, "moe-parts 1 %llu %llu\n", (unsigned long long)d->size,
				 (unsigned long long)CHUNK);
		p.state_fd = open(state, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (p.state_fd < 0 || write(p.state_fd, hdr, (size_t)n) != n)
			rc = moe_err(e, MOE_EIO, "%s: cannot write: %s", state, strerror(errno));
	} else if (rc == 0) {
		p.state_fd = open(state, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (p.state_fd < 0)
			rc = moe_err(e, MOE_EIO, "%s: cannot open: %s", state, strerror(errno));
	}
	uint64_t missing = 0;
	for (uint64_t k = 0; k < p.n_chunks; k++)
		if (p.done[k])
			p.base_done += (k + 1) * CHUNK < d->size ? CHUNK : d->size - k * CHUNK;
		else
			missing++;
	if (resume && p.base_done) {
		d->resumed = true;
		moe_log(MOE_LOG_INFO, "%s: resuming, %llu of %llu chunks to go", d->display,
			(unsigned long long)missing, (unsigned long long)p.n_chunks);
	}
	int nthreads = d->connections < 64 ? d->connections : 64;
	if ((uint64_t)nthreads > missing)
		nthreads = (int)missing;
	pthread_t th[64];
	int started = 0;
	for (int i = 0; rc == 0 && i < nthreads; i++) {
		if (pthread_create(&th[i], NULL, worker, &p) != 0) {
			moe_error pe;
			par_fail(&p, moe_err(&pe, MOE_ENOMEM, "cannot start a download thread"), &pe);
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (rc == 0 && p.rc) {
		rc = p.rc;
		*e = p.err;
	}
	if (rc == 0 && p.no_ranges) {
		*fallback = true;
		unlink(parts);
		unlink(state);
	}
	for (uint64_t k = 0; rc == 0 && !*fallback && k < p.n_chunks; k++)
		if (!p.done[k])
			rc = moe_err(e, MOE_EINTERNAL, "%s: parallel download stopped early", d->display);
	/* all there: sync, and hash the file in order */
	if (rc == 0 && !*fallback && fdatasync(p.fd) != 0)
		rc = moe_err(e, MOE_EIO, "%s: cannot sync: %s", parts, strerror(errno));
	if (rc == 0 && !*fallback) {
		rc = moe_digest_fd(s->sha256, p.fd, (int64_t)d->size, parts, e);
		if (rc == 0 && s->sha1)
			rc = moe_digest_fd(s->sha1, p.fd, (int64_t)d->size, parts, e);
		s->have = d->size;
	}
	if (p.fd >= 0)
		close(p.fd);
	if (p.state_fd >= 0)
		close(p.state_fd);
	free(p.done);
	pthread_mutex_destroy(&p.mu);
	return rc;
}

/* --------------------------------------------------------------- driver */

static int verify(dl_state *s, const char *path, moe_error *e)
{
	moe_dl *d = s->d;
	if (d->size != UINT64_MAX && s->have != d->size)
		return moe_err(e, MOE_ENET, "%s: got %llu bytes, expected %llu", d->display,
			       (unsigned long long)s->have, (unsigned long long)d->size);
	char hex[65];
	moe_digest_hex(s->sha256, hex);
	if (d->sha256 && strcasecmp(hex, d->sha256)) {
		unlink(path);
		return moe_err(e, MOE_ECHECKSUM,
			       "%s: sha256 mismatch (expected %s, got %s); the download was deleted",
			       d->display, d->sha256, hex);
	}
	if (s->sha1) {
		char h1[41];
		moe_digest_hex(s->sha1, h1);
		if (strcasecmp(h1, d->sha1_blob)) {
			unlink(path);
			return moe_err(e, MOE_ECHECKSUM,
				       "%s: git blob sha1 mismatch (expected %s, got %s); the download was "
				       "deleted",
				       d->display, d->sha1_blob, h1);
		}
	}
	return 0;
}

int moe_download(moe_dl *d, moe_error *e)
{
	dl_state s = {.d = d, .fd = -1};
	char parts[4300], state[4400];
	snprintf(parts, sizeof parts, "%s.moe-parts", d->dest);
	snprintf(state, sizeof state, "%s.done", parts);
	int k = snprintf(s.incomplete, sizeof s.incomplete, "%s.incomplete", d->dest);
	if (k < 0 || (size_t)k >= sizeof s.incomplete)
		return moe_err(e, MOE_ERANGE, "%s: path too long", d->dest);
	s.fd = open(s.incomplete, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s.fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot create: %s", s.incomplete, strerror(errno));
	int rc = 0;
	struct stat st;
	if (fstat(s.fd, &st) != 0) {
		rc = moe_err(e, MOE_EIO, "%s: %s", s.incomplete, strerror(errno));
		goto out;
	}
	s.t0 = moe_time_now();
	emit(&s, MOE_PULL_EV_FILE, NULL, 0);
	uint64_t old = (uint64_t)st.st_size;
	/* the digests start from the bytes already there; a leftover larger
	 * than the file is not ours to continue */
	rc = old > 0 && d->size != UINT64_MAX && old > d->size ? restart_from_zero(&s, e)
							       : init_digests(&s, e);
	if (rc < 0)
		goto out;
	if (old > 0 && (d->size == UINT64_MAX || old <= d->size)) {
		rc = moe_digest_fd(s.sha256, s.fd, (int64_t)old, s.incomplete, e);
		if (rc == 0 && s.sha1)
			rc = moe_digest_fd(s.sha1, s.fd, (int64_t)old, s.incomplete, e);
		if (rc < 0)
			goto out;
		s.have = old;
		d->resumed = true;
		moe_log(MOE_LOG_INFO, "%s: resuming at %llu bytes", d->display, (unsigned long long)old);
	}
	s.start_have = s.have;
	CURL *h = curl_easy_init();
	if (!h) {
		rc = moe_err(e, MOE_ENOMEM, "curl_easy_init failed");
		goto out;
	}
	struct stat sst;
	bool par_state = stat(state, &sst) == 0;
	bool parallel = d->size != UINT64_MAX && s.have == 0 &&
			((d->connections > 1 && d->size >= PARALLEL_MIN) || par_state);
	bool fallback = false;
	const char *data = s.incomplete;
	if (parallel) {
		rc = download_par(&s, parts, state, &fallback, e);
		if (rc == 0 && !fallback)
			data = parts;
	} else if (par_state) {
		/* a parallel run of another size: not ours to continue */
		unlink(parts);
		unlink(state);
	}
	if (rc == 0 && data == s.incomplete && (d->size == UINT64_MAX || s.have < d->size))
		rc = download_seq(&s, h, e);
	curl_easy_cleanup(h);
	if (rc == 0 && data == s.incomplete && fdatasync(s.fd) != 0)
		rc = moe_err(e, MOE_EIO, "%s: cannot sync: %s", s.incomplete, strerror(errno));
	if (rc == 0)
		rc = verify(&s, data, e);
	if (rc < 0 && data == parts && rc == MOE_ECHECKSUM)
		unlink(state);
	if (rc == 0) {
		emit_bytes(&s, s.have, true);
		if (rename(data, d->dest) != 0)
			rc = moe_err(e, MOE_EIO, "%s: cannot rename into place: %s", d->dest, strerror(errno));
		else if (data == parts) {
			unlink(state);
			unlink(s.incomplete);
		}
	}
out:
	if (s.fd >= 0)
		close(s.fd);
	if (rc < 0 && d->cfg->cancel && *d->cfg->cancel) {
		/* cancelled (moe-serve's client left): no partial file stays */
		unlink(s.incomplete);
		unlink(parts);
		unlink(state);
	}
	moe_digest_free(s.sha256);
	moe_digest_free(s.sha1);
	return rc;
}
