/* normalize.c — normalizers as tokenizer.json declares them: NFC, NFD,
 * NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend,
 * BertNormalizer and Sequence, applied to each raw text fragment before
 * pre-tokenization (as HF does).  Unicode data comes from utf8proc.
 *
 * "Precompiled" is SentencePiece's compiled character map
 * (precompiled_charsmap, base64): a Darts-clone double-array trie over
 * UTF-8 byte strings whose values index NUL-terminated replacements.  It
 * is applied as SentencePiece's Normalizer applies it: at each position
 * the longest key that prefixes the rest of the text is replaced;
 * without one, one character is copied (an invalid byte becomes U+FFFD).
 */
#include <config.h>

#include "text_int.h"

#include <jansson.h>
#include <utf8proc.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

typedef enum {
	NM_UNICODE,  /* utf8proc options in `opts` */
	NM_LOWER,
	NM_STRIP,
	NM_STRIP_ACCENTS,
	NM_REPLACE,
	NM_PREPEND,
	NM_BERT_CLEAN,
	NM_BERT_CHINESE,
	NM_CHARSMAP, /* SentencePiece precompiled_charsmap */
} nm_kind;

typedef struct nstep {
	nm_kind kind;
	int opts;
	bool left, right;
	pcre2_code *re;
	bool jit;
	char *text; /* Replace content / Prepend text; charsmap: the whole blob */
	const uint32_t *units; /* charsmap: the trie's units (inside text) */
	size_t n_units;
	const char *repl; /* charsmap: the replacements (inside text) */
	size_t n_repl;
} nstep;

struct moe_normalizer {
	nstep *v;
	size_t n, cap;
};

void moe_normalizer_free(moe_normalizer *nm)
{
	if (!nm)
		return;
	for (size_t i = 0; i < nm->n; i++) {
		if (nm->v[i].re)
			pcre2_code_free(nm->v[i].re);
		free(nm->v[i].text);
		free((void *)nm->v[i].units);
	}
	free(nm->v);
	free(nm);
}

static int push(moe_normalizer *nm, nstep s, moe_error *e)
{
	if (nm->n == nm->cap) {
		size_t cap = nm->cap ? nm->cap * 2 : 8;
		nstep *v = realloc(nm->v, cap * sizeof *v);
		if (!v) {
			if (s.re)
				pcre2_code_free(s.re);
			free(s.text);
			return moe_err(e, MOE_ENOMEM, "out of memory (normalizer)");
		}
		nm->v = v;
		nm->cap = cap;
	}
	nm->v[nm->n++] = s;
	return 0;
}

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* precompiled_charsmap: base64 of [u32 LE trie bytes][trie units][replacements]. */
static int compile_charsmap(moe_normalizer *nm, json_t *j, moe_error *e)
{
	json_t *cm = json_object_get(j, "precompiled_charsmap");
	if (json_is_null(cm) || (json_is_string(cm) && !json_string_length(cm)))
		return 0; /* an empty map changes nothing */
	if (!json_is_string(cm))
		return moe_err(e, MOE_EFORMAT, "normalizer Precompiled: precompiled_charsmap "
			       "is not a string");
	const char *src = json_string_value(cm);
	size_t n = json_string_length(cm);
	unsigned char *blob = malloc(n / 4 * 3 + 8);
	if (!blob)
		return moe_err(e, MOE_ENOMEM, "out of memory (normalizer)");
	size_t len = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '=')
			break;
		int v = b64_value((unsigned char)src[i]);
		if (v < 0) {
			free(blob);
			return moe_err(e, MOE_EFORMAT, "normalizer Precompiled: precompiled_charsmap "
				       "is not base64 (byte %zu)", i);
		}
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			blob[len++] = (unsigned char)(acc >> bits);
		}
	}
	uint32_t trie = len >= 4 ? (uint32_t)blob[0] | (uint32_t)blob[1] << 8 |
					   (uint32_t)blob[2] << 16 | (uint32_t)blob[3] << 24 : 0;
	if (len < 8 || trie < 4 || trie % 4 || trie > len - 4) {
		free(blob);
		return moe_err(e, MOE_EFORMAT, "normalizer Precompiled: precompiled_charsmap is "
			       "malformed (%zu bytes, trie of %u bytes)", len, trie);
	}
	/* The units are read as little-endian words (they are stored so). */
	uint32_t *units = malloc(trie);
	if (!units) {
		free(blob);
		return moe_err(e, MOE_ENOMEM, "out of memory (normalizer)");
	}
	for (uint32_t k = 0; k < trie / 4; k++) {
		const unsigned char *u = blob + 4 + 4 * k;
		units[k] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
			   (uint32_t)u[3] << 24;
	}
	memmove(blob, blob + 4 + trie, len - 4 - trie);
	nstep st = {.kind = NM_CHARSMAP, .text = (char *)blob, .units = units,
		    .n_units = trie / 4, .repl = (char *)blob, .n_repl = len - 4 - trie};
	int rc = push(nm, st, e);
	if (rc < 0)
		free(units);
	return rc;
}

