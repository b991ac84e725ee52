/* store.c — the streamed expert store (experts.h): a cache of fixed-size,
 * 4096-aligned slots filled by one read per (layer, expert), O_DIRECT through
 * io_uring, with a pread fallback.  Every miss of an acquire is submitted
 * before the first wait and experts are handed over as they land
 * (acquire_start / acquire_wait); prefetch hints start reads only under the
 * rule in pump(), never waiting; eviction (score()) takes the furthest
 * expected next use (the default), or LRU, or LFRU; a read error of any
 * kind makes the store fail every later call (a stale or partial expert is
 * never handed out). */

#include "experts.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <liburing.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SLOT_EMPTY, SLOT_LOADING, SLOT_READY };
/* predicted[key]: bit d-1 (PRED_AT(d)) when a hint d layers ahead named the
 * expert, bit 4+d-1 (CAND_AT(d)) when it was not cached then */
#define PRED_AT(d) (1u << ((d) - 1))
#define CAND_AT(d) (16u << ((d) - 1))

/* Use counts (NEXT_USE, LFRU): a use counts half after this many visits of
 * the expert's layer. */
#define HALF_LIFE 8.0
/* prefetch: at most this many reads in flight, and the history window */
enum { PF_MAX_INFLIGHT = 2, PF_WINDOW = 64, PF_MIN_HISTORY = 16 };
/* with the prefetch rule's gate closed, the router lookahead runs after
 * about one acquire in HINT_SAMPLE (see gate_hints) */
enum { HINT_SAMPLE = 8 };
/* io_uring's submission queue: more reads than that wait for a slot in it */
enum { RING_DEPTH = 64 };

typedef struct {
	int32_t key;          /* layer * n_expert + expert, or -1 */
	int32_t refs;         /* acquires not yet released */
	uint8_t state;
	uint8_t fault;        /* enum moe_experts_fault injected into this read */
	bool pinned, by_prefetch;
	bool held;            /* trickle test hook: read done, not yet handed over */
	bool pf_read;         /* its read in flight was started by a prefetch */
	uint64_t last_use;    /* tick of the last acquire */
	uint64_t last_visit;  /* visits[its layer] at the last acquire (or prediction) */
	double freq;          /* decayed use count at last_visit */
	moe_weight w[3];      /* gate, up, down bound into the slot */
} slot;

/* An expert's use history (NEXT_USE), kept whether cached or not. */
typedef struct {
	double freq;          /* decayed use count at visit */
	uint64_t visit;       /* visits[its layer] then */
} history;

typedef struct {
	uint64_t off, len;    /* the expert's bytes in the file (off 4096-aligned) */
	size_t first, count;  /* its tensors in the directory */
} span;

typedef struct {
	moe_expert_store pub; /* first: the engine's handle */
	const moe_model *m;
	char path[4096];
	int fd;
	bool direct, uring;
	struct io_uring ring;
	unsigned depth, inflight;
	size_t fixed_slots;   /* slots per registered buffer (0: none registered) */
	pthread_mutex_t mu;
	/* the cache is faulted in (and registered) by a thread of its own, a
	 * chunk at a time (see populate_main); only ready slots are used */
	pthread_t pop_thread;
	bool pop_started, pop_stop;
	pthread_cond_t pop_cv;  /* ready_slots grew */
	size_t ready_slots;     /* slots [0, ready_slots) are faulted in and registered */
	size_t pop_chunk;       /* slots per chunk (and per registered buffer) */
	int n_layer, n_expert;
	uint64_t slot_bytes;
	size_t n_slots;
	uint8_t *cache;
	size_t cache_bytes;
	slot *slots;
	int32_t *where;       /* [n_layer * n_expert] slot or -1 */
	span *spans;          /* [n_layer * n_expert]; len 0: not an expert */
	uint8_t *predicted;   /* [n_layer * n_expert] lookahead hints for the layer's
			       * next acquire: PRED_AT / CAND_AT bits per distance */
	int ahead;            /* layers ahead hints are asked for (1..MOE_EXPERTS_MAX_LOOKAHEAD) */
	uint64_t tick;        /* acquires */
	uint64_t *visits;     /* [n_layer] acquires of each layer */
	history *hist;        /* [n_layer * n_expert] */
	int cur_layer;        /* of the last acquire */
	/* prefetch (see pump): the candidates of the latest hint for each
	 * layer ahead, nearest layer first, and per distance whether the last
	 * 64 candidates were chosen (bit 1) */
	int32_t *pf_queue;    /* [n_layer * n_expert] keys */
	int pf_n;
	unsigned pf_inflight; /* prefetch reads in flight */
	uint64_t pf_hist[MOE_EXPERTS_MAX_LOOKAHEAD];
	int pf_hist_n[MOE_EXPERTS_MAX_LOOKAHEAD];
	bool hints;           /* the store takes hints at all (see gate_hints) */
	bool hint_shared;     /* acquires came from more than one thread */
	pthread_t hint_owner; /* the thread of the first acquire */
	bool hint_owned;      /* hint_owner is set */
	uint64_t hint_rng;    /* picks the acquires whose lookahead is sampled */
	struct stat st0;
	moe_experts_params p;
	int fault_kind;
	uint64_t fault_nth, n_issued;
	uint64_t trickle_us;  /* test hook: see let_one_go */
	int err;              /* sticky failure */
	char err_msg[512];
	moe_experts_stats st;
} store;

/* ------------------------------------------------------------ sizes */

static uint64_t wbytes(const moe_weight *w)
{
	return w->data ? (uint64_t)w->rows * w->row_bytes : 0;
}

uint64_t moe_experts_total_bytes(const moe_model *m)
{
	uint64_t b = 0;
	for (uint32_t il = 0; il < m->hp.n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		if (!L->is_moe)
			continue;
		for (uint32_t x = 0; x < m->hp.n_expert; x++)
			b += wbytes(&L->exp_gate[x]) + wbytes(&L->exp_up[x]) + wbytes(&L->exp_down[x]);
	}
	return b;
}

uint64_t moe_experts_fixed_bytes(const moe_model *m)
{
	uint64_t b = 0;
	for (uint64_t i = 0; i < m->file->n_tensors; i++)
		if (m->file->tensors[i].expert == MOE_UTH_NONE)
			b += m->file->tensors[i].size;
	return b;
}

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* Expert x of layer il's tensors in the directory and its bytes in the
 * file (the UTH adjacency rule puts them back to back); -1 if none. */
static int expert_span(const moe_model *m, uint32_t il, uint32_t x, span *sp)
{
	if (moe_uth_expert(m->file, (uint16_t)il, (uint16_t)x, &sp->first, &sp->count) < 0)
		return -1;
	const moe_uth_tensor *a = &m->file->tensors[sp->first], *z = &a[sp->count - 1];
	sp->off = a->offset;
	sp->len = z->offset + z->size - a->offset;
	return 0;
}

int moe_experts_span(const moe_model *m, uint32_t il, uint32_t x, uint64_t *off, uint64_t *len)
{
	span sp;
	if (expert_span(m, il, x, &sp) < 0)
		return -1;
	*off = sp.off;
	*len = sp.len;
	return 0;
}

