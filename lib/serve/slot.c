/* slot.c — models and their scheduler threads.
 *
 * Each model is a slot with one thread that owns its engine: it loads the
 * model when a request first needs it, moves queued jobs into the engine's
 * scheduler, passes cancellations on, steps, and unloads the model after
 * keep_alive seconds without work.  Engine callbacks run on that thread and
 * append to the job under the server mutex; connection threads wait on the
 * job's condition variable. */
#include "serve/serve_int.h"
#include "experts.h"
#include "registry.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- jobs */

job *job_new(slot *sl)
{
	job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->sl = sl;
	j->refs = 1;
	j->top_logprobs = -1;
	j->t_created = moe_time_now();
	pthread_cond_init(&j->cv, NULL);
	return j;
}

void job_unref_locked(job *j)
{
	if (!j || --j->refs > 0)
		return;
	pthread_cond_destroy(&j->cv);
	free(j->ids);
	free(j->text);
	free(j->lps);
	free(j->embedding);
	json_decref(j->hold);
	free(j);
}

void job_unref(job *j)
{
	if (!j)
		return;
	moe_serve *s = j->sl->srv;
	pthread_mutex_lock(&s->mu);
	job_unref_locked(j);
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------- engine callbacks */

static int cb_text(void *user, moe_req *r, const char *text, size_t len)
{
	(void)r;
	job *j = user;
	moe_serve *s = j->sl->srv;
	pthread_mutex_lock(&s->mu);
	buf_add(&j->text, &j->text_len, &j->text_cap, text, len);
	bool cancel = j->cancel;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&s->mu);
	return cancel ? -1 : 0;
}

/* log-softmax of the chosen token and the top n (OpenAI's logprobs are the
 * model's distribution, before temperature and truncation). */
static void logprobs(const float *logits, int n_vocab, int32_t id, int n_top, lp_entry *out)
{
	float mx = -INFINITY;
	for (int i = 0; i < n_vocab; i++)
		mx = logits[i] > mx ? logits[i] : mx;
	double sum = 0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - mx);
	float lse = mx + (float)log(sum);
	out->id = id;
	out->logprob = logits[id] - lse;
	out->n_top = 0;
	for (int k = 0; k < n_top && k < n_vocab; k++) {
		int best = -1;
		for (int i = 0; i < n_vocab; i++) {
			bool taken = false;
			for (int t = 0; t < k && !taken; t++)
				taken = out->top_id[t] == i;
			if (!taken && (best < 0 || logits[i] > logits[best]))
				best = i;
		}
		out->top_id[k] = best;
		out->top_lp[k] = logits[best] - lse;
		out->n_top++;
	}
}

static int cb_token(void *user, moe_req *r, int32_t id, const float *logits)
{
	(void)r;
	job *j = user;
	moe_serve *s = j->sl->srv;
	lp_entry lp;
	bool want = j->top_logprobs >= 0 && !moe_tokenizer_is_eog(j->sl->model->tok, id);
	if (want)
		logprobs(logits, (int)moe_engine_n_vocab(j->sl->eng), id, j->top_logprobs, &lp);
	pthread_mutex_lock(&s->mu);
	if (!j->t_first)
		j->t_first = moe_time_now();
	j->n_gen++;
	if (want && j->n_lps == j->cap_lps) {
		size_t nc = j->cap_lps ? 2 * j->cap_lps : 16;
		lp_entry *p = realloc(j->lps, nc * sizeof *p);
		if (p) {
			j->lps = p;
			j->cap_lps = nc;
		}
	}
	if (want && j->n_lps < j->cap_lps)
		j->lps[j->n_lps++] = lp;
	bool cancel = j->cancel;
	pthread_mutex_unlock(&s->mu);
	return cancel ? -1 : 0;
}

static void cb_done(void *user, moe_req *r)
{
	job *j = user;
	moe_serve *s = j->sl->srv;
	pthread_mutex_lock(&s->mu);
	j->res = *moe_req_get_result(r);
	j->done = true;
	s->n_tokens_in += j->res.n_prompt;
	s->n_tokens_out += j->res.n_gen;
	s->t_gen_total += j->res.t_gen;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&s->mu);
}

