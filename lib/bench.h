/* bench.h — measurement for moe-bench: summary statistics, a STREAM-like
 * memory bandwidth probe, throughput tests with llama-bench's method,
 * perplexity with llama-perplexity's method, KL-divergence against a saved
 * base (the "KLD file"), expert routing statistics, and the report
 * formatters (markdown, CSV, JSON, JSON lines).
 *
 * How to use:
 *   - Throughput: moe_bench_describe() describes a loaded model (size,
 *     parameters total and active, weight types); moe_bench_run() runs one
 *     test (pp, tg, pp+tg, optionally after filling the context to a depth)
 *     on a fresh context: one warm-up, then `reps` timed runs whose times
 *     land in samples_ns.  Put each result in a moe_bench_row and hand the
 *     rows to moe_bench_report() with the output format; moe_bench_derive()
 *     gives the numbers a row is reported with (mean/stddev/median tokens/s,
 *     bandwidth).  moe_bench_stream() measures the memory bandwidth the
 *     bandwidth columns are a percentage of.
 *   - Several sequences at once (-np): moe_bench_batched_run() runs
 *     llama-batched-bench's test on an engine (N sequences prefilled
 *     together, then decoded together) into a moe_batched_row;
 *     moe_batched_report() writes the rows.
 *   - Perplexity and KL-divergence: moe_bench_perplexity() tokenizes a text,
 *     evaluates it chunk by chunk and fills a moe_ppl_result; with
 *     kld_out it also saves the base log-probabilities, with kld_in it
 *     compares against a saved base (tokens come from the file then).
 *   - Expert statistics: moe_expert_stats_new(), pass moe_expert_stats_route
 *     and the object to moe_engine_set_route_callback (or in moe_ppl_params),
 *     evaluate text, then moe_expert_stats_write() the JSON.
 * Nothing here prints; formatters write to the FILE the caller gives.
 */
#ifndef MOE_BENCH_H
#define MOE_BENCH_H

#include "core.h"
#include "engine.h"

/* ------------------------------------------------------------ statistics */

typedef struct moe_bench_summary {
	size_t n;
	double mean;
	double stddev; /* sample standard deviation (n - 1); 0 when n < 2 */
	double median, min, max;
} moe_bench_summary;

/* Summarise n values (n may be 0: all zero). Never fails. */
void moe_bench_summarize(const double *v, size_t n, moe_bench_summary *s);
/* The q-quantile (0 <= q <= 1) of n sorted values, interpolating linearly
 * between the closest ranks; NAN when n is 0. */
double moe_bench_quantile(const double *sorted, size_t n, double q);
/* Sort n doubles ascending (NaNs last). */
void moe_bench_sort(double *v, size_t n);

/* llama-perplexity's accumulator: sums of the negative log-likelihood and
 * its square over scored tokens. */
typedef struct moe_ppl_acc {
	double nll, nll2;
	uint64_t count;
} moe_ppl_acc;

void moe_ppl_acc_add(moe_ppl_acc *a, double nll);
/* exp(mean nll); NAN when count is 0. */
double moe_ppl_acc_ppl(const moe_ppl_acc *a);
/* llama-perplexity's error estimate of the perplexity:
 * ppl * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)); NAN when count < 2
 * or the variance is not positive. */
double moe_ppl_acc_err(const moe_ppl_acc *a);

/* log-softmax of one row of logits at token `tok`: log p(tok).  Also gives
 * the log of the normaliser (log-sum-exp, in double) and the arg-max (the
 * first of equal maxima) when the pointers are non-NULL. */
double moe_bench_log_prob(const float *logits, int n_vocab, int32_t tok, double *lse,
			  int32_t *argmax);

/* ------------------------------------------------------ memory bandwidth */

typedef struct moe_stream_result {
	double triad_gbs;       /* a[i] = b[i] + s*c[i]: 3 arrays' bytes / best time */
	double read_gbs;        /* sum of one array: its bytes / best time */
	double triad_s, read_s; /* best times, seconds */
	size_t array_bytes;     /* bytes of each of the three arrays */
	int n_threads, reps;
} moe_stream_result;

