/* jinja_eval.c — running a parsed Jinja2 template: values, scopes,
 * expressions and statements, with Python's semantics (truthiness, ==
 * across int/float/bool, floor division and modulo, slicing by code point,
 * attribute-then-item lookup) and the sandbox's limits.
 *
 * Scopes follow Jinja2: {% set %} assigns in the innermost scope; every
 * iteration of a for loop and every macro call has its own scope (which is
 * why templates carry state across iterations in a namespace()); if/else do
 * not open one.  Errors unwind with longjmp to moe_jinja_render, which
 * frees the arena and any diverted output buffers — nothing else is
 * allocated outside the arena.
 */
#include <config.h>

#include "jinja_int.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

enum { FLOW_NEXT = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

void jx_fail(jrender *r, int code, const char *fmt, ...)
{
	char msg[MOE_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (r->line > 0)
		moe_err(r->e, code, "line %d: %s", r->line, msg);
	else
		moe_err(r->e, code, "%s", msg);
	r->code = code;
	longjmp(r->fail, 1);
}

void *jx_alloc(jrender *r, size_t n)
{
	if (n > r->max_memory || r->arena.used_total > r->max_memory - n)
		jx_fail(r, MOE_ERANGE, "memory limit reached (%zu MiB)", r->max_memory >> 20);
	void *p = moe_arena_alloc(&r->arena, n ? n : 1, 16);
	if (!p)
		jx_fail(r, MOE_ENOMEM, "out of memory");
	return p;
}

char *jx_strndup(jrender *r, const char *s, size_t n)
{
	char *p = jx_alloc(r, n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void jx_add(jrender *r, moe_sbuf *b, const void *s, size_t n)
{
	if (b == r->out && b->len + n > r->max_output)
		jx_fail(r, MOE_ERANGE, "output limit reached (%zu bytes)", r->max_output);
	if (b->len + n > r->max_memory)
		jx_fail(r, MOE_ERANGE, "memory limit reached (%zu MiB)", r->max_memory >> 20);
	if (moe_sbuf_add(b, s, n) < 0)
		jx_fail(r, MOE_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------- containers */

jv jv_str_copy(jrender *r, const char *s, size_t n)
{
	return jv_strn(jx_strndup(r, s, n), n);
}

jv jv_list_new(jrender *r, size_t cap)
{
	jv v = {0};
	v.t = JV_LIST;
	v.l = jx_alloc(r, sizeof *v.l);
	if (cap) {
		v.l->v = jx_alloc(r, cap * sizeof *v.l->v);
		v.l->cap = cap;
	}
	return v;
}

jv jv_dict_new(jrender *r, size_t cap)
{
	jv v = {0};
	v.t = JV_DICT;
	v.d = jx_alloc(r, sizeof *v.d);
	if (cap) {
		v.d->k = jx_alloc(r, cap * sizeof *v.d->k);
		v.d->v = jx_alloc(r, cap * sizeof *v.d->v);
		v.d->cap = cap;
	}
	return v;
}

void jlist_push(jrender *r, jlist *l, jv x)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		jv *nv = jx_alloc(r, cap * sizeof *nv);
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof *nv);
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = x;
}

jv *jdict_get(const jdict *d, const char *k, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == JV_STR && d->k[i].n == n && memcmp(d->k[i].s, k, n) == 0)
			return &d->v[i];
	return NULL;
}

jv *jdict_find(const jdict *d, jv key)
{
	if (key.t == JV_STR)
		return jdict_get(d, key.s, key.n);
	for (size_t i = 0; i < d->n; i++)
		if (jv_equal(&d->k[i], &key))
			return &d->v[i];
	return NULL;
}

void jdict_set(jrender *r, jdict *d, jv key, jv val)
{
	jv *p = jdict_find(d, key);
	if (p) {
		*p = val;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		jv *nk = jx_alloc(r, cap * sizeof *nk), *nv = jx_alloc(r, cap * sizeof *nv);
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof *nk);
			memcpy(nv, d->v, d->n * sizeof *nv);
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = key;
	d->v[d->n++] = val;
}

/* ----------------------------------------------------------- semantics */

bool jv_truthy(const jv *v)
{
	switch (v->t) {
	case JV_UNDEF: case JV_NONE: return false;
	case JV_BOOL: return v->b;
	case JV_INT: return v->i != 0;
	case JV_FLOAT: return v->f != 0.0;
	case JV_STR: return v->n != 0;
	case JV_LIST: return v->l->n != 0;
	case JV_DICT: return v->d->ns || v->d->n != 0;
	default: return true;
	}
}

static bool is_num(const jv *v)
{
	return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}

static double num(const jv *v)
{
	return v->t == JV_FLOAT ? v->f : v->t == JV_INT ? (double)v->i : (double)v->b;
}

static int64_t inum(const jv *v)
{
	return v->t == JV_INT ? v->i : (int64_t)v->b;
}

bool jv_equal(const jv *a, const jv *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->t != JV_FLOAT && b->t != JV_FLOAT)
			return inum(a) == inum(b);
		return num(a) == num(b);
	}
	if (a->t != b->t)
		return false;
	switch (a->t) {
	case JV_UNDEF: case JV_NONE: return true;
	case JV_STR: return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
	case JV_LIST:
		if (a->l->n != b->l->n)
			return false;
		for (size_t i = 0; i < a->l->n; i++)
			if (!jv_equal(&a->l->v[i], &b->l->v[i]))
				return false;
		return true;
	case JV_DICT:
		if (a->d == b->d)
			return true;
		if (a->d->ns || b->d->ns || a->d->n != b->d->n)
			return false;
		for (size_t i = 0; i < a->d->n; i++) {
			jv *o = jdict_find(b->d, a->d->k[i]);
			if (!o || !jv_equal(&a->d->v[i], o))
				return false;
		}
		return true;
	case JV_FUNC: return a->fn == b->fn;
	case JV_LOOP: return a->loop == b->loop;
	default: return false;
	}
}

const char *jv_type_name(const jv *v)
{
	static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float",
					    "str", "list", "dict", "function", "LoopContext"};
	if (v->t == JV_LIST && v->tuple)
		return "tuple";
	if (v->t == JV_DICT && v->d->ns)
		return "Namespace";
	return names[v->t];
}

