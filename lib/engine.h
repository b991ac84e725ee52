/* engine.h — many sequences on one model: the engine (model + one thread
 * pool + scratch), sequences whose KV cache is paged from one shared block
 * pool, steps that evaluate tokens of several sequences at once, requests
 * (prompt, sampling, stop strings, streamed text) and the scheduler that
 * batches them continuously.
 *
 * How to use — requests (what tools do):
 *   moe_engine *eng;  moe_engine_new(&eng, model, &(moe_engine_params){.kv_size = 8192}, &e);
 *   moe_sched *s;     moe_sched_new(&s, eng, &(moe_sched_params){.n_parallel = 4}, &e);
 *   moe_req *r;       moe_req_new(&r, eng, ids, n, &params, &callbacks, &e);
 *   moe_sched_submit(s, r, &e);  ...more...
 *   moe_sched_run(s, &e);    // steps until every submitted request has finished
 *   moe_req_get_result(r)->finish ...; moe_req_free(r);
 * Text arrives through callbacks.text as it is produced (never half a UTF-8
 * character, never text a stop string later cuts); callbacks.done is called
 * once when the request finishes.
 *
 * How to use — steps (what the scheduler and benchmarks do):
 *   moe_seq *a, *b;  moe_seq_new(&a, eng, &e); moe_seq_new(&b, eng, &e);
 *   moe_step_token t[] = {{a, 5, 0, NULL}, {a, 9, 1, logits_a}, {b, 7, 0, logits_b}};
 *   moe_engine_step(eng, t, 3, &e);
 * Attention runs per sequence; the MoE FFN groups every token of the step by
 * expert whatever its sequence, so each chosen expert is read once per step.
 *
 * Batch invariance: a token's logits are bit-identical whatever else is in
 * its step (other sequences, other tokens of its own sequence), the step
 * size and the thread count: every reduction has a fixed order per output
 * element and activations are quantised per token.  (The KV block size,
 * fixed per engine, is part of that order: attention sums block by block.)
 *
 * Threads: an engine and everything made from it belong to one thread at a
 * time (the server's scheduler thread).  The model may be shared.
 */
#ifndef MOE_ENGINE_H
#define MOE_ENGINE_H

#include "model.h"
#include "sampler.h"
#include "text.h"

#include <jansson.h>

typedef struct moe_engine moe_engine;
typedef struct moe_seq moe_seq;
typedef struct moe_req moe_req;
typedef struct moe_sched moe_sched;

/* ---------------------------------------------------------------- engine */

typedef struct moe_engine_params {
	int n_threads;   /* 0: moe_default_threads() */
	int n_batch;     /* most tokens per forward pass (0: 256); longer steps are split */
	int kv_size;     /* tokens the KV pool holds, all sequences together
			  * (0: the model's training context, at most 4096) */
	int kv_type;     /* MOE_F16 (also when 0) or MOE_Q8_0 */
	int kv_block;    /* tokens per KV block (0: 64) */
	bool kv_keep_all; /* sliding-window layers keep every position, as the
			   * other layers do, instead of their window only
			   * (same results; for comparisons) */
	moe_expert_store *experts; /* NULL: the model's resident store */
} moe_engine_params;

/* MOE_EINVAL for a bad parameter (named), MOE_EUNSUPPORTED for a KV type
 * the model's head size cannot use, MOE_ENOMEM. */
int moe_engine_new(moe_engine **out, const moe_model *m, const moe_engine_params *p,
		   moe_error *e);
/* Every sequence of the engine must have been freed first. */
void moe_engine_free(moe_engine *eng);
const moe_model *moe_engine_model(const moe_engine *eng);
/* Logits per token: the model's vocabulary (rows of the embedding), which
 * may exceed the tokenizer's (padding rows). */
uint32_t moe_engine_n_vocab(const moe_engine *eng);
int moe_engine_n_batch(const moe_engine *eng);
/* Most tokens one sequence may hold: the pool's size. */
int moe_engine_n_ctx(const moe_engine *eng);

