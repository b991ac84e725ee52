/* jinja_lib.c — what chat templates call: Jinja2's filters and tests,
 * Python's string/dict/list methods (read-only, as in jinja2's
 * ImmutableSandboxedEnvironment), the globals (range, namespace, dict,
 * cycler, joiner, and transformers' raise_exception and strftime_now), and
 * the exact spellings of Python's str(), repr() and json.dumps() — a chat
 * template's output is compared byte for byte with Python's.
 *
 * Unicode case mapping and character classes come from utf8proc.
 */
#include <config.h>

#include "jinja_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <utf8proc.h>

/* Python's str.isspace(). */
bool ju_isspace(uint32_t c)
{
	return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t ju_next_cp(const char *s, size_t n, size_t i, uint32_t *cp)
{
	size_t l = moe_utf8_valid_len((const unsigned char *)s + i, n - i, cp);
	if (!l) {
		*cp = (unsigned char)s[i];
		l = 1;
	}
	return l;
}

void ju_add_cp(jrender *r, moe_sbuf *b, uint32_t cp)
{
	char o[4];
	size_t n;
	if (cp < 0x80) {
		o[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		o[0] = (char)(0xC0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		o[0] = (char)(0xE0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		o[0] = (char)(0xF0 | cp >> 18);
		o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	jx_add(r, b, o, n);
}

static void adds(jrender *r, moe_sbuf *b, const char *s)
{
	jx_add(r, b, s, strlen(s));
}

/* A scratch buffer that is freed if an error unwinds. */
moe_sbuf *jx_tmp_open(jrender *r)
{
	if (r->n_bufs >= sizeof r->bufs / sizeof r->bufs[0])
		jx_fail(r, MOE_ERANGE, "recursion limit reached");
	r->bufs[r->n_bufs] = (moe_sbuf){0};
	return &r->bufs[r->n_bufs++];
}

jv jx_tmp_close(jrender *r, moe_sbuf *b)
{
	jv s = jv_str_copy(r, b->p ? b->p : "", b->len);
	free(b->p);
	r->n_bufs--;
	return s;
}

/* ------------------------------------------------------- str / repr / json */

/* Python's repr() of a float (shortest round-trip digits; fixed notation
 * for exponents -4..15, else d.ddde+XX). */
static void float_repr(double f, char *out, size_t cap, bool json)
{
	if (isnan(f)) {
		snprintf(out, cap, json ? "NaN" : "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, cap, "%s%s", f < 0 ? "-" : "", json ? "Infinity" : "inf");
		return;
	}
	char tmp[40];
	int p;
	for (p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	/* tmp: [-]d[.ddd]e[+-]XX */
	char digits[24];
	size_t nd = 0;
	const char *q = tmp;
	bool neg = *q == '-';
	if (neg)
		q++;
	for (; *q && *q != 'e'; q++)
		if (*q != '.')
			digits[nd++] = *q;
	int ex = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	size_t o = 0;
	if (neg)
		out[o++] = '-';
	if (ex >= -4 && ex < 16) {
		if (ex < 0) {
			out[o++] = '0';
			out[o++] = '.';
			for (int k = 0; k < -ex - 1; k++)
				out[o++] = '0';
			memcpy(out + o, digits, nd);
			o += nd;
		} else {
			for (int k = 0; k <= ex; k++)
				out[o++] = (size_t)k < nd ? digits[k] : '0';
			out[o++] = '.';
			if (nd > (size_t)ex + 1) {
				memcpy(out + o, digits + ex + 1, nd - (size_t)ex - 1);
				o += nd - (size_t)ex - 1;
			} else {
				out[o++] = '0';
			}
		}
		out[o] = '\0';
	} else {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, nd - 1);
			o += nd - 1;
		}
		snprintf(out + o, cap - o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
	}
}

/* Python's str.isprintable() for one code point. */
static bool py_printable(uint32_t cp)
{
	if (cp == ' ')
		return true;
	if (cp < 0x20 || cp == 0x7F)
		return false;
	if (cp < 0x7F)
		return true;
	switch (utf8proc_category((utf8proc_int32_t)cp)) {
	case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
	case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
	case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
		return false;
	default:
		return true;
	}
}

static void str_repr(jrender *r, moe_sbuf *b, const char *s, size_t n)
{
	bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	jx_add(r, b, &q, 1);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = ju_next_cp(s, n, i, &cp);
		char esc[16];
		if (cp == (uint32_t)q || cp == '\\') {
			esc[0] = '\\';
			esc[1] = (char)cp;
			jx_add(r, b, esc, 2);
		} else if (cp == '\n') {
			adds(r, b, "\\n");
		} else if (cp == '\r') {
			adds(r, b, "\\r");
		} else if (cp == '\t') {
			adds(r, b, "\\t");
		} else if (!py_printable(cp)) {
			snprintf(esc, sizeof esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x"
									 : "\\U%08x", cp);
			adds(r, b, esc);
		} else {
			jx_add(r, b, s + i, l);
		}
		i += l;
	}
	jx_add(r, b, &q, 1);
}

void jv_repr_to(jrender *r, moe_sbuf *b, const jv *v)
{
	if (v->t == JV_STR)
		str_repr(r, b, v->s, v->n);
	else if (v->t == JV_UNDEF)
		adds(r, b, "Undefined");
	else
		jv_str_to(r, b, v);
}

void jv_str_to(jrender *r, moe_sbuf *b, const jv *v)
{
	char buf[64];
	switch (v->t) {
	case JV_UNDEF: return;
	case JV_NONE: adds(r, b, "None"); return;
	case JV_BOOL: adds(r, b, v->b ? "True" : "False"); return;
	case JV_INT:
		snprintf(buf, sizeof buf, "%" PRId64, v->i);
		adds(r, b, buf);
		return;
	case JV_FLOAT:
		float_repr(v->f, buf, sizeof buf, false);
		adds(r, b, buf);
		return;
	case JV_STR: jx_add(r, b, v->s, v->n); return;
	case JV_LIST:
		adds(r, b, v->tuple ? "(" : "[");
		for (size_t i = 0; i < v->l->n; i++) {
			if (i)
				adds(r, b, ", ");
			jv_repr_to(r, b, &v->l->v[i]);
		}
		adds(r, b, v->tuple ? (v->l->n == 1 ? ",)" : ")") : "]");
		return;
	case JV_DICT:
		if (v->d->ns)
			adds(r, b, "<Namespace ");
		adds(r, b, "{");
		for (size_t i = 0; i < v->d->n; i++) {
			if (i)
				adds(r, b, ", ");
			jv_repr_to(r, b, &v->d->k[i]);
			adds(r, b, ": ");
			jv_repr_to(r, b, &v->d->v[i]);
		}
		adds(r, b, v->d->ns ? "}>" : "}");
		return;
	case JV_FUNC:
		snprintf(buf, sizeof buf, "<function %.40s>", v->fn->name ? v->fn->name : "");
		adds(r, b, buf);
		return;
	case JV_LOOP:
		snprintf(buf, sizeof buf, "<LoopContext %zu/%zu>", v->loop->index0 + 1,
			 v->loop->items->n);
		adds(r, b, buf);
		return;
	}
}

jv jv_to_str(jrender *r, const jv *v)
{
	if (v->t == JV_STR)
		return *v;
	if (v->t == JV_UNDEF)
		return jv_strn("", 0);
	moe_sbuf *b = jx_tmp_open(r);
	jv_str_to(r, b, v);
	return jx_tmp_close(r, b);
}

static void json_str(jrender *r, moe_sbuf *b, const char *s, size_t n, bool ascii)
{
	adds(r, b, "\"");
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = ju_next_cp(s, n, i, &cp);
		char esc[16];
		switch (cp) {
		case '"': adds(r, b, "\\\""); break;
		case '\\': adds(r, b, "\\\\"); break;
		case '\n': adds(r, b, "\\n"); break;
		case '\r': adds(r, b, "\\r"); break;
		case '\t': adds(r, b, "\\t"); break;
		case '\b': adds(r, b, "\\b"); break;
		case '\f': adds(r, b, "\\f"); break;
		default:
			if (cp < 0x20 || (ascii && cp >= 0x7F)) {
				if (cp >= 0x10000) {
					uint32_t v = cp - 0x10000;
					snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
						 0xDC00 + (v & 0x3FF));
				} else {
					snprintf(esc, sizeof esc, "\\u%04x", cp);
				}
				adds(r, b, esc);
			} else {
				jx_add(r, b, s + i, l);
			}
		}
		i += l;
	}
	adds(r, b, "\"");
}

typedef struct json_fmt {
	const char *indent; /* NULL: one line */
	const char *item_sep, *key_sep;
	bool sort_keys, ascii;
} json_fmt;

static void json_newline(jrender *r, moe_sbuf *b, const json_fmt *f, int level)
{
	adds(r, b, "\n");
	for (int k = 0; k < level; k++)
		adds(r, b, f->indent);
}

static int cmp_index_keys(jrender *r, const jdict *d, size_t a, size_t b)
{
	return jv_compare(r, &d->k[a], &d->k[b]);
}

static void json_value(jrender *r, moe_sbuf *b, const jv *v, const json_fmt *f, int level)
{
	char buf[64];
	if (level > 200)
		jx_fail(r, MOE_ERANGE, "tojson: nested too deeply");
	switch (v->t) {
	case JV_NONE: adds(r, b, "null"); return;
	case JV_BOOL: adds(r, b, v->b ? "true" : "false"); return;
	case JV_INT:
		snprintf(buf, sizeof buf, "%" PRId64, v->i);
		adds(r, b, buf);
		return;
	case JV_FLOAT:
		float_repr(v->f, buf, sizeof buf, true);
		adds(r, b, buf);
		return;
	case JV_STR: json_str(r, b, v->s, v->n, f->ascii); return;
	case JV_LIST:
		if (!v->l->n) {
			adds(r, b, "[]");
			return;
		}
		adds(r, b, "[");
		for (size_t i = 0; i < v->l->n; i++) {
			if (i)
				adds(r, b, f->item_sep);
			if (f->indent)
				json_newline(r, b, f, level + 1);
			json_value(r, b, &v->l->v[i], f, level + 1);
		}
		if (f->indent)
			json_newline(r, b, f, level);
		adds(r, b, "]");
		return;
	case JV_DICT: {
		if (v->d->ns)
			break;
		const jdict *d = v->d;
		if (!d->n) {
			adds(r, b, "{}");
			return;
		}
		size_t *order = jx_alloc(r, d->n * sizeof *order);
		for (size_t i = 0; i < d->n; i++)
			order[i] = i;
		if (f->sort_keys) /* insertion sort: stable, dicts are small */
			for (size_t i = 1; i < d->n; i++)
				for (size_t j = i; j > 0 && cmp_index_keys(r, d, order[j - 1], order[j]) > 0;
				     j--) {
					size_t t = order[j];
					order[j] = order[j - 1];
					order[j - 1] = t;
				}
		adds(r, b, "{");
		for (size_t i = 0; i < d->n; i++) {
			const jv *k = &d->k[order[i]];
			if (i)
				adds(r, b, f->item_sep);
			if (f->indent)
				json_newline(r, b, f, level + 1);
			if (k->t == JV_STR) {
				json_str(r, b, k->s, k->n, f->ascii);
			} else if (k->t == JV_NONE || k->t == JV_BOOL || k->t == JV_INT ||
				   k->t == JV_FLOAT) {
				moe_sbuf *t = jx_tmp_open(r);
				json_value(r, t, k, f, level + 1);
				jv ks = jx_tmp_close(r, t);
				json_str(r, b, ks.s, ks.n, f->ascii);
			} else {
				jx_fail(r, MOE_EINVAL, "tojson: keys must be str, int, float, bool or "
					"None, not %s", jv_type_name(k));
			}
			adds(r, b, f->key_sep);
			json_value(r, b, &d->v[order[i]], f, level + 1);
		}
		if (f->indent)
			json_newline(r, b, f, level);
		adds(r, b, "}");
		return;
	}
	default:
		break;
	}
	jx_fail(r, MOE_EINVAL, "tojson: Object of type %s is not JSON serializable",
		jv_type_name(v));
}

void jv_json_to(jrender *r, moe_sbuf *b, const jv *v, int indent, bool sort_keys, int level)
{
	char ind[64];
	json_fmt f = {NULL, ", ", ": ", sort_keys, false};
	if (indent >= 0) {
		int k = indent < 63 ? indent : 63;
		memset(ind, ' ', (size_t)k);
		ind[k] = '\0';
		f.indent = ind;
		f.item_sep = ",";
	}
	json_value(r, b, v, &f, level);
}

/* ------------------------------------------------------------- arguments */

jv *jx_arg(jrender *r, const fargs *a, size_t pos, const char *name)
{
	size_t p = 0;
	jv *found = NULL;
	for (size_t i = 0; i < a->n; i++) {
		if (a->kw && a->kw[i]) {
			if (name && strcmp(a->kw[i], name) == 0)
				found = &a->v[i];
		} else if (p++ == pos) {
			if (found)
				jx_fail(r, MOE_EINVAL, "%s() got multiple values for '%s'", a->fname,
					name);
			found = &a->v[i];
		}
	}
	return found;
}

static size_t n_positional(const fargs *a)
{
	size_t k = 0;
	for (size_t i = 0; i < a->n; i++)
		k += !(a->kw && a->kw[i]);
	return k;
}

static const char *want_str(jrender *r, const jv *v, const char *what, size_t *n)
{
	if (v->t != JV_STR)
		jx_fail(r, MOE_EINVAL, "%s must be a string, not %s", what, jv_type_name(v));
	*n = v->n;
	return v->s;
}

int64_t jx_want_int(jrender *r, const jv *v, const char *what)
{
	if (v->t == JV_INT)
		return v->i;
	if (v->t == JV_BOOL)
		return v->b;
	jx_fail(r, MOE_EINVAL, "%s must be an integer, not %s", what, jv_type_name(v));
}

static bool opt_bool(const jv *v, bool def)
{
	return v ? jv_truthy(v) : def;
}

/* ------------------------------------------------------------ string ops */

typedef enum { CASE_LOWER, CASE_UPPER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP } case_op;

static jv change_case(jrender *r, const jv *s, case_op op)
{
	moe_sbuf *b = jx_tmp_open(r);
	bool prev_cased = false;
	size_t k = 0;
	for (size_t i = 0; i < s->n; k++) {
		uint32_t cp;
		size_t l = ju_next_cp(s->s, s->n, i, &cp);
		utf8proc_int32_t c = (utf8proc_int32_t)cp, o = c;
		switch (op) {
		case CASE_LOWER: o = utf8proc_tolower(c); break;
		case CASE_UPPER: o = utf8proc_toupper(c); break;
		case CASE_CAPITALIZE: o = k == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
		case CASE_TITLE: o = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c); break;
		case CASE_SWAP:
			o = utf8proc_islower(c) ? utf8proc_toupper(c) : utf8proc_isupper(c) ?
								      utf8proc_tolower(c) : c;
			break;
		}
		utf8proc_category_t cat = utf8proc_category(c);
		prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
			     cat == UTF8PROC_CATEGORY_LT;
		ju_add_cp(r, b, (uint32_t)o);
		i += l;
	}
	return jx_tmp_close(r, b);
}

/* Jinja's title filter: words start after spaces, -, (, {, [ and <. */
static jv jinja_title(jrender *r, const jv *s)
{
	moe_sbuf *b = jx_tmp_open(r);
	bool start = true;
	for (size_t i = 0; i < s->n;) {
		uint32_t cp;
		size_t l = ju_next_cp(s->s, s->n, i, &cp);
		bool sep = ju_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' ||
			   cp == '<';
		utf8proc_int32_t c = (utf8proc_int32_t)cp;
		ju_add_cp(r, b, (uint32_t)(sep ? c : start ? utf8proc_toupper(c) : utf8proc_tolower(c)));
		start = sep;
		i += l;
	}
	return jx_tmp_close(r, b);
}

static bool in_chars(uint32_t cp, const jv *chars)
{
	if (!chars)
		return ju_isspace(cp);
	for (size_t i = 0; i < chars->n;) {
		uint32_t c;
		i += ju_next_cp(chars->s, chars->n, i, &c);
		if (c == cp)
			return true;
	}
	return false;
}

static jv strip(const jv *s, const jv *chars, bool left, bool right)
{
	size_t a = 0, b = s->n;
	while (left && a < b) {
		uint32_t cp;
		size_t l = ju_next_cp(s->s, b, a, &cp);
		if (!in_chars(cp, chars))
			break;
		a += l;
	}
	while (right && b > a) {
		size_t k = b - 1;
		while (k > a && ((unsigned char)s->s[k] & 0xC0) == 0x80)
			k--;
		uint32_t cp;
		ju_next_cp(s->s, b, k, &cp);
		if (!in_chars(cp, chars))
			break;
		b = k;
	}
	return jv_strn(s->s + a, b - a);
}

static const char *find_sub(const char *h, size_t hn, const char *n, size_t nn)
{
	if (!nn)
		return h;
	return nn <= hn ? memmem(h, hn, n, nn) : NULL;
}

static const char *rfind_sub(const char *h, size_t hn, const char *n, size_t nn)
{
	if (nn > hn)
		return NULL;
	for (size_t i = hn - nn + 1; i-- > 0;)
		if (memcmp(h + i, n, nn) == 0)
			return h + i;
	return NULL;
}

static jv str_replace(jrender *r, const jv *s, const jv *old, const jv *new, int64_t count)
{
	moe_sbuf *b = jx_tmp_open(r);
	size_t i = 0;
	int64_t done = 0;
	if (!old->n) {
		/* Python inserts `new` before every character and at the end. */
		for (;;) {
			if (count < 0 || done < count) {
				jx_add(r, b, new->s, new->n);
				done++;
			}
			if (i >= s->n)
				break;
			uint32_t cp;
			size_t l = ju_next_cp(s->s, s->n, i, &cp);
			jx_add(r, b, s->s + i, l);
			i += l;
		}
		return jx_tmp_close(r, b);
	}
	while (i < s->n && (count < 0 || done < count)) {
		const char *p = find_sub(s->s + i, s->n - i, old->s, old->n);
		if (!p)
			break;
		jx_add(r, b, s->s + i, (size_t)(p - (s->s + i)));
		jx_add(r, b, new->s, new->n);
		i = (size_t)(p - s->s) + old->n;
		done++;
	}
	jx_add(r, b, s->s + i, s->n - i);
	return jx_tmp_close(r, b);
}

/* Whitespace-separated words of s, appended to out: Python's str.split()
 * without arguments (runs of whitespace, no empty strings).  Also used by
 * the wordwrap and urlize filters. */
void jv_split_words(jrender *r, jlist *out, const jv *s)
{
	size_t i = 0;
	while (i < s->n) {
		uint32_t cp;
		size_t l = ju_next_cp(s->s, s->n, i, &cp);
		if (ju_isspace(cp)) {
			i += l;
			continue;
		}
		size_t st = i;
		while (i < s->n && (l = ju_next_cp(s->s, s->n, i, &cp), !ju_isspace(cp)))
			i += l;
		jlist_push(r, out, jv_strn(s->s + st, i - st));
	}
}

static jv str_split(jrender *r, const jv *s, const jv *sep, int64_t maxsplit, bool from_right)
{
	jv out = jv_list_new(r, 0);
	if (sep && sep->t != JV_NONE) {
		size_t sn;
		const char *ss = want_str(r, sep, "split separator", &sn);
		if (!sn)
			jx_fail(r, MOE_EINVAL, "empty separator");
		if (!from_right) {
			size_t i = 0;
			while (maxsplit < 0 || (int64_t)out.l->n < maxsplit) {
				const char *p = find_sub(s->s + i, s->n - i, ss, sn);
				if (!p)
					break;
				jlist_push(r, out.l, jv_strn(s->s + i, (size_t)(p - s->s) - i));
				i = (size_t)(p - s->s) + sn;
			}
			jlist_push(r, out.l, jv_strn(s->s + i, s->n - i));
			return out;
		}
		/* rsplit: collect from the right, then reverse. */
		size_t end = s->n;
		while (maxsplit < 0 || (int64_t)out.l->n < maxsplit) {
			const char *p = rfind_sub(s->s, end, ss, sn);
			if (!p)
				break;
			size_t at = (size_t)(p - s->s);
			jlist_push(r, out.l, jv_strn(p + sn, end - at - sn));
			end = at;
		}
		jlist_push(r, out.l, jv_strn(s->s, end));
		for (size_t i = 0, j = out.l->n - 1; i < j; i++, j--) {
			jv t = out.l->v[i];
			out.l->v[i] = out.l->v[j];
			out.l->v[j] = t;
		}
		return out;
	}
	/* Runs of whitespace; no empty strings. */
	jlist *words = jv_list_new(r, 0).l;
	jv_split_words(r, words, s);
	if (maxsplit < 0 || (size_t)maxsplit >= words->n) {
		out.l = words;
		return out;
	}
	/* With maxsplit, the remainder keeps its inner whitespace. */
	if (!from_right) {
		for (int64_t k = 0; k < maxsplit; k++)
			jlist_push(r, out.l, words->v[k]);
		jv rest = words->v[maxsplit];
		size_t st = (size_t)(rest.s - s->s);
		jv tail = jv_strn(s->s + st, s->n - st);
		jlist_push(r, out.l, strip(&tail, NULL, false, true));
		return out;
	}
	size_t keep = words->n - (size_t)maxsplit;
	jv last = words->v[keep - 1];
	jv head = jv_strn(s->s, (size_t)(last.s - s->s) + last.n);
	jlist_push(r, out.l, strip(&head, NULL, true, false));
	for (size_t k = keep; k < words->n; k++)
		jlist_push(r, out.l, words->v[k]);
	return out;
}

jv jx_splitlines(jrender *r, const jv *s, bool keepends)
{
	jv out = jv_list_new(r, 0);
	size_t i = 0, st = 0;
	while (i < s->n) {
		uint32_t cp;
		size_t l = ju_next_cp(s->s, s->n, i, &cp);
		bool br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
			  cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
		if (!br) {
			i += l;
			continue;
		}
		size_t end = i;
		i += l;
		if (cp == '\r' && i < s->n && s->s[i] == '\n')
			i++;
		jlist_push(r, out.l, jv_strn(s->s + st, (keepends ? i : end) - st));
		st = i;
	}
	if (st < s->n)
		jlist_push(r, out.l, jv_strn(s->s + st, s->n - st));
	return out;
}

static bool affix(jrender *r, const jv *s, const jv *x, bool end)
{
	if (x->t == JV_LIST) {
		for (size_t i = 0; i < x->l->n; i++)
			if (affix(r, s, &x->l->v[i], end))
				return true;
		return false;
	}
	size_t n;
	const char *p = want_str(r, x, end ? "endswith argument" : "startswith argument", &n);
	if (n > s->n)
		return false;
	return memcmp(end ? s->s + s->n - n : s->s, p, n) == 0;
}

static jv join(jrender *r, jlist *items, const jv *sep)
{
	moe_sbuf *b = jx_tmp_open(r);
	for (size_t i = 0; i < items->n; i++) {
		if (i && sep)
			jx_add(r, b, sep->s, sep->n);
		jv_str_to(r, b, &items->v[i]);
	}
	return jx_tmp_close(r, b);
}

static bool all_chars(const jv *s, int kind)
{
	if (!s->n)
		return false;
	bool cased = false;
	for (size_t i = 0; i < s->n;) {
		uint32_t cp;
		i += ju_next_cp(s->s, s->n, i, &cp);
		utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
		bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
		bool digit = c == UTF8PROC_CATEGORY_ND;
		bool numeric = digit || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
		switch (kind) {
		case 'd': if (!digit) return false; break;
		case 'n': if (!numeric) return false; break;
		case 'a': if (!letter) return false; break;
		case 'A': if (!letter && !numeric) return false; break;
		case 's': if (!ju_isspace(cp)) return false; break;
		case 'u':
			if (c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT)
				return false;
			cased |= c == UTF8PROC_CATEGORY_LU;
			break;
		case 'l':
			if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT)
				return false;
			cased |= c == UTF8PROC_CATEGORY_LL;
			break;
		}
	}
	return (kind == 'u' || kind == 'l') ? cased : true;
}

static jv pad(jrender *r, const jv *s, int64_t width, const jv *fill, int where)
{
	size_t len = ju_len(s->s, s->n);
	if (width <= (int64_t)len)
		return *s;
	if ((uint64_t)width > r->max_output)
		jx_fail(r, MOE_ERANGE, "padding too large");
	const char *f = " ";
	size_t fl = 1;
	if (fill) {
		f = want_str(r, fill, "fill character", &fl);
		if (ju_len(f, fl) != 1)
			jx_fail(r, MOE_EINVAL, "the fill character must be exactly one character");
	}
	size_t total = (size_t)width - len, left;
	if (where < 0)
		left = 0;
	else if (where > 0)
		left = total;
	else /* Python's center: the extra space goes right unless width odd... */
		left = total / 2 + (total & (size_t)width & 1);
	moe_sbuf *b = jx_tmp_open(r);
	for (size_t k = 0; k < left; k++)
		jx_add(r, b, f, fl);
	jx_add(r, b, s->s, s->n);
	for (size_t k = left; k < total; k++)
		jx_add(r, b, f, fl);
	return jx_tmp_close(r, b);
}

/* str.format with {} {0} {name} fields (no format specs). */
/* Digits with a separator every `every` from the right (Python's "," and
 * "_" grouping). */
static void add_grouped(jrender *r, moe_sbuf *b, const char *d, size_t n, char sep,
			size_t every)
{
	for (size_t i = 0; i < n; i++) {
		jx_add(r, b, d + i, 1);
		if (sep && i + 1 < n && (n - i - 1) % every == 0)
			jx_add(r, b, &sep, 1);
	}
}

/* format(v, spec) for the format-spec mini-language of str.format:
 * [[fill]align][sign][#][0][width][,|_][.precision][type], for strings,
 * integers and floats as Python formats them. */
static void format_spec_to(jrender *r, moe_sbuf *out, const jv *v, const char *sp, size_t sn)
{
	if (!sn) {
		jv_str_to(r, out, v);
		return;
	}
	size_t i = 0, fill_n = 1;
	const char *fill = " ";
	char align = 0, sign = '-', type = 0, group = 0;
	bool alt = false, zero = false;
	uint32_t cp;
	size_t l0 = ju_next_cp(sp, sn, 0, &cp);
	if (l0 < sn && strchr("<>=^", sp[l0])) {
		fill = sp;
		fill_n = l0;
		align = sp[l0];
		i = l0 + 1;
	} else if (strchr("<>=^", sp[0])) {
		align = sp[0];
		i = 1;
	}
	if (i < sn && strchr("+- ", sp[i]))
		sign = sp[i++];
	if (i < sn && sp[i] == '#') {
		alt = true;
		i++;
	}
	if (i < sn && sp[i] == '0') {
		zero = true;
		i++;
	}
	int64_t width = 0, prec = -1;
	while (i < sn && isdigit((unsigned char)sp[i]) && width < 100000)
		width = width * 10 + (sp[i++] - '0');
	if (i < sn && (sp[i] == ',' || sp[i] == '_'))
		group = sp[i++];
	if (i < sn && sp[i] == '.') {
		i++;
		prec = 0;
		if (i >= sn || !isdigit((unsigned char)sp[i]))
			jx_fail(r, MOE_EINVAL, "Format specifier missing precision");
		while (i < sn && isdigit((unsigned char)sp[i]) && prec < 100000)
			prec = prec * 10 + (sp[i++] - '0');
	}
	if (i < sn)
		type = sp[i++];
	if (i < sn || width >= 100000 || prec >= 1000)
		jx_fail(r, MOE_EINVAL, "Invalid format specifier '%.*s'", (int)sn, sp);
	if (zero && !align) {
		fill = "0";
		fill_n = 1;
		align = '=';
	}
	moe_sbuf *body = jx_tmp_open(r);
	char sgn[2] = {0}, prefix[3] = {0};
	bool numeric = v->t == JV_INT || v->t == JV_BOOL || v->t == JV_FLOAT;
	if (v->t == JV_STR) {
		if (type && type != 's')
			jx_fail(r, MOE_EINVAL, "Unknown format code '%c' for object of type 'str'",
				type);
		if (sign != '-' || alt || group || align == '=')
			jx_fail(r, MOE_EINVAL, "format: sign, '#', grouping and '=' are not allowed "
				"with strings");
		size_t n = prec >= 0 ? ju_off(v->s, v->n, (size_t)prec) : v->n;
		jx_add(r, body, v->s, n);
		if (!align)
			align = '<';
	} else if (!numeric) {
		jx_fail(r, MOE_EINVAL, "unsupported format string passed to %s.__format__",
			v->t == JV_NONE ? "NoneType" : jv_type_name(v));
	} else if ((v->t == JV_INT || v->t == JV_BOOL) && (!type || strchr("dboxXcn", type))) {
		if (prec >= 0)
			jx_fail(r, MOE_EINVAL, "Precision not allowed in integer format specifier");
		int64_t x = v->t == JV_BOOL ? v->b : v->i;
		uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
		if (x < 0)
			sgn[0] = '-';
		else if (sign != '-')
			sgn[0] = sign;
		char d[80];
		size_t n = 0;
		unsigned base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
		if (type == 'c')
			jx_fail(r, MOE_EUNSUPPORTED, "format: type 'c' is not supported");
		do {
			unsigned dg = (unsigned)(m % base);
			d[n++] = (char)(dg < 10 ? '0' + dg : (type == 'X' ? 'A' : 'a') + dg - 10);
			m /= base;
		} while (m);
		for (size_t k = 0; k < n / 2; k++) {
			char t = d[k];
			d[k] = d[n - 1 - k];
			d[n - 1 - k] = t;
		}
		if (alt && base != 10) {
			prefix[0] = '0';
			prefix[1] = type == 'b' ? 'b' : type == 'o' ? 'o' : type == 'X' ? 'X' : 'x';
		}
		if (group == ',' && base != 10)
			jx_fail(r, MOE_EINVAL, "Cannot specify ',' with '%c'.", type);
		add_grouped(r, body, d, n, group, base == 10 ? 3 : 4);
	} else {
		if (type && !strchr("eEfFgG%", type))
			jx_fail(r, MOE_EINVAL, "Unknown format code '%c' for object of type '%s'", type,
				v->t == JV_FLOAT ? "float" : "int");
		double x = v->t == JV_FLOAT ? v->f : v->t == JV_BOOL ? v->b : (double)v->i;
		if (signbit(x) && !isnan(x))
			sgn[0] = '-';
		else if (sign != '-')
			sgn[0] = sign;
		x = fabs(x);
		char num[400];
		if (type == '%')
			x *= 100;
		if (!type && prec < 0) {
			float_repr(x, num, sizeof num, false);
		} else {
			char f[16];
			char t = !type ? 'g' : type == '%' ? 'f' : type;
			snprintf(f, sizeof f, "%%%s.%d%c", alt ? "#" : "",
				 (int)(prec < 0 ? 6 : prec), t);
			snprintf(num, sizeof num, f, x);
			if (!type && !strpbrk(num, ".eEni"))
				strcat(num, ".0");
			if (isinf(x) || isnan(x)) {
				bool up = type && isupper((unsigned char)type);
				snprintf(num, sizeof num, "%s", isnan(x) ? (up ? "NAN" : "nan")
									 : (up ? "INF" : "inf"));
			}
		}
		size_t nl = strlen(num), ip = strspn(num, "0123456789");
		if (ip && ip <= nl && group && isdigit((unsigned char)num[0]))
			add_grouped(r, body, num, ip, group, 3);
		else
			ip = 0;
		jx_add(r, body, num + ip, nl - ip);
		if (type == '%')
			adds(r, body, "%");
	}
	if (!align)
		align = '>';
	size_t len = ju_len(body->p ? body->p : "", body->len) + strlen(sgn) + strlen(prefix);
	size_t pad = (size_t)width > len ? (size_t)width - len : 0;
	size_t left = align == '<' || align == '=' ? 0 : align == '^' ? pad / 2 : pad;
	size_t right = align == '<' ? pad : align == '^' ? pad - pad / 2 : 0;
	for (size_t k = 0; k < left; k++)
		jx_add(r, out, fill, fill_n);
	adds(r, out, sgn);
	adds(r, out, prefix);
	if (align == '=')
		for (size_t k = 0; k < pad; k++)
			jx_add(r, out, fill, fill_n);
	jv bs = jx_tmp_close(r, body);
	jx_add(r, out, bs.s, bs.n);
	for (size_t k = 0; k < right; k++)
		jx_add(r, out, fill, fill_n);
}

static jv str_format(jrender *r, const jv *s, const fargs *a)
{
	moe_sbuf *b = jx_tmp_open(r);
	size_t auto_i = 0;
	for (size_t i = 0; i < s->n; i++) {
		char c = s->s[i];
		if ((c == '{' || c == '}') && i + 1 < s->n && s->s[i + 1] == c) {
			jx_add(r, b, &c, 1);
			i++;
			continue;
		}
		if (c == '}')
			jx_fail(r, MOE_EINVAL, "format: single '}' encountered");
		if (c != '{') {
			jx_add(r, b, &c, 1);
			continue;
		}
		const char *end = memchr(s->s + i, '}', s->n - i);
		if (!end)
			jx_fail(r, MOE_EINVAL, "format: single '{' encountered");
		const char *f = s->s + i + 1;
		size_t fl = (size_t)(end - f);
		/* {field!conv:spec} */
		const char *spec = memchr(f, ':', fl), *conv = memchr(f, '!', fl);
		size_t speclen = spec ? (size_t)(end - spec - 1) : 0;
		if (spec)
			fl = (size_t)(spec - f);
		if (conv && conv < f + fl) {
			fl = (size_t)(conv - f);
			if ((size_t)((spec ? spec : end) - conv) != 2 || !strchr("rs", conv[1]))
				jx_fail(r, MOE_EUNSUPPORTED, "format: only the conversions !r and !s "
					"are supported");
		} else {
			conv = NULL;
		}
		if (memchr(f, '{', fl) || (spec && memchr(spec, '{', speclen)))
			jx_fail(r, MOE_EUNSUPPORTED, "format: nested fields are not supported");
		for (size_t k = 0; k < fl; k++)
			if (f[k] == '.' || f[k] == '[')
				jx_fail(r, MOE_EUNSUPPORTED, "format: attribute and item fields are not "
					"supported");
		jv *v;
		if (!fl) {
			v = jx_arg(r, a, auto_i++, NULL);
		} else if (isdigit((unsigned char)f[0])) {
			v = jx_arg(r, a, (size_t)atoi(f), NULL);
		} else {
			char *name = jx_strndup(r, f, fl);
			v = jx_arg(r, a, SIZE_MAX, name);
		}
		if (!v)
			jx_fail(r, MOE_EINVAL, "format: missing argument for '{%.*s}'", (int)fl, f);
		jv cv = *v;
		if (conv) {
			moe_sbuf *t = jx_tmp_open(r);
			if (conv[1] == 'r')
				jv_repr_to(r, t, v);
			else
				jv_str_to(r, t, v);
			cv = jx_tmp_close(r, t);
		}
		format_spec_to(r, b, &cv, spec ? spec + 1 : "", speclen);
		i = (size_t)(end - s->s);
	}
	return jx_tmp_close(r, b);
}

static jv str_method(jrender *r, const jv *s, const char *m, const fargs *a)
{
#define M(x) (strcmp(m, x) == 0)
	jv *a0 = jx_arg(r, a, 0, NULL), *a1 = jx_arg(r, a, 1, NULL);
	if (M("strip") || M("lstrip") || M("rstrip")) {
		if (a0 && a0->t == JV_NONE)
			a0 = NULL;
		size_t n;
		if (a0)
			want_str(r, a0, "strip characters", &n);
		return strip(s, a0, m[0] != 'r', m[0] != 'l');
	}
	if (M("split") || M("rsplit")) {
		jv *sep = jx_arg(r, a, 0, "sep"), *mx = jx_arg(r, a, 1, "maxsplit");
		return str_split(r, s, sep, mx ? jx_want_int(r, mx, "maxsplit") : -1, m[0] == 'r');
	}
	if (M("splitlines"))
		return jx_splitlines(r, s, opt_bool(jx_arg(r, a, 0, "keepends"), false));
	if (M("startswith") || M("endswith")) {
		if (!a0)
			jx_fail(r, MOE_EINVAL, "%s() takes an argument", m);
		return jv_bool(affix(r, s, a0, m[0] == 'e'));
	}
	if (M("replace")) {
		if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR)
			jx_fail(r, MOE_EINVAL, "replace() takes two strings");
		jv *c = jx_arg(r, a, 2, "count");
		return str_replace(r, s, a0, a1, c ? jx_want_int(r, c, "count") : -1);
	}
	if (M("lower") || M("casefold"))
		return change_case(r, s, CASE_LOWER);
	if (M("upper"))
		return change_case(r, s, CASE_UPPER);
	if (M("title"))
		return change_case(r, s, CASE_TITLE);
	if (M("capitalize"))
		return change_case(r, s, CASE_CAPITALIZE);
	if (M("swapcase"))
		return change_case(r, s, CASE_SWAP);
	if (M("find") || M("rfind") || M("index") || M("rindex") || M("count")) {
		size_t nn;
		if (!a0)
			jx_fail(r, MOE_EINVAL, "%s() takes an argument", m);
		const char *nd = want_str(r, a0, "substring", &nn);
		if (M("count")) {
			if (!nn)
				return jv_int((int64_t)ju_len(s->s, s->n) + 1);
			int64_t k = 0;
			for (size_t i = 0; i < s->n;) {
				const char *p = find_sub(s->s + i, s->n - i, nd, nn);
				if (!p)
					break;
				k++;
				i = (size_t)(p - s->s) + nn;
			}
			return jv_int(k);
		}
		const char *p = m[0] == 'r' ? rfind_sub(s->s, s->n, nd, nn)
					    : find_sub(s->s, s->n, nd, nn);
		if (!p && (M("index") || M("rindex")))
			jx_fail(r, MOE_EINVAL, "substring not found");
		return jv_int(p ? (int64_t)ju_len(s->s, (size_t)(p - s->s)) : -1);
	}
	if (M("join")) {
		if (!a0)
			jx_fail(r, MOE_EINVAL, "join() takes an argument");
		jlist *l = jv_iter(r, a0);
		for (size_t i = 0; i < l->n; i++)
			if (l->v[i].t != JV_STR)
				jx_fail(r, MOE_EINVAL, "sequence item %zu: expected str instance, %s "
					"found", i, jv_type_name(&l->v[i]));
		return join(r, l, s);
	}
	if (M("isdigit") || M("isdecimal"))
		return jv_bool(all_chars(s, 'd'));
	if (M("isnumeric"))
		return jv_bool(all_chars(s, 'n'));
	if (M("isalpha"))
		return jv_bool(all_chars(s, 'a'));
	if (M("isalnum"))
		return jv_bool(all_chars(s, 'A'));
	if (M("isspace"))
		return jv_bool(all_chars(s, 's'));
	if (M("isupper"))
		return jv_bool(all_chars(s, 'u'));
	if (M("islower"))
		return jv_bool(all_chars(s, 'l'));
	if (M("istitle")) {
		jv t = change_case(r, s, CASE_TITLE);
		return jv_bool(jv_equal(&t, s) && (all_chars(s, 'u') || !all_chars(s, 'l')) &&
			       s->n);
	}
	if (M("removeprefix") || M("removesuffix")) {
		size_t n;
		if (!a0)
			jx_fail(r, MOE_EINVAL, "%s() takes an argument", m);
		const char *p = want_str(r, a0, "affix", &n);
		if (n > s->n)
			return *s;
		if (m[6] == 'p' && memcmp(s->s, p, n) == 0)
			return jv_strn(s->s + n, s->n - n);
		if (m[6] == 's' && memcmp(s->s + s->n - n, p, n) == 0)
			return jv_strn(s->s, s->n - n);
		return *s;
	}
	if (M("partition") || M("rpartition")) {
		size_t n;
		if (!a0)
			jx_fail(r, MOE_EINVAL, "%s() takes an argument", m);
		const char *p = want_str(r, a0, "separator", &n);
		if (!n)
			jx_fail(r, MOE_EINVAL, "empty separator");
		const char *at = m[0] == 'r' ? rfind_sub(s->s, s->n, p, n) : find_sub(s->s, s->n, p, n);
		jv t = jv_list_new(r, 3);
		t.tuple = 1;
		if (!at) {
			jlist_push(r, t.l, m[0] == 'r' ? jv_strn("", 0) : *s);
			jlist_push(r, t.l, jv_strn("", 0));
			jlist_push(r, t.l, m[0] == 'r' ? *s : jv_strn("", 0));
			return t;
		}
		size_t k = (size_t)(at - s->s);
		jlist_push(r, t.l, jv_strn(s->s, k));
		jlist_push(r, t.l, jv_strn(at, n));
		jlist_push(r, t.l, jv_strn(at + n, s->n - k - n));
		return t;
	}
	if (M("center") || M("ljust") || M("rjust")) {
		if (!a0)
			jx_fail(r, MOE_EINVAL, "%s() takes a width", m);
		return pad(r, s, jx_want_int(r, a0, "width"), a1, M("ljust") ? -1 : M("rjust") ? 1 : 0);
	}
	if (M("zfill")) {
		if (!a0)
			jx_fail(r, MOE_EINVAL, "zfill() takes a width");
		jv zero = jv_strn("0", 1);
		if (s->n && (s->s[0] == '-' || s->s[0] == '+')) {
			jv rest = jv_strn(s->s + 1, s->n - 1);
			jv p = pad(r, &rest, jx_want_int(r, a0, "width") - 1, &zero, 1);
			char *o = jx_alloc(r, p.n + 2);
			o[0] = s->s[0];
			memcpy(o + 1, p.s, p.n);
			return jv_strn(o, p.n + 1);
		}
		return pad(r, s, jx_want_int(r, a0, "width"), &zero, 1);
	}
	if (M("format"))
		return str_format(r, s, a);
	if (M("expandtabs"))
		return str_replace(r, s, &(jv){.t = JV_STR, .s = "\t", .n = 1},
				   &(jv){.t = JV_STR, .s = "        ", .n = 8}, -1);
#undef M
	jx_fail(r, MOE_EINVAL, "'str' object has no method '%s'", m);
}