uint64_t moe_experts_slot_bytes(const moe_model *m)
{
	uint64_t mx = 0;
	for (uint32_t il = 0; il < m->hp.n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		for (uint32_t x = 0; L->is_moe && x < m->hp.n_expert; x++) {
			uint64_t off, len;
			if (moe_experts_span(m, il, x, &off, &len) == 0)
				mx = len > mx ? len : mx;
		}
	}
	return round_up(mx, MOE_UTH_ALIGN);
}

int moe_experts_parse_size(const char *text, uint64_t model_bytes, uint64_t *out, moe_error *e)
{
	char *end;
	errno = 0;
	double v = strtod(text, &end);
	if (end == text || errno || !(v >= 0))
		return moe_err(e, MOE_EINVAL, "bad size '%s' (e.g. 1536M, 2G, 75%%)", text);
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	case '%':
		if (!model_bytes)
			return moe_err(e, MOE_EINVAL, "'%s': a percentage needs a model", text);
		mul = (double)model_bytes / 100.0;
		end++;
		break;
	default: break;
	}
	if (*end == 'i' && end[-1] != '%')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return moe_err(e, MOE_EINVAL, "bad size '%s' (e.g. 1536M, 2G, 75%%)", text);
	double b = v * mul;
	if (b >= 18e18)
		return moe_err(e, MOE_EINVAL, "size '%s' is too large", text);
	*out = (uint64_t)b;
	return 0;
}

uint64_t moe_experts_min_budget(const moe_model *m)
{
	return moe_experts_fixed_bytes(m) + (uint64_t)m->hp.n_expert * moe_experts_slot_bytes(m);
}

unsigned moe_experts_queue_depth(const moe_model *m)
{
	unsigned d = m->hp.n_expert_used + PF_MAX_INFLIGHT;
	return d < RING_DEPTH ? d : RING_DEPTH;
}

int moe_experts_parse_budget(const char *text, const moe_model *m, uint64_t *out, moe_error *e)
{
	if (!strcmp(text, "min")) {
		*out = moe_experts_min_budget(m);
		return 0;
	}
	return moe_experts_parse_size(text, moe_experts_fixed_bytes(m) + moe_experts_total_bytes(m),
				      out, e);
}

static const char *const policy_names[MOE_EXPERTS_N_POLICIES] = {
	[MOE_EXPERTS_NEXT_USE] = "nextuse", [MOE_EXPERTS_LRU] = "lru", [MOE_EXPERTS_LFRU] = "lfru"};

const char *moe_experts_policy_name(int policy)
{
	return policy >= 0 && policy < MOE_EXPERTS_N_POLICIES ? policy_names[policy] : NULL;
}

int moe_experts_policy_parse(const char *name)
{
	for (int i = 0; i < MOE_EXPERTS_N_POLICIES; i++)
		if (!strcmp(name, policy_names[i]))
			return i;
	return -1;
}

/* ------------------------------------------------------------ I/O */

static int fail(store *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(store *s, int code, const char *fmt, ...)
{
	if (!s->err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->err_msg, sizeof s->err_msg, fmt, ap);
		va_end(ap);
		s->err = code;
	}
	return s->err;
}

static void bind_slot(store *s, size_t i, int32_t key)
{
	slot *sl = &s->slots[i];
	const moe_layer *L = &s->m->layers[key / s->n_expert];
	int x = key % s->n_expert;
	const span *sp = &s->spans[key];
	const moe_weight *src[3] = {&L->exp_gate[x], &L->exp_up[x], &L->exp_down[x]};
	uint8_t *base = s->cache + i * s->slot_bytes;
	for (int j = 0; j < 3; j++) {
		sl->w[j] = *src[j];
		uint64_t off = (uint64_t)((const uint8_t *)src[j]->data - s->m->file->map);
		sl->w[j].data = base + (off - sp->off);
	}
}

static void drop_slot(store *s, size_t i)
{
	slot *sl = &s->slots[i];
	if (sl->key >= 0)
		s->where[sl->key] = -1;
	sl->key = -1;
	sl->state = SLOT_EMPTY;
	sl->by_prefetch = sl->pinned = sl->held = sl->pf_read = false;
	sl->freq = 0;
}

static uint64_t read_len(const store *s, const span *sp)
{
	uint64_t len = round_up(sp->len, MOE_UTH_ALIGN);
	return len <= s->slot_bytes ? len : s->slot_bytes;
}

/* The read of slot i ended with `res` (bytes or -errno). */
static void read_done(store *s, size_t i, int64_t res);

static void do_pread(store *s, size_t i)
{
	const span *sp = &s->spans[s->slots[i].key];
	uint8_t *buf = s->cache + i * s->slot_bytes;
	uint64_t want = read_len(s, sp), got = 0;
	double t0 = moe_time_now();
	int64_t res = 0;
	while (got < want) {
		ssize_t r = pread(s->fd, buf + got, want - got, (off_t)(sp->off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			res = -errno;
			break;
		}
		if (r == 0)
			break;
		got += (uint64_t)r;
		res = (int64_t)got;
	}
	s->st.io_wait += moe_time_now() - t0;
	read_done(s, i, res);
}

static void submit(store *s);

/* Block until one completion arrives (or none are in flight) and handle it. */
static void reap_one(store *s, bool wait)
{
	if (!s->inflight)
		return;
	struct io_uring_cqe *cqe;
	int r;
	if (wait) {
		/* reads prepared but not yet submitted would never complete */
		submit(s);
		double t0 = moe_time_now();
		do
			r = io_uring_wait_cqe(&s->ring, &cqe);
		while (r == -EINTR);
		s->st.io_wait += moe_time_now() - t0;
	} else {
		r = io_uring_peek_cqe(&s->ring, &cqe);
		if (r == -EAGAIN)
			return;
	}
	if (r < 0) {
		fail(s, MOE_EIO, "%s: waiting for expert reads: %s", s->path, strerror(-r));
		return;
	}
	size_t i = (size_t)io_uring_cqe_get_data64(cqe);
	int64_t res = cqe->res;
	io_uring_cqe_seen(&s->ring, cqe);
	s->inflight--;
	read_done(s, i, res);
}

static void start_read(store *s, size_t i)
{
	slot *sl = &s->slots[i];
	const span *sp = &s->spans[sl->key];
	sl->state = SLOT_LOADING;
	sl->fault = MOE_EXPERTS_FAULT_NONE;
	if (++s->n_issued == s->fault_nth)
		sl->fault = (uint8_t)s->fault_kind;
	s->st.reads++;
	if (!s->uring) {
		do_pread(s, i);
		return;
	}
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&s->ring))) {
		io_uring_submit(&s->ring);
		reap_one(s, true);
	}
	uint8_t *buf = s->cache + i * s->slot_bytes;
	if (s->fixed_slots)
		io_uring_prep_read_fixed(sqe, s->fd, buf, (unsigned)read_len(s, sp), sp->off,
					 (int)(i / s->fixed_slots));
	else
		io_uring_prep_read(sqe, s->fd, buf, (unsigned)read_len(s, sp), sp->off);
	io_uring_sqe_set_data64(sqe, i);
	s->inflight++;
}

static void submit(store *s)
{
	if (s->uring && io_uring_sq_ready(&s->ring)) {
		int r;
		do
			r = io_uring_submit(&s->ring);
		while (r == -EINTR);
		if (r < 0)
			fail(s, MOE_EIO, "%s: submitting expert reads: %s", s->path, strerror(-r));
	}
}