/* STREAM-like triad over three arrays of array_bytes each (doubles), run by
 * n_threads threads (0: moe_default_threads()) of a moe_pool, each thread on
 * its own slice (first touched by that thread); best of reps runs (0: 10),
 * bytes counted as STREAM does (3 arrays per triad, no write-allocate
 * traffic).  Returns 0, MOE_EINVAL (arrays under 1 MiB) or MOE_ENOMEM. */
int moe_bench_stream(size_t array_bytes, int n_threads, int reps, moe_stream_result *r,
		     moe_error *e);

/* -------------------------------------------------------- model summary */

typedef struct moe_bench_model_info {
	char arch[32];
	char type[96];            /* llama-bench's model_type: "llama 489M F16" */
	char main_type[16];       /* the weight type holding most bytes: "q4_k" */
	char weight_types[192];   /* every weight type by share of bytes:
				 * "q4_k 71%, q6_k 19%, f32 1.2%" */
	uint64_t size;            /* bytes of all weights (tokenizer tables excluded) */
	uint64_t n_params;        /* all weight elements */
	uint64_t n_params_active; /* per token: the experts used, not all; token
				   * embedding excluded (one row is read) */
	uint64_t active_bytes;    /* moe_model_active_bytes(): weights read per token */
	uint32_t n_vocab;
} moe_bench_model_info;

/* Fill *out for a loaded model.  Returns 0 (cannot fail for a model that
 * moe_model_load accepted; MOE_EINTERNAL otherwise). */
int moe_bench_describe(const moe_model *m, moe_bench_model_info *out, moe_error *e);

/* --------------------------------------------------------- throughput */

typedef struct moe_bench_test {
	int n_prompt; /* tokens of the prompt-processing part (0: none) */
	int n_gen;    /* tokens generated one at a time (0: none) */
	int n_depth;  /* tokens in the context before the test (not timed) */
	int n_batch;  /* prompt tokens per forward batch */
	int n_threads;
	int kv_type;   /* MOE_F16, MOE_Q8_0 or MOE_F32 */
	int reps;      /* timed repetitions (>= 1) */
	uint64_t seed; /* for the random token ids */
} moe_bench_test;

/* The BOS id when the model's tokenizer adds one at the start of a text,
 * else -1 (also without a tokenizer). */
int32_t moe_bench_bos(const moe_model *m);

/* "pp512", "tg128", "pp512+tg128", each followed by " @ d4096" when the
 * test runs at a depth (llama-bench's names).  Returns buf. */
char *moe_bench_test_name(const moe_bench_test *t, char *buf, size_t n);

/* Run a test as llama-bench does: a context of n_depth + n_prompt + n_gen
 * tokens; warm-up (n_prompt prompt tokens if any, one generated token if
 * any); then per repetition: clear the cache, fill it with n_depth tokens
 * (untimed), time n_prompt tokens in batches of n_batch and n_gen single
 * tokens, logits computed for the last token of each step.  Token ids are
 * random valid ids (the first is BOS when the tokenizer adds one).
 * samples_ns[reps] receives each repetition's time.  Returns 0, MOE_EINVAL
 * (nothing to run, bad counts) or the engine's error. */
int moe_bench_run(const moe_model *m, const moe_bench_test *t, uint64_t *samples_ns, moe_error *e);

/* Peak resident set size of this process in bytes since the last
 * moe_bench_peak_rss_reset() (VmHWM; getrusage's ru_maxrss where that is not
 * available); 0 if unknown. */
uint64_t moe_bench_peak_rss(void);
/* Restart the peak at the current RSS (Linux: /proc/self/clear_refs).
 * False if the system cannot (the peak then covers the whole process). */
bool moe_bench_peak_rss_reset(void);
/* The CPU's model name ("AMD EPYC 9R14 96-Core Processor"), or "unknown". */
void moe_bench_cpu_name(char *buf, size_t n);
/* Now as ISO 8601 UTC: "2026-11-21T06:08:00Z". */
void moe_bench_time_iso(char *buf, size_t n);

