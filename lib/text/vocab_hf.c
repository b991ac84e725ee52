/* vocab_hf.c — a vocabulary from Hugging Face's tokenizer.json (and
 * tokenizer_config.json), brought to the same neutral form as GGUF's, the
 * way llama.cpp's converter does it:
 *  - byte-level BPE (ByteLevel pre-tokenizer/decoder): tokens and merges as
 *    they are; the pre-tokenizer named from its Split regexes;
 *  - SentencePiece-style BPE (Metaspace, or a normalizer replacing ' ' by
 *    U+2581): no merges are kept, the SentencePiece algorithm runs on
 *    scores instead, derived as -rank of the first merge producing a token
 *    (so the best merges win, as HF's ranks say); "<0xNN>" are byte tokens;
 *  - added_tokens: special ones are control tokens, the others user-defined;
 *    their lstrip/rstrip become token flags; ids missing from both become
 *    "[PADn]" unused tokens.
 */
#include <config.h>

#include "hf.h"
#include "text_int.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>

#define HF_MAX_TOKENS (1u << 24) /* far above any real vocabulary */

typedef struct hf_style {
	bool bytelevel, spm, prefix, prefix_set;
	const char *regex[MOE_PRE_MAX_REGEX];
	size_t n_regex;
	bool regex_unknown; /* a pre-tokenizer we cannot name */
} hf_style;

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static bool is_ws_string(const char *s)
{
	return s && strcmp(s, "\xE2\x96\x81") == 0;
}

static void add_regex(hf_style *st, const char *re)
{
	if (st->n_regex < MOE_PRE_MAX_REGEX)
		st->regex[st->n_regex++] = re;
	else
		st->regex_unknown = true;
}

/* What one step of a tokenizer.json pipeline (a normalizer, pre-tokenizer
 * or decoder whose "type" is not "Sequence") tells about the style. */
typedef void (*hf_step_fn)(const char *type, json_t *step, hf_style *st);

/* Every pipeline nests the same way: a "Sequence" lists its steps under
 * list_key ("normalizers", "pretokenizers", "decoders"), in order. */
static void walk_pipeline(json_t *n, const char *list_key, hf_step_fn step, hf_style *st)
{
	const char *type = jstr(n, "type");
	if (!type)
		return;
	if (strcmp(type, "Sequence") == 0) {
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(n, list_key), i, v)
			walk_pipeline(v, list_key, step, st);
	} else {
		step(type, n, st);
	}
}

static void normalizer_step(const char *type, json_t *n, hf_style *st)
{
	if (strcmp(type, "Prepend") == 0 && is_ws_string(jstr(n, "prepend"))) {
		st->prefix = st->prefix_set = true;
	} else if (strcmp(type, "Replace") == 0) {
		const char *pat = jstr(json_object_get(n, "pattern"), "String");
		if (pat && strcmp(pat, " ") == 0 && is_ws_string(jstr(n, "content")))
			st->spm = true;
	}
}

static void pre_step(const char *type, json_t *p, hf_style *st)
{
	if (strcmp(type, "ByteLevel") == 0) {
		st->bytelevel = true;
		if (json_is_true(json_object_get(p, "add_prefix_space")))
			st->regex_unknown = true; /* no named table has it */
		json_t *ur = json_object_get(p, "use_regex");
		if (!ur || json_is_true(ur))
			add_regex(st, moe_pre_gpt2_regex());
	} else if (strcmp(type, "Split") == 0) {
		const char *re = jstr(json_object_get(p, "pattern"), "Regex");
		const char *beh = jstr(p, "behavior");
		if (re && beh && strcmp(beh, "Isolated") == 0 &&
		    !json_is_true(json_object_get(p, "invert")))
			add_regex(st, re);
		else
			st->regex_unknown = true;
	} else if (strcmp(type, "Digits") == 0) {
		add_regex(st, json_is_true(json_object_get(p, "individual_digits")) ? "\\p{N}"
										    : "\\p{N}+");
	} else if (strcmp(type, "Metaspace") == 0) {
		st->spm = true;
		const char *scheme = jstr(p, "prepend_scheme");
		json_t *aps = json_object_get(p, "add_prefix_space");
		if (scheme) {
			st->prefix = strcmp(scheme, "never") != 0;
			st->prefix_set = true;
		} else if (aps) {
			st->prefix = json_is_true(aps);
			st->prefix_set = true;
		}
	} else {
		st->regex_unknown = true;
	}
}