static jv dict_items(jrender *r, const jdict *d)
{
	jv l = jv_list_new(r, d->n);
	for (size_t i = 0; i < d->n; i++) {
		jv t = jv_list_new(r, 2);
		t.tuple = 1;
		jlist_push(r, t.l, d->k[i]);
		jlist_push(r, t.l, d->v[i]);
		jlist_push(r, l.l, t);
	}
	return l;
}

static jv call_method(jrender *r, jfunc *f, const fargs *a)
{
	const jv *self = &f->self;
	const char *m = f->name;
	if (self->t == JV_STR)
		return str_method(r, self, m, a);
	if (self->t == JV_DICT) {
		if (strcmp(m, "items") == 0)
			return dict_items(r, self->d);
		if (strcmp(m, "keys") == 0 || strcmp(m, "values") == 0) {
			jv l = jv_list_new(r, self->d->n);
			for (size_t i = 0; i < self->d->n; i++)
				jlist_push(r, l.l, m[0] == 'k' ? self->d->k[i] : self->d->v[i]);
			return l;
		}
		if (strcmp(m, "get") == 0) {
			jv *k = jx_arg(r, a, 0, NULL), *d = jx_arg(r, a, 1, NULL);
			if (!k)
				jx_fail(r, MOE_EINVAL, "get() takes a key");
			jv *p = jdict_find(self->d, *k);
			return p ? *p : d ? *d : jv_none();
		}
		if (strcmp(m, "copy") == 0) {
			jv c = jv_dict_new(r, self->d->n);
			for (size_t i = 0; i < self->d->n; i++)
				jdict_set(r, c.d, self->d->k[i], self->d->v[i]);
			return c;
		}
	}
	if (self->t == JV_LIST) {
		if (strcmp(m, "index") == 0 || strcmp(m, "count") == 0) {
			jv *x = jx_arg(r, a, 0, NULL);
			if (!x)
				jx_fail(r, MOE_EINVAL, "%s() takes an argument", m);
			int64_t k = 0;
			for (size_t i = 0; i < self->l->n; i++)
				if (jv_equal(&self->l->v[i], x)) {
					if (m[0] == 'i')
						return jv_int((int64_t)i);
					k++;
				}
			if (m[0] == 'i')
				jx_fail(r, MOE_EINVAL, "value is not in list");
			return jv_int(k);
		}
		if (strcmp(m, "copy") == 0) {
			jv c = jv_list_new(r, self->l->n);
			for (size_t i = 0; i < self->l->n; i++)
				jlist_push(r, c.l, self->l->v[i]);
			return c;
		}
	}
	/* append, pop, update, ...: the immutable sandbox refuses them. */
	jx_fail(r, MOE_EINVAL, "access to '%s.%s' is not allowed: the template may not modify "
		"values (use namespace())", jv_type_name(self), m);
}

