/* t-experts — the streamed expert store on the demo model (share/moe-demo.uth):
 * logits bit for bit equal to the resident store's at several budgets (down
 * to one layer of experts), every policy, O_DIRECT, buffered and pread
 * I/O, a warm start from a profile; two engines in two threads sharing a
 * store of the minimum size; compute order following the arrival of reads
 * (a hook that trickles them in, last first); the prefetch rule; faults: an I/O error or a short read on the Nth
 * read, a file changed under us, a corrupted expert with verify_reads; a
 * budget below the minimum. */
#include "engine.h"
#include "experts.h"
#include "tap.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MOE_SRC_SHAREDIR
#define MOE_SRC_SHAREDIR "share"
#endif

enum { N_PROMPT = 24, N_DECODE = 16 };

/* Prefill N_PROMPT tokens at once, then decode N_DECODE one by one (all
 * logits kept), through `store` (NULL: resident). */
static int run(moe_model *m, moe_expert_store *store, float *logits, moe_error *e)
{
	moe_engine *eng;
	moe_seq *s = NULL;
	int nv = (int)m->hp.n_vocab;
	int32_t ids[N_PROMPT + N_DECODE];
	for (int i = 0; i < N_PROMPT + N_DECODE; i++)
		ids[i] = 3 + (i * 53) % 700;
	if (moe_engine_new(&eng, m, &(moe_engine_params){.kv_size = 128, .n_threads = 2, .experts = store},
			   e) < 0)
		return -1;
	int rc = moe_seq_new(&s, eng, e);
	if (rc == 0)
		rc = moe_seq_eval(s, ids, N_PROMPT, logits, true, e);
	for (int i = 0; rc == 0 && i < N_DECODE; i++)
		rc = moe_seq_eval(s, ids + N_PROMPT + i, 1, logits + (size_t)(N_PROMPT + i) * nv, false,
				  e);
	moe_seq_free(s);
	moe_engine_free(eng);
	return rc;
}

typedef struct {
	moe_model *m;
	moe_expert_store *st;
	float *out;
	int rc;
	moe_error e;
} job;

static void *thread_run(void *arg)
{
	job *j = arg;
	for (int i = 0; i < 3 && j->rc == 0; i++)
		j->rc = run(j->m, j->st, j->out, &j->e);
	return NULL;
}

/* one acquire and release of experts 0, 1 of layer `layer` (another thread) */
typedef struct {
	moe_expert_store *st;
	int layer, rc;
} one_acquire;

static void *acquire_once(void *arg)
{
	one_acquire *a = arg;
	int32_t ids[2] = {0, 1};
	moe_expert out[2];
	moe_error e = {0};
	a->rc = a->st->acquire(a->st, a->layer, ids, 2, out, &e);
	if (a->rc == 0)
		a->st->release(a->st, a->layer, ids, 2);
	return NULL;
}

static int copy_file(const char *from, const char *to)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	char buf[1 << 16];
	size_t n;
	int rc = a && b ? 0 : -1;
	while (rc == 0 && (n = fread(buf, 1, sizeof buf, a)) > 0)
		rc = fwrite(buf, 1, n, b) == n ? 0 : -1;
	if (a)
		fclose(a);
	if (b && fclose(b))
		rc = -1;
	return rc;
}

