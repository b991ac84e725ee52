/* chat.c — built-in chat templates: each renders a conversation exactly as
 * the model's published Jinja template does, without a Jinja engine; a
 * model's own template text is recognised by substrings that only its
 * family uses.
 *
 * Formats (S = system, U = user, A = assistant content; "gen" = the
 * generation prompt):
 *   chatml    <|im_start|>ROLE\nTEXT<|im_end|>\n ...   gen <|im_start|>assistant\n
 *   llama2    BOS[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A EOS BOS[INST] U [/INST]
 *             (contents stripped; no gen: the text already ends the turn)
 *   mistral   BOS[INST] U [/INST]A EOS[INST] U [/INST]   (Mixtral-8x7B-Instruct;
 *             a system prompt is put before the first user text, "S\n\nU")
 *   llama3    BOS<|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> ...
 *             (contents trimmed)  gen <|start_header_id|>assistant<|end_header_id|>\n\n
 *   phi3      <|ROLE|>\nTEXT<|end|>\n ...   gen <|assistant|>\n, else EOS
 *             (Phi-3.5 / Phi-3.5-MoE; an empty system message is left out)
 *   tulu      BOS<|ROLE|>\nTEXT\n ... <|assistant|>\nA EOS\n ...  gen <|assistant|>\n
 *             (OLMoE-1B-7B-0924-Instruct's published template: every turn,
 *             the last included, ends in "\n")
 *   deepseek  BOS S\n\nUser: U\n\nAssistant: A EOS ...   gen Assistant:
 *             (DeepSeek LLM/MoE/V2 chat)
 *   deepseek3 BOS S<｜User｜>U<｜Assistant｜>A EOS ...    gen <｜Assistant｜>
 *             (DeepSeek V3/R1; system prompts are joined in front)
 */
#include <config.h>

#include "text_int.h"

#include <strings.h>

#define FW_BAR "\xEF\xBD\x9C"   /* U+FF5C FULLWIDTH VERTICAL LINE */
#define SP_WS "\xE2\x96\x81"    /* U+2581 */
#define DS_BOS "<" FW_BAR "begin" SP_WS "of" SP_WS "sentence" FW_BAR ">"
#define DS_EOS "<" FW_BAR "end" SP_WS "of" SP_WS "sentence" FW_BAR ">"

static const struct {
	const char *name;
	const char *aliases; /* NUL-separated, ends with an empty string */
	const char *bos, *eos; /* defaults when the model does not say */
} tmpls[MOE_CHAT_COUNT] = {
	[MOE_CHAT_CHATML] = {"chatml", "qwen\0qwen2\0im_start\0", "", "<|im_end|>"},
	[MOE_CHAT_LLAMA2] = {"llama2", "llama-2\0llama2-chat\0", "<s>", "</s>"},
	[MOE_CHAT_MISTRAL] = {"mistral", "mixtral\0mistral-v1\0inst\0", "<s>", "</s>"},
	[MOE_CHAT_LLAMA3] = {"llama3", "llama-3\0llama3.1\0", "<|begin_of_text|>", "<|eot_id|>"},
	[MOE_CHAT_PHI3] = {"phi3", "phi-3\0phi3.5\0phi-3.5\0phimoe\0", "", "<|endoftext|>"},
	[MOE_CHAT_TULU] = {"tulu", "olmoe\0olmo\0olmo2\0", "", "<|endoftext|>"},
	[MOE_CHAT_DEEPSEEK] = {"deepseek", "deepseek2\0deepseek-v2\0deepseek-llm\0", DS_BOS,
			       DS_EOS},
	[MOE_CHAT_DEEPSEEK3] = {"deepseek3", "deepseek-v3\0deepseek-r1\0", DS_BOS, DS_EOS},
};

const char *moe_chat_template_name(moe_chat_template t)
{
	return (unsigned)t < MOE_CHAT_COUNT ? tmpls[t].name : NULL;
}

int moe_chat_template_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < MOE_CHAT_COUNT; i++) {
		if (strcasecmp(name, tmpls[i].name) == 0)
			return i;
		for (const char *a = tmpls[i].aliases; *a; a += strlen(a) + 1)
			if (strcasecmp(name, a) == 0)
				return i;
	}
	return -1;
}

const char *moe_chat_template_names(void)
{
	return "chatml, llama2, mistral, llama3, phi3, tulu, deepseek, deepseek3";
}