int jv_compare(jrender *r, const jv *a, const jv *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->t != JV_FLOAT && b->t != JV_FLOAT)
			return inum(a) < inum(b) ? -1 : inum(a) > inum(b);
		double x = num(a), y = num(b);
		return x < y ? -1 : x > y;
	}
	if (a->t == JV_STR && b->t == JV_STR) {
		/* UTF-8 byte order is code point order. */
		size_t n = a->n < b->n ? a->n : b->n;
		int c = memcmp(a->s, b->s, n);
		if (c)
			return c < 0 ? -1 : 1;
		return a->n < b->n ? -1 : a->n > b->n;
	}
	if (a->t == JV_LIST && b->t == JV_LIST) {
		for (size_t i = 0; i < a->l->n && i < b->l->n; i++) {
			if (!jv_equal(&a->l->v[i], &b->l->v[i]))
				return jv_compare(r, &a->l->v[i], &b->l->v[i]);
		}
		return a->l->n < b->l->n ? -1 : a->l->n > b->l->n;
	}
	jx_fail(r, MOE_EINVAL, "'<' not supported between instances of '%s' and '%s'",
		jv_type_name(a), jv_type_name(b));
}

/* ----------------------------------------------------------------- UTF-8 */

size_t ju_len(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

size_t ju_off(const char *s, size_t n, size_t i)
{
	size_t p = 0;
	while (p < n && i) {
		p++;
		while (p < n && ((unsigned char)s[p] & 0xC0) == 0x80)
			p++;
		i--;
	}
	return p;
}

/* ------------------------------------------------------------ iteration */

jlist *jv_iter(jrender *r, const jv *v)
{
	switch (v->t) {
	case JV_UNDEF: {
		return jv_list_new(r, 0).l;
	}
	case JV_LIST:
		return v->l;
	case JV_DICT: {
		if (v->d->ns)
			break;
		jlist *l = jv_list_new(r, v->d->n).l;
		for (size_t i = 0; i < v->d->n; i++)
			jlist_push(r, l, v->d->k[i]);
		return l;
	}
	case JV_STR: {
		jlist *l = jv_list_new(r, v->n).l;
		for (size_t p = 0; p < v->n;) {
			size_t q = p + 1;
			while (q < v->n && ((unsigned char)v->s[q] & 0xC0) == 0x80)
				q++;
			jlist_push(r, l, jv_strn(v->s + p, q - p));
			p = q;
		}
		return l;
	}
	default:
		break;
	}
	jx_fail(r, MOE_EINVAL, "'%s' object is not iterable", jv_type_name(v));
}

/* ------------------------------------------------------------ attributes */

static jv method(jrender *r, const jv *self, const char *name, size_t n)
{
	jv v = {0};
	v.t = JV_FUNC;
	v.fn = jx_alloc(r, sizeof *v.fn);
	v.fn->kind = FN_METHOD;
	v.fn->name = jx_strndup(r, name, n);
	v.fn->self = *self;
	return v;
}

static bool name_in(const char *name, size_t n, const char *list)
{
	for (const char *p = list; *p; p += strlen(p) + 1)
		if (strlen(p) == n && memcmp(p, name, n) == 0)
			return true;
	return false;
}

static const char str_methods[] =
	"strip\0lstrip\0rstrip\0split\0rsplit\0splitlines\0startswith\0endswith\0replace\0"
	"lower\0upper\0title\0capitalize\0swapcase\0find\0rfind\0index\0rindex\0count\0join\0"
	"isdigit\0isalpha\0isalnum\0isspace\0isupper\0islower\0isnumeric\0isdecimal\0"
	"removeprefix\0removesuffix\0center\0ljust\0rjust\0zfill\0partition\0rpartition\0"
	"format\0casefold\0istitle\0expandtabs\0";
static const char dict_methods[] = "items\0keys\0values\0get\0copy\0pop\0update\0setdefault\0"
				   "clear\0popitem\0";
static const char list_methods[] = "index\0count\0copy\0append\0extend\0insert\0pop\0remove\0"
				   "reverse\0sort\0clear\0";

static jv loop_attr(jrender *r, jloop *lp, const char *name, size_t n)
{
	size_t len = lp->items->n, i = lp->index0;
#define IS(s) (n == sizeof s - 1 && memcmp(name, s, n) == 0)
	if (IS("index"))
		return jv_int((int64_t)i + 1);
	if (IS("index0"))
		return jv_int((int64_t)i);
	if (IS("revindex"))
		return jv_int((int64_t)(len - i));
	if (IS("revindex0"))
		return jv_int((int64_t)(len - i - 1));
	if (IS("first"))
		return jv_bool(i == 0);
	if (IS("last"))
		return jv_bool(i + 1 == len);
	if (IS("length"))
		return jv_int((int64_t)len);
	if (IS("depth"))
		return jv_int(lp->depth);
	if (IS("depth0"))
		return jv_int(lp->depth - 1);
	if (IS("previtem"))
		return i > 0 ? lp->items->v[i - 1] : jv_undef();
	if (IS("nextitem"))
		return i + 1 < len ? lp->items->v[i + 1] : jv_undef();
	if (IS("cycle") || IS("changed")) {
		jv v = {0};
		v.t = JV_FUNC;
		v.fn = jx_alloc(r, sizeof *v.fn);
		v.fn->kind = FN_LOOP_CYCLE;
		v.fn->name = IS("cycle") ? "cycle" : "changed";
		v.fn->self.t = JV_LOOP;
		v.fn->self.loop = lp;
		return v;
	}
#undef IS
	jv u = jv_undef();
	u.s = jx_strndup(r, name, n);
	u.n = n;
	return u;
}

jv jv_getattr(jrender *r, const jv *obj, const char *name, size_t n)
{
	jv u = jv_undef();
	switch (obj->t) {
	case JV_UNDEF:
		if (obj->s)
			jx_fail(r, MOE_EINVAL, "'%.*s' is undefined", (int)obj->n, obj->s);
		jx_fail(r, MOE_EINVAL, "'%.*s' of an undefined value", (int)n, name);
	case JV_DICT: {
		if (!obj->d->ns && name_in(name, n, dict_methods))
			return method(r, obj, name, n);
		jv *p = jdict_get(obj->d, name, n);
		if (p)
			return *p;
		break;
	}
	case JV_STR:
		if (name_in(name, n, str_methods))
			return method(r, obj, name, n);
		break;
	case JV_LIST:
		if (obj->tuple == 2 && n == 7 && memcmp(name, "grouper", 7) == 0)
			return obj->l->v[0];
		if (obj->tuple == 2 && n == 4 && memcmp(name, "list", 4) == 0)
			return obj->l->v[1];
		if (name_in(name, n, list_methods))
			return method(r, obj, name, n);
		break;
	case JV_LOOP:
		return loop_attr(r, obj->loop, name, n);
	default:
		break;
	}
	u.s = jx_strndup(r, name, n);
	u.n = n;
	return u;
}

static jv str_char(const jv *s, int64_t i)
{
	size_t len = ju_len(s->s, s->n);
	if (i < 0)
		i += (int64_t)len;
	if (i < 0 || (uint64_t)i >= len)
		return jv_undef();
	size_t a = ju_off(s->s, s->n, (size_t)i), b = ju_off(s->s, s->n, (size_t)i + 1);
	return jv_strn(s->s + a, b - a);
}

jv jv_getitem(jrender *r, const jv *obj, const jv *key)
{
	switch (obj->t) {
	case JV_UNDEF:
		if (obj->s)
			jx_fail(r, MOE_EINVAL, "'%.*s' is undefined", (int)obj->n, obj->s);
		jx_fail(r, MOE_EINVAL, "subscript of an undefined value");
	case JV_DICT: {
		if (obj->d->ns)
			break;
		jv *p = jdict_find(obj->d, *key);
		if (p)
			return *p;
		break;
	}
	case JV_LIST:
		if (key->t == JV_INT || key->t == JV_BOOL) {
			int64_t i = inum(key);
			if (i < 0)
				i += (int64_t)obj->l->n;
			if (i >= 0 && (uint64_t)i < obj->l->n)
				return obj->l->v[i];
			return jv_undef();
		}
		break;
	case JV_STR:
		if (key->t == JV_INT || key->t == JV_BOOL)
			return str_char(obj, inum(key));
		break;
	default:
		break;
	}
	if (key->t == JV_STR)
		return jv_getattr(r, obj, key->s, key->n);
	return jv_undef();
}

/* Python's slice indices for a sequence of length len. */
static void slice_bounds(jrender *r, const jv *a, const jv *b, const jv *c, int64_t len,
			 int64_t *start, int64_t *stop, int64_t *step)
{
	*step = 1;
	if (c && c->t != JV_NONE && c->t != JV_UNDEF) {
		if (c->t != JV_INT)
			jx_fail(r, MOE_EINVAL, "slice step must be an integer");
		*step = c->i;
		if (*step == 0)
			jx_fail(r, MOE_EINVAL, "slice step cannot be zero");
	}
	const jv *ab[2] = {a, b};
	int64_t out[2];
	for (int k = 0; k < 2; k++) {
		const jv *x = ab[k];
		if (!x || x->t == JV_NONE || x->t == JV_UNDEF) {
			out[k] = *step > 0 ? (k ? len : 0) : (k ? -1 : len - 1);
			continue;
		}
		if (x->t != JV_INT && x->t != JV_BOOL)
			jx_fail(r, MOE_EINVAL, "slice indices must be integers or None");
		int64_t v = inum(x);
		if (v < 0) {
			v += len;
			if (v < 0)
				v = *step > 0 ? 0 : -1;
		} else if (v >= len) {
			v = *step > 0 ? len : len - 1;
		}
		out[k] = v;
	}
	*start = out[0];
	*stop = out[1];
}

static jv do_slice(jrender *r, const jv *obj, const jv *a, const jv *b, const jv *c)
{
	int64_t start, stop, step;
	if (obj->t == JV_LIST) {
		slice_bounds(r, a, b, c, (int64_t)obj->l->n, &start, &stop, &step);
		jv out = jv_list_new(r, 0);
		out.tuple = obj->tuple ? 1 : 0;
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
			jlist_push(r, out.l, obj->l->v[i]);
		return out;
	}
	if (obj->t == JV_STR) {
		jlist *chars = jv_iter(r, obj);
		slice_bounds(r, a, b, c, (int64_t)chars->n, &start, &stop, &step);
		if (step == 1) {
			if (start >= stop)
				return jv_strn("", 0);
			size_t x = ju_off(obj->s, obj->n, (size_t)start);
			size_t y = ju_off(obj->s, obj->n, (size_t)stop);
			return jv_strn(obj->s + x, y - x);
		}
		moe_sbuf sb = {0};
		r->bufs[r->n_bufs++] = sb; /* freed on errors */
		moe_sbuf *tb = &r->bufs[r->n_bufs - 1];
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
			jx_add(r, tb, chars->v[i].s, chars->v[i].n);
		jv out = jv_str_copy(r, tb->p ? tb->p : "", tb->len);
		free(tb->p);
		r->n_bufs--;
		return out;
	}
	if (obj->t == JV_UNDEF)
		jx_fail(r, MOE_EINVAL, "'%.*s' is undefined", (int)obj->n, obj->s ? obj->s : "value");
	jx_fail(r, MOE_EINVAL, "'%s' object is not subscriptable", jv_type_name(obj));
}

/* ---------------------------------------------------------------- scopes */

static scope *scope_new(jrender *r, scope *parent)
{
	scope *s = jx_alloc(r, sizeof *s);
	s->parent = parent;
	return s;
}

static jv *scope_lookup(scope *s, const char *name, size_t n)
{
	for (; s; s = s->parent) {
		jv *p = jdict_get(&s->vars, name, n);
		if (p)
			return p;
	}
	return NULL;
}

static void scope_set(jrender *r, scope *s, const char *name, jv v)
{
	jdict_set(r, &s->vars, jv_strn(name, strlen(name)), v);
}

/* ------------------------------------------------------------ evaluation */

static jv eval(jrender *r, node *n, scope *sc);
static int exec(jrender *r, node *body, scope *sc);
static jv call_loop(jrender *r, jloop *lp, jv *args, size_t n);

static void step(jrender *r)
{
	if (++r->steps > r->max_steps)
		jx_fail(r, MOE_ERANGE, "iteration limit reached (%" PRIu64 " loop steps and "
			"calls)", r->max_steps);
}

static void push_buf(jrender *r)
{
	if (r->n_bufs >= sizeof r->bufs / sizeof r->bufs[0])
		jx_fail(r, MOE_ERANGE, "recursion limit reached");
	r->bufs[r->n_bufs++] = (moe_sbuf){0};
}

/* The innermost diverted buffer, as an arena string; the buffer is
 * freed. */
static jv pop_buf(jrender *r)
{
	moe_sbuf *b = &r->bufs[r->n_bufs - 1];
	jv s = jv_str_copy(r, b->p ? b->p : "", b->len);
	free(b->p);
	r->n_bufs--;
	return s;
}

/* Render body in scope sc into a string (block set, filter blocks, macro
 * calls). */
static jv capture(jrender *r, node *body, scope *sc)
{
	moe_sbuf *saved = r->out;
	push_buf(r);
	r->out = &r->bufs[r->n_bufs - 1];
	exec(r, body, sc);
	r->out = saved;
	return pop_buf(r);
}

/* A macro call; `caller` (or NULL) is the body of a {% call %} block. */
static jv call_macro_with(jrender *r, jfunc *f, jv *args, const char **kw, size_t n,
			  const jv *caller)
{
	node *def = f->macro->def;
	if (++r->depth > r->max_depth)
		jx_fail(r, MOE_ERANGE, "recursion limit reached (%u nested macro calls)",
			r->max_depth);
	step(r);
	scope *s = scope_new(r, f->macro->closure);
	jv varargs = jv_list_new(r, 0), kwargs = jv_dict_new(r, 0);
	varargs.tuple = 1;
	bool *set = jx_alloc(r, (def->n_names + 1) * sizeof *set);
	size_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		if (!kw[i]) {
			if (pos < def->n_names) {
				scope_set(r, s, def->names[pos], args[i]);
				set[pos++] = true;
			} else {
				jlist_push(r, varargs.l, args[i]);
			}
			continue;
		}
		size_t k;
		for (k = 0; k < def->n_names; k++)
			if (strcmp(def->names[k], kw[i]) == 0)
				break;
		if (k < def->n_names) {
			if (set[k])
				jx_fail(r, MOE_EINVAL, "macro '%s' got multiple values for argument "
					"'%s'", def->name, kw[i]);
			scope_set(r, s, def->names[k], args[i]);
			set[k] = true;
		} else {
			jdict_set(r, kwargs.d, jv_strn(kw[i], strlen(kw[i])), args[i]);
		}
	}
	for (size_t k = 0; k < def->n_names; k++)
		if (!set[k]) {
			jv d = def->args[k] ? eval(r, def->args[k], s) : jv_undef();
			if (d.t == JV_UNDEF && !d.s) {
				d.s = def->names[k];
				d.n = strlen(d.s);
			}
			scope_set(r, s, def->names[k], d);
		}
	scope_set(r, s, "varargs", varargs);
	scope_set(r, s, "kwargs", kwargs);
	if (caller)
		scope_set(r, s, "caller", *caller);
	int line = r->line;
	jv out = capture(r, def->b, s);
	r->line = line;
	r->depth--;
	out.safe = 1;
	return out;
}