static int compile(moe_normalizer *nm, json_t *j, bool spm, int depth, moe_error *e)
{
	const char *type = jstr(j, "type");
	if (depth > 16)
		return moe_err(e, MOE_EFORMAT, "normalizer: nested too deeply");
	if (!type)
		return moe_err(e, MOE_EFORMAT, "normalizer: an entry without \"type\"");
	if (strcmp(type, "Sequence") == 0) {
		json_t *arr = json_object_get(j, "normalizers"), *v;
		size_t i;
		if (!json_is_array(arr))
			return moe_err(e, MOE_EFORMAT, "normalizer: Sequence without \"normalizers\"");
		json_array_foreach(arr, i, v)
			MOE_TRY(compile(nm, v, spm, depth + 1, e));
		return 0;
	}
	static const struct {
		const char *name;
		int opts;
	} forms[] = {
		{"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
		{"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
		{"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
		{"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
		{"Nmt", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
	};
	for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++)
		if (strcmp(type, forms[k].name) == 0)
			return push(nm, (nstep){.kind = NM_UNICODE, .opts = forms[k].opts}, e);
	if (strcmp(type, "Precompiled") == 0)
		return compile_charsmap(nm, j, e);
	if (strcmp(type, "Lowercase") == 0)
		return push(nm, (nstep){.kind = NM_LOWER}, e);
	if (strcmp(type, "StripAccents") == 0)
		return push(nm, (nstep){.kind = NM_STRIP_ACCENTS}, e);
	if (strcmp(type, "Strip") == 0) {
		json_t *l = json_object_get(j, "strip_left"), *r = json_object_get(j, "strip_right");
		return push(nm, (nstep){.kind = NM_STRIP, .left = !l || json_is_true(l),
					.right = !r || json_is_true(r)}, e);
	}
	if (strcmp(type, "Prepend") == 0 || strcmp(type, "Replace") == 0) {
		bool prepend = strcmp(type, "Prepend") == 0;
		const char *text = jstr(j, prepend ? "prepend" : "content");
		json_t *pat = json_object_get(j, "pattern");
		const char *re = jstr(pat, "Regex"), *str = jstr(pat, "String");
		if (!text || (!prepend && !re && !str))
			return moe_err(e, MOE_EFORMAT, "normalizer: %s without its %s", type,
				       prepend ? "\"prepend\" text" : "pattern and content");
		/* SentencePiece-style vocabularies do these two themselves
		 * (the space prefix and spaces as U+2581). */
		if (spm && (prepend || (str && strcmp(str, " ") == 0)))
			return 0;
		nstep s = {.kind = prepend ? NM_PREPEND : NM_REPLACE};
		if (!prepend) {
			void *code;
			MOE_TRY(moe_regex_compile(re ? re : str, !re, "normalizer Replace", &code,
						  &s.jit, e));
			s.re = code;
		}
		if (!(s.text = strdup(text))) {
			if (s.re)
				pcre2_code_free(s.re);
			return moe_err(e, MOE_ENOMEM, "out of memory (normalizer)");
		}
		return push(nm, s, e);
	}
	if (strcmp(type, "BertNormalizer") == 0) {
		json_t *ct = json_object_get(j, "clean_text"), *cc = json_object_get(j,
										       "handle_chinese_chars");
		json_t *sa = json_object_get(j, "strip_accents"), *lc = json_object_get(j,
										       "lowercase");
		bool lower = !lc || json_is_true(lc);
		bool accents = json_is_null(sa) || !sa ? lower : json_is_true(sa);
		if (!ct || json_is_true(ct))
			MOE_TRY(push(nm, (nstep){.kind = NM_BERT_CLEAN}, e));
		if (!cc || json_is_true(cc))
			MOE_TRY(push(nm, (nstep){.kind = NM_BERT_CHINESE}, e));
		if (accents) {
			MOE_TRY(push(nm, (nstep){.kind = NM_UNICODE,
						 .opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE}, e));
			MOE_TRY(push(nm, (nstep){.kind = NM_STRIP_ACCENTS}, e));
		}
		if (lower)
			MOE_TRY(push(nm, (nstep){.kind = NM_LOWER}, e));
		return 0;
	}
	return moe_err(e, MOE_EUNSUPPORTED, "normalizer: type '%s' is not supported", type);
}

int moe_normalizer_from_json(moe_normalizer **out, const char *json, bool spm, moe_error *e)
{
	json_error_t je;
	json_t *j = json_loads(json, 0, &je);
	*out = NULL;
	if (!j)
		return moe_err(e, MOE_EFORMAT, "normalizer: %s", je.text);
	moe_normalizer *nm = calloc(1, sizeof *nm);
	int rc = nm ? compile(nm, j, spm, 0, e) : moe_err(e, MOE_ENOMEM, "out of memory");
	json_decref(j);
	if (rc < 0 || nm->n == 0) {
		moe_normalizer_free(nm);
		return rc;
	}
	*out = nm;
	return 0;
}

/* ------------------------------------------------------------------ run */

static bool is_white(uint32_t cp)
{
	return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
	       cp == 0x205F || cp == 0x3000;
}

static int add_cp(moe_sbuf *b, uint32_t cp)
{
	char o[4];
	utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)o);
	return moe_sbuf_add(b, o, (size_t)n);
}

/* The longest key of the charsmap's trie that prefixes s[0..n): its
 * length (0: none) and replacement.  Darts-clone's commonPrefixSearch:
 * a unit holds a label byte, an offset to its children and a leaf flag;
 * a leaf's child unit holds the value, an offset into the replacements. */
static size_t charsmap_match(const nstep *st, const unsigned char *s, size_t n,
			     const char **repl, size_t *repl_len)
{
	const uint32_t *u = st->units;
	size_t best = 0;
	uint32_t value = 0;
#define OFFSET(x) (((x) >> 10) << (((x) & (1u << 9)) >> 6))
	size_t pos = OFFSET(u[0]);
	for (size_t i = 0; i < n; i++) {
		pos ^= s[i];
		if (pos >= st->n_units)
			break;
		uint32_t unit = u[pos];
		if ((unit & ((1u << 31) | 0xFF)) != s[i])
			break;
		pos ^= OFFSET(unit);
		if (pos >= st->n_units)
			break;
		if ((unit >> 8) & 1) {
			best = i + 1;
			value = u[pos] & ((1u << 31) - 1);
		}
	}
#undef OFFSET
	if (!best || value >= st->n_repl)
		return 0; /* no key, or a value outside the map: copy the text */
	const char *r = st->repl + value, *end = memchr(r, '\0', st->n_repl - value);
	*repl = r;
	*repl_len = end ? (size_t)(end - r) : st->n_repl - value;
	return best;
}

static int apply_charsmap(const nstep *st, const char *s, size_t n, moe_sbuf *out)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n;) {
		const char *repl;
		size_t rl, l = charsmap_match(st, (const unsigned char *)s + i, n - i, &repl, &rl);
		if (l) {
			rc = moe_sbuf_add(out, repl, rl);
			i += l;
			continue;
		}
		uint32_t cp;
		l = moe_utf8_valid_len((const unsigned char *)s + i, n - i, &cp);
		if (l) {
			rc = moe_sbuf_add(out, s + i, l);
			i += l;
		} else {
			rc = moe_sbuf_add(out, "\xEF\xBF\xBD", 3);
			i++;
		}
	}
	return rc;
}

