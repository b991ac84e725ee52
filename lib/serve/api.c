/* api.c — the endpoints: OpenAI (/v1/...), Ollama (/api/...) and the
 * llama-server conveniences (/health, /metrics, /tokenize, /detokenize).
 *
 * A generation request is normalised into what the engine's request
 * parser reads (moe_req_parse_json: prompt or messages, sampling fields,
 * max_tokens, stop), tokenized here on the connection thread, and queued
 * for the model's scheduler thread as a job; its text then goes out as
 * SSE (OpenAI), NDJSON (Ollama) or one JSON body. */
#include "serve/serve_int.h"
#include "experts.h"
#include "registry.h"

#include <math.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { K_CHAT, K_COMPLETION, K_OLLAMA_GENERATE, K_OLLAMA_CHAT } kind;

/* One generation request's answer state (the stream's context). */
typedef struct gen {
	moe_serve *srv;
	kind k;
	slot *sl;
	char model[160];
	char id[48];
	time_t created;
	bool stream, include_usage, logprobs, role_sent;
	int top_logprobs;
	int num_ctx;           /* Ollama's options.num_ctx (0: the server's context) */
	double t_start, t_loaded;
	size_t text_offset;
	serve_reply *reply;  /* harmony chat: answer and reasoning apart (reply.c) */
	bool show_reasoning; /* Ollama think: false hides it */
} gen;

static bool is_ollama(kind k)
{
	return k == K_OLLAMA_GENERATE || k == K_OLLAMA_CHAT;
}

#define ERR(r, g_ollama, status, code, param, ...) \
	((g_ollama) ? http_ollama_error((r), (status), __VA_ARGS__) \
		    : http_openai_error((r), (status), (code), (param), __VA_ARGS__))

/* The status for a model slot_acquire could not take: 503 with
 * Retry-After when it may work later (shutting down, or busy models hold
 * the --mem-budget), 507 when the model does not fit the whole budget, 404
 * for a path a client named that does not load, else 500. */
static unsigned acquire_status(const slot *sl, int rc)
{
	return rc == MOE_ERANGE ? 503 : rc == MOE_ENOMEM ? 507 : sl->from_request ? 404 : 500;
}

/* --------------------------------------------------------- formatting */

static json_t *jstr(const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);
	/* a token piece may be part of a UTF-8 character: send it repaired */
	if (!v) {
		char *fixed;
		size_t fl;
		moe_error e = {0};
		if (moe_utf8_sanitize(s, n, &fixed, &fl, &e) < 0)
			return json_string("");
		v = json_stringn(fixed, fl);
		free(fixed);
	}
	return v ? v : json_string("");
}

static json_t *bytes_of(const char *s, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer((unsigned char)s[i]));
	return a;
}

static json_t *token_json(const moe_tokenizer *tok, int32_t id, float lp, bool bytes)
{
	size_t n = 0;
	const char *p = moe_tokenizer_piece(tok, id, true, &n);
	json_t *o = json_pack("{s:o,s:f}", "token", jstr(p ? p : "", n), "logprob", (double)lp);
	if (bytes)
		json_object_set_new(o, "bytes", bytes_of(p ? p : "", n));
	return o;
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]} */
static json_t *chat_logprobs(const gen *g, const lp_entry *lps, size_t n)
{
	const moe_tokenizer *tok = g->sl->model->tok;
	json_t *content = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *o = token_json(tok, lps[i].id, lps[i].logprob, true);
		json_t *top = json_array();
		for (int t = 0; t < lps[i].n_top; t++)
			json_array_append_new(top, token_json(tok, lps[i].top_id[t], lps[i].top_lp[t], true));
		json_object_set_new(o, "top_logprobs", top);
		json_array_append_new(content, o);
	}
	return json_pack("{s:o}", "content", content);
}

/* completions: {tokens, token_logprobs, top_logprobs: [{tok: lp}], text_offset} */
static json_t *completion_logprobs(gen *g, const lp_entry *lps, size_t n)
{
	const moe_tokenizer *tok = g->sl->model->tok;
	json_t *tokens = json_array(), *lp = json_array(), *top = json_array(), *off = json_array();
	for (size_t i = 0; i < n; i++) {
		size_t pl = 0;
		const char *p = moe_tokenizer_piece(tok, lps[i].id, true, &pl);
		json_array_append_new(tokens, jstr(p ? p : "", pl));
		json_array_append_new(lp, json_real(lps[i].logprob));
		json_t *t = json_object();
		for (int k = 0; k < lps[i].n_top; k++) {
			size_t tl = 0;
			const char *tp = moe_tokenizer_piece(tok, lps[i].top_id[k], true, &tl);
			char *key = strndup(tp ? tp : "", tl);
			json_t *ks = jstr(tp ? tp : "", tl);
			if (key && ks)
				json_object_set_new(t, json_string_value(ks), json_real(lps[i].top_lp[k]));
			json_decref(ks);
			free(key);
		}
		json_array_append_new(top, t);
		json_array_append_new(off, json_integer((json_int_t)g->text_offset));
		g->text_offset += pl;
	}
	return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lp,
			 "top_logprobs", top, "text_offset", off);
}

static const char *finish_word(moe_finish f)
{
	return f == MOE_FINISH_LENGTH ? "length" : "stop";
}

static json_t *usage_json(const job *j)
{
	return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)j->res.n_prompt,
			 "completion_tokens", (json_int_t)j->res.n_gen, "total_tokens",
			 (json_int_t)(j->res.n_prompt + j->res.n_gen));
}

static json_t *openai_error_obj(const job *j)
{
	const char *m = j->res.error.msg[0] ? j->res.error.msg : "generation failed";
	return json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", m, "type", "server_error",
			 "param", "code");
}

static void rfc3339(char *buf, size_t n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char d[32];
	strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, n, "%s.%09ldZ", d, ts.tv_nsec);
}

/* Ollama's closing fields, durations in nanoseconds. */
static void ollama_final(gen *g, const job *j, json_t *o)
{
	double now = moe_time_now();
	json_object_set_new(o, "done", json_true());
	json_object_set_new(o, "done_reason", json_string(finish_word(j->res.finish)));
	json_object_set_new(o, "total_duration", json_integer((json_int_t)((now - g->t_start) * 1e9)));
	json_object_set_new(o, "load_duration", json_integer((json_int_t)((g->t_loaded - g->t_start) * 1e9)));
	json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)j->res.n_prompt));
	json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)(j->res.t_prompt * 1e9)));
	json_object_set_new(o, "eval_count", json_integer((json_int_t)j->res.n_gen));
	json_object_set_new(o, "eval_duration", json_integer((json_int_t)(j->res.t_gen * 1e9)));
}

static json_t *ollama_obj(gen *g, const char *text, size_t len);

/* Ollama's object with a harmony model's reasoning as "thinking". */
static json_t *ollama_obj_thinking(gen *g, const char *text, size_t len, const char *th,
				   size_t th_len)
{
	json_t *o = ollama_obj(g, text, len);
	if (th_len)
		json_object_set_new(g->k == K_OLLAMA_CHAT ? json_object_get(o, "message") : o,
				    "thinking", jstr(th, th_len));
	return o;
}

static json_t *ollama_obj(gen *g, const char *text, size_t len)
{
	char ts[64];
	rfc3339(ts, sizeof ts);
	json_t *o = json_pack("{s:s,s:s}", "model", g->model, "created_at", ts);
	if (g->k == K_OLLAMA_CHAT)
		json_object_set_new(o, "message", json_pack("{s:s,s:o}", "role", "assistant", "content",
							    jstr(text, len)));
	else
		json_object_set_new(o, "response", jstr(text, len));
	json_object_set_new(o, "done", json_false());
	return o;
}

static json_t *openai_chunk(gen *g, json_t *delta_or_text, json_t *logprobs, const char *finish)
{
	json_t *choice = json_pack("{s:i}", "index", 0);
	if (g->k == K_CHAT)
		json_object_set_new(choice, "delta", delta_or_text);
	else
		json_object_set_new(choice, "text", delta_or_text);
	json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
	json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", g->id, "object",
			      g->k == K_CHAT ? "chat.completion.chunk" : "text_completion", "created",
			      (json_int_t)g->created, "model", g->model, "system_fingerprint", "moe",
			      "choices", choice);
	if (g->include_usage)
		json_object_set_new(o, "usage", json_null());
	return o;
}