static jv call_macro(jrender *r, jfunc *f, jv *args, const char **kw, size_t n)
{
	return call_macro_with(r, f, args, kw, n, NULL);
}

static jv eval_args(jrender *r, node *n, scope *sc, jv **args);

/* {% call(params) m(args) %}body{% endcall %}: m(args) with `caller`, a
 * macro of params whose body is the block's, closed over this scope. */
static jv exec_call_block(jrender *r, node *n, scope *sc)
{
	jv caller = {0};
	caller.t = JV_FUNC;
	caller.fn = jx_alloc(r, sizeof *caller.fn);
	memset(caller.fn, 0, sizeof *caller.fn);
	caller.fn->kind = FN_MACRO;
	caller.fn->name = "caller";
	caller.fn->macro = jx_alloc(r, sizeof *caller.fn->macro);
	caller.fn->macro->def = n;
	caller.fn->macro->closure = sc;
	node *c = n->a;
	jv fn = eval(r, c->a, sc);
	jv *args;
	eval_args(r, c, sc, &args);
	r->line = n->line;
	if (fn.t != JV_FUNC || fn.fn->kind != FN_MACRO)
		jx_fail(r, MOE_EINVAL, "a call block must call a macro, not '%s'",
			fn.t == JV_FUNC ? fn.fn->name : jv_type_name(&fn));
	return call_macro_with(r, fn.fn, args, c->kw, c->n_args, &caller);
}