static void decoder_step(const char *type, json_t *d, hf_style *st)
{
	if (strcmp(type, "ByteLevel") == 0)
		st->bytelevel = true;
	else if (strcmp(type, "Metaspace") == 0 || strcmp(type, "ByteFallback") == 0)
		st->spm = true;
}

/* llama.cpp's converter treats these added tokens as control tokens even
 * when tokenizer.json does not mark them special. */
static bool looks_special(const char *s, size_t n)
{
	if ((n == 5 && memcmp(s, "<pad>", 5) == 0) || (n == 6 && memcmp(s, "<mask>", 6) == 0) ||
	    (n == 7 && memcmp(s, "<2mass>", 7) == 0) || (n == 7 && memcmp(s, "[@BOS@]", 7) == 0))
		return true;
	if (n >= 4 && memcmp(s, "<|", 2) == 0 && memcmp(s + n - 2, "|>", 2) == 0)
		return true;
	/* <｜ ... ｜> (fullwidth bars, DeepSeek) */
	if (n >= 8 && memcmp(s, "<\xEF\xBD\x9C", 4) == 0 &&
	    memcmp(s + n - 4, "\xEF\xBD\x9C>", 4) == 0)
		return true;
	return n >= 8 && memcmp(s, "<unused", 7) == 0 && s[n - 1] == '>';
}

static bool is_byte_token(const char *s, size_t n)
{
	return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
	       strchr("0123456789ABCDEFabcdef", s[3]) && strchr("0123456789ABCDEFabcdef", s[4]) &&
	       s[3] && s[4];
}

/* A special-token setting of tokenizer_config.json: a string or an
 * object with "content". */
static const char *config_token(json_t *cfg, const char *k)
{
	json_t *v = cfg ? json_object_get(cfg, k) : NULL;
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_object(v))
		return jstr(v, "content");
	return NULL;
}

/* The TemplateProcessing of a post_processor (possibly inside a
 * Sequence), or NULL. */
static json_t *template_processing(json_t *pp)
{
	const char *type = jstr(pp, "type");
	if (!type)
		return NULL;
	if (strcmp(type, "TemplateProcessing") == 0)
		return pp;
	if (strcmp(type, "Sequence") == 0) {
		size_t i;
		json_t *v, *r;
		json_array_foreach(json_object_get(pp, "processors"), i, v)
			if ((r = template_processing(v)))
				return r;
	}
	return NULL;
}

/* The special token at the start (first) or end of the single-sequence
 * template, or NULL. */
static const char *template_edge(json_t *tp, bool first)
{
	json_t *single = json_object_get(tp, "single");
	size_t n = json_array_size(single);
	if (!n)
		return NULL;
	json_t *el = json_array_get(single, first ? 0 : n - 1);
	return jstr(json_object_get(el, "SpecialToken"), "id");
}

/* A token id: an integer, or a float with an integral value (some writers
 * emit 5.0); -1 if neither or out of [0, HF_MAX_TOKENS). */
static json_int_t id_of(json_t *v)
{
	double d;
	if (json_is_integer(v))
		d = (double)json_integer_value(v);
	else if (json_is_real(v))
		d = json_real_value(v);
	else
		return -1;
	if (!(d >= 0 && d < HF_MAX_TOKENS) || d != (double)(json_int_t)d)
		return -1;
	return (json_int_t)d;
}

typedef struct hf_ctx {
	const char **str; /* [n] token text (NULL: hole) */
	size_t *len;
	int32_t *type;
	uint8_t *flags;
	uint32_t n;
	moe_strmap map;   /* text -> id (last wins) */
} hf_ctx;

static int32_t lookup(const hf_ctx *c, const char *s)
{
	return s ? (int32_t)moe_strmap_get(&c->map, s, strlen(s)) : -1;
}

/* A pipeline component as the file spells it: compact JSON in the arena,
 * NULL when out of memory. */
static const char *arena_json(json_t *j, moe_arena *a)
{
	char *txt = json_dumps(j, JSON_COMPACT);
	const char *s = txt ? moe_arena_strndup(a, txt, strlen(txt)) : NULL;
	free(txt);
	return s;
}

/* Keep the file's own pre-tokenizer, refusing now what the tokenizer could
 * not build later. */
