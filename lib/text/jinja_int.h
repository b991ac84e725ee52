/* jinja_int.h — what the files of the Jinja2 interpreter share: values,
 * the syntax tree and the render state.
 *
 * jinja_parse.c turns template text into a tree (lexer + recursive-descent
 * parser, Jinja2's grammar and whitespace rules); jinja_eval.c walks it
 * (expressions, statements, scopes, limits); jinja_lib.c holds what
 * templates call: filters, tests, methods of strings/dicts/lists, global
 * functions, and Python's str()/repr()/json.dumps() spellings of values,
 * which the output must reproduce byte for byte.
 *
 * Everything of one render (tree, values, scopes) lives in one arena freed
 * at the end; values are never freed one by one, so the memory limit is a
 * cap on the arena.
 */
#ifndef MOE_JINJA_INT_H
#define MOE_JINJA_INT_H

#include "text_int.h"

#include <setjmp.h>

/* ---------------------------------------------------------------- values */

typedef enum {
	JV_UNDEF, /* Jinja's Undefined: prints as "", false, iterates as empty */
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,
	JV_LIST, /* also tuples (flag tuple), which print as (a, b) */
	JV_DICT, /* also namespaces (flag ns) */
	JV_FUNC,
	JV_LOOP,
} jv_type;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
	uint8_t t;     /* jv_type */
	uint8_t tuple; /* JV_LIST: a tuple; 2: groupby's (grouper, list) */
	uint8_t safe;  /* JV_STR: marked safe (no effect: autoescape is off) */
	size_t n;      /* JV_STR: bytes; JV_UNDEF: length of the name */
	union {
		bool b;
		int64_t i;
		double f;
		const char *s; /* JV_STR bytes; JV_UNDEF: the missing name or NULL */
		jlist *l;
		jdict *d;
		jfunc *fn;
		jloop *loop;
	};
} jv;

struct jlist {
	size_t n, cap;
	jv *v;
};

struct jdict {
	size_t n, cap;
	jv *k, *v;  /* insertion order, as Python's dict */
	bool ns;    /* a namespace() object */
};

/* ------------------------------------------------------------ syntax tree */

typedef enum {
	/* expressions */
	N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL,
	N_FILTER, N_TEST, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_BIN, N_CMP, N_COND,
	/* statements */
	S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE,
	S_FILTER, S_WITH, S_CALLBLOCK, S_BODY,
} node_kind;

typedef struct node node;
struct node {
	uint8_t kind;   /* node_kind */
	uint8_t neg;    /* N_TEST: "is not" */
	char op[3];     /* N_BIN / N_CMP operator: "+", "//", "==", "in", "ni" = not in */
	int line;
	jv val;         /* N_CONST; S_TEXT (a string) */
	const char *name; /* N_NAME, N_ATTR, N_FILTER, N_TEST, S_MACRO, S_SET target */
	const char *attr; /* S_SET: ns.attr */
	node *a, *b, *c, *d;
	node **args;     /* N_LIST/N_TUPLE items, N_DICT k,v,k,v..., call args */
	const char **kw; /* [n_args] keyword names (NULL: positional) */
	size_t n_args;
	const char **names; /* S_FOR / S_SET targets, S_MACRO parameters */
	size_t n_names;
	node *next;      /* next statement of a body */
};

/* ---------------------------------------------------------- render state */

typedef struct scope scope;
struct scope {
	scope *parent;
	jdict vars;
};

typedef struct jmacro {
	node *def;
	scope *closure;
} jmacro;

typedef enum {
	FN_BUILTIN, /* global function: name says which */
	FN_METHOD,  /* method `name` of `self` */
	FN_MACRO,
	FN_LOOP_CYCLE,
	FN_CYCLER_NEXT,
	FN_JOINER,
} jfunc_kind;

struct jfunc {
	jfunc_kind kind;
	const char *name;
	jv self;
	jmacro *macro;
	jdict *state; /* joiner/cycler state */
};

struct jloop {
	jlist *items;
	size_t index0;
	int depth;
	node *rec;        /* {% for ... recursive %}: the loop, for loop(items) */
	struct scope *rec_scope; /* ... and the scope it runs in */
	jv changed_last; /* loop.changed(): the arguments of the last call (a tuple) */
	bool changed_seen;
};

typedef struct jrender {
	moe_arena arena;
	moe_error *e;
	jmp_buf fail;      /* errors unwind to moe_jinja_render */
	int line;          /* template line being evaluated (for messages) */
	int code;          /* the error jx_fail reported */
	moe_sbuf result;   /* the rendered text */
	moe_sbuf *out;     /* current output (block set / macro bodies divert it) */
	moe_sbuf bufs[80]; /* diverted outputs, innermost last (freed on errors) */
	unsigned n_bufs;
	size_t max_output, max_memory;
	uint64_t steps, max_steps;
	unsigned depth, max_depth;
	int64_t now;
	scope *globals;
} jrender;