jv jx_call(jrender *r, jv fn, jv *args, const char **kw, size_t n)
{
	if (fn.t == JV_LOOP)
		return call_loop(r, fn.loop, args, n);
	if (fn.t != JV_FUNC) {
		if (fn.t == JV_UNDEF && fn.s)
			jx_fail(r, MOE_EINVAL, "'%.*s' is undefined", (int)fn.n, fn.s);
		jx_fail(r, MOE_EINVAL, "'%s' object is not callable", jv_type_name(&fn));
	}
	if (fn.fn->kind == FN_MACRO)
		return call_macro(r, fn.fn, args, kw, n);
	return jx_call_builtin(r, fn.fn, args, kw, n);
}

static jv eval_args(jrender *r, node *n, scope *sc, jv **args)
{
	*args = jx_alloc(r, (n->n_args + 1) * sizeof **args);
	for (size_t i = 0; i < n->n_args; i++)
		(*args)[i] = eval(r, n->args[i], sc);
	return jv_none();
}

static jv apply_filter(jrender *r, node *f, jv in, scope *sc)
{
	if (f->a)
		in = eval(r, f->a, sc);
	jv *args;
	eval_args(r, f, sc, &args);
	r->line = f->line;
	return jx_filter(r, f->name, in, args, f->kw, f->n_args, sc);
}