/* --------------------------------------------------------------- globals */

static const char globals[] = "range\0namespace\0dict\0raise_exception\0strftime_now\0"
			      "cycler\0joiner\0";

bool jx_is_global(const char *name, size_t n)
{
	for (const char *p = globals; *p; p += strlen(p) + 1)
		if (strlen(p) == n && memcmp(p, name, n) == 0)
			return true;
	return false;
}

static jv kwargs_dict(jrender *r, const fargs *a, bool ns)
{
	jv d = jv_dict_new(r, a->n);
	d.d->ns = ns;
	for (size_t i = 0; i < a->n; i++) {
		if (a->kw && a->kw[i]) {
			jdict_set(r, d.d, jv_strn(a->kw[i], strlen(a->kw[i])), a->v[i]);
		} else if (a->v[i].t == JV_DICT && !a->v[i].d->ns) {
			for (size_t k = 0; k < a->v[i].d->n; k++)
				jdict_set(r, d.d, a->v[i].d->k[k], a->v[i].d->v[k]);
		} else {
			jx_fail(r, MOE_EINVAL, "%s() takes keyword arguments or a dict",
				ns ? "namespace" : "dict");
		}
	}
	return d;
}

jv jx_call_builtin(jrender *r, jfunc *f, jv *args, const char **kw, size_t n)
{
	fargs a = {args, kw, n, f->name};
	if (f->kind == FN_METHOD)
		return call_method(r, f, &a);
	if (f->kind == FN_LOOP_CYCLE) {
		if (strcmp(f->name, "cycle") == 0) {
			if (!n)
				jx_fail(r, MOE_EINVAL, "no items for cycling given");
			return args[f->self.loop->index0 % n];
		}
		/* loop.changed(*args): true on the first call and whenever the
		 * arguments differ from the last call's (compared as tuples). */
		jloop *lp = f->self.loop;
		jv now = jv_list_new(r, n);
		now.tuple = 1;
		for (size_t i = 0; i < n; i++)
			jlist_push(r, now.l, args[i]);
		if (lp->changed_seen && jv_equal(&lp->changed_last, &now))
			return jv_bool(false);
		lp->changed_last = now;
		lp->changed_seen = true;
		return jv_bool(true);
	}
	if (f->kind == FN_CYCLER_NEXT || f->kind == FN_JOINER) {
		jv *pos = jdict_get(f->state, "pos", 3);
		if (f->kind == FN_JOINER) {
			if (pos->i++ == 0)
				return jv_strn("", 0);
			return *jdict_get(f->state, "sep", 3);
		}
		jv *items = jdict_get(f->state, "items", 5);
		jv v = items->l->v[pos->i % (int64_t)items->l->n];
		pos->i++;
		return v;
	}
	const char *m = f->name;
	if (strcmp(m, "range") == 0) {
		size_t np = n_positional(&a);
		if (np < 1 || np > 3 || np != n)
			jx_fail(r, MOE_EINVAL, "range() takes 1 to 3 integers");
		int64_t start = 0, stop, st = 1;
		if (np == 1) {
			stop = jx_want_int(r, &args[0], "range()");
		} else {
			start = jx_want_int(r, &args[0], "range()");
			stop = jx_want_int(r, &args[1], "range()");
			if (np == 3)
				st = jx_want_int(r, &args[2], "range()");
		}
		if (st == 0)
			jx_fail(r, MOE_EINVAL, "range() arg 3 must not be zero");
		double count = st > 0 ? ((double)stop - (double)start) / (double)st
				      : ((double)start - (double)stop) / (double)-st;
		if (count > (double)r->max_steps)
			jx_fail(r, MOE_ERANGE, "range() too large (over %" PRIu64 " items)",
				r->max_steps);
		jv l = jv_list_new(r, count > 0 ? (size_t)ceil(count) : 0);
		for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st)
			jlist_push(r, l.l, jv_int(i));
		return l;
	}
	if (strcmp(m, "namespace") == 0)
		return kwargs_dict(r, &a, true);
	if (strcmp(m, "dict") == 0)
		return kwargs_dict(r, &a, false);
	if (strcmp(m, "raise_exception") == 0) {
		jv msg = n ? jv_to_str(r, &args[0]) : jv_strn("", 0);
		jx_fail(r, MOE_EINVAL, "raised: %.*s", (int)(msg.n < 400 ? msg.n : 400), msg.s);
	}
	if (strcmp(m, "strftime_now") == 0) {
		size_t fl;
		if (!n)
			jx_fail(r, MOE_EINVAL, "strftime_now() takes a format");
		const char *fmt = want_str(r, &args[0], "strftime_now format", &fl);
		char *z = jx_strndup(r, fmt, fl);
		time_t t = (time_t)r->now;
		struct tm tm;
		char buf[512];
		if (!localtime_r(&t, &tm))
			jx_fail(r, MOE_EINVAL, "strftime_now: bad time");
		size_t k = strftime(buf, sizeof buf, z, &tm);
		if (!k && fl)
			jx_fail(r, MOE_EINVAL, "strftime_now: format too long");
		return jv_str_copy(r, buf, k);
	}
	if (strcmp(m, "cycler") == 0 || strcmp(m, "joiner") == 0) {
		bool cyc = m[0] == 'c';
		jv fn = {0};
		fn.t = JV_FUNC;
		fn.fn = jx_alloc(r, sizeof *fn.fn);
		fn.fn->kind = cyc ? FN_CYCLER_NEXT : FN_JOINER;
		fn.fn->name = cyc ? "next" : "joiner";
		fn.fn->state = jv_dict_new(r, 3).d;
		jdict_set(r, fn.fn->state, jv_strn("pos", 3), jv_int(0));
		if (cyc) {
			if (!n)
				jx_fail(r, MOE_EINVAL, "cycler() takes items");
			jv items = jv_list_new(r, n);
			for (size_t i = 0; i < n; i++)
				jlist_push(r, items.l, args[i]);
			jdict_set(r, fn.fn->state, jv_strn("items", 5), items);
			/* cycler.next() is what templates call. */
			jv obj = jv_dict_new(r, 1);
			jdict_set(r, obj.d, jv_strn("next", 4), fn);
			return obj;
		}
		jdict_set(r, fn.fn->state, jv_strn("sep", 3),
			  n ? jv_to_str(r, &args[0]) : jv_strn(", ", 2));
		return fn;
	}
	jx_fail(r, MOE_EINVAL, "'%s' is not callable", m);
}