static void emit(char **out, size_t *len, size_t *cap, const char *pre, json_t *o,
		 const char *post)
{
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return;
	buf_add(out, len, cap, pre, strlen(pre));
	buf_add(out, len, cap, s, strlen(s));
	buf_add(out, len, cap, post, strlen(post));
	free(s);
}

static bool fill(void *ctx, job *j, const char *text, size_t len, const lp_entry *lps,
		 size_t n_lps, bool done, char **out, size_t *olen, size_t *ocap)
{
	gen *g = ctx;
	const char *th = NULL; /* a harmony model's reasoning in this piece */
	size_t th_len = 0;
	if (g->reply)
		serve_reply_split(g->reply, text, len, done, &text, &len, &th, &th_len);
	if (is_ollama(g->k)) {
		if (len || th_len)
			emit(out, olen, ocap, "", ollama_obj_thinking(g, text, len, th, th_len), "\n");
		if (done) {
			if (j->res.finish == MOE_FINISH_ERROR || j->res.finish == MOE_FINISH_ABORT) {
				const char *m = j->res.finish == MOE_FINISH_ABORT
						? "request cancelled (the server is shutting down)"
						: j->res.error.msg[0] ? j->res.error.msg : "generation failed";
				emit(out, olen, ocap, "", json_pack("{s:s}", "error", m), "\n");
				return true;
			}
			json_t *o = ollama_obj(g, "", 0);
			ollama_final(g, j, o);
			emit(out, olen, ocap, "", o, "\n");
		}
		return done;
	}
	if (g->k == K_CHAT && !g->role_sent) {
		g->role_sent = true;
		emit(out, olen, ocap, "data: ",
		     openai_chunk(g, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL),
		     "\n\n");
	}
	if (len || n_lps || th_len) {
		json_t *lp = NULL;
		if (g->logprobs && n_lps)
			lp = g->k == K_CHAT ? chat_logprobs(g, lps, n_lps) : completion_logprobs(g, lps, n_lps);
		json_t *d = g->k == K_CHAT ? json_pack("{s:o}", "content", jstr(text, len)) : jstr(text, len);
		if (th_len && g->k == K_CHAT)
			json_object_set_new(d, "reasoning_content", jstr(th, th_len));
		emit(out, olen, ocap, "data: ", openai_chunk(g, d, lp, NULL), "\n\n");
	}
	if (done) {
		if (j->res.finish == MOE_FINISH_ERROR || j->res.finish == MOE_FINISH_ABORT) {
			if (j->res.finish == MOE_FINISH_ABORT)
				snprintf(j->res.error.msg, sizeof j->res.error.msg,
					 "request cancelled (the server is shutting down)");
			emit(out, olen, ocap, "data: ", openai_error_obj(j), "\n\n");
		} else {
			json_t *d = g->k == K_CHAT ? json_object() : json_string("");
			emit(out, olen, ocap, "data: ", openai_chunk(g, d, NULL, finish_word(j->res.finish)),
			     "\n\n");
			if (g->include_usage)
				emit(out, olen, ocap, "data: ",
				     json_pack("{s:s,s:s,s:I,s:s,s:s,s:[],s:o}", "id", g->id, "object",
					       g->k == K_CHAT ? "chat.completion.chunk" : "text_completion",
					       "created", (json_int_t)g->created, "model", g->model,
					       "system_fingerprint", "moe", "choices", "usage", usage_json(j)),
				     "\n\n");
		}
		buf_add(out, olen, ocap, "data: [DONE]\n\n", 14);
	}
	return done;
}

/* The whole answer at once (stream false). */
static enum MHD_Result answer(http_req *r, gen *g, job *j)
{
	bool ol = is_ollama(g->k);
	if (j->res.finish == MOE_FINISH_ABORT)
		return ERR(r, ol, 503, "shutting_down", NULL, "request cancelled (the server is shutting down)");
	if (j->res.finish == MOE_FINISH_ERROR) {
		int c = j->res.error.code;
		unsigned st = c == MOE_EINVAL || c == MOE_ERANGE ? 400 : 500;
		return ERR(r, ol, st, NULL, NULL, "%s", j->res.error.msg);
	}
	const char *text = j->text ? j->text : "", *th = NULL;
	size_t text_len = j->text_len, th_len = 0;
	if (g->reply)
		serve_reply_split(g->reply, text, text_len, true, &text, &text_len, &th, &th_len);
	if (ol) {
		json_t *o = ollama_obj_thinking(g, text, text_len, th, th_len);
		ollama_final(g, j, o);
		return http_json(r, 200, o);
	}
	json_t *lp = g->logprobs ? (g->k == K_CHAT ? chat_logprobs(g, j->lps, j->n_lps)
						   : completion_logprobs(g, j->lps, j->n_lps))
				 : json_null();
	json_t *choice;
	if (g->k == K_CHAT) {
		choice = json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", 0, "message", "role",
				   "assistant", "content", jstr(text, text_len),
				   "logprobs", lp, "finish_reason", finish_word(j->res.finish));
		if (g->reply)
			json_object_set_new(json_object_get(choice, "message"), "reasoning_content",
					    jstr(th ? th : "", th_len));
	}
	else
		choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text",
				   jstr(j->text ? j->text : "", j->text_len), "logprobs", lp,
				   "finish_reason", finish_word(j->res.finish));
	return http_json(r, 200,
			 json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o],s:o}", "id", g->id, "object",
				   g->k == K_CHAT ? "chat.completion" : "text_completion", "created",
				   (json_int_t)g->created, "model", g->model, "system_fingerprint", "moe",
				   "choices", choice, "usage", usage_json(j)));
}

/* ------------------------------------------------------- normalising */

/* A field that must be a non-negative integer, at most max. */
static int check_count(const json_t *v, const char *name, long max, moe_error *e)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return moe_err(e, MOE_EINVAL, "%s must be a non-negative integer", name);
	if (json_integer_value(v) > max)
		return moe_err(e, MOE_ERANGE, "%s is %lld, more than the context (%ld tokens)", name,
			       (long long)json_integer_value(v), max);
	return 0;
}

/* What moe_req_parse_json reads, from an OpenAI body.  *param names the
 * field at fault. */
static int openai_normalise(gen *g, const json_t *body, json_t **out, const char **param,
			    moe_error *e)
{
	json_t *q = json_object();
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)body, key, v)
		if (!json_is_null(v))
			json_object_set(q, key, v);
	*out = q;
	long ctx = g->sl->n_ctx;
	if ((v = json_object_get(q, "n")) && !(json_is_integer(v) && json_integer_value(v) == 1))
		return *param = "n", moe_err(e, MOE_EINVAL, "only n = 1 is supported");
	if ((v = json_object_get(q, "max_completion_tokens"))) {
		*param = "max_completion_tokens";
		MOE_TRY(check_count(v, "max_completion_tokens", ctx, e));
		json_object_set(q, "max_tokens", v);
	} else if ((v = json_object_get(q, "max_tokens"))) {
		*param = "max_tokens";
		MOE_TRY(check_count(v, "max_tokens", ctx, e));
	}
	json_object_del(q, "n_predict");
	*param = NULL;
	if ((v = json_object_get(q, "stream")) && !json_is_boolean(v))
		return *param = "stream", moe_err(e, MOE_EINVAL, "stream must be true or false");
	g->stream = json_is_true(v);
	if ((v = json_object_get(q, "stream_options"))) {
		if (!json_is_object(v))
			return *param = "stream_options", moe_err(e, MOE_EINVAL, "stream_options must be an object");
		g->include_usage = json_is_true(json_object_get(v, "include_usage"));
	}
	v = json_object_get(q, "logprobs");
	if (g->k == K_CHAT) {
		if (v && !json_is_boolean(v))
			return *param = "logprobs", moe_err(e, MOE_EINVAL, "logprobs must be true or false");
		g->logprobs = json_is_true(v);
		json_t *t = json_object_get(q, "top_logprobs");
		if (t) {
			if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > 20)
				return *param = "top_logprobs",
				       moe_err(e, MOE_EINVAL, "top_logprobs must be an integer in [0, 20]");
			if (!g->logprobs)
				return *param = "top_logprobs",
				       moe_err(e, MOE_EINVAL, "top_logprobs needs logprobs: true");
			g->top_logprobs = (int)json_integer_value(t);
		}
		if (json_object_get(q, "prompt"))
			return *param = "prompt", moe_err(e, MOE_EINVAL, "chat completions take \"messages\", not \"prompt\"");
		if (!json_object_get(q, "messages"))
			return *param = "messages", moe_err(e, MOE_EINVAL, "\"messages\" is required");
	} else {
		if (v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 5)
				return *param = "logprobs", moe_err(e, MOE_EINVAL, "logprobs must be an integer in [0, 5]");
			g->logprobs = true;
			g->top_logprobs = (int)json_integer_value(v);
		}
		json_t *p = json_object_get(q, "prompt");
		if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
			json_object_set(q, "prompt", json_array_get(p, 0));
		else if (json_is_array(p))
			return *param = "prompt", moe_err(e, MOE_EINVAL, "prompt must be one string (batches are not supported)");
		if (json_object_get(q, "messages"))
			return *param = "messages", moe_err(e, MOE_EINVAL, "completions take \"prompt\", not \"messages\"");
		if (!json_object_get(q, "prompt"))
			return *param = "prompt", moe_err(e, MOE_EINVAL, "\"prompt\" is required");
	}
	/* the engine's name for the field (moe-run's JSON has no "logprobs") */
	json_object_del(q, "logprobs");
	return 0;
}