/* A filter chain whose innermost input is `in` (block filters). */
static jv apply_chain(jrender *r, node *f, jv in, scope *sc)
{
	if (f->a)
		in = apply_chain(r, f->a, in, sc);
	jv *args;
	eval_args(r, f, sc, &args);
	r->line = f->line;
	return jx_filter(r, f->name, in, args, f->kw, f->n_args, sc);
}

static jv arith(jrender *r, const char *op, jv a, jv b)
{
	if (strcmp(op, "~") == 0) {
		jv x = jv_to_str(r, &a), y = jv_to_str(r, &b);
		char *p = jx_alloc(r, x.n + y.n + 1);
		memcpy(p, x.s, x.n);
		memcpy(p + x.n, y.s, y.n);
		p[x.n + y.n] = '\0';
		return jv_strn(p, x.n + y.n);
	}
	if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
		const jv *u = a.t == JV_UNDEF ? &a : &b;
		if (u->s)
			jx_fail(r, MOE_EINVAL, "'%.*s' is undefined", (int)u->n, u->s);
		jx_fail(r, MOE_EINVAL, "undefined value in '%s'", op);
	}
	if (op[0] == '+' && a.t == JV_STR && b.t == JV_STR) {
		char *p = jx_alloc(r, a.n + b.n + 1);
		memcpy(p, a.s, a.n);
		memcpy(p + a.n, b.s, b.n);
		p[a.n + b.n] = '\0';
		jv s = jv_strn(p, a.n + b.n);
		return s;
	}
	if (op[0] == '+' && a.t == JV_LIST && b.t == JV_LIST) {
		jv l = jv_list_new(r, a.l->n + b.l->n);
		for (size_t i = 0; i < a.l->n; i++)
			jlist_push(r, l.l, a.l->v[i]);
		for (size_t i = 0; i < b.l->n; i++)
			jlist_push(r, l.l, b.l->v[i]);
		l.tuple = a.tuple && b.tuple;
		return l;
	}
	if (op[0] == '%' && a.t == JV_STR) {
		/* printf-style formatting: "%s and %d" % (x, y) */
		if (b.t == JV_LIST && b.tuple)
			return jx_filter(r, "format", a, b.l->v, NULL, b.l->n, NULL);
		return jx_filter(r, "format", a, &b, NULL, 1, NULL);
	}
	if (op[0] == '*' && !op[1] && ((a.t == JV_STR && b.t == JV_INT) ||
				       (a.t == JV_INT && b.t == JV_STR))) {
		jv s = a.t == JV_STR ? a : b;
		int64_t k = a.t == JV_INT ? a.i : b.i;
		if (k <= 0)
			return jv_strn("", 0);
		if ((uint64_t)k > r->max_output || s.n * (uint64_t)k > r->max_output)
			jx_fail(r, MOE_ERANGE, "string repetition too large");
		char *p = jx_alloc(r, s.n * (size_t)k + 1);
		for (int64_t i = 0; i < k; i++)
			memcpy(p + (size_t)i * s.n, s.s, s.n);
		p[s.n * (size_t)k] = '\0';
		return jv_strn(p, s.n * (size_t)k);
	}
	if (!is_num(&a) || !is_num(&b))
		jx_fail(r, MOE_EINVAL, "unsupported operand types for %s: '%s' and '%s'", op,
			jv_type_name(&a), jv_type_name(&b));
	bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
	if (op[0] == '/' && !op[1]) {
		if (num(&b) == 0)
			jx_fail(r, MOE_EINVAL, "division by zero");
		return jv_float(num(&a) / num(&b));
	}
	if (fl) {
		double x = num(&a), y = num(&b);
		switch (op[0]) {
		case '+': return jv_float(x + y);
		case '-': return jv_float(x - y);
		case '*': return op[1] ? jv_float(pow(x, y)) : jv_float(x * y);
		case '/':
		case '%': {
			if (y == 0)
				jx_fail(r, MOE_EINVAL, "division by zero");
			double q = floor(x / y);
			return op[0] == '/' ? jv_float(q) : jv_float(x - q * y);
		}
		}
	}
	int64_t x = inum(&a), y = inum(&b), z;
	switch (op[0]) {
	case '+':
		if (__builtin_add_overflow(x, y, &z))
			jx_fail(r, MOE_ERANGE, "integer overflow");
		return jv_int(z);
	case '-':
		if (__builtin_sub_overflow(x, y, &z))
			jx_fail(r, MOE_ERANGE, "integer overflow");
		return jv_int(z);
	case '*':
		if (op[1]) { /* ** */
			if (y < 0)
				return jv_float(pow((double)x, (double)y));
			z = 1;
			for (int64_t k = 0; k < y; k++)
				if (__builtin_mul_overflow(z, x, &z))
					jx_fail(r, MOE_ERANGE, "integer overflow");
			return jv_int(z);
		}
		if (__builtin_mul_overflow(x, y, &z))
			jx_fail(r, MOE_ERANGE, "integer overflow");
		return jv_int(z);
	case '/':
	case '%': {
		if (y == 0)
			jx_fail(r, MOE_EINVAL, "integer division or modulo by zero");
		if (x == INT64_MIN && y == -1)
			jx_fail(r, MOE_ERANGE, "integer overflow");
		int64_t q = x / y, m = x % y;
		if (m != 0 && ((m < 0) != (y < 0))) {
			q--;
			m += y;
		}
		return op[0] == '/' ? jv_int(q) : jv_int(m);
	}
	}
	jx_fail(r, MOE_EINTERNAL, "unknown operator %s", op);
}

