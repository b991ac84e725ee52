/* jinja_parse.c — Jinja2 template text to a syntax tree, with the settings
 * transformers uses for chat templates (trim_blocks, lstrip_blocks,
 * keep_trailing_newline off, loopcontrols).
 *
 * The lexer follows Jinja2's: newlines are normalised to "\n" and one
 * trailing newline is dropped; "{%-"/"-%}" strip all whitespace on that
 * side; lstrip_blocks removes the spaces and tabs between a line's start
 * and a "{%" or "{#" (not "{{"; "{%+" keeps them); trim_blocks removes the
 * one newline after "%}" or "#}" ("+%}" keeps it); a tag ends at its closing
 * delimiter only outside brackets.  The parser is Jinja2's grammar by
 * precedence: conditional, or, and, not, comparisons (in, not in), + -, ~,
 * * / // %, **, unary - +, then postfix (.attr [item] (call)), filters
 * (|f) and tests (is t), which bind tighter than any binary operator.
 */
#include <config.h>

#include "jinja_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#define JX_MAX_NEST 200 /* nesting of expressions and blocks */

typedef enum {
	T_EOF, T_DATA, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP
} ttype;

typedef struct tok {
	uint8_t t;
	int line;
	const char *p; /* T_DATA, T_NAME, T_OP: source; T_STR: decoded */
	size_t n;
	int64_t i;
	double f;
} tok;

typedef struct lexer {
	jrender *r;
	const char *s;
	size_t n, pos;
	int line;
	tok *v;
	size_t n_tok, cap;
} lexer;

typedef struct parser {
	jrender *r;
	tok *t;
	size_t pos, n;
	int nest;
	int loops; /* enclosing for loops (break/continue are legal) */
} parser;