/* ----------------------------------------------------------------- tests */

static const char tests[] = "defined\0undefined\0none\0boolean\0false\0true\0integer\0float\0"
			    "number\0string\0mapping\0iterable\0sequence\0callable\0sameas\0eq\0"
			    "equalto\0==\0ne\0!=\0lt\0<\0lessthan\0le\0<=\0gt\0>\0greaterthan\0"
			    "ge\0>=\0in\0odd\0even\0divisibleby\0lower\0upper\0escaped\0filter\0"
			    "test\0";

bool jx_has_test(const char *name)
{
	for (const char *p = tests; *p; p += strlen(p) + 1)
		if (strcmp(p, name) == 0)
			return true;
	return false;
}

bool jx_test(jrender *r, const char *t, const jv *v, jv *args, size_t n)
{
#define T(x) (strcmp(t, x) == 0)
	const jv *a0 = n ? &args[0] : NULL;
	if (T("defined"))
		return v->t != JV_UNDEF;
	if (T("undefined"))
		return v->t == JV_UNDEF;
	if (T("none"))
		return v->t == JV_NONE;
	if (T("boolean"))
		return v->t == JV_BOOL;
	if (T("false"))
		return v->t == JV_BOOL && !v->b;
	if (T("true"))
		return v->t == JV_BOOL && v->b;
	if (T("integer"))
		return v->t == JV_INT;
	if (T("float"))
		return v->t == JV_FLOAT;
	if (T("number"))
		return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
	if (T("string"))
		return v->t == JV_STR;
	if (T("mapping"))
		return v->t == JV_DICT && !v->d->ns;
	if (T("iterable"))
		return v->t == JV_STR || v->t == JV_LIST || (v->t == JV_DICT && !v->d->ns) ||
		       v->t == JV_UNDEF;
	if (T("sequence"))
		return v->t == JV_STR || v->t == JV_LIST || (v->t == JV_DICT && !v->d->ns);
	if (T("callable"))
		return v->t == JV_FUNC;
	if (T("escaped"))
		return v->t == JV_STR && v->safe;
	if (T("filter") || T("test")) {
		if (v->t != JV_STR)
			return false;
		char *name = jx_strndup(r, v->s, v->n);
		return T("filter") ? jx_has_filter(name) : jx_has_test(name);
	}
	if (T("lower") || T("upper"))
		return v->t == JV_STR && all_chars(v, t[0] == 'l' ? 'l' : 'u');
	if (T("odd") || T("even")) {
		int64_t i = jx_want_int(r, v, t);
		return (i % 2 != 0) == (t[0] == 'o');
	}
	if (T("divisibleby")) {
		if (!a0)
			jx_fail(r, MOE_EINVAL, "divisibleby takes a number");
		int64_t d = jx_want_int(r, a0, "divisibleby"), i = jx_want_int(r, v, "divisibleby");
		if (d == 0)
			jx_fail(r, MOE_EINVAL, "integer division or modulo by zero");
		return i % d == 0;
	}
	if (!a0)
		jx_fail(r, MOE_EINVAL, "test '%s' takes an argument", t);
	if (T("sameas")) {
		if (v->t != a0->t)
			return false;
		if (v->t == JV_NONE || v->t == JV_UNDEF)
			return true;
		if (v->t == JV_BOOL)
			return v->b == a0->b;
		if (v->t == JV_LIST)
			return v->l == a0->l;
		if (v->t == JV_DICT)
			return v->d == a0->d;
		return jv_equal(v, a0);
	}
	if (T("eq") || T("equalto") || T("=="))
		return jv_equal(v, a0);
	if (T("ne") || T("!="))
		return !jv_equal(v, a0);
	if (T("in")) {
		jv l = *a0;
		if (l.t == JV_STR) {
			if (v->t != JV_STR)
				jx_fail(r, MOE_EINVAL, "'in <string>' requires string as left operand");
			return !v->n || (v->n <= l.n && memmem(l.s, l.n, v->s, v->n));
		}
		jlist *items = jv_iter(r, &l);
		for (size_t i = 0; i < items->n; i++)
			if (jv_equal(&items->v[i], v))
				return true;
		return false;
	}
	int c = jv_compare(r, v, a0);
	if (T("lt") || T("<") || T("lessthan"))
		return c < 0;
	if (T("le") || T("<="))
		return c <= 0;
	if (T("gt") || T(">") || T("greaterthan"))
		return c > 0;
	if (T("ge") || T(">="))
		return c >= 0;
#undef T
	jx_fail(r, MOE_EINVAL, "no test named '%s'", t);
}

