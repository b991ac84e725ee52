/* t-jinja.c — the Jinja2 chat-template interpreter against Python's jinja2.
 *
 * 1. Goldens: every (template, conversation) pair listed in
 *    tests/golden/chat/render/MANIFEST renders byte for byte as Python's
 *    jinja2 rendered it with transformers' settings (scripts/gen-chat-goldens,
 *    run at test-generation time with Debian's python3-jinja2), or fails
 *    where Python failed.  Templates: the published chat templates of
 *    Qwen2.5, Qwen3, Llama 3.1/3.2, Mistral, Mixtral, DeepSeek-V3/R1,
 *    gpt-oss (abridged), Phi-3.5, OLMoE and Granite 3.0/3.1.
 * 2. Language details whose Python results are written out below.
 * 3. Malformed and hostile templates give errors naming the line, never
 *    hangs: unclosed blocks, infinite recursion, huge loops and outputs.
 * 4. Timing of a 50-message conversation (reported, not asserted).
 */
#include <config.h>

#include "engine.h"
#include "tap.h"
#include "text.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOW 1741132800 /* the clock of scripts/gen-chat-goldens */

static char *slurp(const char *top, const char *rel, size_t *len)
{
	char path[4096], *s;
	moe_error e;
	snprintf(path, sizeof path, "%s/%s", top, rel);
	if (moe_read_file(path, 1 << 24, &s, len, &e) < 0) {
		tap_diag("%s", e.msg);
		return NULL;
	}
	return s;
}

/* The variables transformers passes (see scripts/gen-chat-goldens). */
static json_t *make_vars(json_t *conv, json_t *tokens)
{
	json_t *v = json_object();
	json_object_set(v, "messages", json_object_get(conv, "messages"));
	json_t *tools = json_object_get(conv, "tools");
	json_object_set_new(v, "tools", tools ? json_incref(tools) : json_null());
	json_object_set_new(v, "documents", json_null());
	json_object_set(v, "add_generation_prompt", json_object_get(conv, "add_generation_prompt"));
	json_object_update(v, tokens);
	json_t *extra = json_object_get(conv, "vars");
	if (extra)
		json_object_update(v, extra);
	return v;
}

static int render(const char *tmpl, json_t *vars, char **out, moe_error *e)
{
	moe_jinja_opts o = {0};
	size_t len;
	o.use_now = true;
	o.now = NOW;
	int rc = moe_jinja_render(tmpl, strlen(tmpl), vars, &o, out, &len, e);
	if (rc == 0 && strlen(*out) != len)
		tap_diag("length mismatch");
	return rc;
}

static void test_goldens(const char *top)
{
	size_t len;
	char *man = slurp(top, "tests/golden/chat/render/MANIFEST", &len);
	char *tok_text = slurp(top, "tests/golden/chat/templates/tokens.json", &len);
	json_t *tokens = tok_text ? json_loads(tok_text, 0, NULL) : NULL;
	ok(man && tokens, "golden manifest and tokens.json");
	if (!man || !tokens)
		return;
	int n = 0;
	for (char *line = strtok(man, "\n"); line; line = strtok(NULL, "\n")) {
		char tmpl[128], conv[128], kind[8], rel[512];
		if (line[0] == '#' || sscanf(line, "%127s %127s %7s", tmpl, conv, kind) != 3)
			continue;
		snprintf(rel, sizeof rel, "tests/golden/chat/templates/%s.jinja", tmpl);
		char *src = slurp(top, rel, &len);
		snprintf(rel, sizeof rel, "tests/golden/chat/conversations/%s.json", conv);
		char *ctext = slurp(top, rel, &len);
		snprintf(rel, sizeof rel, "tests/golden/chat/render/%s__%s.%s", tmpl, conv, kind);
		char *want = slurp(top, rel, &len);
		json_t *c = ctext ? json_loads(ctext, 0, NULL) : NULL;
		if (!src || !c || !want) {
			ok(0, "%s / %s: test data", tmpl, conv);
			goto next;
		}
		json_t *vars = make_vars(c, json_object_get(tokens, tmpl));
		char *got = NULL;
		moe_error e = {0};
		int rc = render(src, vars, &got, &e);
		if (strcmp(kind, "txt") == 0) {
			ok(rc == 0 && strcmp(got, want) == 0, "%s / %s equals Python's rendering", tmpl,
			   conv);
			if (rc < 0)
				tap_diag("error: %s", e.msg);
			else if (strcmp(got, want) != 0)
				tap_diag("got:\n%s\n# want:\n%s", got, want);
		} else {
			/* raise_exception's message is the template's own text: it
			 * must come through unchanged. */
			const char *te = "TemplateError: ";
			int same = 1;
			if (rc < 0 && strncmp(want, te, strlen(te)) == 0) {
				const char *m = want + strlen(te);
				char *w = strndup(m, strcspn(m, "\n"));
				same = w && strstr(e.msg, w) != NULL;
				free(w);
			}
			ok(rc < 0 && same, "%s / %s fails as in Python (%s)", tmpl, conv,
			   rc < 0 ? e.msg : "");
			tap_diag("python: %.*s", (int)strcspn(want, "\n"), want);
		}
		free(got);
		json_decref(vars);
		n++;
	next:
		json_decref(c);
		free(src);
		free(ctext);
		free(want);
	}
	ok(n >= 100, "%d golden renderings checked", n);
	json_decref(tokens);
	free(man);
	free(tok_text);
}