_Noreturn static void fail_at(jrender *r, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_at(jrender *r, int line, const char *fmt, ...)
{
	char msg[MOE_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->line = line;
	jx_fail(r, MOE_EFORMAT, "%s", msg);
}

/* ------------------------------------------------------------------ lexer */

static void push_tok(lexer *lx, tok t)
{
	if (lx->n_tok == lx->cap) {
		size_t cap = lx->cap ? lx->cap * 2 : 256;
		tok *v = jx_alloc(lx->r, cap * sizeof *v);
		if (lx->n_tok)
			memcpy(v, lx->v, lx->n_tok * sizeof *v);
		lx->v = v;
		lx->cap = cap;
	}
	lx->v[lx->n_tok++] = t;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Python's \s over the bytes s[0..n): ASCII whitespace or a Unicode space. */
static bool all_space(const char *s, size_t n)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = moe_utf8_valid_len((const unsigned char *)s + i, n - i, &cp);
		if (!l || !ju_isspace(cp))
			return false;
		i += l;
	}
	return true;
}

/* Length of s[0..n) without trailing whitespace (Python's rstrip()). */
static size_t rstrip_len(const char *s, size_t n)
{
	while (n) {
		size_t k = n - 1;
		while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
			k--;
		uint32_t cp;
		size_t l = moe_utf8_valid_len((const unsigned char *)s + k, n - k, &cp);
		if (!l || k + l != n || !ju_isspace(cp))
			break;
		n = k;
	}
	return n;
}

static size_t skip_space(const lexer *lx, size_t p, int *line)
{
	while (p < lx->n) {
		uint32_t cp;
		size_t l = moe_utf8_valid_len((const unsigned char *)lx->s + p, lx->n - p, &cp);
		if (!l || !ju_isspace(cp))
			break;
		if (cp == '\n')
			(*line)++;
		p += l;
	}
	return p;
}

static int count_lines(const char *s, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

/* Append UTF-8 for cp. */
static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | cp >> 18);
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A string literal at s[0] (the quote): decoded as Python's unicode-escape
 * does (\n \t \r \\ \' \" \xNN \uNNNN \UNNNNNNNN \a \b \f \v \0oo; other
 * escapes stay as written).  Returns the source length. */
static size_t lex_string(lexer *lx, size_t p, tok *t)
{
	char q = lx->s[p];
	size_t i = p + 1;
	char *o = jx_alloc(lx->r, lx->n - p + 1);
	size_t on = 0;
	int line = lx->line;
	while (i < lx->n && lx->s[i] != q) {
		char c = lx->s[i];
		if (c == '\n')
			line++;
		if (c != '\\' || i + 1 >= lx->n) {
			o[on++] = c;
			i++;
			continue;
		}
		char d = lx->s[i + 1];
		int nd = d == 'x' ? 2 : d == 'u' ? 4 : d == 'U' ? 8 : 0;
		if (nd) {
			uint32_t cp = 0;
			int k;
			for (k = 0; k < nd && i + 2 + (size_t)k < lx->n; k++) {
				int h = hexval(lx->s[i + 2 + k]);
				if (h < 0)
					break;
				cp = cp * 16 + (uint32_t)h;
			}
			if (k < nd || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
				fail_at(lx->r, line, "bad \\%c escape in a string literal", d);
			on += put_utf8(o + on, cp);
			i += 2 + (size_t)nd;
			continue;
		}
		if (d >= '0' && d <= '7') {
			uint32_t cp = 0;
			int k = 0;
			while (k < 3 && i + 1 + (size_t)k < lx->n && lx->s[i + 1 + k] >= '0' &&
			       lx->s[i + 1 + k] <= '7')
				cp = cp * 8 + (uint32_t)(lx->s[i + 1 + k++] - '0');
			on += put_utf8(o + on, cp);
			i += 1 + (size_t)k;
			continue;
		}
		const char *from = "ntr\\'\"abfv\n", *to = "\n\t\r\\'\"\a\b\f\v";
		const char *f = d ? strchr(from, d) : NULL;
		if (f && d == '\n') { /* backslash-newline: a continuation */
			line++;
			i += 2;
			continue;
		}
		if (f) {
			o[on++] = to[f - from];
		} else {
			o[on++] = '\\';
			o[on++] = d;
		}
		i += 2;
	}
	if (i >= lx->n)
		fail_at(lx->r, lx->line, "unterminated string");
	o[on] = '\0';
	t->t = T_STR;
	t->p = o;
	t->n = on;
	lx->line = line;
	return i + 1 - p;
}

static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
				  "%", "~", "(", ")", "[", "]", "{", "}", ",", ".", ":",
				  "|", "=", "<", ">", ";"};

/* Tokens of a tag's content, up to its end delimiter (returned: the
 * position after it, strip = '-' or '+' or 0). */
static size_t lex_tag(lexer *lx, size_t p, bool var, char *strip, int open_line)
{
	int depth = 0;
	for (;;) {
		p = skip_space(lx, p, &lx->line);
		if (p >= lx->n)
			fail_at(lx->r, open_line, "unexpected end of template: the %s tag "
				"opened here is not closed", var ? "'{{'" : "'{%'");
		const char *s = lx->s + p;
		size_t rest = lx->n - p;
		if (depth == 0) {
			const char *end = var ? "}}" : "%}";
			if (rest >= 3 && (s[0] == '-' || (!var && s[0] == '+')) &&
			    memcmp(s + 1, end, 2) == 0) {
				*strip = s[0];
				return p + 3;
			}
			if (rest >= 2 && memcmp(s, end, 2) == 0) {
				*strip = 0;
				return p + 2;
			}
		}
		tok t = {0};
		t.line = lx->line;
		unsigned char c = (unsigned char)s[0];
		if (isalpha(c) || c == '_' || c >= 0x80) {
			size_t k = 1;
			while (k < rest && (isalnum((unsigned char)s[k]) || s[k] == '_' ||
					    (unsigned char)s[k] >= 0x80))
				k++;
			t.t = T_NAME;
			t.p = s;
			t.n = k;
			p += k;
		} else if (isdigit(c)) {
			size_t k = 0;
			bool fl = false;
			while (k < rest && (isdigit((unsigned char)s[k]) || s[k] == '_'))
				k++;
			if (k + 1 < rest && s[k] == '.' && isdigit((unsigned char)s[k + 1])) {
				fl = true;
				k++;
				while (k < rest && (isdigit((unsigned char)s[k]) || s[k] == '_'))
					k++;
			}
			if (k < rest && (s[k] == 'e' || s[k] == 'E')) {
				size_t m = k + 1;
				if (m < rest && (s[m] == '+' || s[m] == '-'))
					m++;
				if (m < rest && isdigit((unsigned char)s[m])) {
					fl = true;
					k = m;
					while (k < rest && isdigit((unsigned char)s[k]))
						k++;
				}
			}
			char buf[64];
			size_t bn = 0;
			for (size_t j = 0; j < k && bn + 1 < sizeof buf; j++)
				if (s[j] != '_')
					buf[bn++] = s[j];
			buf[bn] = '\0';
			errno = 0;
			if (fl) {
				t.t = T_FLOAT;
				t.f = strtod(buf, NULL);
			} else {
				t.t = T_INT;
				t.i = strtoll(buf, NULL, 10);
				if (errno == ERANGE || bn + 1 >= sizeof buf)
					fail_at(lx->r, lx->line, "integer literal too large");
			}
			p += k;
		} else if (c == '\'' || c == '"') {
			p += lex_string(lx, p, &t);
		} else {
			size_t k;
			for (k = 0; k < sizeof ops / sizeof ops[0]; k++) {
				size_t l = strlen(ops[k]);
				if (rest >= l && memcmp(s, ops[k], l) == 0)
					break;
			}
			if (k == sizeof ops / sizeof ops[0])
				fail_at(lx->r, lx->line, "unexpected character '%c'", c);
			t.t = T_OP;
			t.p = ops[k];
			t.n = strlen(ops[k]);
			p += t.n;
			if (strchr("([{", t.p[0]) && t.n == 1)
				depth++;
			else if (strchr(")]}", t.p[0]) && t.n == 1 && depth > 0)
				depth--;
		}
		push_tok(lx, t);
	}
}

/* "{% raw %}" (with optional -/+ and spaces) at s[p]?  Returns its length. */
static size_t raw_tag(const lexer *lx, size_t p, const char *word, char *lmod, char *rmod)
{
	const char *s = lx->s;
	size_t q = p + 2;
	*lmod = *rmod = 0;
	if (q < lx->n && (s[q] == '-' || s[q] == '+'))
		*lmod = s[q++];
	while (q < lx->n && is_ws(s[q]))
		q++;
	size_t wl = strlen(word);
	if (q + wl > lx->n || memcmp(s + q, word, wl) != 0)
		return 0;
	q += wl;
	while (q < lx->n && is_ws(s[q]))
		q++;
	if (q < lx->n && (s[q] == '-' || s[q] == '+'))
		*rmod = s[q++];
	if (q + 2 > lx->n || memcmp(s + q, "%}", 2) != 0)
		return 0;
	return q + 2 - p;
}

static void push_data(lexer *lx, const char *s, size_t n, int line)
{
	if (n)
		push_tok(lx, (tok){.t = T_DATA, .line = line, .p = s, .n = n});
}

static void lex(lexer *lx)
{
	size_t p = 0;
	bool line_starting = true;
	while (p < lx->n) {
		const char *s = lx->s;
		const char *open = NULL;
		for (size_t q = p; q + 1 < lx->n; q++) {
			const char *b = memchr(s + q, '{', lx->n - q - 1);
			if (!b)
				break;
			q = (size_t)(b - s);
			if (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#') {
				open = b;
				break;
			}
		}
		if (!open) {
			push_data(lx, s + p, lx->n - p, lx->line);
			break;
		}
		size_t o = (size_t)(open - s);
		char kind = s[o + 1];
		char mod = o + 2 < lx->n && (s[o + 2] == '-' || s[o + 2] == '+') ? s[o + 2] : 0;
		size_t tl = o - p;
		char lm, rm;
		size_t raw_len = kind == '%' ? raw_tag(lx, o, "raw", &lm, &rm) : 0;
		/* Whitespace control of the text before the tag. */
		if (mod == '-') {
			tl = rstrip_len(s + p, tl);
		} else if (mod != '+' && kind != '{') {
			size_t l = tl;
			while (l > 0 && s[p + l - 1] != '\n')
				l--;
			if ((l > 0 || line_starting) && all_space(s + p + l, tl - l))
				tl = l;
		}
		push_data(lx, s + p, tl, lx->line);
		lx->line += count_lines(s + p, o - p);
		int open_line = lx->line;
		if (kind == '#') {
			size_t q = o + 2;
			const char *end = NULL;
			while (q + 1 < lx->n) {
				if (s[q] == '#' && s[q + 1] == '}') {
					end = s + q;
					break;
				}
				q++;
			}
			if (!end)
				fail_at(lx->r, open_line, "unexpected end of template: the comment "
					"opened here is not closed");
			size_t after = q + 2;
			lx->line += count_lines(s + o, after - o);
			if (q > o + 2 && s[q - 1] == '-')
				after = skip_space(lx, after, &lx->line);
			else if (!(q > o + 2 && s[q - 1] == '+') && after < lx->n && s[after] == '\n') {
				after++;
				lx->line++;
			}
			line_starting = after > 0 && s[after - 1] == '\n';
			p = after;
			continue;
		}
		if (raw_len) {
			/* Verbatim up to {% endraw %}. */
			size_t q = o + raw_len, body = q, end_len = 0;
			if (rm == '-')
				body = q = skip_space(lx, q, &lx->line);
			char elm = 0, erm = 0;
			for (; q + 1 < lx->n; q++)
				if (s[q] == '{' && s[q + 1] == '%' &&
				    (end_len = raw_tag(lx, q, "endraw", &elm, &erm)))
					break;
			if (!end_len)
				fail_at(lx->r, open_line, "missing {%% endraw %%} for the raw block "
					"opened here");
			size_t bl = q - body;
			if (elm == '-')
				bl = rstrip_len(s + body, bl);
			push_data(lx, s + body, bl, lx->line);
			lx->line += count_lines(s + body, q + end_len - body);
			size_t after = q + end_len;
			if (erm == '-')
				after = skip_space(lx, after, &lx->line);
			else if (erm != '+' && after < lx->n && s[after] == '\n') {
				after++;
				lx->line++;
			}
			line_starting = after > 0 && s[after - 1] == '\n';
			p = after;
			continue;
		}
		bool var = kind == '{';
		push_tok(lx, (tok){.t = var ? T_VBEGIN : T_BBEGIN, .line = open_line});
		char strip;
		size_t after = lex_tag(lx, o + 2 + (mod ? 1 : 0), var, &strip, open_line);
		push_tok(lx, (tok){.t = var ? T_VEND : T_BEND, .line = lx->line});
		if (strip == '-')
			after = skip_space(lx, after, &lx->line);
		else if (!var && strip != '+' && after < lx->n && s[after] == '\n') {
			after++;
			lx->line++;
		}
		line_starting = after > 0 && s[after - 1] == '\n';
		p = after;
	}
	push_tok(lx, (tok){.t = T_EOF, .line = lx->line});
}

/* ----------------------------------------------------------------- parser */

static tok *cur(parser *ps)
{
	return &ps->t[ps->pos];
}

static bool is_op(const tok *t, const char *op)
{
	return t->t == T_OP && strlen(op) == t->n && memcmp(t->p, op, t->n) == 0;
}

static bool is_name(const tok *t, const char *name)
{
	return t->t == T_NAME && strlen(name) == t->n && memcmp(t->p, name, t->n) == 0;
}

static const char *tok_desc(const tok *t, char *buf, size_t n)
{
	switch (t->t) {
	case T_EOF: return "end of template";
	case T_VEND: return "end of print statement '}}'";
	case T_BEND: return "end of statement block '%}'";
	case T_NAME: case T_OP:
		snprintf(buf, n, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->p);
		return buf;
	case T_STR: return "string";
	case T_INT: return "integer";
	case T_FLOAT: return "float";
	default: return "template data";
	}
}

_Noreturn static void unexpected(parser *ps, const char *want)
{
	char buf[64];
	fail_at(ps->r, cur(ps)->line, "expected %s, got %s", want,
		tok_desc(cur(ps), buf, sizeof buf));
}

static void expect_op(parser *ps, const char *op)
{
	if (!is_op(cur(ps), op)) {
		char w[16];
		snprintf(w, sizeof w, "'%s'", op);
		unexpected(ps, w);
	}
	ps->pos++;
}

static const char *expect_name(parser *ps)
{
	tok *t = cur(ps);
	if (t->t != T_NAME)
		unexpected(ps, "a name");
	ps->pos++;
	return jx_strndup(ps->r, t->p, t->n);
}

static node *mk(parser *ps, node_kind k, int line)
{
	node *n = jx_alloc(ps->r, sizeof *n);
	n->kind = (uint8_t)k;
	n->line = line;
	return n;
}

/* A growable node-pointer vector in the arena. */
typedef struct nvec {
	node **v;
	const char **kw;
	size_t n, cap;
} nvec;

static void nvec_push(parser *ps, nvec *v, node *x, const char *kw)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 4;
		node **nv = jx_alloc(ps->r, cap * sizeof *nv);
		const char **nk = jx_alloc(ps->r, cap * sizeof *nk);
		if (v->n) {
			memcpy(nv, v->v, v->n * sizeof *nv);
			memcpy(nk, v->kw, v->n * sizeof *nk);
		}
		v->v = nv;
		v->kw = nk;
		v->cap = cap;
	}
	v->v[v->n] = x;
	v->kw[v->n++] = kw;
}

