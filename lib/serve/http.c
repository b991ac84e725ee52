/* http.c — the HTTP layer: listeners (TCP, Unix socket), the per-
 * connection handler with its safety checks (body size, JSON nesting, API
 * key, Host header, CORS), responses, streaming and disconnect detection.
 * Endpoints live in api.c. */
#include "serve/serve_int.h"
#include "experts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

moe_serve_params moe_serve_defaults(void)
{
	return (moe_serve_params){
		.host = "127.0.0.1", .port = 8080, .n_parallel = 4, .queue_max = 64,
		.max_body = (size_t)8 << 20, .max_header = (size_t)64 << 10, .max_depth = 64,
		.max_connections = 256, .idle_timeout = 30, .keep_alive = 300,
	};
}

void buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t nc = *cap ? *cap : 256;
		while (nc < *len + n + 1)
			nc *= 2;
		char *p = realloc(*b, nc);
		if (!p)
			return; /* text lost rather than a crash; the length says so */
		*b = p;
		*cap = nc;
	}
	memcpy(*b + *len, s, n);
	*len += n;
	(*b)[*len] = 0;
}

/* ------------------------------------------------------------ responses */

static void add_common(http_req *r, struct MHD_Response *resp)
{
	if (r->srv->cors) {
		MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->srv->cors);
		MHD_add_response_header(resp, "Vary", "Origin");
	}
}

static enum MHD_Result send_buf(http_req *r, unsigned status, const char *type, char *body,
				size_t len)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", type);
	add_common(r, resp);
	if (status == 503)
		MHD_add_response_header(resp, "Retry-After", "1");
	if (status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	if (status >= 400) {
		pthread_mutex_lock(&r->srv->mu);
		r->srv->n_errors++;
		if (status == 503)
			r->srv->n_rejected++;
		pthread_mutex_unlock(&r->srv->mu);
	}
	enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

enum MHD_Result http_text(http_req *r, unsigned status, const char *type, const char *text)
{
	char *b = strdup(text);
	return b ? send_buf(r, status, type, b, strlen(b)) : MHD_NO;
}

enum MHD_Result http_json(http_req *r, unsigned status, json_t *body)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!s)
		return MHD_NO;
	size_t n = strlen(s);
	char *b = realloc(s, n + 2);
	if (!b) {
		free(s);
		return MHD_NO;
	}
	b[n] = '\n';
	b[n + 1] = 0;
	return send_buf(r, status, "application/json", b, n + 1);
}

static const char *openai_type(unsigned status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 413: return "invalid_request_error";
	case 429: case 503: return "server_busy";
	case 501: return "not_implemented";
	default: return status >= 500 ? "server_error" : "invalid_request_error";
	}
}

enum MHD_Result http_openai_error(http_req *r, unsigned status, const char *code,
				  const char *param, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_t *err = json_pack("{s:s%,s:s,s:o,s:o}", "message", msg, strlen(msg), "type",
				openai_type(status), "param",
				param ? json_string(param) : json_null(), "code",
				code ? json_string(code) : json_null());
	return http_json(r, status, json_pack("{s:o}", "error", err));
}

enum MHD_Result http_ollama_error(http_req *r, unsigned status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return http_json(r, status, json_pack("{s:s%}", "error", msg, strlen(msg)));
}

/* --------------------------------------------------- the client's socket */

