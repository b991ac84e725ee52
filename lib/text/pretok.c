/* pretok.c — pre-tokenizers as tokenizer.json declares them: Split (regex
 * or string, with HF's behaviours Isolated / Removed / MergedWithPrevious /
 * MergedWithNext / Contiguous and invert), ByteLevel (GPT-2 regex, prefix
 * space), Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation,
 * BertPreTokenizer and Sequence — compiled once, run per text fragment.
 *
 * Each step maps every current piece to new pieces, as HF's
 * PreTokenizedString.split does.  Pieces are spans of a work buffer; a step
 * that changes text (a prefix space, Metaspace's replacement) appends the
 * new text to the buffer.
 *
 * Regexes are written for Oniguruma (HF) or fancy-regex/tiktoken; PCRE2
 * takes nearly all of them as written.  One rule translates what it cannot:
 * a class intersection [X&&[Y]] (or [X&&[^Y]]) becomes (?:(?=[Y])[X])
 * (resp. (?:(?![Y])[X])) — same set, written as a lookahead —, Oniguruma's
 * \h (a hex digit) becomes [0-9A-Fa-f] and \uHHHH becomes \x{HHHH}.  Anything else that does not compile
 * is refused with the pattern and PCRE2's message.
 */
#include <config.h>

#include "text_int.h"

#include <ctype.h>
#include <jansson.h>
#include <utf8proc.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

enum { B_ISOLATED, B_REMOVED, B_PREV, B_NEXT, B_CONTIGUOUS };

typedef enum {
	P_REGEX,    /* split on matches of re */
	P_PREFIX,   /* ByteLevel add_prefix_space: " " before pieces without one */
	P_META,     /* Metaspace: ' ' -> replacement, prepend, split */
	P_PUNCT,    /* split on Unicode/ASCII punctuation */
	P_SPACE,    /* split on whitespace (Removed) */
} step_kind;

typedef struct step {
	step_kind kind;
	int behavior;
	bool invert;
	pcre2_code *re;
	bool jit;
	char repl[8];   /* Metaspace replacement (UTF-8) */
	size_t repl_len;
	int prepend;    /* Metaspace: 0 never, 1 first, 2 always */
	bool split;
} step;

struct moe_pretok {
	step *v;
	size_t n, cap;
};

void moe_pretok_free(moe_pretok *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].re)
			pcre2_code_free(p->v[i].re);
	free(p->v);
	free(p);
}

static int push(moe_pretok *p, step s, moe_error *e)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 8;
		step *v = realloc(p->v, cap * sizeof *v);
		if (!v) {
			if (s.re)
				pcre2_code_free(s.re);
			return moe_err(e, MOE_ENOMEM, "out of memory (pre-tokenizer)");
		}
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = s;
	return 0;
}

/* First pass of the translation: escapes.  \uHHHH -> \x{HHHH}; \h (a hex
 * digit in Oniguruma) -> [0-9A-Fa-f], or 0-9A-Fa-f inside a class. */
static int translate_escapes(const char *re, moe_sbuf *b)
{
	size_t n = strlen(re);
	int depth = 0, rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char c = re[i];
		if (c == '\\' && i + 1 < n) {
			char d = re[i + 1];
			if (d == 'h') {
				rc = moe_sbuf_adds(b, depth ? "0-9A-Fa-f" : "[0-9A-Fa-f]");
			} else if (d == 'u' && i + 5 < n && isxdigit((unsigned char)re[i + 2]) &&
				   isxdigit((unsigned char)re[i + 3]) &&
				   isxdigit((unsigned char)re[i + 4]) &&
				   isxdigit((unsigned char)re[i + 5])) {
				rc = moe_sbuf_adds(b, "\\x{");
				rc |= moe_sbuf_add(b, re + i + 2, 4);
				rc |= moe_sbuf_adds(b, "}");
				i += 4;
			} else {
				rc = moe_sbuf_add(b, re + i, 2);
			}
			i++;
			continue;
		}
		if (c == '[')
			depth++;
		else if (c == ']' && depth > 0)
			depth--;
		rc = moe_sbuf_add(b, &c, 1);
	}
	return rc;
}

