/* endpoint.c — moe-bench --endpoint: the latency and throughput of any
 * OpenAI-compatible server, as its users see them.  Each client is a
 * thread with its own libcurl handle that streams /v1/completions requests
 * one after the other (SSE, stream_options.include_usage, ignore_eos so
 * every request generates n_predict tokens; each prompt starts with its
 * client and round numbers, so none is served from a prompt cache); the
 * time to the first text
 * event is the TTFT, the gap from there to the last text event over the
 * tokens in between (the usage chunk's count, so servers that send several
 * tokens per event are measured right) is the inter-token latency, and the
 * tokens of all requests over the wall time is the aggregate rate. */
#include "bench.h"
#include "bench/endpoint_int.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef moe_endpoint_run one;

typedef struct client {
	const moe_endpoint_params *p;
	const char *url, *socket_path;
	char *body;
	struct curl_slist *headers;
	one *runs;       /* [reps] */
	int index;
	unsigned run;    /* this run's number: prompts differ from earlier runs' */
	pthread_t th;
} client;

/* One SSE event's JSON: text seen (TTFT, last token), usage, errors. */
static void event(one *o, const char *data, size_t n)
{
	if (n == 6 && memcmp(data, "[DONE]", 6) == 0)
		return;
	json_t *j = json_loadb(data, n, 0, NULL);
	if (!j) {
		o->error = true;
		snprintf(o->err, sizeof o->err, "not JSON: %.60s", data);
		return;
	}
	json_t *err = json_object_get(j, "error");
	if (err) {
		o->error = true;
		const char *m = json_string_value(json_object_get(err, "message"));
		snprintf(o->err, sizeof o->err, "server: %s", m ? m : "error");
	}
	json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
	const char *text = json_string_value(json_object_get(c0, "text"));
	if (!text)
		text = json_string_value(json_object_get(json_object_get(c0, "delta"), "content"));
	if (text && *text) {
		double now = moe_time_now();
		if (!o->t_first)
			o->t_first = now;
		o->t_last = now;
	}
	json_t *u = json_object_get(j, "usage");
	if (json_is_object(u)) {
		o->n_tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
		o->n_prompt = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
	}
	json_decref(j);
}

size_t moe_endpoint_on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
	one *o = user;
	size_t n = size * nmemb;
	if (o->len + n + 1 > o->cap) {
		size_t nc = o->cap ? o->cap : 4096;
		while (nc < o->len + n + 1)
			nc *= 2;
		char *b = realloc(o->line, nc);
		if (!b)
			return 0;
		o->line = b;
		o->cap = nc;
	}
	memcpy(o->line + o->len, ptr, n);
	o->len += n;
	o->line[o->len] = 0;
	/* events end with a blank line */
	char *start = o->line, *end;
	while ((end = strstr(start, "\n\n"))) {
		for (char *l = start; l < end;) {
			char *nl = memchr(l, '\n', (size_t)(end - l));
			char *le = nl ? nl : end;
			if (le - l > 6 && memcmp(l, "data: ", 6) == 0)
				event(o, l + 6, (size_t)(le - l - 6));
			l = le + 1;
		}
		start = end + 2;
	}
	o->len -= (size_t)(start - o->line);
	memmove(o->line, start, o->len + 1);
	return n;
}

static void *client_main(void *arg)
{
	client *c = arg;
	CURL *h = curl_easy_init();
	for (int r = 0; r < c->p->reps && h; r++) {
		one *o = &c->runs[r];
		curl_easy_reset(h);
		curl_easy_setopt(h, CURLOPT_URL, c->url);
		if (c->socket_path)
			curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
		/* a prompt of its own per request (run, client and round first), so
		 * that no server can answer from a prompt cache what a first
		 * request would have to compute — not even from an earlier run
		 * against the same server (moe-serve keeps full KV blocks) */
		char head[64];
		snprintf(head, sizeof head, "%06u %d %d:", c->run, c->index, r);
		json_t *b = json_loads(c->body, 0, NULL);
		char *text = malloc(strlen(head) + strlen(c->p->prompt) + 1);
		char *bs = NULL;
		if (b && text) {
			strcpy(text, head);
			strcat(text, c->p->prompt);
			json_object_set_new(b, "prompt", json_string(text));
			bs = json_dumps(b, JSON_COMPACT);
		}
		json_decref(b);
		free(text);
		if (!bs) {
			o->error = true;
			snprintf(o->err, sizeof o->err, "out of memory");
			continue;
		}
		curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, bs);
		free(bs);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, moe_endpoint_on_data);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, o);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
		curl_easy_setopt(h, CURLOPT_TIMEOUT, 3600L);
		o->t0 = moe_time_now();
		CURLcode rc = curl_easy_perform(h);
		long status = 0;
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
		if (rc != CURLE_OK) {
			o->error = true;
			snprintf(o->err, sizeof o->err, "%s", curl_easy_strerror(rc));
		} else if (status != 200) {
			o->error = true;
			snprintf(o->err, sizeof o->err, "HTTP status %ld: %.200s", status,
				 o->line ? o->line : "");
		} else if (!o->t_first) {
			o->error = true;
			snprintf(o->err, sizeof o->err, "no text in the stream");
		}
		free(o->line);
		o->line = NULL;
		o->len = o->cap = 0;
	}
	if (h)
		curl_easy_cleanup(h);
	return NULL;
}

