/* pool.c — a fixed thread pool running one data-parallel job at a time.
 *
 * The caller's thread takes part as thread 0, so a pool of n threads starts
 * n-1 workers.  Workers sleep on a condition variable between jobs; a job is
 * identified by a generation counter so a worker never runs the same job
 * twice or misses one. */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct moe_pool {
	int n_threads;
	pthread_t *workers;
	pthread_mutex_t lock;
	pthread_cond_t job_ready, job_done;
	uint64_t generation; /* bumped for each job */
	int pending;         /* workers still running the current job */
	bool quit;
	moe_pool_fn fn;
	void *arg;
};

typedef struct {
	moe_pool *pool;
	int ith;
} worker_arg;

static void *worker_main(void *p)
{
	worker_arg *wa = p;
	moe_pool *pool = wa->pool;
	int ith = wa->ith;
	free(wa);
	uint64_t seen = 0;
	pthread_mutex_lock(&pool->lock);
	for (;;) {
		while (!pool->quit && pool->generation == seen)
			pthread_cond_wait(&pool->job_ready, &pool->lock);
		if (pool->quit)
			break;
		seen = pool->generation;
		moe_pool_fn fn = pool->fn;
		void *arg = pool->arg;
		pthread_mutex_unlock(&pool->lock);
		fn(arg, ith, pool->n_threads);
		pthread_mutex_lock(&pool->lock);
		if (--pool->pending == 0)
			pthread_cond_signal(&pool->job_done);
	}
	pthread_mutex_unlock(&pool->lock);
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
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->job_ready, NULL);
	pthread_cond_init(&p->job_done, NULL);
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
	pthread_mutex_lock(&p->lock);
	p->fn = fn;
	p->arg = arg;
	p->pending = p->n_threads - 1;
	p->generation++;
	pthread_cond_broadcast(&p->job_ready);
	pthread_mutex_unlock(&p->lock);

	fn(arg, 0, p->n_threads);

	pthread_mutex_lock(&p->lock);
	while (p->pending > 0)
		pthread_cond_wait(&p->job_done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

void moe_pool_free(moe_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->quit = true;
	pthread_cond_broadcast(&p->job_ready);
	pthread_mutex_unlock(&p->lock);
	for (int i = 1; i < p->n_threads; i++)
		pthread_join(p->workers[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->job_ready);
	pthread_cond_destroy(&p->job_done);
	free(p->workers);
	free(p);
}

int moe_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}