int main(void)
{
	const char *path = MOE_SRC_SHAREDIR "/moe-demo.uth";
	moe_error e = {0};
	moe_model *m;
	if (moe_model_load(&m, path, &e) < 0)
		tap_skip_all("the demo model is not available");
	size_t nl = (size_t)(N_PROMPT + N_DECODE) * m->hp.n_vocab;
	float *ref = malloc(nl * sizeof *ref), *got = malloc(nl * sizeof *got),
	      *got2 = malloc(nl * sizeof *got2);
	ok(run(m, NULL, ref, &e) == 0, "resident run");

	uint64_t fixed = moe_experts_fixed_bytes(m), slot = moe_experts_slot_bytes(m),
		 total = moe_experts_total_bytes(m);
	int n_moe = 0;
	for (uint32_t l = 0; l < m->hp.n_layer; l++)
		n_moe += m->layers[l].is_moe;
	uint64_t n_all = (uint64_t)n_moe * m->hp.n_expert;
	ok(slot % 4096 == 0 && slot * n_all >= total && fixed > 0, "sizes: slot %llu, fixed %llu",
	   (unsigned long long)slot, (unsigned long long)fixed);
	tap_diag("demo: %d MoE layers x %u experts (k %u), slot %llu B, fixed %llu B", n_moe,
		 m->hp.n_expert, m->hp.n_expert_used, (unsigned long long)slot,
		 (unsigned long long)fixed);

	/* budgets: one layer of experts (the minimum), 25%, 50%, all but 4
	 * (where the prefetch rule lets hints be read), all */
	uint64_t slots[5] = {m->hp.n_expert, n_all / 4, n_all / 2, n_all - 4, n_all};
	for (int b = 0; b < 5; b++)
		for (int pol = 0; pol < MOE_EXPERTS_N_POLICIES; pol++) {
			moe_expert_store *st;
			moe_experts_params p = {.budget = fixed + slots[b] * slot, .policy = pol};
			if (moe_experts_open(&st, m, &p, &e) < 0) {
				ok(0, "open: %s", e.msg);
				continue;
			}
			memset(got, 0, nl * sizeof *got);
			int rc = run(m, st, got, &e);
			moe_experts_stats s;
			moe_experts_get_stats(st, &s);
			ok(rc == 0 && !memcmp(got, ref, nl * sizeof *got),
			   "%s, %llu slots: logits equal the resident store's bit for bit (%s)",
			   moe_experts_policy_name(pol),
			   (unsigned long long)s.slots, rc ? e.msg : "ok");
			/* a cache for every expert is filled at open: no reads later */
			ok(s.slots == slots[b] && s.requests > 0 && s.hits <= s.requests &&
			   (b < 4 ? s.bytes_read > 0 : s.reads == 0 && s.hits == s.requests) &&
			   (b != 3 || s.prefetch_reads > 0),
			   "  stats: %llu requests, %llu hits, %llu reads, %llu prefetch reads, %llu "
			   "used, predicted %llu/%llu, direct %d uring %d",
			   (unsigned long long)s.requests, (unsigned long long)s.hits,
			   (unsigned long long)s.reads, (unsigned long long)s.prefetch_reads,
			   (unsigned long long)s.prefetch_used, (unsigned long long)s.predicted_right,
			   (unsigned long long)s.predicted, s.direct, s.uring);
			moe_experts_close(st);
		}

	/* compute order follows arrival: with reads held back and handed over
	 * one at a time, last requested first (the trickle hook), the engine
	 * computes experts in an order unlike the id order, while other reads
	 * are still in flight; the logits must not change by a bit.  And with
	 * no_overlap (every expert before any math) the same logits again. */
	for (int ov = 0; ov < 2; ov++) {
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[1] * slot, .no_overlap = ov == 1};
		if (moe_experts_open(&st, m, &p, &e) < 0) {
			ok(0, "open: %s", e.msg);
			continue;
		}
		moe_experts_inject_trickle(st, 300);
		memset(got, 0, nl * sizeof *got);
		int rc = run(m, st, got, &e);
		moe_experts_stats s;
		moe_experts_get_stats(st, &s);
		ok(rc == 0 && !memcmp(got, ref, nl * sizeof *got) &&
		   (ov ? s.overlapped == 0 : s.overlapped > 0) && s.reads > 0,
		   "%s, reads trickling in: logits equal the resident store's bit for bit (%s; %llu "
		   "reads, %llu experts computed while reads were in flight)",
		   ov ? "no_overlap" : "arrival order", rc ? e.msg : "ok", (unsigned long long)s.reads,
		   (unsigned long long)s.overlapped);
		moe_experts_close(st);
	}
	/* the seam itself: acquire_start hands over what is cached and starts
	 * the rest; acquire_wait hands the rest over as it arrives (here, with
	 * the hook, one at a time, last requested first) */
	{
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[1] * slot};
		int first = -1;
		for (uint32_t l = 0; l < m->hp.n_layer && first < 0; l++)
			if (m->layers[l].is_moe)
				first = (int)l;
		if (moe_experts_open(&st, m, &p, &e) == 0 && first >= 0) {
			int32_t ids[3] = {0, 1, 2};
			moe_expert out[3] = {0}, out2[3] = {0};
			int ready[3], order[3], n_order = 0;
			/* expert 1 cached beforehand */
			int r0 = st->acquire(st, first, ids + 1, 1, out2, &e);
			if (r0 == 0)
				st->release(st, first, ids + 1, 1);
			moe_experts_inject_trickle(st, 1000);
			int r = st->acquire_start(st, first, ids, 3, out, ready, &e);
			bool okk = r0 == 0 && r == 1 && ready[0] == 1 && out[1].gate && !out[0].gate &&
				   !out[2].gate;
			while (okk && n_order < 2) {
				int w = st->acquire_wait(st, first, ids, 3, out, ready, &e);
				okk = w == 1 && out[ready[0]].gate;
				if (okk)
					order[n_order++] = ready[0];
			}
			okk = okk && order[0] == 2 && order[1] == 0 &&
			      st->acquire_wait(st, first, ids, 3, out, ready, &e) == 0;
			/* the experts are the file's bytes */
			const moe_layer *L = &m->layers[first];
			for (int i = 0; okk && i < 3; i++)
				okk = !memcmp(out[i].up->data, L->exp_up[i].data,
					      (size_t)(L->exp_up[i].rows * L->exp_up[i].row_bytes));
			st->release(st, first, ids, 3);
			ok(okk, "acquire_start: 1 cached expert handed over, 2 reads started; acquire_wait: "
				"expert 2 then 0 (%s)", e.msg[0] ? e.msg : "ok");
			moe_experts_close(st);
		} else
			ok(0, "open: %s", e.msg);
	}

	/* the prefetch rule, driven by hand: a hint (prefetch) for an expert not
	 * cached starts its read only once more than half of the last
	 * candidates were chosen (and at least 16 were seen), and only into a
	 * free or cold slot */
	for (int sc = 0; sc < 3; sc++) {
		/* 0: right guesses then a hint, room to spare; 1: wrong guesses;
		 * 2: right guesses that fill the cache with warm experts */
		static const char *what[3] = {"right guesses, free slots: the hint is read",
					      "wrong guesses: hints are not read",
					      "right guesses, every slot warm: hints are not read"};
		uint64_t n_slots = sc == 2 ? 16 : n_all - 1;
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + n_slots * slot};
		if (moe_experts_open(&st, m, &p, &e) < 0 || n_moe < 3 || m->hp.n_expert < 8) {
			ok(0, "open: %s", e.msg);
			continue;
		}
		int moe_l[3], nl3 = 0;
		for (uint32_t l = 0; l < m->hp.n_layer && nl3 < 3; l++)
			if (m->layers[l].is_moe)
				moe_l[nl3++] = (int)l;
		bool okk = true;
		/* kept: once wrong guesses close the gate, the store clears
		 * st->prefetch after most acquires (the engine then skips the
		 * lookahead), but a hint given anyway is still taken */
		void (*hint)(moe_expert_store *, int, const int32_t *, int) = st->prefetch;
		moe_experts_stats s;
		/* 16 candidates on the first two MoE layers, two per step */
		for (int r = 0; r < 8 && okk; r++) {
			int layer = moe_l[r / 4];
			int32_t ids[2] = {2 * (r % 4), 2 * (r % 4) + 1}, guess[2] = {ids[0], ids[1]};
			moe_expert out[2];
			if (sc == 1) { /* experts 0-3 chosen, 4-7 guessed (never cached) */
				ids[0] = 2 * (r % 2), ids[1] = ids[0] + 1;
				guess[0] = ids[0] + 4, guess[1] = ids[1] + 4;
			}
			hint(st, layer, guess, 2);
			okk = st->acquire(st, layer, ids, 2, out, &e) == 0;
			st->release(st, layer, ids, 2);
		}
		moe_experts_get_stats(st, &s);
		uint64_t before = s.prefetch_reads;
		okk = okk && s.candidates == 16 && s.candidates_chosen == (sc == 1 ? 0 : 16) && before == 0;
		/* now a hint for two experts of the third layer, then their acquire */
		int32_t ids[2] = {0, 1};
		moe_expert out[2];
		hint(st, moe_l[2], ids, 2);
		okk = okk && st->acquire(st, moe_l[2], ids, 2, out, &e) == 0;
		st->release(st, moe_l[2], ids, 2);
		moe_experts_get_stats(st, &s);
		if (sc == 0)
			okk = okk && s.prefetch_reads == 2 && s.prefetch_used == 2;
		else
			okk = okk && s.prefetch_reads == 0;
		ok(okk, "prefetch rule: %s (candidates %llu, chosen %llu, prefetch reads %llu, used %llu; %s)",
		   what[sc], (unsigned long long)s.candidates, (unsigned long long)s.candidates_chosen,
		   (unsigned long long)s.prefetch_reads, (unsigned long long)s.prefetch_used,
		   e.msg[0] ? e.msg : "ok");
		moe_experts_close(st);
	}

	/* the lookahead gate: while the prefetch rule would not read hints
	 * (wrong guesses), the store leaves st->prefetch set (the engine runs
	 * the router lookahead) after about one acquire in 8 only; right
	 * guesses in those samples open the gate again, and then it is set
	 * after every acquire.  LRU over one layer of slots: layer a's experts
	 * 0,1 stay (the wrong guesses name its experts 4-7, never chosen),
	 * layer b cycles through four pairs, each uncached when hinted. */
	{
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[0] * slot, .policy = MOE_EXPERTS_LRU};
		int la = -1, lb = -1;
		for (uint32_t l = 0; l + 1 < m->hp.n_layer && la < 0; l++)
			if (m->layers[l].is_moe && m->layers[l + 1].is_moe)
				la = (int)l, lb = (int)l + 1;
		if (la >= 0 && m->hp.n_expert >= 8 && moe_experts_open(&st, m, &p, &e) == 0) {
			void (*hint)(moe_expert_store *, int, const int32_t *, int) = st->prefetch;
			int32_t a_ids[2] = {0, 1};
			moe_expert out[2];
			bool okk = hint != NULL;
			int asked[5] = {0}, rounds[5] = {0}, phase = 0, streak = 0;
			for (int r = 0; okk && r < 2000 && phase < 5; r++) {
				int32_t b_ids[2] = {2 * (r % 4), 2 * (r % 4) + 1};
				int32_t wrong[2] = {4 + 2 * (r % 2), 5 + 2 * (r % 2)}; /* of layer a */
				okk = st->acquire(st, la, a_ids, 2, out, &e) == 0;
				st->release(st, la, a_ids, 2);
				bool on = st->prefetch != NULL;
				asked[phase] += on;
				rounds[phase]++;
				/* phase 0: 40 rounds of wrong guesses, to close the gate;
				 * 1: 200 rounds of them, gate closed; 2: right guesses
				 * until st->prefetch stays set 20 rounds in a row;
				 * 3: 40 wrong again (closed); then another thread
				 * acquires once, and 4: 100 more wrong ones, with
				 * st->prefetch set after each (a shared store) */
				bool right = phase == 2;
				if (on)
					hint(st, right ? lb : la, right ? b_ids : wrong, 2);
				okk = okk && st->acquire(st, lb, b_ids, 2, out, &e) == 0;
				st->release(st, lb, b_ids, 2);
				streak = on ? streak + 1 : 0;
				if ((phase == 0 && rounds[0] == 40) || (phase == 1 && rounds[1] == 200) ||
				    (phase == 2 && streak == 20) || (phase == 3 && rounds[3] == 40) ||
				    (phase == 4 && rounds[4] == 100))
					phase++;
				if (phase == 4 && rounds[4] == 0) {
					pthread_t th;
					one_acquire oa = {st, la, -1};
					okk = okk && pthread_create(&th, NULL, acquire_once, &oa) == 0 &&
					      pthread_join(th, NULL) == 0 && oa.rc == 0;
				}
			}
			moe_experts_stats s;
			moe_experts_get_stats(st, &s);
			ok(okk && phase == 5 && asked[1] >= 200 / 8 / 3 && asked[1] <= 200 / 8 * 2 &&
			   asked[4] == 100 && s.lookahead_skips > 0 &&
			   s.lookahead_runs + s.lookahead_skips == s.requests / 2,
			   "lookahead gate: closed by wrong guesses, asked after %d of 200 acquires; reopened by "
			   "right ones after %d; shared with another thread: asked after %d of 100 (%llu asked, "
			   "%llu skipped; %s)", asked[1], rounds[2], asked[4],
			   (unsigned long long)s.lookahead_runs, (unsigned long long)s.lookahead_skips,
			   e.msg[0] ? e.msg : "ok");
			moe_experts_close(st);
		} else
			ok(0, "gate test: open: %s", e.msg);
	}

	/* warm start and pinning from a profile (expert x of layer l chosen
	 * x + l times): the cache starts full, the pinned experts stay */
	{
		char prof[] = "/tmp/t-experts-prof.XXXXXX";
		int pfd = mkstemp(prof);
		FILE *f = pfd >= 0 ? fdopen(pfd, "w") : NULL;
		if (f) {
			fprintf(f, "{\"format\": \"moe-expert-stats\", \"n_layer\": %u, \"n_expert\": %u, "
				   "\"layers\": [", m->hp.n_layer, m->hp.n_expert);
			for (uint32_t l = 0; l < m->hp.n_layer; l++) {
				fprintf(f, "%s{\"layer\": %u, \"counts\": [", l ? ", " : "", l);
				for (uint32_t x = 0; x < m->hp.n_expert; x++)
					fprintf(f, "%s%u", x ? ", " : "", x + l);
				fprintf(f, "]}");
			}
			fprintf(f, "]}\n");
			fclose(f);
		}
		moe_expert_store *st = NULL;
		moe_experts_params p = {.budget = fixed + slots[2] * slot, .profile = prof,
					.pin_fraction = 0.25};
		int rc = moe_experts_open(&st, m, &p, &e);
		moe_experts_stats s0 = {0}, s = {0};
		if (rc == 0) {
			moe_experts_get_stats(st, &s0);
			rc = run(m, st, got, &e);
			moe_experts_get_stats(st, &s);
		}
		ok(rc == 0 && !memcmp(got, ref, nl * sizeof *got) && s0.reads == 0 &&
		   s.hits > 0, "warm start + pin from a profile: same logits (%s; %llu hits of %llu)",
		   rc ? e.msg : "ok", (unsigned long long)s.hits, (unsigned long long)s.requests);
		moe_experts_close(st);
		/* a profile of another shape is refused */
		FILE *g = fopen(prof, "w");
		if (g) {
			fprintf(g, "{\"n_layer\": 99, \"n_expert\": 3, \"layers\": []}");
			fclose(g);
		}
		st = NULL;
		e = (moe_error){0};
		ok(moe_experts_open(&st, m, &p, &e) == MOE_EFORMAT && !st &&
		   strstr(e.msg, "not a moe-bench --expert-stats profile"), "a profile of another model: %s",
		   e.msg);
		/* a layer listed twice (every layer, then layer 0 again): refused
		 * by name, not counted twice into the table of every (layer,
		 * expert) (a heap overflow before; found by reading, kept here) */
		if ((g = fopen(prof, "w"))) {
			fprintf(g, "{\"n_layer\": %u, \"n_expert\": %u, \"layers\": [", m->hp.n_layer,
				m->hp.n_expert);
			for (uint32_t l = 0; l <= m->hp.n_layer; l++) {
				fprintf(g, "%s{\"layer\": %u, \"counts\": [", l ? ", " : "",
					l % m->hp.n_layer);
				for (uint32_t x = 0; x < m->hp.n_expert; x++)
					fprintf(g, "%s1", x ? ", " : "");
				fprintf(g, "]}");
			}
			fprintf(g, "]}");
			fclose(g);
		}
		st = NULL;
		e = (moe_error){0};
		ok(moe_experts_open(&st, m, &p, &e) == MOE_EFORMAT && !st &&
		   strstr(e.msg, "listed twice") && strstr(e.msg, prof),
		   "a profile listing a layer twice: %s", e.msg);
		unlink(prof);
	}

	/* lookahead 2 and 4 layers: hints for every distance asked (the demo
	 * model has fewer layers than 4: as many as there are), counted per
	 * distance; the logits do not change (hints never change a choice) */
	for (int la = 2; la <= MOE_EXPERTS_MAX_LOOKAHEAD; la += 2) {
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[2] * slot, .lookahead = la};
		int rc = moe_experts_open(&st, m, &p, &e);
		if (rc == 0)
			rc = run(m, st, got, &e);
		moe_experts_stats s = {0};
		if (st)
			moe_experts_get_stats(st, &s);
		int want = la < n_moe ? la : n_moe - 1, seen = 0;
		bool sane = s.predicted == s.predicted_at[0] && s.predicted_right == s.predicted_right_at[0];
		for (int d = 0; d < MOE_EXPERTS_MAX_LOOKAHEAD; d++) {
			seen += s.predicted_at[d] > 0;
			sane = sane && s.predicted_right_at[d] <= s.predicted_at[d] &&
			       s.candidates_chosen_at[d] <= s.candidates_at[d];
		}
		ok(rc == 0 && !memcmp(got, ref, nl * sizeof *got) && seen == want && sane,
		   "lookahead %d: same logits, predictions at %d distances (%d; %s)", la, want, seen,
		   rc ? e.msg : "ok");
		moe_experts_close(st);
	}
	/* the cache faulted in in the background: waiting for it ends, and says
	 * how long it took; a run right after open (above) waits for slots */
	{
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[3] * slot};
		int rc = moe_experts_open(&st, m, &p, &e);
		moe_experts_stats s = {0};
		if (rc == 0) {
			moe_experts_wait_populated(st);
			moe_experts_get_stats(st, &s);
		}
		ok(rc == 0 && s.populate_s > 0 && s.slots == slots[3], "population: done in %.3f s (%s)",
		   s.populate_s, rc ? e.msg : "ok");
		moe_experts_close(st);
	}

	/* buffered reads and synchronous pread */
	for (int mode = 0; mode < 2; mode++) {
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[1] * slot, .buffered = mode == 0,
					.no_uring = mode == 1, .verify_reads = true};
		int rc = moe_experts_open(&st, m, &p, &e);
		if (rc == 0)
			rc = run(m, st, got, &e);
		moe_experts_stats s = {0};
		if (st)
			moe_experts_get_stats(st, &s);
		ok(rc == 0 && !memcmp(got, ref, nl * sizeof *got) && (mode == 1 || !s.direct) &&
		   (mode == 0 || !s.uring),
		   "%s with verify_reads: same logits", mode ? "pread" : "buffered");
		moe_experts_close(st);
	}

	/* two engines in two threads share a store of one layer of experts:
	 * an expert in use is never evicted under the other */
	{
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + (slots[0] + 1) * slot};
		job j[2] = {{m, NULL, got, 0, {0}}, {m, NULL, got2, 0, {0}}};
		if (moe_experts_open(&st, m, &p, &e) == 0) {
			j[0].st = j[1].st = st;
			pthread_t th[2];
			for (int i = 0; i < 2; i++)
				pthread_create(&th[i], NULL, thread_run, &j[i]);
			for (int i = 0; i < 2; i++)
				pthread_join(th[i], NULL);
			/* with one spare slot, a thread may find the cache full of the other's experts */
			bool okk = true;
			for (int i = 0; i < 2; i++)
				okk &= j[i].rc == 0 ? !memcmp(j[i].out, ref, nl * sizeof *got)
						    : strstr(j[i].e.msg, "exhausted") != NULL;
			ok(okk, "two threads on one small store: same logits or a clear 'exhausted' (%s / %s)",
			   j[0].rc ? j[0].e.msg : "ok", j[1].rc ? j[1].e.msg : "ok");
			moe_experts_close(st);
		} else
			ok(0, "open: %s", e.msg);
		p.budget = fixed + 2 * slots[0] * slot;
		j[0].rc = j[1].rc = 0;
		if (moe_experts_open(&st, m, &p, &e) == 0) {
			j[0].st = j[1].st = st;
			pthread_t th[2];
			for (int i = 0; i < 2; i++)
				pthread_create(&th[i], NULL, thread_run, &j[i]);
			for (int i = 0; i < 2; i++)
				pthread_join(th[i], NULL);
			ok(j[0].rc == 0 && j[1].rc == 0 && !memcmp(got, ref, nl * sizeof *got) &&
			   !memcmp(got2, ref, nl * sizeof *got),
			   "two threads, two layers of slots: both bit-identical (%s)",
			   j[0].rc ? j[0].e.msg : j[1].rc ? j[1].e.msg : "ok");
			moe_experts_close(st);
		}
	}

	/* faults on the Nth read: a clear error, and every later call fails too */
	for (int kind = MOE_EXPERTS_FAULT_EIO; kind <= MOE_EXPERTS_FAULT_SHORT; kind++) {
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[0] * slot};
		moe_experts_open(&st, m, &p, &e);
		moe_experts_inject_fault(st, kind, 5);
		e = (moe_error){0};
		int rc = run(m, st, got, &e);
		const char *want = kind == MOE_EXPERTS_FAULT_EIO ? "Input/output error" : "short read";
		ok(rc == MOE_EIO && strstr(e.msg, want) && strstr(e.msg, "moe-demo.uth"),
		   "%s on read 5: MOE_EIO: %s", kind == MOE_EXPERTS_FAULT_EIO ? "EIO" : "short read",
		   e.msg);
		e = (moe_error){0};
		ok(run(m, st, got, &e) == MOE_EIO, "  and the store stays failed");
		moe_experts_close(st);
	}

	/* a copy of the model: changed under us; corrupted with verify_reads */
	char tmp[] = "/tmp/t-experts.XXXXXX";
	int fd = mkstemp(tmp);
	if (fd >= 0)
		close(fd);
	moe_model *m2 = NULL;
	if (fd < 0 || copy_file(path, tmp) < 0 || moe_model_load(&m2, tmp, &e) < 0) {
		ok(0, "copy of the model: %s", e.msg);
	} else {
		moe_expert_store *st;
		moe_experts_params p = {.budget = fixed + slots[0] * slot, .verify_reads = true};
		moe_experts_open(&st, m2, &p, &e);
		struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
		utimensat(AT_FDCWD, tmp, ts, 0);
		e = (moe_error){0};
		ok(run(m2, st, got, &e) == MOE_EIO && strstr(e.msg, "changed"),
		   "file changed under us (mtime): %s", e.msg);
		moe_experts_close(st);
		/* flip a byte of the last expert of the last layer; keep the mtime */
		moe_experts_open(&st, m2, &p, &e);
		struct stat sb;
		stat(tmp, &sb);
		const moe_layer *L = &m2->layers[m2->hp.n_layer - 1];
		off_t off = (const uint8_t *)L->exp_down[m2->hp.n_expert - 1].data - m2->file->map + 7;
		int wfd = open(tmp, O_WRONLY);
		unsigned char c = 0;
		ok(wfd >= 0 && pread(open(tmp, O_RDONLY), &c, 1, off) == 1, "read the byte");
		c ^= 0x5a;
		ok(pwrite(wfd, &c, 1, off) == 1, "corrupt one byte of an expert");
		close(wfd);
		struct timespec keep[2] = {sb.st_atim, sb.st_mtim};
		utimensat(AT_FDCWD, tmp, keep, 0);
		e = (moe_error){0};
		/* the corrupted expert is read sooner or later with one layer of slots */
		int rc = 0;
		for (int i = 0; i < 4 && rc == 0; i++)
			rc = run(m2, st, got, &e);
		ok(rc == MOE_ECHECKSUM && strstr(e.msg, "verify-reads"), "verify_reads: %s", e.msg);
		moe_experts_close(st);
		moe_model_free(m2);
	}
	unlink(tmp);

	/* a budget below the minimum names it */
	{
		moe_expert_store *st = NULL;
		moe_experts_params p = {.budget = fixed + (slots[0] - 1) * slot};
		e = (moe_error){0};
		ok(moe_experts_open(&st, m, &p, &e) == MOE_EINVAL && !st && strstr(e.msg, "minimum"),
		   "budget below one layer of experts: %s", e.msg);
		uint64_t v;
		ok(moe_experts_parse_size("1536M", 0, &v, &e) == 0 && v == 1536ull << 20 &&
		   moe_experts_parse_size("2GiB", 0, &v, &e) == 0 && v == 2ull << 30 &&
		   moe_experts_parse_size("50%", 1000, &v, &e) == 0 && v == 500 &&
		   moe_experts_parse_size("12X", 0, &v, &e) == MOE_EINVAL &&
		   moe_experts_parse_size("", 0, &v, &e) == MOE_EINVAL,
		   "sizes parse (1536M, 2GiB, 50%%; 12X and '' refused)");
	}
	free(ref), free(got), free(got2);
	moe_model_free(m);
	return tap_done();
}
