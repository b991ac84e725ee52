/* jinja_fmt.c — Jinja2's formatting filters: filesizeformat, pprint,
 * wordwrap and urlize, each reproducing what jinja2 3.1 (with Python 3.11's
 * pprint and textwrap underneath) prints, byte for byte.
 *
 * They are kept out of jinja_lib.c because each one is a small algorithm
 * of its own (pprint's line fitting, textwrap's chunking, urlize's URL
 * recognition) rather than a one-line mapping onto a Python method.
 * Python's regular expressions are compiled with PCRE2 (Unicode classes,
 * as Python's str patterns); lengths are counted in code points, as
 * Python's len().
 */
#include <config.h>

#include "jinja_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

static void adds(jrender *r, moe_sbuf *b, const char *s)
{
	jx_add(r, b, s, strlen(s));
}

static void spaces(jrender *r, moe_sbuf *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		jx_add(r, b, " ", 1);
}

static size_t cplen(const char *s, size_t n)
{
	return ju_len(s, n);
}

/* Python's str.strip() == '' : empty or only whitespace. */
static bool all_space(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += ju_next_cp(s, n, i, &cp);
		if (!ju_isspace(cp))
			return false;
	}
	return true;
}

/* ------------------------------------------------------------- regexes */

/* The patterns, compiled once (they are constants); matching memory comes
 * from the render's arena, so an error unwinding past a match leaks
 * nothing. */
enum { RE_WORDSEP, RE_HTTP, RE_EMAIL, RE_SCHEME, RE_N };
static const char *const re_src[RE_N] = {
	/* textwrap.TextWrapper.wordsep_re (whitespace is textwrap's six
	 * ASCII characters; Python's \Z is PCRE2's \z) */
	"([\\t\\n\\x0b\\x0c\\r ]+"
	"|(?<=[\\w!\"'&.,?])-{2,}(?=\\w)"
	"|[^\\t\\n\\x0b\\x0c\\r ]+?(?:-(?:(?<=[^\\d\\W]{2}-)|(?<=[^\\d\\W]-[^\\d\\W]-))"
	"(?=[^\\d\\W]-?[^\\d\\W])|(?=[\\t\\n\\x0b\\x0c\\r ]|\\z)|(?<=[\\w!\"'&.,?])(?=-{2,}\\w)))",
	/* jinja2.utils._http_re (re.IGNORECASE) */
	"^((https?://|www\\.)(([\\w%-]+\\.)+)?([a-z]{2,63}|xn--[\\w%]{2,59})"
	"|([\\w%-]{2,63}\\.)+(com|net|int|edu|gov|org|info|mil)"
	"|(https?://)((([\\d]{1,3})(\\.[\\d]{1,3}){3})|(\\[([\\da-f]{0,4}:){2}([\\da-f]{0,4}:?){1,6}])))"
	"(?::[\\d]{1,5})?(?:[/?#]\\S*)?$",
	/* jinja2.utils._email_re */
	"^\\S+@\\w[\\w.-]*\\.\\w+$",
	/* jinja2.filters._uri_scheme_re, used with fullmatch */
	"^([\\w.+-]{2,}:(/){0,2})\\z",
};
static pcre2_code *re_code[RE_N];
static pthread_once_t re_once = PTHREAD_ONCE_INIT;

static void re_compile(void)
{
	for (int i = 0; i < RE_N; i++) {
		int err;
		PCRE2_SIZE off;
		uint32_t opt = PCRE2_UTF | PCRE2_UCP | (i == RE_HTTP ? PCRE2_CASELESS : 0);
		re_code[i] = pcre2_compile((PCRE2_SPTR)re_src[i], PCRE2_ZERO_TERMINATED, opt, &err,
					   &off, NULL);
	}
}

static void *arena_malloc(PCRE2_SIZE n, void *data)
{
	jrender *r = data;
	if (n > r->max_memory || r->arena.used_total > r->max_memory - n)
		return NULL;
	return moe_arena_alloc(&r->arena, n ? n : 1, 16);
}

static void arena_free(void *p, void *data)
{
	(void)p;
	(void)data;
}

typedef struct rematch {
	pcre2_code *code;
	pcre2_match_data *md;
} rematch;