/* O_DIRECT refused at read time: reopen buffered and say so once. */
static int go_buffered(store *s)
{
	int fd = open(s->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(s, MOE_EIO, "%s: %s", s->path, strerror(errno));
	moe_log(MOE_LOG_WARN, "%s: O_DIRECT reads refused; expert reads go through the page cache",
		s->path);
	close(s->fd);
	s->fd = fd;
	s->direct = s->st.direct = false;
	return 0;
}

static void read_done(store *s, size_t i, int64_t res)
{
	slot *sl = &s->slots[i];
	if (sl->pf_read) {
		sl->pf_read = false;
		s->pf_inflight--;
	}
	if (sl->key < 0)
		return;
	const span *sp = &s->spans[sl->key];
	int layer = sl->key / s->n_expert, x = sl->key % s->n_expert;
	if (sl->fault == MOE_EXPERTS_FAULT_EIO)
		res = -EIO;
	else if (sl->fault == MOE_EXPERTS_FAULT_SHORT && res > 0)
		res = (int64_t)(sp->len / 2);
	if (res == -EINVAL && s->direct) {
		/* O_DIRECT refused by this file system: read it again buffered */
		if (go_buffered(s) == 0)
			start_read(s, i), submit(s);
		return;
	}
	if (res < 0) {
		fail(s, MOE_EIO, "%s: reading expert %d of layer %d (%llu bytes at %llu): %s", s->path, x,
		     layer, (unsigned long long)sp->len, (unsigned long long)sp->off, strerror((int)-res));
		drop_slot(s, i);
		return;
	}
	if ((uint64_t)res < sp->len) {
		fail(s, MOE_EIO,
		     "%s: short read of expert %d of layer %d: %lld of %llu bytes at %llu (file truncated?)",
		     s->path, x, layer, (long long)res, (unsigned long long)sp->len,
		     (unsigned long long)sp->off);
		drop_slot(s, i);
		return;
	}
	s->st.bytes_read += sp->len;
	if (!s->direct)
		posix_fadvise(s->fd, (off_t)sp->off, (off_t)sp->len, POSIX_FADV_DONTNEED);
	if (s->p.verify_reads) {
		const uint8_t *base = s->cache + i * s->slot_bytes;
		for (size_t t = sp->first; t < sp->first + sp->count; t++) {
			const moe_uth_tensor *ut = &s->m->file->tensors[t];
			moe_error e = {0};
			if (moe_uth_verify_tensor(s->m->file, ut, base + (ut->offset - sp->off), &e) < 0) {
				fail(s, MOE_ECHECKSUM, "%s: --verify-reads: %s", s->path, e.msg);
				drop_slot(s, i);
				return;
			}
		}
	}
	if (s->trickle_us && sl->refs)
		sl->held = true; /* handed over later by let_one_go */
	else
		sl->state = SLOT_READY;
}

/* ------------------------------------------------------------ policy */

/* The slot's decayed use count: uses per visit of its own layer, since the
 * expert can be chosen only when its layer comes round (once per step). */
static double decayed_freq(const store *s, const slot *sl)
{
	uint64_t age = s->visits[sl->key / s->n_expert] - sl->last_visit;
	return sl->freq * exp2(-(double)age / HALF_LIFE);
}

/* The expert's estimated chance of being chosen at its layer's next visit,
 * from its whole history (kept when it is evicted): a use count decayed
 * per visit of its layer.  A stream of uses with chance p per visit sums,
 * so decayed, to p / (1 - 2^(-1/HALF_LIFE)): that factor turns it back. */
static double use_chance(const store *s, int32_t key)
{
	const history *h = &s->hist[key];
	uint64_t age = s->visits[key / s->n_expert] - h->visit;
	double p = h->freq * exp2(-(double)age / HALF_LIFE) * (1.0 - exp2(-1.0 / HALF_LIFE));
	return p < 1.0 ? p : 1.0;
}

/* NEXT_USE: minus the expected number of layer visits (acquires) until the
 * expert is needed again, the quantity an oracle evicts by (the furthest
 * next use first, Belady).  Layers run in a loop: an expert of the layer d
 * acquires ahead (1..n_layer) with chance p per visit is next needed after
 * d + n_layer (1/p - 1) acquires on average.  A prefetched expert whose
 * layer has not come round yet counts at least the prefetch rule's bar
 * (more than half of such candidates are chosen). */
static double next_use_score(const store *s, const slot *sl)
{
	int layer = sl->key / s->n_expert;
	int d = (layer - s->cur_layer - 1 + 2 * s->n_layer) % s->n_layer + 1;
	double p = use_chance(s, sl->key);
	if (sl->by_prefetch && s->visits[layer] == sl->last_visit && p < 0.5)
		p = 0.5;
	if (p <= 0)
		return -HUGE_VAL;
	return -((double)d + (double)s->n_layer * (1.0 / p - 1.0));
}

/* Eviction order, lowest first (ties: the least recently used).
 * NEXT_USE: next_use_score.  LRU: the last acquire.  LFRU, weighted by
 * layer recurrence: the decayed use count (about 12 x the chance of being
 * chosen at the layer's next visit), raised by up to a quarter for experts
 * whose layer comes round sooner.  Layers run in a loop, so of two experts
 * equally likely to be chosen, the one of the layer that just ran is needed
 * last: evicting it is what an oracle would do, and it stops the thrashing
 * of plain recency when the cache holds less than one step's experts. */
static double score(const store *s, const slot *sl)
{
	if (s->p.policy == MOE_EXPERTS_LRU)
		return (double)sl->last_use;
	if (s->p.policy == MOE_EXPERTS_NEXT_USE)
		return next_use_score(s, sl);
	int layer = sl->key / s->n_expert;
	int d = (layer - s->cur_layer - 1 + 2 * s->n_layer) % s->n_layer; /* 0: the next layer */
	double f = decayed_freq(s, sl);
	if (sl->by_prefetch) /* a prediction counts as a use until its layer has come round */
		f = s->visits[layer] == sl->last_visit ? 1.0 : 0.0;
	return f * (1.0 + 0.25 * (1.0 - (double)d / s->n_layer));
}

static void touch(store *s, slot *sl)
{
	if (sl->key >= 0 && sl->state != SLOT_EMPTY && sl->last_use)
		sl->freq = decayed_freq(s, sl) + 1;
	else
		sl->freq = 1;
	sl->last_use = s->tick;
	sl->last_visit = s->visits[sl->key / s->n_expert];
	history *h = &s->hist[sl->key];
	h->freq = use_chance(s, sl->key) / (1.0 - exp2(-1.0 / HALF_LIFE)) + 1;
	h->visit = sl->last_visit;
}

/* A slot to (re)fill: empty first, else the lowest score among those not
 * acquired, not in flight and not pinned; -1 if none. */
static ssize_t victim(store *s)
{
	ssize_t best = -1;
	double bs = 0;
	for (size_t i = 0; i < s->ready_slots; i++) {
		slot *sl = &s->slots[i];
		if (sl->state == SLOT_EMPTY)
			return (ssize_t)i;
		if (sl->refs || sl->state == SLOT_LOADING || sl->pinned)
			continue;
		double sc = score(s, sl);
		if (best < 0 || sc < bs || (sc == bs && sl->last_use < s->slots[best].last_use))
			best = (ssize_t)i, bs = sc;
	}
	return best;
}

/* A slot for key, waiting for in-flight reads to finish if all are busy. */
static int claim(store *s, int32_t key, size_t *out)
{
	ssize_t v;
	while ((v = victim(s)) < 0) {
		if (s->inflight) {
			reap_one(s, true);
		} else if (s->ready_slots < s->n_slots) {
			/* the rest of the cache is still being faulted in */
			double t0 = moe_time_now();
			pthread_cond_wait(&s->pop_cv, &s->mu);
			s->st.populate_wait += moe_time_now() - t0;
		} else {
			return fail(s, MOE_EINVAL,
				    "expert cache exhausted: all %zu slots are in use (raise --mem-budget)",
				    s->n_slots);
		}
		if (s->err)
			return s->err;
	}
	drop_slot(s, (size_t)v);
	s->slots[v].key = key;
	s->where[key] = (int32_t)v;
	bind_slot(s, (size_t)v, key);
	*out = (size_t)v;
	return 0;
}

static int check_file(store *s)
{
	struct stat st;
	if (fstat(s->fd, &st) < 0)
		return fail(s, MOE_EIO, "%s: %s", s->path, strerror(errno));
	if (st.st_size != s->st0.st_size || st.st_mtim.tv_sec != s->st0.st_mtim.tv_sec ||
	    st.st_mtim.tv_nsec != s->st0.st_mtim.tv_nsec)
		return fail(s, MOE_EIO, "%s: the model file changed while in use (size or mtime)",
			    s->path);
	return 0;
}

/* ------------------------------------------------------------ the seam */

static void remember(store *s, int d, bool chosen)
{
	s->st.candidates++;
	s->st.candidates_chosen += chosen;
	s->st.candidates_at[d - 1]++;
	s->st.candidates_chosen_at[d - 1] += chosen;
	s->pf_hist[d - 1] = s->pf_hist[d - 1] << 1 | chosen;
	if (s->pf_hist_n[d - 1] < PF_WINDOW)
		s->pf_hist_n[d - 1]++;
}

/* The layer's lookahead predictions against what it chose: the accuracy
 * statistics (per distance), and the history the prefetch rule (pump)
 * reads. */
static void score_predictions(store *s, int32_t base, const int32_t *ids, int n)
{
	uint8_t *pr = s->predicted + base;
	for (int i = 0; i < n; i++) {
		for (int d = 1; d <= s->ahead; d++) {
			if (pr[ids[i]] & PRED_AT(d)) {
				s->st.predicted_right_at[d - 1]++;
				if (d == 1)
					s->st.predicted_right++;
			}
			if (pr[ids[i]] & CAND_AT(d))
				remember(s, d, true);
		}
		pr[ids[i]] = 0;
	}
	for (int x = 0; x < s->n_expert; x++) {
		for (int d = 1; d <= s->ahead; d++)
			if (pr[x] & CAND_AT(d))
				remember(s, d, false);
		pr[x] = 0;
	}
}

/* Whether the prefetch rule would read a candidate at distance d now (its
 * history too short to judge, or more than half of it chosen). */
static bool gate_open(const store *s, int d)
{
	int n = s->pf_hist_n[d - 1], used = __builtin_popcountll(s->pf_hist[d - 1]);
	return n < PF_MIN_HISTORY || 2 * used > n;
}

static void st_prefetch(moe_expert_store *pub, int layer, const int32_t *ids, int n);

/* The engine runs the router lookahead after an acquire only while
 * pub.prefetch is set (it reads it right after acquire_start returns), and
 * the lookahead costs a router product per layer ahead (about 0.3 ms of
 * CPU a token on olmoe-m, its routers' weights coming from memory).  Its
 * hints are read only while the gate is open at
 * some distance; closed (nearly always on olmoe-m, whose misses the next
 * routers rarely foresee), the hints would only feed the statistics and
 * the history that may open the gate again.  So while it is closed, ask
 * for the lookahead after one acquire in HINT_SAMPLE, picked at random
 * (a fixed period could keep landing on the same layers): the history
 * still moves, at that fraction of the cost, and the accuracy figures
 * become a sample.  The engine reads pub.prefetch unlocked, twice (to
 * decide, then to call it), so it is cleared only while every acquire has
 * come from one thread: an engine in another thread could find it cleared
 * between its two reads.  From the first acquire of a second thread on, it
 * stays set (engines sharing a store always run the lookahead). */
static void gate_hints(store *s)
{
	if (!s->hints)
		return;
	pthread_t me = pthread_self();
	if (!s->hint_owned)
		s->hint_owner = me, s->hint_owned = true;
	else if (!pthread_equal(s->hint_owner, me))
		s->hint_shared = true;
	bool want = s->hint_shared;
	for (int d = 1; d <= s->ahead && !want; d++)
		want = gate_open(s, d);
	if (!want) {
		s->hint_rng = s->hint_rng * 6364136223846793005ull + 1442695040888963407ull;
		want = (s->hint_rng >> 33) % HINT_SAMPLE == 0;
	}
	s->st.lookahead_runs += want;
	s->st.lookahead_skips += !want;
	__atomic_store_n(&s->pub.prefetch, want ? st_prefetch : NULL, __ATOMIC_RELAXED);
}

/* Layers from the last acquire's to `layer` (1: the next), within
 * 1..ahead: a hint for the layer just acquired (engines sharing the store,
 * or a caller of its own) counts as one for the next layer. */
static int distance(const store *s, int layer)
{
	int d = (layer - s->cur_layer + s->n_layer) % s->n_layer;
	return d < 1 ? 1 : d > s->ahead ? s->ahead : d;
}

/* Drop the queued candidates of `layer`. */
static void unqueue(store *s, int layer)
{
	int k = 0;
	for (int i = 0; i < s->pf_n; i++)
		if (s->pf_queue[i] / s->n_expert != layer)
			s->pf_queue[k++] = s->pf_queue[i];
	s->pf_n = k;
}

static void pump(store *s);

/* Give back every expert of ids this caller holds (an acquire that failed). */
static void give_back(store *s, int32_t base, const int32_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		int32_t w = s->where[base + ids[i]];
		if (w >= 0 && s->slots[w].refs > 0)
			s->slots[w].refs--;
	}
}