/* The documented translation of Oniguruma-only syntax to PCRE2; *out is
 * malloc'd. */
int moe_regex_translate(const char *src, char **out)
{
	moe_sbuf pre = {0};
	if (moe_sbuf_reserve(&pre, strlen(src) + 16) < 0 || translate_escapes(src, &pre) < 0) {
		free(pre.p);
		return MOE_ENOMEM;
	}
	pre.p[pre.len] = '\0';
	const char *re = pre.p;
	size_t n = pre.len;
	moe_sbuf b = {0};
	int rc = moe_sbuf_reserve(&b, n * 2 + 16);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (re[i] == '\\' && i + 1 < n) {
			rc = moe_sbuf_add(&b, re + i, 2);
			i++;
			continue;
		}
		if (re[i] != '[') {
			rc = moe_sbuf_add(&b, re + i, 1);
			continue;
		}
		/* A bracket class: find its end and any top-level "&&[". */
		size_t j = i + 1, amp = 0;
		int depth = 1;
		if (j < n && re[j] == '^')
			j++;
		if (j < n && re[j] == ']')
			j++; /* a leading ] is literal */
		for (; j < n && depth; j++) {
			if (re[j] == '\\') {
				j++;
				continue;
			}
			if (re[j] == '[' && j + 1 < n && re[j + 1] == ':') {
				const char *end = strstr(re + j + 2, ":]");
				if (end)
					j = (size_t)(end - re) + 1;
				continue;
			}
			if (re[j] == '[')
				depth++;
			else if (re[j] == ']')
				depth--;
			else if (depth == 1 && re[j] == '&' && j + 2 < n && re[j + 1] == '&' &&
				 re[j + 2] == '[' && !amp)
				amp = j;
		}
		if (!amp || depth) {
			rc = moe_sbuf_add(&b, re + i, (j > i ? j : i + 1) - i);
			i = (j > i ? j : i + 1) - 1;
			continue;
		}
		/* [X&&[Y]] -> (?:(?=[Y])[X]); [X&&[^Y]] -> (?:(?![Y])[X]) */
		size_t close = j - 1; /* the class's final ] */
		const char *x = re + i + 1, *y = re + amp + 2;
		size_t xl = amp - (i + 1), yl = close - (amp + 2);
		bool neg = yl > 2 && y[1] == '^';
		rc |= moe_sbuf_adds(&b, neg ? "(?:(?![" : "(?:(?=[");
		rc |= moe_sbuf_add(&b, neg ? y + 2 : y + 1, neg ? yl - 2 : yl - 1);
		rc |= moe_sbuf_adds(&b, ")[");
		rc |= moe_sbuf_add(&b, x, xl);
		rc |= moe_sbuf_adds(&b, "])");
		i = close;
	}
	free(pre.p);
	if (rc) {
		free(b.p);
		return MOE_ENOMEM;
	}
	b.p[b.len] = '\0';
	*out = b.p;
	return 0;
}

/* Compile a pattern as HF means it: regex (Oniguruma syntax, translated
 * where needed) or literal string. */
int moe_regex_compile(const char *pat, bool literal, const char *what, void **code, bool *jit,
		      moe_error *e)
{
	int err;
	PCRE2_SIZE where;
	uint32_t opts = PCRE2_UTF | PCRE2_NO_UTF_CHECK |
			(literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_DOLLAR_ENDONLY);
	/* Always translated: PCRE2 would accept [X&&[Y]] and \h with another
	 * meaning instead of refusing them. */
	char *tr = NULL;
	if (!literal && moe_regex_translate(pat, &tr) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (pre-tokenizer)");
	pcre2_code *c = pcre2_compile((PCRE2_SPTR)(tr ? tr : pat), PCRE2_ZERO_TERMINATED, opts,
				      &err, &where, NULL);
	free(tr);
	if (!c) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof msg);
		return moe_err(e, MOE_EUNSUPPORTED, "%s: the regex /%.200s/ is not supported "
			       "(PCRE2: %s at offset %zu)", what, pat, (const char *)msg,
			       (size_t)where);
	}
	*jit = pcre2_jit_compile(c, PCRE2_JIT_COMPLETE) == 0;
	*code = c;
	return 0;
}