bool http_client_gone(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};
	if (poll(&p, 1, 0) <= 0)
		return false;
	return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static void deadline(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

bool http_wait(http_req *r, job *j)
{
	moe_serve *s = r->srv;
	pthread_mutex_lock(&s->mu);
	while (!j->done) {
		struct timespec ts;
		deadline(&ts, 100);
		pthread_cond_timedwait(&j->cv, &s->mu, &ts);
		if (!j->done && !j->cancel && http_client_gone(r->fd)) {
			j->cancel = true;
			pthread_cond_signal(&j->sl->cv);
		}
		if (j->cancel) {
			pthread_mutex_unlock(&s->mu);
			return false;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return true;
}

/* ----------------------------------------------------------- streaming */

typedef struct stream {
	job *j;
	int fd;
	stream_fill_fn fill;
	void *ctx;
	void (*ctx_free)(void *);
	char *out;
	size_t out_len, out_cap, out_pos;
	size_t text_seen, lps_seen;
	bool end;
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	stream *st = cls;
	job *j = st->j;
	moe_serve *s = j->sl->srv;
	while (st->out_pos == st->out_len) {
		if (st->end)
			return MHD_CONTENT_READER_END_OF_STREAM;
		st->out_len = st->out_pos = 0;
		pthread_mutex_lock(&s->mu);
		while (!j->done && j->text_len == st->text_seen && j->n_lps == st->lps_seen) {
			struct timespec ts;
			deadline(&ts, 100);
			pthread_cond_timedwait(&j->cv, &s->mu, &ts);
			if (http_client_gone(st->fd)) {
				j->cancel = true;
				pthread_cond_signal(&j->sl->cv);
				pthread_mutex_unlock(&s->mu);
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
		}
		bool done = j->done;
		size_t tl = j->text_len - st->text_seen, nl = j->n_lps - st->lps_seen;
		char *text = tl ? malloc(tl) : NULL;
		lp_entry *lps = nl ? malloc(nl * sizeof *lps) : NULL;
		if ((tl && !text) || (nl && !lps)) {
			free(text);
			free(lps);
			pthread_mutex_unlock(&s->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (tl)
			memcpy(text, j->text + st->text_seen, tl);
		if (nl)
			memcpy(lps, j->lps + st->lps_seen, nl * sizeof *lps);
		st->text_seen += tl;
		st->lps_seen += nl;
		pthread_mutex_unlock(&s->mu);
		st->end = st->fill(st->ctx, j, text, tl, lps, nl, done, &st->out, &st->out_len,
				   &st->out_cap);
		free(text);
		free(lps);
		if (done)
			st->end = true;
	}
	size_t n = st->out_len - st->out_pos;
	if (n > max)
		n = max;
	memcpy(buf, st->out + st->out_pos, n);
	st->out_pos += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	stream *st = cls;
	job *j = st->j;
	slot *sl = j->sl;
	moe_serve *s = sl->srv;
	pthread_mutex_lock(&s->mu);
	if (!j->done) {
		j->cancel = true;
		pthread_cond_signal(&j->sl->cv);
	}
	job_unref_locked(j);
	pthread_mutex_unlock(&s->mu);
	slot_release(sl);
	if (st->ctx_free)
		st->ctx_free(st->ctx);
	free(st->out);
	free(st);
}

/* Send a streamed (chunked, uncached) 200 response of this content type. */
static enum MHD_Result queue_stream(http_req *r, struct MHD_Response *resp, const char *type)
{
	MHD_add_response_header(resp, "Content-Type", type);
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	add_common(r, resp);
	enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
	MHD_destroy_response(resp);
	return rc;
}

enum MHD_Result http_stream(http_req *r, job *j, const char *type, stream_fill_fn fill,
			    void *ctx, void (*ctx_free)(void *))
{
	stream *st = calloc(1, sizeof *st);
	struct MHD_Response *resp = NULL;
	if (st) {
		*st = (stream){.j = j, .fd = r->fd, .fill = fill, .ctx = ctx, .ctx_free = ctx_free};
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st,
							 stream_free);
	}
	if (!resp) {
		/* what stream_free would have let go of */
		free(st);
		pthread_mutex_lock(&r->srv->mu);
		j->cancel = true;
		pthread_cond_signal(&j->sl->cv);
		slot *sl = j->sl;
		job_unref_locked(j);
		pthread_mutex_unlock(&r->srv->mu);
		slot_release(sl);
		if (ctx_free)
			ctx_free(ctx);
		return MHD_NO;
	}
	return queue_stream(r, resp, type);
}

enum MHD_Result http_stream_cb(http_req *r, const char *type, MHD_ContentReaderCallback read,
				void *cls, MHD_ContentReaderFreeCallback free_cls)
{
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read,
								      cls, free_cls);
	if (!resp) {
		free_cls(cls);
		return MHD_NO;
	}
	return queue_stream(r, resp, type);
}

/* ------------------------------------------------------- request checks */

/* Deepest nesting of arrays and objects in a JSON text (strings skipped);
 * stops counting past limit. */
static int json_depth(const char *s, size_t n, int limit)
{
	int d = 0, max = 0;
	bool str = false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				str = false;
		} else if (c == '"') {
			str = true;
		} else if (c == '[' || c == '{') {
			if (++d > max && (max = d) > limit)
				return max;
		} else if (c == ']' || c == '}') {
			d--;
		}
	}
	return max;
}

/* Equal strings, in time that depends only on the lengths. */
static bool key_equal(const char *a, size_t na, const char *b, size_t nb)
{
	unsigned char diff = na != nb;
	for (size_t i = 0; i < nb; i++)
		diff |= (unsigned char)(b[i] ^ (i < na ? a[i] : 0));
	return diff == 0;
}

static bool authorized(http_req *r)
{
	const char *key = r->srv->api_key;
	if (!key)
		return true;
	const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
	const char *x = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Api-Key");
	const char *given = NULL;
	if (h && strncasecmp(h, "Bearer ", 7) == 0)
		given = h + 7;
	else if (x)
		given = x;
	if (!given)
		return false;
	return key_equal(given, strlen(given), key, strlen(key));
}

/* A Host a browser uses for loopback: localhost, *.localhost, 127.x.y.z,
 * [::1], with or without a port. */
static bool host_loopback(const char *h)
{
	if (!h)
		return false;
	char name[256];
	size_t n = strlen(h);
	if (n == 0 || n >= sizeof name)
		return false;
	if (h[0] == '[') {
		const char *e = strchr(h, ']');
		if (!e || (e[1] && e[1] != ':'))
			return false;
		return (size_t)(e - h) == 4 && strncmp(h, "[::1", 4) == 0;
	}
	memcpy(name, h, n + 1);
	char *colon = strchr(name, ':');
	if (colon) {
		for (char *p = colon + 1; *p; p++)
			if (*p < '0' || *p > '9')
				return false;
		*colon = 0;
	}
	size_t ln = strlen(name);
	if (strcasecmp(name, "localhost") == 0 ||
	    (ln > 10 && strcasecmp(name + ln - 10, ".localhost") == 0))
		return true;
	struct in_addr a;
	return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* --------------------------------------------------------- the handler */

typedef struct conn_ctx {
	char *body;
	size_t len, cap;
	bool too_big;
} conn_ctx;

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	(void)version;
	moe_serve *s = cls;
	conn_ctx *cc = *con_cls;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	const union MHD_DaemonInfo *di =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON) ?
		MHD_get_daemon_info(MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON)->daemon,
				    MHD_DAEMON_INFO_LISTEN_FD) : NULL;
	http_req r = {.srv = s, .conn = conn, .url = url, .method = method,
		      .fd = ci ? ci->connect_fd : -1};
	bool over_tcp = !di || di->listen_fd != s->unix_fd;
	if (!cc) {
		/* first call: the head is here; check it before any body is read */
		if (!(cc = calloc(1, sizeof *cc)))
			return MHD_NO;
		*con_cls = cc;
		if (over_tcp && s->loopback &&
		    !host_loopback(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host")))
			return http_openai_error(&r, 403, "bad_host", NULL,
						 "Host header must name a loopback address");
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > s->p.max_body)
			return http_openai_error(&r, 413, "body_too_large", NULL,
						 "request body over %zu bytes", s->p.max_body);
		return MHD_YES;
	}
	if (*upload_size) {
		if (cc->len + *upload_size > s->p.max_body) {
			*upload_size = 0;
			if (cc->too_big)
				return MHD_YES;
			cc->too_big = true;
			return http_openai_error(&r, 413, "body_too_large", NULL,
						 "request body over %zu bytes", s->p.max_body);
		}
		buf_add(&cc->body, &cc->len, &cc->cap, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (cc->too_big)
		return MHD_YES;
	pthread_mutex_lock(&s->mu);
	s->n_requests++;
	bool stopping = s->stopping;
	pthread_mutex_unlock(&s->mu);
	if (strcmp(method, "OPTIONS") == 0 && s->cors) {
		struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cors);
		MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
		MHD_add_response_header(resp, "Access-Control-Allow-Headers",
					"Authorization, Content-Type, X-Api-Key");
		MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
		enum MHD_Result rc = MHD_queue_response(conn, 204, resp);
		MHD_destroy_response(resp);
		return rc;
	}
	if (stopping)
		return http_openai_error(&r, 503, "shutting_down", NULL, "the server is shutting down");
	if (strcmp(url, "/health") != 0 && !authorized(&r))
		return http_openai_error(&r, 401, "invalid_api_key", NULL,
					 "a valid API key is required (Authorization: Bearer KEY or X-Api-Key)");
	bool ollama = strncmp(url, "/api/", 5) == 0;
	if (cc->len || strcmp(method, "POST") == 0) {
		if (json_depth(cc->body ? cc->body : "", cc->len, s->p.max_depth) > s->p.max_depth)
			return ollama ? http_ollama_error(&r, 400, "JSON nested deeper than %d", s->p.max_depth)
				      : http_openai_error(&r, 400, "json_too_deep", NULL,
							  "JSON nested deeper than %d", s->p.max_depth);
		json_error_t je;
		r.body = json_loadb(cc->body ? cc->body : "", cc->len, 0, &je);
		if (!r.body && cc->len == 0 && strcmp(method, "POST") != 0)
			; /* GET without a body */
		else if (!json_is_object(r.body)) {
			json_decref(r.body);
			if (!r.body)
				return ollama ? http_ollama_error(&r, 400, "invalid JSON: %s", je.text)
					      : http_openai_error(&r, 400, "invalid_json", NULL,
								  "invalid JSON: %s", je.text);
			return ollama ? http_ollama_error(&r, 400, "the body must be a JSON object")
				      : http_openai_error(&r, 400, "invalid_json", NULL,
							  "the body must be a JSON object");
		}
	}
	enum MHD_Result rc = api_dispatch(&r);
	json_decref(r.body);
	return rc;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	(void)toe;
	conn_ctx *cc = *con_cls;
	if (cc) {
		free(cc->body);
		free(cc);
		*con_cls = NULL;
	}
}

/* ------------------------------------------------------------ listeners */

static int listen_tcp(moe_serve *s, moe_error *e)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char port[16];
	snprintf(port, sizeof port, "%d", s->p.port);
	int g = getaddrinfo(s->host, port, &hints, &ai);
	if (g != 0)
		return moe_err(e, MOE_EINVAL, "--host %s: %s", s->host, gai_strerror(g));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
		int err = errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return moe_err(e, MOE_EIO, "cannot listen on %s port %d: %s", s->host, s->p.port,
			       strerror(err));
	}
	if (ai->ai_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)ai->ai_addr;
		s->loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
	} else if (ai->ai_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ai->ai_addr;
		s->loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
	}
	freeaddrinfo(ai);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	s->tcp_fd = fd;
	return 0;
}