static bool contains(jrender *r, const jv *needle, const jv *hay)
{
	switch (hay->t) {
	case JV_STR:
		if (needle->t != JV_STR)
			jx_fail(r, MOE_EINVAL, "'in <string>' requires string as left operand, "
				"not %s", jv_type_name(needle));
		if (!needle->n)
			return true;
		return needle->n <= hay->n && memmem(hay->s, hay->n, needle->s, needle->n);
	case JV_LIST:
		for (size_t i = 0; i < hay->l->n; i++)
			if (jv_equal(&hay->l->v[i], needle))
				return true;
		return false;
	case JV_DICT:
		return !hay->d->ns && jdict_find(hay->d, *needle);
	case JV_UNDEF: /* Jinja's Undefined iterates as empty */
		return false;
	default:
		jx_fail(r, MOE_EINVAL, "argument of type '%s' is not iterable",
			jv_type_name(hay));
	}
}

static bool compare(jrender *r, const char *op, const jv *a, const jv *b)
{
	if (strcmp(op, "==") == 0)
		return jv_equal(a, b);
	if (strcmp(op, "!=") == 0)
		return !jv_equal(a, b);
	if (strcmp(op, "in") == 0)
		return contains(r, a, b);
	if (strcmp(op, "ni") == 0)
		return !contains(r, a, b);
	int c = jv_compare(r, a, b);
	if (op[0] == '<')
		return op[1] ? c <= 0 : c < 0;
	return op[1] ? c >= 0 : c > 0;
}

static jv eval(jrender *r, node *n, scope *sc)
{
	r->line = n->line;
	switch ((node_kind)n->kind) {
	case N_CONST:
		return n->val;
	case N_NAME: {
		size_t l = strlen(n->name);
		jv *p = scope_lookup(sc, n->name, l);
		if (p)
			return *p;
		if (jx_is_global(n->name, l)) {
			jv f = {0};
			f.t = JV_FUNC;
			f.fn = jx_alloc(r, sizeof *f.fn);
			f.fn->kind = FN_BUILTIN;
			f.fn->name = n->name;
			return f;
		}
		jv u = jv_undef();
		u.s = n->name;
		u.n = l;
		return u;
	}
	case N_LIST:
	case N_TUPLE: {
		jv l = jv_list_new(r, n->n_args);
		l.tuple = n->kind == N_TUPLE;
		for (size_t i = 0; i < n->n_args; i++)
			jlist_push(r, l.l, eval(r, n->args[i], sc));
		return l;
	}
	case N_DICT: {
		jv d = jv_dict_new(r, n->n_args / 2);
		for (size_t i = 0; i + 1 < n->n_args; i += 2) {
			jv k = eval(r, n->args[i], sc);
			jv v = eval(r, n->args[i + 1], sc);
			if (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_UNDEF)
				jx_fail(r, MOE_EINVAL, "unhashable dict key of type '%s'",
					jv_type_name(&k));
			jdict_set(r, d.d, k, v);
		}
		return d;
	}
	case N_ATTR: {
		jv o = eval(r, n->a, sc);
		r->line = n->line;
		return jv_getattr(r, &o, n->name, strlen(n->name));
	}
	case N_ITEM: {
		jv o = eval(r, n->a, sc);
		jv k = eval(r, n->b, sc);
		r->line = n->line;
		return jv_getitem(r, &o, &k);
	}
	case N_SLICE: {
		jv o = eval(r, n->a, sc);
		jv a = n->b ? eval(r, n->b, sc) : jv_none();
		jv b = n->c ? eval(r, n->c, sc) : jv_none();
		jv c = n->d ? eval(r, n->d, sc) : jv_none();
		r->line = n->line;
		return do_slice(r, &o, &a, &b, &c);
	}
	case N_CALL: {
		jv fn = eval(r, n->a, sc);
		jv *args;
		eval_args(r, n, sc, &args);
		r->line = n->line;
		return jx_call(r, fn, args, n->kw, n->n_args);
	}
	case N_FILTER:
		return apply_filter(r, n, jv_undef(), sc);
	case N_TEST: {
		jv in = eval(r, n->a, sc);
		jv *args;
		eval_args(r, n, sc, &args);
		r->line = n->line;
		bool b = jx_test(r, n->name, &in, args, n->n_args);
		return jv_bool(n->neg ? !b : b);
	}
	case N_NEG:
	case N_POS: {
		jv v = eval(r, n->a, sc);
		r->line = n->line;
		if (v.t == JV_INT || v.t == JV_BOOL) {
			if (n->kind == N_POS)
				return jv_int(inum(&v));
			if (inum(&v) == INT64_MIN)
				jx_fail(r, MOE_ERANGE, "integer overflow");
			return jv_int(-inum(&v));
		}
		if (v.t == JV_FLOAT)
			return jv_float(n->kind == N_NEG ? -v.f : v.f);
		jx_fail(r, MOE_EINVAL, "bad operand type for unary %s: '%s'",
			n->kind == N_NEG ? "-" : "+", jv_type_name(&v));
	}
	case N_NOT: {
		jv v = eval(r, n->a, sc);
		return jv_bool(!jv_truthy(&v));
	}
	case N_AND: {
		jv a = eval(r, n->a, sc);
		return jv_truthy(&a) ? eval(r, n->b, sc) : a;
	}
	case N_OR: {
		jv a = eval(r, n->a, sc);
		return jv_truthy(&a) ? a : eval(r, n->b, sc);
	}
	case N_BIN: {
		jv a = eval(r, n->a, sc);
		jv b = eval(r, n->b, sc);
		r->line = n->line;
		return arith(r, n->op, a, b);
	}
	case N_CMP: {
		jv a = eval(r, n->args[0], sc);
		for (size_t i = 1; i < n->n_args; i++) {
			jv b = eval(r, n->args[i], sc);
			r->line = n->line;
			if (!compare(r, n->kw[i], &a, &b))
				return jv_bool(false);
			a = b;
		}
		return jv_bool(true);
	}
	case N_COND: {
		jv c = eval(r, n->a, sc);
		if (jv_truthy(&c))
			return eval(r, n->b, sc);
		return n->c ? eval(r, n->c, sc) : jv_undef();
	}
	default:
		jx_fail(r, MOE_EINTERNAL, "not an expression");
	}
}