static int keep_pre_tokenizer(moe_vocab_data *vd, json_t *pre, moe_arena *a, moe_error *e)
{
	if (!(vd->pre_tokenizer = arena_json(pre, a)))
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
	moe_pretok *check = NULL;
	int rc = moe_pretok_from_json(&check, vd->pre_tokenizer, e);
	moe_pretok_free(check);
	if (rc < 0)
		moe_err_prefix(e, "tokenizer.json");
	return rc;
}

static int parse(moe_vocab_data *vd, json_t *tj, json_t *cfg, moe_arena *a, hf_ctx *c,
		 moe_error *e)
{
	json_t *model = json_object_get(tj, "model");
	const char *mtype = jstr(model, "type");
	json_t *vocab = json_object_get(model, "vocab");
	json_t *added = json_object_get(tj, "added_tokens");
	json_t *merges = json_object_get(model, "merges");
	const char *key;
	json_t *v;
	size_t i;

	if (!json_is_object(model))
		return moe_err(e, MOE_EFORMAT, "tokenizer.json: no \"model\" object");
	bool ugm = mtype && strcmp(mtype, "Unigram") == 0;
	bool wpm = mtype && strcmp(mtype, "WordPiece") == 0;
	if (mtype && strcmp(mtype, "BPE") != 0 && !ugm && !wpm)
		return moe_err(e, MOE_EUNSUPPORTED, "tokenizer.json: model type '%s' is not "
			       "supported (BPE, Unigram and WordPiece are)", mtype);
	if (ugm ? !json_is_array(vocab) : !json_is_object(vocab))
		return moe_err(e, MOE_EFORMAT, "tokenizer.json: model.vocab is not an %s",
			       ugm ? "array" : "object");
	if (!mtype && !json_is_array(merges))
		return moe_err(e, MOE_EUNSUPPORTED, "tokenizer.json: model without type or merges");
	if (wpm) {
		const char *pfx = jstr(model, "continuing_subword_prefix");
		json_t *mx = json_object_get(model, "max_input_chars_per_word");
		if ((pfx && strcmp(pfx, "##") != 0) ||
		    (mx && (!json_is_integer(mx) || json_integer_value(mx) != 100)))
			return moe_err(e, MOE_EUNSUPPORTED, "tokenizer.json: WordPiece with a prefix "
				       "other than \"##\" or max_input_chars_per_word other than 100");
	}

	/* Size: the largest id + 1. */
	json_int_t max = -1;
	if (ugm) {
		json_array_foreach(vocab, i, v) {
			if (!json_is_array(v) || json_array_size(v) != 2 ||
			    !json_is_string(json_array_get(v, 0)) ||
			    !json_is_number(json_array_get(v, 1)))
				return moe_err(e, MOE_EFORMAT, "tokenizer.json: model.vocab[%zu]: not "
					       "[piece, score]", i);
		}
		if (json_array_size(vocab) >= HF_MAX_TOKENS)
			return moe_err(e, MOE_ERANGE, "tokenizer.json: vocabulary too large");
		max = (json_int_t)json_array_size(vocab) - 1;
	}
	if (!ugm)
	json_object_foreach(vocab, key, v) {
		if (id_of(v) < 0)
			return moe_err(e, MOE_EFORMAT, "tokenizer.json: model.vocab['%s']: bad id",
				       key);
		if (id_of(v) > max)
			max = id_of(v);
	}
	if (added && !json_is_array(added))
		return moe_err(e, MOE_EFORMAT, "tokenizer.json: added_tokens is not an array");
	json_array_foreach(added, i, v) {
		json_t *id = json_object_get(v, "id");
		if (id_of(id) < 0 ||
		    !json_is_string(json_object_get(v, "content")))
			return moe_err(e, MOE_EFORMAT,
				       "tokenizer.json: added_tokens[%zu]: bad id or "
				       "content",
				       i);
		if (id_of(id) > max)
			max = id_of(id);
	}
	if (max < 0)
		return moe_err(e, MOE_EFORMAT, "tokenizer.json: empty vocabulary");
	c->n = (uint32_t)max + 1;
	c->str = moe_arena_alloc(a, c->n * sizeof *c->str, sizeof(void *));
	c->len = moe_arena_alloc(a, c->n * sizeof *c->len, sizeof(size_t));
	c->type = moe_arena_alloc(a, ((size_t)c->n + 1) * sizeof *c->type, sizeof(int32_t));
	c->flags = moe_arena_alloc(a, (size_t)c->n + 1, 1);
	if (!c->str || !c->len || !c->type || !c->flags)
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");

	/* Style: byte-level or SentencePiece-like. */
	hf_style st = {0};
	json_t *norm = json_object_get(tj, "normalizer");
	json_t *pre = json_object_get(tj, "pre_tokenizer");
	if (json_is_object(norm))
		walk_pipeline(norm, "normalizers", normalizer_step, &st);
	if (json_is_object(pre))
		walk_pipeline(pre, "pretokenizers", pre_step, &st);
	json_t *dec = json_object_get(tj, "decoder");
	if (json_is_object(dec))
		walk_pipeline(dec, "decoders", decoder_step, &st);
	if (ugm || wpm) {
		/* The file's own pipeline, whatever it holds. */
		vd->model = ugm ? MOE_VOCAB_UGM : MOE_VOCAB_WPM;
		vd->pre = "default";
		int rc = json_is_object(pre) ? keep_pre_tokenizer(vd, pre, a, e) : 0;
		if (rc < 0)
			return rc;
	} else if (st.bytelevel) {
		vd->model = MOE_VOCAB_BPE;
		/* The name is informational: the file's own pre-tokenizer
		 * (stored below) is what runs. */
		const char *name =
			st.regex_unknown ? NULL : moe_pre_recognise(st.regex, st.n_regex);
		vd->pre = name ? name : "default";
		/* A pipeline that is exactly a named one (same regexes, all
		 * Isolated) is stored by name, so the file is the same whether
		 * the model came as GGUF or as tokenizer.json; any other is
		 * stored as the file declares it. */
		if (json_is_object(pre) && !name) {
			int rc = keep_pre_tokenizer(vd, pre, a, e);
			if (rc < 0)
				return rc;
		} else if (!st.regex_unknown && st.n_regex == 0) {
			vd->pre = "gpt-2"; /* ByteLevel decoder only */
		}
		json_t *im = json_object_get(model, "ignore_merges");
		const moe_pre_def *def = name ? moe_pre_find(name) : NULL;
		if (json_is_boolean(im) && (!def || def->ignore_merges != json_is_true(im))) {
			vd->ignore_merges_set = true;
			vd->ignore_merges = json_is_true(im);
		}
	} else if (st.spm || json_is_true(json_object_get(model, "byte_fallback"))) {
		vd->model = MOE_VOCAB_SPM;
		vd->pre = "default";
	} else {
		return moe_err(e, MOE_EUNSUPPORTED,
			       "tokenizer.json: BPE that is neither byte-level "
			       "nor SentencePiece-style");
	}
	const moe_pre_def *ndef = vd->model == MOE_VOCAB_BPE ? moe_pre_find(vd->pre) : NULL;
	json_t *dnorm = ndef && ndef->normalizer ? json_loads(ndef->normalizer, 0, NULL) : NULL;
	bool same = dnorm && json_is_object(norm) && json_equal(dnorm, norm);
	json_decref(dnorm);
	if (same && !vd->pre_tokenizer) {
		vd->normalizer = ndef->normalizer; /* the named table's spelling */
	} else if (json_is_object(norm)) {
		moe_normalizer *check = NULL;
		if (!(vd->normalizer = arena_json(norm, a)))
			return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		int rc = moe_normalizer_from_json(&check, vd->normalizer, vd->model == MOE_VOCAB_SPM,
						  e);
		moe_normalizer_free(check);
		if (rc < 0) {
			moe_err_prefix(e, "tokenizer.json");
			return rc;
		}
		if (!check)
			vd->normalizer = NULL; /* nothing left to do (SentencePiece) */
	}

	float *uscores = NULL;
	if (ugm) {
		uscores = moe_arena_alloc(a, ((size_t)c->n + 1) * sizeof *uscores, sizeof *uscores);
		if (!uscores)
			return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		json_array_foreach(vocab, i, v) {
			c->str[i] = json_string_value(json_array_get(v, 0));
			c->len[i] = json_string_length(json_array_get(v, 0));
			c->type[i] = MOE_TOKEN_NORMAL;
			/* A score a float cannot hold would become -inf, and no
			 * segmentation of a piece could then score above the
			 * Viterbi's floor. */
			double score = json_number_value(json_array_get(v, 1));
			if (!(fabs(score) <= FLT_MAX))
				return moe_err(e, MOE_EFORMAT, "tokenizer.json: model.vocab[%zu]: "
					       "score %g is out of a float's range", i, score);
			uscores[i] = (float)score;
		}
	} else {
		json_object_foreach(vocab, key, v) {
			json_int_t id = id_of(v);
			c->str[id] = key;
			c->len[id] = strlen(key);
			c->type[id] = MOE_TOKEN_NORMAL;
		}
	}
	json_array_foreach(added, i, v) {
		json_int_t id = id_of(json_object_get(v, "id"));
		json_t *content = json_object_get(v, "content");
		c->str[id] = json_string_value(content);
		c->len[id] = json_string_length(content);
		c->type[id] = json_is_true(json_object_get(v, "special")) ||
					      looks_special(c->str[id], c->len[id])
				      ? MOE_TOKEN_CONTROL
				      : MOE_TOKEN_USER_DEFINED;
		c->flags[id] = (json_is_true(json_object_get(v, "lstrip")) ? MOE_TOKEN_LSTRIP : 0) |
			       (json_is_true(json_object_get(v, "rstrip")) ? MOE_TOKEN_RSTRIP : 0);
	}
	for (uint32_t k = 0; k < c->n; k++) {
		if (!c->str[k]) {
			char buf[32];
			int l = snprintf(buf, sizeof buf, "[PAD%" PRIu32 "]", k);
			if (!(c->str[k] = moe_arena_strndup(a, buf, (size_t)l)))
				return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
			c->len[k] = (size_t)l;
			c->type[k] = MOE_TOKEN_UNUSED;
		} else if ((vd->model == MOE_VOCAB_SPM ||
			    (ugm && json_is_true(json_object_get(model, "byte_fallback")))) &&
			   c->type[k] == MOE_TOKEN_NORMAL && is_byte_token(c->str[k], c->len[k])) {
			c->type[k] = MOE_TOKEN_BYTE;
		}
	}
	const char *unk = jstr(model, "unk_token");

	/* Blob and offsets. */
	uint64_t total = 0;
	for (uint32_t k = 0; k < c->n; k++)
		if (!moe_add_u64(total, c->len[k], &total) || total > INT32_MAX)
			return moe_err(e, MOE_ERANGE, "tokenizer.json: tokens exceed 2 GiB");
	char *blob = moe_arena_alloc(a, (size_t)total + 1, 1);
	uint32_t *off = moe_arena_alloc(a, ((size_t)c->n + 1) * sizeof *off, sizeof *off);
	if (!blob || !off || moe_strmap_init(&c->map, c->n) < 0)
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
	size_t pos = 0;
	for (uint32_t k = 0; k < c->n; k++) {
		off[k] = (uint32_t)pos;
		memcpy(blob + pos, c->str[k], c->len[k]);
		if (moe_strmap_put(&c->map, blob + pos, c->len[k], k) < 0)
			return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		pos += c->len[k];
	}
	off[c->n] = (uint32_t)pos;
	blob[pos] = '\0';
	vd->n_tokens = c->n;
	vd->tokens = blob;
	vd->token_offsets = off;
	vd->types = c->type;
	vd->flags = c->flags;

	/* Merges: "a b" strings, or [a, b] pairs in newer files. */
	size_t nm = json_array_size(merges);
	if (merges && !json_is_array(merges))
		return moe_err(e, MOE_EFORMAT, "tokenizer.json: model.merges is not an array");
	if (nm > INT32_MAX - 1)
		return moe_err(e, MOE_ERANGE, "tokenizer.json: too many merges");
	moe_sbuf mb = {0};
	uint32_t *moff = moe_arena_alloc(a, (nm + 1) * sizeof *moff, sizeof *moff);
	float *scores = NULL;
	if (!moff)
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
	if (vd->model == MOE_VOCAB_SPM) {
		scores = moe_arena_alloc(a, ((size_t)c->n + 1) * sizeof *scores, sizeof *scores);
		if (!scores)
			return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		/* Normal tokens no merge produces (single characters, or
		 * pieces HF could never build) rank below every merge. */
		for (uint32_t k = 0; k < c->n; k++)
			scores[k] = c->type[k] == MOE_TOKEN_NORMAL ? -1e9f : 0.0f;
	}
	int rc = moe_sbuf_reserve(&mb, 1);
	json_array_foreach(merges, i, v) {
		const char *l, *r;
		size_t ll, rl;
		if (json_is_string(v)) {
			const char *s = json_string_value(v);
			size_t n = json_string_length(v);
			const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
			if (!sp) {
				l = s, ll = n, r = "", rl = 0;
			} else {
				l = s, ll = (size_t)(sp - s), r = sp + 1, rl = n - ll - 1;
			}
		} else if (json_is_array(v) && json_array_size(v) == 2 &&
			   json_is_string(json_array_get(v, 0)) &&
			   json_is_string(json_array_get(v, 1))) {
			l = json_string_value(json_array_get(v, 0));
			ll = json_string_length(json_array_get(v, 0));
			r = json_string_value(json_array_get(v, 1));
			rl = json_string_length(json_array_get(v, 1));
		} else {
			free(mb.p);
			return moe_err(e, MOE_EFORMAT,
				       "tokenizer.json: model.merges[%zu]: not \"a b\" "
				       "or [a, b]",
				       i);
		}
		if (vd->model == MOE_VOCAB_SPM) {
			size_t base = mb.len;
			rc |= moe_sbuf_add(&mb, l, ll);
			rc |= moe_sbuf_add(&mb, r, rl);
			int64_t id = rc ? -1 : moe_strmap_get(&c->map, mb.p + base, ll + rl);
			mb.len = base;
			if (id >= 0 && scores[id] == -1e9f && c->type[id] == MOE_TOKEN_NORMAL)
				scores[id] = -(float)i;
		} else {
			moff[i] = (uint32_t)mb.len;
			rc |= moe_sbuf_add(&mb, l, ll);
			rc |= moe_sbuf_add(&mb, " ", 1);
			rc |= moe_sbuf_add(&mb, r, rl);
			if (mb.len > INT32_MAX) {
				free(mb.p);
				return moe_err(e, MOE_ERANGE,
					       "tokenizer.json: merges exceed 2 GiB");
			}
		}
	}
	if (rc) {
		free(mb.p);
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
	}
	if (vd->model == MOE_VOCAB_BPE) {
		moff[nm] = (uint32_t)mb.len;
		char *mblob = moe_arena_strndup(a, mb.p, mb.len);
		free(mb.p);
		if (!mblob)
			return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		vd->n_merges = (uint32_t)nm;
		vd->merges = mblob;
		vd->merge_offsets = moff;
	} else {
		free(mb.p);
		moff[0] = 0;
		vd->n_merges = 0;
		vd->merges = "";
		vd->merge_offsets = moff;
		vd->scores = ugm ? uscores : scores;
	}

	/* Settings: model defaults, then what the files say. */
	moe_vocab_defaults(vd);
	if (vd->model == MOE_VOCAB_SPM && st.prefix_set)
		vd->add_space_prefix = st.prefix;
	else if (vd->model == MOE_VOCAB_SPM && st.spm)
		vd->add_space_prefix = false; /* Replace without Prepend */
	int32_t id;
	json_t *uid = json_object_get(model, "unk_id");
	if (ugm && id_of(uid) >= 0 && id_of(uid) < (json_int_t)c->n)
		unk = c->str[id_of(uid)];
	if (ugm || wpm) {
		/* Metaspace/WordPiece decoders put a space before words; the
		 * detokeniser drops the first (MOE_DETOK_STRIP_SPACE). */
		vd->add_space_prefix = true;
	}
	if (unk && (id = lookup(c, unk)) >= 0) {
		vd->unk_id = id;
		if (c->type[id] == MOE_TOKEN_CONTROL || c->type[id] == MOE_TOKEN_NORMAL)
			c->type[id] = MOE_TOKEN_UNKNOWN;
	}
	if ((id = lookup(c, config_token(cfg, "bos_token"))) >= 0)
		vd->bos_id = id;
	if ((id = lookup(c, config_token(cfg, "eos_token"))) >= 0)
		vd->eos_id = id;
	if ((id = lookup(c, config_token(cfg, "unk_token"))) >= 0)
		vd->unk_id = id;
	if ((id = lookup(c, config_token(cfg, "pad_token"))) >= 0)
		vd->pad_id = id;
	json_t *tp = template_processing(json_object_get(tj, "post_processor"));
	const char *first = tp ? template_edge(tp, true) : NULL;
	const char *last = tp ? template_edge(tp, false) : NULL;
	json_t *ab = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
	json_t *ae = cfg ? json_object_get(cfg, "add_eos_token") : NULL;
	if (json_is_boolean(ab)) {
		vd->add_bos = json_is_true(ab);
	} else if (tp) {
		vd->add_bos = first != NULL;
		if (first && !config_token(cfg, "bos_token") && (id = lookup(c, first)) >= 0)
			vd->bos_id = id;
	}
	if (json_is_boolean(ae)) {
		vd->add_eos = json_is_true(ae);
	} else if (tp) {
		vd->add_eos = last != NULL;
		if (last && !config_token(cfg, "eos_token") && (id = lookup(c, last)) >= 0)
			vd->eos_id = id;
	}

	json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
	const char *tmpl = NULL;
	if (json_is_string(ct)) {
		tmpl = json_string_value(ct);
	} else if (json_is_array(ct)) {
		/* Named templates: "default" (or the first) is the template; all
		 * are kept by name ("tool_use", "rag", ...). */
		size_t nn = json_array_size(ct), k = 0;
		const char **names = moe_arena_alloc(a, (nn + 1) * sizeof *names, sizeof(void *));
		const char **texts = moe_arena_alloc(a, (nn + 1) * sizeof *texts, sizeof(void *));
		if (!names || !texts)
			return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		json_array_foreach(ct, i, v) {
			const char *t = jstr(v, "template"), *tname = jstr(v, "name");
			if (t && (!tmpl || strcmp(tname ? tname : "", "default") == 0))
				tmpl = t;
			if (t && tname && strcmp(tname, "default") != 0) {
				names[k] = tname;
				texts[k++] = t;
			}
		}
		for (size_t j = 0; j < k; j++)
			if (!(names[j] = moe_arena_strndup(a, names[j], strlen(names[j]))) ||
			    !(texts[j] = moe_arena_strndup(a, texts[j], strlen(texts[j]))))
				return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
		vd->n_chat_templates = (uint32_t)k;
		vd->chat_template_names = names;
		vd->chat_template_texts = texts;
	}
	if (tmpl && !(vd->chat_template = moe_arena_strndup(a, tmpl, strlen(tmpl))))
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
	if (!(vd->pre = moe_arena_strndup(a, vd->pre, strlen(vd->pre))))
		return moe_err(e, MOE_ENOMEM, "tokenizer.json: out of memory");
	moe_vocab_fixup(vd, c->type);
	return 0;
}