static int behavior_of(const char *s)
{
	if (!s || strcmp(s, "Isolated") == 0)
		return B_ISOLATED;
	if (strcmp(s, "Removed") == 0)
		return B_REMOVED;
	if (strcmp(s, "MergedWithPrevious") == 0)
		return B_PREV;
	if (strcmp(s, "MergedWithNext") == 0)
		return B_NEXT;
	if (strcmp(s, "Contiguous") == 0)
		return B_CONTIGUOUS;
	return -1;
}

static int add_regex(moe_pretok *p, const char *pat, bool literal, int behavior, bool invert,
		     const char *what, moe_error *e)
{
	step s = {.kind = P_REGEX, .behavior = behavior, .invert = invert};
	void *code;
	MOE_TRY(moe_regex_compile(pat, literal, what, &code, &s.jit, e));
	s.re = code;
	return push(p, s, e);
}

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* GPT-2's pattern as HF's ByteLevel writes it. */
#define RE_BYTELEVEL "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static int compile(moe_pretok *p, json_t *j, int depth, moe_error *e)
{
	const char *type = jstr(j, "type");
	if (depth > 16)
		return moe_err(e, MOE_EFORMAT, "pre_tokenizer: nested too deeply");
	if (!type)
		return moe_err(e, MOE_EFORMAT, "pre_tokenizer: an entry without \"type\"");
	if (strcmp(type, "Sequence") == 0) {
		json_t *arr = json_object_get(j, "pretokenizers"), *v;
		size_t i;
		if (!json_is_array(arr))
			return moe_err(e, MOE_EFORMAT, "pre_tokenizer: Sequence without "
				       "\"pretokenizers\"");
		json_array_foreach(arr, i, v)
			MOE_TRY(compile(p, v, depth + 1, e));
		return 0;
	}
	if (strcmp(type, "Split") == 0) {
		json_t *pat = json_object_get(j, "pattern");
		const char *re = jstr(pat, "Regex"), *str = jstr(pat, "String");
		int beh = behavior_of(jstr(j, "behavior"));
		if ((!re && !str) || beh < 0)
			return moe_err(e, MOE_EFORMAT, "pre_tokenizer: Split needs a Regex or String "
				       "pattern and a known behavior");
		return add_regex(p, re ? re : str, !re, beh, json_is_true(json_object_get(j, "invert")),
				 "pre_tokenizer Split", e);
	}
	if (strcmp(type, "ByteLevel") == 0) {
		if (json_is_true(json_object_get(j, "add_prefix_space")))
			MOE_TRY(push(p, (step){.kind = P_PREFIX}, e));
		json_t *ur = json_object_get(j, "use_regex");
		if (!ur || json_is_true(ur))
			MOE_TRY(add_regex(p, RE_BYTELEVEL, false, B_ISOLATED, false,
					  "pre_tokenizer ByteLevel", e));
		return 0;
	}
	if (strcmp(type, "Digits") == 0) {
		bool each = json_is_true(json_object_get(j, "individual_digits"));
		return add_regex(p, each ? "\\p{N}" : "\\p{N}+", false, B_ISOLATED, false,
				 "pre_tokenizer Digits", e);
	}
	if (strcmp(type, "Whitespace") == 0)
		return add_regex(p, "\\w+|[^\\w\\s]+", false, B_REMOVED, true,
				 "pre_tokenizer Whitespace", e);
	if (strcmp(type, "WhitespaceSplit") == 0)
		return push(p, (step){.kind = P_SPACE}, e);
	if (strcmp(type, "Punctuation") == 0) {
		int beh = behavior_of(jstr(j, "behavior"));
		if (beh < 0)
			return moe_err(e, MOE_EFORMAT, "pre_tokenizer: Punctuation behavior");
		return push(p, (step){.kind = P_PUNCT, .behavior = beh}, e);
	}
	if (strcmp(type, "BertPreTokenizer") == 0) {
		MOE_TRY(push(p, (step){.kind = P_SPACE}, e));
		return push(p, (step){.kind = P_PUNCT, .behavior = B_ISOLATED}, e);
	}
	if (strcmp(type, "Metaspace") == 0) {
		step s = {.kind = P_META, .split = true, .prepend = 2};
		const char *r = jstr(j, "replacement");
		if (!r)
			r = "\xE2\x96\x81";
		size_t rl = strlen(r);
		if (rl == 0 || rl >= sizeof s.repl)
			return moe_err(e, MOE_EFORMAT, "pre_tokenizer: Metaspace replacement");
		memcpy(s.repl, r, rl);
		s.repl_len = rl;
		const char *scheme = jstr(j, "prepend_scheme");
		json_t *aps = json_object_get(j, "add_prefix_space");
		if (scheme)
			s.prepend = strcmp(scheme, "never") == 0 ? 0 : strcmp(scheme, "first") == 0 ? 1 : 2;
		else if (aps)
			s.prepend = json_is_true(aps) ? 2 : 0;
		json_t *sp = json_object_get(j, "split");
		if (sp)
			s.split = json_is_true(sp);
		return push(p, s, e);
	}
	return moe_err(e, MOE_EUNSUPPORTED, "pre_tokenizer: type '%s' is not supported", type);
}