static bool test_value(jrender *r, const char *t, const jv *v, jv *args, size_t n)
{
	if (!jx_has_test(t))
		jx_fail(r, MOE_EINVAL, "no test named '%s'", t);
	return jx_test(r, t, v, args, n);
}

/* ---------------------------------------------------------------- filters */

static const char filters[] =
	"abs\0attr\0capitalize\0count\0d\0default\0dictsort\0e\0escape\0first\0float\0"
	"forceescape\0format\0indent\0int\0items\0join\0last\0length\0list\0lower\0map\0max\0"
	"min\0reject\0rejectattr\0replace\0reverse\0round\0safe\0select\0selectattr\0sort\0"
	"string\0sum\0title\0tojson\0trim\0unique\0upper\0wordcount\0center\0truncate\0"
	"batch\0striptags\0slice\0urlencode\0xmlattr\0groupby\0wordwrap\0pprint\0filesizeformat\0"
	"urlize\0";

bool jx_has_filter(const char *name)
{
	for (const char *p = filters; *p; p += strlen(p) + 1)
		if (strcmp(p, name) == 0)
			return true;
	return false;
}

/* An attribute path "a.b.0" of v, as Jinja's make_attrgetter. */
static jv attr_path(jrender *r, jv v, const jv *path)
{
	if (path->t == JV_INT)
		return jv_getitem(r, &v, path);
	size_t n;
	const char *p = want_str(r, path, "attribute", &n);
	size_t i = 0;
	while (i <= n) {
		const char *dot = memchr(p + i, '.', n - i);
		size_t e = dot ? (size_t)(dot - p) : n;
		bool digits = e > i;
		for (size_t k = i; k < e; k++)
			digits &= isdigit((unsigned char)p[k]) != 0;
		if (digits) {
			jv key = jv_int(strtoll(jx_strndup(r, p + i, e - i), NULL, 10));
			v = jv_getitem(r, &v, &key);
		} else {
			jv key = jv_strn(p + i, e - i);
			v = jv_getitem(r, &v, &key);
		}
		if (!dot)
			break;
		i = e + 1;
	}
	return v;
}