static void enter(parser *ps)
{
	if (++ps->nest > JX_MAX_NEST)
		fail_at(ps->r, cur(ps)->line, "template nested too deeply (over %d levels)",
			JX_MAX_NEST);
}

static node *parse_expr(parser *ps, bool condexpr);
static node *parse_unary(parser *ps, bool with_filter);
static node *parse_primary(parser *ps);
static node *parse_postfix(parser *ps, node *n);
static node *parse_tuple(parser *ps, bool condexpr, bool explicit_parens);

/* (args) of a call, filter or test; the "(" is current. */
static void parse_args(parser *ps, node *n)
{
	nvec v = {0};
	expect_op(ps, "(");
	while (!is_op(cur(ps), ")")) {
		if (v.n)
			expect_op(ps, ",");
		if (is_op(cur(ps), ")"))
			break;
		if (is_op(cur(ps), "*") || is_op(cur(ps), "**"))
			fail_at(ps->r, cur(ps)->line, "*args and **kwargs in calls are not supported");
		const char *kw = NULL;
		if (cur(ps)->t == T_NAME && is_op(&ps->t[ps->pos + 1], "=")) {
			kw = expect_name(ps);
			ps->pos++;
		} else if (v.n && v.kw[v.n - 1]) {
			fail_at(ps->r, cur(ps)->line, "positional argument after a keyword argument");
		}
		nvec_push(ps, &v, parse_expr(ps, true), kw);
	}
	ps->pos++;
	n->args = v.v;
	n->kw = v.kw;
	n->n_args = v.n;
}