/* One character-wise pass: f returns the code points to emit. */
static int map_chars(const char *s, size_t n, moe_sbuf *out, nm_kind kind)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n;) {
		uint32_t cp;
		size_t l = moe_utf8_valid_len((const unsigned char *)s + i, n - i, &cp);
		if (!l) { /* the caller repaired invalid UTF-8; never here */
			rc = moe_sbuf_add(out, s + i, 1);
			i++;
			continue;
		}
		utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
		switch (kind) {
		case NM_LOWER:
			if (cp == 0x130) /* Rust's to_lowercase: İ -> i + combining dot */
				rc = moe_sbuf_add(out, "i\xCC\x87", 3);
			else
				rc = add_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
			break;
		case NM_STRIP_ACCENTS:
			if (cat != UTF8PROC_CATEGORY_MN)
				rc = moe_sbuf_add(out, s + i, l);
			break;
		case NM_BERT_CLEAN:
			/* drop NUL, U+FFFD and controls; whitespace -> ' ' */
			if (cp == 0 || cp == 0xFFFD)
				break;
			if (cp == '\t' || cp == '\n' || cp == '\r' || is_white(cp))
				rc = moe_sbuf_add(out, " ", 1);
			else if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF)
				;
			else
				rc = moe_sbuf_add(out, s + i, l);
			break;
		case NM_BERT_CHINESE: {
			bool cjk = (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
				   (cp >= 0x20000 && cp <= 0x2A6DF) ||
				   (cp >= 0x2A700 && cp <= 0x2B73F) ||
				   (cp >= 0x2B740 && cp <= 0x2B81F) ||
				   (cp >= 0x2B820 && cp <= 0x2CEAF) ||
				   (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
			if (cjk) {
				rc |= moe_sbuf_add(out, " ", 1);
				rc |= moe_sbuf_add(out, s + i, l);
				rc |= moe_sbuf_add(out, " ", 1);
			} else {
				rc = moe_sbuf_add(out, s + i, l);
			}
			break;
		}
		default:
			rc = moe_sbuf_add(out, s + i, l);
		}
		i += l;
	}
	return rc;
}