/* From an Ollama body: prompt/messages plus "options" renamed. */
static int ollama_normalise(gen *g, const json_t *body, json_t **out, moe_req_defaults *d,
			    moe_error *e)
{
	json_t *q = json_object();
	*out = q;
	json_t *v = json_object_get(body, "stream");
	if (v && !json_is_boolean(v))
		return moe_err(e, MOE_EINVAL, "stream must be true or false");
	g->stream = !v || json_is_true(v); /* Ollama streams unless told not to */
	json_t *opt = json_object_get(body, "options");
	if (opt && !json_is_object(opt) && !json_is_null(opt))
		return moe_err(e, MOE_EINVAL, "options must be an object");
	static const char *const keep[] = {"temperature", "top_k", "top_p", "min_p", "repeat_penalty",
					   "repeat_last_n", "presence_penalty", "frequency_penalty",
					   "seed", "stop"};
	for (size_t i = 0; opt && i < sizeof keep / sizeof keep[0]; i++)
		if ((v = json_object_get(opt, keep[i])) && !json_is_null(v))
			json_object_set(q, keep[i], v);
	if (opt && (v = json_object_get(opt, "num_predict")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < -1)
			return moe_err(e, MOE_EINVAL, "num_predict must be an integer >= -1");
		if (json_integer_value(v) > g->sl->n_ctx)
			return moe_err(e, MOE_ERANGE, "num_predict is more than the context (%d tokens)",
				       g->sl->n_ctx);
		json_object_set(q, "n_predict", v);
	}
	if (opt && (v = json_object_get(opt, "num_ctx")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1)
			return moe_err(e, MOE_EINVAL, "num_ctx must be a positive integer");
		/* capped at the server's context (-c): the KV cache is that big */
		json_int_t c = json_integer_value(v);
		g->num_ctx = c < g->sl->n_ctx ? (int)c : g->sl->n_ctx;
	}
	json_t *sys = json_object_get(body, "system");
	if (sys && !json_is_string(sys))
		return moe_err(e, MOE_EINVAL, "system must be a string");
	if (sys)
		d->system = json_string_value(sys);
	if (g->k == K_OLLAMA_CHAT) {
		if (!(v = json_object_get(body, "messages")))
			return moe_err(e, MOE_EINVAL, "\"messages\" is required");
		json_object_set(q, "messages", v);
		return 0;
	}
	v = json_object_get(body, "prompt");
	if (v && !json_is_string(v))
		return moe_err(e, MOE_EINVAL, "prompt must be a string");
	json_t *raw = json_object_get(body, "raw");
	if (!v || json_string_length(v) == 0 || json_is_true(raw) ||
	    !moe_tokenizer_chat_template(g->sl->model->tok)) {
		json_object_set_new(q, "prompt", v ? json_incref(v) : json_string(""));
	} else {
		/* Ollama applies the model's template to a prompt */
		json_object_set_new(q, "messages", json_pack("[{s:s,s:O}]", "role", "user", "content", v));
	}
	return 0;
}

static void gen_free(void *p);

/* Ollama's keep_alive: seconds (a number) or a duration ("10m", "1h",
 * "500ms", "30s"); negative: forever.  *given false when absent. */
static int keep_alive_value(const json_t *body, double *out, bool *given, moe_error *e)
{
	json_t *ka = json_object_get(body, "keep_alive");
	double v;
	*given = false;
	if (!ka || json_is_null(ka))
		return 0;
	if (json_is_number(ka)) {
		v = json_number_value(ka);
	} else if (json_is_string(ka)) {
		char *end;
		v = strtod(json_string_value(ka), &end);
		if (end == json_string_value(ka))
			return moe_err(e, MOE_EINVAL, "keep_alive: not a duration");
		if (strcmp(end, "h") == 0)
			v *= 3600;
		else if (strcmp(end, "m") == 0)
			v *= 60;
		else if (strcmp(end, "ms") == 0)
			v *= 1e-3;
		else if (*end && strcmp(end, "s") != 0)
			return moe_err(e, MOE_EINVAL, "keep_alive: unknown unit '%s'", end);
	} else {
		return moe_err(e, MOE_EINVAL, "keep_alive must be a number or a duration string");
	}
	if (!isfinite(v))
		return moe_err(e, MOE_EINVAL, "keep_alive must be finite");
	*out = v < 0 ? -1 : v;
	*given = true;
	return 0;
}

static int keep_alive(http_req *r, slot *sl, moe_error *e)
{
	double v;
	bool given;
	MOE_TRY(keep_alive_value(r->body, &v, &given, e));
	if (given) {
		pthread_mutex_lock(&r->srv->mu);
		sl->keep_alive = v;
		pthread_mutex_unlock(&r->srv->mu);
	}
	return 0;
}

/* Ollama: keep_alive 0 and nothing to generate (no prompt, no messages)
 * unloads the model without loading it first.  The answer's done_reason
 * is "unload"; a busy model unloads when its requests end. */
static bool unload_asked(const json_t *body, kind k)
{
	double v;
	bool given;
	moe_error e = {0};
	if (keep_alive_value(body, &v, &given, &e) < 0 || !given || v != 0)
		return false;
	const json_t *p = json_object_get(body, k == K_OLLAMA_CHAT ? "messages" : "prompt");
	return !p || json_is_null(p) || (json_is_string(p) && json_string_length(p) == 0) ||
	       (json_is_array(p) && json_array_size(p) == 0);
}