/* Hand over every expert of ids that is in memory and not yet in out[]
 * (its index to ready[], when given); returns how many, *pending how many
 * are still being read. */
static int collect(store *s, int32_t base, const int32_t *ids, int n, moe_expert *out, int *ready,
		   int *pending)
{
	int r = 0, p = 0;
	for (int i = 0; i < n && !s->err; i++) {
		if (out[i].gate)
			continue;
		int32_t w = s->where[base + ids[i]];
		if (w < 0) {
			fail(s, MOE_EINTERNAL, "expert %d of layer %d lost while loading", ids[i],
			     base / s->n_expert);
			break;
		}
		slot *sl = &s->slots[w];
		if (sl->state != SLOT_READY) {
			p++;
			continue;
		}
		out[i] = (moe_expert){&sl->w[0], &sl->w[1], &sl->w[2]};
		if (ready)
			ready[r] = i;
		r++;
	}
	*pending = p;
	if (p && ready) /* the caller computes these while the rest are read */
		s->st.overlapped += (uint64_t)r;
	return r;
}

/* Test hook (trickle): reads of acquired experts are held back when they
 * complete and handed over one at a time, the last requested first, after
 * a delay, as a slow disk would.  True if one was let go. */
static bool let_one_go(store *s, int32_t base, const int32_t *ids, int n, const moe_expert *out)
{
	/* all of them read first, so the order is the hook's, not the disk's */
	for (int i = 0; i < n; i++) {
		int32_t w = s->where[base + ids[i]];
		if (!out[i].gate && w >= 0 && s->slots[w].state == SLOT_LOADING && !s->slots[w].held)
			return false;
	}
	for (int i = n - 1; i >= 0; i--) {
		int32_t w = s->where[base + ids[i]];
		if (out[i].gate || w < 0 || !s->slots[w].held)
			continue;
		double t0 = moe_time_now();
		usleep((useconds_t)s->trickle_us);
		s->st.io_wait += moe_time_now() - t0;
		s->slots[w].held = false;
		s->slots[w].state = SLOT_READY;
		return true;
	}
	return false;
}