/* Bind loop/set targets to a value (unpacking for several names). */
static void bind(jrender *r, scope *sc, node *n, jv v)
{
	if (n->n_names == 1) {
		scope_set(r, sc, n->names[0], v);
		return;
	}
	jlist *l = jv_iter(r, &v);
	if (l->n != n->n_names)
		jx_fail(r, MOE_EINVAL, "%s values to unpack (expected %zu, got %zu)",
			l->n > n->n_names ? "too many" : "not enough", n->n_names, l->n);
	for (size_t i = 0; i < l->n; i++)
		scope_set(r, sc, n->names[i], l->v[i]);
}

/* The body of for loop n over items at recursion depth `depth` (1 for the
 * loop itself, +1 for each loop(...) call of a recursive loop: nested
 * loops that are not recursive start at 1 again, as in Jinja). */
static int run_for(jrender *r, node *n, scope *sc, jlist *items, int depth)
{
	if (n->d) {
		/* {% for x in y if cond %}: filtered before loop.* is counted. */
		jlist *kept = jv_list_new(r, items->n).l;
		for (size_t i = 0; i < items->n; i++) {
			step(r);
			scope *t = scope_new(r, sc);
			bind(r, t, n, items->v[i]);
			jv c = eval(r, n->d, t);
			if (jv_truthy(&c))
				jlist_push(r, kept, items->v[i]);
		}
		items = kept;
	}
	jloop *lp = jx_alloc(r, sizeof *lp);
	memset(lp, 0, sizeof *lp);
	lp->items = items;
	lp->depth = depth;
	if (n->neg) {
		lp->rec = n;
		lp->rec_scope = sc;
	}
	jv lv = {0};
	lv.t = JV_LOOP;
	lv.loop = lp;
	/* One scope for all iterations, emptied each time: Jinja gives every
	 * iteration fresh locals, and reusing the storage keeps long loops
	 * from filling the arena. */
	scope *t = scope_new(r, sc);
	for (size_t i = 0; i < items->n; i++) {
		step(r);
		lp->index0 = i;
		t->vars.n = 0;
		bind(r, t, n, items->v[i]);
		scope_set(r, t, "loop", lv);
		int f = exec(r, n->b, t);
		if (f == FLOW_BREAK)
			break;
	}
	if (!items->n && n->c)
		return exec(r, n->c, sc);
	return FLOW_NEXT;
}

static int exec_for(jrender *r, node *n, scope *sc)
{
	jv it = eval(r, n->a, sc);
	r->line = n->line;
	/* An undefined name iterates as empty, as Jinja's Undefined. */
	return run_for(r, n, sc, jv_iter(r, &it), 1);
}

/* loop(items) in a recursive loop: the loop's body over items, one level
 * deeper, as a string. */
static jv call_loop(jrender *r, jloop *lp, jv *args, size_t n)
{
	if (!lp->rec)
		jx_fail(r, MOE_EINVAL, "The loop must have the 'recursive' marker to be called "
			"recursively.");
	if (n != 1)
		jx_fail(r, MOE_EINVAL, "loop() takes one iterable");
	if (++r->depth > r->max_depth)
		jx_fail(r, MOE_ERANGE, "recursion limit reached (%u nested loop calls)",
			r->max_depth);
	int line = r->line;
	jlist *items = jv_iter(r, &args[0]);
	moe_sbuf *saved = r->out;
	push_buf(r);
	r->out = &r->bufs[r->n_bufs - 1];
	run_for(r, lp->rec, lp->rec_scope, items, lp->depth + 1);
	r->out = saved;
	jv out = pop_buf(r);
	r->line = line;
	r->depth--;
	out.safe = 1;
	return out;
}