/* ------------------------------------------------------------- reports */

typedef enum moe_bench_format {
	MOE_BENCH_MD = 0,
	MOE_BENCH_CSV,
	MOE_BENCH_JSON,
	MOE_BENCH_JSONL,
} moe_bench_format;

/* "md", "csv", "json", "jsonl" -> format, or -1. */
int moe_bench_format_from_name(const char *name);

/* What the whole run shares. */
typedef struct moe_bench_env {
	const char *build_commit; /* our version */
	const char *cpu_info;
	const char *isa;        /* kernels in use: "avx512" */
	double stream_gbs;      /* measured triad bandwidth; 0: not measured */
	double stream_read_gbs; /* measured read bandwidth; 0: not measured */
	int stream_threads;     /* 0: stream_gbs was given, not measured */
	size_t stream_array_bytes;
} moe_bench_env;

/* One model as the reports name it. */
typedef struct moe_bench_model_row {
	const char *filename;
	moe_bench_model_info info;
	double load_s;     /* moe_model_load (open, validate, bind), seconds */
	uint64_t peak_rss; /* bytes, while this model was benchmarked */
} moe_bench_model_row;

/* One test result. */
typedef struct moe_bench_row {
	const moe_bench_model_row *model;
	moe_bench_test test;
	char test_time[32]; /* ISO 8601, when the test started */
	const uint64_t *samples_ns;
	size_t n_samples;
} moe_bench_row;

/* Numbers a row is reported with. */
typedef struct moe_bench_derived {
	double avg_ns, stddev_ns;
	double avg_ts, stddev_ts, median_ts; /* over per-sample tokens/s */
	/* tg-only rows (n_prompt 0): weights read per second at the mean
	 * tokens/s, and its share of the measured bandwidth (NAN otherwise or
	 * when the bandwidth was not measured). */
	double bw_gbs, bw_pct;
} moe_bench_derived;

/* Per-sample tokens/s into ts[n_samples] (if non-NULL) and the summary.
 * Never fails. */
void moe_bench_derive(const moe_bench_row *r, const moe_bench_env *env, double *ts,
		      moe_bench_derived *d);

/* Write the rows in the format: md is a table (plus one of load time and
 * peak RSS per model, and the bandwidth line), csv has a header line and one
 * line per row, json one array of objects, jsonl one object per line.
 * JSON field names follow llama-bench where the meaning is the same
 * (model_filename, model_type, model_size, model_n_params, n_batch,
 * n_threads, type_k, n_prompt, n_gen, n_depth, test_time, avg_ns, stddev_ns,
 * avg_ts, stddev_ts, samples_ns, samples_ts, cpu_info, build_commit) plus
 * ours (see moe-bench(1)).  Returns 0, MOE_EIO (write error) or MOE_ENOMEM. */
int moe_bench_report(FILE *f, moe_bench_format fmt, const moe_bench_env *env,
		     const moe_bench_row *rows, size_t n, moe_error *e);

/* ------------------------------------------- several sequences (-np) */

/* llama-batched-bench's test: pl sequences, each with its own pp random
 * prompt tokens, evaluated together (n_batch tokens per step), then tg
 * steps of one token per sequence (logits for every sequence).  Timed
 * `reps` times after a warm-up; KV pool sized pl x (pp + tg). */
typedef struct moe_batched_test {
	int n_pp, n_tg, n_pl;
	int n_batch, n_threads, kv_type;
	int reps;
	uint64_t seed;
} moe_batched_test;

typedef struct moe_batched_row {
	const moe_bench_model_row *model;
	moe_batched_test test;
	char test_time[32];
	uint64_t *pp_ns, *tg_ns;  /* [reps] each (owned by the caller) */
	int n_kv;                 /* tokens in the cache at the end: pl x (pp + tg) */
	int kv_block;             /* tokens per KV block */
	int kv_peak_blocks;       /* most blocks in use */
	uint64_t kv_peak_bytes;
} moe_batched_row;

/* Run the test; row->pp_ns and tg_ns must hold t->reps samples.  Returns 0,
 * MOE_EINVAL (bad counts) or the engine's error. */