/* Take every expert of ids, start the missing reads at once, hand over
 * those in memory. */
static int st_acquire_start(moe_expert_store *pub, int layer, const int32_t *ids, int n,
			    moe_expert *out, int *ready, moe_error *e)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	s->tick++;
	s->visits[layer]++;
	s->cur_layer = layer;
	int32_t base = layer * s->n_expert;
	score_predictions(s, base, ids, n);
	unqueue(s, layer); /* hints for this acquire: too late now */
	gate_hints(s);
	int misses = 0;
	/* hits (and reads already in flight) first, so that no victim is one of ours */
	for (int i = 0; i < n && !s->err; i++) {
		int32_t w = s->where[base + ids[i]];
		if (w < 0) {
			misses++;
			continue;
		}
		slot *sl = &s->slots[w];
		s->st.hits++;
		if (sl->pf_read) { /* a prefetch this step waits for: a demand read now */
			sl->pf_read = false;
			s->pf_inflight--;
		}
		if (sl->by_prefetch) {
			s->st.hits_prefetched++;
			s->st.prefetch_used++;
			sl->by_prefetch = false;
		}
		sl->refs++;
		touch(s, sl);
	}
	if (misses && !s->err)
		check_file(s);
	for (int i = 0; i < n && !s->err && misses; i++) {
		int32_t key = base + ids[i];
		if (s->where[key] >= 0)
			continue;
		size_t v;
		if (claim(s, key, &v) < 0)
			break;
		slot *sl = &s->slots[v];
		sl->refs++;
		touch(s, sl);
		start_read(s, v);
	}
	submit(s);
	s->st.requests += (uint64_t)n;
	/* completions that are already there cost nothing to take */
	while (s->uring && s->inflight && !s->err) {
		unsigned before = s->inflight;
		reap_one(s, false);
		if (s->inflight == before)
			break;
	}
	int pending, r = collect(s, base, ids, n, out, ready, &pending);
	int rc = s->err;
	if (rc) {
		give_back(s, base, ids, n);
		r = moe_err(e, rc, "%s", s->err_msg);
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* Block until at least one more expert of ids is in memory; hand it over. */
static int st_acquire_wait(moe_expert_store *pub, int layer, const int32_t *ids, int n,
			   moe_expert *out, int *ready, moe_error *e)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	int32_t base = layer * s->n_expert;
	int r = 0, pending = 1;
	while (!s->err) {
		r = collect(s, base, ids, n, out, ready, &pending);
		if (r || !pending || s->err)
			break;
		if (s->trickle_us && let_one_go(s, base, ids, n, out))
			continue;
		if (!s->inflight) {
			fail(s, MOE_EINTERNAL, "waiting for experts of layer %d with no read in flight",
			     layer);
			break;
		}
		reap_one(s, true);
	}
	if (!s->err && !pending)
		pump(s); /* the layer's last read is in: the disk is free for the next layer's */
	int rc = s->err;
	if (rc) {
		give_back(s, base, ids, n);
		r = moe_err(e, rc, "%s", s->err_msg);
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* Both halves at once, for callers that want every expert before computing. */
static int st_acquire(moe_expert_store *pub, int layer, const int32_t *ids, int n, moe_expert *out,
		      moe_error *e)
{
	memset(out, 0, (size_t)n * sizeof *out);
	int r = st_acquire_start(pub, layer, ids, n, out, NULL, e);
	for (int got = r; r >= 0 && got < n; got += r)
		if ((r = st_acquire_wait(pub, layer, ids, n, out, NULL, e)) == 0)
			r = moe_err(e, MOE_EINTERNAL, "the expert store lost an expert of layer %d",
				    layer);
	return r < 0 ? r : 0;
}

static void st_release(moe_expert_store *pub, int layer, const int32_t *ids, int n)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < n; i++) {
		int32_t w = s->where[layer * s->n_expert + ids[i]];
		if (w >= 0 && s->slots[w].refs > 0)
			s->slots[w].refs--;
	}
	/* hand finished prefetches over without waiting */
	while (s->uring && s->inflight && !s->err) {
		unsigned before = s->inflight;
		reap_one(s, false);
		if (s->inflight == before)
			break;
	}
	pump(s);
	pthread_mutex_unlock(&s->mu);
}

/* A slot a prediction may take: empty, or holding an expert that is cold —
 * not used in the last HALF_LIFE visits of its layer and worth less than
 * half a use (a stale prediction counts nothing).  A warm expert is never
 * evicted for a guess.  -1 if none. */
static ssize_t cold_slot(store *s)
{
	ssize_t v = victim(s);
	if (v < 0)
		return -1;
	const slot *sl = &s->slots[v];
	if (sl->state == SLOT_EMPTY)
		return v;
	int layer = sl->key / s->n_expert;
	if (sl->by_prefetch)
		return s->visits[layer] != sl->last_visit ? v : -1;
	bool old = s->visits[layer] - sl->last_visit >= (uint64_t)HALF_LIFE;
	return old && decayed_freq(s, sl) < 0.5 ? v : -1;
}

/* The prefetch rule.  Router lookahead predicts about two thirds of a
 * layer's experts, but most right guesses are cached already; of the reads
 * an unconditional prefetch started only a tenth were used, and they
 * delayed the reads a layer was waiting for.  So start a candidate's read
 * only while more than half of the last 64 candidates (predicted and not
 * cached) at its distance were chosen, only when no read that a layer waits
 * for is in flight, at most PF_MAX_INFLIGHT at a time, nearest layer first,
 * and only into a cold slot.  Called whenever that may have changed: a
 * hint, a layer's last arrival, a release.  The reads of the next layers'
 * experts then run while this layer's last experts compute (double
 * buffering across layers). */
static void pump(store *s)
{
	if (!s->uring || s->err)
		return;
	int k = 0, i = 0;
	for (; i < s->pf_n && s->inflight == s->pf_inflight && s->pf_inflight < PF_MAX_INFLIGHT &&
	       !s->err; i++) {
		int32_t key = s->pf_queue[i];
		int d = distance(s, key / s->n_expert);
		if (s->where[key] >= 0)
			continue;
		if (s->pf_hist_n[d - 1] < PF_MIN_HISTORY || !gate_open(s, d)) {
			s->pf_queue[k++] = key; /* not now: its distance does not pay lately */
			continue;
		}
		ssize_t v = cold_slot(s);
		if (v < 0) {
			i = s->pf_n; /* nothing cold now: the hints are dropped */
			k = 0;
			break;
		}
		drop_slot(s, (size_t)v);
		slot *sl = &s->slots[v];
		sl->key = key;
		s->where[key] = (int32_t)v;
		bind_slot(s, (size_t)v, key);
		sl->by_prefetch = true;
		sl->last_use = s->tick;
		sl->last_visit = s->visits[key / s->n_expert];
		s->st.prefetch_reads++;
		start_read(s, (size_t)v);
		sl->pf_read = true;
		s->pf_inflight++;
	}
	/* keep what was not reached */
	memmove(s->pf_queue + k, s->pf_queue + i, (size_t)(s->pf_n - i) * sizeof *s->pf_queue);
	s->pf_n = k + s->pf_n - i;
	submit(s);
}