static enum MHD_Result unload_now(http_req *r, gen *g)
{
	pthread_mutex_lock(&r->srv->mu);
	g->sl->keep_alive = 0;
	pthread_mutex_unlock(&r->srv->mu);
	slot_unload(g->sl);
	char ts[64];
	rfc3339(ts, sizeof ts);
	json_t *o = json_pack("{s:s,s:s}", "model", g->model, "created_at", ts);
	if (g->k == K_OLLAMA_CHAT)
		json_object_set_new(o, "message", json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
	else
		json_object_set_new(o, "response", json_string(""));
	json_object_set_new(o, "done", json_true());
	json_object_set_new(o, "done_reason", json_string("unload"));
	enum MHD_Result res = http_json(r, 200, o);
	gen_free(g);
	return res;
}

/* --------------------------------------------------------- generation */

static void inflight(moe_serve *s, int d)
{
	pthread_mutex_lock(&s->mu);
	s->n_inflight += d;
	pthread_mutex_unlock(&s->mu);
}

static void gen_free(void *p)
{
	gen *g = p;
	moe_serve *s = g->srv;
	serve_reply_free(g->reply);
	free(g);
	inflight(s, -1);
}

static enum MHD_Result generate(http_req *r, kind k)
{
	bool ol = is_ollama(k);
	if (strcmp(r->method, "POST") != 0)
		return ERR(r, ol, 405, "method_not_allowed", NULL, "use POST");
	gen *g = calloc(1, sizeof *g);
	if (!g)
		return MHD_NO;
	inflight(r->srv, 1);
	g->srv = r->srv;
	g->k = k;
	g->t_start = moe_time_now();
	g->created = time(NULL);
	g->top_logprobs = 0;
	moe_error e = {0};
	json_t *mv = json_object_get(r->body, "model");
	if (mv && !json_is_string(mv) && !json_is_null(mv)) {
		gen_free(g);
		return ERR(r, ol, 400, "invalid_model", "model", "model must be a string");
	}
	int rc = slot_find(r->srv, json_string_value(mv), &g->sl, &e);
	if (rc < 0) {
		gen_free(g);
		return ERR(r, ol, rc == MOE_ENOTFOUND ? 404 : 400, "model_not_found", "model", "%s", e.msg);
	}
	snprintf(g->model, sizeof g->model, "%s", mv && json_is_string(mv) ? json_string_value(mv)
								       : g->sl->name);
	if (ol && unload_asked(r->body, k))
		return unload_now(r, g);
	if ((rc = slot_acquire(g->sl, &e)) < 0) {
		/* a path a client named that does not load is the client's mistake */
		unsigned st = acquire_status(g->sl, rc);
		gen_free(g);
		return ERR(r, ol, st, st == 507 ? "insufficient_memory" : NULL, "model", "%s", e.msg);
	}
	g->t_loaded = moe_time_now();
	pthread_mutex_lock(&r->srv->mu);
	snprintf(g->id, sizeof g->id, "%s-%llu", k == K_CHAT ? "chatcmpl" : "cmpl", ++r->srv->next_id);
	pthread_mutex_unlock(&r->srv->mu);
	const moe_tokenizer *tok = g->sl->model->tok;
	moe_req_defaults d = {.params = moe_req_params_defaults(),
			      .chat_template = r->srv->chat_template};
	json_t *q = NULL;
	const char *param = NULL;
	moe_req_input in = {0};
	int32_t *ids = NULL;
	size_t n_ids = 0;
	job *j = NULL;
	unsigned status = 400;
	rc = ol ? ollama_normalise(g, r->body, &q, &d, &e) : openai_normalise(g, r->body, &q, &param, &e);
	if (rc == 0)
		rc = serve_reply_template_vars(q, r->body, ol, &g->show_reasoning, &param, &e);
	if (rc == 0 && ol)
		rc = keep_alive(r, g->sl, &e);
	if (rc == 0 && k == K_OLLAMA_GENERATE && json_object_get(q, "prompt") &&
	    json_string_length(json_object_get(q, "prompt")) == 0) {
		/* Ollama: an empty prompt only loads the model */
		char ts[64];
		rfc3339(ts, sizeof ts);
		json_decref(q);
		enum MHD_Result res = http_json(r, 200, json_pack("{s:s,s:s,s:s,s:b,s:s}", "model", g->model,
								   "created_at", ts, "response", "", "done", 1,
								   "done_reason", "load"));
		slot_release(g->sl);
		gen_free(g);
		return res;
	}
	if (rc == 0)
		rc = moe_req_parse_json(q, tok, &d, &in, &e);
	if (rc == 0)
		g->reply = serve_reply_new(tok, in.chat, g->show_reasoning);
	if (rc == 0)
		rc = moe_req_tokenize(tok, in.prompt, in.prompt_len, in.chat, &ids, &n_ids, &e);
	if (rc == 0 && n_ids == 0)
		rc = moe_err(&e, MOE_EINVAL, "the prompt is empty (no tokens)");
	/* the request's context window: num_ctx (Ollama) within the server's */
	int window = g->num_ctx > 0 ? g->num_ctx : g->sl->n_ctx;
	if (rc == 0 && n_ids >= (size_t)window)
		rc = moe_err(&e, MOE_ERANGE, "the prompt has %zu tokens; the context%s holds %d", n_ids,
			     g->num_ctx > 0 ? " (num_ctx)" : "", window);
	if (rc == 0 && !(j = job_new(g->sl)))
		rc = moe_err(&e, MOE_ENOMEM, "out of memory"), status = 500;
	if (rc == 0) {
		j->ids = ids;
		j->n_ids = n_ids;
		ids = NULL;
		j->params = in.params;
		/* generation stops at the window: done_reason "length" */
		int room = window - (int)n_ids;
		if (g->num_ctx > 0 && (j->params.n_predict < 0 || j->params.n_predict > room))
			j->params.n_predict = room;
		j->hold = json_incref(in.json);
		j->top_logprobs = g->logprobs ? g->top_logprobs : -1;
		rc = slot_submit(g->sl, j, &e);
		if (rc < 0)
			status = 503;
	}
	free(ids);
	json_decref(q);
	moe_req_input_free(&in);
	if (rc < 0) {
		job_unref(j);
		slot_release(g->sl);
		gen_free(g);
		return ERR(r, ol, status, status == 503 ? "server_busy" : NULL, param, "%s", e.msg);
	}
	if (g->stream)
		return http_stream(r, j, ol ? "application/x-ndjson" : "text/event-stream", fill, g, gen_free);
	enum MHD_Result res = MHD_NO;
	if (http_wait(r, j))
		res = answer(r, g, j);
	job_unref(j);
	slot_release(g->sl);
	gen_free(g);
	return res;
}

/* ------------------------------------------------------ model listings */

/* A served model's Ollama details; `en`, the registry's entry for its
 * file when it has one, gives the parameter count and weight types. */
static json_t *details(slot *sl, const moe_registry_entry *en)
{
	const char *arch = sl->model ? sl->model->hp.arch : en ? en->architecture : "";
	char psize[32] = "";
	if (en)
		snprintf(psize, sizeof psize, "%llu", (unsigned long long)en->parameters);
	return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format", "uth", "family",
			 arch, "families", arch, "parameter_size", psize, "quantization_level",
			 en ? en->weight_types : "");
}

/* The registry's entries (NULL, 0 without a registry). */
static moe_registry_entry *registry_entries(size_t *n)
{
	moe_error e = {0};
	moe_registry *reg;
	moe_registry_entry *en = NULL;
	*n = 0;
	if (moe_registry_open(&reg, true, &e) < 0)
		return NULL;
	if (moe_registry_list(reg, &en, n, &e) < 0)
		*n = 0;
	moe_registry_close(reg);
	return en;
}

/* The entry whose file the slot serves, or NULL. */
static const moe_registry_entry *entry_of(const slot *sl, const moe_registry_entry *en, size_t n)
{
	for (size_t i = 0; i < n && sl->path; i++)
		if (strcmp(en[i].path, sl->path) == 0)
			return &en[i];
	return NULL;
}

static void iso_time(time_t t, char *buf, size_t n)
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Is NAME among the listed ids ("id" or "name" members)? */
static bool listed(json_t *arr, const char *key, const char *name)
{
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
		if (strcmp(json_string_value(json_object_get(v, key)) ?: "", name) == 0)
			return true;
	return false;
}

/* The registry's models (moe-pull's names, NAME:TAG), after the served
 * ones; a store without a registry lists nothing more. */
static void list_registry(json_t *arr, bool ollama, const moe_registry_entry *en, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char full[400], t[40];
		snprintf(full, sizeof full, "%s:%s", en[i].name, en[i].tag);
		if (listed(arr, ollama ? "name" : "id", full))
			continue;
		if (!ollama) {
			json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:s}", "id", full, "object", "model",
							     "created", (json_int_t)en[i].created, "owned_by", "moe"));
			continue;
		}
		char digest[80];
		snprintf(digest, sizeof digest, "sha256:%s", en[i].sha256);
		iso_time((time_t)en[i].created, t, sizeof t);
		char psize[32];
		snprintf(psize, sizeof psize, "%llu", (unsigned long long)en[i].parameters);
		json_array_append_new(
			arr, json_pack("{s:s,s:s,s:s,s:I,s:s,s:{s:s,s:s,s:s,s:[s],s:s,s:s}}", "name", full,
				       "model", full, "modified_at", t, "size", (json_int_t)en[i].size,
				       "digest", digest, "details", "parent_model", "", "format", "uth",
				       "family", en[i].architecture, "families", en[i].architecture,
				       "parameter_size", psize,
				       "quantization_level", en[i].weight_types));
	}
}