int moe_pretok_from_json(moe_pretok **out, const char *json, moe_error *e)
{
	json_error_t je;
	json_t *j = json_loads(json, 0, &je);
	*out = NULL;
	if (!j)
		return moe_err(e, MOE_EFORMAT, "pre_tokenizer: %s", je.text);
	moe_pretok *p = calloc(1, sizeof *p);
	int rc = p ? compile(p, j, 0, e) : moe_err(e, MOE_ENOMEM, "out of memory");
	json_decref(j);
	if (rc < 0) {
		moe_pretok_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

/* ------------------------------------------------------------------ run */

static int add_span(moe_pieces *ps, size_t off, size_t len)
{
	if (!len)
		return 0;
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 64;
		moe_span *v = realloc(ps->v, cap * sizeof *v);
		if (!v)
			return MOE_ENOMEM;
		ps->v = v;
		ps->cap = cap;
	}
	ps->v[ps->n++] = (moe_span){(uint32_t)off, (uint32_t)len};
	return 0;
}

/* Segments of one piece: (offset, length, is_match) covering it. */
typedef struct seg {
	size_t off, len;
	bool match;
} seg;

typedef struct segs {
	seg *v;
	size_t n, cap;
} segs;

static int add_seg(segs *s, size_t off, size_t len, bool match)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 32;
		seg *v = realloc(s->v, cap * sizeof *v);
		if (!v)
			return MOE_ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (seg){off, len, match};
	return 0;
}

