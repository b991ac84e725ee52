/* t-chat.c — chat templates: each built-in template renders a
 * system + user + assistant + user conversation exactly as the golden file
 * tests/golden/chat/NAME.txt, which was written by hand from the model
 * family's published template; models' own template texts are recognised;
 * names, the system prompt, the generation prompt and errors. */
#include <config.h>

#include "tap.h"
#include "text.h"

#include <stdlib.h>
#include <string.h>

static const moe_chat_msg conv[] = {
	{"system", "You are a helpful assistant."},
	{"user", "Hello!"},
	{"assistant", "Hi there! How can I help?"},
	{"user", "What is 2+2?"},
};

static char *render(int tmpl, const moe_chat_msg *m, size_t n, const char *system, bool gen,
		    const char *bos, const char *eos)
{
	char *out;
	size_t len;
	moe_error e = {0};
	if (moe_chat_render(tmpl, m, n, system, gen, bos, eos, &out, &len, &e) < 0) {
		tap_diag("render: %s", e.msg);
		return NULL;
	}
	if (strlen(out) != len)
		tap_diag("render: length mismatch");
	return out;
}

static void test_golden(const char *top)
{
	for (int t = 0; t < MOE_CHAT_COUNT; t++) {
		char path[4096], *want;
		size_t wl;
		moe_error e;
		const char *name = moe_chat_template_name(t);
		snprintf(path, sizeof path, "%s/tests/golden/chat/%s.txt", top, name);
		if (moe_read_file(path, 1 << 20, &want, &wl, &e) < 0) {
			ok(0, "%s: golden file: %s", name, e.msg);
			continue;
		}
		char *got = render(t, conv, 4, NULL, true, NULL, NULL);
		ok(got && strcmp(got, want) == 0, "%s: rendering equals tests/golden/chat/%s.txt",
		   name, name);
		if (got && strcmp(got, want) != 0)
			tap_diag("got:\n%s\n# want:\n%s", got, want);
		free(got);
		free(want);
	}
}

static int warnings;
static void count_warnings(int level, const char *msg, void *user)
{
	(void)msg;
	(void)user;
	if (level >= MOE_LOG_WARN)
		warnings++;
}

/* Excerpts of the published templates (facts about each model family). */
static const struct {
	const char *what, *jinja;
	int want;
} models[] = {
	{"Qwen2-Instruct", "{% for message in messages %}{% if loop.first and messages[0]['role'] "
	 "!= 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
	 "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
	 "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
	 "{{ '<|im_start|>assistant\\n' }}{% endif %}", MOE_CHAT_CHATML},
	{"Llama-2-chat", "{% if messages[0]['role'] == 'system' %}{% set loop_messages = "
	 "messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set "
	 "loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message "
	 "in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content "
	 "= '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
	 "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
	 "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == "
	 "'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
	 MOE_CHAT_LLAMA2},
	{"Mixtral-8x7B-Instruct", "{{ bos_token }}{% for message in messages %}{% if "
	 "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('"
	 "Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
	 "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
	 "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
	 "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
	 "{% endfor %}", MOE_CHAT_MISTRAL},
	{"Llama-3-Instruct", "{% set loop_messages = messages %}{% for message in loop_messages "
	 "%}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
	 "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content "
	 "= bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
	 "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
	 "{% endif %}", MOE_CHAT_LLAMA3},
	{"Phi-3-mini (ggml-vocab-phi-3.gguf)", "{{ bos_token }}{% for message in messages %}{% if "
	 "(message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + "
	 "'\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}"
	 "{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}", MOE_CHAT_PHI3},
	{"Phi-3.5-MoE-instruct", "{% for message in messages %}{% if message['role'] == 'system' "
	 "and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif "
	 "message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif "
	 "message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + "
	 "'<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' "
	 "}}{% else %}{{ eos_token }}{% endif %}", MOE_CHAT_PHI3},
	{"OLMoE-1B-7B-0924-Instruct", "{{ bos_token }}{% for message in messages %}\n{% if "
	 "message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] }}\n{% elif "
	 "message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] }}\n{% elif "
	 "message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + "
	 "eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ "
	 "'<|assistant|>' }}\n{% endif %}\n{% endfor %}", MOE_CHAT_TULU},
	{"DeepSeek-V2-Chat", "{% if not add_generation_prompt is defined %}{% set "
	 "add_generation_prompt = false %}{% endif %}{{ bos_token }}{% for message in messages %}"
	 "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}{% elif "
	 "message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
	 "{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}"
	 "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
	 MOE_CHAT_DEEPSEEK},
	{"DeepSeek-V3", "{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}"
	 "{%- if message['role'] == 'user' %}{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + "
	 "message['content']}}{%- endif %}{%- endfor -%}{% if add_generation_prompt %}"
	 "{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}{% endif %}", MOE_CHAT_DEEPSEEK3},
};