static int replace(const nstep *st, const char *s, size_t n, moe_sbuf *out,
		   pcre2_match_data *md)
{
	size_t pos = 0, last = 0;
	int rc = 0;
	while (rc == 0 && pos <= n) {
		int m = PCRE2_ERROR_JIT_STACKLIMIT;
		if (st->jit)
			m = pcre2_jit_match(st->re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
		if (m < 0 && m != PCRE2_ERROR_NOMATCH)
			m = pcre2_match(st->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0)
			return MOE_ERANGE;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		rc |= moe_sbuf_add(out, s + last, ov[0] - last);
		rc |= moe_sbuf_adds(out, st->text);
		last = ov[1];
		if (ov[1] == ov[0]) {
			if (ov[1] >= n)
				break;
			size_t l = moe_utf8_lead_len((unsigned char)s[ov[1]]);
			rc |= moe_sbuf_add(out, s + ov[1], l);
			last = pos = ov[1] + l;
		} else {
			pos = ov[1];
		}
	}
	if (rc == 0 && last < n)
		rc = moe_sbuf_add(out, s + last, n - last);
	return rc;
}

int moe_normalizer_run(const moe_normalizer *nm, const char *text, size_t len, moe_sbuf *out)
{
	moe_sbuf a = {0}, b = {0};
	pcre2_match_data *md = NULL;
	int rc = moe_sbuf_add(&a, text, len);
	for (size_t i = 0; rc == 0 && i < nm->n; i++) {
		const nstep *st = &nm->v[i];
		b.len = 0;
		switch (st->kind) {
		case NM_UNICODE: {
			if (!a.len)
				break;
			utf8proc_uint8_t *dst = NULL;
			utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)a.p,
							  (utf8proc_ssize_t)a.len, &dst,
							  (utf8proc_option_t)st->opts);
			if (r < 0) {
				rc = r == UTF8PROC_ERROR_NOMEM ? MOE_ENOMEM : MOE_EINVAL;
				break;
			}
			rc = moe_sbuf_add(&b, dst, (size_t)r);
			free(dst);
			goto swap;
		}
		case NM_STRIP: {
			size_t s = 0, t = a.len;
			while (st->left && s < t) {
				uint32_t cp;
				size_t l = moe_utf8_valid_len((unsigned char *)a.p + s, t - s, &cp);
				if (!l || !is_white(cp))
					break;
				s += l;
			}
			while (st->right && t > s) {
				size_t k = t - 1;
				while (k > s && ((unsigned char)a.p[k] & 0xC0) == 0x80)
					k--;
				uint32_t cp;
				size_t l = moe_utf8_valid_len((unsigned char *)a.p + k, t - k, &cp);
				if (!l || !is_white(cp))
					break;
				t = k;
			}
			rc = moe_sbuf_add(&b, a.p + s, t - s);
			goto swap;
		}
		case NM_CHARSMAP:
			rc = apply_charsmap(st, a.p, a.len, &b);
			goto swap;
		case NM_PREPEND:
			if (!a.len)
				break;
			rc = moe_sbuf_adds(&b, st->text);
			rc |= moe_sbuf_add(&b, a.p, a.len);
			goto swap;
		case NM_REPLACE:
			if (!md && !(md = pcre2_match_data_create(2, NULL))) {
				rc = MOE_ENOMEM;
				break;
			}
			rc = replace(st, a.p, a.len, &b, md);
			goto swap;
		default:
			rc = map_chars(a.p, a.len, &b, st->kind);
			goto swap;
		}
		continue;
	swap:;
		moe_sbuf t = a;
		a = b;
		b = t;
	}
	free(b.p);
	if (md)
		pcre2_match_data_free(md);
	if (rc == 0 && moe_sbuf_reserve(&a, 1) < 0)
		rc = MOE_ENOMEM;
	if (rc < 0) {
		free(a.p);
		return rc;
	}
	a.p[a.len] = '\0';
	free(out->p);
	*out = a;
	return 0;
}
