/* request.c — what a request asks for: parameters with their one range
 * check, JSON requests ({"prompt"} or {"messages"} plus sampling fields),
 * chat rendering with the model's template, tokenizing a prompt, and the
 * model used when none is named.  Shared by moe-run and the server. */
#include "engine/engine_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

moe_req_params moe_req_params_defaults(void)
{
	return (moe_req_params){.sampling = moe_sampler_defaults(), .n_predict = -1};
}

/* lo <= v <= hi (open ends where lo_open / hi_open), finite. */
static int check_range(double v, double lo, bool lo_open, double hi, bool hi_open,
		       const char *field, moe_error *e)
{
	if (isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi))
		return 0;
	return moe_err(e, MOE_EINVAL, "%s must be in %c%g, %g%c, not %g", field, lo_open ? '(' : '[',
		       lo, hi, hi_open ? ')' : ']', v);
}

int moe_req_params_check(const moe_req_params *p, moe_error *e)
{
	const moe_sampler_params *s = &p->sampling;
	MOE_TRY(check_range(s->temp, 0, false, 100, false, "temperature", e));
	MOE_TRY(check_range(s->top_k, 0, false, INT_MAX, false, "top_k", e));
	MOE_TRY(check_range(s->top_p, 0, true, 1, false, "top_p", e));
	MOE_TRY(check_range(s->min_p, 0, false, 1, false, "min_p", e));
	MOE_TRY(check_range(s->repeat_penalty, 0, true, 100, false, "repeat_penalty", e));
	MOE_TRY(check_range(s->presence_penalty, -100, false, 100, false, "presence_penalty", e));
	MOE_TRY(check_range(s->frequency_penalty, -100, false, 100, false, "frequency_penalty", e));
	MOE_TRY(check_range(s->repeat_last_n, -1, false, 1 << 24, false, "repeat_last_n", e));
	MOE_TRY(check_range(p->n_predict, -1, false, INT_MAX, false, "n_predict", e));
	if (p->n_stop > MOE_REQ_MAX_STOP)
		return moe_err(e, MOE_EINVAL, "stop: at most %d strings", MOE_REQ_MAX_STOP);
	for (size_t i = 0; i < p->n_stop; i++)
		if (!p->stop[i] || !*p->stop[i])
			return moe_err(e, MOE_EINVAL, "stop strings must not be empty");
	return 0;
}

/* ------------------------------------------------------------------ JSON */

/* A JSON number as a double; "field must be a number" otherwise. */
static int json_num(const json_t *v, const char *field, double *out, moe_error *e)
{
	if (!json_is_number(v))
		return moe_err(e, MOE_EINVAL, "%s must be a number", field);
	*out = json_number_value(v);
	return 0;
}

/* An integer field (a number with no fraction, within int range before the
 * range check proper). */
static int json_int(const json_t *v, const char *field, int *out, moe_error *e)
{
	double d = 0;
	MOE_TRY(json_num(v, field, &d, e));
	if (d != floor(d) || d < INT_MIN || d > INT_MAX)
		return moe_err(e, MOE_EINVAL, "%s must be an integer, not %g", field, d);
	*out = (int)d;
	return 0;
}

int moe_req_parse_messages(const json_t *arr, const char *what, moe_chat_msg **out, size_t *n,
			   moe_error *e)
{
	*out = NULL;
	*n = 0;
	if (!json_is_array(arr))
		return moe_err(e, MOE_EINVAL,
			       "%s: expected a JSON array of {\"role\", \"content\"} messages", what);
	size_t i;
	json_t *v;
	moe_chat_msg *msgs = calloc(json_array_size(arr) + 1, sizeof *msgs);
	if (!msgs)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	json_array_foreach(arr, i, v) {
		msgs[i].role = json_string_value(json_object_get(v, "role"));
		msgs[i].content = json_string_value(json_object_get(v, "content"));
		if (!msgs[i].role || !msgs[i].content) {
			free(msgs);
			return moe_err(e, MOE_EINVAL,
				       "%s: message %zu: needs string \"role\" and \"content\"", what, i);
		}
	}
	*out = msgs;
	*n = json_array_size(arr);
	return 0;
}