static int listen_unix(moe_serve *s, moe_error *e)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(s->socket_path) >= sizeof a.sun_path)
		return moe_err(e, MOE_EINVAL, "--socket %s: path too long", s->socket_path);
	strcpy(a.sun_path, s->socket_path);
	struct stat st;
	/* a stale socket of an earlier run is replaced; any other file is not */
	if (lstat(s->socket_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return moe_err(e, MOE_EINVAL, "--socket %s: exists and is not a socket",
				       s->socket_path);
		unlink(s->socket_path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	mode_t old = umask(0077); /* only the owner may connect */
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0) {
		int err = errno;
		umask(old);
		if (fd >= 0)
			close(fd);
		return moe_err(e, MOE_EIO, "cannot listen on %s: %s", s->socket_path, strerror(err));
	}
	umask(old);
	s->unix_fd = fd;
	return 0;
}

static struct MHD_Daemon *daemon_on(moe_serve *s, int fd)
{
	return MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			MHD_USE_ITC | MHD_USE_ERROR_LOG, 0,
		NULL, NULL, handle, s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)s->p.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)s->p.idle_timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT, s->p.max_header,
		MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
}

static char *dup_opt(const char *s)
{
	return s ? strdup(s) : NULL;
}

int moe_serve_start(moe_serve **out, const moe_serve_params *p, moe_error *e)
{
	*out = NULL;
	if (p->n_models == 0)
		return moe_err(e, MOE_EINVAL, "no model");
	if (!p->host && !p->socket_path)
		return moe_err(e, MOE_EINVAL, "neither a TCP address nor a socket to listen on");
	if (p->n_parallel < 1 || p->queue_max < 0 || p->max_body < 1 || p->max_depth < 1 ||
	    p->max_connections < 1 || p->idle_timeout < 1 || p->max_header < 1024)
		return moe_err(e, MOE_EINVAL, "bad server limits");
	moe_serve *s = calloc(1, sizeof *s);
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s->p = *p;
	s->tcp_fd = s->unix_fd = s->port = -1;
	s->api_key = dup_opt(p->api_key);
	s->cors = dup_opt(p->cors_origin);
	s->host = dup_opt(p->host);
	s->socket_path = dup_opt(p->socket_path);
	s->chat_template = dup_opt(p->chat_template);
	s->version = strdup(p->version ? p->version : "0");
	s->started = time(NULL);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->mem_cv, NULL);
	int rc = 0;
	if (p->mem_budget && strcmp(p->mem_budget, "min") == 0)
		s->budget_min = true;
	else if (p->mem_budget &&
		 (rc = moe_experts_parse_size(p->mem_budget, 0, &s->budget, e)) < 0)
		moe_err_prefix(e, "--mem-budget (one size shared by all models, or min)");
	for (size_t i = 0; i < p->n_models && rc == 0; i++)
		rc = slot_add(s, p->models[i], e);
	if (rc == 0 && s->host)
		rc = listen_tcp(s, e);
	if (rc == 0 && s->socket_path)
		rc = listen_unix(s, e);
	for (int i = 0; i < s->n_slots && rc == 0; i++)
		rc = slot_start(s->slots[i], e);
	if (rc == 0) {
		/* the default model loads now, so /health tells when it is ready */
		pthread_mutex_lock(&s->mu);
		s->slots[0]->preload = true;
		pthread_cond_signal(&s->slots[0]->cv);
		pthread_mutex_unlock(&s->mu);
	}
	if (rc == 0 && s->tcp_fd >= 0 && !(s->tcp = daemon_on(s, s->tcp_fd)))
		rc = moe_err(e, MOE_EIO, "cannot start the HTTP server on %s", s->host);
	if (rc == 0 && s->unix_fd >= 0 && !(s->unix_d = daemon_on(s, s->unix_fd)))
		rc = moe_err(e, MOE_EIO, "cannot start the HTTP server on %s", s->socket_path);
	if (rc < 0) {
		moe_serve_stop(s);
		return rc;
	}
	*out = s;
	return 0;
}