static enum MHD_Result list_models(http_req *r, bool ollama, bool only_loaded)
{
	moe_serve *s = r->srv;
	json_t *arr = json_array();
	size_t n_reg = 0;
	moe_registry_entry *reg = ollama || !only_loaded ? registry_entries(&n_reg) : NULL;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n_slots; i++) {
		slot *sl = s->slots[i];
		if (only_loaded && sl->state != SLOT_READY)
			continue;
		char t[40];
		iso_time(sl->state == SLOT_READY ? sl->loaded_at : s->started, t, sizeof t);
		if (!ollama) {
			json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:s}", "id", sl->name, "object",
							     "model", "created", (json_int_t)s->started, "owned_by", "moe"));
			continue;
		}
		/* size: the weight bytes it holds (its share of --mem-budget);
		 * digest: the file's, when moe-pull registered it (as Ollama's
		 * digest names the pulled model) */
		const moe_registry_entry *en = entry_of(sl, reg, n_reg);
		char digest[80] = "";
		if (en)
			snprintf(digest, sizeof digest, "sha256:%s", en->sha256);
		json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:s,s:o}", "name", sl->name, "model", sl->name,
				      "modified_at", t, "size",
				      (json_int_t)(sl->state == SLOT_READY ? sl->charge : 0), "digest", digest,
				      "details", details(sl, en));
		if (only_loaded) {
			char ex[40];
			time_t until = sl->keep_alive < 0 ? (time_t)253402300799LL
				       : time(NULL) + (time_t)fmax(0, sl->idle_since + sl->keep_alive - moe_time_now());
			iso_time(until, ex, sizeof ex);
			json_object_set_new(o, "expires_at", json_string(ex));
			json_object_set_new(o, "size_vram", json_integer(0));
		}
		json_array_append_new(arr, o);
	}
	pthread_mutex_unlock(&s->mu);
	if (!only_loaded)
		list_registry(arr, ollama, reg, n_reg);
	free(reg);
	if (!ollama)
		return http_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", arr));
	return http_json(r, 200, json_pack("{s:o}", "models", arr));
}

static enum MHD_Result one_model(http_req *r, const char *name)
{
	moe_error e = {0};
	slot *sl;
	if (slot_find(r->srv, name, &sl, &e) < 0)
		return http_openai_error(r, 404, "model_not_found", "model", "%s", e.msg);
	return http_json(r, 200, json_pack("{s:s,s:s,s:I,s:s}", "id", sl->name, "object", "model",
					   "created", (json_int_t)r->srv->started, "owned_by", "moe"));
}

static enum MHD_Result show(http_req *r)
{
	json_t *mv = json_object_get(r->body, "model");
	if (!mv)
		mv = json_object_get(r->body, "name");
	if (!json_is_string(mv))
		return http_ollama_error(r, 400, "\"model\" is required");
	moe_error e = {0};
	slot *sl;
	int rc = slot_find(r->srv, json_string_value(mv), &sl, &e);
	if (rc < 0)
		return http_ollama_error(r, rc == MOE_ENOTFOUND ? 404 : 400, "%s", e.msg);
	if ((rc = slot_acquire(sl, &e)) < 0)
		return http_ollama_error(r, acquire_status(sl, rc), "%s", e.msg);
	const moe_hparams *hp = &sl->model->hp;
	char k[96];
	json_t *info = json_pack("{s:s}", "general.architecture", hp->arch);
#define INFO(field, v) (snprintf(k, sizeof k, "%s." field, hp->arch), \
			json_object_set_new(info, k, json_integer((json_int_t)(v))))
	INFO("context_length", hp->n_ctx_train);
	INFO("embedding_length", hp->n_embd);
	INFO("block_count", hp->n_layer);
	INFO("vocab_size", hp->n_vocab);
	INFO("expert_count", hp->n_expert);
	INFO("expert_used_count", hp->n_expert_used);
#undef INFO
	const char *tmpl = moe_tokenizer_chat_template(sl->model->tok);
	size_t n_reg;
	moe_registry_entry *reg = registry_entries(&n_reg);
	json_t *o = json_pack("{s:s,s:s,s:o,s:o,s:[s]}", "template", tmpl ? tmpl : "", "modified_at",
			      "1970-01-01T00:00:00Z", "details", details(sl, entry_of(sl, reg, n_reg)),
			      "model_info", info, "capabilities", "completion");
	free(reg);
	slot_release(sl);
	return http_json(r, 200, o);
}

/* ------------------------------------------------ tokenize, detokenize */

static enum MHD_Result tokenize(http_req *r, bool detok)
{
	moe_error e = {0};
	slot *sl;
	int rc = slot_find(r->srv, json_string_value(json_object_get(r->body, "model")), &sl, &e);
	if (rc < 0)
		return http_openai_error(r, rc == MOE_ENOTFOUND ? 404 : 400, "model_not_found", "model", "%s", e.msg);
	if ((rc = slot_acquire(sl, &e)) < 0)
		return http_openai_error(r, acquire_status(sl, rc), NULL, NULL, "%s", e.msg);
	const moe_tokenizer *tok = sl->model->tok;
	enum MHD_Result res;
	if (!detok) {
		json_t *c = json_object_get(r->body, "content");
		json_t *as = json_object_get(r->body, "add_special");
		int32_t *ids = NULL;
		size_t n = 0;
		if (!json_is_string(c)) {
			res = http_openai_error(r, 400, NULL, "content", "\"content\" must be a string");
		} else if (moe_tokenizer_encode(tok, json_string_value(c), json_string_length(c),
						json_is_true(as), true, &ids, &n, &e) < 0) {
			res = http_openai_error(r, 400, NULL, "content", "%s", e.msg);
		} else {
			json_t *a = json_array();
			for (size_t i = 0; i < n; i++)
				json_array_append_new(a, json_integer(ids[i]));
			res = http_json(r, 200, json_pack("{s:o}", "tokens", a));
		}
		free(ids);
	} else {
		json_t *t = json_object_get(r->body, "tokens");
		size_t n = json_array_size(t), i;
		int32_t *ids = malloc((n + 1) * sizeof *ids);
		bool ok = json_is_array(t) && ids;
		json_t *v;
		json_array_foreach(t, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) >= moe_tokenizer_n_tokens(tok))
				ok = false;
			else
				ids[i] = (int32_t)json_integer_value(v);
		}
		char *text = NULL;
		size_t len = 0;
		if (!ok)
			res = http_openai_error(r, 400, NULL, "tokens",
						"\"tokens\" must be an array of token ids below %u",
						moe_tokenizer_n_tokens(tok));
		else if (moe_tokenizer_decode(tok, ids, n, MOE_DETOK_STRIP_SPACE, &text, &len, &e) < 0)
			res = http_openai_error(r, 400, NULL, "tokens", "%s", e.msg);
		else
			res = http_json(r, 200, json_pack("{s:s%}", "content", text, len));
		free(text);
		free(ids);
	}
	slot_release(sl);
	return res;
}

/* ---------------------------------------------------- health, metrics */

