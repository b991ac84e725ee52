/* http.c — one HTTP request through libcurl, the way the hub needs it.
 *
 * Redirects are followed here, not by libcurl, for two reasons: the hub's
 * HEAD answer for an LFS file is itself a redirect whose headers
 * (X-Linked-Etag, X-Repo-Commit) we need, and the bearer token must reach
 * only the hub's own origin — each hop decides afresh whether to send it.
 * Response headers are capped in total (a hostile server cannot make us
 * buffer without end), error bodies are kept only in part, and redirects
 * are counted. */
#include "registry_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Error bodies past this are not read further (the transfer is cut). */
#define ERRBODY_DRAIN_MAX (1u << 20)

typedef struct xfer {
	moe_http_resp *r;
	const moe_http_req *q;
	bool sink_aborted;
	size_t drained;
} xfer;

void moe_http_sleep(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Copy a header value (trimmed, quotes kept) into dst. */
static void header_value(char *dst, size_t n, const char *v, size_t len)
{
	while (len && (*v == ' ' || *v == '\t'))
		v++, len--;
	while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
		len--;
	if (len >= n)
		len = n - 1;
	memcpy(dst, v, len);
	dst[len] = '\0';
}

static bool parse_u64(const char *s, uint64_t *out)
{
	if (!isdigit((unsigned char)*s))
		return false;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || (*end && *end != ' ' && *end != '\r' && *end != '\n'))
		return false;
	*out = v;
	return true;
}

size_t moe_http_parse_header(moe_http_resp *r, const char *p, size_t len)
{
	r->header_bytes += len;
	if (r->header_bytes > MOE_HTTP_HEADER_MAX) {
		r->header_overflow = true;
		return 0;
	}
	if (len >= 5 && !strncmp(p, "HTTP/", 5)) {
		/* A new status line (after a 100 Continue, say): start afresh. */
		size_t hb = r->header_bytes;
		char url[sizeof r->url];
		memcpy(url, r->url, sizeof url);
		memset(r, 0, offsetof(moe_http_resp, header_bytes));
		memcpy(r->url, url, sizeof url);
		r->header_bytes = hb;
		/* the code: the digits after the first space, read within the
		 * line (curl's buffer has no NUL, and strtol would skip CR and
		 * LF into whatever follows) */
		const char *sp = memchr(p, ' ', len), *end = p + len;
		long code = 0;
		for (const char *d = sp ? sp + 1 : end; d < end && isdigit((unsigned char)*d) &&
						       code < 1000; d++)
			code = code * 10 + (*d - '0');
		r->status = code;
		return len;
	}
	const char *colon = memchr(p, ':', len);
	if (!colon)
		return len;
	size_t klen = (size_t)(colon - p);
	const char *v = colon + 1;
	size_t vlen = len - klen - 1;
	char val[4096];
	header_value(val, sizeof val, v, vlen);
#define IS(name) (klen == sizeof(name) - 1 && !strncasecmp(p, name, klen))
	if (IS("location"))
		header_value(r->location, sizeof r->location, v, vlen);
	else if (IS("etag"))
		header_value(r->etag, sizeof r->etag, v, vlen);
	else if (IS("x-linked-etag"))
		header_value(r->linked_etag, sizeof r->linked_etag, v, vlen);
	else if (IS("x-repo-commit"))
		header_value(r->repo_commit, sizeof r->repo_commit, v, vlen);
	else if (IS("x-error-code"))
		header_value(r->error_code, sizeof r->error_code, v, vlen);
	else if (IS("x-error-message"))
		header_value(r->error_message, sizeof r->error_message, v, vlen);
	else if (IS("x-linked-size"))
		r->has_linked_size = parse_u64(val, &r->linked_size);
	else if (IS("content-length"))
		r->has_length = parse_u64(val, &r->content_length);
	else if (IS("accept-ranges"))
		r->accept_ranges = strstr(val, "bytes") != NULL;
	else if (IS("retry-after")) {
		uint64_t s;
		if (parse_u64(val, &s))
			r->retry_after = s > 3600 ? 3600 : (double)s;
	} else if (IS("content-range")) {
		/* bytes START-END/TOTAL */
		unsigned long long a, b, t;
		if (sscanf(val, "bytes %llu-%llu/%llu", &a, &b, &t) == 3 && a <= b) {
			r->has_content_range = true;
			r->range_start = a;
			r->range_total = t;
		}
	}
#undef IS
	return len;
}

