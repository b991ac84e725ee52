/* serve.h — the HTTP server behind moe-serve(1): OpenAI and Ollama APIs over
 * the engine's scheduler (engine.h), on libmicrohttpd.
 *
 * How to use:
 *   moe_serve_params p = moe_serve_defaults();
 *   p.models = (const char *[]){"demo=share/moe-demo.uth"}; p.n_models = 1;
 *   moe_serve *s;  moe_serve_start(&s, &p, &e);   // listening; model loading
 *   ... wait for SIGTERM ...
 *   moe_serve_stop(s);   // stop accepting, cancel in-flight requests, free
 *
 * Threads: one scheduler thread per loaded model owns its engine and steps
 * every request of that model together (continuous batching); libmicrohttpd
 * runs one thread per connection, which parses and tokenizes a request,
 * queues it for the model's scheduler thread and then sends the text that
 * thread produces (SSE, NDJSON, or one JSON body at the end).  A connection
 * that closes cancels its request, which frees its KV blocks at once.
 */
#ifndef MOE_SERVE_H
#define MOE_SERVE_H

#include "core.h"

typedef struct moe_serve moe_serve;

typedef struct moe_serve_params {
	const char *const *models; /* "PATH" or "NAME=PATH"; the first is the default
				    * and is loaded at start, the others on first use */
	size_t n_models;
	const char *host;        /* TCP address (NULL: no TCP listener) */
	int port;                /* 0: any free port (see moe_serve_port) */
	const char *socket_path; /* Unix domain socket (NULL: none) */
	int n_parallel;          /* requests generating at once, per model */
	int queue_max;           /* requests waiting beyond those, per model (then 503) */
	int n_threads, kv_size, n_batch; /* engine parameters (0: defaults) */
	const char *api_key;     /* NULL: no key required */
	const char *cors_origin; /* NULL: no CORS headers */
	size_t max_body;         /* bytes */
	size_t max_header;       /* bytes of a request's head (MHD's memory limit) */
	int max_depth;           /* JSON nesting */
	int max_connections;
	int idle_timeout;        /* seconds a connection may stay silent */
	double keep_alive;       /* seconds an idle model stays loaded (< 0: forever) */
	bool allow_paths;        /* accept model paths in requests */
	const char *mem_budget;  /* SIZE (moe_experts_parse_size, no %) shared by
				  * every loaded model: idle models unload to make
				  * room, else experts stream in what is left; "min":
				  * every model streamed at its minimum; NULL: no limit */
	const char *chat_template; /* NULL: each model's own */
	const char *version;     /* reported by /api/version */
} moe_serve_params;

/* 127.0.0.1:8080, --parallel 4, queue 64, 8 MiB bodies, 64 KiB heads,
 * nesting 64, 256 connections, 30 s idle timeout, keep_alive 300 s. */
moe_serve_params moe_serve_defaults(void);

/* Bind the listeners and start serving (the default model loads in the
 * background; /health answers 503 until it is ready).  MOE_EINVAL for bad
 * parameters (named), MOE_EIO when an address cannot be bound. */
int moe_serve_start(moe_serve **out, const moe_serve_params *p, moe_error *e);
/* The TCP port bound (useful with port 0), or -1 without TCP. */
int moe_serve_port(const moe_serve *s);
/* Stop accepting, cancel in-flight requests (streams get an error event),
 * wait for the connection threads, unload the models and free. */
void moe_serve_stop(moe_serve *s);

#endif