static enum MHD_Result health(http_req *r)
{
	moe_serve *s = r->srv;
	pthread_mutex_lock(&s->mu);
	slot_state st = s->slots[0]->state;
	bool loading = st == SLOT_LOADING || (st == SLOT_UNLOADED && s->slots[0]->preload);
	char err[600];
	snprintf(err, sizeof err, "%s", s->slots[0]->load_error);
	pthread_mutex_unlock(&s->mu);
	if (loading)
		return http_json(r, 503, json_pack("{s:s}", "status", "loading model"));
	if (st == SLOT_FAILED)
		return http_json(r, 500, json_pack("{s:s,s:s}", "status", "error", "error", err));
	return http_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result metrics(http_req *r)
{
	moe_serve *s = r->srv;
	char *b = NULL;
	size_t len = 0, cap = 0;
	char line[512];
#define OUT(...) (snprintf(line, sizeof line, __VA_ARGS__), buf_add(&b, &len, &cap, line, strlen(line)))
	pthread_mutex_lock(&s->mu);
	OUT("# HELP moe_requests_total HTTP requests received.\n# TYPE moe_requests_total counter\n"
	    "moe_requests_total %llu\n", (unsigned long long)s->n_requests);
	OUT("# HELP moe_requests_errors_total Requests answered with a 4xx or 5xx status.\n"
	    "# TYPE moe_requests_errors_total counter\nmoe_requests_errors_total %llu\n",
	    (unsigned long long)s->n_errors);
	OUT("# HELP moe_requests_rejected_total Requests refused with 503 (queue full, shutting down).\n"
	    "# TYPE moe_requests_rejected_total counter\nmoe_requests_rejected_total %llu\n",
	    (unsigned long long)s->n_rejected);
	OUT("# HELP moe_prompt_tokens_total Prompt tokens of finished requests.\n"
	    "# TYPE moe_prompt_tokens_total counter\nmoe_prompt_tokens_total %llu\n",
	    (unsigned long long)s->n_tokens_in);
	OUT("# HELP moe_generated_tokens_total Generated tokens of finished requests.\n"
	    "# TYPE moe_generated_tokens_total counter\nmoe_generated_tokens_total %llu\n",
	    (unsigned long long)s->n_tokens_out);
	OUT("# HELP moe_generation_tokens_per_second Generated tokens per second of generation time, per request, averaged.\n"
	    "# TYPE moe_generation_tokens_per_second gauge\nmoe_generation_tokens_per_second %.3f\n",
	    s->t_gen_total > 0 ? (double)s->n_tokens_out / s->t_gen_total : 0.0);
	OUT("# HELP moe_queue_depth Requests queued or running, per model.\n# TYPE moe_queue_depth gauge\n");
	for (int i = 0; i < s->n_slots; i++)
		OUT("moe_queue_depth{model=\"%s\"} %d\n", s->slots[i]->name, s->slots[i]->n_jobs);
	OUT("# HELP moe_model_loaded 1 if the model is resident.\n# TYPE moe_model_loaded gauge\n");
	for (int i = 0; i < s->n_slots; i++)
		OUT("moe_model_loaded{model=\"%s\"} %d\n", s->slots[i]->name, s->slots[i]->state == SLOT_READY);
	OUT("# HELP moe_kv_shared_tokens_total Prompt tokens not computed: full KV blocks of an earlier prompt reused (since the model loaded).\n"
	    "# TYPE moe_kv_shared_tokens_total counter\n");
	for (int i = 0; i < s->n_slots; i++)
		if (s->slots[i]->state == SLOT_READY)
			OUT("moe_kv_shared_tokens_total{model=\"%s\"} %llu\n", s->slots[i]->name,
			    (unsigned long long)s->slots[i]->kv.n_shared_tokens);
	OUT("# HELP moe_model_weight_bytes Weight bytes a loaded model holds (its share of --mem-budget).\n"
	    "# TYPE moe_model_weight_bytes gauge\n");
	for (int i = 0; i < s->n_slots; i++)
		if (s->slots[i]->state == SLOT_READY)
			OUT("moe_model_weight_bytes{model=\"%s\"} %llu\n", s->slots[i]->name,
			    (unsigned long long)s->slots[i]->charge);
	OUT("# HELP moe_pulls_active /api/pull downloads running.\n# TYPE moe_pulls_active gauge\n"
	    "moe_pulls_active %d\n", s->n_pulls);
	OUT("# HELP moe_kv_blocks_used KV cache blocks in use.\n# TYPE moe_kv_blocks_used gauge\n");
	for (int i = 0; i < s->n_slots; i++)
		if (s->slots[i]->state == SLOT_READY)
			OUT("moe_kv_blocks_used{model=\"%s\"} %d\n", s->slots[i]->name, s->slots[i]->kv.n_used);
	OUT("# HELP moe_kv_blocks_total KV cache blocks in the pool.\n# TYPE moe_kv_blocks_total gauge\n");
	for (int i = 0; i < s->n_slots; i++)
		if (s->slots[i]->state == SLOT_READY)
			OUT("moe_kv_blocks_total{model=\"%s\"} %d\n", s->slots[i]->name, s->slots[i]->kv.n_blocks);
	/* --mem-budget: the expert store of each loaded model (its counters
	 * start again when the model is loaded again) */
	static const struct { const char *name, *type, *help; } xm[] = {
		{"moe_experts_requests_total", "counter", "Experts the engine asked the store for."},
		{"moe_experts_hits_total", "counter", "Expert requests found in the cache."},
		{"moe_experts_hit_ratio", "gauge", "Hits per request."},
		{"moe_experts_reads_total", "counter", "Reads of experts from the model file."},
		{"moe_experts_read_bytes_total", "counter", "Bytes of experts read from the model file."},
		{"moe_experts_io_wait_seconds_total", "counter", "Seconds spent waiting for expert reads."},
		{"moe_experts_cache_bytes", "gauge", "Bytes of the expert cache."},
	};
	for (size_t k = 0; k < sizeof xm / sizeof xm[0]; k++) {
		bool any = false;
		for (int i = 0; i < s->n_slots; i++) {
			slot *sl = s->slots[i];
			if (sl->state != SLOT_READY || !sl->experts)
				continue;
			if (!any)
				OUT("# HELP %s %s\n# TYPE %s %s\n", xm[k].name, xm[k].help, xm[k].name, xm[k].type);
			any = true;
			moe_experts_stats st;
			moe_experts_get_stats(sl->experts, &st);
			double v[] = {(double)st.requests, (double)st.hits,
				      st.requests ? (double)st.hits / (double)st.requests : 0.0,
				      (double)st.reads, (double)st.bytes_read, st.io_wait,
				      (double)st.slots * (double)st.slot_bytes};
			OUT("%s{model=\"%s\"} %.17g\n", xm[k].name, sl->name, v[k]);
		}
	}
	pthread_mutex_unlock(&s->mu);
#undef OUT
	enum MHD_Result rc = http_text(r, 200, "text/plain; version=0.0.4", b ? b : "");
	free(b);
	return rc;
}

/* --------------------------------------------------------- embeddings */

typedef enum { EMB_OPENAI, EMB_OLLAMA, EMB_OLLAMA_OLD } emb_style;

#define EMB_MAX_INPUTS 256

static char *base64_floats(const float *v, int n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t len = (size_t)n * 4;
	unsigned char *b = malloc(len + 1);
	char *out = malloc(4 * ((len + 2) / 3) + 1);
	if (!b || !out) {
		free(b);
		free(out);
		return NULL;
	}
	/* little-endian float32, whatever the host */
	for (int i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &v[i], 4);
		for (int k = 0; k < 4; k++)
			b[4 * i + k] = (unsigned char)(u >> (8 * k));
	}
	size_t o = 0;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) |
			     (i + 2 < len ? b[i + 2] : 0);
		out[o++] = tab[w >> 18 & 63];
		out[o++] = tab[w >> 12 & 63];
		out[o++] = i + 1 < len ? tab[w >> 6 & 63] : '=';
		out[o++] = i + 2 < len ? tab[w & 63] : '=';
	}
	out[o] = 0;
	free(b);
	return out;
}