static size_t on_header(char *p, size_t size, size_t nitems, void *user)
{
	xfer *x = user;
	return moe_http_parse_header(x->r, p, size * nitems);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *user)
{
	xfer *x = user;
	moe_http_resp *r = x->r;
	size_t n = size * nmemb;
	if (x->q->cancel && *x->q->cancel)
		return 0;
	if (r->status >= 200 && r->status < 300 && x->q->sink) {
		size_t got = x->q->sink(x->q->user, r, p, n);
		if (got != n)
			x->sink_aborted = true;
		return got;
	}
	/* Redirect or error answer: keep the start for messages, drop the
	 * rest, and stop reading a body that never ends. */
	size_t room = MOE_HTTP_ERRBODY_MAX - r->body_len;
	size_t k = n < room ? n : room;
	memcpy(r->body + r->body_len, p, k);
	r->body_len += k;
	r->body[r->body_len] = '\0';
	x->drained += n;
	return x->drained > ERRBODY_DRAIN_MAX ? 0 : n;
}

int moe_http_origin(const char *url, char *buf, size_t n)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL;
	int rc = -1;
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
		for (char *c = host; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		int k = snprintf(buf, n, "%s://%s:%s", scheme, host, port);
		rc = k > 0 && (size_t)k < n ? 0 : -1;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return rc;
}

/* base + relative Location -> absolute http(s) URL. */
static int resolve_location(const char *base, const char *loc, char *out, size_t n)
{
	CURLU *u = curl_url();
	char *abs = NULL, *scheme = NULL;
	int rc = -1;
	if (u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_URL, loc, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    (!strcmp(scheme, "http") || !strcmp(scheme, "https")) &&
	    curl_url_get(u, CURLUPART_URL, &abs, 0) == CURLUE_OK && strlen(abs) < n) {
		strcpy(out, abs);
		rc = 0;
	}
	curl_free(abs);
	curl_free(scheme);
	curl_url_cleanup(u);
	return rc;
}

/* libcurl calls this about once a second even when no byte moves. */
static int on_xferinfo(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	const moe_http_cfg *cfg = user;
	return cfg->cancel && *cfg->cancel;
}

