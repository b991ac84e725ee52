/* fuzz-serve.c — libFuzzer target for moe-serve's request handling: the
 * whole path of a request through libmicrohttpd, the HTTP checks of
 * lib/serve/http.c (Host, Content-Length, Authorization / X-Api-Key, JSON
 * depth) and every endpoint of lib/serve/api.c (OpenAI and Ollama bodies,
 * options, keep_alive, tokenize, embeddings, show, models, delete, pull).
 * A server runs in the process on a Unix socket with the demo model
 * (share/moe-demo.uth, or $MOE_FUZZ_MODEL), an API key, a small context
 * (so generation ends fast), an empty store of its own and no network
 * (HF_HUB_OFFLINE=1).  Whatever a client sends, the answer must come (no
 * hang, no crash) and must not be a 500: bad input is the client's error.
 *
 * The first input byte selects the shape of the request:
 *   bit 7 set:   the rest is the raw request, sent as is (headers included);
 *   bit 7 clear: the low bits pick a method and endpoint from the table
 *                below; the rest is the JSON body, sent with a valid key
 *                and Content-Length.
 * Seeds: tests/fuzz/serve/ (each begins with its mode byte).  With
 * MOE_FUZZ_VERBOSE set, each answer's status goes to stderr.
 */
#include "serve.h"

#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "fuzz-key"

static const char *const endpoints[][2] = {
	{"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"},
	{"POST", "/api/generate"},        {"POST", "/api/chat"},
	{"POST", "/v1/embeddings"},       {"POST", "/api/embed"},
	{"POST", "/api/embeddings"},      {"POST", "/tokenize"},
	{"POST", "/detokenize"},          {"POST", "/api/show"},
	{"DELETE", "/api/delete"},        {"POST", "/api/pull"},
	{"GET", "/v1/models"},            {"GET", "/api/tags"},
	{"GET", "/api/ps"},               {"GET", "/health"},
};
#define N_ENDPOINTS (sizeof endpoints / sizeof endpoints[0])

static moe_serve *srv;
static char dir[64], sock[80];

/* One exchange: send req, read the answer until the server closes.
 * Returns the status (0: no status line). */
static int exchange(const char *req, size_t n, char *head, size_t head_n)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path, sock, strlen(sock) + 1); /* setup checked the length */
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
		abort(); /* the server is gone */
	for (size_t done = 0; done < n;) {
		ssize_t w = send(fd, req + done, n - done, MSG_NOSIGNAL);
		if (w <= 0)
			break; /* the server may answer (and close) before the end */
		done += (size_t)w;
	}
	/* no shutdown(SHUT_WR): the server takes a half-closed connection for a
	 * client that left, and cancels its request */
	size_t got = 0;
	char buf[4096];
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int k = poll(&p, 1, 60000);
		if (k == 0)
			__builtin_trap(); /* no answer in a minute: a hang */
		ssize_t r = k < 0 ? -1 : read(fd, buf, sizeof buf);
		if (r <= 0)
			break;
		if (got < head_n - 1) {
			size_t c = (size_t)r < head_n - 1 - got ? (size_t)r : head_n - 1 - got;
			memcpy(head + got, buf, c);
			got += c;
		}
	}
	close(fd);
	head[got] = 0;
	int status = 0;
	if (sscanf(head, "HTTP/1.%*d %d", &status) != 1)
		status = 0;
	return status;
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

/* Stop the server and remove its directory (socket, store). */
static void cleanup(void)
{
	moe_serve_stop(srv);
	nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
	strcpy(dir, "/tmp/fuzz-serve-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(sock, sizeof sock, "%s/sock", dir); /* under 108 bytes: dir is short */
	/* a store, caches and hub of its own, and no network */
	setenv("MOE_STORE", dir, 1);
	setenv("XDG_CACHE_HOME", dir, 1);
	setenv("HF_HOME", dir, 1);
	setenv("HF_HUB_OFFLINE", "1", 1);
	static char model[4200];
	const char *mp = getenv("MOE_FUZZ_MODEL");
	snprintf(model, sizeof model, "demo=%s", mp ? mp : MOE_FUZZ_DEFAULT_MODEL);
	static const char *models[1] = {model};
	moe_serve_params p = moe_serve_defaults();
	p.models = models;
	p.n_models = 1;
	p.host = NULL;
	p.socket_path = sock;
	p.n_parallel = 2;
	p.n_threads = 1;
	p.kv_size = 48;
	p.api_key = KEY;
	p.max_body = 1 << 16;
	p.idle_timeout = 3; /* a request whose body never comes ends soon */
	p.keep_alive = -1;
	p.version = "fuzz";
	moe_error e = {0};
	if (moe_serve_start(&srv, &p, &e) < 0) {
		fprintf(stderr, "fuzz-serve: %s\n", e.msg);
		abort();
	}
	atexit(cleanup);
	char head[256];
	static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	for (int i = 0; exchange(health, sizeof health - 1, head, sizeof head) != 200; i++) {
		if (i == 600)
			abort(); /* the demo model did not load in a minute */
		nanosleep(&(struct timespec){0, 100000000}, NULL);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv)
		setup();
	if (size < 1)
		return 0;
	int mode = data[0];
	data++, size--;
	char *req;
	size_t n;
	if (mode & 0x80) {
		req = malloc(size ? size : 1);
		memcpy(req, data, size);
		n = size;
	} else {
		const char *const *ep = endpoints[mode % N_ENDPOINTS];
		char head[256];
		int h = snprintf(head, sizeof head,
				 "%s %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " KEY
				 "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
				 "Connection: close\r\n\r\n",
				 ep[0], ep[1], size);
		req = malloc((size_t)h + size);
		memcpy(req, head, (size_t)h);
		memcpy(req + h, data, size);
		n = (size_t)h + size;
	}
	char answer[512];
	int status = exchange(req, n, answer, sizeof answer);
	free(req);
	if (getenv("MOE_FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz-serve: %d\n", status);
	/* 500 is the server's own failure; libmicrohttpd's 505 (HTTP/0.x) or
	 * 501, 503 (busy) and 507 (memory) are not */
	if (status == 500) {
		fprintf(stderr, "fuzz-serve: answered %d:\n%s\n", status, answer);
		__builtin_trap();
	}
	return 0;
}