int moe_req_render_chat(const moe_tokenizer *tok, const moe_chat_msg *msgs, size_t n,
			const char *system, const char *chat_template, bool gen_prompt,
			char **out, size_t *len, moe_error *e)
{
	/* lib/text chooses: the model's own (Jinja) template, a named one, or a
	 * built-in format (moe_chat_apply). */
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		if (json_array_append_new(arr, json_pack("{s:s, s:s}", "role", msgs[i].role,
							 "content", msgs[i].content)) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	if (!arr)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	moe_chat_opts co = {.template_name = chat_template, .system = system,
			    .add_generation_prompt = gen_prompt};
	int rc = moe_chat_apply(tok, arr, &co, out, len, e);
	json_decref(arr);
	return rc;
}

int moe_req_render_messages(const moe_tokenizer *tok, const json_t *messages,
			    const json_t *tools, const json_t *vars, const char *system,
			    const char *chat_template, bool gen_prompt, char **out, size_t *len,
			    moe_error *e)
{
	/* The messages go to the template as they are (tool_calls, tool
	 * replies, reasoning_content...): moe_chat_apply checks what each
	 * template kind needs. */
	moe_chat_opts co = {.template_name = chat_template, .tools = tools, .vars = vars,
			    .system = system, .add_generation_prompt = gen_prompt};
	return moe_chat_apply(tok, messages, &co, out, len, e);
}

static int parse_fields(const json_t *req, moe_req_params *p, moe_error *e)
{
	static const struct { const char *key; size_t off; } floats[] = {
		{"temperature", offsetof(moe_sampler_params, temp)},
		{"temp", offsetof(moe_sampler_params, temp)},
		{"top_p", offsetof(moe_sampler_params, top_p)},
		{"min_p", offsetof(moe_sampler_params, min_p)},
		{"repeat_penalty", offsetof(moe_sampler_params, repeat_penalty)},
		{"presence_penalty", offsetof(moe_sampler_params, presence_penalty)},
		{"frequency_penalty", offsetof(moe_sampler_params, frequency_penalty)},
	};
	static const struct { const char *key; size_t off; } ints[] = {
		{"top_k", offsetof(moe_sampler_params, top_k)},
		{"repeat_last_n", offsetof(moe_sampler_params, repeat_last_n)},
	};
	for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
		json_t *v = json_object_get(req, floats[i].key);
		double d = 0;
		if (!v)
			continue;
		MOE_TRY(json_num(v, floats[i].key, &d, e));
		/* range-checked as a double: a float cast of 1e300 would be inf */
		if (!isfinite(d) || fabs(d) > 1e6)
			return moe_err(e, MOE_EINVAL, "%s out of range: %g", floats[i].key, d);
		*(float *)((char *)&p->sampling + floats[i].off) = (float)d;
	}
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		json_t *v = json_object_get(req, ints[i].key);
		if (v)
			MOE_TRY(json_int(v, ints[i].key, (int *)((char *)&p->sampling + ints[i].off), e));
	}
	json_t *v = json_object_get(req, "seed");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return moe_err(e, MOE_EINVAL, "seed must be a non-negative integer");
		p->sampling.seed = (uint64_t)json_integer_value(v);
	}
	const char *np = "n_predict";
	v = json_object_get(req, np);
	if (!v)
		v = json_object_get(req, np = "max_tokens");
	if (v)
		MOE_TRY(json_int(v, np, &p->n_predict, e));
	v = json_object_get(req, "ignore_eos");
	if (v) {
		if (!json_is_boolean(v))
			return moe_err(e, MOE_EINVAL, "ignore_eos must be true or false");
		p->ignore_eos = json_is_true(v);
	}
	v = json_object_get(req, "stop");
	if (v) {
		p->n_stop = 0;
		if (json_is_string(v)) {
			p->stop[p->n_stop++] = json_string_value(v);
		} else if (json_is_array(v) && json_array_size(v) <= MOE_REQ_MAX_STOP) {
			size_t i;
			json_t *sv;
			json_array_foreach(v, i, sv) {
				if (!json_is_string(sv))
					return moe_err(e, MOE_EINVAL, "stop entries must be strings");
				p->stop[p->n_stop++] = json_string_value(sv);
			}
		} else {
			return moe_err(e, MOE_EINVAL, "stop must be a string or an array of at most %d",
				       MOE_REQ_MAX_STOP);
		}
	}
	return moe_req_params_check(p, e);
}