int moe_bench_batched_run(const moe_model *m, const moe_batched_test *t, moe_batched_row *row,
			  moe_error *e);
/* Report the rows: md a table like llama-batched-bench's (PP, TG, B, N_KV,
 * T_PP s, S_PP t/s, T_TG s, S_TG t/s, T s, S t/s; times are medians over the
 * repetitions) plus the KV pool's peak; csv/json/jsonl with its JSONL names
 * (pp, tg, pl, n_kv, t_pp, speed_pp, t_tg, speed_tg, t, speed) and ours
 * (see moe-bench(1)).  Returns 0, MOE_EIO or MOE_ENOMEM. */
/* The median of n samples (0 for none). */
uint64_t moe_bench_median_ns(const uint64_t *v, size_t n);
int moe_batched_report(FILE *f, moe_bench_format fmt, const moe_bench_env *env,
		       const moe_batched_row *rows, size_t n, moe_error *e);

/* ---------------------------------------------------- expert statistics */

typedef struct moe_expert_stats moe_expert_stats;

/* Counters for a model's MoE layers.  max_batch is the largest batch the
 * contexts it observes evaluate (to pair a token's choices in consecutive
 * layers).  Returns 0, MOE_EINVAL (the model has no experts) or
 * MOE_ENOMEM. */
int moe_expert_stats_new(moe_expert_stats **out, const moe_model *m, int max_batch, moe_error *e);
/* The route callback (moe_route_fn): user is the moe_expert_stats.  Relies
 * on the engine's order: within a batch, all tokens of a layer, in token
 * order, before the next layer. */
void moe_expert_stats_route(void *user, int layer, const int32_t *experts, const float *weights,
			    int k);
/* Tokens seen by a layer; how often `expert` was chosen there; -1/0 for
 * out-of-range arguments. */
uint64_t moe_expert_stats_tokens(const moe_expert_stats *s, int layer);
uint64_t moe_expert_stats_count(const moe_expert_stats *s, int layer, int expert);
/* The statistics as a JSON object (new reference, NULL on ENOMEM); `info`
 * (borrowed, may be NULL) is merged in at the top level (model, source...). */
json_t *moe_expert_stats_json(const moe_expert_stats *s, const json_t *info);
/* Write that JSON to path atomically (moe_out; "-" is stdout).  Returns 0,
 * MOE_EIO or MOE_ENOMEM. */
int moe_expert_stats_write(const moe_expert_stats *s, const json_t *info, const char *path,
			   moe_error *e);
void moe_expert_stats_free(moe_expert_stats *s);

/* Evaluate a prompt and generate n_gen tokens greedily (arg-max, no end of
 * text) on seq, a sequence of an engine of m, e.g. to collect expert statistics over a
 * generation.  Returns 0, MOE_EINVAL (empty prompt) or the engine's error
 * (MOE_ERANGE: the context is too short). */
int moe_bench_greedy(const moe_model *m, moe_seq *seq, const int32_t *prompt, size_t n_prompt,
		     int n_gen, moe_error *e);

/* --------------------------------------------- perplexity and KL files */

/* The KLD file (see moe-bench(1), "KLD FILE FORMAT"): a 128-byte header,
 * the chunks' tokens, one record per scored token (arg-max id, exact log
 * probability of the actual next token, and every log-probability quantised
 * to 16 bits over the row's range), an XXH3-64 trailer. */
#define MOE_KLD_MAGIC "MOEKLD\0\0"
#define MOE_KLD_VERSION 1u
#define MOE_KLD_HEADER_SIZE 128u
#define MOE_KLD_RANGE 30.0 /* log-probabilities kept: [max - 30, max] */