/* Sort key comparison with Jinja's case_sensitive=False default. */
static int sort_cmp(jrender *r, jv a, jv b, bool case_sensitive)
{
	if (!case_sensitive) {
		if (a.t == JV_STR)
			a = change_case(r, &a, CASE_LOWER);
		if (b.t == JV_STR)
			b = change_case(r, &b, CASE_LOWER);
	}
	return jv_compare(r, &a, &b);
}

/* Stable merge sort of items by keys. */
static void sort_by(jrender *r, jv *items, jv *keys, size_t n, bool cs, bool reverse)
{
	if (n < 2)
		return;
	jv *ti = jx_alloc(r, n * sizeof *ti), *tk = jx_alloc(r, n * sizeof *tk);
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi) {
				int c = sort_cmp(r, keys[j], keys[i], cs);
				bool take_right = reverse ? c > 0 : c < 0;
				if (take_right) {
					ti[k] = items[j];
					tk[k++] = keys[j++];
				} else {
					ti[k] = items[i];
					tk[k++] = keys[i++];
				}
			}
			while (i < mid) {
				ti[k] = items[i];
				tk[k++] = keys[i++];
			}
			while (j < hi) {
				ti[k] = items[j];
				tk[k++] = keys[j++];
			}
		}
		memcpy(items, ti, n * sizeof *ti);
		memcpy(keys, tk, n * sizeof *tk);
	}
}

jv jx_html_escape(jrender *r, const jv *s)
{
	moe_sbuf *b = jx_tmp_open(r);
	for (size_t i = 0; i < s->n; i++) {
		switch (s->s[i]) {
		case '&': adds(r, b, "&amp;"); break;
		case '<': adds(r, b, "&lt;"); break;
		case '>': adds(r, b, "&gt;"); break;
		case '"': adds(r, b, "&#34;"); break;
		case '\'': adds(r, b, "&#39;"); break;
		default: jx_add(r, b, s->s + i, 1);
		}
	}
	jv out = jx_tmp_close(r, b);
	out.safe = 1;
	return out;
}

static jv need_str(jrender *r, const jv *v)
{
	return jv_to_str(r, v);
}

static size_t len_of(jrender *r, const jv *v)
{
	switch (v->t) {
	case JV_STR: return ju_len(v->s, v->n);
	case JV_LIST: return v->l->n;
	case JV_DICT: if (!v->d->ns) return v->d->n; break;
	case JV_UNDEF: return 0;
	default: break;
	}
	jx_fail(r, MOE_EINVAL, "object of type '%s' has no len()", jv_type_name(v));
}

/* Python's html.unescape for the references striptags meets: numeric ones
 * and the five of XML plus nbsp.  Other named references (the HTML5 table
 * has 2,231) are refused rather than left wrong. */
static void html_unescape_to(jrender *r, moe_sbuf *b, const char *s, size_t n)
{
	static const struct { const char *name; uint32_t cp; } named[] = {
		{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''},
		{"nbsp;", 0xA0},
	};
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '&') {
			jx_add(r, b, s + i, 1);
			continue;
		}
		size_t j = i + 1;
		if (j < n && s[j] == '#') {
			bool hex = j + 1 < n && (s[j + 1] == 'x' || s[j + 1] == 'X');
			size_t k = j + 1 + hex, d0 = k;
			uint64_t v = 0;
			while (k < n && (hex ? isxdigit((unsigned char)s[k]) : isdigit((unsigned char)s[k]))) {
				if (v <= 0x10FFFF)
					v = v * (hex ? 16 : 10) +
					    (uint64_t)(isdigit((unsigned char)s[k]) ? s[k] - '0'
							: (tolower((unsigned char)s[k]) - 'a' + 10));
				k++;
			}
			if (k == d0) {
				jx_add(r, b, s + i, 1);
				continue;
			}
			if (k < n && s[k] == ';')
				k++;
			if (v >= 0x80 && v <= 0x9F)
				jx_fail(r, MOE_EUNSUPPORTED, "striptags: character reference "
					"'%.*s' (a Windows-1252 code) is not supported", (int)(k - i),
					s + i);
			if (v == 0 || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
				ju_add_cp(r, b, 0xFFFD);
			else if (v == 0x0D)
				adds(r, b, "\r");
			else if (!((v >= 0x1 && v <= 0x8) || v == 0xB || (v >= 0xE && v <= 0x1F) ||
				   v == 0x7F || (v >= 0xFDD0 && v <= 0xFDEF) ||
				   (v & 0xFFFF) == 0xFFFE || (v & 0xFFFF) == 0xFFFF))
				ju_add_cp(r, b, (uint32_t)v);
			i = k - 1;
			continue;
		}
		size_t k = j;
		while (k < n && k - j < 32 && !strchr("\t\n\f <&#;", s[k]))
			k++;
		if (k == j) {
			jx_add(r, b, s + i, 1);
			continue;
		}
		size_t len = k - j + (k < n && s[k] == ';');
		size_t m;
		for (m = 0; m < sizeof named / sizeof named[0]; m++)
			if (strlen(named[m].name) == len && memcmp(named[m].name, s + j, len) == 0)
				break;
		if (m == sizeof named / sizeof named[0])
			jx_fail(r, MOE_EUNSUPPORTED, "striptags: HTML entity '&%.*s' is not supported",
				(int)len, s + j);
		ju_add_cp(r, b, named[m].cp);
		i = j + len - 1;
	}
}

/* Markup(s).striptags(): comments, then tags, removed; whitespace runs to
 * one space; entities unescaped (markupsafe 2.1). */
static jv striptags(jrender *r, const jv *s)
{
	moe_sbuf *c = jx_tmp_open(r);
	for (size_t i = 0; i < s->n;) {
		if (s->n - i >= 4 && memcmp(s->s + i, "<!--", 4) == 0) {
			const char *e = memmem(s->s + i + 4, s->n - i - 4, "-->", 3);
			if (e) {
				i = (size_t)(e - s->s) + 3;
				continue;
			}
		}
		jx_add(r, c, s->s + i, 1);
		i++;
	}
	jv nc = jv_str_copy(r, c->p ? c->p : "", c->len);
	moe_sbuf *t = c;
	t->len = 0;
	for (size_t i = 0; i < nc.n;) {
		if (nc.s[i] == '<') {
			const char *e = memchr(nc.s + i + 1, '>', nc.n - i - 1);
			if (e) {
				i = (size_t)(e - nc.s) + 1;
				continue;
			}
		}
		jx_add(r, t, nc.s + i, 1);
		i++;
	}
	jv nt = jv_str_copy(r, t->p ? t->p : "", t->len);
	t->len = 0;
	/* " ".join(value.split()) */
	bool any = false;
	for (size_t i = 0; i < nt.n;) {
		uint32_t cp;
		size_t l = ju_next_cp(nt.s, nt.n, i, &cp);
		if (ju_isspace(cp)) {
			i += l;
			continue;
		}
		size_t w = i;
		while (w < nt.n) {
			l = ju_next_cp(nt.s, nt.n, w, &cp);
			if (ju_isspace(cp))
				break;
			w += l;
		}
		if (any)
			adds(r, t, " ");
		jx_add(r, t, nt.s + i, w - i);
		any = true;
		i = w;
	}
	jv joined = jv_str_copy(r, t->p ? t->p : "", t->len);
	t->len = 0;
	html_unescape_to(r, t, joined.s, joined.n);
	return jx_tmp_close(r, t);
}

/* jinja2.utils.url_quote: UTF-8 bytes, unreserved characters kept ("/"
 * too unless for a query string, where spaces become "+"). */
static void url_quote_to(jrender *r, moe_sbuf *b, const jv *v, bool for_qs)
{
	jv s = jv_to_str(r, v);
	for (size_t i = 0; i < s.n; i++) {
		unsigned char c = (unsigned char)s.s[i];
		if (isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (c == '/' && !for_qs)) {
			jx_add(r, b, s.s + i, 1);
		} else if (c == ' ' && for_qs) {
			adds(r, b, "+");
		} else {
			char h[4];
			snprintf(h, sizeof h, "%%%02X", c);
			adds(r, b, h);
		}
	}
}

/* select/reject/selectattr/rejectattr */
static jv select_items(jrender *r, jv in, const fargs *a, bool attr, bool keep)
{
	jlist *items = jv_iter(r, &in);
	jv out = jv_list_new(r, items->n);
	jv *path = attr ? jx_arg(r, a, 0, NULL) : NULL;
	if (attr && !path)
		jx_fail(r, MOE_EINVAL, "%s() takes an attribute", a->fname);
	size_t first = attr ? 1 : 0;
	jv *tname = jx_arg(r, a, first, NULL);
	size_t tn;
	const char *test = tname ? want_str(r, tname, "test name", &tn) : NULL;
	char *tz = test ? jx_strndup(r, test, tn) : NULL;
	size_t np = n_positional(a);
	jv *targs = a->v + (np > first + 1 ? first + 1 : np);
	size_t n_targs = np > first + 1 ? np - first - 1 : 0;
	for (size_t i = 0; i < items->n; i++) {
		jv x = attr ? attr_path(r, items->v[i], path) : items->v[i];
		bool t = tz ? test_value(r, tz, &x, targs, n_targs) : jv_truthy(&x);
		if (t == keep)
			jlist_push(r, out.l, items->v[i]);
	}
	return out;
}