static enum MHD_Result embeddings(http_req *r, emb_style style)
{
	bool ol = style != EMB_OPENAI;
	if (strcmp(r->method, "POST") != 0)
		return ERR(r, ol, 405, "method_not_allowed", NULL, "use POST");
	double t_start = moe_time_now();
	json_t *in = json_object_get(r->body, style == EMB_OLLAMA_OLD ? "prompt" : "input");
	const char *field = style == EMB_OLLAMA_OLD ? "prompt" : "input";
	json_t *mv = json_object_get(r->body, "model");
	const char *fmt = json_string_value(json_object_get(r->body, "encoding_format"));
	if (mv && !json_is_string(mv) && !json_is_null(mv))
		return ERR(r, ol, 400, NULL, "model", "model must be a string");
	if (fmt && strcmp(fmt, "float") != 0 && strcmp(fmt, "base64") != 0)
		return ERR(r, ol, 400, NULL, "encoding_format", "encoding_format must be \"float\" or \"base64\"");
	if (json_object_get(r->body, "dimensions"))
		return ERR(r, ol, 400, NULL, "dimensions", "dimensions is not supported (the model's own size only)");
	/* the inputs: a string, or an array of strings */
	json_t *inputs = json_is_string(in) ? json_pack("[O]", in) : json_incref(in);
	size_t n_in = json_array_size(inputs), i;
	json_t *v;
	bool strings = json_is_array(inputs) && n_in > 0 && n_in <= EMB_MAX_INPUTS;
	json_array_foreach(inputs, i, v)
		strings = strings && json_is_string(v) && json_string_length(v) > 0;
	if (!strings || (style == EMB_OLLAMA_OLD && !json_is_string(in))) {
		json_decref(inputs);
		return ERR(r, ol, 400, NULL, field, "%s must be a non-empty string%s", field,
			   style == EMB_OLLAMA_OLD ? "" : " or an array of 1 to 256 of them");
	}
	moe_error e = {0};
	slot *sl;
	int rc = slot_find(r->srv, json_string_value(mv), &sl, &e);
	if (rc < 0) {
		json_decref(inputs);
		return ERR(r, ol, rc == MOE_ENOTFOUND ? 404 : 400, "model_not_found", "model", "%s", e.msg);
	}
	if ((rc = slot_acquire(sl, &e)) < 0) {
		json_decref(inputs);
		return ERR(r, ol, acquire_status(sl, rc), NULL, "model", "%s", e.msg);
	}
	double t_loaded = moe_time_now();
	json_t *data = json_array();
	size_t n_tokens = 0;
	unsigned status = 0;
	char msg[600] = "";
	json_array_foreach(inputs, i, v) {
		int32_t *ids = NULL;
		size_t n = 0;
		job *j = NULL;
		rc = moe_req_tokenize(sl->model->tok, json_string_value(v), json_string_length(v), false,
				      &ids, &n, &e);
		if (rc == 0 && n >= (size_t)sl->n_ctx)
			rc = moe_err(&e, MOE_ERANGE, "%s %zu has %zu tokens; the context holds %d", field, i,
				     n, sl->n_ctx);
		if (rc == 0 && !(j = job_new(sl)))
			rc = moe_err(&e, MOE_ENOMEM, "out of memory");
		if (rc < 0) {
			free(ids);
			status = rc == MOE_ENOMEM ? 500 : 400;
			snprintf(msg, sizeof msg, "%s", e.msg);
			break;
		}
		j->ids = ids;
		j->n_ids = n;
		j->embed = true;
		if (slot_submit(sl, j, &e) < 0) {
			job_unref(j);
			status = 503;
			snprintf(msg, sizeof msg, "%s", e.msg);
			break;
		}
		if (!http_wait(r, j)) {
			job_unref(j);
			json_decref(data);
			json_decref(inputs);
			slot_release(sl);
			return MHD_NO;
		}
		if (j->res.finish == MOE_FINISH_ERROR || !j->embedding) {
			int c = j->res.error.code;
			status = c == MOE_ERANGE ? 503 : c == MOE_EINVAL ? 400 : 500;
			snprintf(msg, sizeof msg, "%s", j->res.error.msg);
			job_unref(j);
			break;
		}
		n_tokens += n;
		json_t *vec;
		if (fmt && strcmp(fmt, "base64") == 0) {
			char *b64 = base64_floats(j->embedding, j->n_embd);
			vec = b64 ? json_string(b64) : json_null();
			free(b64);
		} else {
			vec = json_array();
			for (int k = 0; k < j->n_embd; k++)
				json_array_append_new(vec, json_real(j->embedding[k]));
		}
		if (style == EMB_OPENAI)
			json_array_append_new(data, json_pack("{s:s,s:I,s:o}", "object", "embedding", "index",
							      (json_int_t)i, "embedding", vec));
		else
			json_array_append_new(data, vec);
		job_unref(j);
	}
	json_decref(inputs);
	char name[160];
	snprintf(name, sizeof name, "%s", mv && json_is_string(mv) ? json_string_value(mv) : sl->name);
	slot_release(sl);
	if (status) {
		json_decref(data);
		return ERR(r, ol, status, status == 503 ? "server_busy" : NULL, field, "%s", msg);
	}
	if (style == EMB_OPENAI)
		return http_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data,
						   "model", name, "usage", "prompt_tokens",
						   (json_int_t)n_tokens, "total_tokens", (json_int_t)n_tokens));
	if (style == EMB_OLLAMA_OLD) {
		json_t *one = json_incref(json_array_get(data, 0));
		json_decref(data);
		return http_json(r, 200, json_pack("{s:o}", "embedding", one));
	}
	double now = moe_time_now();
	return http_json(r, 200, json_pack("{s:s,s:o,s:I,s:I,s:I}", "model", name, "embeddings", data,
					   "total_duration", (json_int_t)((now - t_start) * 1e9),
					   "load_duration", (json_int_t)((t_loaded - t_start) * 1e9),
					   "prompt_eval_count", (json_int_t)n_tokens));
}

/* ----------------------------------------------------- the registry */

static const char *model_arg(http_req *r)
{
	json_t *mv = json_object_get(r->body, "model");
	if (!mv)
		mv = json_object_get(r->body, "name");
	return json_string_value(mv);
}

/* DELETE /api/delete {"model": NAME[:TAG]}: as 'moe-pull rm'.  A served
 * model keeps its loaded copy until it is unloaded. */
static enum MHD_Result delete_model(http_req *r)
{
	const char *name = model_arg(r);
	if (!name || !*name)
		return http_ollama_error(r, 400, "\"model\" is required");
	moe_error e = {0};
	moe_registry *reg;
	bool gone = false;
	int rc = moe_registry_open(&reg, false, &e);
	if (rc == 0) {
		rc = moe_registry_rm(reg, name, &gone, &e);
		moe_registry_close(reg);
	}
	if (rc < 0)
		return http_ollama_error(r, rc == MOE_ENOTFOUND ? 404 : rc == MOE_EINVAL ? 400 : 500,
					 "%s", e.msg);
	return http_text(r, 200, "application/json", "");
}

/* A pull in a thread of its own; the connection sends its status objects
 * as they come.  Freed by whichever of the two lets go last. */
typedef struct pull_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;
	char *src;
	bool stream;
	char *b;              /* NDJSON not yet sent */
	size_t len, cap, sent;
	double t_last;
	bool started;         /* the source resolved: a file is on its way */
	bool done;
	int rc;
	moe_error e;
	moe_registry_entry en;
	moe_serve *srv;
	int fd;               /* the client's socket (disconnect checks) */
	volatile int cancel;  /* the client left or the server stops */
} pull_job;

static void pull_unref(pull_job *p)
{
	pthread_mutex_lock(&p->mu);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&p->mu);
	if (!last)
		return;
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->src);
	free(p->b);
	free(p);
}

/* With p->mu held. */
static void pull_add(pull_job *p, json_t *o)
{
	char *t = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (t && p->stream) {
		buf_add(&p->b, &p->len, &p->cap, t, strlen(t));
		buf_add(&p->b, &p->len, &p->cap, "\n", 1);
	}
	free(t);
	pthread_cond_broadcast(&p->cv);
}

static void pull_progress(void *user, const moe_pull_event *ev)
{
	pull_job *p = user;
	pthread_mutex_lock(&p->mu);
	switch (ev->kind) {
	case MOE_PULL_EV_STAGE:
		pull_add(p, json_pack("{s:s}", "status", ev->msg ? ev->msg : ""));
		break;
	case MOE_PULL_EV_FILE:
	case MOE_PULL_EV_FILE_END:
	case MOE_PULL_EV_BYTES: {
		double now = moe_time_now();
		p->started = true;
		/* byte counts at most every 0.5 s, and a file's start and end */
		if (ev->kind == MOE_PULL_EV_BYTES && now - p->t_last < 0.5)
			break;
		p->t_last = now;
		char st[600];
		snprintf(st, sizeof st, "pulling %.500s", ev->file ? ev->file : "");
		pull_add(p, json_pack("{s:s,s:s,s:I,s:I}", "status", st, "digest", ev->file ? ev->file : "",
				      "total", (json_int_t)ev->file_total,
				      "completed", (json_int_t)(ev->kind == MOE_PULL_EV_FILE_END
								? ev->file_total : ev->file_done)));
		break;
	}
	}
	pthread_mutex_unlock(&p->mu);
}

/* Off the server's list of pulls. */
static void pull_unlist(pull_job *p)
{
	moe_serve *s = p->srv;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n_pulls; i++)
		if (s->pull_cancel[i] == &p->cancel) {
			s->pull_cancel[i] = s->pull_cancel[--s->n_pulls];
			break;
		}
	pthread_mutex_unlock(&s->mu);
}

