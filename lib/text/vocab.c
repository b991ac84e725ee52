/* vocab.c — the neutral vocabulary: extraction from GGUF metadata,
 * llama.cpp's defaults and fix-ups (shared with the HF path so both give
 * the same result), the "tokenizer" metadata object and comparison. */
#include <config.h>

#include "text_int.h"
#include "gguf.h"

#include <jansson.h>
#include <stdio.h>

static const char *const model_names[] = {"none", "llama", "gpt2", "t5", "bert"};
#define N_MODELS (sizeof model_names / sizeof model_names[0])

int moe_vocab_model_from_name(const char *name)
{
	if (!name)
		return -1;
	if (strcmp(name, "no_vocab") == 0)
		return MOE_VOCAB_NONE;
	for (int i = 0; i < (int)N_MODELS; i++)
		if (strcmp(name, model_names[i]) == 0)
			return i;
	return -1;
}

const char *moe_vocab_model_name(moe_vocab_model m)
{
	return (unsigned)m < N_MODELS ? model_names[m] : "?";
}

/* ------------------------------------------------------ defaults, fix-ups */

void moe_vocab_defaults(moe_vocab_data *vd)
{
	vd->bos_id = vd->eos_id = vd->eot_id = vd->eom_id = -1;
	vd->unk_id = vd->pad_id = vd->sep_id = -1;
	vd->add_bos = vd->add_eos = vd->add_space_prefix = false;
	vd->remove_extra_whitespaces = false;
	if (vd->model == MOE_VOCAB_SPM) {
		/* LLaMA's numbering: <unk> <s> </s>. */
		vd->unk_id = 0;
		vd->bos_id = 1;
		vd->eos_id = 2;
		vd->add_space_prefix = true;
		vd->add_bos = true;
	} else if (vd->model == MOE_VOCAB_BPE) {
		/* llama.cpp defaults BOS/EOS to 11 (a Falcon id); we prefer
		 * "absent" to a guess. */
		const moe_pre_def *d = moe_pre_find(vd->pre ? vd->pre : "default");
		vd->add_bos = d && d->add_bos == 1;
	}
	int32_t *ids[] = {&vd->bos_id, &vd->eos_id, &vd->unk_id};
	for (size_t i = 0; i < 3; i++)
		if (*ids[i] >= 0 && (uint32_t)*ids[i] >= vd->n_tokens)
			*ids[i] = -1;
}

/* Last id whose text is s (later duplicates win, as in llama.cpp). */
static int32_t find_token(const moe_vocab_data *vd, const char *s)
{
	size_t n = strlen(s);
	for (uint32_t i = vd->n_tokens; i-- > 0;) {
		if (vd->token_offsets[i + 1] - vd->token_offsets[i] == n &&
		    memcmp(vd->tokens + vd->token_offsets[i], s, n) == 0)
			return (int32_t)i;
	}
	return -1;
}

static void make_control(int32_t *types, int32_t id)
{
	if (types[id] != MOE_TOKEN_CONTROL) {
		moe_log(MOE_LOG_DEBUG, "token %" PRId32 " looks like a control token; "
			"its type is set to control", id);
		types[id] = MOE_TOKEN_CONTROL;
	}
}

/* The first token of a list present in the vocabulary, made a control
 * token; returns its id or -1. */
static int32_t find_control(const moe_vocab_data *vd, int32_t *types, const char *const *list)
{
	for (; *list; list++) {
		int32_t id = find_token(vd, *list);
		if (id >= 0) {
			make_control(types, id);
			return id;
		}
	}
	return -1;
}