static const char *dotted_name(parser *ps)
{
	const char *name = expect_name(ps);
	while (is_op(cur(ps), ".") && ps->t[ps->pos + 1].t == T_NAME) {
		ps->pos++;
		const char *more = expect_name(ps);
		size_t l = strlen(name) + strlen(more) + 2;
		char *j = jx_alloc(ps->r, l);
		snprintf(j, l, "%s.%s", name, more);
		name = j;
	}
	return name;
}

static node *parse_filter(parser *ps, node *in)
{
	int line = cur(ps)->line;
	ps->pos++; /* | */
	node *f = mk(ps, N_FILTER, line);
	f->name = dotted_name(ps);
	f->a = in;
	if (is_op(cur(ps), "("))
		parse_args(ps, f);
	return f;
}

static node *parse_test(parser *ps, node *in)
{
	int line = cur(ps)->line;
	ps->pos++; /* is */
	node *t = mk(ps, N_TEST, line);
	if (is_name(cur(ps), "not")) {
		ps->pos++;
		t->neg = 1;
	}
	t->name = dotted_name(ps);
	t->a = in;
	tok *c = cur(ps);
	if (is_op(c, "(")) {
		parse_args(ps, t);
	} else if ((c->t == T_NAME || c->t == T_STR || c->t == T_INT || c->t == T_FLOAT ||
		    is_op(c, "[") || is_op(c, "{")) &&
		   !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
		if (is_name(c, "is"))
			fail_at(ps->r, c->line, "you cannot chain multiple tests with is");
		node *arg = parse_postfix(ps, parse_primary(ps));
		t->args = jx_alloc(ps->r, sizeof *t->args);
		t->kw = jx_alloc(ps->r, sizeof *t->kw);
		t->args[0] = arg;
		t->n_args = 1;
	}
	return t;
}

/* fn(args): the "(" is current. */
static node *parse_call(parser *ps, node *fn)
{
	node *call = mk(ps, N_CALL, cur(ps)->line);
	call->a = fn;
	parse_args(ps, call);
	return call;
}

static node *parse_filter_expr(parser *ps, node *n)
{
	for (;;) {
		tok *c = cur(ps);
		if (is_op(c, "|")) {
			n = parse_filter(ps, n);
		} else if (is_name(c, "is")) {
			n = parse_test(ps, n);
		} else if (is_op(c, "(")) {
			n = parse_call(ps, n);
		} else {
			return n;
		}
	}
}