/* json_loads, but integers beyond 64 bits (Python's int(1e30) in
 * model_max_length, as many real tokenizer_config.json files hold) are read
 * as reals, by the rewrite the snapshot reader applies to every JSON file
 * (moe_hf_json_relax): such values are never token ids, and every id is
 * range-checked where it is used. */
static json_t *load_lenient(const char *text, json_error_t *je)
{
	json_t *j = json_loads(text, JSON_ALLOW_NUL, je);
	if (j || !strstr(je->text, "too big integer"))
		return j;
	char *copy = strdup(text);
	moe_error e = {0};
	if (copy && moe_hf_json_relax(&copy, &e) == 0)
		j = json_loads(copy, JSON_ALLOW_NUL, je);
	free(copy);
	return j;
}

int moe_vocab_data_from_hf(moe_vocab_data *vd, const char *tokenizer_json,
			   const char *tokenizer_config_json, moe_arena *a, moe_error *e)
{
	json_error_t je;
	json_t *tj, *cfg = NULL;
	hf_ctx c = {0};

	memset(vd, 0, sizeof *vd);
	tj = load_lenient(tokenizer_json, &je);
	if (!tj)
		return moe_err(e, MOE_EFORMAT, "tokenizer.json: %s (line %d, column %d)", je.text,
			       je.line, je.column);
	if (tokenizer_config_json) {
		cfg = load_lenient(tokenizer_config_json, &je);
		if (!cfg) {
			json_decref(tj);
			return moe_err(e, MOE_EFORMAT,
				       "tokenizer_config.json: %s (line %d, column %d)", je.text,
				       je.line, je.column);
		}
		if (!json_is_object(cfg)) {
			json_decref(tj);
			json_decref(cfg);
			return moe_err(e, MOE_EFORMAT, "tokenizer_config.json: not an object");
		}
	}
	int rc = json_is_object(tj) ? parse(vd, tj, cfg, a, &c, e)
				    : moe_err(e, MOE_EFORMAT, "tokenizer.json: not an object");
	moe_strmap_free(&c.map);
	json_decref(tj);
	json_decref(cfg);
	return rc;
}