int moe_bench_endpoint_run(const moe_endpoint_params *p, moe_endpoint_result *res, moe_error *e)
{
	memset(res, 0, sizeof *res);
	if (!p->url || p->n_clients < 1 || p->reps < 1 || p->n_predict < 1 || !p->prompt)
		return moe_err(e, MOE_EINVAL, "endpoint: bad parameters");
	/* unix:PATH talks HTTP over a Unix socket */
	const char *socket_path = NULL;
	char url[2048];
	const char *base = p->url;
	if (strncmp(base, "unix:", 5) == 0) {
		socket_path = base + 5;
		base = "http://localhost";
	} else if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) {
		return moe_err(e, MOE_EINVAL, "--endpoint %s: expected http://HOST[:PORT][/v1/...] "
			       "or unix:PATH", p->url);
	}
	size_t bl = strlen(base);
	while (bl && base[bl - 1] == '/')
		bl--;
	if (strstr(base, "/v1/"))
		snprintf(url, sizeof url, "%.*s", (int)bl, base);
	else if (bl >= 3 && strncmp(base + bl - 3, "/v1", 3) == 0)
		snprintf(url, sizeof url, "%.*s/completions", (int)bl, base);
	else
		snprintf(url, sizeof url, "%.*s/v1/completions", (int)bl, base);
	unsigned run = (unsigned)((uint64_t)(moe_time_now() * 1e6) % 1000000);
	json_t *body = json_pack("{s:s,s:i,s:b,s:{s:b},s:b,s:f}", "prompt", "", "max_tokens",
				 p->n_predict, "stream", 1, "stream_options", "include_usage", 1,
				 "ignore_eos", 1, "temperature", 0.0);
	if (body && p->model)
		json_object_set_new(body, "model", json_string(p->model));
	char *bs = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!bs)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
	char auth[1100];
	if (p->api_key) {
		snprintf(auth, sizeof auth, "Authorization: Bearer %.1024s", p->api_key);
		hd = curl_slist_append(hd, auth);
	}
	client *cs = calloc((size_t)p->n_clients, sizeof *cs);
	one *runs = calloc((size_t)p->n_clients * (size_t)p->reps, sizeof *runs);
	if (!cs || !runs || !hd) {
		free(cs);
		free(runs);
		free(bs);
		curl_slist_free_all(hd);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	double t0 = moe_time_now();
	int started = 0;
	for (int i = 0; i < p->n_clients; i++) {
		cs[i] = (client){.p = p, .index = i, .run = run, .url = url, .socket_path = socket_path, .body = bs,
				 .headers = hd, .runs = runs + (size_t)i * p->reps};
		if (pthread_create(&cs[i].th, NULL, client_main, &cs[i]) != 0)
			break;
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(cs[i].th, NULL);
	res->wall_s = moe_time_now() - t0;
	size_t n = (size_t)started * p->reps;
	double *ttft = calloc(n + 1, sizeof *ttft), *itl = calloc(n + 1, sizeof *itl),
	       *np = calloc(n + 1, sizeof *np);
	int rc = 0;
	if (!ttft || !itl || !np)
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	size_t k = 0, ki = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		one *o = &runs[i];
		res->n_requests++;
		if (o->error) {
			if (res->n_failed++ == 0)
				snprintf(res->first_error, sizeof res->first_error, "%s", o->err);
			continue;
		}
		ttft[k] = (o->t_first - o->t0) * 1e3;
		np[k++] = (double)o->n_prompt;
		res->n_tokens += (uint64_t)(o->n_tokens > 0 ? o->n_tokens : 0);
		if (o->n_tokens > 1)
			itl[ki++] = (o->t_last - o->t_first) * 1e3 / (double)(o->n_tokens - 1);
	}
	if (rc == 0) {
		moe_bench_summarize(ttft, k, &res->ttft_ms);
		moe_bench_summarize(itl, ki, &res->itl_ms);
		moe_bench_summarize(np, k, &res->prompt_tokens);
		res->tokens_per_s = res->wall_s > 0 ? (double)res->n_tokens / res->wall_s : 0;
		if (started < p->n_clients)
			rc = moe_err(e, MOE_ENOMEM, "cannot start %d client threads", p->n_clients);
		else if (res->n_failed == res->n_requests)
			rc = moe_err(e, MOE_ENET, "%s: every request failed: %s", p->url, res->first_error);
	}
	free(ttft);
	free(itl);
	free(np);
	free(runs);
	free(cs);
	free(bs);
	curl_slist_free_all(hd);
	return rc;
}
