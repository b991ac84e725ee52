/* chat_apply.c — a conversation to prompt text with the model's own Jinja
 * chat template, as transformers' apply_chat_template calls it, or with a
 * built-in format when the model has no template or one is named.
 *
 * transformers renders with: messages, tools (None when absent), documents
 * (None), add_generation_prompt, the special-token texts (bos_token,
 * eos_token, unk_token, pad_token) and any extra keyword arguments
 * (enable_thinking, date_string, ...), which we take from opts->vars.
 */
#include <config.h>

#include "text_int.h"

#include <jansson.h>
#include <strings.h>

static int set_token(json_t *vars, const char *key, const moe_tokenizer *t, moe_special which)
{
	size_t len;
	const char *s = moe_tokenizer_token_text(t, moe_tokenizer_special(t, which), &len);
	if (!s)
		return 0;
	return json_object_set_new(vars, key, json_stringn(s, len));
}

static int builtin(const moe_tokenizer *t, int tmpl, const json_t *messages,
		   const moe_chat_opts *o, char **out, size_t *len, moe_error *e)
{
	size_t n = json_array_size(messages);
	if (o->tools && json_array_size(o->tools))
		return moe_err(e, MOE_EINVAL, "chat template '%s' is a built-in format without "
			       "tool support; use the model's own template",
			       moe_chat_template_name(tmpl));
	moe_chat_msg *m = calloc(n + 1, sizeof *m);
	if (!m)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(messages, i);
		m[i].role = json_string_value(json_object_get(v, "role"));
		m[i].content = json_string_value(json_object_get(v, "content"));
		if (!m[i].role || !m[i].content || json_object_get(v, "tool_calls")) {
			free(m);
			return moe_err(e, MOE_EINVAL, "message %zu: the built-in chat template '%s' "
				       "takes a string role and content only", i,
				       moe_chat_template_name(tmpl));
		}
	}
	char *bos = NULL, *eos = NULL;
	if (t) {
		size_t tl;
		const char *s = moe_tokenizer_token_text(t, moe_tokenizer_special(t, MOE_SPECIAL_BOS),
							 &tl);
		if (s)
			bos = strndup(s, tl);
		s = moe_tokenizer_token_text(t, moe_tokenizer_special(t, MOE_SPECIAL_EOS), &tl);
		if (s)
			eos = strndup(s, tl);
	}
	int rc = moe_chat_render(tmpl, m, n, o->system, o->add_generation_prompt, bos, eos, out,
				 len, e);
	free(bos);
	free(eos);
	free(m);
	return rc;
}

int moe_chat_apply(const moe_tokenizer *t, const json_t *messages, const moe_chat_opts *opts,
		   char **out, size_t *len, moe_error *e)
{
	moe_chat_opts def = {0};
	const moe_chat_opts *o = opts ? opts : &def;
	const char *name = o->template_name;
	const char *jinja = NULL;
	int tmpl = -1;

	*out = NULL;
	*len = 0;
	if (!json_is_array(messages))
		return moe_err(e, MOE_EINVAL, "messages: expected a JSON array");
	for (size_t i = 0; i < json_array_size(messages); i++) {
		json_t *m = json_array_get(messages, i);
		if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
			return moe_err(e, MOE_EINVAL, "message %zu: expected an object with a string "
				       "\"role\"", i);
	}
	if (o->tools && !json_is_array(o->tools) && !json_is_null(o->tools))
		return moe_err(e, MOE_EINVAL, "tools: expected a JSON array");
	if (o->vars && !json_is_object(o->vars))
		return moe_err(e, MOE_EINVAL, "template variables: expected a JSON object");
	if (!name || strcasecmp(name, "auto") == 0) {
		jinja = t ? moe_tokenizer_chat_template(t) : NULL;
		if (!jinja)
			tmpl = (int)moe_chat_detect(NULL, NULL);
	} else if (t && (jinja = moe_tokenizer_chat_template_named(t, name))) {
		;
	} else if ((tmpl = moe_chat_template_from_name(name)) < 0) {
		return moe_err(e, MOE_EINVAL, "unknown chat template '%s' (the model's own: auto%s; "
			       "built-in: %s)", name,
			       t && moe_tokenizer_chat_template_named(t, "tool_use") ? ", tool_use"
										: "",
			       moe_chat_template_names());
	}
	if (!jinja)
		return builtin(t, tmpl, messages, o, out, len, e);

	json_t *vars = json_object();
	json_t *msgs = json_array();
	int rc = vars && msgs ? 0 : -1;
	json_t *first = json_array_get(messages, 0);
	const char *r0 = json_string_value(json_object_get(first, "role"));
	if (o->system && (!r0 || strcmp(r0, "system") != 0)) {
		json_t *sys = json_pack("{s:s, s:s}", "role", "system", "content", o->system);
		rc |= sys ? json_array_append_new(msgs, sys) : -1;
	}
	rc |= json_array_extend(msgs, (json_t *)messages);
	rc |= json_object_set_new(vars, "messages", msgs);
	msgs = NULL;
	rc |= json_object_set_new(vars, "tools", o->tools ? json_deep_copy(o->tools) : json_null());
	rc |= json_object_set_new(vars, "documents", json_null());
	rc |= json_object_set_new(vars, "add_generation_prompt",
				  json_boolean(o->add_generation_prompt));
	if (t) {
		rc |= set_token(vars, "bos_token", t, MOE_SPECIAL_BOS);
		rc |= set_token(vars, "eos_token", t, MOE_SPECIAL_EOS);
		rc |= set_token(vars, "unk_token", t, MOE_SPECIAL_UNK);
		rc |= set_token(vars, "pad_token", t, MOE_SPECIAL_PAD);
	}
	if (o->vars)
		rc |= json_object_update(vars, (json_t *)o->vars);
	if (rc) {
		json_decref(msgs);
		json_decref(vars);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	rc = moe_jinja_render(jinja, strlen(jinja), vars, o->jinja, out, len, e);
	json_decref(vars);
	if ((rc == MOE_EFORMAT || rc == MOE_EUNSUPPORTED) && !name && e) {
		/* The model's template uses syntax we do not handle: the
		 * built-in format recognised from its text is the next best
		 * thing (it was the only way before templates were run). */
		moe_log(MOE_LOG_WARN, "the model's chat template cannot be run (%s); using the "
			"built-in format it resembles", e->msg);
		return builtin(t, (int)moe_chat_detect(jinja, NULL), messages, o, out, len, e);
	}
	if (rc < 0 && e)
		moe_err_prefix(e, "chat template%s%s", name ? " " : "", name ? name : "");
	return rc;
}