static rematch re_get(jrender *r, int which)
{
	pthread_once(&re_once, re_compile);
	if (!re_code[which])
		jx_fail(r, MOE_EINVAL, "internal: a filter's regular expression did not compile");
	pcre2_general_context *gc = pcre2_general_context_create(arena_malloc, arena_free, r);
	pcre2_match_data *md = gc ? pcre2_match_data_create_from_pattern(re_code[which], gc) : NULL;
	if (!md)
		jx_fail(r, MOE_ERANGE, "memory limit reached (%zu MiB)", r->max_memory >> 20);
	return (rematch){re_code[which], md};
}

/* Match at or after byte `start`; the match's [*b, *e) or false.  PCRE2
 * checks the whole subject's UTF-8 on each call unless told not to: only
 * the first search of a subject (start 0) checks it, so that splitting a
 * long text stays linear. */
static bool re_find(jrender *r, rematch *m, const char *s, size_t n, size_t start, size_t *b,
		    size_t *e)
{
	int rc = pcre2_match(m->code, (PCRE2_SPTR)s, n, start, start ? PCRE2_NO_UTF_CHECK : 0,
			     m->md, NULL);
	if (rc == PCRE2_ERROR_NOMATCH)
		return false;
	if (rc < 0)
		jx_fail(r, MOE_EINVAL, "regular expression match failed (PCRE2 error %d)", rc);
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
	*b = ov[0];
	*e = ov[1];
	return true;
}

static bool re_matches(jrender *r, rematch *m, const char *s, size_t n)
{
	size_t b, e;
	return re_find(r, m, s, n, 0, &b, &e);
}

/* ------------------------------------------------------- filesizeformat */

/* Python's float(str): surrounding whitespace, digits with single
 * underscores between them, inf/nan words; not hex. */
static bool py_float(jrender *r, const jv *v, double *out)
{
	const char *s = v->s;
	size_t n = v->n, i = 0;
	while (i < n && ju_isspace((unsigned char)s[i]))
		i++;
	while (n > i && ju_isspace((unsigned char)s[n - 1]))
		n--;
	char *buf = jx_alloc(r, n - i + 1), *o = buf;
	for (size_t k = i; k < n; k++) {
		char c = s[k];
		if (c == '_') {
			bool ok = k > i && k + 1 < n && s[k - 1] >= '0' && s[k - 1] <= '9' &&
				  s[k + 1] >= '0' && s[k + 1] <= '9';
			if (!ok)
				return false;
			continue;
		}
		if (c == 'x' || c == 'X' || c == 'p' || c == 'P' || c == '(' || (unsigned char)c >= 0x80)
			return false;
		*o++ = c;
	}
	*o = '\0';
	if (o == buf)
		return false;
	char *end;
	*out = strtod(buf, &end);
	return *end == '\0';
}

static jv filesizeformat(jrender *r, const jv *in, const fargs *a)
{
	bool binary = false;
	jv *bv = jx_arg(r, a, 0, "binary");
	if (bv)
		binary = jv_truthy(bv);
	double x;
	if (in->t == JV_INT)
		x = (double)in->i;
	else if (in->t == JV_BOOL)
		x = in->b;
	else if (in->t == JV_FLOAT)
		x = in->f;
	else if (in->t == JV_STR && py_float(r, in, &x))
		;
	else if (in->t == JV_STR)
		jx_fail(r, MOE_EINVAL, "could not convert string to float: %.*s",
			(int)(in->n > 60 ? 60 : in->n), in->s);
	else
		jx_fail(r, MOE_EINVAL, "float() argument must be a string or a real number, not '%s'",
			jv_type_name(in));
	static const char *const dec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
	static const char *const bin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
	int base = binary ? 1024 : 1000;
	char out[400];
	if (x == 1)
		return jv_str_copy(r, "1 Byte", 6);
	if (x < base) {
		if (isinf(x))
			jx_fail(r, MOE_EINVAL, "cannot convert float infinity to integer");
		/* int(x): truncation, printed exactly (also beyond 2^63) */
		double t = trunc(x);
		snprintf(out, sizeof out, "%.0f Bytes", t == 0 ? 0.0 : t);
		return jv_str_copy(r, out, strlen(out));
	}
	/* unit = base ** (i + 2), compared with x exactly as Python compares a
	 * float with an int: long double holds 1000^9 and 1024^9 exactly. */
	long double unit = (long double)base * base;
	int i = 0;
	for (;; i++) {
		if ((long double)x < unit || i == 7)
			break;
		unit *= base;
	}
	double q = ((double)base * x) / (double)unit;
	if (isnan(q))
		snprintf(out, sizeof out, "nan %s", binary ? bin[i] : dec[i]);
	else
		snprintf(out, sizeof out, "%.1f %s", q, binary ? bin[i] : dec[i]);
	return jv_str_copy(r, out, strlen(out));
}