static int exec(jrender *r, node *body, scope *sc)
{
	for (node *n = body; n; n = n->next) {
		r->line = n->line;
		switch ((node_kind)n->kind) {
		case S_TEXT:
			jx_add(r, r->out, n->val.s, n->val.n);
			break;
		case S_OUT: {
			jv v = eval(r, n->a, sc);
			r->line = n->line;
			jv_str_to(r, r->out, &v);
			break;
		}
		case S_IF: {
			/* elif branches hang from d, the else body from c */
			node *b = n;
			while (b) {
				jv c = eval(r, b->a, sc);
				node *run = jv_truthy(&c) ? b->b : b->d ? NULL : b->c;
				if (run) {
					int f = exec(r, run, sc);
					if (f)
						return f;
				}
				b = !jv_truthy(&c) ? b->d : NULL;
			}
			break;
		}
		case S_FOR:
			exec_for(r, n, sc);
			break;
		case S_SET: {
			jv v = eval(r, n->a, sc);
			r->line = n->line;
			if (n->attr) {
				jv *ns = scope_lookup(sc, n->name, strlen(n->name));
				if (!ns || ns->t != JV_DICT || !ns->d->ns)
					jx_fail(r, MOE_EINVAL, "cannot assign attribute on non-namespace "
						"object '%s'", n->name);
				jdict_set(r, ns->d, jv_strn(n->attr, strlen(n->attr)), v);
			} else {
				bind(r, sc, n, v);
			}
			break;
		}
		case S_SETBLOCK: {
			jv v = capture(r, n->b, sc);
			if (n->c)
				v = apply_chain(r, n->c, v, sc);
			scope_set(r, sc, n->names[0], v);
			break;
		}
		case S_FILTER: {
			jv v = capture(r, n->b, sc);
			v = apply_chain(r, n->c, v, sc);
			jv_str_to(r, r->out, &v);
			break;
		}
		case S_CALLBLOCK: {
			jv v = exec_call_block(r, n, sc);
			r->line = n->line;
			jv_str_to(r, r->out, &v);
			break;
		}
		case S_MACRO: {
			jv f = {0};
			f.t = JV_FUNC;
			f.fn = jx_alloc(r, sizeof *f.fn);
			f.fn->kind = FN_MACRO;
			f.fn->name = n->name;
			f.fn->macro = jx_alloc(r, sizeof *f.fn->macro);
			f.fn->macro->def = n;
			f.fn->macro->closure = sc;
			scope_set(r, sc, n->name, f);
			break;
		}
		case S_WITH: {
			scope *t = scope_new(r, sc);
			for (size_t i = 0; i < n->n_args; i++)
				scope_set(r, t, n->kw[i], eval(r, n->args[i], sc));
			int f = exec(r, n->b, t);
			if (f)
				return f;
			break;
		}
		case S_BODY: {
			int f = exec(r, n->b, sc);
			if (f)
				return f;
			break;
		}
		case S_BREAK:
			return FLOW_BREAK;
		case S_CONTINUE:
			return FLOW_CONTINUE;
		default:
			jx_fail(r, MOE_EINTERNAL, "not a statement");
		}
	}
	return FLOW_NEXT;
}

/* ---------------------------------------------------------- JSON -> value */

static jv from_json(jrender *r, const json_t *j, int depth)
{
	if (depth > 200)
		jx_fail(r, MOE_ERANGE, "variables nested too deeply");
	switch (json_typeof(j)) {
	case JSON_NULL: return jv_none();
	case JSON_TRUE: return jv_bool(true);
	case JSON_FALSE: return jv_bool(false);
	case JSON_INTEGER: return jv_int(json_integer_value(j));
	case JSON_REAL: return jv_float(json_real_value(j));
	case JSON_STRING: return jv_strn(json_string_value(j), json_string_length(j));
	case JSON_ARRAY: {
		jv l = jv_list_new(r, json_array_size(j));
		size_t i;
		json_t *v;
		json_array_foreach(j, i, v)
			jlist_push(r, l.l, from_json(r, v, depth + 1));
		return l;
	}
	case JSON_OBJECT: {
		jv d = jv_dict_new(r, json_object_size(j));
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)j, k, v)
			jdict_set(r, d.d, jv_strn(k, strlen(k)), from_json(r, v, depth + 1));
		return d;
	}
	}
	return jv_undef();
}

int moe_jinja_render(const char *tmpl, size_t len, const json_t *vars, const moe_jinja_opts *o,
		     char **out, size_t *out_len, moe_error *e)
{
	moe_jinja_opts def = {0};
	if (!o)
		o = &def;
	jrender *r = calloc(1, sizeof *r);
	*out = NULL;
	*out_len = 0;
	if (!r)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	moe_arena_init(&r->arena, 0);
	r->e = e;
	r->max_output = o->max_output ? o->max_output : MOE_JINJA_MAX_OUTPUT;
	r->max_memory = o->max_memory ? o->max_memory : MOE_JINJA_MAX_MEMORY;
	r->max_steps = o->max_steps ? o->max_steps : MOE_JINJA_MAX_STEPS;
	r->max_depth = o->max_depth ? o->max_depth : MOE_JINJA_MAX_DEPTH;
	if (r->max_depth > 60)
		r->max_depth = 60; /* diverted buffers: bufs[] holds 80 */
	r->now = o->use_now ? o->now : (int64_t)time(NULL);
	if (setjmp(r->fail) == 0) {
		if (vars && !json_is_object(vars))
			jx_fail(r, MOE_EINVAL, "template variables must be a JSON object");
		jtmpl t;
		jx_parse(r, tmpl, len, &t);
		r->line = 0;
		scope *g = scope_new(r, NULL);
		r->globals = g;
		if (vars) {
			const char *k;
			json_t *v;
			json_object_foreach((json_t *)vars, k, v)
				scope_set(r, g, k, from_json(r, v, 0));
		}
		r->out = &r->result;
		exec(r, t.body, scope_new(r, g));
		r->line = 0;
		if (moe_sbuf_reserve(&r->result, 1) < 0)
			jx_fail(r, MOE_ENOMEM, "out of memory");
		r->result.p[r->result.len] = '\0';
	}
	int rc = r->code;
	moe_sbuf result = r->result;
	while (r->n_bufs)
		free(r->bufs[--r->n_bufs].p);
	moe_arena_free(&r->arena);
	free(r);
	if (rc != 0) {
		free(result.p);
		return rc;
	}
	*out = result.p;
	*out_len = result.len;
	return 0;
}