typedef struct moe_kl_result {
	uint64_t n;                    /* scored tokens */
	double ppl, ppl_err;           /* this model */
	double ppl_base, ppl_base_err; /* the base, from the file */
	double cor;                    /* correlation of per-token nll */
	double ln_ratio, ln_ratio_err; /* mean ln(PPL/PPL_base) */
	double ratio, ratio_err;       /* PPL/PPL_base */
	double ppl_diff, ppl_diff_err; /* PPL - PPL_base */
	double kld, kld_err;           /* mean KL(base || model), nats */
	double kld_max, kld_p999, kld_p99, kld_p95, kld_p90, kld_median, kld_p10, kld_p05, kld_p01,
		kld_min;
	double dp_mean, dp_err; /* p(actual) - p_base(actual) */
	double dp_rms, dp_rms_err, dp_max, dp_min;
	double same_top, same_top_err; /* fraction with the same arg-max */
} moe_kl_result;

typedef struct moe_ppl_result {
	int n_ctx, n_chunks;
	uint64_t n_text_tokens; /* tokens of the whole text */
	uint64_t n_scored;      /* tokens scored so far */
	double ppl, ppl_err;    /* over the chunks done so far */
	bool has_kl;
	moe_kl_result kl; /* with kld_in; only mean fields while running */
} moe_ppl_result;

typedef struct moe_ppl_params {
	int n_ctx;              /* chunk length in tokens (0: 512) */
	int n_chunks;           /* chunks to evaluate (<= 0: all) */
	int n_batch;            /* 0: n_ctx */
	int n_threads;          /* 0: default */
	int kv_type;            /* 0: F16 */
	const char *kld_out;    /* save the base log-probabilities here */
	const char *kld_in;     /* compare with this base */
	const char *model_name; /* stored in the KLD file (may be NULL) */
	moe_route_fn route_fn;  /* expert statistics (may be NULL) */
	void *route_user;
	/* Called after each chunk with the running result (may be NULL). */
	void (*chunk_done)(void *user, int chunk, const moe_ppl_result *r);
	void *user;
} moe_ppl_params;

/* Perplexity with llama-perplexity's method: tokenize the whole text (BOS
 * and EOS as the tokenizer adds them, special-token text not parsed), split
 * it into chunks of n_ctx tokens (at least 2 * n_ctx tokens needed), put BOS
 * in place of each chunk's first token when the tokenizer adds BOS,
 * evaluate each chunk from an empty cache and score the tokens of its
 * second half (positions n_ctx/2 + 1 .. n_ctx - 1, each predicted by the
 * logits of the position before).  With kld_in the tokens come from that
 * file (text may then be NULL; if given it must tokenize to the same ids)
 * and r->kl is filled.  Returns 0, MOE_EINVAL (too few tokens, no
 * tokenizer, vocabulary or tokens differing from the base), MOE_EFORMAT /
 * MOE_ECHECKSUM (a bad KLD file, named), MOE_EIO or the engine's error. */
int moe_bench_perplexity(const moe_model *m, const char *text, size_t len, const moe_ppl_params *p,
			 moe_ppl_result *r, moe_error *e);

/* The statistics of one scored token against a base record, for callers
 * that run the model themselves.  rec is one record of the KLD file
 * (MOE_KLD record layout), logits the model's row, next the actual token.
 * Fills kld, nll (this model), nll_base, dp and same (arg-max equal). */
typedef struct moe_kl_token {
	double kld, nll, nll_base, dp;
	bool same;
} moe_kl_token;
/* Bytes of one record: 16 + 2 * n_vocab. */
size_t moe_kld_record_size(uint32_t n_vocab);
/* The record of a base model's logits row (rec: moe_kld_record_size bytes).
 * Never fails. */
void moe_kld_encode(const float *logits, uint32_t n_vocab, int32_t next, uint8_t *rec);
void moe_kld_compare(const uint8_t *rec, const float *logits, uint32_t n_vocab, int32_t next,
		     moe_kl_token *out);

/* Summarise per-token arrays (n each) into *r; kld and dp are sorted in
 * place.  Never fails. */
void moe_kl_summarize(double *kld, double *dp, const double *nll, const double *nll_base,
		      const uint8_t *same, uint64_t n, moe_kl_result *r);

/* Report perplexity/KL results: md is text (the summary lines; the running
 * values are the caller's), csv/json/jsonl one record per model. */