/* --------------------------------------------------------------- pprint */

/* pprint's saferepr: repr() with dict keys sorted. */
static void safe_repr(jrender *r, moe_sbuf *b, const jv *v);

/* Python's type name, the order _safe_key falls back to for keys that
 * cannot be compared. */
static const char *py_class(const jv *v)
{
	switch (v->t) {
	case JV_NONE: return "NoneType";
	case JV_BOOL: return "bool";
	case JV_INT: return "int";
	case JV_FLOAT: return "float";
	case JV_STR: return "str";
	case JV_LIST: return v->tuple ? "tuple" : "list";
	case JV_DICT: return "dict";
	default: return "object";
	}
}

static bool is_num(const jv *v)
{
	return v->t == JV_BOOL || v->t == JV_INT || v->t == JV_FLOAT;
}

static int key_cmp(jrender *r, const jv *x, const jv *y)
{
	if ((is_num(x) && is_num(y)) || (x->t == JV_STR && y->t == JV_STR))
		return jv_compare(r, x, y);
	return strcmp(py_class(x), py_class(y));
}

/* The dict's item indexes in pprint's order (sorted by key). */
static size_t *sorted_keys(jrender *r, const jdict *d)
{
	size_t *ix = jx_alloc(r, (d->n + 1) * sizeof *ix);
	for (size_t i = 0; i < d->n; i++) {
		size_t j = i;
		while (j > 0 && key_cmp(r, &d->k[ix[j - 1]], &d->k[i]) > 0) {
			ix[j] = ix[j - 1];
			j--;
		}
		ix[j] = i;
	}
	return ix;
}

static void safe_repr(jrender *r, moe_sbuf *b, const jv *v)
{
	if (v->t == JV_LIST) {
		adds(r, b, v->tuple ? "(" : "[");
		for (size_t i = 0; i < v->l->n; i++) {
			if (i)
				adds(r, b, ", ");
			safe_repr(r, b, &v->l->v[i]);
		}
		adds(r, b, v->tuple ? (v->l->n == 1 ? ",)" : ")") : "]");
	} else if (v->t == JV_DICT && !v->d->ns) {
		size_t *ix = sorted_keys(r, v->d);
		adds(r, b, "{");
		for (size_t i = 0; i < v->d->n; i++) {
			if (i)
				adds(r, b, ", ");
			safe_repr(r, b, &v->d->k[ix[i]]);
			adds(r, b, ": ");
			safe_repr(r, b, &v->d->v[ix[i]]);
		}
		adds(r, b, "}");
	} else {
		jv_repr_to(r, b, v);
	}
}

static jv repr_of(jrender *r, const jv *v)
{
	moe_sbuf *b = jx_tmp_open(r);
	safe_repr(r, b, v);
	return jx_tmp_close(r, b);
}

enum { PP_WIDTH = 80 };

static void pp_format(jrender *r, moe_sbuf *b, const jv *v, size_t indent, size_t allowance,
		      int level);

/* PrettyPrinter._format_items */
static void pp_items(jrender *r, moe_sbuf *b, const jlist *l, size_t indent, size_t allowance,
		     int level)
{
	indent += 1;
	for (size_t i = 0; i < l->n; i++) {
		bool last = i + 1 == l->n;
		if (i) {
			adds(r, b, ",\n");
			spaces(r, b, indent);
		}
		pp_format(r, b, &l->v[i], indent, last ? allowance : 1, level);
	}
}

/* PrettyPrinter._pprint_str: the string cut into repr()s of its lines,
 * long lines cut after runs of whitespace, one per output line. */
