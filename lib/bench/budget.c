/* budget.c — moe-bench --mem-budget: generation speed and expert-cache
 * figures of the streamed store (experts.h) at several memory budgets, and
 * the O_DIRECT read bandwidth of the model's disk that bounds them. */
#include "bench.h"
#include "experts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int moe_bench_disk_bw(const char *path, uint64_t max_bytes, double *bw, moe_error *e)
{
	/* 4 MiB O_DIRECT reads from the middle of the file (the experts),
	 * sequential, as the store's reads are about an expert's size */
	size_t blk = 4u << 20;
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	bool direct = fd >= 0;
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return moe_err(e, MOE_EIO, "%s: %s", path, strerror(errno));
	off_t size = lseek(fd, 0, SEEK_END);
	/* a small file: smaller reads, from its start */
	if (size >= 0 && (uint64_t)size < 16 * (uint64_t)blk)
		blk = (size_t)(size / 16 / 4096 * 4096);
	if (blk == 0) {
		close(fd);
		return moe_err(e, MOE_EIO, "%s: too small to measure the disk", path);
	}
	void *buf = mmap(NULL, blk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		close(fd);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	uint64_t start = (uint64_t)size / 4 / blk * blk, done = 0;
	if (max_bytes > (uint64_t)size - start)
		max_bytes = (uint64_t)size - start;
	double t0 = moe_time_now();
	int rc = 0;
	while (done + blk <= max_bytes) {
		ssize_t r = pread(fd, buf, blk, (off_t)(start + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = moe_err(e, MOE_EIO, "%s: %s", path, r < 0 ? strerror(errno) : "short read");
			break;
		}
		done += (uint64_t)r;
	}
	double dt = moe_time_now() - t0;
	if (!direct)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	munmap(buf, blk);
	close(fd);
	if (rc == 0 && (done == 0 || dt <= 0))
		rc = moe_err(e, MOE_EIO, "%s: too small to measure the disk", path);
	if (rc == 0)
		*bw = (double)done / dt;
	return rc;
}

int moe_bench_budget(const moe_model *m, const moe_budget_params *p, moe_budget_row *row,
		     moe_error *e)
{
	moe_experts_params xp = {.budget = p->budget, .policy = p->policy, .profile = p->profile,
				 .pin_fraction = p->pin_fraction, .no_prefetch = p->no_prefetch,
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
	int rc = p->budget ? moe_experts_open(&st, m, &xp, e) : 0;
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
	}
	moe_seq_free(seq);
	moe_engine_free(eng);
	moe_experts_close(st);
	free(logits);
	return rc;
}
