/* stream.c — a STREAM-like memory bandwidth probe: the triad
 * a[i] = b[i] + s*c[i] and a plain read (sum) over arrays far larger than
 * the caches, every thread of a moe_pool on its own slice. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct {
	double *a, *b, *c;
	size_t n;
	double scalar;
	double sums[256]; /* per thread, so the read loop is not optimised away */
	int op;           /* 0 init, 1 triad, 2 read */
} stream_job;

enum { OP_INIT, OP_TRIAD, OP_READ };

static void slice(size_t n, int ith, int nth, size_t *lo, size_t *hi)
{
	/* slices of whole cache lines (8 doubles) */
	size_t lines = (n + 7) / 8;
	*lo = lines * (size_t)ith / (size_t)nth * 8;
	*hi = lines * (size_t)(ith + 1) / (size_t)nth * 8;
	if (*hi > n)
		*hi = n;
	if (*lo > n)
		*lo = n;
}

static void stream_worker(void *arg, int ith, int nth)
{
	stream_job *j = arg;
	size_t lo, hi;
	slice(j->n, ith, nth, &lo, &hi);
	double *restrict a = j->a, *restrict b = j->b, *restrict c = j->c;
	if (j->op == OP_INIT) {
		/* first touch by the thread that will use the pages */
		for (size_t i = lo; i < hi; i++) {
			a[i] = 1.0;
			b[i] = 2.0;
			c[i] = 0.5;
		}
	} else if (j->op == OP_TRIAD) {
		double s = j->scalar;
		for (size_t i = lo; i < hi; i++)
			a[i] = b[i] + s * c[i];
	} else {
		/* eight independent sums in registers: one chain of dependent
		 * adds would be bound by the adder's latency, not by memory */
		double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
		size_t i = lo;
		for (; i + 8 <= hi; i += 8) {
			s0 += b[i];
			s1 += b[i + 1];
			s2 += b[i + 2];
			s3 += b[i + 3];
			s4 += b[i + 4];
			s5 += b[i + 5];
			s6 += b[i + 6];
			s7 += b[i + 7];
		}
		for (; i < hi; i++)
			s0 += b[i];
		j->sums[ith & 255] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
	}
}

static double *alloc_array(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 2u << 20, bytes) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	/* fewer TLB misses; not the point of the measurement */
	madvise(p, bytes, MADV_HUGEPAGE);
#endif
	return p;
}

int moe_bench_stream(size_t array_bytes, int n_threads, int reps, moe_stream_result *r,
		     moe_error *e)
{
	memset(r, 0, sizeof *r);
	if (array_bytes < ((size_t)1 << 20))
		return moe_err(e, MOE_EINVAL,
			       "stream: arrays of %zu bytes are too small (1 MiB at least)",
			       array_bytes);
	if (n_threads <= 0)
		n_threads = moe_default_threads();
	if (n_threads > 256)
		n_threads = 256;
	if (reps <= 0)
		reps = 10;
	stream_job j = {.n = array_bytes / sizeof(double), .scalar = 3.0};
	j.a = alloc_array(array_bytes);
	j.b = alloc_array(array_bytes);
	j.c = alloc_array(array_bytes);
	moe_pool *pool = NULL;
	int rc = 0;
	if (!j.a || !j.b || !j.c) {
		rc = moe_err(e, MOE_ENOMEM, "stream: cannot allocate 3 x %zu bytes", array_bytes);
		goto out;
	}
	if ((rc = moe_pool_create(&pool, n_threads, e)) < 0)
		goto out;
	j.op = OP_INIT;
	moe_pool_run(pool, stream_worker, &j);
	double best_triad = 0, best_read = 0;
	/* the first run of each kernel is a warm-up, as in STREAM */
	for (int rep = 0; rep <= reps; rep++) {
		j.op = OP_TRIAD;
		double t0 = moe_time_now();
		moe_pool_run(pool, stream_worker, &j);
		double t = moe_time_now() - t0;
		if (rep > 0 && (best_triad == 0 || t < best_triad))
			best_triad = t;
		j.op = OP_READ;
		t0 = moe_time_now();
		moe_pool_run(pool, stream_worker, &j);
		t = moe_time_now() - t0;
		if (rep > 0 && (best_read == 0 || t < best_read))
			best_read = t;
	}
	size_t bytes = j.n * sizeof(double);
	r->triad_s = best_triad;
	r->read_s = best_read;
	r->triad_gbs = best_triad > 0 ? 3.0 * (double)bytes / best_triad / 1e9 : 0;
	r->read_gbs = best_read > 0 ? (double)bytes / best_read / 1e9 : 0;
	r->array_bytes = bytes;
	r->n_threads = n_threads;
	r->reps = reps;
out:
	moe_pool_free(pool);
	free(j.a);
	free(j.b);
	free(j.c);
	return rc;
}