void moe_vocab_fixup(moe_vocab_data *vd, int32_t *types)
{
	/* Converters often leave these out; llama.cpp recognises them by
	 * their text, makes them control tokens (so that text never turns
	 * into them unless asked) and ends generation on them. */
	static const char *const eot[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
					  "<|endoftext|>", "<EOT>",
					  "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence"
					  "\xEF\xBD\x9C>", NULL};
	static const char *const eom[] = {"<|eom_id|>", NULL};
	/* <｜fim▁begin｜> etc.: fullwidth bars and U+2581, DeepSeek's. */
#define DS_TOK(x) "<\xEF\xBD\x9C" x "\xEF\xBD\x9C>"
	static const char *const fim[][5] = {
		{"<|fim_prefix|>", "<fim-prefix>", DS_TOK("fim\xE2\x96\x81" "begin"), "<PRE>", NULL},
		{"<|fim_suffix|>", "<fim-suffix>", DS_TOK("fim\xE2\x96\x81" "hole"), "<SUF>", NULL},
		{"<|fim_middle|>", "<fim-middle>", DS_TOK("fim\xE2\x96\x81" "end"), "<MID>", NULL},
		{"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL},
		{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", NULL},
		{"<|file_sep|>", NULL},
	};
#undef DS_TOK
	static const char *const eog[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
					  "<|endoftext|>", "<|eom_id|>", "<EOT>", NULL};

	if (vd->model == MOE_VOCAB_NONE || !types)
		return;
	if (vd->eot_id < 0)
		vd->eot_id = find_control(vd, types, eot);
	if (vd->eom_id < 0)
		vd->eom_id = find_control(vd, types, eom);
	for (size_t g = 0; g < sizeof fim / sizeof fim[0]; g++)
		find_control(vd, types, fim[g]);
	for (size_t k = 0; eog[k]; k++) {
		int32_t id = find_token(vd, eog[k]);
		if (id >= 0)
			make_control(types, id);
	}
}

/* ------------------------------------------------------------------ GGUF */

static int gguf_special(const moe_gguf *g, const char *key, uint32_t n, int32_t *id,
			moe_error *e)
{
	int64_t v;
	int rc = moe_gguf_get_i64(g, key, &v, e);
	if (rc == MOE_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	if (v < 0 || v >= n) {
		moe_log(MOE_LOG_WARN, "%s: %s = %" PRId64 " is not a token id (%" PRIu32
			" tokens); ignored", g->name, key, v, n);
		return 0;
	}
	*id = (int32_t)v;
	return 0;
}

static int gguf_bool(const moe_gguf *g, const char *key, bool *b, moe_error *e)
{
	int rc = moe_gguf_get_bool(g, key, b, e);
	return rc == MOE_ENOTFOUND ? 0 : rc;
}

/* Copy a GGUF string array into blob + offsets (arena). */
static int gguf_strings(const moe_gguf *g, const char *key, const moe_gguf_str *s, uint64_t n,
			bool fix_empty, moe_arena *a, const char **blob_out,
			const uint32_t **off_out, moe_error *e)
{
	uint64_t total = 0;
	char tmp[32];
	for (uint64_t i = 0; i < n; i++) {
		uint64_t l = s[i].len;
		if (l == 0 && fix_empty)
			l = (uint64_t)snprintf(tmp, sizeof tmp, "[EMPTY_%" PRIu64 "]", i);
		if (!moe_add_u64(total, l, &total) || total > INT32_MAX)
			return moe_err(e, MOE_ERANGE, "%s: %s: strings exceed 2 GiB", g->name, key);
	}
	char *blob = moe_arena_alloc(a, (size_t)total + 1, 1);
	uint32_t *off = moe_arena_alloc(a, ((size_t)n + 1) * sizeof *off, sizeof *off);
	if (!blob || !off)
		return moe_err(e, MOE_ENOMEM, "%s: %s: out of memory", g->name, key);
	uint64_t pos = 0;
	for (uint64_t i = 0; i < n; i++) {
		off[i] = (uint32_t)pos;
		if (s[i].len == 0 && fix_empty) {
			/* llama.cpp names empty tokens so they cannot match. */
			int l = snprintf(blob + pos, (size_t)(total + 1 - pos),
					 "[EMPTY_%" PRIu64 "]", i);
			moe_log(MOE_LOG_WARN, "%s: %s: empty token %" PRIu64 " renamed", g->name,
				key, i);
			pos += (uint64_t)l;
		} else {
			memcpy(blob + pos, s[i].ptr, (size_t)s[i].len);
			pos += s[i].len;
		}
	}
	off[n] = (uint32_t)pos;
	blob[pos] = '\0';
	*blob_out = blob;
	*off_out = off;
	return 0;
}

int moe_vocab_data_from_gguf(moe_vocab_data *vd, const moe_gguf *g, moe_arena *a, moe_error *e)
{
	const char *model, *pre = "default";
	int et, rc;
	uint64_t n;
	const void *data;

	memset(vd, 0, sizeof *vd);
	rc = moe_gguf_get_str(g, "tokenizer.ggml.model", &model, e);
	if (rc < 0)
		return rc == MOE_ENOTFOUND
			       ? moe_err(e, rc, "%s: no tokenizer (tokenizer.ggml.model)", g->name)
			       : rc;
	int m = moe_vocab_model_from_name(model);
	if (m < 0)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: tokenizer model '%s' is not supported "
			       "(llama, gpt2 and none are)", g->name, model);
	if (m == MOE_VOCAB_UGM || m == MOE_VOCAB_WPM)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: tokenizer model '%s' from GGUF is not "
			       "supported (convert from tokenizer.json)", g->name, model);
	vd->model = (moe_vocab_model)m;
	rc = moe_gguf_get_str(g, "tokenizer.ggml.pre", &pre, e);
	if (rc < 0 && rc != MOE_ENOTFOUND)
		return rc;
	if (rc == MOE_ENOTFOUND)
		pre = "default";
	if (vd->model == MOE_VOCAB_BPE) {
		const moe_pre_def *d = moe_pre_find(pre);
		if (!d)
			return moe_err(e, MOE_EUNSUPPORTED, "%s: unknown pre-tokenizer '%s' "
				       "(tokenizer.ggml.pre)", g->name, pre);
		pre = d->name;
		/* GGUF has no normalizer field: the one these models'
		 * tokenizer.json declares (qwen2: NFC), so a model behaves the
		 * same whichever file it came from. */
		vd->normalizer = d->normalizer;
	} else {
		pre = "default";
	}
	vd->pre = moe_arena_strndup(a, pre, strlen(pre));
	if (!vd->pre)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);

	rc = moe_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, e);
	if (rc == MOE_ENOTFOUND && vd->model == MOE_VOCAB_NONE) {
		n = 0;
		data = NULL;
	} else if (rc < 0) {
		return rc == MOE_ENOTFOUND
			       ? moe_err(e, rc, "%s: no token list (tokenizer.ggml.tokens)",
					 g->name)
			       : rc;
	} else if (et != MOE_GGUF_T_STRING) {
		return moe_err(e, MOE_EFORMAT, "%s: tokenizer.ggml.tokens: array of %s, "
			       "expected strings", g->name, moe_gguf_type_name(et));
	}
	if (n > INT32_MAX - 1)
		return moe_err(e, MOE_ERANGE, "%s: tokenizer.ggml.tokens: %" PRIu64 " tokens",
			       g->name, n);
	vd->n_tokens = (uint32_t)n;
	MOE_TRY(gguf_strings(g, "tokenizer.ggml.tokens", data, n, true, a, &vd->tokens,
			     &vd->token_offsets, e));

	int32_t *types = moe_arena_alloc(a, ((size_t)n + 1) * sizeof *types, sizeof *types);
	uint8_t *flags = moe_arena_alloc(a, (size_t)n + 1, 1);
	if (!types || !flags)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);
	for (uint64_t i = 0; i < n; i++)
		types[i] = MOE_TOKEN_NORMAL;
	rc = moe_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data, e);
	if (rc == 0) {
		if ((et != MOE_GGUF_T_INT32 && et != MOE_GGUF_T_UINT32) || n != vd->n_tokens)
			return moe_err(e, MOE_EFORMAT, "%s: tokenizer.ggml.token_type: %" PRIu64
				       " values of %s for %" PRIu32 " tokens", g->name, n,
				       moe_gguf_type_name(et), vd->n_tokens);
		const int32_t *tv = data;
		for (uint64_t i = 0; i < n; i++)
			types[i] =
				tv[i] >= 0 && tv[i] <= MOE_TOKEN_BYTE ? tv[i] : MOE_TOKEN_UNDEFINED;
	} else if (rc != MOE_ENOTFOUND) {
		return rc;
	}
	vd->types = types;
	vd->flags = flags;

	rc = moe_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data, e);
	if (rc == 0) {
		if (et != MOE_GGUF_T_FLOAT32 || n != vd->n_tokens)
			return moe_err(e, MOE_EFORMAT, "%s: tokenizer.ggml.scores: %" PRIu64
				       " values of %s for %" PRIu32 " tokens", g->name, n,
				       moe_gguf_type_name(et), vd->n_tokens);
		float *sc = moe_arena_alloc(a, ((size_t)n + 1) * sizeof *sc, sizeof *sc);
		if (!sc)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);
		memcpy(sc, data, (size_t)n * sizeof *sc);
		vd->scores = sc;
	} else if (rc != MOE_ENOTFOUND) {
		return rc;
	}

	if (vd->model == MOE_VOCAB_BPE) {
		rc = moe_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data, e);
		if (rc == MOE_ENOTFOUND)
			return moe_err(e, MOE_EFORMAT, "%s: BPE tokenizer without merges "
				       "(tokenizer.ggml.merges)", g->name);
		if (rc < 0)
			return rc;
		if (et != MOE_GGUF_T_STRING || n > INT32_MAX - 1)
			return moe_err(e, MOE_EFORMAT, "%s: tokenizer.ggml.merges: %" PRIu64
				       " values of %s, expected strings", g->name, n,
				       moe_gguf_type_name(et));
		vd->n_merges = (uint32_t)n;
		MOE_TRY(gguf_strings(g, "tokenizer.ggml.merges", data, n, false, a, &vd->merges,
				     &vd->merge_offsets, e));
	} else {
		uint32_t *z = moe_arena_alloc(a, sizeof *z, sizeof *z);
		if (!z)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);
		vd->merges = "";
		vd->merge_offsets = z;
	}

	moe_vocab_defaults(vd);
	MOE_TRY(gguf_special(g, "tokenizer.ggml.bos_token_id", vd->n_tokens, &vd->bos_id, e));
	MOE_TRY(gguf_special(g, "tokenizer.ggml.eos_token_id", vd->n_tokens, &vd->eos_id, e));
	MOE_TRY(gguf_special(g, "tokenizer.ggml.eot_token_id", vd->n_tokens, &vd->eot_id, e));
	MOE_TRY(gguf_special(g, "tokenizer.ggml.eom_token_id", vd->n_tokens, &vd->eom_id, e));
	MOE_TRY(gguf_special(g, "tokenizer.ggml.unknown_token_id", vd->n_tokens, &vd->unk_id, e));
	MOE_TRY(gguf_special(g, "tokenizer.ggml.seperator_token_id", vd->n_tokens, &vd->sep_id,
			     e));
	MOE_TRY(gguf_special(g, "tokenizer.ggml.padding_token_id", vd->n_tokens, &vd->pad_id,
			     e));
	MOE_TRY(gguf_bool(g, "tokenizer.ggml.add_bos_token", &vd->add_bos, e));
	MOE_TRY(gguf_bool(g, "tokenizer.ggml.add_eos_token", &vd->add_eos, e));
	MOE_TRY(gguf_bool(g, "tokenizer.ggml.add_space_prefix", &vd->add_space_prefix, e));
	MOE_TRY(gguf_bool(g, "tokenizer.ggml.remove_extra_whitespaces",
			  &vd->remove_extra_whitespaces, e));

	const char *tmpl;
	rc = moe_gguf_get_str(g, "tokenizer.chat_template", &tmpl, e);
	if (rc == 0) {
		if (!(vd->chat_template = moe_arena_strndup(a, tmpl, strlen(tmpl))))
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);
	} else if (rc != MOE_ENOTFOUND) {
		return rc;
	}
	/* Named templates: tokenizer.chat_template.NAME (e.g. tool_use). */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t k = 0;
		for (uint64_t i = 0; i < g->n_kv; i++) {
			const char *key = g->kv[i].key;
			static const char pfx[] = "tokenizer.chat_template.";
			const char *s;
			if (strncmp(key, pfx, sizeof pfx - 1) != 0 || !key[sizeof pfx - 1] ||
			    moe_gguf_get_str(g, key, &s, NULL) < 0)
				continue;
			if (pass) {
				const char *nm = key + sizeof pfx - 1;
				((const char **)vd->chat_template_names)[k] =
					moe_arena_strndup(a, nm, strlen(nm));
				((const char **)vd->chat_template_texts)[k] =
					moe_arena_strndup(a, s, strlen(s));
				if (!vd->chat_template_names[k] || !vd->chat_template_texts[k])
					return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);
			}
			k++;
		}
		if (!pass) {
			if (!k)
				break;
			vd->n_chat_templates = k;
			vd->chat_template_names = moe_arena_alloc(a, k * sizeof(char *), sizeof(char *));
			vd->chat_template_texts = moe_arena_alloc(a, k * sizeof(char *), sizeof(char *));
			if (!vd->chat_template_names || !vd->chat_template_texts)
				return moe_err(e, MOE_ENOMEM, "%s: out of memory", g->name);
		}
	}

	moe_vocab_fixup(vd, types);

	/* Phi-3's added tokens strip the whitespace after them (its
	 * tokenizer.json says rstrip; GGUF has no field for it, so llama.cpp
	 * keys it on the model name). */
	const char *name;
	if (moe_gguf_get_str(g, "general.name", &name, NULL) == 0) {
		char low[64];
		size_t k = 0;
		for (; name[k] && k + 1 < sizeof low; k++)
			low[k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] + 32 : name[k]);
		low[k] = '\0';
		if (strstr(low, "phi-3") || strstr(low, "phi3")) {
			for (uint32_t i = 0; i < vd->n_tokens; i++)
				if (types[i] == MOE_TOKEN_CONTROL ||
				    types[i] == MOE_TOKEN_USER_DEFINED ||
				    types[i] == MOE_TOKEN_UNKNOWN)
					flags[i] |= MOE_TOKEN_RSTRIP;
			static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
			for (size_t k2 = 0; k2 < 3; k2++) {
				int32_t id = find_token(vd, keep[k2]);
				if (id >= 0)
					flags[id] &= (uint8_t)~MOE_TOKEN_RSTRIP;
			}
			int32_t id = find_token(vd, "</s>");
			if (id >= 0)
				flags[id] |= MOE_TOKEN_RSTRIP;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ JSON */

static int set_id(json_t *o, const char *k, int32_t v)
{
	return json_object_set_new(o, k, json_integer(v));
}

int moe_vocab_data_to_json(const moe_vocab_data *vd, json_t **out, moe_error *e)
{
	json_t *o = json_object();
	json_t *ls = json_array(), *rs = json_array();
	int bad = !o || !ls || !rs;

	bad |= json_object_set_new(o, "model", json_string(moe_vocab_model_name(vd->model)));
	bad |= json_object_set_new(o, "pre", json_string(vd->pre ? vd->pre : "default"));
	bad |= json_object_set_new(o, "n_tokens", json_integer(vd->n_tokens));
	bad |= json_object_set_new(o, "n_merges", json_integer(vd->n_merges));
	bad |= set_id(o, "bos_id", vd->bos_id);
	bad |= set_id(o, "eos_id", vd->eos_id);
	bad |= set_id(o, "eot_id", vd->eot_id);
	bad |= set_id(o, "eom_id", vd->eom_id);
	bad |= set_id(o, "unk_id", vd->unk_id);
	bad |= set_id(o, "pad_id", vd->pad_id);
	bad |= set_id(o, "sep_id", vd->sep_id);
	bad |= json_object_set_new(o, "add_bos", json_boolean(vd->add_bos));
	bad |= json_object_set_new(o, "add_eos", json_boolean(vd->add_eos));
	bad |= json_object_set_new(o, "add_space_prefix", json_boolean(vd->add_space_prefix));
	bad |= json_object_set_new(o, "remove_extra_whitespaces",
				   json_boolean(vd->remove_extra_whitespaces));
	for (uint32_t i = 0; !bad && vd->flags && i < vd->n_tokens; i++) {
		if (vd->flags[i] & MOE_TOKEN_LSTRIP)
			bad |= json_array_append_new(ls, json_integer(i));
		if (vd->flags[i] & MOE_TOKEN_RSTRIP)
			bad |= json_array_append_new(rs, json_integer(i));
	}
	if (!bad && json_array_size(ls))
		bad |= json_object_set(o, "lstrip", ls);
	if (!bad && json_array_size(rs))
		bad |= json_object_set(o, "rstrip", rs);
	/* The text pipeline (as tokenizer.json writes it) and named chat
	 * templates. */
	const char *pipe[2] = {vd->normalizer, vd->pre_tokenizer};
	static const char *const pk[2] = {"normalizer", "pre_tokenizer"};
	for (int k = 0; k < 2 && !bad; k++)
		if (pipe[k]) {
			json_t *v = json_loads(pipe[k], 0, NULL);
			bad |= !v || json_object_set_new(o, pk[k], v);
		}
	if (vd->ignore_merges_set && !bad)
		bad |= json_object_set_new(o, "ignore_merges", json_boolean(vd->ignore_merges));
	if (vd->n_chat_templates && !bad) {
		json_t *named = json_object();
		for (uint32_t i = 0; named && i < vd->n_chat_templates; i++)
			bad |= json_object_set_new(named, vd->chat_template_names[i],
						   json_string(vd->chat_template_texts[i]));
		bad |= !named || json_object_set_new(o, "chat_templates", named);
	}
	json_decref(ls);
	json_decref(rs);
	if (bad) {
		json_decref(o);
		return moe_err(e, MOE_ENOMEM, "out of memory (tokenizer metadata)");
	}
	*out = o;
	return 0;
}

/* ------------------------------------------------------------ comparison */

bool moe_vocab_data_equal(const moe_vocab_data *a, const moe_vocab_data *b, bool ignore_scores,
			  char *why, size_t why_len)
{
	char dummy[8];
	if (!why) {
		why = dummy;
		why_len = sizeof dummy;
	}
#define DIFF(...) do { snprintf(why, why_len, __VA_ARGS__); return false; } while (0)
	if (a->model != b->model)
		DIFF("model %s != %s", moe_vocab_model_name(a->model),
		     moe_vocab_model_name(b->model));
	if (strcmp(a->pre ? a->pre : "default", b->pre ? b->pre : "default") != 0)
		DIFF("pre '%s' != '%s'", a->pre, b->pre);
	if (a->n_tokens != b->n_tokens)
		DIFF("n_tokens %" PRIu32 " != %" PRIu32, a->n_tokens, b->n_tokens);
	for (uint32_t i = 0; i < a->n_tokens; i++) {
		size_t la, lb;
		const char *sa = moe_vocab_token(a, i, &la), *sb = moe_vocab_token(b, i, &lb);
		if (la != lb || memcmp(sa, sb, la) != 0)
			DIFF("token %" PRIu32 ": '%.*s' != '%.*s'", i, (int)la, sa, (int)lb, sb);
		int ta = a->types ? a->types[i] : MOE_TOKEN_NORMAL;
		int tb = b->types ? b->types[i] : MOE_TOKEN_NORMAL;
		if (ta != tb)
			DIFF("token %" PRIu32 " '%.*s': type %d != %d", i, (int)la, sa, ta, tb);
		int fa = a->flags ? a->flags[i] : 0, fb = b->flags ? b->flags[i] : 0;
		if (fa != fb)
			DIFF("token %" PRIu32 " '%.*s': flags %d != %d", i, (int)la, sa, fa, fb);
		float ca = a->scores ? a->scores[i] : 0.0f, cb = b->scores ? b->scores[i] : 0.0f;
		if (!ignore_scores && ca != cb)
			DIFF("token %" PRIu32 " '%.*s': score %g != %g", i, (int)la, sa, ca, cb);
	}
	if (a->n_merges != b->n_merges)
		DIFF("n_merges %" PRIu32 " != %" PRIu32, a->n_merges, b->n_merges);
	for (uint32_t i = 0; i < a->n_merges; i++) {
		size_t la = a->merge_offsets[i + 1] - a->merge_offsets[i];
		size_t lb = b->merge_offsets[i + 1] - b->merge_offsets[i];
		const char *sa = a->merges + a->merge_offsets[i],
			   *sb = b->merges + b->merge_offsets[i];
		if (la != lb || memcmp(sa, sb, la) != 0)
			DIFF("merge %" PRIu32 ": '%.*s' != '%.*s'", i, (int)la, sa, (int)lb, sb);
	}
	const int32_t ia[] = {a->bos_id, a->eos_id, a->eot_id, a->eom_id, a->unk_id, a->pad_id,
			      a->sep_id};
	const int32_t ib[] = {b->bos_id, b->eos_id, b->eot_id, b->eom_id, b->unk_id, b->pad_id,
			      b->sep_id};
	static const char *const names[] = {"bos_id", "eos_id", "eot_id", "eom_id", "unk_id",
					    "pad_id", "sep_id"};
	for (int k = 0; k < 7; k++)
		if (ia[k] != ib[k])
			DIFF("%s %" PRId32 " != %" PRId32, names[k], ia[k], ib[k]);
	if (a->add_bos != b->add_bos || a->add_eos != b->add_eos)
		DIFF("add_bos/add_eos %d/%d != %d/%d", a->add_bos, a->add_eos, b->add_bos,
		     b->add_eos);
	if (a->add_space_prefix != b->add_space_prefix)
		DIFF("add_space_prefix %d != %d", a->add_space_prefix, b->add_space_prefix);
	if (a->remove_extra_whitespaces != b->remove_extra_whitespaces)
		DIFF("remove_extra_whitespaces %d != %d", a->remove_extra_whitespaces,
		     b->remove_extra_whitespaces);
	if ((a->chat_template == NULL) != (b->chat_template == NULL) ||
	    (a->chat_template && strcmp(a->chat_template, b->chat_template) != 0))
		DIFF("chat_template differs");
#undef DIFF
	if (why_len)
		why[0] = '\0';
	return true;
}
