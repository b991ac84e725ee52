/* pool.c — a fixed thread pool running one data-parallel job at a time.
 *
 * The caller's thread takes part as thread 0, so a pool of n threads starts
 * n-1 workers.  Decoding one token dispatches ~100 small jobs, so waking a
 * worker must cost far less than a condition-variable round trip: workers
 * spin on an atomic job counter for a while (~40 us) after each job and only
 * then sleep on a condition variable; the caller spins until the job's
 * pending count drops to zero. */
#include "core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Polls (each a pause, ~20 ns) before a worker sleeps or the caller yields:
 * ~40 us covers the gap between the jobs of one token, and bounds the time
 * wasted when the machine has more busy threads than cores. */
#define SPIN_ROUNDS 2048

struct moe_pool {
	int n_threads;
	pthread_t *workers;
	_Atomic uint64_t generation; /* bumped for each job */
	atomic_int pending;          /* workers still running the current job */
	atomic_bool quit;
	moe_pool_fn fn;
	void *arg;
	/* sleeping workers: a worker counts itself in `sleepers` before its
	 * last look at the generation, so a job posted after that look sees
	 * the count and wakes it (both sides sequentially consistent), and a
	 * job with no sleepers takes no lock */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	atomic_int sleepers;
};

typedef struct {
	moe_pool *pool;
	int ith;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Wait until the job counter moves past `seen` (or quit); returns the new
 * generation. */
static uint64_t wait_for_job(moe_pool *p, uint64_t seen)
{
	for (int i = 0; i < SPIN_ROUNDS; i++) {
		uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
		if (g != seen || atomic_load_explicit(&p->quit, memory_order_relaxed))
			return g;
		cpu_relax();
	}
	pthread_mutex_lock(&p->lock);
	atomic_fetch_add(&p->sleepers, 1);
	uint64_t g;
	while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->quit))
		pthread_cond_wait(&p->wake, &p->lock);
	atomic_fetch_sub(&p->sleepers, 1);
	pthread_mutex_unlock(&p->lock);
	return g;
}

static void *worker_main(void *arg)
{
	worker_arg *wa = arg;
	moe_pool *p = wa->pool;
	int ith = wa->ith;
	free(wa);
	uint64_t seen = 0;
	for (;;) {
		seen = wait_for_job(p, seen);
		if (atomic_load(&p->quit))
			break;
		p->fn(p->arg, ith, p->n_threads);
		atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
	}
	return NULL;
}

int moe_pool_create(moe_pool **out, int n_threads, moe_error *e)
{
	if (n_threads < 1 || n_threads > 1024)
		return moe_err(e, MOE_EINVAL, "thread count %d out of range 1..1024", n_threads);
	moe_pool *p = calloc(1, sizeof *p);
	if (!p)
		return moe_err(e, MOE_ENOMEM, "out of memory creating thread pool");
	p->n_threads = n_threads;
	atomic_init(&p->generation, 0);
	atomic_init(&p->pending, 0);
	atomic_init(&p->quit, false);
	atomic_init(&p->sleepers, 0);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	p->workers = calloc((size_t)n_threads, sizeof *p->workers);
	if (!p->workers) {
		free(p);
		return moe_err(e, MOE_ENOMEM, "out of memory creating thread pool");
	}
	for (int i = 1; i < n_threads; i++) {
		worker_arg *wa = malloc(sizeof *wa);
		if (wa) {
			wa->pool = p;
			wa->ith = i;
		}
		if (!wa || pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
			free(wa);
			p->n_threads = i; /* stop the ones started so far */
			moe_pool_free(p);
			return moe_err(e, MOE_ENOMEM, "cannot start worker thread %d", i);
		}
	}
	*out = p;
	return 0;
}

int moe_pool_threads(const moe_pool *p)
{
	return p ? p->n_threads : 1;
}

void moe_pool_run(moe_pool *p, moe_pool_fn fn, void *arg)
{
	if (!p || p->n_threads == 1) {
		fn(arg, 0, 1);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
	/* workers that see the new generation see fn, arg, pending; a worker
	 * about to sleep has counted itself before its last look at it */
	atomic_fetch_add(&p->generation, 1);
	if (atomic_load(&p->sleepers)) {
		/* under the lock: a sleeper checks the generation and waits
		 * without letting go of it, so the broadcast cannot fall
		 * between the two */
		pthread_mutex_lock(&p->lock);
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->lock);
	}

	fn(arg, 0, p->n_threads);

	for (unsigned spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
		if (spins < SPIN_ROUNDS)
			cpu_relax();
		else
			sched_yield();
	}
}

void moe_pool_free(moe_pool *p)
{
	if (!p)
		return;
	atomic_store(&p->quit, true);
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (int i = 1; i < p->n_threads; i++)
		pthread_join(p->workers[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->wake);
	free(p->workers);
	free(p);
}

int moe_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}