static void pp_str(jrender *r, moe_sbuf *b, const jv *v, size_t indent, size_t allowance,
		   int level)
{
	if (!v->n) {
		adds(r, b, "''");
		return;
	}
	jlist *lines = jx_splitlines(r, v, true).l;
	jlist *chunks = jv_list_new(r, 4).l;
	if (level == 1) {
		indent += 1;
		allowance += 1;
	}
	long max_width1 = (long)PP_WIDTH - (long)indent, max_width = max_width1;
	jv rep = {0};
	for (size_t i = 0; i < lines->n; i++) {
		jv line = lines->v[i];
		rep = repr_of(r, &line);
		if (i + 1 == lines->n)
			max_width1 -= (long)allowance;
		if ((long)cplen(rep.s, rep.n) <= max_width1) {
			jlist_push(r, chunks, rep);
			continue;
		}
		/* re.findall(r'\S*\s*', line), the final empty match dropped */
		long max_width2 = max_width;
		size_t cur_b = 0, cur_e = 0; /* current = line[cur_b:cur_e] */
		size_t p = 0;
		while (p < line.n) {
			size_t st = p;
			uint32_t cp;
			while (p < line.n && (ju_next_cp(line.s, line.n, p, &cp), !ju_isspace(cp)))
				p += ju_next_cp(line.s, line.n, p, &cp);
			while (p < line.n && (ju_next_cp(line.s, line.n, p, &cp), ju_isspace(cp)))
				p += ju_next_cp(line.s, line.n, p, &cp);
			bool last_part = p >= line.n;
			if (last_part && i + 1 == lines->n)
				max_width2 -= (long)allowance;
			jv cand = jv_strn(line.s + cur_b, p - cur_b);
			jv cr = repr_of(r, &cand);
			if ((long)cplen(cr.s, cr.n) > max_width2) {
				if (cur_e > cur_b) {
					jv cur = jv_strn(line.s + cur_b, cur_e - cur_b);
					jlist_push(r, chunks, repr_of(r, &cur));
				}
				cur_b = st;
			}
			cur_e = p;
		}
		if (cur_e > cur_b) {
			jv cur = jv_strn(line.s + cur_b, cur_e - cur_b);
			jlist_push(r, chunks, repr_of(r, &cur));
		}
	}
	if (chunks->n == 1) {
		/* Python writes `rep`, the last line's repr */
		jx_add(r, b, rep.s, rep.n);
		return;
	}
	if (level == 1)
		adds(r, b, "(");
	for (size_t i = 0; i < chunks->n; i++) {
		if (i) {
			adds(r, b, "\n");
			spaces(r, b, indent);
		}
		jx_add(r, b, chunks->v[i].s, chunks->v[i].n);
	}
	if (level == 1)
		adds(r, b, ")");
}

/* PrettyPrinter._format */
static void pp_format(jrender *r, moe_sbuf *b, const jv *v, size_t indent, size_t allowance,
		      int level)
{
	if (level > 500)
		jx_fail(r, MOE_ERANGE, "recursion limit reached (pprint nesting over 500 levels)");
	jv rep = repr_of(r, v);
	long max_width = (long)PP_WIDTH - (long)indent - (long)allowance;
	if ((long)cplen(rep.s, rep.n) <= max_width ||
	    !(v->t == JV_STR || v->t == JV_LIST || (v->t == JV_DICT && !v->d->ns))) {
		jx_add(r, b, rep.s, rep.n);
		return;
	}
	level++;
	if (v->t == JV_STR) {
		pp_str(r, b, v, indent, allowance, level);
	} else if (v->t == JV_LIST && !v->tuple) {
		adds(r, b, "[");
		pp_items(r, b, v->l, indent, allowance + 1, level);
		adds(r, b, "]");
	} else if (v->t == JV_LIST) {
		const char *endchar = v->l->n == 1 ? ",)" : ")";
		adds(r, b, "(");
		pp_items(r, b, v->l, indent, allowance + strlen(endchar), level);
		adds(r, b, endchar);
	} else {
		/* _pprint_dict / _format_dict_items */
		const jdict *d = v->d;
		size_t *ix = sorted_keys(r, d);
		size_t in2 = indent + 1;
		adds(r, b, "{");
		for (size_t i = 0; i < d->n; i++) {
			bool last = i + 1 == d->n;
			jv kr = repr_of(r, &d->k[ix[i]]);
			jx_add(r, b, kr.s, kr.n);
			adds(r, b, ": ");
			pp_format(r, b, &d->v[ix[i]], in2 + cplen(kr.s, kr.n) + 2,
				  last ? allowance + 1 : 1, level);
			if (!last) {
				adds(r, b, ",\n");
				spaces(r, b, in2);
			}
		}
		adds(r, b, "}");
	}
}