/* Report an error at the current line and unwind.  Never returns. */
_Noreturn void jx_fail(jrender *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void *jx_alloc(jrender *r, size_t n);
char *jx_strndup(jrender *r, const char *s, size_t n);

/* Constructors. */
static inline jv jv_undef(void) { jv v = {0}; v.t = JV_UNDEF; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.f = f; return v; }
static inline jv jv_strn(const char *s, size_t n) { jv v = {0}; v.t = JV_STR; v.s = s; v.n = n; return v; }
jv jv_str_copy(jrender *r, const char *s, size_t n);
jv jv_list_new(jrender *r, size_t cap);
jv jv_dict_new(jrender *r, size_t cap);
void jlist_push(jrender *r, jlist *l, jv x);
/* Dict item by string key (NULL if absent); set (insert or replace). */
jv *jdict_get(const jdict *d, const char *k, size_t n);
jv *jdict_find(const jdict *d, jv key);
void jdict_set(jrender *r, jdict *d, jv key, jv val);

/* Python semantics. */
bool jv_truthy(const jv *v);
bool jv_equal(const jv *a, const jv *b);
/* -1/0/1; fails (TypeError) for values Python cannot order. */
int jv_compare(jrender *r, const jv *a, const jv *b);
const char *jv_type_name(const jv *v);
/* str(v) appended to b (Undefined: nothing). */
void jv_str_to(jrender *r, moe_sbuf *b, const jv *v);
/* str(v) as a string value (strings are returned as they are). */
jv jv_to_str(jrender *r, const jv *v);
void jv_repr_to(jrender *r, moe_sbuf *b, const jv *v);
/* json.dumps(v, ensure_ascii=False, indent, sort_keys) */
void jv_json_to(jrender *r, moe_sbuf *b, const jv *v, int indent, bool sort_keys, int level);
void jx_add(jrender *r, moe_sbuf *b, const void *s, size_t n);
/* Number of code points of a UTF-8 string; byte offset of code point i. */
size_t ju_len(const char *s, size_t n);
size_t ju_off(const char *s, size_t n, size_t i);
/* Python's str.isspace for one code point. */
bool ju_isspace(uint32_t cp);
/* Python's str.split() without arguments: the words of s appended to out. */
void jv_split_words(jrender *r, jlist *out, const jv *s);
/* The items of an iterable (list: itself; dict: keys; string: characters;
 * Undefined: empty); fails for others. */
jlist *jv_iter(jrender *r, const jv *v);
/* a.name: attribute first, then item (Jinja's getattr). */
jv jv_getattr(jrender *r, const jv *obj, const char *name, size_t n);
/* a[key]: item first, then attribute (Jinja's getitem). */
jv jv_getitem(jrender *r, const jv *obj, const jv *key);

/* jinja_lib.c */
/* A filter's or function's arguments: positional ones (kw[i] NULL) and
 * keyword ones, fname naming it in messages. */
typedef struct fargs {
	jv *v;
	const char **kw;
	size_t n;
	const char *fname;
} fargs;
/* Argument `pos` (positional index) or keyword `name`; NULL if absent. */
jv *jx_arg(jrender *r, const fargs *a, size_t pos, const char *name);
int64_t jx_want_int(jrender *r, const jv *v, const char *what);
/* A scratch buffer freed if an error unwinds; closed into a string. */
moe_sbuf *jx_tmp_open(jrender *r);
jv jx_tmp_close(jrender *r, moe_sbuf *b);
/* The code point at byte i (an invalid byte stands for itself); its length. */
size_t ju_next_cp(const char *s, size_t n, size_t i, uint32_t *cp);
void ju_add_cp(jrender *r, moe_sbuf *b, uint32_t cp);
/* str.splitlines(keepends) */
jv jx_splitlines(jrender *r, const jv *s, bool keepends);
/* markupsafe.escape: & < > " ' as entities; the result is marked safe. */
jv jx_html_escape(jrender *r, const jv *s);
jv jx_filter(jrender *r, const char *name, jv in, jv *args, const char **kw, size_t n,
	     scope *sc);
bool jx_test(jrender *r, const char *name, const jv *in, jv *args, size_t n);
bool jx_has_test(const char *name);
bool jx_has_filter(const char *name);
jv jx_call_builtin(jrender *r, jfunc *f, jv *args, const char **kw, size_t n);
bool jx_is_global(const char *name, size_t n);

/* jinja_fmt.c: the formatting filters filesizeformat, pprint, wordwrap
 * and urlize (true if `name` is one of them and *out was set). */
bool jx_filter_fmt(jrender *r, const char *name, jv in, const fargs *a, jv *out);

/* jinja_eval.c, used by jinja_lib.c for map/select: call a value. */
jv jx_call(jrender *r, jv fn, jv *args, const char **kw, size_t n);

/* jinja_parse.c */
typedef struct jtmpl {
	node *body;
} jtmpl;
int jx_parse(jrender *r, const char *src, size_t len, jtmpl *out);

#endif