/* Small cases with Python jinja2's output (computed once with the
 * environment of scripts/gen-chat-goldens; written here as facts). */
static const struct {
	const char *tmpl, *vars, *want;
} cases[] = {
	{"{{ 1.0 }} {{ 0.1 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 3/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }}",
	 "{}", "1.0 0.1 1e+16 1.5e-07 1.5 3 -4 2"},
	{"{{ [1, 'a', none, true, {'k': \"it's\"}] }} {{ (1,) }}", "{}",
	 "[1, 'a', None, True, {'k': \"it's\"}] (1,)"},
	{"  {% if x %}\n  yes\n  {% endif %}\n  {{ x }}  \n{# c #}\n   {%- if 1 %} a {% endif -%}  \n b",
	 "{\"x\": true}", "  yes\n  True  \n a b"},
	{"{% for m in ms %}{{ loop.index }}{{ loop.last }}{% endfor %}", "{\"ms\": [1, 2]}",
	 "1False2True"},
	{"{% set ns = namespace(a=0) %}{% for i in range(5) %}{% set ns.a = ns.a + i %}"
	 "{% set b = i %}{% endfor %}{{ ns.a }}[{{ b }}]", "{}", "10[]"},
	{"{{ x|tojson }}", "{\"x\": {\"b\": [1, 2.5, \"\\u00e9\\n\", null], \"a\": {}}}",
	 "{\"b\": [1, 2.5, \"\xc3\xa9\\n\", null], \"a\": {}}"},
	{"{{ x|tojson(indent=2) }}", "{\"x\": {\"a\": [1, []]}}",
	 "{\n  \"a\": [\n    1,\n    []\n  ]\n}"},
	{"{{ 'a b  c'.split() }} {{ 'h\xc3\xa9llo'[1:3] }} {{ 'h\xc3\xa9llo'|length }}", "{}",
	 "['a', 'b', 'c'] \xc3\xa9l 5"},
	{"{{ c.split('</think>')[-1].lstrip('\\n') }}", "{\"c\": \"<think>r</think>\\n\\nA\"}", "A"},
	{"{% macro f(a, b='x') %}[{{ a }}-{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", "{}",
	 "[1-x][2-3]"},
	{"{{ x is defined }}{{ y is defined }}{{ 3 is odd }}{{ 'a' in 'cat' }}{{ 1 not in [1] }}",
	 "{\"x\": 1}", "TrueFalseTrueTrueFalse"},
	{"{% for i in range(10) %}{% if i == 3 %}{% continue %}{% endif %}{% if i == 6 %}"
	 "{% break %}{% endif %}{{ i }}{% endfor %}{% for i in [] %}x{% else %}E{% endfor %}",
	 "{}", "01245E"},
	{"{{ 'a\\nb\\n\\nc'|indent(2) }}", "{}", "a\n  b\n\n  c"},
	{"{{ d.get('z', 5) }} {{ d.items()|list }} {{ d.zz }}|", "{\"d\": {\"a\": 1}}",
	 "5 [('a', 1)] |"},
	{"{{ ['it\\'s', 'a\"b', '\\x07'] }}", "{}", "[\"it's\", 'a\"b', '\\x07']"},
	{"{{ strftime_now('%d %b %Y') }}", "{}", "05 Mar 2025"},
	{"{{ 'x' ~ none ~ u ~ 1.5 }} {{ 'ab' * 2 }} {{ 'y' if 0 }}|", "{}", "xNone1.5 abab |"},
	{"{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}"},
	{"a\r\nb\n", "{}", "a\nb"},
	{"{{ '%s=%d' % ('x', 3) }} {{ '%s!' % 'hi' }} {{ '100%%' % () }}", "{}", "x=3 hi! 100%"},
	/* groupby: case-insensitive by default, case_sensitive, default,
	 * .grouper/.list and unpacking, slices (python3-jinja2 3.1.2). */
	{"{% for g in users|groupby('city') %}{{ g.grouper }}:{% for u in g.list %}{{ u.name }},{% endfor %};{% endfor %}|{% for city, us in users|groupby('city', case_sensitive=true) %}{{ city }}={{ us|length }};{% endfor %}",
	 "{\"users\": [{\"name\": \"a\", \"city\": \"Paris\"}, {\"name\": \"b\", \"city\": \"berlin\"}, {\"name\": \"c\", \"city\": \"paris\"}, {\"name\": \"d\", \"city\": \"Berlin\"}]}", "berlin:b,d,;Paris:a,c,;|Berlin=1;Paris=1;berlin=1;paris=1;"},
	{"{{ users|groupby('c', default='z')|list }}|{{ (users|groupby('c', default='z'))[0][:1] }}|{{ [{'a': 2}, {'a': 1}, {'a': 2}]|groupby('a')|map(attribute='grouper')|list }}",
	 "{\"users\": [{\"n\": 1, \"c\": \"x\"}, {\"n\": 2}]}", "[('x', [{'n': 1, 'c': 'x'}]), ('z', [{'n': 2}])]|('x',)|[1, 2]"},
	/* str.format with format specifications: fill/align, sign, '#', '0',
	 * width, grouping, precision; strings, integers, floats; !r and !s
	 * (python3-jinja2 3.1.2 on Python 3.11). */
	{"{{ '{:>8}|{:<6}|{:^7}|{:*^9}|{:.2}'.format('ab', 'cd', 'e', 'mid', 'xyz') }}",
	 "{}", "      ab|cd    |   e   |***mid***|xy"},
	{"{{ '{:5d}|{:<5d}|{:05d}|{:+d}|{: d}|{:,}|{:_}|{:x}|{:#X}|{:#b}|{:o}|{:_x}|{:=+8d}'.format(42, 7, -42, 5, 5, 1234567, 1234567, 255, 255, 5, 8, 65535, -3) }}",
	 "{}", "   42|7    |-0042|+5| 5|1,234,567|1_234_567|ff|0XFF|0b101|10|ffff|-      3"},
	{"{{ '{:.2f}|{:8.3f}|{:e}|{:.3E}|{:g}|{:.3g}|{:.1%}|{:,.2f}|{:010.2f}|{:+.1f}|{}|{:.3}|{:.3}|{:f}'.format(3.14159, -2.5, 12345.678, 0.000123, 1e-7, 1234567.0, 0.256, 1234567.891, -3.5, 2.0, 0.1, 1.0, 1234.5, 7) }}",
	 "{}", "3.14|  -2.500|1.234568e+04|1.230E-04|1e-07|1.23e+06|25.6%|1,234,567.89|-000003.50|+2.0|0.1|1.0|1.23e+03|7.000000"},
	{"{{ '{0:>4}{1!r:>6}{0!s}'.format('a', 'b') }}|{{ '{x:^6}|{y:.1f}'.format(x='c', y=2) }}|{{ '{:>5}'.format(true) }}|{{ '{:\303\251>4}'.format(1) }}|{{ '{:>6}'.format('h\303\251\303\251') }}",
	 "{}", "   a   'b'a|  c   |2.0|    1|\303\251\303\251\303\2511|   h\303\251\303\251"},
	/* {% call %} blocks: caller() with and without parameters, nested,
	 * closures over loop variables (python3-jinja2 3.1.2). */
	{"{% macro m(x) %}<{{ caller() }}|{{ x }}>{% endmacro %}{% call m(1) %}body{% endcall %}",
	 "{}", "<body|1>"},
	{"{% macro list(items) %}\n{% for i in items %}\n[{{ caller(i, loop.index) }}]\n{% endfor %}\n{% endmacro %}\n{% set p = '>' %}\n{% call(item, n=0) list([1, 2]) %}\n{{ p }}{{ n }}:{{ item }}\n{% endcall %}\nend",
	 "{}", "[>1:1\n]\n[>2:2\n]\nend"},
	{"{% macro outer() %}({{ caller() }}){% endmacro %}{% macro inner() %}[{{ caller() }}]{% endmacro %}{% call outer() %}{% call inner() %}x{% endcall %}{% endcall %}",
	 "{}", "([x])"},
	{"{% macro d(a, b='B') %}{{ a }}{{ b }}{{ caller(k=1) }}{% endmacro %}{% for v in ['p', 'q'] %}{% call(k) d(v) %}{{ v }}{{ k }}{% endcall %}{% endfor %}",
	 "{}", "pBp1qBq1"},
	/* loop.depth, recursive loops, loop.changed, batch, slice, truncate,
	 * striptags, urlencode, xmlattr (python3-jinja2 3.1.2, markupsafe
	 * 2.1.2, Debian 12). */
	{"{% for a in [1] %}{% for b in [1] %}{{ loop.depth }}{% endfor %}{% endfor %}",
	 "{}", "1"},
	{"{% for x in t recursive %}[{{ loop.depth }}{{ x.n }}{% if x.c %}<{{ loop(x.c) }}>{% endif %}]{% else %}E{% endfor %}",
	 "{\"t\": [{\"n\": 1, \"c\": [{\"n\": 2, \"c\": []}, {\"n\": 3}]}, {\"n\": 4, \"c\": []}]}", "[11<[22][23]>][14]"},
	{"{% for x in t if x.n != 3 recursive %}{{ loop.index }}{{ x.n }}{% if x.c is defined %}({{ loop(x.c) }}){% endif %}{% endfor %}",
	 "{\"t\": [{\"n\": 1, \"c\": [{\"n\": 2, \"c\": []}, {\"n\": 3}]}, {\"n\": 4, \"c\": []}]}", "11(12())24()"},
	{"{% for x in [1,1,2,1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}|{% for x in [1,2] %}{{ loop.changed() }}{% endfor %}|{% for a, b in [[1,2],[1,3],[1,3]] %}{{ loop.changed(a, b) }}{% endfor %}",
	 "{}", "121|TrueFalse|TrueTrueFalse"},
	{"{{ [1,2,3,4,5]|batch(2)|list }} {{ [1,2,3,4,5]|batch(3, 'x')|list }} {{ []|batch(2)|list }}",
	 "{}", "[[1, 2], [3, 4], [5]] [[1, 2, 3], [4, 5, 'x']] []"},
	{"{{ [1,2,3,4,5,6,7]|slice(3)|list }} {{ [1,2,3,4,5,6,7]|slice(3, 0)|list }} {{ [1,2]|slice(4)|list }}",
	 "{}", "[[1, 2, 3], [4, 5], [6, 7]] [[1, 2, 3], [4, 5, 0], [6, 7, 0]] [[1], [2], [], []]"},
	{"{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, true) }}|{{ 'foo bar baz qux'|truncate(11, false, '!', 0) }}|{{ 'short'|truncate(3) }}|{{ 'h\303\251llo w\303\266rld again'|truncate(10, end='\342\200\246') }}|{{ 'abcdefghijkl'|truncate(5, leeway=0) }}",
	 "{}", "foo...|foo ba...|foo bar!|short|h\303\251llo\342\200\246|ab..."},
	{"{{ '<p>Hello  <b>World</b></p>\n<!-- a <b> comment -->&lt;x&gt; &amp; &#65;&#x42; &quot;q&quot;\302\240end'|striptags }}|{{ '<a\nhref=x>t</a>'|striptags }}|{{ 'a < b'|striptags }}",
	 "{}", "Hello World <x> & AB \"q\" end|t|a < b"},
	{"{{ 'a b/c?d=\303\251&x'|urlencode }}|{{ {'k 1': 'v/1', 'z': 2}|urlencode }}|{{ [['a', 'b c'], ['d', none]]|urlencode }}|{{ 42|urlencode }}",
	 "{}", "a%20b/c%3Fd%3D%C3%A9%26x|k+1=v%2F1&z=2|a=b+c&d=None|42"},
	{"<ul{{ {'class': 'my \"list\"', 'missing': none, 'id': 5, 'u': nope}|xmlattr }}>|{{ {'a': '<&>'}|xmlattr(false) }}|{{ {}|xmlattr }}|{{ {'a': 1, 'b': 2}|xmlattr(autospace=false) }}",
	 "{}", "<ul class=\"my &#34;list&#34;\" id=\"5\">|a=\"&lt;&amp;&gt;\"||a=\"1\" b=\"2\""},
};