static jv pprint(jrender *r, const jv *in)
{
	moe_sbuf *b = jx_tmp_open(r);
	pp_format(r, b, in, 0, 0, 0);
	return jx_tmp_close(r, b);
}

/* ------------------------------------------------------------- wordwrap */

typedef struct chunk {
	const char *s;
	size_t n;   /* bytes */
	size_t len; /* code points */
} chunk;

/* textwrap.TextWrapper._split: chunks of one paragraph. */
static chunk *split_chunks(jrender *r, const char *s, size_t n, rematch *wordsep,
			   size_t *count)
{
	size_t cap = 16, k = 0;
	chunk *c = jx_alloc(r, cap * sizeof *c);
	size_t pos = 0;
	while (pos < n) {
		size_t mb, me;
		bool found;
		if (wordsep) {
			found = re_find(r, wordsep, s, n, pos, &mb, &me);
		} else {
			/* wordsep_simple_re: runs of textwrap's whitespace */
			mb = pos;
			while (mb < n && !strchr("\t\n\v\f\r ", s[mb]))
				mb++;
			me = mb;
			while (me < n && strchr("\t\n\v\f\r ", s[me]))
				me++;
			found = me > mb;
		}
		if (!found)
			mb = me = n;
		for (int part = 0; part < 2; part++) {
			size_t pb = part ? mb : pos, pe = part ? me : mb;
			if (pe == pb)
				continue;
			if (k == cap) {
				chunk *nc = jx_alloc(r, 2 * cap * sizeof *nc);
				memcpy(nc, c, cap * sizeof *c);
				c = nc;
				cap *= 2;
			}
			c[k++] = (chunk){s + pb, pe - pb, cplen(s + pb, pe - pb)};
		}
		pos = me;
	}
	*count = k;
	return c;
}

/* textwrap.wrap(s, width, expand_tabs=False, replace_whitespace=False,
 * break_long_words, break_on_hyphens): the lines, joined by `sep`. */
static void wrap_para(jrender *r, moe_sbuf *b, const char *s, size_t n, size_t width,
		      bool break_long, bool hyphens, rematch *wordsep, const jv *sep, bool *first)
{
	size_t nc;
	chunk *c = split_chunks(r, s, n, wordsep, &nc);
	size_t next = 0; /* chunks[next:] remain (Python's reversed list) */
	bool any_line = false;
	chunk *line = jx_alloc(r, (nc + 1) * sizeof *line);
	while (next < nc) {
		size_t nl = 0, cur_len = 0;
		if (any_line && all_space(c[next].s, c[next].n))
			next++;
		while (next < nc && cur_len + c[next].len <= width) {
			cur_len += c[next].len;
			line[nl++] = c[next++];
		}
		if (next < nc && c[next].len > width) {
			/* _handle_long_word */
			size_t space_left = width < 1 ? 1 : width - cur_len;
			if (break_long) {
				chunk *ch = &c[next];
				size_t end = space_left;
				if (hyphens && ch->len > space_left) {
					/* chunk.rfind('-', 0, space_left) */
					long hy = -1;
					size_t off = 0;
					for (size_t i = 0; i < space_left && off < ch->n; i++) {
						uint32_t cp;
						size_t l = ju_next_cp(ch->s, ch->n, off, &cp);
						if (cp == '-')
							hy = (long)i;
						off += l;
					}
					bool nonhy = false;
					for (long i = 0; i < hy && !nonhy; i++)
						nonhy = ch->s[ju_off(ch->s, ch->n, (size_t)i)] != '-';
					if (hy > 0 && nonhy)
						end = (size_t)hy + 1;
				}
				size_t eb = ju_off(ch->s, ch->n, end);
				line[nl++] = (chunk){ch->s, eb, end};
				*ch = (chunk){ch->s + eb, ch->n - eb, ch->len - end};
			} else if (!nl) {
				line[nl++] = c[next++];
			}
			cur_len = 0;
			for (size_t i = 0; i < nl; i++)
				cur_len += line[i].len;
		}
		if (nl && all_space(line[nl - 1].s, line[nl - 1].n))
			nl--;
		if (nl) {
			if (!*first)
				jx_add(r, b, sep->s, sep->n);
			*first = false;
			for (size_t i = 0; i < nl; i++)
				jx_add(r, b, line[i].s, line[i].n);
			any_line = true;
		}
	}
}