typedef struct moe_ppl_row {
	const char *model_filename;
	const char *text; /* the text file, or the base file for --kl */
	const moe_ppl_result *r;
} moe_ppl_row;
int moe_ppl_report(FILE *f, moe_bench_format fmt, const moe_ppl_row *rows, size_t n, moe_error *e);

/* ------------------------------------------------------------- endpoint */

/* moe-bench --endpoint: n_clients threads each stream `reps` requests to
 * an OpenAI-compatible server's /v1/completions (url "http://HOST:PORT",
 * ".../v1", a full ".../v1/completions", or "unix:PATH" for a Unix socket),
 * asking for n_predict tokens with ignore_eos and include_usage. */
typedef struct moe_endpoint_params {
	const char *url;
	const char *model;    /* NULL: not sent (the server's default) */
	const char *api_key;  /* NULL: none (sent as Authorization: Bearer) */
	const char *prompt;
	int n_predict, n_clients, reps;
} moe_endpoint_params;

typedef struct moe_endpoint_result {
	int n_requests, n_failed;
	char first_error[256];
	moe_bench_summary ttft_ms;       /* request sent -> first text event */
	moe_bench_summary itl_ms;        /* per request: (last - first text) / (tokens - 1) */
	moe_bench_summary prompt_tokens; /* as the server counted them */
	uint64_t n_tokens;               /* generated, all requests (usage counts) */
	double wall_s, tokens_per_s;     /* aggregate: n_tokens / wall_s */
} moe_endpoint_result;

/* MOE_EINVAL for a bad URL or parameters, MOE_ENET when every request
 * failed (first_error says why); single failures are counted. */
int moe_bench_endpoint_run(const moe_endpoint_params *p, moe_endpoint_result *r, moe_error *e);
/* ------------------------------------------------- memory budgets (budget.c) */

/* The read bandwidth of m's disk as the streamed expert store sees it:
 * reads of whole experts (each (layer, expert)'s bytes, 4096-rounded) in a
 * shuffled order, O_DIRECT (buffered where refused, the pages dropped
 * after), `depth` in flight through io_uring (1: one pread at a time), until
 * max_bytes are read.  Depth 1 is the disk a lone miss waits on;
 * moe_experts_queue_depth(m) is the most a decode step keeps in flight. */
typedef struct moe_disk_bw {
	double bytes_s;        /* bandwidth */
	double read_bytes;     /* mean read size */
	uint64_t bytes;        /* read in all */
	unsigned depth;        /* reads in flight (1 without io_uring) */
	bool direct;           /* O_DIRECT */
} moe_disk_bw;
int moe_bench_disk_bw(const moe_model *m, unsigned depth, uint64_t max_bytes, moe_disk_bw *out,
		      moe_error *e);

typedef struct moe_budget_params {
	uint64_t budget;       /* bytes, as --mem-budget; 0: the resident store */
	int policy;            /* enum moe_experts_policy */
	const char *profile;   /* warm start (moe-bench --expert-stats) or NULL */
	double pin_fraction;
	bool no_prefetch, no_overlap;
	int lookahead;         /* layers ahead (0: the store's default) */
	int n_prompt, n_gen, n_threads;
	double disk_bw;        /* bytes/s for the I/O bound (0: none) */
	double disk_bw_qd1;    /* ... one read at a time, for the second bound (0: none) */
	const int32_t *ids;    /* a text fed one token at a time (n_ids >= n_prompt + n_gen
				* + 1), or NULL: random ids as llama-bench's tg */
	size_t n_ids;
	uint64_t seed;
} moe_budget_params;