static void *pull_main(void *arg)
{
	pull_job *p = arg;
	moe_pull_opts o = {.source = p->src, .retries = -1, .out_type = -1,
			   .progress = pull_progress, .user = p, .cancel = &p->cancel};
	moe_registry_entry en;
	moe_error e = {0};
	int rc = moe_pull(&o, &en, &e);
	/* off the server's list: from here on the server may go */
	pull_unlist(p);
	pthread_mutex_lock(&p->mu);
	p->rc = rc;
	p->e = e;
	p->en = en;
	if (rc < 0) {
		pull_add(p, json_pack("{s:s%}", "error", e.msg, strlen(e.msg)));
	} else {
		char dg[80];
		snprintf(dg, sizeof dg, "sha256:%s", en.sha256);
		pull_add(p, json_pack("{s:s,s:s}", "status", "verifying sha256 digest", "digest", dg));
		pull_add(p, json_pack("{s:s}", "status", "writing manifest"));
		pull_add(p, json_pack("{s:s}", "status", "success"));
	}
	p->done = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pull_unref(p);
	return NULL;
}

/* Wait for news, at most a quarter second (with p->mu). */
static void pull_nap(pull_job *p)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 250000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

static ssize_t pull_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	pull_job *p = cls;
	pthread_mutex_lock(&p->mu);
	while (p->sent == p->len && !p->done) {
		pull_nap(p);
		/* the client left while nothing came (a stalled download):
		 * stop the pull; its partial file is removed */
		if (http_client_gone(p->fd)) {
			p->cancel = 1;
			pthread_mutex_unlock(&p->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	size_t n = p->len - p->sent;
	if (n > max)
		n = max;
	memcpy(buf, p->b + p->sent, n);
	p->sent += n;
	pthread_mutex_unlock(&p->mu);
	return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* The response is over: sent whole, or the client went away mid-way. */
static void pull_free(void *cls)
{
	pull_job *p = cls;
	pthread_mutex_lock(&p->mu);
	if (!p->done)
		p->cancel = 1;
	pthread_mutex_unlock(&p->mu);
	pull_unref(p);
}

void api_stop_pulls(moe_serve *s)
{
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n_pulls; i++)
		*s->pull_cancel[i] = 1;
	pthread_mutex_unlock(&s->mu);
	/* a cancelled download stops within about a second; the threads use
	 * the server until they leave its list */
	for (;;) {
		pthread_mutex_lock(&s->mu);
		int n = s->n_pulls;
		pthread_mutex_unlock(&s->mu);
		if (n == 0)
			break;
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
}

static unsigned pull_status(int rc)
{
	return rc == MOE_ENOTFOUND ? 404 : rc == MOE_EINVAL ? 400
	       : rc == MOE_ENET || rc == MOE_ECHECKSUM || rc == MOE_EFORMAT ? 502 : 500;
}

/* POST /api/pull {"model": SOURCE, "stream": bool}: fetch, convert and
 * register through the registry library, as moe-pull SOURCE.  Sources are
 * hub names (ORG/NAME[:QUANT], hf://...); URLs and local paths need
 * --allow-paths.  A failure before the first file (no such repo, ...) gets
 * its status code; once files are coming, a stream carries the status
 * objects as they come and a failure is its last line {"error": ...}.  A
 * client that leaves, or SIGTERM, cancels the pull (the partial file is
 * removed).  At most SERVE_MAX_PULLS run at once (then 503). */
static enum MHD_Result pull(http_req *r)
{
	const char *src = model_arg(r);
	if (!src || !*src)
		return http_ollama_error(r, 400, "\"model\" is required");
	json_t *sv = json_object_get(r->body, "stream");
	if (sv && !json_is_boolean(sv))
		return http_ollama_error(r, 400, "\"stream\" must be true or false");
	bool hf = strncmp(src, "hf://", 5) == 0;
	if (!r->srv->p.allow_paths &&
	    ((!hf && strstr(src, "://")) || src[0] == '/' || src[0] == '.' || strstr(src, "/..") ||
	     access(src, F_OK) == 0))
		return http_ollama_error(r, 403, "pulling from URLs or local files needs --allow-paths");
	pull_job *p = calloc(1, sizeof *p);
	if (!p || !(p->src = strdup(src))) {
		free(p);
		return http_ollama_error(r, 500, "out of memory");
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->refs = 2;
	p->srv = r->srv;
	p->fd = r->fd;
	p->stream = !sv || json_is_true(sv);
	moe_serve *s = r->srv;
	pthread_mutex_lock(&s->mu);
	bool room = !s->stopping && s->n_pulls < SERVE_MAX_PULLS;
	if (room)
		s->pull_cancel[s->n_pulls++] = &p->cancel;
	pthread_mutex_unlock(&s->mu);
	if (!room) {
		p->refs = 1;
		pull_unref(p);
		return http_ollama_error(r, 503, "%d pulls are running; retry later", SERVE_MAX_PULLS);
	}
	pull_add(p, json_pack("{s:s}", "status", "pulling manifest"));
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int prc = pthread_create(&t, &at, pull_main, p);
	pthread_attr_destroy(&at);
	if (prc != 0) {
		pull_unlist(p);
		p->refs = 1;
		pull_unref(p);
		return http_ollama_error(r, 500, "cannot start a thread for the pull");
	}
	pthread_mutex_lock(&p->mu);
	while (!p->done && !(p->stream && p->started)) {
		pull_nap(p);
		if (http_client_gone(p->fd)) {
			/* left before the first byte: cancel; the thread ends alone */
			p->cancel = 1;
			pthread_mutex_unlock(&p->mu);
			pull_unref(p);
			return MHD_NO;
		}
	}
	bool done = p->done;
	int rc = p->rc;
	pthread_mutex_unlock(&p->mu);
	if (done && rc < 0) {
		enum MHD_Result res = http_ollama_error(r, pull_status(rc), "pull %s: %s", src, p->e.msg);
		pull_unref(p);
		return res;
	}
	if (!p->stream) {
		pull_unref(p);
		return http_json(r, 200, json_pack("{s:s}", "status", "success"));
	}
	return http_stream_cb(r, "application/x-ndjson", pull_read, p, pull_free);
}

/* ------------------------------------------------------------ routing */

enum MHD_Result api_dispatch(http_req *r)
{
	const char *u = r->url, *m = r->method;
	bool get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
	moe_serve *s = r->srv;
	if (strcmp(u, "/health") == 0)
		return health(r);
	if (strcmp(u, "/metrics") == 0 && get)
		return metrics(r);
	if (strcmp(u, "/v1/chat/completions") == 0)
		return generate(r, K_CHAT);
	if (strcmp(u, "/v1/completions") == 0)
		return generate(r, K_COMPLETION);
	if (strcmp(u, "/api/generate") == 0)
		return generate(r, K_OLLAMA_GENERATE);
	if (strcmp(u, "/api/chat") == 0)
		return generate(r, K_OLLAMA_CHAT);
	if (strcmp(u, "/v1/models") == 0 && get)
		return list_models(r, false, false);
	if (strncmp(u, "/v1/models/", 11) == 0 && get)
		return one_model(r, u + 11);
	if (strcmp(u, "/api/tags") == 0 && get)
		return list_models(r, true, false);
	if (strcmp(u, "/api/ps") == 0 && get)
		return list_models(r, true, true);
	if (strcmp(u, "/api/show") == 0 && strcmp(m, "POST") == 0)
		return show(r);
	if (strcmp(u, "/api/version") == 0 && get)
		return http_json(r, 200, json_pack("{s:s}", "version", s->version));
	if (strcmp(u, "/tokenize") == 0 && strcmp(m, "POST") == 0)
		return tokenize(r, false);
	if (strcmp(u, "/detokenize") == 0 && strcmp(m, "POST") == 0)
		return tokenize(r, true);
	if (strcmp(u, "/api/pull") == 0 && strcmp(m, "POST") == 0)
		return pull(r);
	if (strcmp(u, "/api/delete") == 0 && strcmp(m, "DELETE") == 0)
		return delete_model(r);
	if (strcmp(u, "/v1/embeddings") == 0)
		return embeddings(r, EMB_OPENAI);
	if (strcmp(u, "/api/embed") == 0)
		return embeddings(r, EMB_OLLAMA);
	if (strcmp(u, "/api/embeddings") == 0)
		return embeddings(r, EMB_OLLAMA_OLD);
	if (strcmp(u, "/") == 0 && get)
		return http_text(r, 200, "text/plain", "moe-serve is running\n");
	if (strncmp(u, "/api/", 5) == 0)
		return http_ollama_error(r, 404, "%s %s: no such endpoint", m, u);
	return http_openai_error(r, 404, "not_found", NULL, "%s %s: no such endpoint", m, u);
}
