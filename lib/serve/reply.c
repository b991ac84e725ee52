/* reply.c — a harmony model's (gpt-oss's) chat answers in moe-serve: the
 * generated text split into the answer (the final channel: OpenAI's
 * message.content, Ollama's content/response) and the reasoning (the
 * analysis channel: OpenAI's reasoning_content, Ollama's thinking), and
 * the requests' reasoning controls passed to the chat template.
 *
 * The splitting is lib/text's moe_harmony parser; this file only adapts it
 * to the handlers in api.c, which call it through four hooks.  Raw
 * completions (/v1/completions, /api/generate with raw) are not split.
 */
#include <config.h>

#include "serve_int.h"
#include "text/text_int.h" /* moe_sbuf */

#include <stdlib.h>
#include <string.h>

struct serve_reply {
	moe_harmony *h;
	bool show_reasoning; /* false: Ollama's think: false */
	moe_sbuf content, reasoning; /* the current call's output */
};

static int take(void *user, moe_harmony_channel ch, const char *text, size_t len)
{
	serve_reply *r = user;
	if (ch == MOE_HARMONY_FINAL)
		return moe_sbuf_add(&r->content, text, len);
	if (ch == MOE_HARMONY_ANALYSIS && r->show_reasoning)
		return moe_sbuf_add(&r->reasoning, text, len);
	return 0; /* commentary (tool calls) and others are not answers */
}

serve_reply *serve_reply_new(const moe_tokenizer *tok, bool chat, bool show_reasoning)
{
	if (!chat || !moe_tokenizer_is_harmony(tok))
		return NULL;
	serve_reply *r = calloc(1, sizeof *r);
	moe_error e;
	if (!r || moe_harmony_new(&r->h, &e) < 0) {
		free(r);
		return NULL; /* out of memory: the text goes out unsplit */
	}
	r->show_reasoning = show_reasoning;
	return r;
}

void serve_reply_free(serve_reply *r)
{
	if (!r)
		return;
	moe_harmony_free(r->h);
	free(r->content.p);
	free(r->reasoning.p);
	free(r);
}

int serve_reply_split(serve_reply *r, const char *text, size_t len, bool done,
		      const char **content, size_t *content_len, const char **reasoning,
		      size_t *reasoning_len)
{
	r->content.len = r->reasoning.len = 0;
	int rc = len ? moe_harmony_feed(r->h, text, len, take, r) : 0;
	if (rc == 0 && done)
		rc = moe_harmony_finish(r->h, take, r);
	if (rc == 0 && (moe_sbuf_reserve(&r->content, 1) < 0 ||
			moe_sbuf_reserve(&r->reasoning, 1) < 0))
		rc = MOE_ENOMEM;
	*content = rc == 0 ? r->content.p : "";
	*content_len = rc == 0 ? r->content.len : 0;
	*reasoning = rc == 0 ? r->reasoning.p : "";
	*reasoning_len = rc == 0 ? r->reasoning.len : 0;
	return rc;
}

/* OpenAI's reasoning_effort, Ollama's think (true, false or a level):
 * template variables (reasoning_effort for gpt-oss's template,
 * enable_thinking for Qwen3-style ones) in the request's
 * chat_template_kwargs. */
int serve_reply_template_vars(json_t *q, const json_t *body, bool ollama, bool *show_reasoning,
			      const char **param, moe_error *e)
{
	*show_reasoning = true;
	const char *field = ollama ? "think" : "reasoning_effort";
	json_t *v = json_object_get(body, field);
	json_object_del(q, field); /* not a sampling parameter */
	if (!v || json_is_null(v) || !json_object_get(q, "messages"))
		return 0; /* a raw prompt has no template to tell */
	*param = field;
	json_t *kw = json_object_get(q, "chat_template_kwargs");
	if (kw && !json_is_object(kw))
		return 0; /* the request parser names that error */
	const char *level = json_string_value(v);
	if (level && strcmp(level, "low") && strcmp(level, "medium") && strcmp(level, "high"))
		return moe_err(e, MOE_EINVAL, "%s must be %s\"low\", \"medium\" or \"high\"", field,
			       ollama ? "true, false, " : "");
	if (!level && !(ollama && json_is_boolean(v)))
		return moe_err(e, MOE_EINVAL, "%s must be %s\"low\", \"medium\" or \"high\"", field,
			       ollama ? "true, false, " : "");
	json_t *vars = kw ? json_deep_copy(kw) : json_object();
	if (level)
		json_object_set_new(vars, "reasoning_effort", json_string(level));
	else
		json_object_set_new(vars, "enable_thinking", json_boolean(json_is_true(v)));
	json_object_set_new(q, "chat_template_kwargs", vars);
	*show_reasoning = level || json_is_true(v);
	*param = NULL;
	return 0;
}