/* A job that never reaches the engine ends with an error. */
static void job_fail_locked(job *j, int code, const char *msg)
{
	j->res.finish = MOE_FINISH_ERROR;
	j->res.error.code = code;
	snprintf(j->res.error.msg, sizeof j->res.error.msg, "%s", msg);
	j->done = true;
	pthread_cond_broadcast(&j->cv);
}

/* ---------------------------------------------------------- embeddings */

typedef struct pool {
	const moe_seq *seq;
	double *sum;  /* [n_embd] */
	size_t n;
} pool;

static void on_hidden(void *user, const moe_seq *s, int pos, const float *h, int n_embd)
{
	(void)pos;
	pool *p = user;
	if (s != p->seq)
		return;
	for (int i = 0; i < n_embd; i++)
		p->sum[i] += h[i];
	p->n++;
}

/* The mean of the prompt's last hidden states (after the output norm),
 * L2-normalised, computed on a sequence of its own between scheduler
 * steps.  Runs on the scheduler thread. */
static int embed(slot *sl, job *j, moe_error *e)
{
	int E = (int)sl->model->hp.n_embd;
	moe_seq *sq;
	pool p = {.sum = calloc((size_t)E, sizeof(double))};
	float *out = malloc((size_t)E * sizeof *out);
	int rc = p.sum && out ? moe_seq_new(&sq, sl->eng, e) : moe_err(e, MOE_ENOMEM, "out of memory");
	if (rc == 0) {
		p.seq = sq;
		moe_engine_set_hidden_callback(sl->eng, on_hidden, &p);
		rc = moe_seq_eval(sq, j->ids, j->n_ids, NULL, false, e);
		moe_engine_set_hidden_callback(sl->eng, NULL, NULL);
		moe_seq_free(sq);
	}
	if (rc == 0 && p.n != j->n_ids)
		rc = moe_err(e, MOE_EINTERNAL, "embedding: %zu hidden states for %zu tokens", p.n, j->n_ids);
	if (rc == 0) {
		double norm = 0;
		for (int i = 0; i < E; i++) {
			p.sum[i] /= (double)p.n;
			norm += p.sum[i] * p.sum[i];
		}
		norm = norm > 0 ? sqrt(norm) : 1;
		for (int i = 0; i < E; i++)
			out[i] = (float)(p.sum[i] / norm);
		j->embedding = out;
		j->n_embd = E;
		out = NULL;
	}
	free(p.sum);
	free(out);
	return rc;
}

/* ------------------------------------------------------------- loading */

static void unload(slot *sl)
{
	moe_sched_free(sl->sched);
	moe_engine_free(sl->eng);
	moe_experts_close(sl->experts);
	moe_model_free(sl->model);
	sl->sched = NULL;
	sl->eng = NULL;
	sl->experts = NULL;
	sl->model = NULL;
}

/* Unloaded by its own thread: the memory is back, so a loader waiting for
 * room may go on.  Called with the mutex. */
static void gave_back_locked(slot *sl)
{
	sl->charge = 0;
	sl->evict = false;
	pthread_cond_broadcast(&sl->srv->mem_cv);
}

static double mib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0);
}

/* Room for sl's model (just mapped) under the shared --mem-budget, as
 * Ollama does it: all its weights if they fit beside the others; else idle
 * models are unloaded, least recently used first, until they fit; if the
 * rest are busy, its routed experts are streamed within the room left
 * (*stream: that budget, else 0 = all in memory).  The bytes are reserved
 * (sl->charge) before the mutex is let go, so two loads never both count
 * the same room.  MOE_ENOMEM when the model cannot fit even alone (507),
 * MOE_ERANGE when the room is held by busy models (503, retry). */