moe_chat_template moe_chat_detect(const char *j, bool *recognised)
{
	moe_chat_template t = MOE_CHAT_CHATML;
	bool found = true;

#define HAS(s) (strstr(j, s) != NULL)
	if (!j) {
		found = false;
	} else if (HAS("<|im_start|>")) {
		t = MOE_CHAT_CHATML;
	} else if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) {
		t = MOE_CHAT_LLAMA3;
	} else if (HAS("<" FW_BAR "User" FW_BAR ">") && HAS("<" FW_BAR "Assistant" FW_BAR ">")) {
		t = MOE_CHAT_DEEPSEEK3;
	} else if (HAS("<|assistant|>") && HAS("<|end|>")) {
		t = MOE_CHAT_PHI3;
	} else if (HAS("<|user|>") && HAS("<|assistant|>")) {
		t = MOE_CHAT_TULU;
	} else if (HAS("[INST]") && HAS("<<SYS>>")) {
		t = MOE_CHAT_LLAMA2;
	} else if (HAS("[INST]")) {
		t = MOE_CHAT_MISTRAL;
	} else if (HAS("User: ") && HAS("Assistant:")) {
		t = MOE_CHAT_DEEPSEEK;
	} else {
		found = false;
	}
#undef HAS
	if (!found)
		moe_log(MOE_LOG_WARN, "%s; using chatml (choose another with --chat-template: %s)",
			j ? "chat template not recognised" : "the model has no chat template",
			moe_chat_template_names());
	if (recognised)
		*recognised = found;
	return t;
}

/* ---------------------------------------------------------------- render */

enum { R_SYSTEM, R_USER, R_ASSISTANT };

static int role_of(const char *r)
{
	if (!r)
		return -1;
	if (strcmp(r, "system") == 0)
		return R_SYSTEM;
	if (strcmp(r, "user") == 0)
		return R_USER;
	if (strcmp(r, "assistant") == 0)
		return R_ASSISTANT;
	return -1;
}

/* Jinja's trim / Python's strip: ASCII whitespace at both ends. */
static void strip(const char *s, const char **out, size_t *len)
{
	size_t n = strlen(s);
	while (n && strchr(" \t\n\r\v\f", s[0]))
		s++, n--;
	while (n && strchr(" \t\n\r\v\f", s[n - 1]))
		n--;
	*out = s;
	*len = n;
}

typedef struct rmsg {
	int role;
	const char *content;
} rmsg;