int moe_req_parse_params(const json_t *obj, moe_req_params *p, moe_error *e)
{
	if (!json_is_object(obj))
		return moe_err(e, MOE_EINVAL, "a request must be a JSON object");
	return parse_fields(obj, p, e);
}

int moe_req_parse(const char *text, size_t len, const moe_tokenizer *tok,
		  const moe_req_defaults *d, moe_req_input *out, moe_error *e)
{
	memset(out, 0, sizeof *out);
	json_error_t je;
	json_t *req = json_loadb(text, len, 0, &je);
	if (!req)
		return moe_err(e, MOE_EINVAL, "invalid JSON: %s", je.text);
	int rc = moe_req_parse_json(req, tok, d, out, e);
	json_decref(req);
	return rc;
}

int moe_req_parse_json(json_t *req, const moe_tokenizer *tok, const moe_req_defaults *d,
		       moe_req_input *out, moe_error *e)
{
	memset(out, 0, sizeof *out);
	if (!json_is_object(req))
		return moe_err(e, MOE_EINVAL, "a request must be a JSON object");
	out->json = json_incref(req);
	out->id = json_object_get(req, "id");
	out->params = d->params;
	int rc = parse_fields(req, &out->params, e);
	json_t *pj = json_object_get(req, "prompt"), *mj = json_object_get(req, "messages");
	if (rc == 0 && pj && !mj) {
		if (!json_is_string(pj))
			rc = moe_err(e, MOE_EINVAL, "prompt must be a string");
		else if (!(out->prompt = strndup(json_string_value(pj), json_string_length(pj))))
			rc = moe_err(e, MOE_ENOMEM, "out of memory");
		out->prompt_len = json_string_length(pj);
	} else if (rc == 0 && mj && !pj) {
		/* an empty conversation would render to a bare generation prompt:
		 * a client's mistake, not a request */
		if (json_is_array(mj) && json_array_size(mj) == 0)
			rc = moe_err(e, MOE_EINVAL, "messages must not be empty");
		else
			rc = moe_req_render_messages(tok, mj, json_object_get(req, "tools"),
						     json_object_get(req, "chat_template_kwargs"),
						     d->system, d->chat_template, true, &out->prompt,
						     &out->prompt_len, e);
		out->chat = true;
	} else if (rc == 0) {
		rc = moe_err(e, MOE_EINVAL, "a request needs a string \"prompt\" or a \"messages\" array");
	}
	if (rc < 0)
		moe_req_input_free(out);
	return rc;
}

void moe_req_input_free(moe_req_input *in)
{
	free(in->prompt);
	json_decref(in->json);
	memset(in, 0, sizeof *in);
}

int moe_req_tokenize(const moe_tokenizer *tok, const char *text, size_t len, bool chat,
		     int32_t **ids, size_t *n, moe_error *e)
{
	return moe_tokenizer_encode(tok, text, len, !chat, true, ids, n, e);
}

const char *moe_req_default_model(const char *const *dirs, size_t n_dirs, const char *name)
{
	static char path[4096];
	const char *env = getenv("MOE_MODEL");
	if (env && *env)
		return env;
	for (size_t i = 0; i < n_dirs; i++) {
		int n = snprintf(path, sizeof path, "%s/%s", dirs[i], name);
		if (n > 0 && (size_t)n < sizeof path && access(path, R_OK) == 0)
			return path;
	}
	return NULL;
}