static void test_cases(void)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		json_t *vars = json_loads(cases[i].vars, 0, NULL);
		char *got = NULL;
		moe_error e = {0};
		int rc = render(cases[i].tmpl, vars, &got, &e);
		ok(rc == 0 && strcmp(got, cases[i].want) == 0, "case %zu renders as Python", i);
		if (rc < 0)
			tap_diag("error: %s", e.msg);
		else if (strcmp(got, cases[i].want) != 0)
			tap_diag("got  <%s>\n# want <%s>", got, cases[i].want);
		free(got);
		json_decref(vars);
	}
}

/* Hostile or broken templates: an error that says what and where. */
static const struct {
	const char *tmpl;
	int code;
	const char *msg; /* substring of the message */
} bad[] = {
	{"{% if x %}\nopen", MOE_EFORMAT, "line 1: unexpected end of template"},
	{"ok\n{% for x in y %}", MOE_EFORMAT, "line 2"},
	{"{{ x ", MOE_EFORMAT, "not closed"},
	{"{# comment", MOE_EFORMAT, "comment"},
	{"{% endif %}", MOE_EFORMAT, "unexpected 'endif'"},
	{"{% include 'x' %}", MOE_EFORMAT, "not allowed"},
	{"{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", MOE_ERANGE, "recursion limit"},
	{"{% for x in [1] %}{{ loop([1]) }}{% endfor %}", MOE_EINVAL, "'recursive' marker"},
	{"{{ 'a &copy; b'|striptags }}", MOE_EUNSUPPORTED, "entity '&copy;'"},
	{"{{ 'abc'|truncate(2) }}", MOE_EINVAL, "expected length >= 3"},
	{"{{ [1]|batch(0) }}", MOE_EINVAL, "positive"},
	{"{{ {'a b': 1}|xmlattr }}", MOE_EINVAL, "Invalid character in attribute name"},
	{"{{ '{:q}'.format(1) }}", MOE_EINVAL, "Unknown format code 'q'"},
	{"{{ '{:>5}'.format(none) }}", MOE_EINVAL, "NoneType.__format__"},
	{"{{ '{0.x}'.format(d) }}", MOE_EUNSUPPORTED, "attribute and item fields"},
	{"{{ 1 + }}", MOE_EFORMAT, "expected an expression"},
	{"a\nb\n{{ raise_exception('nope') }}", MOE_EINVAL, "line 3: raised: nope"},
	{"{{ x.y }}", MOE_EINVAL, "'x' is undefined"},
	{"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", MOE_ERANGE, "recursion limit"},
	{"{% for i in range(100000000) %}{% endfor %}", MOE_ERANGE, "range() too large"},
	{"{% for i in range(200000) %}{% for j in range(10) %}{% endfor %}{% endfor %}",
	 MOE_ERANGE, "iteration limit"},
	{"{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
	 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", MOE_ERANGE, "limit"},
	{"{% for i in range(900000) %}{{ 'abcdefghijklmnopqrstuvwxyz0123456789' }}{% endfor %}",
	 MOE_ERANGE, "output limit"},
	{"{{ [].append(1) }}", MOE_EINVAL, "not allowed"},
	{"{{ 1 // 0 }}", MOE_EINVAL, "division"},
	{"\xff{{ 1 }}", MOE_EFORMAT, "UTF-8"},
};

static void test_bad(void)
{
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *got = NULL;
		moe_error e = {0};
		moe_jinja_opts o = {0};
		size_t len;
		o.max_output = 1 << 20;
		int rc = moe_jinja_render(bad[i].tmpl, strlen(bad[i].tmpl), NULL, &o, &got, &len, &e);
		ok(rc == bad[i].code && strstr(e.msg, bad[i].msg) && !got,
		   "bad template %zu: %s (%s)", i, moe_strerror(bad[i].code), e.msg);
		free(got);
	}
	/* Deep nesting is refused before it can exhaust the stack. */
	char deep[1024] = "{{ ";
	for (int i = 0; i < 300; i++)
		strcat(deep, "(");
	strcat(deep, "1");
	for (int i = 0; i < 300; i++)
		strcat(deep, ")");
	strcat(deep, " }}");
	char *got = NULL;
	moe_error e = {0};
	size_t len;
	int rc = moe_jinja_render(deep, strlen(deep), NULL, NULL, &got, &len, &e);
	ok(rc == MOE_EFORMAT && strstr(e.msg, "nested too deeply"), "300 nested parentheses: %s",
	   e.msg);
	free(got);
}

