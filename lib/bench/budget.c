/* budget.c — moe-bench --mem-budget: generation speed and expert-cache
 * figures of the streamed store (experts.h) at several memory budgets, and
 * the O_DIRECT read bandwidth of the model's disk that bounds them. */
#include "bench.h"
#include "experts.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The (layer, expert) spans of m's file, 4096-rounded, shuffled (a fixed
 * seed): the reads a cold streamed store would issue, in no useful order. */
static size_t expert_reads(const moe_model *m, uint64_t (**out)[2])
{
	size_t n = 0, cap = (size_t)m->hp.n_layer * m->hp.n_expert;
	uint64_t (*r)[2] = malloc((cap ? cap : 1) * sizeof *r);
	*out = r;
	if (!r)
		return 0;
	for (uint32_t il = 0; il < m->hp.n_layer; il++)
		for (uint32_t x = 0; m->layers[il].is_moe && x < m->hp.n_expert; x++) {
			uint64_t off, len;
			if (moe_experts_span(m, il, x, &off, &len) < 0)
				continue;
			r[n][0] = off;
			r[n][1] = (len + MOE_UTH_ALIGN - 1) / MOE_UTH_ALIGN * MOE_UTH_ALIGN;
			n++;
		}
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	for (size_t i = n; i > 1; i--) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		size_t j = (size_t)((rng >> 33) % i);
		uint64_t t0 = r[i - 1][0], t1 = r[i - 1][1];
		r[i - 1][0] = r[j][0], r[i - 1][1] = r[j][1];
		r[j][0] = t0, r[j][1] = t1;
	}
	return n;
}