static void test_detect(void)
{
	for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
		bool rec = false;
		int got = moe_chat_detect(models[i].jinja, &rec);
		ok(rec && got == models[i].want, "%s's template is recognised as %s",
		   models[i].what, moe_chat_template_name(models[i].want));
	}
	bool rec = true;
	warnings = 0;
	moe_log_set_sink(count_warnings, NULL);
	int got = moe_chat_detect("{{ messages | tojson }}", &rec);
	ok(got == MOE_CHAT_CHATML && !rec && warnings == 1,
	   "an unknown template falls back to chatml with a warning");
	got = moe_chat_detect(NULL, &rec);
	ok(got == MOE_CHAT_CHATML && !rec && warnings == 2,
	   "no template falls back to chatml with a warning");
	moe_log_set_sink(NULL, NULL);
}

static void test_names(void)
{
	int all = 1;
	for (int t = 0; t < MOE_CHAT_COUNT; t++)
		all &= moe_chat_template_from_name(moe_chat_template_name(t)) == t;
	ok(all, "every template is found by its name");
	is_int(moe_chat_template_from_name("Llama-2"), MOE_CHAT_LLAMA2, "alias llama-2");
	is_int(moe_chat_template_from_name("olmoe"), MOE_CHAT_TULU, "alias olmoe");
	is_int(moe_chat_template_from_name("QWEN"), MOE_CHAT_CHATML, "alias qwen (any case)");
	is_int(moe_chat_template_from_name("mixtral"), MOE_CHAT_MISTRAL, "alias mixtral");
	is_int(moe_chat_template_from_name("jinja"), -1, "unknown name");
	ok(moe_chat_template_name(MOE_CHAT_COUNT) == NULL, "no name out of range");
}

static void test_options(void)
{
	const moe_chat_msg one[] = {{"user", "Hi"}};
	char *s = render(MOE_CHAT_CHATML, one, 1, "Be brief.", true, NULL, NULL);
	is_str(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
	       "<|im_start|>assistant\n", "a system prompt is added in front");
	free(s);
	s = render(MOE_CHAT_CHATML, conv, 2, "ignored", false, NULL, NULL);
	is_str(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
	       "<|im_start|>user\nHello!<|im_end|>\n",
	       "the conversation's own system message wins; no generation prompt");
	free(s);
	s = render(MOE_CHAT_PHI3, one, 1, NULL, false, NULL, NULL);
	is_str(s, "<|user|>\nHi<|end|>\n<|endoftext|>", "phi3 ends with EOS without a generation "
	       "prompt");
	free(s);
	s = render(MOE_CHAT_LLAMA2, one, 1, NULL, true, "<BOS>", "<EOS>");
	is_str(s, "<BOS>[INST] Hi [/INST]", "the model's BOS text is used");
	free(s);
	const moe_chat_msg spaced[] = {{"user", "  Hi \n"}};
	s = render(MOE_CHAT_LLAMA3, spaced, 1, NULL, false, "", NULL);
	is_str(s, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
	       "llama3 trims message contents");
	free(s);
	s = render(MOE_CHAT_TULU, one, 1, NULL, true, "<|endoftext|>", NULL);
	is_str(s, "<|endoftext|><|user|>\nHi\n<|assistant|>\n", "tulu puts the model's BOS first");
	free(s);

	const moe_chat_msg bad[] = {{"tool", "x"}};
	char *out;
	size_t len;
	moe_error e = {0};
	is_int(moe_chat_render(MOE_CHAT_CHATML, bad, 1, NULL, true, NULL, NULL, &out, &len, &e),
	       MOE_EINVAL, "an unknown role is an error: %s", e.msg);
	is_int(moe_chat_render(MOE_CHAT_COUNT, one, 1, NULL, true, NULL, NULL, &out, &len, &e),
	       MOE_EINVAL, "a template out of range is an error");
	s = render(MOE_CHAT_MISTRAL, NULL, 0, NULL, true, NULL, NULL);
	is_str(s, "<s>", "an empty conversation renders only BOS (mistral)");
	free(s);
}

int main(void)
{
	const char *top = getenv("top_srcdir");
	if (!top)
		top = ".";
	test_golden(top);
	test_detect();
	test_names();
	test_options();
	return tap_done();
}