static node *parse_subscript(parser *ps, node *obj)
{
	int line = cur(ps)->line;
	if (is_op(cur(ps), ".")) {
		ps->pos++;
		tok *t = cur(ps);
		if (t->t == T_NAME) {
			node *a = mk(ps, N_ATTR, line);
			a->a = obj;
			a->name = expect_name(ps);
			return a;
		}
		if (t->t == T_INT) {
			node *k = mk(ps, N_CONST, line);
			k->val = jv_int(t->i);
			ps->pos++;
			node *it = mk(ps, N_ITEM, line);
			it->a = obj;
			it->b = k;
			return it;
		}
		unexpected(ps, "a name or number after '.'");
	}
	ps->pos++; /* [ */
	node *parts[3] = {NULL, NULL, NULL};
	int np = 0;
	bool slice = false;
	for (;;) {
		if (is_op(cur(ps), ":")) {
			if (np == 2)
				unexpected(ps, "']'");
			slice = true;
			np++;
			ps->pos++;
			continue;
		}
		if (is_op(cur(ps), "]"))
			break;
		if (parts[np])
			unexpected(ps, "']'");
		parts[np] = parse_tuple(ps, true, false);
	}
	ps->pos++;
	if (!slice) {
		if (!parts[0])
			unexpected(ps, "a subscript");
		node *it = mk(ps, N_ITEM, line);
		it->a = obj;
		it->b = parts[0];
		return it;
	}
	node *sl = mk(ps, N_SLICE, line);
	sl->a = obj;
	sl->b = parts[0];
	sl->c = parts[1];
	sl->d = parts[2];
	return sl;
}

static node *parse_postfix(parser *ps, node *n)
{
	for (;;) {
		tok *c = cur(ps);
		if (is_op(c, ".") || is_op(c, "[")) {
			n = parse_subscript(ps, n);
		} else if (is_op(c, "(")) {
			n = parse_call(ps, n);
		} else {
			return n;
		}
	}
}

static node *parse_primary(parser *ps)
{
	tok *t = cur(ps);
	node *n;
	enter(ps);
	if (t->t == T_NAME) {
		static const char *const consts[] = {"true", "True", "false", "False", "none",
						     "None"};
		n = mk(ps, N_CONST, t->line);
		size_t k;
		for (k = 0; k < 6; k++)
			if (is_name(t, consts[k]))
				break;
		if (k < 2)
			n->val = jv_bool(true);
		else if (k < 4)
			n->val = jv_bool(false);
		else if (k < 6)
			n->val = jv_none();
		else {
			n->kind = N_NAME;
			n->name = jx_strndup(ps->r, t->p, t->n);
		}
		ps->pos++;
	} else if (t->t == T_STR) {
		/* Adjacent literals are joined, as in Python. */
		moe_sbuf b = {0};
		while (cur(ps)->t == T_STR) {
			if (moe_sbuf_add(&b, cur(ps)->p, cur(ps)->n) < 0) {
				free(b.p);
				jx_fail(ps->r, MOE_ENOMEM, "out of memory");
			}
			ps->pos++;
		}
		n = mk(ps, N_CONST, t->line);
		n->val = jv_str_copy(ps->r, b.p ? b.p : "", b.len);
		free(b.p);
	} else if (t->t == T_INT || t->t == T_FLOAT) {
		n = mk(ps, N_CONST, t->line);
		n->val = t->t == T_INT ? jv_int(t->i) : jv_float(t->f);
		ps->pos++;
	} else if (is_op(t, "(")) {
		ps->pos++;
		n = parse_tuple(ps, true, true);
		expect_op(ps, ")");
	} else if (is_op(t, "[") || is_op(t, "{")) {
		/* [a, b] or {k: v, ...} (keys and values alternate in args). */
		bool dict = is_op(t, "{");
		const char *close = dict ? "}" : "]";
		ps->pos++;
		nvec v = {0};
		while (!is_op(cur(ps), close)) {
			if (v.n)
				expect_op(ps, ",");
			if (is_op(cur(ps), close))
				break;
			nvec_push(ps, &v, parse_expr(ps, true), NULL);
			if (dict) {
				expect_op(ps, ":");
				nvec_push(ps, &v, parse_expr(ps, true), NULL);
			}
		}
		ps->pos++;
		n = mk(ps, dict ? N_DICT : N_LIST, t->line);
		n->args = v.v;
		n->n_args = v.n;
	} else {
		unexpected(ps, "an expression");
	}
	ps->nest--;
	return n;
}

static node *parse_unary(parser *ps, bool with_filter)
{
	tok *t = cur(ps);
	node *n;
	enter(ps);
	if (is_op(t, "-") || is_op(t, "+")) {
		ps->pos++;
		n = mk(ps, is_op(t, "-") ? N_NEG : N_POS, t->line);
		n->a = parse_unary(ps, false);
	} else {
		n = parse_primary(ps);
	}
	n = parse_postfix(ps, n);
	if (with_filter)
		n = parse_filter_expr(ps, n);
	ps->nest--;
	return n;
}

static node *binary(parser *ps, const char *op, node *a, node *b, int line)
{
	node *n = mk(ps, N_BIN, line);
	snprintf(n->op, sizeof n->op, "%s", op);
	n->a = a;
	n->b = b;
	return n;
}

static node *parse_pow(parser *ps)
{
	node *n = parse_unary(ps, true);
	while (is_op(cur(ps), "**")) {
		int line = cur(ps)->line;
		ps->pos++;
		n = binary(ps, "**", n, parse_unary(ps, true), line);
	}
	return n;
}

