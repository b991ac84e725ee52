/* experts.h — the streamed expert store: models larger than RAM.
 *
 * The dense part of the model (attention, norms, embeddings, routers, shared
 * experts) stays in the model's read-only map; the routed experts are read
 * from the UTH file on demand, one read per (layer, expert) (the UTH
 * adjacency rule puts an expert's tensors back to back), into a cache of
 * fixed-size 4096-aligned slots in anonymous memory (huge pages where the
 * kernel offers them), faulted in and registered with io_uring as fixed
 * buffers before any read goes into them, so that a read neither zeroes nor
 * pins its slot's pages in the computing thread.  A thread of the store's
 * own does that in the background, 64 MiB at a time, so open returns at
 * once; until it is done the store uses the slots already faulted in, and
 * an acquire that needs more waits for the next chunk.  Reads use O_DIRECT
 * through io_uring, so the page
 * cache is not used and memory stays within the budget; where O_DIRECT is
 * refused (tmpfs, some file systems) the store falls back to buffered reads
 * with a warning and drops the read pages from the page cache again.
 *
 * How to use:
 *   moe_experts_params p = {.budget = 1536ull << 20};
 *   moe_expert_store *st;  moe_experts_open(&st, model, &p, &e);
 *   moe_engine_params ep = {..., .experts = st};   (engine.h)
 *   ... run ...;  moe_experts_get_stats(st, &s);  moe_experts_close(st);
 *
 * Budget: p.budget is the whole weight footprint — the non-expert weights
 * (moe_experts_fixed_bytes, resident in the map) plus the slot cache.  Not
 * counted: the engine's KV cache and scratch buffers and the program itself
 * (the stated fixed overhead; see moe-run(1)).  The cache holds at least one
 * whole layer of experts (n_expert slots), since one step may choose them
 * all; a smaller budget is an error naming the minimum.
 *
 * Acquire comes in two halves (acquire_start / acquire_wait, model.h) so
 * that the engine computes the cached experts while the misses are read and
 * each miss as it lands.  Prefetch hints (router lookahead) are read only
 * while they pay: more than half of the last 64 predicted-and-uncached
 * experts were chosen, no read a layer waits for is in flight, at most 2
 * at a time, and only into a free or cold slot (never evicting a warm one).
 * While that first condition fails, the store asks the engine for the
 * lookahead (by leaving pub.prefetch set after an acquire) after only one
 * acquire in 8, enough to notice when predictions start to pay again
 * (only while all acquires come from one thread: the engine reads
 * pub.prefetch unlocked).
 *
 * Thread safety: one store may serve several engines; its calls (and the
 * population thread's hand-over of each chunk) serialise on a mutex, which
 * is held while waiting for the disk (blocking in the
 * kernel in io_uring_wait_cqe or pread, never spinning), so engines sharing
 * a store wait one at a time.  A slot is never evicted while acquired,
 * while its read is in flight, or while pinned.
 */
#ifndef MOE_EXPERTS_H
#define MOE_EXPERTS_H

#include "model.h"

/* Which cached expert a miss evicts (see README "Streaming experts" for
 * the measurements behind the default). */
enum moe_experts_policy {
	MOE_EXPERTS_NEXT_USE = 0, /* default "nextuse": the furthest expected next use, from
				   * each expert's whole use history (kept when evicted), a
				   * count decayed per visit of its layer, and its layer's
				   * place in the loop over layers */
	MOE_EXPERTS_LRU = 1,      /* "lru": least recently used */
	MOE_EXPERTS_LFRU = 2,     /* "lfru": the cached copy's decayed use count (reset when
				   * evicted), raised for layers that come round sooner */
	MOE_EXPERTS_N_POLICIES
};
/* The policy's name ("nextuse", "lru", "lfru"), or NULL. */
const char *moe_experts_policy_name(int policy);
/* The policy named `name`, or -1. */
int moe_experts_policy_parse(const char *name);

/* I/O faults for tests: make the nth read (1-based, counting every read the
 * store issues) fail. */
/* The most layers ahead the router lookahead may predict (params.lookahead). */
#define MOE_EXPERTS_MAX_LOOKAHEAD 4
/* ... and by default */
#define MOE_EXPERTS_LOOKAHEAD 1

enum moe_experts_fault { MOE_EXPERTS_FAULT_NONE, MOE_EXPERTS_FAULT_EIO, MOE_EXPERTS_FAULT_SHORT };

typedef struct moe_experts_params {
	uint64_t budget;        /* bytes: non-expert weights + cache (required) */
	int policy;             /* enum moe_experts_policy */
	bool verify_reads;      /* check each read tensor against its xxh3 */
	bool buffered;          /* do not try O_DIRECT */
	bool no_uring;          /* synchronous pread instead of io_uring */
	bool no_prefetch;       /* ignore the router lookahead's hints */
	int lookahead;          /* layers ahead the lookahead predicts, 1..MOE_EXPERTS_MAX_LOOKAHEAD
				 * (0: the default, MOE_EXPERTS_LOOKAHEAD) */
	bool no_overlap;        /* no acquire_start/acquire_wait: the engine waits for
				 * every expert of a layer before computing any (for comparison) */
	const char *profile;    /* moe-bench --expert-stats JSON: warm start + pin, or NULL */
	double pin_fraction;    /* of the cache pinned with the profile's hottest (0: none) */
} moe_experts_params;