static jv wordwrap(jrender *r, const jv *in, const fargs *a)
{
	if (in->t != JV_STR)
		jx_fail(r, MOE_EINVAL, "wordwrap: expected a string, not %s", jv_type_name(in));
	jv *w = jx_arg(r, a, 0, "width"), *bl = jx_arg(r, a, 1, "break_long_words");
	jv *ws = jx_arg(r, a, 2, "wrapstring"), *bh = jx_arg(r, a, 3, "break_on_hyphens");
	int64_t width = w ? jx_want_int(r, w, "width") : 79;
	bool break_long = bl ? jv_truthy(bl) : true;
	bool hyphens = bh ? jv_truthy(bh) : true;
	/* _split tests `break_on_hyphens is True`; _handle_long_word its truth */
	bool hyphens_true = bh ? bh->t == JV_BOOL && bh->b : true;
	jv sep = jv_strn("\n", 1);
	if (ws && ws->t != JV_NONE) {
		if (ws->t != JV_STR)
			jx_fail(r, MOE_EINVAL, "wordwrap: wrapstring must be a string, not %s",
				jv_type_name(ws));
		sep = *ws;
	}
	/* Paragraphs (str.splitlines) wrapped one by one: each paragraph's
	 * lines, then the paragraphs, joined by wrapstring. */
	jlist *paras = jx_splitlines(r, in, false).l;
	rematch wordsep = {0}; /* one match context for the whole text */
	if (hyphens_true && paras->n)
		wordsep = re_get(r, RE_WORDSEP);
	moe_sbuf *b = jx_tmp_open(r);
	for (size_t i = 0; i < paras->n; i++) {
		if (width <= 0) /* textwrap checks it per paragraph */
			jx_fail(r, MOE_EINVAL, "invalid width %lld (must be > 0)", (long long)width);
		if (i)
			jx_add(r, b, sep.s, sep.n);
		bool first = true;
		wrap_para(r, b, paras->v[i].s, paras->v[i].n, (size_t)width, break_long, hyphens,
			  hyphens_true ? &wordsep : NULL, &sep, &first);
	}
	return jx_tmp_close(r, b);
}

/* --------------------------------------------------------------- urlize */

static bool starts(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	return n >= k && memcmp(s, p, k) == 0;
}

