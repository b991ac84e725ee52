/* serve_int.h — what the server's files share: model slots (slot.c), jobs
 * (one request's life between a connection thread and a scheduler thread),
 * the HTTP layer (http.c) and the endpoints (api.c). */
#ifndef MOE_SERVE_INT_H
#define MOE_SERVE_INT_H

#include "engine.h"
#include "serve.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#define SERVE_MAX_SLOTS 32
#define SERVE_MAX_TOP_LOGPROBS 20
#define SERVE_MAX_PULLS 8       /* /api/pull at once (then 503) */

typedef struct moe_serve moe_serve;
typedef struct slot slot;
typedef struct job job;

typedef enum { SLOT_UNLOADED, SLOT_LOADING, SLOT_READY, SLOT_FAILED } slot_state;

/* One model: loaded on first use by its scheduler thread, unloaded by it
 * after keep_alive seconds without requests.  Fields below `mu` are guarded
 * by the server's mutex. */
struct slot {
	moe_serve *srv;
	char name[128];
	char *path;
	pthread_t thread;
	bool has_thread;
	pthread_cond_t cv;     /* wakes the scheduler thread */
	slot_state state;
	char load_error[512];
	moe_model *model;      /* READY: read by connection threads holding `users` */
	moe_engine *eng;       /* the scheduler thread's alone */
	moe_sched *sched;
	moe_expert_store *experts; /* streamed experts (no room for all), else NULL */
	uint64_t charge;       /* bytes of the memory budget it holds (its weights
				* or, streamed, its store's budget); 0 unloaded */
	bool evict;            /* asked to unload when idle (budget, keep_alive 0);
				* cleared by its thread, which broadcasts mem_cv */
	int load_code;         /* FAILED: the moe_error code of the load */
	bool from_request;     /* a path from a request (--allow-paths) */
	bool preload;          /* load now (the default model at start) */
	int users;             /* connection threads using model/tokenizer */
	job *inbox, *inbox_tail;
	int n_jobs;            /* queued in inbox or running in the scheduler */
	double idle_since, keep_alive; /* unload at idle_since + keep_alive */
	double t_load;         /* seconds the last load took */
	time_t loaded_at;
	moe_kv_stats kv;       /* published after each step */
	int n_ctx;
};

typedef struct lp_entry {
	int32_t id;
	float logprob;
	int n_top;
	int32_t top_id[SERVE_MAX_TOP_LOGPROBS];
	float top_lp[SERVE_MAX_TOP_LOGPROBS];
} lp_entry;

/* A request between its connection thread and the model's scheduler
 * thread; freed by whichever lets go last (refs). */
struct job {
	slot *sl;
	job *next;             /* in the inbox */
	int refs;
	/* set by the connection thread before queueing */
	int32_t *ids;
	size_t n_ids;
	moe_req_params params;
	json_t *hold;          /* keeps the stop strings alive */
	int top_logprobs;      /* -1: no logprobs */
	bool embed;            /* an embedding: pooled hidden state, no generation */
	float *embedding;      /* [n_embd], L2-normalised, when done */
	int n_embd;
	double t_created;
	/* scheduler thread only */
	moe_req *req;
	bool cancel_sent;
	/* guarded by the server mutex */
	pthread_cond_t cv;
	char *text;            /* all text produced so far */
	size_t text_len, text_cap;
	lp_entry *lps;
	size_t n_lps, cap_lps;
	size_t n_gen;
	bool cancel;           /* the client left */
	bool done;
	moe_req_result res;
	double t_first;        /* first token (monotonic), 0 before */
};

struct moe_serve {
	moe_serve_params p;
	char *api_key, *cors, *host, *socket_path, *chat_template, *version;
	pthread_mutex_t mu;
	slot *slots[SERVE_MAX_SLOTS];
	int n_slots;
	bool stopping;
	uint64_t budget;       /* --mem-budget SIZE shared by all models (0: none) */
	bool budget_min;       /* --mem-budget min: each model streamed at its minimum */
	pthread_cond_t mem_cv; /* a slot gave memory back (or refused to) */
	/* the running pulls' cancel flags (api.c), so SIGTERM stops them */
	volatile int *pull_cancel[SERVE_MAX_PULLS];
	int n_pulls;
	int n_inflight;         /* generation requests not yet answered */
	struct MHD_Daemon *tcp, *unix_d;
	int tcp_fd, unix_fd, port;
	bool loopback;         /* TCP bound to a loopback address: Host checked */
	time_t started;
	/* metrics (guarded by mu) */
	uint64_t n_requests, n_errors, n_rejected, n_tokens_in, n_tokens_out;
	double t_gen_total;
	unsigned long long next_id;
};