/* The KV block pool.  Used blocks belong to at least one sequence; cached
 * ones belong to none but still hold a full block of some earlier prompt
 * that a new sequence with the same start reuses (they are the first to be
 * recycled, least recently used first); free = blocks never used or given
 * back partly filled.  used + cached + free = n_blocks. */
typedef struct moe_kv_stats {
	int block_tokens;  /* tokens per block */
	int n_blocks;
	int n_used, n_cached, n_free;
	int peak_used;     /* most blocks used at once */
	size_t block_bytes;
	uint64_t n_shared_tokens; /* prompt tokens reused from the pool so far */
	/* Sliding-window layers whose rows live in window slots (0: none;
	 * then block_bytes covers every layer, else the other layers only):
	 * slots held now, most held at once, bytes of one (block_tokens
	 * positions of those layers).  KV memory in use = n_used * block_bytes
	 * + n_win_used * win_slot_bytes. */
	int n_win_layers, n_win_used, peak_win_used;
	size_t win_slot_bytes;
} moe_kv_stats;
void moe_engine_kv_stats(const moe_engine *eng, moe_kv_stats *out);

/* Routing statistics: if set, called for every token and MoE layer with the
 * chosen experts (moe-bench --expert-stats), from the stepping thread, layer
 * by layer and within a layer in the step's token order. */
typedef void (*moe_route_fn)(void *user, int layer, const int32_t *experts, const float *weights,
			     int k);
void moe_engine_set_route_callback(moe_engine *eng, moe_route_fn fn, void *user);

/* Hidden states (embeddings): if set, called for every token of a step
 * with its last hidden state after the output norm (n_embd floats, valid
 * during the call), from the stepping thread.  Costs nothing unset. */
typedef void (*moe_hidden_fn)(void *user, const moe_seq *s, int pos, const float *h, int n_embd);
void moe_engine_set_hidden_callback(moe_engine *eng, moe_hidden_fn fn, void *user);

/* Activation observer (an importance matrix): if set, called before every
 * product with a weight matrix with the rows that multiply it — x is
 * [n_rows x w->cols] floats, the exact values the kernels then quantise.
 * expert is the expert id for an expert's matrices, else -1; layer is -1 for
 * the output matrix.  Calls come from the stepping thread (with an observer
 * set, experts run one at a time over all threads).  Costs nothing unset.
 * n_parts > 1: w is a stack of n_parts matrices (deepseek2's per-head
 * attn_k_b / attn_v_b, UTH shape [cols, rows / n_parts, n_parts]) and x
 * multiplies matrix `part` only; every part sees the same tokens.  Else
 * n_parts is 0 and x multiplies all of w. */
typedef struct moe_matmul_obs {
	const moe_weight *w;
	int layer, expert;
	const float *x;
	int64_t n_rows;
	int part, n_parts;
} moe_matmul_obs;
typedef void (*moe_observe_fn)(void *user, const moe_matmul_obs *o);
void moe_engine_set_observer(moe_engine *eng, moe_observe_fn fn, void *user);

/* ------------------------------------------------------------- sequences */

/* An empty sequence (position 0).  Holds no KV blocks until it has tokens. */
int moe_seq_new(moe_seq **out, moe_engine *eng, moe_error *e);
/* Gives its blocks back to the pool (full ones stay cached for reuse). */
void moe_seq_free(moe_seq *s);
/* Tokens in the sequence (its next position) and their ids. */
int moe_seq_pos(const moe_seq *s);
const int32_t *moe_seq_tokens(const moe_seq *s);
/* Forget everything from position pos on (a chat rewind); blocks past it go
 * back to the pool.  With sliding-window layers whose rows before pos's
 * window were given back (moe_kv_stats), the sequence starts again from 0:
 * read moe_seq_pos() after it. */
void moe_seq_truncate(moe_seq *s, int pos);
/* Prefix sharing: on an empty sequence, take the pool's blocks that already
 * hold ids[0..) (whole blocks, same tokens from position 0), without
 * recomputing them.  At least one token is left to evaluate, so that the
 * caller gets fresh logits (a shared block that is then written is copied
 * first).  Returns the number of tokens taken (the new position). */