jv jx_filter(jrender *r, const char *name, jv in, jv *args, const char **kw, size_t n,
	     scope *sc)
{
	(void)sc;
	fargs a = {args, kw, n, name};
#define F(x) (strcmp(name, x) == 0)
	if (F("default") || F("d")) {
		jv *def = jx_arg(r, &a, 0, "default_value");
		bool boolean = opt_bool(jx_arg(r, &a, 1, "boolean"), false);
		if (in.t == JV_UNDEF || (boolean && !jv_truthy(&in)))
			return def ? *def : jv_strn("", 0);
		return in;
	}
	if (F("length") || F("count"))
		return jv_int((int64_t)len_of(r, &in));
	if (F("safe")) {
		jv s = jv_to_str(r, &in);
		s.safe = 1;
		return s;
	}
	if (F("string"))
		return in.t == JV_STR ? in : jv_to_str(r, &in);
	if (F("tojson")) {
		jv *ind = jx_arg(r, &a, 1, "indent"), *sk = jx_arg(r, &a, 3, "sort_keys");
		jv *asc = jx_arg(r, &a, 0, "ensure_ascii"), *sep = jx_arg(r, &a, 2, "separators");
		char indbuf[64];
		json_fmt f = {NULL, ", ", ": ", opt_bool(sk, false), opt_bool(asc, false)};
		if (ind && ind->t != JV_NONE) {
			if (ind->t == JV_STR) {
				snprintf(indbuf, sizeof indbuf, "%.*s", (int)ind->n, ind->s);
			} else {
				int64_t k = jx_want_int(r, ind, "indent");
				k = k < 0 ? 0 : k > 63 ? 63 : k;
				memset(indbuf, ' ', (size_t)k);
				indbuf[k] = '\0';
			}
			f.indent = indbuf;
			f.item_sep = ",";
		}
		if (sep && sep->t == JV_LIST && sep->l->n == 2 && sep->l->v[0].t == JV_STR &&
		    sep->l->v[1].t == JV_STR) {
			f.item_sep = jx_strndup(r, sep->l->v[0].s, sep->l->v[0].n);
			f.key_sep = jx_strndup(r, sep->l->v[1].s, sep->l->v[1].n);
		}
		moe_sbuf *b = jx_tmp_open(r);
		json_value(r, b, &in, &f, 0);
		return jx_tmp_close(r, b);
	}
	if (F("items")) {
		if (in.t == JV_UNDEF)
			return jv_list_new(r, 0);
		if (in.t != JV_DICT || in.d->ns)
			jx_fail(r, MOE_EINVAL, "items: can only get item pairs from a mapping, not %s",
				jv_type_name(&in));
		return dict_items(r, in.d);
	}
	if (F("list")) {
		jlist *l = jv_iter(r, &in);
		jv out = jv_list_new(r, l->n);
		for (size_t i = 0; i < l->n; i++)
			jlist_push(r, out.l, l->v[i]);
		return out;
	}
	if (F("first") || F("last")) {
		jlist *l = jv_iter(r, &in);
		if (!l->n)
			return jv_undef();
		return F("first") ? l->v[0] : l->v[l->n - 1];
	}
	if (F("join")) {
		jv *sep = jx_arg(r, &a, 0, "d"), *at = jx_arg(r, &a, 1, "attribute");
		jlist *l = jv_iter(r, &in);
		if (at) {
			jlist *m = jv_list_new(r, l->n).l;
			for (size_t i = 0; i < l->n; i++)
				jlist_push(r, m, attr_path(r, l->v[i], at));
			l = m;
		}
		jv s = sep ? need_str(r, sep) : jv_strn("", 0);
		return join(r, l, &s);
	}
	if (F("map")) {
		jlist *l = jv_iter(r, &in);
		jv out = jv_list_new(r, l->n);
		jv *at = jx_arg(r, &a, SIZE_MAX, "attribute");
		if (at) {
			jv *def = jx_arg(r, &a, SIZE_MAX, "default");
			for (size_t i = 0; i < l->n; i++) {
				jv x = attr_path(r, l->v[i], at);
				jlist_push(r, out.l, x.t == JV_UNDEF && def ? *def : x);
			}
			return out;
		}
		jv *fname = jx_arg(r, &a, 0, NULL);
		size_t fl;
		if (!fname)
			jx_fail(r, MOE_EINVAL, "map() takes a filter name or attribute=");
		const char *fn = want_str(r, fname, "filter name", &fl);
		char *fz = jx_strndup(r, fn, fl);
		if (!jx_has_filter(fz))
			jx_fail(r, MOE_EINVAL, "no filter named '%s'", fz);
		size_t skip = 1;
		for (size_t i = 0; i < l->n; i++)
			jlist_push(r, out.l, jx_filter(r, fz, l->v[i], args + skip, kw ? kw + skip : NULL,
						       n - skip, sc));
		return out;
	}
	if (F("select") || F("reject"))
		return select_items(r, in, &a, false, F("select"));
	if (F("selectattr") || F("rejectattr"))
		return select_items(r, in, &a, true, F("selectattr"));
	if (F("unique")) {
		jlist *l = jv_iter(r, &in);
		bool cs = opt_bool(jx_arg(r, &a, 0, "case_sensitive"), false);
		jv *at = jx_arg(r, &a, 1, "attribute");
		jv out = jv_list_new(r, l->n);
		jlist *seen = jv_list_new(r, l->n).l;
		for (size_t i = 0; i < l->n; i++) {
			jv k = at ? attr_path(r, l->v[i], at) : l->v[i];
			if (!cs && k.t == JV_STR)
				k = change_case(r, &k, CASE_LOWER);
			bool dup = false;
			for (size_t j = 0; j < seen->n && !dup; j++)
				dup = jv_equal(&seen->v[j], &k);
			if (!dup) {
				jlist_push(r, seen, k);
				jlist_push(r, out.l, l->v[i]);
			}
		}
		return out;
	}
	if (F("sort") || F("dictsort")) {
		bool dict = F("dictsort");
		jlist *l;
		if (dict) {
			if (in.t != JV_DICT || in.d->ns)
				jx_fail(r, MOE_EINVAL, "dictsort: not a dict");
			l = dict_items(r, in.d).l;
		} else {
			l = jv_iter(r, &in);
		}
		bool cs = opt_bool(jx_arg(r, &a, dict ? 0 : 1, "case_sensitive"), false);
		bool rev = opt_bool(jx_arg(r, &a, dict ? 2 : 0, "reverse"), false);
		jv *at = dict ? NULL : jx_arg(r, &a, 2, "attribute");
		jv *by = dict ? jx_arg(r, &a, 1, "by") : NULL;
		size_t bi = by && by->t == JV_STR && by->n == 5 && memcmp(by->s, "value", 5) == 0;
		jv out = jv_list_new(r, l->n);
		jv *keys = jx_alloc(r, (l->n + 1) * sizeof *keys);
		for (size_t i = 0; i < l->n; i++) {
			jlist_push(r, out.l, l->v[i]);
			keys[i] = dict ? l->v[i].l->v[bi] : at ? attr_path(r, l->v[i], at) : l->v[i];
		}
		sort_by(r, out.l->v, keys, l->n, cs, rev);
		return out;
	}
	if (F("reverse")) {
		if (in.t == JV_STR) {
			jlist *c = jv_iter(r, &in);
			moe_sbuf *b = jx_tmp_open(r);
			for (size_t i = c->n; i-- > 0;)
				jx_add(r, b, c->v[i].s, c->v[i].n);
			return jx_tmp_close(r, b);
		}
		jlist *l = jv_iter(r, &in);
		jv out = jv_list_new(r, l->n);
		for (size_t i = l->n; i-- > 0;)
			jlist_push(r, out.l, l->v[i]);
		return out;
	}
	if (F("sum") || F("max") || F("min")) {
		jlist *l = jv_iter(r, &in);
		jv *at = jx_arg(r, &a, F("sum") ? 0 : 1, "attribute");
		if (F("sum")) {
			jv *start = jx_arg(r, &a, 1, "start");
			jv acc = start ? *start : jv_int(0);
			for (size_t i = 0; i < l->n; i++) {
				jv x = at ? attr_path(r, l->v[i], at) : l->v[i];
				if ((acc.t != JV_INT && acc.t != JV_FLOAT) ||
				    (x.t != JV_INT && x.t != JV_FLOAT && x.t != JV_BOOL))
					jx_fail(r, MOE_EINVAL, "sum: unsupported operand types");
				if (acc.t == JV_INT && x.t != JV_FLOAT)
					acc.i += x.t == JV_BOOL ? x.b : x.i;
				else
					acc = jv_float((acc.t == JV_FLOAT ? acc.f : (double)acc.i) +
						       (x.t == JV_FLOAT ? x.f : x.t == JV_BOOL ? x.b
											    : (double)x.i));
			}
			return acc;
		}
		bool cs = opt_bool(jx_arg(r, &a, 0, "case_sensitive"), false);
		if (!l->n)
			return jv_undef();
		size_t best = 0;
		for (size_t i = 1; i < l->n; i++) {
			jv x = at ? attr_path(r, l->v[i], at) : l->v[i];
			jv y = at ? attr_path(r, l->v[best], at) : l->v[best];
			int c = sort_cmp(r, x, y, cs);
			if (F("max") ? c > 0 : c < 0)
				best = i;
		}
		return l->v[best];
	}
	if (F("abs")) {
		if (in.t == JV_INT)
			return jv_int(in.i < 0 ? -in.i : in.i);
		if (in.t == JV_FLOAT)
			return jv_float(fabs(in.f));
		jx_fail(r, MOE_EINVAL, "bad operand type for abs(): '%s'", jv_type_name(&in));
	}
	if (F("int")) {
		jv *def = jx_arg(r, &a, 0, "default");
		jv fallback = def ? *def : jv_int(0);
		if (in.t == JV_INT)
			return in;
		if (in.t == JV_BOOL)
			return jv_int(in.b);
		if (in.t == JV_FLOAT)
			return isfinite(in.f) ? jv_int((int64_t)in.f) : fallback;
		if (in.t == JV_STR) {
			char *z = jx_strndup(r, in.s, in.n), *end;
			errno = 0;
			long long v = strtoll(z, &end, 10);
			while (*end && ju_isspace((unsigned char)*end))
				end++;
			if (!*end && end != z && !errno)
				return jv_int(v);
			double d = strtod(z, &end);
			while (*end && ju_isspace((unsigned char)*end))
				end++;
			if (!*end && end != z && isfinite(d))
				return jv_int((int64_t)d);
		}
		return fallback;
	}
	if (F("float")) {
		jv *def = jx_arg(r, &a, 0, "default");
		if (in.t == JV_FLOAT)
			return in;
		if (in.t == JV_INT || in.t == JV_BOOL)
			return jv_float(in.t == JV_INT ? (double)in.i : in.b);
		if (in.t == JV_STR) {
			char *z = jx_strndup(r, in.s, in.n), *end;
			double d = strtod(z, &end);
			while (*end && ju_isspace((unsigned char)*end))
				end++;
			if (!*end && end != z)
				return jv_float(d);
		}
		return def ? *def : jv_float(0.0);
	}
	if (F("round")) {
		jv *prec = jx_arg(r, &a, 0, "precision"), *meth = jx_arg(r, &a, 1, "method");
		double x = in.t == JV_FLOAT ? in.f : in.t == JV_INT ? (double)in.i : 0;
		if (in.t != JV_FLOAT && in.t != JV_INT)
			jx_fail(r, MOE_EINVAL, "round: not a number");
		int64_t p = prec ? jx_want_int(r, prec, "precision") : 0;
		double m = pow(10.0, (double)p);
		const char *how = meth && meth->t == JV_STR ? meth->s : "common";
		double y = x * m;
		if (strncmp(how, "ceil", 4) == 0)
			y = ceil(y);
		else if (strncmp(how, "floor", 5) == 0)
			y = floor(y);
		else
			y = nearbyint(y); /* Python's round: half to even */
		return jv_float(y / m);
	}
	if (F("attr")) {
		jv *nm = jx_arg(r, &a, 0, "name");
		size_t l;
		if (!nm)
			jx_fail(r, MOE_EINVAL, "attr() takes a name");
		const char *s = want_str(r, nm, "attribute name", &l);
		return jv_getattr(r, &in, s, l);
	}
	{
		jv out;
		if (jx_filter_fmt(r, name, in, &a, &out))
			return out;
	}
	if (F("groupby")) {
		/* Jinja's do_groupby: sorted by the attribute (case-insensitive
		 * unless asked), consecutive equal keys grouped; each group a
		 * (grouper, list) tuple whose grouper is the first item's own
		 * value. */
		jv *at = jx_arg(r, &a, 0, "attribute"), *def = jx_arg(r, &a, 1, "default");
		bool cs = opt_bool(jx_arg(r, &a, 2, "case_sensitive"), false);
		if (!at)
			jx_fail(r, MOE_EINVAL, "groupby() takes an attribute");
		jlist *l = jv_iter(r, &in);
		jv *items = jx_alloc(r, (l->n + 1) * sizeof *items);
		jv *keys = jx_alloc(r, (l->n + 1) * sizeof *keys);
		for (size_t i = 0; i < l->n; i++) {
			items[i] = l->v[i];
			keys[i] = attr_path(r, l->v[i], at);
			if (keys[i].t == JV_UNDEF && def)
				keys[i] = *def;
		}
		sort_by(r, items, keys, l->n, cs, false);
		jv out = jv_list_new(r, 0);
		for (size_t i = 0; i < l->n;) {
			jv k0 = keys[i];
			if (!cs && k0.t == JV_STR)
				k0 = change_case(r, &k0, CASE_LOWER);
			jv group = jv_list_new(r, 4);
			size_t j = i;
			for (; j < l->n; j++) {
				jv kj = keys[j];
				if (!cs && kj.t == JV_STR)
					kj = change_case(r, &kj, CASE_LOWER);
				if (!jv_equal(&kj, &k0))
					break;
				jlist_push(r, group.l, items[j]);
			}
			jv gt = jv_list_new(r, 2);
			gt.tuple = 2;
			jlist_push(r, gt.l, cs ? k0 : keys[i]);
			jlist_push(r, gt.l, group);
			jlist_push(r, out.l, gt);
			i = j;
		}
		return out;
	}
	if (F("batch")) {
		jv *lc = jx_arg(r, &a, 0, "linecount"), *fill = jx_arg(r, &a, 1, "fill_with");
		if (!lc)
			jx_fail(r, MOE_EINVAL, "batch() takes a line count");
		int64_t k = jx_want_int(r, lc, "linecount");
		if (k <= 0)
			jx_fail(r, MOE_EINVAL, "batch: the line count must be positive");
		jlist *l = jv_iter(r, &in);
		jv out = jv_list_new(r, l->n / (size_t)k + 1);
		for (size_t i = 0; i < l->n; i += (size_t)k) {
			jv row = jv_list_new(r, (size_t)k);
			for (size_t j = i; j < l->n && j < i + (size_t)k; j++)
				jlist_push(r, row.l, l->v[j]);
			while (fill && fill->t != JV_NONE && row.l->n < (size_t)k)
				jlist_push(r, row.l, *fill);
			jlist_push(r, out.l, row);
		}
		return out;
	}
	if (F("slice")) {
		/* Jinja's do_slice: `slices` columns, the first len % slices one
		 * longer; the others padded with fill_with when given. */
		jv *sl = jx_arg(r, &a, 0, "slices"), *fill = jx_arg(r, &a, 1, "fill_with");
		if (!sl)
			jx_fail(r, MOE_EINVAL, "slice() takes a number of slices");
		int64_t k = jx_want_int(r, sl, "slices");
		if (k <= 0 || k > 1000000)
			jx_fail(r, MOE_EINVAL, "slice: the number of slices must be in 1..1000000");
		jlist *l = jv_iter(r, &in);
		size_t per = l->n / (size_t)k, extra = l->n % (size_t)k, off = 0;
		jv out = jv_list_new(r, (size_t)k);
		for (size_t sn = 0; sn < (size_t)k; sn++) {
			size_t start = off + sn * per;
			if (sn < extra)
				off++;
			size_t end = off + (sn + 1) * per;
			jv col = jv_list_new(r, end - start + 1);
			for (size_t j = start; j < end && j < l->n; j++)
				jlist_push(r, col.l, l->v[j]);
			if (fill && fill->t != JV_NONE && sn >= extra)
				jlist_push(r, col.l, *fill);
			jlist_push(r, out.l, col);
		}
		return out;
	}
	if (F("striptags")) {
		jv sv = jv_to_str(r, &in);
		return striptags(r, &sv);
	}
	if (F("urlencode")) {
		moe_sbuf *b = jx_tmp_open(r);
		if (in.t != JV_LIST && in.t != JV_DICT) {
			url_quote_to(r, b, &in, false);
			return jx_tmp_close(r, b);
		}
		jlist *pairs = in.t == JV_DICT ? dict_items(r, in.d).l : in.l;
		for (size_t i = 0; i < pairs->n; i++) {
			jlist *kv = jv_iter(r, &pairs->v[i]);
			if (kv->n != 2)
				jx_fail(r, MOE_EINVAL, "urlencode: expected (key, value) pairs");
			if (i)
				adds(r, b, "&");
			url_quote_to(r, b, &kv->v[0], true);
			adds(r, b, "=");
			url_quote_to(r, b, &kv->v[1], true);
		}
		return jx_tmp_close(r, b);
	}
	if (F("xmlattr")) {
		bool autospace = opt_bool(jx_arg(r, &a, 0, "autospace"), true);
		if (in.t != JV_DICT)
			jx_fail(r, MOE_EINVAL, "xmlattr: '%s' object has no attribute 'items'",
				jv_type_name(&in));
		moe_sbuf *b = jx_tmp_open(r);
		bool any = false;
		for (size_t i = 0; i < in.d->n; i++) {
			jv *v = &in.d->v[i];
			if (v->t == JV_NONE || v->t == JV_UNDEF)
				continue;
			jv k = jv_to_str(r, &in.d->k[i]);
			for (size_t j = 0; j < k.n; j++)
				if (strchr(" \t\n\r\f\v/>=", k.s[j]) && k.s[j])
					jx_fail(r, MOE_EINVAL, "Invalid character in attribute name: "
						"'%.*s'", (int)k.n, k.s);
			adds(r, b, any || autospace ? " " : "");
			jv ek = jx_html_escape(r, &k), vs = jv_to_str(r, v), ev = jx_html_escape(r, &vs);
			jx_add(r, b, ek.s, ek.n);
			adds(r, b, "=\"");
			jx_add(r, b, ev.s, ev.n);
			adds(r, b, "\"");
			any = true;
		}
		return jx_tmp_close(r, b);
	}
	if (F("format")) {
		if (in.t != JV_STR)
			jx_fail(r, MOE_EINVAL, "format: not a string");
		/* printf-style %s / %d / %% only. */
		moe_sbuf *b = jx_tmp_open(r);
		size_t k = 0;
		for (size_t i = 0; i < in.n; i++) {
			if (in.s[i] != '%') {
				jx_add(r, b, in.s + i, 1);
				continue;
			}
			if (i + 1 < in.n && in.s[i + 1] == '%') {
				adds(r, b, "%");
				i++;
				continue;
			}
			if (i + 1 >= in.n || !in.s[i + 1] || !strchr("sdr", in.s[i + 1]) || k >= n)
				jx_fail(r, MOE_EINVAL, "format: only %%s, %%d and %%r are supported");
			if (in.s[i + 1] == 'r')
				jv_repr_to(r, b, &args[k++]);
			else
				jv_str_to(r, b, &args[k++]);
			i++;
		}
		return jx_tmp_close(r, b);
	}
	/* The rest work on the string form. */
	jv s = need_str(r, &in);
	if (F("truncate")) {
		/* Jinja's do_truncate, lengths in code points; leeway 5 (the
		 * default policy). */
		jv *ln = jx_arg(r, &a, 0, "length"), *kill = jx_arg(r, &a, 1, "killwords");
		jv *end = jx_arg(r, &a, 2, "end"), *lee = jx_arg(r, &a, 3, "leeway");
		int64_t length = ln ? jx_want_int(r, ln, "length") : 255;
		int64_t leeway = lee && lee->t != JV_NONE ? jx_want_int(r, lee, "leeway") : 5;
		jv ends = end ? need_str(r, end) : jv_strn("...", 3);
		int64_t elen = (int64_t)ju_len(ends.s, ends.n), slen = (int64_t)ju_len(s.s, s.n);
		if (length < elen)
			jx_fail(r, MOE_EINVAL, "expected length >= %" PRId64 ", got %" PRId64, elen,
				length);
		if (leeway < 0)
			jx_fail(r, MOE_EINVAL, "expected leeway >= 0, got %" PRId64, leeway);
		if (slen <= length + leeway)
			return s;
		size_t cut = ju_off(s.s, s.n, (size_t)(length - elen));
		if (!opt_bool(kill, false)) {
			/* s[:length - len(end)].rsplit(" ", 1)[0] */
			const char *sp = NULL;
			for (size_t i = cut; i-- > 0;)
				if (s.s[i] == ' ') {
					sp = s.s + i;
					break;
				}
			if (sp)
				cut = (size_t)(sp - s.s);
		}
		moe_sbuf *b = jx_tmp_open(r);
		jx_add(r, b, s.s, cut);
		jx_add(r, b, ends.s, ends.n);
		return jx_tmp_close(r, b);
	}
	if (F("trim")) {
		jv *chars = jx_arg(r, &a, 0, "chars");
		if (chars && chars->t == JV_NONE)
			chars = NULL;
		return strip(&s, chars, true, true);
	}
	if (F("upper"))
		return change_case(r, &s, CASE_UPPER);
	if (F("lower"))
		return change_case(r, &s, CASE_LOWER);
	if (F("capitalize"))
		return change_case(r, &s, CASE_CAPITALIZE);
	if (F("title"))
		return jinja_title(r, &s);
	if (F("replace")) {
		jv *o = jx_arg(r, &a, 0, "old"), *nw = jx_arg(r, &a, 1, "new"), *c = jx_arg(r, &a, 2, "count");
		if (!o || !nw)
			jx_fail(r, MOE_EINVAL, "replace() takes old and new");
		jv os = need_str(r, o), ns = need_str(r, nw);
		return str_replace(r, &s, &os, &ns,
				   c && c->t != JV_NONE ? jx_want_int(r, c, "count") : -1);
	}
	if (F("escape") || F("e") || F("forceescape"))
		return in.safe && !F("forceescape") ? in : jx_html_escape(r, &s);
	if (F("wordcount")) {
		/* Jinja: len(re.findall(r"\w+", s)) */
		int64_t k = 0;
		bool inw = false;
		for (size_t i = 0; i < s.n;) {
			uint32_t cp;
			i += ju_next_cp(s.s, s.n, i, &cp);
			utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
			bool w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_NO);
			if (w && !inw)
				k++;
			inw = w;
		}
		return jv_int(k);
	}
	if (F("center")) {
		jv *w = jx_arg(r, &a, 0, "width");
		return pad(r, &s, w ? jx_want_int(r, w, "width") : 80, NULL, 0);
	}
	if (F("indent")) {
		jv *w = jx_arg(r, &a, 0, "width");
		bool first = opt_bool(jx_arg(r, &a, 1, "first"), false);
		bool blank = opt_bool(jx_arg(r, &a, 2, "blank"), false);
		jv ind;
		if (w && w->t == JV_STR) {
			ind = *w;
		} else {
			int64_t k = w ? jx_want_int(r, w, "width") : 4;
			if (k < 0)
				k = 0;
			if ((uint64_t)k > 1024)
				jx_fail(r, MOE_ERANGE, "indent too large");
			char *sp = jx_alloc(r, (size_t)k + 1);
			memset(sp, ' ', (size_t)k);
			ind = jv_strn(sp, (size_t)k);
		}
		/* Jinja: s += "\n"; lines = s.splitlines(); ... */
		char *t = jx_alloc(r, s.n + 2);
		memcpy(t, s.s, s.n);
		t[s.n] = '\n';
		jv sn = jv_strn(t, s.n + 1);
		jlist *lines = jx_splitlines(r, &sn, false).l;
		moe_sbuf *b = jx_tmp_open(r);
		if (first)
			jx_add(r, b, ind.s, ind.n);
		for (size_t i = 0; i < lines->n; i++) {
			if (i) {
				adds(r, b, "\n");
				if (blank || lines->v[i].n)
					jx_add(r, b, ind.s, ind.n);
			}
			jx_add(r, b, lines->v[i].s, lines->v[i].n);
		}
		return jx_tmp_close(r, b);
	}
#undef F
	jx_fail(r, MOE_EINVAL, "no filter named '%s'", name);
}