static bool is_punct(uint32_t cp)
{
	if (cp < 0x80)
		return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
		       (cp >= 123 && cp <= 126);
	utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
	return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

static bool is_white(uint32_t cp)
{
	/* Rust's char::is_whitespace (White_Space property) */
	return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
	       cp == 0x205F || cp == 0x3000;
}

/* Match segments of s[0..n) for a regex or character-class step. */
static int find_segs(const step *st, const char *s, size_t n, pcre2_match_data *md, segs *out)
{
	out->n = 0;
	size_t last = 0;
	if (st->kind == P_REGEX) {
		size_t pos = 0;
		while (pos <= n) {
			int rc = PCRE2_ERROR_JIT_STACKLIMIT;
			if (st->jit)
				rc = pcre2_jit_match(st->re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
			if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
				rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md,
						 NULL);
			if (rc == PCRE2_ERROR_NOMATCH)
				break;
			if (rc < 0)
				return MOE_ERANGE;
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			size_t ms = ov[0], me = ov[1];
			if (ms > last && add_seg(out, last, ms - last, false) < 0)
				return MOE_ENOMEM;
			if (add_seg(out, ms, me - ms, true) < 0)
				return MOE_ENOMEM;
			last = me;
			if (me == ms) { /* empty match: step one character */
				if (me >= n)
					break;
				pos = me + moe_utf8_lead_len((unsigned char)s[me]);
			} else {
				pos = me;
			}
		}
	} else {
		/* One segment per matching character (Removed/Isolated/...
		 * treat each character on its own, as HF's char predicates). */
		for (size_t i = 0; i < n;) {
			uint32_t cp;
			size_t l = moe_utf8_valid_len((const unsigned char *)s + i, n - i, &cp);
			if (!l) {
				l = 1;
				cp = 0xFFFD;
			}
			bool m = st->kind == P_PUNCT ? is_punct(cp) : is_white(cp);
			if (m) {
				if (i > last && add_seg(out, last, i - last, false) < 0)
					return MOE_ENOMEM;
				if (add_seg(out, i, l, true) < 0)
					return MOE_ENOMEM;
				last = i + l;
			}
			i += l;
		}
	}
	if (last < n && add_seg(out, last, n - last, false) < 0)
		return MOE_ENOMEM;
	return 0;
}

/* Apply a split behaviour to the segments of the piece at base. */
static int split_piece(int behavior, bool invert, const segs *sg, size_t base, moe_pieces *to)
{
	size_t pend_off = 0, pend_len = 0; /* MergedWithNext: waiting match */
	bool have_pend = false;
	for (size_t k = 0; k < sg->n; k++) {
		const seg *g = &sg->v[k];
		bool m = g->match != invert;
		size_t off = base + g->off;
		switch (behavior) {
		case B_ISOLATED:
			MOE_TRY(add_span(to, off, g->len));
			break;
		case B_REMOVED:
			if (!m)
				MOE_TRY(add_span(to, off, g->len));
			break;
		case B_PREV:
			/* a match joins the piece before it */
			if (m && to->n > 0 && k > 0 &&
			    to->v[to->n - 1].off + to->v[to->n - 1].len == off)
				to->v[to->n - 1].len += (uint32_t)g->len;
			else
				MOE_TRY(add_span(to, off, g->len));
			break;
		case B_NEXT:
			if (m) {
				if (have_pend) {
					pend_len += g->len;
				} else {
					pend_off = off;
					pend_len = g->len;
					have_pend = true;
				}
			} else if (have_pend) {
				MOE_TRY(add_span(to, pend_off, pend_len + g->len));
				have_pend = false;
			} else {
				MOE_TRY(add_span(to, off, g->len));
			}
			break;
		case B_CONTIGUOUS:
			if (m && k > 0 && (sg->v[k - 1].match != invert) && to->n &&
			    to->v[to->n - 1].off + to->v[to->n - 1].len == off)
				to->v[to->n - 1].len += (uint32_t)g->len;
			else
				MOE_TRY(add_span(to, off, g->len));
			break;
		}
	}
	if (have_pend)
		MOE_TRY(add_span(to, pend_off, pend_len));
	return 0;
}

/* Append bytes to the work buffer; returns their offset or -1. */
static int64_t buf_add(moe_pieces *ps, const char *s, size_t n)
{
	size_t off = ps->buf.len;
	if (moe_sbuf_add(&ps->buf, s, n) < 0 || ps->buf.len > UINT32_MAX)
		return -1;
	return (int64_t)off;
}

static int run_meta(const step *st, moe_pieces *ps, moe_pieces *to, segs *sg)
{
	for (size_t i = 0; i < ps->n; i++) {
		/* ' ' -> replacement; a prefix as the scheme says. */
		size_t start = ps->buf.len;
		moe_span sp = ps->v[i];
		bool first = sp.off == 0 && i == 0;
		bool pre = st->prepend == 2 || (st->prepend == 1 && first);
		if (pre && !(sp.len >= st->repl_len &&
			     memcmp(ps->buf.p + sp.off, st->repl, st->repl_len) == 0) &&
		    !(sp.len && ps->buf.p[sp.off] == ' '))
			if (buf_add(ps, st->repl, st->repl_len) < 0)
				return MOE_ENOMEM;
		for (uint32_t k = 0; k < sp.len; k++) {
			char c = ps->buf.p[sp.off + k];
			if ((c == ' ' ? buf_add(ps, st->repl, st->repl_len)
				      : buf_add(ps, &c, 1)) < 0)
				return MOE_ENOMEM;
		}
		size_t len = ps->buf.len - start;
		if (!st->split) {
			MOE_TRY(add_span(to, start, len));
			continue;
		}
		/* Split before each replacement character (MergedWithNext). */
		sg->n = 0;
		size_t last = 0;
		const char *s = ps->buf.p + start;
		for (size_t k = 0; k + st->repl_len <= len;) {
			if (memcmp(s + k, st->repl, st->repl_len) == 0) {
				if (k > last && add_seg(sg, last, k - last, false) < 0)
					return MOE_ENOMEM;
				if (add_seg(sg, k, st->repl_len, true) < 0)
					return MOE_ENOMEM;
				k += st->repl_len;
				last = k;
			} else {
				k++;
			}
		}
		if (last < len && add_seg(sg, last, len - last, false) < 0)
			return MOE_ENOMEM;
		MOE_TRY(split_piece(B_NEXT, false, sg, start, to));
	}
	return 0;
}

void moe_pieces_free(moe_pieces *ps)
{
	free(ps->buf.p);
	free(ps->v);
	memset(ps, 0, sizeof *ps);
}

int moe_pretok_run(const moe_pretok *p, const char *text, size_t len, moe_pieces *ps)
{
	moe_pieces next = {0};
	segs sg = {0};
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);
	int rc = md ? 0 : MOE_ENOMEM;

	ps->buf.len = 0;
	ps->n = 0;
	if (rc == 0 && (buf_add(ps, text, len) < 0 || add_span(ps, 0, len) < 0))
		rc = MOE_ENOMEM;
	for (size_t si = 0; rc == 0 && si < p->n; si++) {
		const step *st = &p->v[si];
		next.n = 0;
		if (st->kind == P_PREFIX) {
			for (size_t i = 0; rc == 0 && i < ps->n; i++) {
				moe_span sp = ps->v[i];
				if (ps->buf.p[sp.off] == ' ') {
					rc = add_span(&next, sp.off, sp.len);
					continue;
				}
				/* room first: the piece is copied from the buffer
				 * it is appended to */
				if (moe_sbuf_reserve(&ps->buf, (size_t)sp.len + 1) < 0) {
					rc = MOE_ENOMEM;
					break;
				}
				int64_t o = buf_add(ps, " ", 1);
				if (o < 0 || buf_add(ps, ps->buf.p + sp.off, sp.len) < 0)
					rc = MOE_ENOMEM;
				else
					rc = add_span(&next, (size_t)o, sp.len + 1);
			}
		} else if (st->kind == P_META) {
			rc = run_meta(st, ps, &next, &sg);
		} else {
			for (size_t i = 0; rc == 0 && i < ps->n; i++) {
				moe_span sp = ps->v[i];
				rc = find_segs(st, ps->buf.p + sp.off, sp.len, md, &sg);
				if (rc == 0)
					rc = split_piece(st->kind == P_SPACE ? B_REMOVED : st->behavior,
							 st->invert, &sg, sp.off, &next);
			}
		}
		/* The new pieces become current; the buffer is shared. */
		moe_span *tv = ps->v;
		size_t tc = ps->cap;
		ps->v = next.v;
		ps->cap = next.cap;
		ps->n = next.n;
		next.v = tv;
		next.cap = tc;
	}
	free(next.v);
	free(sg.v);
	if (md)
		pcre2_match_data_free(md);
	return rc;
}