int moe_seq_share_prefix(moe_seq *s, const int32_t *ids, size_t n);
/* Prompt cache files (moe-run(1), PROMPT CACHE FILES): save the KV state of
 * the first n_tokens positions with their token ids, zstd-compressed and
 * XXH3-checked, tied to the model file and the KV type; written atomically.
 * Returns 0, MOE_EINVAL, MOE_EIO or MOE_ENOMEM; MOE_EUNSUPPORTED (nothing
 * written) when sliding-window layers have given back rows of those
 * positions (the sequence went more than a window past them). */
int moe_seq_save(moe_seq *s, int n_tokens, const char *path, moe_error *e);
/* Load into an empty sequence the cached positions that prompt[0..n)
 * starts with (at least one prompt token is left to evaluate); *n_loaded
 * tells how many (0: the cache holds another beginning).  A file that is
 * not a prompt cache, damaged, truncated (MOE_EFORMAT, MOE_ECHECKSUM) or
 * made for another model or KV type (MOE_EINVAL) changes nothing. */
int moe_seq_load(moe_seq *s, const char *path, const int32_t *prompt, size_t n,
		 int *n_loaded, moe_error *e);
/* KV blocks a sequence of n tokens needs. */
int moe_engine_blocks_for(const moe_engine *eng, int n_tokens);
/* Blocks that can be had now (free + cached). */
int moe_engine_blocks_available(const moe_engine *eng);

/* ------------------------------------------------------------------ steps */

typedef struct moe_step_token {
	moe_seq *seq;
	int32_t id;      /* token id < moe_engine_n_vocab */
	int32_t pos;     /* its position: the sequence's next one (tokens of one
			  * sequence in order) */
	float *logits;   /* NULL, or n_vocab floats to fill */
} moe_step_token;

/* Evaluate n tokens (any mix of sequences), n_batch at a time, and append
 * them to their sequences.  MOE_EINVAL for a bad id or position (nothing is
 * evaluated), MOE_ERANGE when a sequence would exceed moe_engine_n_ctx or
 * the pool has no block left (nothing is evaluated; the sequences keep
 * their tokens).  Errors of the expert store are passed on. */
int moe_engine_step(moe_engine *eng, const moe_step_token *t, int n, moe_error *e);

/* Evaluate n tokens of one sequence; logits: NULL, or n_vocab floats for
 * the last token, or with all_logits n x n_vocab (one row per token). */
int moe_seq_eval(moe_seq *s, const int32_t *ids, size_t n, float *logits, bool all_logits,
		 moe_error *e);

/* --------------------------------------------------------------- requests */

#define MOE_REQ_MAX_STOP 16

typedef struct moe_req_params {
	moe_sampler_params sampling;
	int n_predict;        /* tokens to generate; -1: until end of text or a full context */
	const char *stop[MOE_REQ_MAX_STOP]; /* stop strings (not emitted; copied by moe_req_new) */
	size_t n_stop;
	bool ignore_eos;      /* keep going past end-of-generation tokens */
} moe_req_params;

/* Defaults: moe_sampler_defaults(), n_predict -1, no stop strings. */
moe_req_params moe_req_params_defaults(void);
/* The one range check of request parameters, for the command line and for
 * JSON requests alike: every number finite and in range (temperature
 * [0, 100], top_k >= 0, top_p (0, 1], min_p [0, 1], repeat_penalty
 * (0, 100], presence/frequency_penalty [-100, 100], repeat_last_n >= -1,
 * n_predict >= -1), stop strings non-empty.  MOE_EINVAL naming the field as
 * the JSON requests spell it ("top_p must be in (0, 1], not 2"). */
int moe_req_params_check(const moe_req_params *p, moe_error *e);