static void test_timing(const char *top)
{
	size_t len;
	char *src = slurp(top, "tests/golden/chat/templates/qwen3.jinja", &len);
	char *ctext = slurp(top, "tests/golden/chat/conversations/long50.json", &len);
	json_t *c = ctext ? json_loads(ctext, 0, NULL) : NULL;
	if (!src || !c) {
		ok(0, "timing data");
		return;
	}
	json_t *tok = json_pack("{s:s}", "eos_token", "<|im_end|>");
	json_t *vars = make_vars(c, tok);
	struct timespec a, b;
	int reps = 200, fails = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < reps; i++) {
		char *out;
		moe_error e;
		fails += render(src, vars, &out, &e) < 0;
		free(out);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double us = ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3) /
		    reps;
	ok(fails == 0, "qwen3 template, 50 messages: %.0f us per rendering (parse + render)", us);
	json_decref(vars);
	json_decref(tok);
	json_decref(c);
	free(src);
	free(ctext);
}

/* moe_chat_apply: a tokenizer carrying the model's template and a named
 * one; messages with tool calls and reasoning_content; tools; extra
 * variables; the system prompt; errors; the fallback for syntax we lack. */
static void test_apply(const char *top)
{
	size_t len;
	char *qwen3 = slurp(top, "tests/golden/chat/templates/qwen3.jinja", &len);
	char *ctext = slurp(top, "tests/golden/chat/conversations/tools.json", &len);
	char *want = slurp(top, "tests/golden/chat/render/qwen3__tools.txt", &len);
	char *tctext = slurp(top, "tests/golden/chat/conversations/thinking-off.json", &len);
	char *twant = slurp(top, "tests/golden/chat/render/qwen3__thinking-off.txt", &len);
	json_t *conv = ctext ? json_loads(ctext, 0, NULL) : NULL;
	json_t *tconv = tctext ? json_loads(tctext, 0, NULL) : NULL;
	if (!qwen3 || !conv || !want || !tconv || !twant) {
		ok(0, "moe_chat_apply test data");
		goto out;
	}
	static const uint32_t off0[1] = {0};
	const char *names[1] = {"tool_use"};
	const char *texts[1] = {"{{ tools | length }} tools, {{ messages | length }} messages"};
	moe_vocab_data vd = {0};
	vd.model = MOE_VOCAB_NONE;
	vd.tokens = "";
	vd.token_offsets = off0;
	vd.bos_id = vd.eos_id = vd.eot_id = vd.eom_id = vd.unk_id = vd.pad_id = vd.sep_id = -1;
	vd.chat_template = qwen3;
	vd.n_chat_templates = 1;
	vd.chat_template_names = names;
	vd.chat_template_texts = texts;
	moe_tokenizer *t;
	moe_error e = {0};
	if (moe_tokenizer_from_data(&t, &vd, &e) < 0) {
		ok(0, "tokenizer with templates: %s", e.msg);
		goto out;
	}
	moe_chat_opts o = {0};
	moe_jinja_opts jo = {.use_now = true, .now = NOW};
	o.tools = json_object_get(conv, "tools");
	o.add_generation_prompt = true;
	o.jinja = &jo;
	char *out = NULL;
	int rc = moe_chat_apply(t, json_object_get(conv, "messages"), &o, &out, &len, &e);
	ok(rc == 0 && strcmp(out, want) == 0, "moe_chat_apply: the model's template with tool "
	   "calls and tools equals Python's rendering%s%s", rc ? ": " : "", rc ? e.msg : "");
	free(out);
	o.tools = NULL;
	o.vars = json_object_get(tconv, "vars");
	rc = moe_chat_apply(t, json_object_get(tconv, "messages"), &o, &out, &len, &e);
	ok(rc == 0 && strcmp(out, twant) == 0, "... reasoning_content and enable_thinking=false");
	free(out);
	o.vars = NULL;

	/* A JSON request (moe-run --jsonl, the server) carries the same:
	 * messages with tool calls and replies, "tools", and the template's
	 * variables as "chat_template_kwargs"; they reach the template
	 * unchanged (the model's own template, a generation prompt). */
	json_t *req = json_pack("{s:O, s:O, s:i}", "messages", json_object_get(conv, "messages"),
				"tools", json_object_get(conv, "tools"), "max_tokens", 4);
	json_t *treq = json_pack("{s:O, s:O}", "messages", json_object_get(tconv, "messages"),
				 "chat_template_kwargs", json_object_get(tconv, "vars"));
	char *rtext = req ? json_dumps(req, 0) : NULL, *ttext = treq ? json_dumps(treq, 0) : NULL;
	moe_req_defaults d = {.params = moe_req_params_defaults()};
	moe_req_input in;
	rc = rtext ? moe_req_parse(rtext, strlen(rtext), t, &d, &in, &e) : -1;
	ok(rc == 0 && in.chat && strcmp(in.prompt, want) == 0,
	   "moe_req_parse: a request's messages with tool calls and its tools reach the "
	   "template%s%s", rc ? ": " : "", rc ? e.msg : "");
	if (rc == 0)
		moe_req_input_free(&in);
	rc = ttext ? moe_req_parse(ttext, strlen(ttext), t, &d, &in, &e) : -1;
	ok(rc == 0 && strcmp(in.prompt, twant) == 0,
	   "... reasoning_content, and chat_template_kwargs as template variables");
	if (rc == 0)
		moe_req_input_free(&in);
	const char *badreq = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
			  "\"tools\": {\"a\": 1}}";
	rc = moe_req_parse(badreq, strlen(badreq), t, &d, &in, &e);
	ok(rc == MOE_EINVAL && strstr(e.msg, "tools"), "... tools that are not an array: %s",
	   e.msg);
	free(rtext);
	free(ttext);
	json_decref(req);
	json_decref(treq);
	o.template_name = "tool_use";
	o.tools = json_object_get(conv, "tools");
	rc = moe_chat_apply(t, json_object_get(conv, "messages"), &o, &out, &len, &e);
	ok(rc == 0 && strcmp(out, "2 tools, 6 messages") == 0, "a named template (tool_use)");
	free(out);
	json_t *one = json_loads("[{\"role\": \"user\", \"content\": \"Hi\"}]", 0, NULL);
	o.template_name = NULL;
	o.tools = NULL;
	o.system = "Be brief.";
	rc = moe_chat_apply(t, one, &o, &out, &len, &e);
	ok(rc == 0 && strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
				  "Hi<|im_end|>\n<|im_start|>assistant\n") == 0,
	   "the system prompt becomes a system message");
	free(out);
	o.system = NULL;
	o.template_name = "chatml";
	rc = moe_chat_apply(t, one, &o, &out, &len, &e);
	ok(rc == 0 && strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n") == 0,
	   "a built-in format by name");
	free(out);
	o.template_name = "no-such-template";
	rc = moe_chat_apply(t, one, &o, &out, &len, &e);
	ok(rc == MOE_EINVAL && strstr(e.msg, "no-such-template") && strstr(e.msg, "tool_use"),
	   "an unknown name is refused, listing the names: %s", e.msg);
	o.template_name = "chatml";
	o.tools = json_object_get(conv, "tools");
	rc = moe_chat_apply(t, one, &o, &out, &len, &e);
	ok(rc == MOE_EINVAL, "tools with a built-in format are refused: %s", e.msg);
	json_t *norole = json_loads("[{\"content\": \"no role\"}]", 0, NULL);
	o.template_name = NULL;
	o.tools = NULL;
	rc = moe_chat_apply(t, norole, &o, &out, &len, &e);
	ok(rc == MOE_EINVAL && strstr(e.msg, "role"), "a message without a role: %s", e.msg);
	json_decref(norole);
	moe_tokenizer_free(t);
	/* A template with syntax the interpreter lacks: the built-in format
	 * it resembles, with a warning. */
	vd.chat_template = "{{ '{0[0]}'.format(messages) }}<|im_start|>";
	vd.n_chat_templates = 0;
	if (moe_tokenizer_from_data(&t, &vd, &e) == 0) {
		rc = moe_chat_apply(t, one, &o, &out, &len, &e);
		ok(rc == 0 && strncmp(out, "<|im_start|>user", 16) == 0,
		   "an unsupported construct falls back to the built-in format");
		free(out);
		moe_tokenizer_free(t);
	}
	json_decref(one);