/* A hint (router lookahead): remember the candidates in place of the
 * layer's earlier ones, start what the rule allows now, never wait. */
static void st_prefetch(moe_expert_store *pub, int layer, const int32_t *ids, int n)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	int32_t base = layer * s->n_expert;
	int d = distance(s, layer);
	unqueue(s, layer);
	for (int i = 0; i < n; i++) {
		int32_t key = base + ids[i];
		bool cached = s->where[key] >= 0;
		s->predicted[key] |= (uint8_t)(PRED_AT(d) | (cached ? 0 : CAND_AT(d)));
		s->st.predicted_at[d - 1]++;
		if (d == 1)
			s->st.predicted++;
		if (cached)
			continue;
		/* in order: the nearer layers' candidates stay ahead of these */
		int at = s->pf_n;
		while (at > 0 && distance(s, s->pf_queue[at - 1] / s->n_expert) > d)
			s->pf_queue[at] = s->pf_queue[at - 1], at--;
		s->pf_queue[at] = key;
		s->pf_n++;
	}
	pump(s);
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ warm start */

typedef struct {
	int32_t key;
	double count;
} hot;

static int by_count(const void *a, const void *b)
{
	const hot *x = a, *y = b;
	return x->count < y->count ? 1 : x->count > y->count ? -1 : (x->key > y->key) - (x->key < y->key);
}