static int render(moe_chat_template tmpl, const rmsg *m, size_t n, bool gen, const char *bos,
		  const char *eos, moe_sbuf *b)
{
	int rc = 0;
	const char *s;
	size_t sl;

#define ADD(str) (rc |= moe_sbuf_adds(b, (str)))
#define ADDN(str, len) (rc |= moe_sbuf_add(b, (str), (len)))
	switch (tmpl) {
	case MOE_CHAT_CHATML:
		for (size_t i = 0; i < n; i++) {
			static const char *const names[] = {"system", "user", "assistant"};
			ADD("<|im_start|>");
			ADD(names[m[i].role]);
			ADD("\n");
			ADD(m[i].content);
			ADD("<|im_end|>\n");
		}
		if (gen)
			ADD("<|im_start|>assistant\n");
		break;

	case MOE_CHAT_LLAMA2: {
		/* HF's Llama-2-chat template: the system message is folded
		 * into the first turn; every user turn opens with BOS. */
		size_t first = 0;
		const char *sys = NULL;
		if (n && m[0].role == R_SYSTEM) {
			sys = m[0].content;
			first = 1;
		}
		for (size_t i = first; i < n; i++) {
			moe_sbuf c = {0};
			if (i == first && sys) {
				rc |= moe_sbuf_adds(&c, "<<SYS>>\n");
				rc |= moe_sbuf_adds(&c, sys);
				rc |= moe_sbuf_adds(&c, "\n<</SYS>>\n\n");
			}
			rc |= moe_sbuf_adds(&c, m[i].content);
			if (rc) {
				free(c.p);
				break;
			}
			strip(c.p, &s, &sl);
			if (m[i].role == R_USER) {
				ADD(bos);
				ADD("[INST] ");
				ADDN(s, sl);
				ADD(" [/INST]");
			} else if (m[i].role == R_ASSISTANT) {
				ADD(" ");
				ADDN(s, sl);
				ADD(" ");
				ADD(eos);
			}
			free(c.p);
		}
		break;
	}

	case MOE_CHAT_MISTRAL: {
		const char *sys = NULL;
		bool sys_done = false;
		ADD(bos);
		for (size_t i = 0; i < n; i++) {
			if (m[i].role == R_SYSTEM) {
				sys = m[i].content;
			} else if (m[i].role == R_USER) {
				ADD("[INST] ");
				if (sys && !sys_done) {
					ADD(sys);
					ADD("\n\n");
					sys_done = true;
				}
				ADD(m[i].content);
				ADD(" [/INST]");
			} else {
				ADD(m[i].content);
				ADD(eos);
			}
		}
		break;
	}

	case MOE_CHAT_LLAMA3:
		ADD(bos);
		for (size_t i = 0; i < n; i++) {
			static const char *const names[] = {"system", "user", "assistant"};
			ADD("<|start_header_id|>");
			ADD(names[m[i].role]);
			ADD("<|end_header_id|>\n\n");
			strip(m[i].content, &s, &sl);
			ADDN(s, sl);
			ADD("<|eot_id|>");
		}
		if (gen)
			ADD("<|start_header_id|>assistant<|end_header_id|>\n\n");
		break;

	case MOE_CHAT_PHI3:
		for (size_t i = 0; i < n; i++) {
			static const char *const tags[] = {"<|system|>\n", "<|user|>\n",
							   "<|assistant|>\n"};
			if (m[i].role == R_SYSTEM && !m[i].content[0])
				continue;
			ADD(tags[m[i].role]);
			ADD(m[i].content);
			ADD("<|end|>\n");
		}
		ADD(gen ? "<|assistant|>\n" : eos);
		break;

	case MOE_CHAT_TULU:
		ADD(bos);
		for (size_t i = 0; i < n; i++) {
			bool last = i + 1 == n;
			if (m[i].role == R_SYSTEM) {
				ADD("<|system|>\n");
				ADD(m[i].content);
				ADD("\n");
			} else if (m[i].role == R_USER) {
				ADD("<|user|>\n");
				ADD(m[i].content);
				ADD("\n");
			} else {
				ADD("<|assistant|>\n");
				ADD(m[i].content);
				ADD(eos);
				ADD("\n");
			}
			if (last && gen)
				ADD("<|assistant|>\n");
		}
		break;

	case MOE_CHAT_DEEPSEEK:
		ADD(bos);
		for (size_t i = 0; i < n; i++) {
			if (m[i].role == R_USER) {
				ADD("User: ");
				ADD(m[i].content);
				ADD("\n\n");
			} else if (m[i].role == R_ASSISTANT) {
				ADD("Assistant: ");
				ADD(m[i].content);
				ADD(eos);
			} else {
				ADD(m[i].content);
				ADD("\n\n");
			}
		}
		if (gen)
			ADD("Assistant:");
		break;

	case MOE_CHAT_DEEPSEEK3: {
		ADD(bos);
		/* All system prompts go first, joined by blank lines. */
		bool any = false;
		for (size_t i = 0; i < n; i++)
			if (m[i].role == R_SYSTEM) {
				if (any)
					ADD("\n\n");
				ADD(m[i].content);
				any = true;
			}
		for (size_t i = 0; i < n; i++) {
			if (m[i].role == R_USER) {
				ADD("<" FW_BAR "User" FW_BAR ">");
				ADD(m[i].content);
			} else if (m[i].role == R_ASSISTANT) {
				ADD("<" FW_BAR "Assistant" FW_BAR ">");
				ADD(m[i].content);
				ADD(eos);
			}
		}
		if (gen)
			ADD("<" FW_BAR "Assistant" FW_BAR ">");
		break;
	}

	default:
		return MOE_EINVAL;
	}
#undef ADD
#undef ADDN
	return rc ? MOE_ENOMEM : 0;
}

int moe_chat_render(moe_chat_template tmpl, const moe_chat_msg *msgs, size_t n,
		    const char *system, bool add_generation_prompt, const char *bos,
		    const char *eos, char **out, size_t *len, moe_error *e)
{
	if ((unsigned)tmpl >= MOE_CHAT_COUNT)
		return moe_err(e, MOE_EINVAL, "chat template %d does not exist", (int)tmpl);
	bool has_system = false;
	for (size_t i = 0; i < n; i++) {
		int r = role_of(msgs[i].role);
		if (r < 0)
			return moe_err(e, MOE_EINVAL,
				       "message %zu: role '%s' is not system, user or "
				       "assistant",
				       i, msgs[i].role ? msgs[i].role : "(none)");
		if (!msgs[i].content)
			return moe_err(e, MOE_EINVAL, "message %zu: no content", i);
		has_system |= r == R_SYSTEM;
	}
	rmsg *m = malloc((n + 1) * sizeof *m);
	if (!m)
		return moe_err(e, MOE_ENOMEM, "out of memory (chat)");
	size_t k = 0;
	if (system && !has_system)
		m[k++] = (rmsg){R_SYSTEM, system};
	for (size_t i = 0; i < n; i++)
		m[k++] = (rmsg){role_of(msgs[i].role), msgs[i].content};

	moe_sbuf b = {0};
	int rc = moe_sbuf_reserve(&b, 256);
	if (rc == 0)
		rc = render(tmpl, m, k, add_generation_prompt, bos ? bos : tmpls[tmpl].bos,
			    eos ? eos : tmpls[tmpl].eos, &b);
	free(m);
	if (rc < 0) {
		free(b.p);
		return moe_err(e, rc, "out of memory (chat)");
	}
	*out = b.p;
	*len = b.len;
	return 0;
}