typedef enum {
	MOE_FINISH_NONE = 0,  /* still running */
	MOE_FINISH_STOP,      /* end of text or a stop string */
	MOE_FINISH_LENGTH,    /* n_predict tokens, a full context or a full KV pool */
	MOE_FINISH_ABORT,     /* cancelled, or the text callback asked to stop */
	MOE_FINISH_ERROR,     /* see moe_req_result()->error */
} moe_finish;
/* "stop", "length", "abort", "error" (OpenAI's finish_reason words). */
const char *moe_finish_name(moe_finish f);

typedef struct moe_req_result {
	size_t n_prompt;       /* prompt tokens */
	size_t n_prompt_eval;  /* of which evaluated (the rest shared from the pool) */
	size_t n_gen;          /* generated tokens (an end-of-text token included) */
	moe_finish finish;
	moe_error error;       /* for MOE_FINISH_ERROR */
	double t_queue;        /* seconds from submission to admission */
	double t_prompt, t_gen;
} moe_req_result;

/* Token callback: every sampled token id with the logits it was drawn from
 * (n_vocab floats, valid during the call), before its text; return < 0 to
 * stop the request (finish "abort").  Text callback: the text as it becomes
 * safe to show; return < 0 to stop.  Done: once, when the request ends. */
typedef int (*moe_req_token_fn)(void *user, moe_req *r, int32_t id, const float *logits);
typedef int (*moe_req_text_fn)(void *user, moe_req *r, const char *text, size_t len);
typedef void (*moe_req_done_fn)(void *user, moe_req *r);
typedef struct moe_req_callbacks {
	moe_req_token_fn token; /* may be NULL */
	moe_req_text_fn text;   /* may be NULL */
	moe_req_done_fn done;   /* may be NULL */
	void *user;
} moe_req_callbacks;

/* A request for prompt[0..n) (copied).  MOE_EINVAL for an empty prompt,
 * bad parameters (moe_req_params_check) or a token id out of range;
 * MOE_ERANGE for a prompt longer than the engine's context. */
int moe_req_new(moe_req **out, moe_engine *eng, const int32_t *prompt, size_t n,
		const moe_req_params *p, const moe_req_callbacks *cb, moe_error *e);
/* Frees a finished or never-submitted request (a running one is cancelled
 * first through its scheduler). */
void moe_req_free(moe_req *r);
/* Run the request on the caller's sequence (a conversation kept across
 * requests): its prompt is evaluated after the longest prefix it shares
 * with the tokens the sequence holds, and the sequence is kept, not freed,
 * when the request ends.  Call before submitting. */
void moe_req_use_seq(moe_req *r, moe_seq *s);
const moe_req_result *moe_req_get_result(const moe_req *r);
bool moe_req_done(const moe_req *r);

/* ---------------------------------------------------- request parsing */

/* What a JSON request asks for (moe-run --jsonl; the server's bodies):
 *   {"prompt": "text"} or {"messages": [{"role": .., "content": ..}, ..]}
 *   (messages may carry tool_calls, tool replies and reasoning_content; with
 *   optional "tools" and "chat_template_kwargs" for the template),
 *   sampling: "temperature"/"temp", "top_k", "top_p", "min_p",
 *   "repeat_penalty", "repeat_last_n", "presence_penalty",
 *   "frequency_penalty", "seed"; "n_predict"/"max_tokens"; "stop" (a string
 *   or an array of at most 16); "ignore_eos"; "id" (echoed back).
 * Fields override the defaults; moe_req_params_check judges the result. */
typedef struct moe_req_defaults {
	moe_req_params params;
	const char *system;         /* system prompt for "messages" (NULL: none) */
	const char *chat_template;  /* template name (NULL: the model's own) */
} moe_req_defaults;

typedef struct moe_req_input {
	moe_req_params params;  /* stop strings point into json */
	char *prompt;           /* the prompt text, or the rendered conversation */
	size_t prompt_len;
	bool chat;              /* rendered from "messages": the template placed BOS */
	json_t *id;             /* the request's "id" or NULL (borrowed from json) */
	json_t *json;           /* the parsed request (owned) */
} moe_req_input;

/* Parse one request (len bytes of JSON text).  MOE_EINVAL with a message
 * naming the field.  On success free with moe_req_input_free. */