static int warm_start(store *s, moe_error *e)
{
	json_error_t je;
	json_t *j = json_load_file(s->p.profile, 0, &je);
	if (!j)
		return moe_err(e, MOE_EFORMAT, "%s: line %d: %s", s->p.profile, je.line, je.text);
	int rc = 0;
	json_t *layers = json_object_get(j, "layers");
	hot *h = calloc((size_t)s->n_layer * (size_t)s->n_expert, sizeof *h);
	bool *seen = calloc((size_t)s->n_layer, sizeof *seen); /* h holds one entry per (layer, expert) */
	size_t nh = 0;
	if (!h || !seen) {
		free(h);
		free(seen);
		json_decref(j);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	if (!json_is_array(layers) ||
	    json_integer_value(json_object_get(j, "n_expert")) != s->n_expert ||
	    json_integer_value(json_object_get(j, "n_layer")) != s->n_layer) {
		rc = moe_err(e, MOE_EFORMAT,
			     "%s: not a moe-bench --expert-stats profile of this model (n_layer %d, "
			     "n_expert %d)", s->p.profile, s->n_layer, s->n_expert);
		goto out;
	}
	size_t li;
	json_t *lo;
	json_array_foreach(layers, li, lo) {
		json_int_t l = json_integer_value(json_object_get(lo, "layer"));
		json_t *c = json_object_get(lo, "counts");
		if (l < 0 || l >= s->n_layer || !json_is_array(c) ||
		    json_array_size(c) != (size_t)s->n_expert) {
			rc = moe_err(e, MOE_EFORMAT, "%s: layers[%zu]: bad layer or counts", s->p.profile,
				     li);
			goto out;
		}
		if (seen[l]) {
			rc = moe_err(e, MOE_EFORMAT, "%s: layers[%zu]: layer %lld listed twice",
				     s->p.profile, li, (long long)l);
			goto out;
		}
		seen[l] = true;
		/* only the cache's first contents: taken as NEXT_USE's prior
		 * for each expert's chance (its share of the layer's tokens),
		 * the counts of another run of random ids raised the misses of
		 * olmoe-m at 1536M from 3.30 to 7.88 per token (simulated):
		 * which experts a sequence keeps using depends on the sequence */
		for (int x = 0; x < s->n_expert; x++) {
			int32_t key = (int32_t)l * s->n_expert + x;
			if (s->spans[key].len)
				h[nh++] = (hot){key, json_number_value(json_array_get(c, (size_t)x))};
		}
	}
	qsort(h, nh, sizeof *h, by_count);
	size_t n = nh < s->n_slots ? nh : s->n_slots;
	size_t pin = (size_t)(s->p.pin_fraction * (double)s->n_slots);
	if (pin > s->n_slots - (size_t)s->n_expert)
		pin = s->n_slots - (size_t)s->n_expert; /* one layer must stay free */
	for (size_t i = 0; i < n && !s->err; i++) {
		if (h[i].count <= 0)
			break;
		size_t v;
		if (claim(s, h[i].key, &v) < 0)
			break;
		s->slots[v].pinned = i < pin;
		s->slots[v].freq = 0;
		start_read(s, v);
	}
	submit(s);
	while (s->inflight && !s->err)
		reap_one(s, true);
	if (s->err)
		rc = moe_err(e, s->err, "%s", s->err_msg);
out:
	free(h);
	free(seen);
	json_decref(j);
	return rc;
}

/* Everything fits: read every expert now, in file order, so that running
 * costs what the resident store costs. */
static int load_all(store *s, moe_error *e)
{
	size_t nk = (size_t)s->n_layer * (size_t)s->n_expert;
	for (size_t k = 0; k < nk && !s->err; k++) {
		size_t v;
		if (!s->spans[k].len || claim(s, (int32_t)k, &v) < 0)
			continue;
		start_read(s, v);
		if (s->inflight >= s->depth / 2)
			submit(s), reap_one(s, true);
	}
	submit(s);
	while (s->inflight && !s->err)
		reap_one(s, true);
	return s->err ? moe_err(e, s->err, "%s", s->err_msg) : 0;
}

/* ------------------------------------------------------------ open/close */

/* Fault memory in (zeroed, as huge pages where the kernel gives them). */
static void populate(uint8_t *p, size_t bytes)
{
#ifdef MADV_POPULATE_WRITE
	if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	for (size_t o = 0; o < bytes; o += 4096)
		((volatile uint8_t *)p)[o] = 0;
}

/* The cache's memory is faulted in before any read goes into it: a read
 * into a fresh slot would zero and pin its pages inside io_uring_enter, in
 * the computing thread, about a millisecond per expert of a few MiB.  Done
 * all at open, that cost the run its first seconds (7 s for the 1.2 GiB
 * cache of olmoe-m at 1536M on the test VM, where first touch runs at about
 * 180 MB/s), so this thread does it a chunk at a time in the background:
 * fault a chunk in, register it with io_uring as a fixed buffer, then make
 * its slots usable (ready_slots).  Until then the store uses the ready
 * slots only, and an acquire that needs more waits (blocking) for the next
 * chunk.  The budget is the cache's size whether touched early or late. */
static void *populate_main(void *arg)
{
	store *s = arg;
	double t0 = moe_time_now();
	for (size_t first = 0; first < s->n_slots; first += s->pop_chunk) {
		size_t n = s->n_slots - first < s->pop_chunk ? s->n_slots - first : s->pop_chunk;
		pthread_mutex_lock(&s->mu);
		bool stop = s->pop_stop;
		pthread_mutex_unlock(&s->mu);
		if (stop)
			break;
		uint8_t *p = s->cache + first * s->slot_bytes;
		populate(p, n * s->slot_bytes);
		pthread_mutex_lock(&s->mu);
		if (s->fixed_slots) {
			struct iovec iov = {p, n * s->slot_bytes};
			int r = io_uring_register_buffers_update_tag(&s->ring, (unsigned)(first / s->pop_chunk),
								     &iov, NULL, 1);
			if (r < 0) {
				moe_log(MOE_LOG_DEBUG, "io_uring cannot register the expert cache (%s): "
					"reads pin pages each time", strerror(-r));
				s->fixed_slots = 0;
			}
		}
		s->ready_slots = first + n;
		if (s->ready_slots == s->n_slots)
			s->st.populate_s = moe_time_now() - t0;
		pthread_cond_broadcast(&s->pop_cv);
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

/* Bring the non-expert tensors into the page cache, exactly and now.
 * MADV_WILLNEED reads at most the device's readahead size per call (8 MiB
 * here), so most of a large tensor such as the token embeddings stayed on
 * disk and each new token's row was a major fault, a synchronous disk read
 * in the middle of the step.  Buffered reads on a descriptor marked
 * POSIX_FADV_RANDOM read what is asked and no neighbouring expert pages;
 * MADV_POPULATE_READ then maps the pages (no minor fault per page in the
 * first step).  Failures only cost speed: the map still faults them in. */
static void read_dense(store *s)
{
	const moe_uth *u = s->m->file;
	int fd = open(s->path, O_RDONLY | O_CLOEXEC);
	size_t chunk = 4u << 20;
	uint8_t *buf = fd >= 0 ? malloc(chunk) : NULL;
	if (buf)
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	for (uint64_t t = 0; buf && t < u->n_tensors; t++) {
		const moe_uth_tensor *ut = &u->tensors[t];
		if (ut->expert != MOE_UTH_NONE || !ut->size)
			continue;
		uint64_t off = ut->offset / 4096 * 4096, end = round_up(ut->offset + ut->size, 4096);
		for (uint64_t o = off; o < end;) {
			ssize_t r = pread(fd, buf, end - o < chunk ? end - o : chunk, (off_t)o);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			o += (uint64_t)r;
		}
#ifdef MADV_POPULATE_READ
		madvise((void *)(u->map + off), end - off, MADV_POPULATE_READ);
#endif
	}
	free(buf);
	if (fd >= 0)
		close(fd);
}

/* A table of fixed buffers for the cache, one per chunk of slots (each at
 * most 1 GiB, the kernel's limit per buffer), filled as populate_main
 * faults the chunks in: a read into a registered buffer does not pin and
 * unpin the slot's pages itself.  Registration locks the pages; where
 * RLIMIT_MEMLOCK (or the kernel) refuses, reads pin per read. */
static void register_cache(store *s)
{
	size_t nb = (s->n_slots + s->pop_chunk - 1) / s->pop_chunk;
	int r = io_uring_register_buffers_sparse(&s->ring, (unsigned)nb);
	if (r < 0)
		moe_log(MOE_LOG_DEBUG, "io_uring cannot register the expert cache (%s): reads pin pages each time",
			strerror(-r));
	else
		s->fixed_slots = s->pop_chunk;
}

void moe_experts_close(moe_expert_store *pub)
{
	store *s = (store *)pub;
	if (!s)
		return;
	if (s->pop_started) {
		pthread_mutex_lock(&s->mu);
		s->pop_stop = true;
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->pop_thread, NULL);
	}
	if (s->uring) {
		while (s->inflight) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&s->ring, &cqe) < 0)
				break;
			io_uring_cqe_seen(&s->ring, cqe);
			s->inflight--;
		}
		io_uring_queue_exit(&s->ring);
	}
	if (s->fd >= 0)
		close(s->fd);
	if (s->cache)
		munmap(s->cache, s->cache_bytes);
	free(s->slots);
	free(s->where);
	free(s->spans);
	free(s->predicted);
	free(s->visits);
	free(s->hist);
	free(s->pf_queue);
	pthread_cond_destroy(&s->pop_cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static void env_fault(store *s)
{
	const char *f = getenv("MOE_TEST_IO_FAULT");
	if (!f)
		return;
	unsigned long long n = 0;
	if (sscanf(f, "eio:%llu", &n) == 1)
		s->fault_kind = MOE_EXPERTS_FAULT_EIO;
	else if (sscanf(f, "short:%llu", &n) == 1)
		s->fault_kind = MOE_EXPERTS_FAULT_SHORT;
	s->fault_nth = n;
}

static void env_trickle(store *s)
{
	const char *t = getenv("MOE_TEST_IO_TRICKLE");
	unsigned long long us;
	if (t && sscanf(t, "%llu", &us) == 1)
		s->trickle_us = us;
}

int moe_experts_open(moe_expert_store **out, const moe_model *m, const moe_experts_params *p,
		     moe_error *e)
{
	*out = NULL;
	const moe_hparams *hp = &m->hp;
	if (!hp->n_expert)
		return moe_err(e, MOE_EINVAL, "%s: a dense model has no experts to stream",
			       m->file->path);
	store *s = calloc(1, sizeof *s);
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->pop_cv, NULL);
	s->fd = -1;
	s->m = m;
	s->p = *p;
	s->pub = (moe_expert_store){.acquire = st_acquire, .release = st_release, .impl = s,
				    .prefetch = p->no_prefetch ? NULL : st_prefetch};
	s->hints = !p->no_prefetch;
	s->hint_rng = 0x9e3779b97f4a7c15ull;
	if (!p->no_overlap) {
		s->pub.acquire_start = st_acquire_start;
		s->pub.acquire_wait = st_acquire_wait;
	}
	s->n_layer = (int)hp->n_layer;
	s->n_expert = (int)hp->n_expert;
	env_fault(s);
	env_trickle(s);
	snprintf(s->path, sizeof s->path, "%s", m->file->path);
	int rc = 0;
	size_t nk = (size_t)s->n_layer * (size_t)s->n_expert;
	s->where = malloc(nk * sizeof *s->where);
	s->spans = calloc(nk, sizeof *s->spans);
	s->predicted = calloc(nk, sizeof *s->predicted);
	s->visits = calloc((size_t)s->n_layer, sizeof *s->visits);
	s->hist = calloc(nk, sizeof *s->hist);
	s->ahead = p->lookahead < 1 ? MOE_EXPERTS_LOOKAHEAD : p->lookahead > MOE_EXPERTS_MAX_LOOKAHEAD
							? MOE_EXPERTS_MAX_LOOKAHEAD : p->lookahead;
	s->pub.lookahead = s->ahead;
	s->pf_queue = calloc(nk, sizeof *s->pf_queue); /* each key at most once */
	if (!s->where || !s->spans || !s->predicted || !s->visits || !s->hist || !s->pf_queue) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t k = 0; k < nk; k++)
		s->where[k] = -1;
	/* spans, by the adjacency rule; the bound weights must lie inside */
	const moe_uth *u = m->file;
	for (int il = 0; il < s->n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		if (!L->is_moe)
			continue;
		for (int x = 0; x < s->n_expert; x++) {
			span *sp = &s->spans[(size_t)il * s->n_expert + x];
			if (expert_span(m, (uint32_t)il, (uint32_t)x, sp) < 0) {
				rc = moe_err(e, MOE_EFORMAT, "%s: no tensors tagged as expert %d of layer %d",
					     u->path, x, il);
				goto fail;
			}
			const moe_weight *ws[3] = {&L->exp_gate[x], &L->exp_up[x], &L->exp_down[x]};
			for (int j = 0; j < 3; j++) {
				uint64_t o = (uint64_t)((const uint8_t *)ws[j]->data - u->map);
				if (o < sp->off || o + wbytes(ws[j]) > sp->off + sp->len) {
					rc = moe_err(e, MOE_EFORMAT,
						     "%s: %s lies outside the tensors of expert %d of layer %d",
						     u->path, ws[j]->name, x, il);
					goto fail;
				}
			}
			s->st.n_layer_experts++;
		}
	}
	s->slot_bytes = moe_experts_slot_bytes(m);
	s->st.fixed_bytes = moe_experts_fixed_bytes(m);
	s->st.expert_bytes = moe_experts_total_bytes(m);
	uint64_t need = moe_experts_min_budget(m);
	if (p->budget < need) {
		rc = moe_err(e, MOE_EINVAL,
			     "memory budget %.1f MiB is below the minimum of %.1f MiB for %s "
			     "(non-expert weights %.1f MiB + one layer of %d experts x %.2f MiB)",
			     (double)p->budget / 1048576, (double)need / 1048576, u->path,
			     (double)s->st.fixed_bytes / 1048576, s->n_expert,
			     (double)s->slot_bytes / 1048576);
		goto fail;
	}
	s->n_slots = (size_t)((p->budget - s->st.fixed_bytes) / s->slot_bytes);
	if (s->n_slots > s->st.n_layer_experts)
		s->n_slots = (size_t)s->st.n_layer_experts;
	s->cache_bytes = s->n_slots * s->slot_bytes;
	s->cache = mmap(NULL, s->cache_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->cache == MAP_FAILED) {
		s->cache = NULL;
		rc = moe_err(e, MOE_ENOMEM, "cannot map an expert cache of %zu bytes", s->cache_bytes);
		goto fail;
	}
