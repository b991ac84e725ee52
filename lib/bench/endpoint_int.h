/* endpoint_int.h — moe-bench --endpoint's reply parsing, out of endpoint.c
 * so the fuzz target (tests/fuzz/fuzz-endpoint.c) can feed it bytes. */
#ifndef MOE_BENCH_ENDPOINT_INT_H
#define MOE_BENCH_ENDPOINT_INT_H

#include <stdbool.h>
#include <stddef.h>

/* One request's measurements and its reply's bytes not yet split. */
typedef struct moe_endpoint_run {
	double t0, t_first, t_last;
	long n_tokens, n_prompt;
	bool error;
	char err[256];
	char *line;      /* SSE bytes not yet split into events (malloc'd) */
	size_t len, cap;
} moe_endpoint_run;

/* libcurl's write callback (user: a moe_endpoint_run): appends the bytes
 * and handles every complete SSE event ("data: JSON" lines up to a blank
 * line): text events set t_first/t_last, the usage chunk the token counts,
 * an error object or a line that is not JSON sets error and err.  Returns
 * size * nmemb, or 0 when out of memory. */
size_t moe_endpoint_on_data(char *ptr, size_t size, size_t nmemb, void *user);

#endif