static int one_hop(CURL *h, const moe_http_cfg *cfg, const moe_http_req *q, const char *url,
		   moe_http_resp *r, moe_error *e)
{
	memset(r, 0, sizeof *r);
	snprintf(r->url, sizeof r->url, "%s", url);
	xfer x = {.r = r, .q = q};
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL;
	char auth[4200];
	char origin[512];
	if (cfg->token && cfg->token[0] && moe_http_origin(url, origin, sizeof origin) == 0 &&
	    !strcmp(origin, cfg->token_origin)) {
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", cfg->token);
		hdrs = curl_slist_append(hdrs, auth);
	}
	/* Raw bytes: the sizes and hashes we check are of the stored file. */
	hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "moe-pull/" PACKAGE_VERSION);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
	long t = (long)(cfg->timeout > 0 ? cfg->timeout + 0.999 : 30);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, t);
	/* A transfer that moves less than 1 byte/s for `t` seconds is dead. */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, t);
	if (cfg->cancel) {
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, cfg);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}
	if (q->method == MOE_HTTP_HEAD)
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	char range[64];
	if (q->range) {
		if (q->range_to)
			snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)q->range_from,
				 (unsigned long long)q->range_to - 1);
		else
			snprintf(range, sizeof range, "%llu-", (unsigned long long)q->range_from);
		curl_easy_setopt(h, CURLOPT_RANGE, range);
	}
	CURLcode cc = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	if (r->header_overflow)
		return moe_err(e, MOE_EFORMAT, "%s: response headers larger than %d bytes", url,
			       MOE_HTTP_HEADER_MAX);
	if (x.sink_aborted)
		return moe_err(e, MOE_EIO, "%s: transfer stopped by the receiver", url);
	if (cc == CURLE_WRITE_ERROR && r->status && !(r->status >= 200 && r->status < 300))
		return 0; /* an error body we stopped reading */
	if (cc == CURLE_OUT_OF_MEMORY)
		/* libcurl refuses a single header line over its own limit */
		return moe_err(e, MOE_EFORMAT, "%s: response headers larger than libcurl accepts (%s)",
			       url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
	if (cc != CURLE_OK) {
		if ((q->cancel && *q->cancel) || (cfg->cancel && *cfg->cancel))
			return moe_err(e, MOE_EIO, "%s: cancelled", url);
		return moe_err(e, MOE_ENET, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
	}
	return 0;
}

int moe_http_once(CURL *h, const moe_http_cfg *cfg, const moe_http_req *q, moe_http_resp *r,
		  moe_error *e)
{
	char url[4096];
	if (strlen(q->url) >= sizeof url)
		return moe_err(e, MOE_EINVAL, "URL too long");
	strcpy(url, q->url);
	int max = cfg->max_redirects > 0 ? cfg->max_redirects : 10;
	/* The hub's own headers (sha256, size, commit) come with its redirect;
	 * the CDN's final answer does not repeat them: keep them. */
	char linked[sizeof r->linked_etag] = "", commit[sizeof r->repo_commit] = "";
	bool has_lsize = false;
	uint64_t lsize = 0;
	for (int hop = 0;; hop++) {
		MOE_TRY(one_hop(h, cfg, q, url, r, e));
		if (r->linked_etag[0])
			memcpy(linked, r->linked_etag, sizeof linked);
		else
			memcpy(r->linked_etag, linked, sizeof linked);
		if (r->repo_commit[0])
			memcpy(commit, r->repo_commit, sizeof commit);
		else
			memcpy(r->repo_commit, commit, sizeof commit);
		if (r->has_linked_size) {
			has_lsize = true;
			lsize = r->linked_size;
		} else if (has_lsize) {
			r->has_linked_size = true;
			r->linked_size = lsize;
		}
		bool redirect = r->status == 301 || r->status == 302 || r->status == 303 ||
				r->status == 307 || r->status == 308;
		if (!redirect || !q->follow)
			return 0;
		if (!r->location[0])
			return moe_err(e, MOE_EFORMAT, "%s: HTTP %ld redirect without a Location", url,
				       r->status);
		if (hop + 1 > max)
			return moe_err(e, MOE_EFORMAT, "%s: more than %d redirects (a redirect loop?)",
				       q->url, max);
		char next[4096];
		if (resolve_location(url, r->location, next, sizeof next) < 0)
			return moe_err(e, MOE_EFORMAT, "%s: redirect to an unusable location '%.200s'",
				       url, r->location);
		strcpy(url, next);
	}
}

void moe_http_status_text(const moe_http_resp *r, char *buf, size_t n)
{
	const char *what = r->status == 401   ? "authentication required; set HF_TOKEN or log in"
			   : r->status == 403 ? "access denied (a gated repo needs its terms accepted, "
						"and a token with access)"
			   : r->status == 404 ? "not found"
			   : r->status == 429 ? "too many requests"
			   : r->status >= 500 ? "server error"
					      : "unexpected answer";
	if (r->error_code[0] || r->error_message[0])
		snprintf(buf, n, "HTTP %ld, %s (%s%s%s)", r->status, what, r->error_code,
			 r->error_code[0] && r->error_message[0] ? ": " : "", r->error_message);
	else
		snprintf(buf, n, "HTTP %ld, %s", r->status, what);
}

static bool retryable_status(long s)
{
	return s == 429 || s == 408 || (s >= 500 && s <= 599);
}

int moe_http_request(CURL *h, const moe_http_cfg *cfg, moe_http_req *q, moe_http_resp *r,
		     moe_http_retry_fn on_retry, void *user, moe_error *e)
{
	int retries = cfg->retries < 0 ? 5 : cfg->retries;
	double wait = cfg->retry_wait > 0 ? cfg->retry_wait : 1;
	for (int attempt = 0;; attempt++) {
		int rc = moe_http_once(h, cfg, q, r, e);
		bool again = rc == MOE_ENET || (rc == 0 && retryable_status(r->status));
		if (again && cfg->cancel && *cfg->cancel)
			return moe_err(e, MOE_EIO, "%s: cancelled", q->url);
		if (!again)
			return rc;
		if (attempt >= retries) {
			if (rc == 0) {
				char st[512];
				moe_http_status_text(r, st, sizeof st);
				return moe_err(e, MOE_ENET, "%s: %s (gave up after %d attempts)", q->url, st,
					       attempt + 1);
			}
			return moe_err_prefix(e, "gave up after %d attempts", attempt + 1);
		}
		double w = rc == 0 && r->retry_after > 0 ? r->retry_after : wait;
		if (w > 60)
			w = 60;
		char why[512];
		if (rc == 0)
			moe_http_status_text(r, why, sizeof why);
		else
			snprintf(why, sizeof why, "%s", e ? e->msg : "network error");
		moe_log(MOE_LOG_INFO, "%s: %s; retrying in %.1f s", q->url, why, w);
		/* in short naps, so a cancel need not wait out the backoff */
		for (double left = w; left > 0 && !(cfg->cancel && *cfg->cancel); left -= 0.25)
			moe_http_sleep(left < 0.25 ? left : 0.25);
		wait = wait * 2 > 30 ? 30 : wait * 2;
		if ((q->cancel && *q->cancel) || (cfg->cancel && *cfg->cancel))
			return moe_err(e, MOE_EIO, "cancelled");
		if (on_retry)
			MOE_TRY(on_retry(user, q, e));
	}
}