int moe_serve_port(const moe_serve *s)
{
	return s->tcp_fd >= 0 ? s->port : -1;
}

void moe_serve_stop(moe_serve *s)
{
	if (!s)
		return;
	/* no new connections, then every request cancelled, then the
	 * connection threads (they finish their responses) */
	if (s->tcp)
		MHD_quiesce_daemon(s->tcp);
	if (s->unix_d)
		MHD_quiesce_daemon(s->unix_d);
	slot_stop_all(s);
	api_stop_pulls(s);
	/* let the connection threads send the ends of their answers (bounded) */
	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&s->mu);
		int n = s->n_inflight;
		pthread_mutex_unlock(&s->mu);
		if (n == 0)
			break;
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
	if (s->tcp)
		MHD_stop_daemon(s->tcp);
	if (s->unix_d)
		MHD_stop_daemon(s->unix_d);
	if (s->tcp_fd >= 0)
		close(s->tcp_fd);
	if (s->unix_fd >= 0) {
		close(s->unix_fd);
		unlink(s->socket_path);
	}
	for (int i = 0; i < s->n_slots; i++) {
		pthread_cond_destroy(&s->slots[i]->cv);
		free(s->slots[i]->path);
		free(s->slots[i]);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->mem_cv);
	free(s->api_key);
	free(s->cors);
	free(s->host);
	free(s->socket_path);
	free(s->chat_template);
	free(s->version);
	free(s);
}