#ifdef MADV_HUGEPAGE
	madvise(s->cache, s->cache_bytes, MADV_HUGEPAGE);
#endif
	s->slots = calloc(s->n_slots, sizeof *s->slots);
	if (!s->slots) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < s->n_slots; i++)
		s->slots[i].key = -1;
	s->depth = RING_DEPTH;
	if (!p->no_uring) {
		int r = io_uring_queue_init(s->depth, &s->ring, 0);
		if (r < 0)
			moe_log(MOE_LOG_WARN, "io_uring unavailable (%s): synchronous expert reads",
				strerror(-r));
		else
			s->uring = true;
	}
	/* chunks of about 64 MiB (at least one slot, at most 1 GiB) */
	s->pop_chunk = (size_t)((64ull << 20) / s->slot_bytes);
	if (s->pop_chunk < 1)
		s->pop_chunk = 1;
	if (s->pop_chunk * s->slot_bytes > (1ull << 30))
		s->pop_chunk = (size_t)((1ull << 30) / s->slot_bytes);
	if (s->uring)
		register_cache(s);
	/* started first, so that it runs while the dense tensors are read */
	if (pthread_create(&s->pop_thread, NULL, populate_main, s) == 0)
		s->pop_started = true;
	else
		populate_main(s); /* no thread: all of it now */
	/* The map's expert pages are never touched now.  Readahead on a fault
	 * in the dense part would pull neighbouring expert pages into the page
	 * cache (megabytes per fault): no readahead on the map, and the dense
	 * tensors, exactly, read now instead. */
	madvise((void *)u->map, round_up(u->file_size, 4096), MADV_RANDOM);
	read_dense(s);
	s->fd = p->buffered ? -1 : open(s->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	s->direct = s->fd >= 0;
	if (s->fd < 0) {
		if (!p->buffered)
			moe_log(MOE_LOG_WARN,
				"%s: O_DIRECT refused (%s); expert reads go through the page cache",
				s->path, strerror(errno));
		s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
		if (s->fd < 0) {
			rc = moe_err(e, MOE_EIO, "%s: %s", s->path, strerror(errno));
			goto fail;
		}
	}
	if (fstat(s->fd, &s->st0) < 0 || (uint64_t)s->st0.st_size != u->file_size) {
		rc = moe_err(e, MOE_EIO, "%s: the model file changed since it was opened", s->path);
		goto fail;
	}
	/* expert pages that the model's loading read ahead are not ours to keep */
	for (size_t k = 0; k < nk; k++)
		if (s->spans[k].len)
			posix_fadvise(s->fd, (off_t)s->spans[k].off, (off_t)s->spans[k].len,
				      POSIX_FADV_DONTNEED);
	s->st.direct = s->direct;
	s->st.uring = s->uring;
	s->st.slots = s->n_slots;
	s->st.slot_bytes = s->slot_bytes;
	/* under the mutex, as every call: claim waits for the population
	 * thread on it */
	pthread_mutex_lock(&s->mu);
	if (p->profile)
		rc = warm_start(s, e);
	else if (s->n_slots == s->st.n_layer_experts) {
		rc = load_all(s, e);
		s->pub.prefetch = NULL; /* nothing is ever missing: no lookahead to pay for */
		s->hints = false;
	}
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		goto fail;
	moe_experts_reset_stats(&s->pub);
	*out = &s->pub;
	return 0;
fail:
	moe_experts_close(&s->pub);
	return rc;
}

void moe_experts_wait_populated(moe_expert_store *pub)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	while (s->ready_slots < s->n_slots)
		pthread_cond_wait(&s->pop_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

void moe_experts_get_stats(moe_expert_store *pub, moe_experts_stats *out)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	pthread_mutex_unlock(&s->mu);
}

void moe_experts_reset_stats(moe_expert_store *pub)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	moe_experts_stats k = s->st;
	memset(&s->st, 0, sizeof s->st);
	s->st.slots = k.slots, s->st.slot_bytes = k.slot_bytes, s->st.fixed_bytes = k.fixed_bytes;
	s->st.expert_bytes = k.expert_bytes, s->st.n_layer_experts = k.n_layer_experts;
	s->st.direct = s->direct, s->st.uring = s->uring;
	s->st.populate_s = k.populate_s;
	for (size_t i = 0; i < s->n_slots; i++)
		s->slots[i].by_prefetch = false; /* counted with the old figures */
	pthread_mutex_unlock(&s->mu);
}

void moe_experts_inject_fault(moe_expert_store *pub, int kind, uint64_t nth)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	s->fault_kind = kind;
	s->fault_nth = nth ? s->n_issued + nth : 0;
	pthread_mutex_unlock(&s->mu);
}

void moe_experts_inject_trickle(moe_expert_store *pub, uint64_t usec)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	s->trickle_us = usec;
	pthread_mutex_unlock(&s->mu);
}

void moe_experts_drop(moe_expert_store *pub)
{
	store *s = (store *)pub;
	pthread_mutex_lock(&s->mu);
	while (s->inflight && !s->err)
		reap_one(s, true);
	for (size_t i = 0; i < s->n_slots; i++)
		if (!s->slots[i].pinned && !s->slots[i].refs && s->slots[i].state != SLOT_LOADING)
			drop_slot(s, i);
	pthread_mutex_unlock(&s->mu);
}