static node *parse_math2(parser *ps)
{
	node *n = parse_pow(ps);
	for (;;) {
		tok *t = cur(ps);
		if (!(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%")))
			return n;
		char op[3];
		snprintf(op, sizeof op, "%.*s", (int)t->n, t->p);
		ps->pos++;
		n = binary(ps, op, n, parse_pow(ps), t->line);
	}
}

static node *parse_concat(parser *ps)
{
	node *n = parse_math2(ps);
	while (is_op(cur(ps), "~")) {
		int line = cur(ps)->line;
		ps->pos++;
		n = binary(ps, "~", n, parse_math2(ps), line);
	}
	return n;
}

static node *parse_math1(parser *ps)
{
	node *n = parse_concat(ps);
	for (;;) {
		tok *t = cur(ps);
		if (!is_op(t, "+") && !is_op(t, "-"))
			return n;
		ps->pos++;
		n = binary(ps, is_op(t, "+") ? "+" : "-", n, parse_concat(ps), t->line);
	}
}

static node *parse_compare(parser *ps)
{
	int line = cur(ps)->line;
	node *first = parse_math1(ps);
	nvec v = {0};
	for (;;) {
		tok *t = cur(ps);
		const char *op = NULL;
		static const char *const cmp[] = {"==", "!=", "<", "<=", ">", ">="};
		for (size_t k = 0; k < 6; k++)
			if (is_op(t, cmp[k]))
				op = cmp[k];
		if (op) {
			ps->pos++;
		} else if (is_name(t, "in")) {
			op = "in";
			ps->pos++;
		} else if (is_name(t, "not") && is_name(&ps->t[ps->pos + 1], "in")) {
			op = "ni";
			ps->pos += 2;
		} else {
			break;
		}
		if (!v.n)
			nvec_push(ps, &v, first, NULL);
		nvec_push(ps, &v, parse_math1(ps), op);
	}
	if (!v.n)
		return first;
	node *n = mk(ps, N_CMP, line);
	n->args = v.v;
	n->kw = v.kw;
	n->n_args = v.n;
	return n;
}

static node *parse_not(parser *ps)
{
	if (is_name(cur(ps), "not")) {
		node *n = mk(ps, N_NOT, cur(ps)->line);
		ps->pos++;
		enter(ps);
		n->a = parse_not(ps);
		ps->nest--;
		return n;
	}
	return parse_compare(ps);
}

/* "and" and "or": left-associative chains of operand (keyword operand)*. */
static node *parse_chain(parser *ps, const char *keyword, node_kind kind,
			 node *(*operand)(parser *))
{
	node *n = operand(ps);
	while (is_name(cur(ps), keyword)) {
		node *x = mk(ps, kind, cur(ps)->line);
		ps->pos++;
		x->a = n;
		x->b = operand(ps);
		n = x;
	}
	return n;
}

static node *parse_and(parser *ps)
{
	return parse_chain(ps, "and", N_AND, parse_not);
}

static node *parse_or(parser *ps)
{
	return parse_chain(ps, "or", N_OR, parse_and);
}

static node *parse_expr(parser *ps, bool condexpr)
{
	enter(ps);
	node *n = parse_or(ps);
	while (condexpr && is_name(cur(ps), "if")) {
		node *c = mk(ps, N_COND, cur(ps)->line);
		ps->pos++;
		c->b = n;
		c->a = parse_or(ps);
		if (is_name(cur(ps), "else")) {
			ps->pos++;
			c->c = parse_expr(ps, true);
		}
		n = c;
	}
	ps->nest--;
	return n;
}

/* Expressions separated by commas: one expression, or a tuple. */
static node *parse_tuple(parser *ps, bool condexpr, bool explicit_parens)
{
	int line = cur(ps)->line;
	nvec v = {0};
	bool comma = false;
	for (;;) {
		tok *t = cur(ps);
		if (v.n) {
			if (!is_op(t, ","))
				break;
			ps->pos++;
			comma = true;
			t = cur(ps);
		}
		if (t->t == T_VEND || t->t == T_BEND || is_op(t, ")") || is_op(t, "]") ||
		    (v.n && (is_name(t, "if") || is_name(t, "recursive"))))
			break;
		nvec_push(ps, &v, parse_expr(ps, condexpr), NULL);
	}
	if (v.n == 1 && !comma)
		return v.v[0];
	if (!v.n && !explicit_parens)
		unexpected(ps, "an expression");
	node *n = mk(ps, N_TUPLE, line);
	n->args = v.v;
	n->n_args = v.n;
	return n;
}

/* --------------------------------------------------------------- statements */

static void expect_bend(parser *ps)
{
	if (cur(ps)->t != T_BEND)
		unexpected(ps, "end of statement block '%}'");
	ps->pos++;
}

/* Statements up to a "{% NAME" with NAME in ends (NUL-separated, empty
 * string last); the cursor is left on NAME.  ends NULL: up to the end. */
static node *parse_body(parser *ps, const char *ends, const char *what, int open_line);

static bool in_list(const tok *t, const char *ends)
{
	for (const char *e = ends; *e; e += strlen(e) + 1)
		if (is_name(t, e))
			return true;
	return false;
}

/* The body of a block statement up to its end tag ({% endset %}, ...),
 * and the end tag. */
static node *parse_block(parser *ps, const char *ends, const char *what, int open_line)
{
	node *b = parse_body(ps, ends, what, open_line);
	ps->pos++;
	expect_bend(ps);
	return b;
}

/* A macro's or call block's body, up to the end tag's keyword: a scope of
 * its own, where a loop around the definition does not make break legal. */
static node *parse_macro_body(parser *ps, const char *ends, const char *what, int open_line)
{
	int saved = ps->loops;
	ps->loops = 0;
	node *b = parse_body(ps, ends, what, open_line);
	ps->loops = saved;
	ps->pos++;
	return b;
}

/* Filters applied in turn to f: f | a | b(...). */
static node *parse_filters(parser *ps, node *f)
{
	while (is_op(cur(ps), "|"))
		f = parse_filter(ps, f);
	return f;
}

/* Target names of for/set: a, or a, b, or (a, b). */
static void parse_targets(parser *ps, node *n)
{
	bool paren = is_op(cur(ps), "(");
	if (paren)
		ps->pos++;
	const char *names[16];
	size_t k = 0;
	do {
		if (k && !is_op(cur(ps), ","))
			break;
		if (k)
			ps->pos++;
		if (k == 16)
			fail_at(ps->r, cur(ps)->line, "too many targets");
		names[k++] = expect_name(ps);
	} while (is_op(cur(ps), ","));
	if (paren)
		expect_op(ps, ")");
	n->names = jx_alloc(ps->r, k * sizeof *n->names);
	memcpy(n->names, names, k * sizeof *names);
	n->n_names = k;
}

/* Parameters of a macro or call block, after its "(" up to and including
 * ")": names with optional defaults. */
static void parse_params(parser *ps, node *n, int line)
{
	nvec defs = {0};
	const char *names[64];
	size_t k = 0;
	while (!is_op(cur(ps), ")")) {
		if (k)
			expect_op(ps, ",");
		if (is_op(cur(ps), ")"))
			break;
		if (k == 64)
			fail_at(ps->r, line, "too many macro parameters");
		names[k++] = expect_name(ps);
		node *d = NULL;
		if (is_op(cur(ps), "=")) {
			ps->pos++;
			d = parse_expr(ps, true);
		} else if (defs.n && defs.v[defs.n - 1]) {
			fail_at(ps->r, line, "non-default argument follows default argument");
		}
		nvec_push(ps, &defs, d, NULL);
	}
	ps->pos++;
	n->names = jx_alloc(ps->r, (k ? k : 1) * sizeof *n->names);
	memcpy(n->names, names, k * sizeof *names);
	n->n_names = k;
	n->args = defs.v;
	n->n_args = defs.n;
}

static node *parse_stmt(parser *ps)
{
	tok *kw = cur(ps);
	int line = kw->line;
	if (kw->t != T_NAME)
		unexpected(ps, "a statement name");
	ps->pos++;
	enter(ps);
	node *n;
	if (is_name(kw, "if")) {
		n = mk(ps, S_IF, line);
		n->a = parse_tuple(ps, false, false);
		expect_bend(ps);
		node *top = n;
		for (;;) {
			n->b = parse_body(ps, "elif\0else\0endif\0", "if", line);
			tok *t = cur(ps);
			ps->pos++;
			if (is_name(t, "elif")) {
				node *el = mk(ps, S_IF, t->line);
				el->a = parse_tuple(ps, false, false);
				expect_bend(ps);
				n->d = el;
				n = el;
				continue;
			}
			if (is_name(t, "else")) {
				expect_bend(ps);
				n->c = parse_body(ps, "endif\0", "if", line);
				ps->pos++;
			}
			expect_bend(ps);
			break;
		}
		n = top;
	} else if (is_name(kw, "for")) {
		n = mk(ps, S_FOR, line);
		parse_targets(ps, n);
		if (!is_name(cur(ps), "in"))
			unexpected(ps, "'in'");
		ps->pos++;
		n->a = parse_tuple(ps, false, false);
		if (is_name(cur(ps), "if")) {
			ps->pos++;
			n->d = parse_expr(ps, true);
		}
		if (is_name(cur(ps), "recursive")) {
			n->neg = 1; /* S_FOR: recursive */
			ps->pos++;
		}
		expect_bend(ps);
		ps->loops++;
		n->b = parse_body(ps, "else\0endfor\0", "for", line);
		ps->loops--;
		if (is_name(cur(ps), "else")) {
			ps->pos++;
			expect_bend(ps);
			n->c = parse_body(ps, "endfor\0", "for", line);
		}
		ps->pos++;
		expect_bend(ps);
	} else if (is_name(kw, "set")) {
		n = mk(ps, S_SET, line);
		if (cur(ps)->t == T_NAME && is_op(&ps->t[ps->pos + 1], ".")) {
			n->name = expect_name(ps);
			ps->pos++;
			n->attr = expect_name(ps);
		} else {
			parse_targets(ps, n);
		}
		if (is_op(cur(ps), "=")) {
			ps->pos++;
			n->a = parse_tuple(ps, true, false);
			expect_bend(ps);
		} else {
			if (n->attr || n->n_names != 1)
				unexpected(ps, "'='");
			n->kind = S_SETBLOCK;
			/* Optional filters: {% set x | trim %}. */
			n->c = parse_filters(ps, NULL);
			expect_bend(ps);
			n->b = parse_block(ps, "endset\0", "set", line);
		}
	} else if (is_name(kw, "macro")) {
		n = mk(ps, S_MACRO, line);
		n->name = expect_name(ps);
		expect_op(ps, "(");
		parse_params(ps, n, line);
		expect_bend(ps);
		n->b = parse_macro_body(ps, "endmacro\0", "macro", line);
		if (cur(ps)->t == T_NAME)
			ps->pos++; /* {% endmacro name %} */
		expect_bend(ps);
	} else if (is_name(kw, "break") || is_name(kw, "continue")) {
		if (!ps->loops)
			fail_at(ps->r, line, "'%.*s' outside of a loop", (int)kw->n, kw->p);
		n = mk(ps, is_name(kw, "break") ? S_BREAK : S_CONTINUE, line);
		expect_bend(ps);
	} else if (is_name(kw, "filter")) {
		n = mk(ps, S_FILTER, line);
		ps->pos--; /* "filter NAME" parses as "| NAME" */
		n->c = parse_filters(ps, parse_filter(ps, NULL));
		expect_bend(ps);
		n->b = parse_block(ps, "endfilter\0", "filter", line);
	} else if (is_name(kw, "with")) {
		n = mk(ps, S_WITH, line);
		nvec v = {0};
		while (cur(ps)->t != T_BEND) {
			if (v.n)
				expect_op(ps, ",");
			const char *name = expect_name(ps);
			expect_op(ps, "=");
			nvec_push(ps, &v, parse_expr(ps, true), name);
		}
		expect_bend(ps);
		n->args = v.v;
		n->kw = v.kw;
		n->n_args = v.n;
		n->b = parse_block(ps, "endwith\0", "with", line);
	} else if (is_name(kw, "generation") || is_name(kw, "block")) {
		/* transformers' {% generation %} marks assistant text; a
		 * {% block %} of a template without inheritance renders in
		 * place.  Both just render their body. */
		bool gen = is_name(kw, "generation");
		if (!gen)
			expect_name(ps);
		expect_bend(ps);
		n = mk(ps, S_BODY, line);
		n->b = parse_body(ps, gen ? "endgeneration\0" : "endblock\0",
				  gen ? "generation" : "block", line);
		ps->pos++;
		if (!gen && cur(ps)->t == T_NAME)
			ps->pos++;
		expect_bend(ps);
	} else if (is_name(kw, "call")) {
		/* {% call(params) macro(args) %}body{% endcall %}: the macro runs
		 * with `caller`, a macro of the params whose body is this one. */
		n = mk(ps, S_CALLBLOCK, line);
		n->name = "caller";
		if (is_op(cur(ps), "(")) {
			ps->pos++;
			parse_params(ps, n, line);
		}
		n->a = parse_expr(ps, true);
		if (n->a->kind != N_CALL)
			fail_at(ps->r, line, "a call block needs a macro call");
		expect_bend(ps);
		n->b = parse_macro_body(ps, "endcall\0", "call", line);
		expect_bend(ps);
	} else if (is_name(kw, "include") || is_name(kw, "import") || is_name(kw, "from") ||
		   is_name(kw, "extends")) {
		fail_at(ps->r, line, "'%.*s' is not allowed: chat templates cannot load "
			"other templates", (int)kw->n, kw->p);
	} else {
		fail_at(ps->r, line, "unknown tag '%.*s'", (int)(kw->n < 40 ? kw->n : 40), kw->p);
	}
	ps->nest--;
	return n;
}

static node *parse_body(parser *ps, const char *ends, const char *what, int open_line)
{
	node head = {0}, *tail = &head;
	for (;;) {
		tok *t = cur(ps);
		node *n = NULL;
		if (t->t == T_EOF) {
			if (ends)
				fail_at(ps->r, open_line, "unexpected end of template: the '%s' "
					"block opened on line %d is not closed", what, open_line);
			break;
		}
		if (t->t == T_DATA) {
			n = mk(ps, S_TEXT, t->line);
			n->val = jv_strn(t->p, t->n);
			ps->pos++;
		} else if (t->t == T_VBEGIN) {
			ps->pos++;
			n = mk(ps, S_OUT, t->line);
			n->a = parse_tuple(ps, true, false);
			if (cur(ps)->t != T_VEND)
				unexpected(ps, "end of print statement '}}'");
			ps->pos++;
		} else if (t->t == T_BBEGIN) {
			tok *name = &ps->t[ps->pos + 1];
			if (ends && in_list(name, ends)) {
				ps->pos++;
				break;
			}
			static const char ends_all[] = "elif\0else\0endif\0endfor\0endset\0"
						      "endmacro\0endfilter\0endwith\0"
						      "endgeneration\0endblock\0endraw\0";
			if (in_list(name, ends_all))
				fail_at(ps->r, name->line, "unexpected '%.*s'%s%s%s", (int)name->n,
					name->p, ends ? " inside the '" : "", ends ? what : "",
					ends ? "' block" : "");
			ps->pos++;
			n = parse_stmt(ps);
		} else {
			unexpected(ps, "template data");
		}
		tail->next = n;
		tail = n;
	}
	return head.next;
}

int jx_parse(jrender *r, const char *src, size_t len, jtmpl *out)
{
	/* Newlines normalised to "\n", one trailing newline dropped. */
	char *s = jx_alloc(r, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[n++] = src[i];
		}
	}
	if (n && s[n - 1] == '\n')
		n--;
	s[n] = '\0';
	if (!moe_utf8_is_valid(s, n))
		jx_fail(r, MOE_EFORMAT, "the template is not valid UTF-8");
	lexer lx = {.r = r, .s = s, .n = n, .line = 1};
	lex(&lx);
	parser ps = {.r = r, .t = lx.v, .n = lx.n_tok};
	out->body = parse_body(&ps, NULL, NULL, 1);
	return 0;
}