typedef struct moe_budget_row {
	uint64_t budget, slots;
	int n_gen;
	double tok_s;           /* n_gen single tokens after an n_prompt prompt */
	double hit_rate, prediction, prefetch_used; /* fractions */
	int lookahead;          /* layers ahead predicted (0: no lookahead ran) */
	double prediction_at[4]; /* [d-1]: accuracy of the predictions d layers ahead */
	double candidate_at[4];  /* [d-1]: ... of those not cached when predicted */
	double prefetch_reads;   /* per token */
	double lookahead_share;  /* of the layers' acquires, those after which the router
				  * lookahead ran (the rest were skipped: gate closed) */
	double open_s;           /* moe_experts_open */
	double populate_s;       /* the cache faulted in, in the background (experts.h) */
	double bytes_per_token; /* read from the disk */
	double io_wait_s;
	double overlap;         /* of the experts acquired, the share computed while
				 * reads of their layer were still in flight */
	double io_bound_tok_s;  /* disk_bw / bytes_per_token */
	double io_bound_qd1_tok_s; /* disk_bw_qd1 / bytes_per_token */
	bool direct;
} moe_budget_row;

/* Evaluate n_prompt tokens, then time n_gen single tokens (the text's, else
 * random ids) with the streamed expert store under p->budget (a fresh, cold
 * cache) and fill row.  Errors of the store or the engine. */
int moe_bench_budget(const moe_model *m, const moe_budget_params *p, moe_budget_row *row,
		     moe_error *e);

/* ----------------------------------------------------- fit planner (plan.c) */

/* MemAvailable of /proc/meminfo in bytes (0 if unknown). */
uint64_t moe_bench_mem_available(void);

typedef struct moe_plan_params {
	double mem_bw, disk_bw;   /* bytes/s, measured */
	uint64_t mem_available;   /* bytes */
	const char *profile;      /* --expert-stats output, or NULL (uniform routing) */
} moe_plan_params;

typedef struct moe_plan_row {
	uint64_t budget, slots;
	double hit_rate, read_per_token, tok_s; /* predicted */
	bool fits;                /* within the available memory */
	bool is_fit;              /* the largest budget that fits */
} moe_plan_row;

typedef struct moe_plan {
	uint64_t fixed, experts, slot; /* bytes: non-expert weights, all experts, one slot */
	double active;                 /* bytes of weights per token */
	moe_plan_row rows[6];
	int n;
	uint64_t recommended;          /* --mem-budget, 0: the model does not fit */
} moe_plan;

/* Predict tokens/s at a few budgets (one layer of experts, 25/50/75/100% of
 * them, the largest that fits) and recommend one.  MOE_EINVAL for a dense
 * model, MOE_EFORMAT for a bad profile. */
int moe_bench_plan(const moe_model *m, const moe_plan_params *p, moe_plan *out, moe_error *e);

/* --------------------------------------------- importance matrix (imatrix.c) */

typedef struct moe_imatrix_params {
	const char *out;  /* the file to write (moe-quant(1), IMATRIX FILES; "-": stdout) */
	int n_ctx;        /* chunk length in tokens (0: 512) */
	int n_chunks;     /* chunks to run (<= 0: all) */
	int n_batch;      /* 0: n_ctx */
	int n_threads;    /* 0: default */
	/* Called after each chunk (may be NULL). */
	void (*chunk_done)(void *user, int chunk, int n_chunks);
	void *user;
} moe_imatrix_params;

typedef struct moe_imatrix_result {
	int n_ctx, n_chunks;
	uint64_t n_text_tokens; /* tokens of the whole text */
	uint64_t n_tokens;      /* tokens run */
	size_t n_tensors;       /* tensors in the file */
} moe_imatrix_result;

/* An importance matrix over a calibration text: the text is tokenized and
 * split into chunks as moe_bench_perplexity does (BOS in place of each
 * chunk's first token when the tokenizer adds BOS; a partial last chunk is
 * dropped; at least one chunk needed), each chunk runs from an empty cache,
 * and the input rows of every weight product (an expert's: only the tokens
 * routed to it; the output matrix: every token) accumulate per UTH tensor
 * name; the mean squares are written atomically to p->out in our format.
 * Returns 0, MOE_EINVAL (no tokenizer, too little text, no output),
 * MOE_EIO, MOE_ENOMEM or the engine's error; nothing is written on error. */
int moe_bench_imatrix(const moe_model *m, const char *text, size_t len,
		      const moe_imatrix_params *p, moe_imatrix_result *r, moe_error *e);

#endif