int moe_req_parse(const char *text, size_t len, const moe_tokenizer *tok,
		  const moe_req_defaults *d, moe_req_input *out, moe_error *e);
void moe_req_input_free(moe_req_input *in);
/* The same for a parsed JSON object (a reference is taken; the caller keeps
 * its own), e.g. after the server has checked its nesting depth. */
int moe_req_parse_json(json_t *req, const moe_tokenizer *tok, const moe_req_defaults *d,
		       moe_req_input *out, moe_error *e);
/* Only the sampling fields, "n_predict"/"max_tokens" and "stop" of obj,
 * over what p holds, then moe_req_params_check (Ollama's "options"). */
int moe_req_parse_params(const json_t *obj, moe_req_params *p, moe_error *e);
/* The prompt text of a conversation, with the template named (NULL: the one
 * recognised from the model's) and the model's own BOS/EOS texts. */
int moe_req_render_chat(const moe_tokenizer *tok, const moe_chat_msg *msgs, size_t n,
			const char *system, const char *chat_template, bool gen_prompt,
			char **out, size_t *len, moe_error *e);
/* The same from JSON as a request carries it: messages (role, content and
 * optionally tool_calls, tool replies, reasoning_content, ...), tools (an
 * array or NULL) and extra template variables (an object such as
 * {"enable_thinking": false}, or NULL), passed to the template unchanged
 * (moe_chat_apply). */
int moe_req_render_messages(const moe_tokenizer *tok, const json_t *messages,
			    const json_t *tools, const json_t *vars, const char *system,
			    const char *chat_template, bool gen_prompt, char **out, size_t *len,
			    moe_error *e);
/* Messages of a JSON array of {"role", "content"} strings (pointing into
 * arr; free the array only).  `what` names it in errors. */
int moe_req_parse_messages(const json_t *arr, const char *what, moe_chat_msg **out, size_t *n,
			   moe_error *e);
/* Tokens for a request's prompt: as llama.cpp, BOS when the tokenizer asks
 * for it unless the text came from a chat template, and special-token text
 * parsed. */
int moe_req_tokenize(const moe_tokenizer *tok, const char *text, size_t len, bool chat,
		     int32_t **ids, size_t *n, moe_error *e);
/* The model a tool uses without -m: $MOE_MODEL, else the first of
 * dirs[i]/name that is readable; NULL if none.  The string is static. */
const char *moe_req_default_model(const char *const *dirs, size_t n_dirs, const char *name);

/* -------------------------------------------------------------- scheduler */

typedef struct moe_sched_params {
	int n_parallel;  /* requests running at once (0: 1) */
	int n_batch;     /* tokens per step (0: the engine's n_batch) */
} moe_sched_params;

int moe_sched_new(moe_sched **out, moe_engine *eng, const moe_sched_params *p, moe_error *e);
/* Cancels whatever still runs (finish "abort", done callbacks called). */
void moe_sched_free(moe_sched *s);
/* Queue a request (first come, first admitted).  The caller keeps it and
 * frees it after it is done. */
int moe_sched_submit(moe_sched *s, moe_req *r, moe_error *e);
/* Stop a queued or running request now: finish "abort", its KV blocks go
 * back to the pool, its done callback is called. */
void moe_sched_cancel(moe_sched *s, moe_req *r);
/* One step: admit queued requests while fewer than n_parallel run and the
 * pool has blocks for their prompts; then one engine step holding one
 * decode token of every generating request and, in what is left of n_batch,
 * chunks of the prompts being prefilled (oldest first), so a long prompt
 * never stalls the others' decoding.  Callbacks run before it returns.
 * Returns the number of requests still queued or running, or < 0 when the
 * engine itself failed (every running request then finishes "error").
 * A request whose sequence needs a KV block when none is left finishes
 * "length"; a request whose prompt alone exceeds the pool finishes
 * "error". */
int moe_sched_step(moe_sched *s, moe_error *e);
/* Step until no request is queued or running. */
int moe_sched_run(moe_sched *s, moe_error *e);

#endif