/* One read of r[0..1] into buf, whole (pread loop); bytes or -errno. */
static int64_t read_whole(int fd, uint8_t *buf, const uint64_t r[2])
{
	uint64_t got = 0;
	while (got < r[1]) {
		ssize_t k = pread(fd, buf + got, r[1] - got, (off_t)(r[0] + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		got += (uint64_t)k;
	}
	return (int64_t)got;
}

typedef struct {
	int fd;
	uint8_t *buf;          /* depth buffers of slot bytes */
	uint64_t slot, max;
	unsigned depth;
	const uint64_t (*rd)[2];
	size_t n;
} probe;

/* Read the spans in order, p->depth at a time through io_uring (or one at a
 * time with pread when depth is 1 or io_uring is unavailable), until max
 * bytes are read.  Bytes read (*t: seconds), or -errno (-EINVAL: O_DIRECT
 * refused); *depth: the depth used. */
static int64_t run_probe(const probe *p, double *t, unsigned *depth)
{
	struct io_uring ring;
	/* the buffers no read is filling (reads complete in any order) */
	unsigned *free_buf = p->depth > 1 ? malloc(p->depth * sizeof *free_buf) : NULL;
	unsigned n_free = p->depth;
	for (unsigned b = 0; free_buf && b < p->depth; b++)
		free_buf[b] = b;
	bool uring = free_buf && io_uring_queue_init(p->depth, &ring, 0) == 0;
	uint64_t done = 0, issued = 0;
	size_t next = 0;
	unsigned inflight = 0;
	int64_t err = 0;
	double t0 = moe_time_now();
	*depth = uring ? p->depth : 1;
	while (!uring && next < p->n && done < p->max) {
		int64_t r = read_whole(p->fd, p->buf, p->rd[next]);
		if (r < 0 || (uint64_t)r < p->rd[next][1]) {
			free(free_buf);
			return r < 0 ? r : -ENODATA;
		}
		done += (uint64_t)r;
		next++;
	}
	/* depth reads in flight, each into a buffer of its own */
	while (uring && !err && (inflight || (next < p->n && issued < p->max))) {
		struct io_uring_sqe *sqe;
		while (inflight < p->depth && next < p->n && issued < p->max &&
		       (sqe = io_uring_get_sqe(&ring))) {
			unsigned b = free_buf[--n_free];
			io_uring_prep_read(sqe, p->fd, p->buf + (size_t)b * p->slot,
					   (unsigned)p->rd[next][1], p->rd[next][0]);
			io_uring_sqe_set_data64(sqe, (uint64_t)next << 32 | b);
			issued += p->rd[next][1];
			next++;
			inflight++;
		}
		struct io_uring_cqe *cqe;
		int r;
		do
			r = io_uring_submit_and_wait(&ring, 1);
		while (r == -EINTR);
		if (r >= 0)
			r = io_uring_wait_cqe(&ring, &cqe);
		if (r < 0) {
			err = r;
			break;
		}
		uint64_t d = io_uring_cqe_get_data64(cqe), i = d >> 32;
		free_buf[n_free++] = (unsigned)d;
		int res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
		if (res < 0 || (uint64_t)res < p->rd[i][1])
			err = res < 0 ? res : -ENODATA;
		else
			done += (uint64_t)res;
	}
	*t = moe_time_now() - t0;
	if (uring) {
		struct io_uring_cqe *cqe;
		while (inflight && io_uring_wait_cqe(&ring, &cqe) == 0)
			io_uring_cqe_seen(&ring, cqe), inflight--;
		io_uring_queue_exit(&ring);
	}
	free(free_buf);
	return err ? err : (int64_t)done;
}

int moe_bench_disk_bw(const moe_model *m, unsigned depth, uint64_t max_bytes, moe_disk_bw *out,
		      moe_error *e)
{
	const char *path = m->file->path;
	memset(out, 0, sizeof *out);
	uint64_t (*rd)[2];
	size_t n = expert_reads(m, &rd);
	if (!rd)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	probe p = {.fd = -1, .rd = (const uint64_t (*)[2])rd, .n = n, .max = max_bytes,
		   .depth = depth < 1 ? 1 : depth > n ? (unsigned)n : depth};
	for (size_t i = 0; i < n; i++)
		p.slot = rd[i][1] > p.slot ? rd[i][1] : p.slot;
	int rc = 0;
	size_t bytes = (size_t)p.depth * p.slot;
	if (!n || !p.slot)
		rc = moe_err(e, MOE_EINVAL, "%s: no experts to measure the disk with", path);
	else if ((p.buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0)) == MAP_FAILED)
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	else /* faulted in now: a first touch during the reads would time the zeroing */
		memset(p.buf, 0, bytes);
	int64_t r = -EINVAL;
	double dt = 0;
	/* O_DIRECT first; buffered where it is refused, at open or at read */
	for (int direct = 1; rc == 0 && direct >= 0 && r == -EINVAL; direct--) {
		p.fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
		if (p.fd < 0 && !direct)
			rc = moe_err(e, MOE_EIO, "%s: %s", path, strerror(errno));
		if (p.fd < 0)
			continue;
		out->direct = direct;
		r = run_probe(&p, &dt, &out->depth);
		if (!direct) /* what buffered reads brought in is not ours to keep */
			posix_fadvise(p.fd, 0, 0, POSIX_FADV_DONTNEED);
		close(p.fd);
	}
	if (rc == 0 && r < 0)
		rc = moe_err(e, MOE_EIO, "%s: reading experts to measure the disk: %s", path,
			     r == -ENODATA ? "short read" : strerror((int)-r));
	else if (rc == 0 && (r == 0 || dt <= 0))
		rc = moe_err(e, MOE_EIO, "%s: too small to measure the disk", path);
	if (rc == 0) {
		out->bytes_s = (double)r / dt;
		out->bytes = (uint64_t)r;
		for (size_t i = 0; i < n; i++)
			out->read_bytes += (double)rd[i][1] / (double)n;
	}
	if (p.buf && p.buf != MAP_FAILED)
		munmap(p.buf, bytes);
	free(rd);
	return rc;
}

int moe_bench_budget(const moe_model *m, const moe_budget_params *p, moe_budget_row *row,
		     moe_error *e)
{
	moe_experts_params xp = {.budget = p->budget, .policy = p->policy, .profile = p->profile,
				 .pin_fraction = p->pin_fraction, .no_prefetch = p->no_prefetch,
				 .lookahead = p->lookahead,
				 .no_overlap = p->no_overlap};
	moe_expert_store *st = NULL;
	moe_engine *eng = NULL;
	moe_seq *seq = NULL;
	float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
	if (!logits)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	if (p->ids && p->n_ids < (size_t)p->n_prompt + (size_t)p->n_gen + 1) {
		free(logits);
		return moe_err(e, MOE_EINVAL, "the text has %zu tokens; %d are needed", p->n_ids,
			       p->n_prompt + p->n_gen + 1);
	}
	/* budget 0: the resident store, for comparison */
	double t_open = moe_time_now();
	int rc = p->budget ? moe_experts_open(&st, m, &xp, e) : 0;
	t_open = moe_time_now() - t_open;
	moe_engine_params ep = {.kv_size = p->n_prompt + p->n_gen + 2, .n_threads = p->n_threads,
				.experts = st};
	if (rc == 0 && (rc = moe_engine_new(&eng, m, &ep, e)) == 0)
		rc = moe_seq_new(&seq, eng, e);
	/* the text's tokens, or random ids (a fixed seed: the same for every budget) */
	uint64_t rng = p->seed ? p->seed : 1;
	int32_t *ids = malloc(((size_t)p->n_prompt + (size_t)p->n_gen + 1) * sizeof *ids);
	if (!ids && rc == 0)
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	for (int i = 0; rc == 0 && i < p->n_prompt + p->n_gen + 1; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = p->ids ? p->ids[i] : (int32_t)((rng >> 33) % m->hp.n_vocab);
	}
	/* timed as before the cache was faulted in in the background: a
	 * steady run, not the first seconds (open_s and populate_s say those) */
	if (rc == 0 && st)
		moe_experts_wait_populated(st);
	if (rc == 0)
		rc = moe_seq_eval(seq, ids, (size_t)p->n_prompt, logits, false, e);
	if (rc == 0 && st)
		moe_experts_reset_stats(st);
	double t0 = moe_time_now();
	for (int i = 0; rc == 0 && i < p->n_gen; i++)
		rc = moe_seq_eval(seq, ids + p->n_prompt + i, 1, logits, false, e);
	free(ids);
	double dt = moe_time_now() - t0;
	if (rc == 0) {
		moe_experts_stats s = {.requests = 1, .hits = 1, .direct = true};
		if (st)
			moe_experts_get_stats(st, &s);
		*row = (moe_budget_row){.budget = p->budget, .slots = s.slots, .n_gen = p->n_gen,
					.tok_s = p->n_gen / dt,
					.hit_rate = s.requests ? (double)s.hits / (double)s.requests : 0,
					.prediction = s.predicted ? (double)s.predicted_right /
									(double)s.predicted : 0,
					.prefetch_used = s.prefetch_reads ? (double)s.prefetch_used /
									    (double)s.prefetch_reads : 0,
					.bytes_per_token = (double)s.bytes_read / p->n_gen,
					.io_wait_s = s.io_wait,
					.overlap = s.requests ? (double)s.overlapped /
									(double)s.requests : 0,
					.direct = s.direct};
		row->io_bound_tok_s = row->bytes_per_token > 0 && p->disk_bw > 0
					      ? p->disk_bw / row->bytes_per_token
					      : 0;
		for (int d = 0; d < MOE_EXPERTS_MAX_LOOKAHEAD && d < 4; d++)
			if (s.predicted_at[d]) {
				row->lookahead = d + 1;
				row->prediction_at[d] =
					(double)s.predicted_right_at[d] / (double)s.predicted_at[d];
				row->candidate_at[d] = s.candidates_at[d] ? (double)s.candidates_chosen_at[d] /
										(double)s.candidates_at[d] : 0;
			}
		row->prefetch_reads = (double)s.prefetch_reads / p->n_gen;
		if (s.lookahead_runs + s.lookahead_skips)
			row->lookahead_share = (double)s.lookahead_runs /
					       (double)(s.lookahead_runs + s.lookahead_skips);
		row->open_s = t_open;
		row->populate_s = s.populate_s;
		row->io_bound_qd1_tok_s = row->bytes_per_token > 0 && p->disk_bw_qd1 > 0
						  ? p->disk_bw_qd1 / row->bytes_per_token
						  : 0;
	}
	moe_seq_free(seq);
	moe_engine_free(eng);
	moe_experts_close(st);
	free(logits);
	return rc;
}