static bool ends(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* str.count(sub), non-overlapping */
static size_t count_sub(const char *s, size_t n, const char *sub)
{
	size_t k = strlen(sub), c = 0;
	for (size_t i = 0; i + k <= n;) {
		if (memcmp(s + i, sub, k) == 0) {
			c++;
			i += k;
		} else {
			i++;
		}
	}
	return c;
}

/* x[:limit] + "..." when longer than limit code points (Python slicing,
 * so a negative limit counts from the end). */
static void trim_url(jrender *r, moe_sbuf *b, const char *s, size_t n, const jv *limit)
{
	if (!limit || limit->t == JV_NONE) {
		jx_add(r, b, s, n);
		return;
	}
	int64_t lim = jx_want_int(r, limit, "trim_url_limit");
	int64_t len = (int64_t)cplen(s, n);
	if (len <= lim) {
		jx_add(r, b, s, n);
		return;
	}
	int64_t end = lim < 0 ? len + lim : lim;
	if (end < 0)
		end = 0;
	jx_add(r, b, s, ju_off(s, n, (size_t)end));
	adds(r, b, "...");
}

static jv escaped(jrender *r, const jv *v)
{
	if (v->t == JV_STR && v->safe)
		return *v;
	jv s = jv_to_str(r, v);
	return jx_html_escape(r, &s);
}

/* One whitespace-free word of urlize's text (already HTML-escaped). */
typedef struct url_ctx {
	rematch http, email;
	const jv *limit;
	const char *rel_attr, *target_attr;
	jlist *schemes;
} url_ctx;

static void urlize_word(jrender *r, moe_sbuf *b, const char *w, size_t n, url_ctx *u)
{
	/* head: ^([(<]|&lt;)+ */
	size_t hb = 0;
	for (;;) {
		if (hb < n && (w[hb] == '(' || w[hb] == '<'))
			hb++;
		else if (starts(w + hb, n - hb, "&lt;"))
			hb += 4;
		else
			break;
	}
	const char *mid = w + hb;
	size_t mn = n - hb;
	/* tail: ([)>.,\n]|&gt;)+$ — the longest such suffix */
	size_t te = mn;
	for (;;) {
		if (te > 0 && strchr(")>.,\n", mid[te - 1]) && mid[te - 1])
			te--;
		else if (ends(mid, te, "&gt;"))
			te -= 4;
		else
			break;
	}
	char *m = jx_alloc(r, mn + 1);
	memcpy(m, mid, mn);
	size_t ml = te, tb = te; /* middle = m[0:ml], tail = mid[tb:mn] */
	/* balance parentheses by moving closers from the tail back */
	static const char *const pairs[3][2] = {{"(", ")"}, {"<", ">"}, {"&lt;", "&gt;"}};
	for (int p = 0; p < 3; p++) {
		size_t sc = count_sub(m, ml, pairs[p][0]);
		if (sc <= count_sub(m, ml, pairs[p][1]))
			continue;
		size_t tc = count_sub(mid + tb, mn - tb, pairs[p][1]);
		size_t times = sc < tc ? sc : tc, el = strlen(pairs[p][1]);
		for (size_t t = 0; t < times; t++) {
			const char *f = NULL;
			for (size_t i = tb; i + el <= mn && !f; i++)
				if (memcmp(mid + i, pairs[p][1], el) == 0)
					f = mid + i;
			size_t upto = (size_t)(f - mid) + el;
			memcpy(m + ml, mid + tb, upto - tb);
			ml += upto - tb;
			tb = upto;
		}
	}
	jx_add(r, b, w, hb);
	if (re_matches(r, &u->http, m, ml)) {
		bool has_scheme = starts(m, ml, "https://") || starts(m, ml, "http://");
		adds(r, b, has_scheme ? "<a href=\"" : "<a href=\"https://");
		jx_add(r, b, m, ml);
		adds(r, b, "\"");
		adds(r, b, u->rel_attr);
		adds(r, b, u->target_attr);
		adds(r, b, ">");
		trim_url(r, b, m, ml, u->limit);
		adds(r, b, "</a>");
	} else if (starts(m, ml, "mailto:") && re_matches(r, &u->email, m + 7, ml - 7)) {
		adds(r, b, "<a href=\"");
		jx_add(r, b, m, ml);
		adds(r, b, "\">");
		jx_add(r, b, m + 7, ml - 7);
		adds(r, b, "</a>");
	} else if (memchr(m, '@', ml) && !starts(m, ml, "www.") && !memchr(m, ':', ml) &&
		   re_matches(r, &u->email, m, ml)) {
		adds(r, b, "<a href=\"mailto:");
		jx_add(r, b, m, ml);
		adds(r, b, "\">");
		jx_add(r, b, m, ml);
		adds(r, b, "</a>");
	} else {
		/* extra schemes: each test sees the middle as rewritten so far */
		moe_sbuf *cur = jx_tmp_open(r);
		jx_add(r, cur, m, ml);
		for (size_t i = 0; u->schemes && i < u->schemes->n; i++) {
			const jv *sch = &u->schemes->v[i];
			if ((cur->len == sch->n && memcmp(cur->p, sch->s, sch->n) == 0) ||
			    !starts(cur->p, cur->len, jx_strndup(r, sch->s, sch->n)))
				continue;
			jv old = jv_str_copy(r, cur->p, cur->len);
			cur->len = 0;
			adds(r, cur, "<a href=\"");
			jx_add(r, cur, old.s, old.n);
			adds(r, cur, "\"");
			adds(r, cur, u->rel_attr);
			adds(r, cur, u->target_attr);
			adds(r, cur, ">");
			jx_add(r, cur, old.s, old.n);
			adds(r, cur, "</a>");
		}
		jv done = jx_tmp_close(r, cur);
		jx_add(r, b, done.s, done.n);
	}
	jx_add(r, b, mid + tb, mn - tb);
}

static int cmp_str(const void *x, const void *y)
{
	const jv *a = x, *b = y;
	size_t n = a->n < b->n ? a->n : b->n;
	int c = memcmp(a->s, b->s, n);
	return c ? c : (a->n > b->n) - (a->n < b->n);
}

static jv urlize(jrender *r, const jv *in, const fargs *a)
{
	jv *limit = jx_arg(r, a, 0, "trim_url_limit"), *nofollow = jx_arg(r, a, 1, "nofollow");
	jv *target = jx_arg(r, a, 2, "target"), *rel = jx_arg(r, a, 3, "rel");
	jv *extra = jx_arg(r, a, 4, "extra_schemes");
	/* rel: the given words, nofollow, and the default policy's
	 * "noopener", sorted and unique */
	jlist *parts = jv_list_new(r, 4).l;
	if (rel && rel->t != JV_NONE && jv_truthy(rel)) {
		jv rs = jv_to_str(r, rel);
		jv_split_words(r, parts, &rs);
	}
	if (nofollow && jv_truthy(nofollow))
		jlist_push(r, parts, jv_strn("nofollow", 8));
	jlist_push(r, parts, jv_strn("noopener", 8));
	qsort(parts->v, parts->n, sizeof *parts->v, cmp_str);
	moe_sbuf *rb = jx_tmp_open(r);
	for (size_t i = 0; i < parts->n; i++) {
		if (i && cmp_str(&parts->v[i], &parts->v[i - 1]) == 0)
			continue;
		if (rb->len)
			adds(r, rb, " ");
		jx_add(r, rb, parts->v[i].s, parts->v[i].n);
	}
	jv relv = jx_tmp_close(r, rb);
	jv rel_e = jx_html_escape(r, &relv);
	char *rel_attr = jx_alloc(r, rel_e.n + 8);
	snprintf(rel_attr, rel_e.n + 8, " rel=\"%.*s\"", (int)rel_e.n, rel_e.s);
	char *target_attr = "";
	if (target && target->t != JV_NONE && jv_truthy(target)) {
		jv te = escaped(r, target);
		target_attr = jx_alloc(r, te.n + 11);
		snprintf(target_attr, te.n + 11, " target=\"%.*s\"", (int)te.n, te.s);
	}
	jlist *schemes = NULL;
	rematch scheme_re = re_get(r, RE_SCHEME);
	if (extra && extra->t != JV_NONE) {
		schemes = jv_iter(r, extra);
		for (size_t i = 0; i < schemes->n; i++) {
			const jv *s = &schemes->v[i];
			if (s->t != JV_STR)
				jx_fail(r, MOE_EINVAL, "urlize: extra_schemes must be strings");
			if (!re_matches(r, &scheme_re, s->s, s->n)) {
				moe_sbuf *e = jx_tmp_open(r);
				jv_repr_to(r, e, s);
				jv rs = jx_tmp_close(r, e);
				jx_fail(r, MOE_EINVAL, "%.*s is not a valid URI scheme prefix.",
					(int)rs.n, rs.s);
			}
		}
	}
	jv text = escaped(r, in);
	url_ctx u = {re_get(r, RE_HTTP), re_get(r, RE_EMAIL), limit, rel_attr, target_attr,
		     schemes};
	/* re.split(r"(\s+)", text): words and the whitespace runs between */
	moe_sbuf *b = jx_tmp_open(r);
	size_t i = 0;
	while (i < text.n) {
		size_t st = i, l;
		uint32_t cp;
		while (i < text.n && (l = ju_next_cp(text.s, text.n, i, &cp), !ju_isspace(cp)))
			i += l;
		urlize_word(r, b, text.s + st, i - st, &u);
		st = i;
		while (i < text.n && (l = ju_next_cp(text.s, text.n, i, &cp), ju_isspace(cp)))
			i += l;
		jx_add(r, b, text.s + st, i - st);
	}
	return jx_tmp_close(r, b);
}

/* ---------------------------------------------------------------- entry */

bool jx_filter_fmt(jrender *r, const char *name, jv in, const fargs *a, jv *out)
{
	if (strcmp(name, "filesizeformat") == 0)
		*out = filesizeformat(r, &in, a);
	else if (strcmp(name, "pprint") == 0)
		*out = pprint(r, &in);
	else if (strcmp(name, "wordwrap") == 0)
		*out = wordwrap(r, &in, a);
	else if (strcmp(name, "urlize") == 0)
		*out = urlize(r, &in, a);
	else
		return false;
	return true;
}