out:
	json_decref(conv);
	json_decref(tconv);
	free(qwen3);
	free(ctext);
	free(want);
	free(tctext);
	free(twant);
}

/* The formatting filters (jinja_fmt.c) on the random inputs of
 * tests/golden/chat/filters.jsonl, rendered by Python's jinja2
 * (scripts/gen-chat-goldens): every output byte for byte, and an error
 * wherever Python raised. */
static void test_filters(const char *top)
{
	static const char *const names[] = {"filesizeformat", "pprint", "wordwrap", "urlize"};
	int total[4] = {0}, same[4] = {0}, shown = 0;
	size_t len;
	char *text = slurp(top, "tests/golden/chat/filters.jsonl", &len);
	if (!text) {
		ok(0, "tests/golden/chat/filters.jsonl");
		return;
	}
	for (char *line = text, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		if (!nl)
			break;
		*nl = '\0';
		json_error_t je;
		json_t *rec = json_loads(line, 0, &je);
		const char *t = json_string_value(json_object_get(rec, "t"));
		if (!t)
			continue;
		int k = 0;
		while (k < 3 && !strstr(t, names[k]))
			k++;
		json_t *want = json_object_get(rec, "out");
		char *got = NULL;
		moe_error e;
		int rc = render(t, json_object_get(rec, "v"), &got, &e);
		bool match = want ? rc == 0 && strcmp(got, json_string_value(want)) == 0 : rc != 0;
		total[k]++;
		same[k] += match;
		if (!match && shown++ < 8)
			tap_diag("%s with %s: got %s, Python: %s", t,
				 json_dumps(json_object_get(rec, "v"), JSON_COMPACT),
				 rc == 0 ? got : e.msg, want ? json_string_value(want) : "an error");
		free(got);
		json_decref(rec);
	}
	for (int k = 0; k < 4; k++)
		ok(total[k] > 100 && same[k] == total[k], "%s: %d of %d random renderings as Python's",
		   names[k], same[k], total[k]);
	free(text);
}

int main(void)
{
	const char *top = getenv("top_srcdir");
	if (!top)
		top = ".";
	setenv("TZ", "UTC", 1);
	tzset();
	test_goldens(top);
	test_cases();
	test_bad();
	test_apply(top);
	test_filters(top);
	test_timing(top);
	return tap_done();
}