static int reserve(slot *sl, uint64_t *stream, moe_error *e)
{
	moe_serve *s = sl->srv;
	const moe_model *m = sl->model;
	uint64_t full = moe_experts_fixed_bytes(m) + moe_experts_total_bytes(m);
	/* the smallest streamed footprint: what moe_experts_open accepts */
	uint64_t min = moe_experts_min_budget(m);
	int rc = 0;
	*stream = 0;
	pthread_mutex_lock(&s->mu);
	if (s->budget_min) {
		/* as moe-run --mem-budget min: each model at its minimum */
		*stream = min;
		sl->charge = min;
	} else if (!s->budget) {
		sl->charge = full;
	} else if ((full < min ? full : min) > s->budget) {
		rc = moe_err(e, MOE_ENOMEM,
			     "model '%s' needs at least %.1f MiB (its non-expert weights and one layer "
			     "of experts), more than the whole --mem-budget (%.1f MiB)",
			     sl->name, mib(full < min ? full : min), mib(s->budget));
	} else {
		for (;;) {
			uint64_t used = 0;
			slot *victim = NULL;
			for (int i = 0; i < s->n_slots; i++) {
				slot *o = s->slots[i];
				if (o == sl)
					continue;
				used += o->charge;
				if (o->state == SLOT_READY && o->charge && o->users == 0 && o->n_jobs == 0 &&
				    !o->evict && (!victim || o->idle_since < victim->idle_since))
					victim = o;
			}
			uint64_t room = s->budget > used ? s->budget - used : 0;
			if (full <= room) {
				sl->charge = full;
				break;
			}
			if (s->stopping) {
				rc = moe_err(e, MOE_ERANGE, "the server is shutting down");
				break;
			}
			if (victim) {
				/* its thread unloads it, or says it got busy */
				victim->evict = true;
				pthread_cond_signal(&victim->cv);
				while (victim->evict && !s->stopping)
					pthread_cond_wait(&s->mem_cv, &s->mu);
				continue;
			}
			if (room >= min) {
				*stream = room;
				sl->charge = room;
				break;
			}
			rc = moe_err(e, MOE_ERANGE,
				     "no room for model '%s' now: it needs at least %.1f MiB and busy "
				     "models hold %.1f MiB of the %.1f MiB --mem-budget; retry later",
				     sl->name, mib(min), mib(used), mib(s->budget));
			break;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int load(slot *sl, moe_error *e)
{
	moe_serve *s = sl->srv;
	double t0 = moe_time_now();
	moe_engine_params ep = {.n_threads = s->p.n_threads, .kv_size = s->p.kv_size,
				.n_batch = s->p.n_batch};
	moe_sched_params sp = {.n_parallel = s->p.n_parallel};
	moe_experts_params xp = {0};
	int rc = moe_model_load(&sl->model, sl->path, e);
	if (rc == 0 && !sl->model->tok)
		rc = moe_err(e, MOE_EUNSUPPORTED, "%s: the model has no tokenizer", sl->path);
	if (rc == 0)
		rc = reserve(sl, &xp.budget, e);
	if (rc == 0 && xp.budget) {
		/* as moe-run --mem-budget: routed experts streamed from the file
		 * through a cache; the rest of the weights stay in memory */
		rc = moe_experts_open(&sl->experts, sl->model, &xp, e);
		ep.experts = sl->experts;
	}
	if (rc == 0)
		rc = moe_engine_new(&sl->eng, sl->model, &ep, e);
	if (rc == 0)
		rc = moe_sched_new(&sl->sched, sl->eng, &sp, e);
	if (rc < 0) {
		unload(sl);
		pthread_mutex_lock(&s->mu);
		gave_back_locked(sl);
		pthread_mutex_unlock(&s->mu);
		return rc;
	}
	sl->n_ctx = moe_engine_n_ctx(sl->eng);
	moe_engine_kv_stats(sl->eng, &sl->kv);
	sl->t_load = moe_time_now() - t0;
	sl->loaded_at = time(NULL);
	return 0;
}

/* ------------------------------------------------------ the scheduler */

typedef struct active { job **v; int n, cap; } active;

static void *slot_main(void *arg)
{
	slot *sl = arg;
	moe_serve *s = sl->srv;
	active act = {0};
	pthread_mutex_lock(&s->mu);
	for (;;) {
		if (s->stopping)
			break;
		if (sl->state == SLOT_UNLOADED && (sl->users > 0 || sl->inbox || sl->preload)) {
			sl->state = SLOT_LOADING;
			sl->preload = false;
			/* a request's keep_alive lasts while it stays loaded */
			sl->keep_alive = s->p.keep_alive;
			pthread_mutex_unlock(&s->mu);
			moe_error e = {0};
			int rc = load(sl, &e);
			pthread_mutex_lock(&s->mu);
			sl->state = rc < 0 ? SLOT_FAILED : SLOT_READY;
			sl->load_code = rc;
			if (rc < 0)
				snprintf(sl->load_error, sizeof sl->load_error, "%s", e.msg);
			sl->idle_since = moe_time_now();
			pthread_cond_broadcast(&sl->cv);
			continue;
		}
		if (sl->state == SLOT_FAILED) {
			for (job *j; (j = sl->inbox);) {
				sl->inbox = j->next;
				sl->n_jobs--;
				job_fail_locked(j, MOE_EIO, sl->load_error);
				job_unref_locked(j);
			}
			sl->inbox_tail = NULL;
		}
		if (sl->state != SLOT_READY) {
			pthread_cond_wait(&sl->cv, &s->mu);
			continue;
		}
		/* new jobs into the engine */
		while (sl->inbox) {
			job *j = sl->inbox;
			sl->inbox = j->next;
			if (!sl->inbox)
				sl->inbox_tail = NULL;
			moe_error e = {0};
			if (j->embed) {
				pthread_mutex_unlock(&s->mu);
				double t0 = moe_time_now();
				int rc = embed(sl, j, &e);
				pthread_mutex_lock(&s->mu);
				sl->n_jobs--;
				j->res.n_prompt = j->n_ids;
				j->res.t_prompt = moe_time_now() - t0;
				s->n_tokens_in += j->n_ids;
				if (rc < 0)
					job_fail_locked(j, rc, e.msg);
				j->done = true;
				pthread_cond_broadcast(&j->cv);
				job_unref_locked(j);
				continue;
			}
			moe_req_callbacks cb = {.token = cb_token, .text = cb_text, .done = cb_done,
						.user = j};
			int rc = j->cancel ? moe_err(&e, MOE_EINVAL, "cancelled") :
				 moe_req_new(&j->req, sl->eng, j->ids, j->n_ids, &j->params, &cb, &e);
			if (rc == 0)
				rc = moe_sched_submit(sl->sched, j->req, &e);
			if (rc < 0 || act.n == act.cap) {
				size_t nc = act.cap ? 2 * act.cap : 16;
				job **v = rc < 0 ? NULL : realloc(act.v, nc * sizeof *v);
				if (!v) {
					if (rc == 0) {
						/* cannot track it: take it back out */
						pthread_mutex_unlock(&s->mu);
						moe_sched_cancel(sl->sched, j->req);
						pthread_mutex_lock(&s->mu);
						snprintf(e.msg, sizeof e.msg, "out of memory");
					}
					moe_req_free(j->req);
					j->req = NULL;
					sl->n_jobs--;
					j->res.n_prompt = j->n_ids;
					job_fail_locked(j, rc < 0 ? rc : MOE_ENOMEM, e.msg);
					job_unref_locked(j);
					continue;
				}
				act.v = v;
				act.cap = (int)nc;
			}
			act.v[act.n++] = j;
		}
		/* cancellations (the client left) */
		job *cancel[64];
		int n_cancel = 0;
		for (int i = 0; i < act.n && n_cancel < 64; i++)
			if (act.v[i]->cancel && !act.v[i]->cancel_sent && !act.v[i]->done) {
				act.v[i]->cancel_sent = true;
				cancel[n_cancel++] = act.v[i];
			}
		bool idle = act.n == 0 && sl->users == 0 && !sl->inbox;
		if (sl->evict && !idle) {
			/* busy again: the loader that asked looks elsewhere */
			sl->evict = false;
			pthread_cond_broadcast(&s->mem_cv);
		}
		if (act.n == 0) {
			double now = moe_time_now();
			if (idle && (sl->evict || (sl->keep_alive >= 0 &&
						   now >= sl->idle_since + sl->keep_alive))) {
				sl->state = SLOT_UNLOADED;
				pthread_mutex_unlock(&s->mu);
				unload(sl);
				pthread_mutex_lock(&s->mu);
				gave_back_locked(sl);
				continue;
			}
			if (sl->keep_alive >= 0 && sl->users == 0) {
				double until = sl->idle_since + sl->keep_alive;
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				double wait = until - now;
				if (wait > 3600)
					wait = 3600;
				ts.tv_sec += (time_t)wait;
				ts.tv_nsec += (long)((wait - floor(wait)) * 1e9);
				if (ts.tv_nsec >= 1000000000L) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000L;
				}
				pthread_cond_timedwait(&sl->cv, &s->mu, &ts);
			} else {
				pthread_cond_wait(&sl->cv, &s->mu);
			}
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		for (int i = 0; i < n_cancel; i++)
			moe_sched_cancel(sl->sched, cancel[i]->req);
		moe_error e = {0};
		moe_sched_step(sl->sched, &e); /* an engine failure finishes its requests "error" */
		moe_kv_stats kv;
		moe_engine_kv_stats(sl->eng, &kv);
		pthread_mutex_lock(&s->mu);
		sl->kv = kv;
		/* finished jobs leave the engine */
		int k = 0;
		for (int i = 0; i < act.n; i++) {
			job *j = act.v[i];
			if (moe_req_done(j->req)) {
				moe_req_free(j->req);
				j->req = NULL;
				sl->n_jobs--;
				job_unref_locked(j);
			} else {
				act.v[k++] = j;
			}
		}
		act.n = k;
		if (act.n == 0)
			sl->idle_since = moe_time_now();
	}
	/* shutting down: cancel what runs, fail what waits */
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < act.n; i++)
		moe_sched_cancel(sl->sched, act.v[i]->req);
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < act.n; i++) {
		moe_req_free(act.v[i]->req);
		act.v[i]->req = NULL;
		job_unref_locked(act.v[i]);
	}
	for (job *j; (j = sl->inbox);) {
		sl->inbox = j->next;
		job_fail_locked(j, MOE_EIO, "the server is shutting down");
		job_unref_locked(j);
	}
	sl->inbox_tail = NULL;
	sl->n_jobs = 0;
	sl->state = SLOT_UNLOADED;
	pthread_cond_broadcast(&sl->cv);
	pthread_mutex_unlock(&s->mu);
	free(act.v);
	unload(sl);
	pthread_mutex_lock(&s->mu);
	gave_back_locked(sl);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int slot_submit(slot *sl, job *j, moe_error *e)
{
	moe_serve *s = sl->srv;
	pthread_mutex_lock(&s->mu);
	if (s->stopping) {
		pthread_mutex_unlock(&s->mu);
		return moe_err(e, MOE_ERANGE, "the server is shutting down");
	}
	if (sl->n_jobs >= s->p.n_parallel + s->p.queue_max) {
		pthread_mutex_unlock(&s->mu);
		return moe_err(e, MOE_ERANGE, "the server is busy (%d requests running or queued)",
			       sl->n_jobs);
	}
	j->refs++;
	j->next = NULL;
	if (sl->inbox_tail)
		sl->inbox_tail->next = j;
	else
		sl->inbox = j;
	sl->inbox_tail = j;
	sl->n_jobs++;
	pthread_cond_signal(&sl->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* ---------------------------------------------------------- the slots */

int slot_start(slot *sl, moe_error *e)
{
	if (pthread_create(&sl->thread, NULL, slot_main, sl) != 0)
		return moe_err(e, MOE_ENOMEM, "cannot start a scheduler thread");
	sl->has_thread = true;
	return 0;
}

/* A model name: letters, digits and ._:- only (no paths). */
static bool name_ok(const char *n)
{
	if (!*n || strlen(n) >= 128 || n[0] == '.')
		return false;
	for (const char *p = n; *p; p++)
		if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') ||
		      ('0' <= *p && *p <= '9') || strchr("._:-", *p)))
			return false;
	return true;
}

int slot_add(moe_serve *s, const char *spec, moe_error *e)
{
	if (s->n_slots == SERVE_MAX_SLOTS)
		return moe_err(e, MOE_ERANGE, "at most %d models", SERVE_MAX_SLOTS);
	slot *sl = calloc(1, sizeof *sl);
	if (!sl)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	const char *eq = strchr(spec, '=');
	const char *path = eq ? eq + 1 : spec;
	if (eq) {
		snprintf(sl->name, sizeof sl->name, "%.*s", (int)(eq - spec), spec);
	} else {
		const char *base = strrchr(path, '/');
		base = base ? base + 1 : path;
		size_t n = strlen(base);
		if (n > 4 && strcmp(base + n - 4, ".uth") == 0)
			n -= 4;
		snprintf(sl->name, sizeof sl->name, "%.*s", (int)n, base);
	}
	if (!name_ok(sl->name) || !*path) {
		free(sl);
		return moe_err(e, MOE_EINVAL,
			       "model '%s': a name is letters, digits and ._:- (NAME=PATH sets one)",
			       spec);
	}
	for (int i = 0; i < s->n_slots; i++)
		if (strcmp(s->slots[i]->name, sl->name) == 0) {
			free(sl);
			return moe_err(e, MOE_EINVAL, "two models named '%s' (use NAME=PATH)", spec);
		}
	if (!(sl->path = strdup(path))) {
		free(sl);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	sl->srv = s;
	sl->keep_alive = s->p.keep_alive;
	pthread_cond_init(&sl->cv, NULL);
	s->slots[s->n_slots++] = sl;
	return 0;
}

/* A registry name NAME[:TAG] with ORG/ parts: what name_ok allows plus
 * '/', but never absolute, never "." or ".." components — a request's
 * model is looked up in the registry by name only, not as a file. */
static bool reg_name_ok(const char *n)
{
	size_t len = strlen(n);
	if (!len || len >= 256 || n[0] == '.' || n[0] == '/' || n[len - 1] == '/' ||
	    strstr(n, "/.") || strstr(n, "//"))
		return false;
	for (const char *p = n; *p; p++)
		if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') ||
		      ('0' <= *p && *p <= '9') || strchr("._:-/", *p)))
			return false;
	return true;
}

/* A request's model found in the registry (moe-pull's names): the slot
 * that serves its file, else a new one named NAME:TAG.  Caller without the
 * mutex.  MOE_ENOTFOUND when it is not registered. */
static int registry_slot(moe_serve *s, const char *name, slot **out, moe_error *e)
{
	moe_registry *reg;
	moe_registry_entry en;
	/* opened read-only: a name lookup; never a file path */
	int rc = moe_registry_open(&reg, true, e);
	if (rc < 0)
		return rc == MOE_EFORMAT ? rc : moe_err(e, MOE_ENOTFOUND, "model '%s' not found", name);
	rc = moe_registry_get(reg, name, &en, e);
	moe_registry_close(reg);
	if (rc < 0)
		return rc;
	char full[400];
	snprintf(full, sizeof full, "%s:%s", en.name, en.tag);
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n_slots; i++)
		if (strcmp(s->slots[i]->name, full) == 0 ||
		    (s->slots[i]->path && strcmp(s->slots[i]->path, en.path) == 0)) {
			*out = s->slots[i];
			pthread_mutex_unlock(&s->mu);
			return 0;
		}
	char spec[4200];
	if (snprintf(spec, sizeof spec, "r=%s", en.path) >= (int)sizeof spec)
		rc = moe_err(e, MOE_EINVAL, "model path too long");
	if (rc == 0)
		rc = slot_add(s, spec, e);
	if (rc == 0) {
		slot *sl = s->slots[s->n_slots - 1];
		snprintf(sl->name, sizeof sl->name, "%.127s", full);
		if ((rc = slot_start(sl, e)) < 0) {
			s->n_slots--;
			free(sl->path);
			free(sl);
		} else {
			*out = sl;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int slot_find(moe_serve *s, const char *name, slot **out, moe_error *e)
{
	*out = NULL;
	pthread_mutex_lock(&s->mu);
	if (!name || !*name) {
		*out = s->n_slots ? s->slots[0] : NULL;
		pthread_mutex_unlock(&s->mu);
		return *out ? 0 : moe_err(e, MOE_ENOTFOUND, "no model");
	}
	size_t n = strlen(name);
	/* Ollama clients add the tag ":latest" */
	size_t base = n > 7 && strcmp(name + n - 7, ":latest") == 0 ? n - 7 : n;
	for (int i = 0; i < s->n_slots; i++) {
		const char *sn = s->slots[i]->name;
		if (strcmp(sn, name) == 0 || (strlen(sn) == base && strncmp(sn, name, base) == 0) ||
		    (s->slots[i]->path && strcmp(s->slots[i]->path, name) == 0 && s->p.allow_paths)) {
			*out = s->slots[i];
			pthread_mutex_unlock(&s->mu);
			return 0;
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (reg_name_ok(name)) {
		int rc = registry_slot(s, name, out, e);
		if (rc != MOE_ENOTFOUND)
			return rc;
		if (!s->p.allow_paths || !strchr(name, '/'))
			return rc; /* the message lists the registered names */
	}
	if (!name_ok(name) && !s->p.allow_paths)
		return moe_err(e, MOE_EINVAL,
			       "model names are letters, digits and ._:- (paths need --allow-paths)");
	if (!s->p.allow_paths || !strchr(name, '/'))
		return moe_err(e, MOE_ENOTFOUND, "model '%s' not found", name);
	/* a path, allowed by the operator: a new slot named after the path */
	pthread_mutex_lock(&s->mu);
	char spec[4200];
	int rc = 0;
	if (snprintf(spec, sizeof spec, "%s=%s", "p", name) >= (int)sizeof spec)
		rc = moe_err(e, MOE_EINVAL, "model path too long");
	if (rc == 0)
		rc = slot_add(s, spec, e);
	if (rc == 0) {
		slot *sl = s->slots[s->n_slots - 1];
		snprintf(sl->name, sizeof sl->name, "%.127s", name);
		sl->from_request = true;
		if ((rc = slot_start(sl, e)) < 0) {
			s->n_slots--;
			free(sl->path);
			free(sl);
		} else {
			*out = sl;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int slot_acquire(slot *sl, moe_error *e)
{
	moe_serve *s = sl->srv;
	pthread_mutex_lock(&s->mu);
	sl->users++;
	if (sl->state == SLOT_FAILED)
		sl->state = SLOT_UNLOADED; /* try again: the file may be there now */
	pthread_cond_signal(&sl->cv);
	while ((sl->state == SLOT_UNLOADED || sl->state == SLOT_LOADING) && !s->stopping)
		pthread_cond_wait(&sl->cv, &s->mu);
	int rc = 0;
	if (s->stopping)
		rc = moe_err(e, MOE_ERANGE, "the server is shutting down");
	else if (sl->state == SLOT_FAILED)
		/* the load's own code: MOE_ERANGE (no room now) and MOE_ENOMEM
		 * (too big for the budget) have statuses of their own */
		rc = moe_err(e, sl->load_code == MOE_ERANGE || sl->load_code == MOE_ENOMEM ?
				 sl->load_code : MOE_EIO,
			     "model '%s' cannot be loaded: %s", sl->name, sl->load_error);
	if (rc < 0)
		sl->users--;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void slot_release(slot *sl)
{
	moe_serve *s = sl->srv;
	pthread_mutex_lock(&s->mu);
	sl->users--;
	sl->idle_since = moe_time_now();
	pthread_cond_signal(&sl->cv);
	pthread_mutex_unlock(&s->mu);
}

void slot_unload(slot *sl)
{
	moe_serve *s = sl->srv;
	pthread_mutex_lock(&s->mu);
	if (sl->state == SLOT_READY && !sl->evict) {
		sl->evict = true;
		pthread_cond_signal(&sl->cv);
		/* its thread unloads it, or, busy, clears the flag (keep_alive 0
		 * then unloads it when its requests end) */
		while (sl->evict && !s->stopping)
			pthread_cond_wait(&s->mem_cv, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
}

void slot_stop_all(moe_serve *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->mem_cv);
	for (int i = 0; i < s->n_slots; i++)
		pthread_cond_broadcast(&s->slots[i]->cv);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < s->n_slots; i++)
		if (s->slots[i]->has_thread)
			pthread_join(s->slots[i]->thread, NULL);
}