/* ------------------------------------------------------------- slot.c */
int slot_add(moe_serve *s, const char *spec, moe_error *e);
/* The slot for a request's model name (NULL: the default); with
 * allow_paths a path adds a slot.  MOE_ENOTFOUND / MOE_EINVAL. */
int slot_find(moe_serve *s, const char *name, slot **out, moe_error *e);
/* Take the model for use from a connection thread: loads it if needed and
 * waits.  MOE_EIO/... when it cannot be loaded (message in e). */
int slot_acquire(slot *sl, moe_error *e);
void slot_release(slot *sl);
/* Unload a model now if it is idle (keep_alive 0), else when its requests
 * end.  Caller without the mutex. */
void slot_unload(slot *sl);
int slot_start(slot *sl, moe_error *e);
void slot_stop_all(moe_serve *s);
/* Queue a job (refs taken); MOE_ERANGE when the queue is full. */
int slot_submit(slot *sl, job *j, moe_error *e);
job *job_new(slot *sl);
void job_unref(job *j);            /* takes the server mutex */
void job_unref_locked(job *j);

/* ------------------------------------------------------------- http.c */
/* What a connection thread hands an endpoint. */
typedef struct http_req {
	moe_serve *srv;
	struct MHD_Connection *conn;
	const char *url, *method;
	json_t *body;          /* parsed object (POST) or NULL */
	int fd;                /* the connection's socket (disconnect checks) */
} http_req;

/* Responses (return values of MHD's handler). */
enum MHD_Result http_json(http_req *r, unsigned status, json_t *body); /* steals body */
enum MHD_Result http_text(http_req *r, unsigned status, const char *type, const char *text);
/* {"error":{"message","type","param","code"}} */
enum MHD_Result http_openai_error(http_req *r, unsigned status, const char *code,
				  const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* {"error":"message"} */
enum MHD_Result http_ollama_error(http_req *r, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A streamed response: fill() is called (without the mutex) whenever the
 * job has news and must append the bytes to send; returns true once it
 * has written the last bytes. */
typedef bool (*stream_fill_fn)(void *ctx, job *j, const char *text, size_t len,
			       const lp_entry *lps, size_t n_lps, bool done, char **out,
			       size_t *out_len, size_t *out_cap);
enum MHD_Result http_stream(http_req *r, job *j, const char *type, stream_fill_fn fill,
			    void *ctx, void (*ctx_free)(void *));
/* A streamed response of any producer (200; read and free_cls as MHD's;
 * free_cls is called on failure too). */
enum MHD_Result http_stream_cb(http_req *r, const char *type, MHD_ContentReaderCallback read,
				void *cls, MHD_ContentReaderFreeCallback free_cls);
/* Wait for a job to finish; false if the client went away meanwhile (the
 * job is then cancelled). */
bool http_wait(http_req *r, job *j);
bool http_client_gone(int fd);
void buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n);

/* ------------------------------------------------------------ reply.c */
/* A harmony model's chat answer split into answer and reasoning (NULL
 * unless `chat` and the vocabulary is harmony). */
typedef struct serve_reply serve_reply;
serve_reply *serve_reply_new(const moe_tokenizer *tok, bool chat, bool show_reasoning);
void serve_reply_free(serve_reply *r);
/* One piece of generated text (done: the last); the answer's and the
 * reasoning's parts of it, valid until the next call.  0 or MOE_ENOMEM. */
int serve_reply_split(serve_reply *r, const char *text, size_t len, bool done,
		      const char **content, size_t *content_len, const char **reasoning,
		      size_t *reasoning_len);
/* reasoning_effort (OpenAI) or think (Ollama) of the request body into the
 * normalised request's chat_template_kwargs; *show_reasoning false for
 * think: false.  A bad value: MOE_EINVAL, *param naming the field. */
int serve_reply_template_vars(json_t *q, const json_t *body, bool ollama, bool *show_reasoning,
			      const char **param, moe_error *e);

/* -------------------------------------------------------------- api.c */
enum MHD_Result api_dispatch(http_req *r);
/* Cancel the running pulls and wait for their threads (moe_serve_stop). */
void api_stop_pulls(moe_serve *s);

#endif