typedef struct moe_experts_stats {
	uint64_t slots, slot_bytes;   /* the cache */
	uint64_t fixed_bytes;         /* non-expert weights */
	uint64_t expert_bytes;        /* all routed experts in the file */
	uint64_t n_layer_experts;     /* (layer, expert) pairs in the file */
	bool direct, uring;           /* O_DIRECT in use; io_uring in use */
	uint64_t requests, hits;      /* experts acquired; found in the cache */
	uint64_t hits_prefetched;     /* hits whose slot a prefetch filled */
	uint64_t reads, bytes_read;   /* reads issued (demand + prefetch) */
	uint64_t prefetch_reads;      /* reads started by prefetch */
	uint64_t prefetch_used;       /* ... whose expert was acquired before eviction */
	uint64_t predicted, predicted_right; /* lookahead predictions one layer ahead;
				       * how many were chosen */
	uint64_t predicted_at[MOE_EXPERTS_MAX_LOOKAHEAD],   /* the same, [d-1]: d layers ahead */
		 predicted_right_at[MOE_EXPERTS_MAX_LOOKAHEAD];
	uint64_t candidates, candidates_chosen; /* ... of those not cached when predicted
				       * (what prefetch would read); how many were chosen */
	uint64_t candidates_at[MOE_EXPERTS_MAX_LOOKAHEAD], /* the same, [d-1]: d layers ahead */
		 candidates_chosen_at[MOE_EXPERTS_MAX_LOOKAHEAD];
	uint64_t lookahead_runs,      /* acquires after which the engine was asked for */
		 lookahead_skips;     /* ... and not asked for the router lookahead (the
				       * prefetch rule's gate closed: see README) */
	double io_wait;               /* seconds acquire spent blocked on the disk */
	uint64_t overlapped;          /* experts handed over while reads of the same
				       * acquire were still in flight: their math
				       * overlapped that I/O */
	double populate_s;            /* seconds the background thread took to fault the
				       * cache in (0 until it is done) */
	double populate_wait;         /* seconds acquire waited for it (the cache's slots
				       * not yet faulted in; counted apart from io_wait) */
} moe_experts_stats;

/* Open a streamed store over the model's file.  MOE_EINVAL for a budget
 * below the minimum (named), MOE_EIO for open/read/io_uring failures,
 * MOE_EFORMAT for a bad profile, MOE_ENOMEM. */
int moe_experts_open(moe_expert_store **out, const moe_model *m, const moe_experts_params *p,
		     moe_error *e);
void moe_experts_close(moe_expert_store *s);
/* Bytes of the model's weights that are not routed experts (what stays resident). */
uint64_t moe_experts_fixed_bytes(const moe_model *m);
/* Bytes of one cache slot (the largest expert, rounded up to 4096). */
uint64_t moe_experts_slot_bytes(const moe_model *m);
/* The file bytes of expert x of layer il: its adjacent tensors, from *off
 * for *len bytes (one read loads it).  -1 when the file tags no tensors so. */
int moe_experts_span(const moe_model *m, uint32_t il, uint32_t x, uint64_t *off, uint64_t *len);
/* Total bytes of routed experts. */
uint64_t moe_experts_total_bytes(const moe_model *m);
void moe_experts_get_stats(moe_expert_store *s, moe_experts_stats *out);
void moe_experts_reset_stats(moe_expert_store *s);
/* Test hook: make read number `nth` (1-based, from now) fail with `kind`.
 * The environment variable MOE_TEST_IO_FAULT=eio:N or short:N does the same
 * for every store opened (for the command-line tests). */
void moe_experts_inject_fault(moe_expert_store *s, int kind, uint64_t nth);
/* Test hook (trickle): from now on, reads of acquired experts are handed
 * over one at a time, the last requested first, each after `usec`
 * microseconds (0: off), as from a slow disk.  The environment variable
 * MOE_TEST_IO_TRICKLE=USEC does the same for every store opened. */
void moe_experts_inject_trickle(moe_expert_store *s, uint64_t usec);
/* Block until the whole cache is faulted in (benchmarks: time the run
 * without the background population; see moe_experts_open). */
void moe_experts_wait_populated(moe_expert_store *s);
/* Drop every unpinned cached expert (benchmarks: a cold start). */
void moe_experts_drop(moe_expert_store *s);

/* The most reads the store keeps in flight while decoding one token: a
 * layer's chosen experts (all of them missing) and the prefetch reads the
 * lookahead may have started.  moe-bench measures the disk at this depth. */
unsigned moe_experts_queue_depth(const moe_model *m);

/* Parse "1536M", "2G", "4096", "75%" (of the model's total weight bytes
 * when model_bytes > 0).  0 or MOE_EINVAL naming the text. */
int moe_experts_parse_size(const char *text, uint64_t model_bytes, uint64_t *out, moe_error *e);
/* The smallest budget moe_experts_open accepts for m: the non-expert
 * weights and one layer of experts. */
uint64_t moe_experts_min_budget(const moe_model *m);
/* A --mem-budget for m: "min" (moe_experts_min_budget), or a size as
 * moe_experts_parse_size with percentages of m's weights.  0 or MOE_EINVAL. */
int moe_experts_parse_budget(const char *text, const moe_model *m, uint64_t *out, moe_error *e);

#endif
