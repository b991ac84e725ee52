/* t-tokenizer.c — tokenizer conformance and robustness.
 *
 * 1. Every line of ../shared/vocab/NAME.gguf.out is reproduced from
 *    NAME.gguf.inp (vectors from the reference tokenizers, not from us).
 * 2. decode(encode(x)) == x for each tokenizer kind over a corpus of hard
 *    cases (tests/unit/tokenizer-corpus.txt); invalid UTF-8 comes back
 *    with U+FFFD for each bad byte and never crashes.
 * 3. Streaming detokenisation holds back split multi-byte characters.
 * 4. Special tokens: parse_special, user-defined tokens, BOS/EOS.
 * 5. from_hf == from_gguf on tokenizer.json files made from the GGUF
 *    vocabularies (tests/unit/gguf-to-hf.py; skipped without python3).
 * 6. Text pipelines as tokenizer.json declares them (normalizers and
 *    pre-tokenizers of real models) on GPT-2's vocabulary reproduce the ids
 *    of tests/golden/tokenizer/pipelines.json, computed by the independent
 *    Python implementation in scripts/gen-tokenizer-vectors; they survive
 *    a UTH round trip; the regex translation rule and bad pipelines.
 *
 * "t-tokenizer --bench [MB]" instead measures encoding throughput.
 */
#include <config.h>

#include "tap.h"
#include "text.h"
#include "gguf.h"
#include "uth.h"
#include "text/text_int.h"

#include <jansson.h>

#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char shared[4096];
static const char *srcdir = ".";

static const char *const vocabs[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-llm"};

typedef struct vocab {
	moe_arena arena;
	moe_vocab_data vd;
	moe_src *src;
	moe_gguf *g;
	moe_tokenizer *t;
} vocab;

static int vocab_open(vocab *v, const char *name)
{
	char path[4200];
	moe_error e = {0};
	memset(v, 0, sizeof *v);
	moe_arena_init(&v->arena, 0);
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared, name);
	if (moe_src_open_file(&v->src, path, &e) < 0 || moe_gguf_open(&v->g, v->src, &e) < 0 ||
	    moe_vocab_data_from_gguf(&v->vd, v->g, &v->arena, &e) < 0 ||
	    moe_tokenizer_from_data(&v->t, &v->vd, &e) < 0) {
		tap_diag("%s: %s", name, e.msg);
		return -1;
	}
	return 0;
}

static void vocab_close(vocab *v)
{
	moe_tokenizer_free(v->t);
	moe_gguf_close(v->g);
	if (v->src)
		moe_src_close(v->src);
	moe_arena_free(&v->arena);
}

static char *slurp(const char *path, size_t *len)
{
	char *buf;
	moe_error e;
	if (moe_read_file(path, (size_t)64 << 20, &buf, len, &e) < 0)
		return NULL;
	return buf;
}

/* Format ids as the .out files do: " id" per token. */
static char *format_ids(const int32_t *ids, size_t n)
{
	char *s = malloc(n * 12 + 1), *p = s;
	*p = '\0';
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, " %" PRId32, ids[i]);
	return s;
}

static void test_vectors(const char *name)
{
	char path[4200];
	size_t in_len, out_len;
	vocab v;

	if (vocab_open(&v, name) < 0) {
		ok(0, "%s: vocabulary loads", name);
		return;
	}
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", shared, name);
	char *inp = slurp(path, &in_len);
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", shared, name);
	char *out = slurp(path, &out_len);
	if (!inp || !out) {
		ok(0, "%s: test vectors readable", name);
		vocab_close(&v);
		return;
	}
	/* Inputs end with "\n__ggml_vocab_test__\n"; outputs one per line. */
	const char *sep = "\n__ggml_vocab_test__\n";
	char *ip = inp, *op = out;
	int n = 0, bad = 0;
	for (;;) {
		char *end = strstr(ip, sep);
		char *eol = strchr(op, '\n');
		if (!end || !eol)
			break;
		*eol = '\0';
		int32_t *ids;
		size_t nids;
		moe_error e = {0};
		if (moe_tokenizer_encode(v.t, ip, (size_t)(end - ip), false, false, &ids, &nids,
					 &e) < 0) {
			tap_diag("%s #%d: %s", name, n, e.msg);
			bad++;
		} else {
			char *got = format_ids(ids, nids);
			if (strcmp(got, op) != 0) {
				if (bad < 5)
					tap_diag("%s #%d: input '%.*s'\n#   got: %s\n#  want: %s",
						 name, n, (int)(end - ip), ip, got, op);
				bad++;
			}
			free(got);
			free(ids);
		}
		n++;
		ip = end + strlen(sep);
		op = eol + 1;
	}
	ok(n > 0 && bad == 0, "%s: %d of %d test vectors reproduced", name, n - bad, n);
	free(inp);
	free(out);
	vocab_close(&v);
}

/* ------------------------------------------------------------- helpers */

static int32_t *enc(const moe_tokenizer *t, const char *s, size_t len, bool add, bool parse,
		    size_t *n)
{
	int32_t *ids;
	moe_error e = {0};
	if (moe_tokenizer_encode(t, s, len, add, parse, &ids, n, &e) < 0) {
		tap_diag("encode: %s", e.msg);
		*n = 0;
		return NULL;
	}
	return ids;
}

static char *dec(const moe_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
		 size_t *len)
{
	char *s;
	moe_error e = {0};
	if (moe_tokenizer_decode(t, ids, n, flags, &s, len, &e) < 0) {
		tap_diag("decode: %s", e.msg);
		return NULL;
	}
	return s;
}

static bool moe_utf8_is_valid_for_test(const char *s, size_t n)
{
	char *c;
	size_t cl;
	moe_error e;
	if (moe_utf8_sanitize(s, n, &c, &cl, &e) < 0)
		return false;
	bool same = cl == n && memcmp(c, s, n) == 0;
	free(c);
	return same;
}

static bool ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Undo the corpus escapes into buf; returns the length. */
static size_t unescape(const char *s, char *buf)
{
	size_t n = 0;
	while (*s) {
		if (s[0] == '\\' && s[1]) {
			char c = s[1];
			s += 2;
			if (c == 'n')
				buf[n++] = '\n';
			else if (c == 'r')
				buf[n++] = '\r';
			else if (c == 't')
				buf[n++] = '\t';
			else if (c == 'x') {
				char hex[3] = {s[0], s[1], 0};
				buf[n++] = (char)strtoul(hex, NULL, 16);
				s += 2;
			} else
				buf[n++] = c;
		} else {
			buf[n++] = *s++;
		}
	}
	return n;
}

/* ---------------------------------------------------------- round trips */

static void test_round_trip(vocab *v, const char *name, char *corpus)
{
	int n = 0, bad = 0, crashed = 0;
	char *save = NULL;
	for (char *line = strtok_r(corpus, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		char buf[4096];
		size_t len = unescape(line, buf), ni, dl, wl;
		int32_t *ids = enc(v->t, buf, len, false, false, &ni);
		if (!ids && len) {
			crashed++;
			continue;
		}
		char *got = dec(v->t, ids, ni, MOE_DETOK_STRIP_SPACE, &dl);
		char *want;
		moe_error e;
		moe_utf8_sanitize(buf, len, &want, &wl, &e);
		if (!got || dl != wl || memcmp(got, want, wl) != 0) {
			if (bad < 3)
				tap_diag("%s: round trip of '%s' gave '%s'", name, line,
					 got ? got : "?");
			bad++;
		}
		n++;
		free(got);
		free(want);
		free(ids);
	}
	ok(n > 30 && bad == 0 && crashed == 0, "%s: decode(encode(x)) == x for %d corpus texts "
	   "(%d failed)", name, n, bad + crashed);
}

/* ------------------------------------------------------------ streaming */

/* Feed ids one at a time: every piece of output must be valid UTF-8 and
 * their concatenation the whole text. */
static void test_streaming(vocab *v, const char *name)
{
	const char *text = "🦙 llamas, 中文, ẞ and 😶‍🌫️!";
	size_t n, len = strlen(text);
	int32_t *ids = enc(v->t, text, len, false, false, &n);
	moe_detok *d;
	moe_error e;
	char out[256];
	size_t ol = 0;
	int held_back = 0, invalid = 0;
	moe_detok_new(&d, v->t, MOE_DETOK_STRIP_SPACE, &e);
	for (size_t i = 0; i < n; i++) {
		const char *s;
		size_t sl, pl;
		moe_detok_push(d, ids[i], &s, &sl, &e);
		moe_tokenizer_piece(v->t, ids[i], false, &pl);
		if (pl && sl == 0)
			held_back++;
		/* a piece may also be output without its held-back tail */
		char *chk;
		size_t cl;
		moe_utf8_sanitize(s, sl, &chk, &cl, &e);
		if (cl != sl || memcmp(chk, s, sl) != 0)
			invalid++;
		free(chk);
		memcpy(out + ol, s, sl);
		ol += sl;
	}
	const char *s;
	size_t sl;
	moe_detok_flush(d, &s, &sl);
	memcpy(out + ol, s, sl);
	ol += sl;
	ok(invalid == 0 && ol == len && memcmp(out, text, len) == 0 && held_back > 0,
	   "%s: streaming detokenisation (%zu tokens, %d held back, %d invalid pieces)", name, n,
	   held_back, invalid);
	/* A stream cut inside a character ends with U+FFFD per held byte:
	 * find a token standing for the first bytes of a 4-byte character. */
	int32_t cut = -1;
	size_t pl = 0;
	for (uint32_t i = 0; i < moe_tokenizer_n_tokens(v->t) && cut < 0; i++) {
		const char *p = moe_tokenizer_piece(v->t, (int32_t)i, false, &pl);
		if (pl >= 1 && pl <= 3 && (unsigned char)p[0] == 0xF0 &&
		    (pl < 2 || ((unsigned char)p[1] >= 0x90 && (unsigned char)p[1] <= 0xBF)) &&
		    (pl < 3 || ((unsigned char)p[2] & 0xC0) == 0x80))
			cut = (int32_t)i;
	}
	if (cut >= 0) {
		const char *o;
		size_t olen;
		moe_detok_push(d, cut, &o, &olen, &e);
		is_int(olen, 0, "%s: a partial character is held back", name);
		moe_detok_flush(d, &o, &olen);
		is_int(olen, 3 * pl, "%s: flush turns %zu held bytes into U+FFFD", name, pl);
	} else {
		ok(0, "%s: no token holds a partial 4-byte character", name);
	}
	moe_detok_free(d);
	free(ids);
}

/* ------------------------------------------------------- special tokens */

static void test_specials(void)
{
	vocab v;
	size_t n, n2, n3;
	int32_t *ids;

	/* llama-spm: "Hello world" is 15043 3186 (a test vector). */
	if (vocab_open(&v, "llama-spm") == 0) {
		ids = enc(v.t, "Hello world", 11, true, false, &n);
		ok(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186,
		   "llama-spm: add_special puts BOS (1) first, no EOS");
		free(ids);
		ids = enc(v.t, "<s>Hello world", 14, false, true, &n);
		ok(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186,
		   "llama-spm: parse_special turns \"<s>\" into BOS and prefixes a space after it");
		free(ids);
		ids = enc(v.t, "<s>Hello world", 14, false, false, &n);
		ok(n > 3 && ids[0] != 1, "llama-spm: without parse_special \"<s>\" is plain text");
		size_t dl;
		char *txt = dec(v.t, ids, n, MOE_DETOK_STRIP_SPACE, &dl);
		is_str(txt, "<s>Hello world", "llama-spm: ... and decodes back to itself");
		free(txt);
		free(ids);
		int32_t seq[] = {1, 15043, 3186, 2};
		txt = dec(v.t, seq, 4, 0, &dl);
		is_str(txt, " Hello world", "llama-spm: control tokens are silent when decoding");
		free(txt);
		txt = dec(v.t, seq, 4, MOE_DETOK_SPECIAL, &dl);
		is_str(txt, "<s> Hello world</s>",
		       "llama-spm: ... and shown with MOE_DETOK_SPECIAL");
		free(txt);
		ok(moe_tokenizer_is_eog(v.t, 2) && !moe_tokenizer_is_eog(v.t, 1),
		   "llama-spm: EOS ends generation, BOS does not");
		moe_error e;
		int32_t bad = 32000;
		char *s;
		size_t sl;
		ok(moe_tokenizer_decode(v.t, &bad, 1, 0, &s, &sl, &e) == MOE_EINVAL,
		   "llama-spm: decoding an id out of range fails: %s", e.msg);
		vocab_close(&v);
	}

	/* phi-3: "</s>" is a user-defined token (always matched) that strips
	 * the whitespace after it; chat tokens are control tokens. */
	if (vocab_open(&v, "phi-3") == 0) {
		int32_t *a = enc(v.t, "a", 1, false, false, &n2);
		int32_t *b = enc(v.t, "b", 1, false, false, &n3);
		ids = enc(v.t, "a</s>  b", 8, false, false, &n);
		ok(n == n2 + 1 + n3 && ids[0] == a[0] && ids[n2] == 2 && ids[n2 + 1] == b[0],
		   "phi-3: user-defined \"</s>\" is matched without parse_special, space after "
		   "it stripped");
		free(ids);
		const char *chat = "<|user|>\nHi<|end|>\n<|assistant|>\n";
		int32_t *hi = enc(v.t, "Hi", 2, false, false, &n2);
		ids = enc(v.t, chat, strlen(chat), false, true, &n);
		ok(n == n2 + 3 && ids[0] == 32010 && ids[n2 + 1] == 32007 && ids[n2 + 2] == 32001 &&
		   ids_eq(ids + 1, n2, hi, n2), "phi-3: chat tokens parsed, newlines after them "
		   "stripped (rstrip)");
		free(ids);
		ids = enc(v.t, chat, strlen(chat), false, false, &n);
		bool none = true;
		for (size_t i = 0; i < n; i++)
			none &= ids[i] < 32000;
		ok(none, "phi-3: without parse_special no chat token appears");
		ok(moe_tokenizer_is_eog(v.t, 32007) && moe_tokenizer_is_eog(v.t, 32000) &&
		   moe_tokenizer_special(v.t, MOE_SPECIAL_EOT) == 32007,
		   "phi-3: <|end|> is the end-of-turn token");
		free(ids);
		free(hi);
		free(a);
		free(b);
		vocab_close(&v);
	}

	/* gpt-2 has no BOS to add; <|endoftext|> is control and EOG. */
	if (vocab_open(&v, "gpt-2") == 0) {
		ids = enc(v.t, "Hello world", 11, true, false, &n);
		ok(n == 2 && ids[0] == 15496 && ids[1] == 995, "gpt-2: add_special adds nothing");
		free(ids);
		ids = enc(v.t, "a<|endoftext|>b", 15, false, true, &n);
		ok(n == 3 && ids[1] == 50256, "gpt-2: parse_special finds <|endoftext|>");
		free(ids);
		ids = enc(v.t, "a<|endoftext|>b", 15, false, false, &n);
		ok(n > 3, "gpt-2: without parse_special it is text");
		free(ids);
		ok(moe_tokenizer_is_eog(v.t, 50256), "gpt-2: <|endoftext|> ends generation");
		vocab_close(&v);
	}

	/* deepseek-llm adds BOS; its byte characters missing from the
	 * base vocabulary are user-defined tokens matched in text. */
	if (vocab_open(&v, "deepseek-llm") == 0) {
		ids = enc(v.t, "Hello", 5, true, false, &n);
		ok(n >= 2 && ids[0] == 100000, "deepseek-llm: add_special puts BOS (100000) first");
		free(ids);
		ids = enc(v.t, "\xc3\xb8", 2, false, false, &n);
		ok(n == 1 && ids[0] == 100002, "deepseek-llm: user-defined token matched in text");
		free(ids);
		vocab_close(&v);
	}
}

/* ------------------------------------------------------- HF equivalence */

static void test_hf(const char *name, char *corpus_copy)
{
	char dir[256], cmd[8192], path[4400];
	const char *py = getenv("PYTHON3") ? getenv("PYTHON3") : "/usr/bin/python3";
	vocab v;
	snprintf(dir, sizeof dir, "/tmp/t-tokenizer-hf.%d.%s", (int)getpid(), name);
	snprintf(cmd, sizeof cmd, "top_srcdir='%s' '%s' '%s/tests/unit/vocab-to-hf.py' "
		 "'%s/vocab/ggml-vocab-%s.gguf' '%s'", srcdir, py, srcdir, shared, name, dir);
	if (system(cmd) != 0) {
		ok(0, "%s: tokenizer.json written by scripts/moegen", name);
		return;
	}
	size_t l1, l2;
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	char *tj = slurp(path, &l1);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	char *tc = slurp(path, &l2);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		tap_diag("could not remove %s", dir);
	if (!tj || !tc || vocab_open(&v, name) < 0) {
		ok(0, "%s: HF files and GGUF readable", name);
		free(tj);
		free(tc);
		return;
	}
	moe_arena a;
	moe_vocab_data hd;
	moe_error e = {0};
	moe_arena_init(&a, 0);
	int rc = moe_vocab_data_from_hf(&hd, tj, tc, &a, &e);
	ok(rc == 0, "%s: moe_vocab_data_from_hf: %s", name, rc ? e.msg : "ok");
	if (rc == 0) {
		char why[512];
		/* SentencePiece scores are not in tokenizer.json (derived). */
		bool spm = v.vd.model == MOE_VOCAB_SPM;
		bool eq = moe_vocab_data_equal(&v.vd, &hd, spm, why, sizeof why);
		ok(eq, "%s: from_hf == from_gguf%s%s%s", name, spm ? " (except scores)" : "",
		   eq ? "" : ": ", why);
		/* ... and they tokenize alike: vectors and corpus. */
		moe_tokenizer *ht;
		if (moe_tokenizer_from_data(&ht, &hd, &e) == 0) {
			snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", shared,
				 name);
			size_t il;
			char *inp = slurp(path, &il);
			int n = 0, bad = 0;
			char *save = NULL;
			/* every line of the vectors and of the corpus */
			for (int pass = 0; pass < 2; pass++) {
				char *src = pass ? corpus_copy : inp;
				for (char *line = strtok_r(src, "\n", &save); line;
				     line = strtok_r(NULL, "\n", &save)) {
					char buf[4096];
					size_t len = pass ? unescape(line, buf) : strlen(line), na,
					       nb;
					const char *txt = pass ? buf : line;
					int32_t *ia = enc(v.t, txt, len, true, false, &na);
					int32_t *ib = enc(ht, txt, len, true, false, &nb);
					bad += !ids_eq(ia, na, ib, nb);
					n++;
					free(ia);
					free(ib);
				}
			}
			ok(n > 50 && bad == 0, "%s: HF and GGUF tokenizers agree on %d texts "
			   "(%d differ)", name, n, bad);
			free(inp);
			moe_tokenizer_free(ht);
		} else {
			ok(0, "%s: tokenizer from HF data: %s", name, e.msg);
		}
	}
	moe_arena_free(&a);
	vocab_close(&v);
	free(tj);
	free(tc);
}

/* ---------------------------------------------------------- UTH round trip */

/* Write the vocabulary as moe-convert does, read it back: same data, same
 * tokens for the test vectors. */
static void test_uth(const char *name)
{
	char path[256];
	vocab v;
	moe_error e = {0};
	moe_uth_writer *w = NULL;
	moe_uth *u = NULL;
	moe_out o;
	json_t *meta = NULL, *tok = NULL;
	char *js = NULL;

	if (vocab_open(&v, name) < 0) {
		ok(0, "%s: loads", name);
		return;
	}
	snprintf(path, sizeof path, "/tmp/t-tokenizer.%d.%s.uth", (int)getpid(), name);
	int rc = moe_uth_writer_new(&w, &e);
	if (rc == 0)
		rc = moe_vocab_data_add_tensors(&v.vd, w, &e);
	if (rc == 0)
		rc = moe_vocab_data_to_json(&v.vd, &tok, &e);
	if (rc == 0) {
		meta = json_object();
		json_object_set_new(meta, "tokenizer", tok);
		json_object_set_new(meta, "chat_template", v.vd.chat_template
					   ? json_string(v.vd.chat_template) : json_null());
		js = json_dumps(meta, JSON_COMPACT);
		rc = moe_uth_writer_set_meta(w, js, strlen(js), &e);
	}
	if (rc == 0) {
		moe_uth_writer_set_flags(w, MOE_UTH_FLAG_VOCAB_ONLY);
		rc = moe_out_open(&o, path, &e);
		if (rc == 0 && (rc = moe_uth_writer_write(w, &o, &e)) == 0)
			rc = moe_out_commit(&o, &e);
		else if (rc == 0)
			moe_out_abort(&o);
	}
	ok(rc == 0, "%s: vocabulary written to a UTH file%s%s", name, rc ? ": " : "", e.msg);
	moe_uth_writer_free(w);
	free(js);
	json_decref(meta);
	if (rc == 0 && (rc = moe_uth_open(&u, path, &e)) == 0) {
		moe_arena a;
		moe_vocab_data ud;
		moe_arena_init(&a, 0);
		rc = moe_vocab_data_from_uth(&ud, u, &a, &e);
		char why[512] = "";
		ok(rc == 0 && moe_vocab_data_equal(&v.vd, &ud, false, why, sizeof why),
		   "%s: read back equal (tokens, scores, types, flags, merges, settings, chat "
		   "template)%s%s", name, rc ? e.msg : "", why);
		moe_arena_free(&a);
		moe_tokenizer *t;
		rc = moe_tokenizer_load(&t, u, &e);
		if (rc == 0) {
			const char *texts[] = {"Hello world", " this is 🦙.cpp",
					       "3333333 \n\n\t ' era", "<s>\xc3\xb8 </s> x"};
			int same = 0;
			for (int k = 0; k < 4; k++) {
				size_t na, nb;
				int32_t *ia = enc(v.t, texts[k], strlen(texts[k]), true, true, &na);
				int32_t *ib = enc(t, texts[k], strlen(texts[k]), true, true, &nb);
				same += ids_eq(ia, na, ib, nb);
				free(ia);
				free(ib);
			}
			is_int(same, 4, "%s: the loaded tokenizer encodes alike", name);
			moe_tokenizer_free(t);
		} else {
			ok(0, "%s: moe_tokenizer_load: %s", name, e.msg);
		}
		moe_uth_close(u);
	} else if (rc == 0) {
		ok(0, "%s: UTH opens: %s", name, e.msg);
	}
	unlink(path);
	vocab_close(&v);
}

/* ------------------------------------------------------------ robustness */

static void test_garbage(void)
{
	vocab v;
	uint32_t r = 42;
	int fails = 0;
	for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
		if (vocab_open(&v, vocabs[i]) < 0)
			continue;
		/* Random bytes, biased towards UTF-8 lead/continuation bytes,
		 * spaces and '<' (special-token starts). */
		for (int round = 0; round < 200; round++) {
			char buf[512];
			size_t len = (r >> 7) % sizeof buf;
			for (size_t k = 0; k < len; k++) {
				r = r * 1664525u + 1013904223u;
				unsigned x = r >> 24;
				buf[k] = (char)(x < 40    ? ' '
						: x < 60  ? '<'
						: x < 100 ? 0x80 | (x & 0x3F)
						: x < 130 ? 0xE0 | (x & 0x1F)
							  : x);
			}
			size_t n, dl;
			int32_t *ids = enc(v.t, buf, len, round & 1, round & 2, &n);
			if (len && !ids) {
				fails++;
				continue;
			}
			char *back =
				dec(v.t, ids, n, MOE_DETOK_STRIP_SPACE | MOE_DETOK_SPECIAL, &dl);
			fails += !back;
			free(back);
			free(ids);
		}
		/* Random ids: decoding never fails for ids in range. */
		moe_detok *d;
		moe_error e;
		moe_detok_new(&d, v.t, 0, &e);
		for (int k = 0; k < 5000; k++) {
			r = r * 1664525u + 1013904223u;
			const char *s;
			size_t sl;
			fails += moe_detok_push(d, (int32_t)(r % moe_tokenizer_n_tokens(v.t)), &s,
						&sl, &e) != 0;
			fails += !moe_utf8_is_valid_for_test(s, sl);
		}
		moe_detok_free(d);
		vocab_close(&v);
	}
	is_int(fails, 0, "random bytes encode and decode, random ids decode to valid UTF-8");

	moe_arena a;
	moe_vocab_data vd;
	moe_error e = {0};
	moe_arena_init(&a, 0);
	static const char *const bad[] = {
		"", "[]", "{\"model\": 3}", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
		"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
		"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [3]}, "
		"\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
	};
	int rejected = 0;
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
		rejected += moe_vocab_data_from_hf(&vd, bad[k], NULL, &a, &e) < 0;
	is_int(rejected, (int)(sizeof bad / sizeof bad[0]), "malformed tokenizer.json files are "
	       "rejected (last: %s)", e.msg);
	moe_arena_free(&a);
}

/* A Unigram score a float cannot hold (found by fuzz-tokenizer-json: it
 * became -inf, no segmentation then beat the Viterbi's floor, and encoding
 * walked back through unset links) is refused when the tokenizer.json is
 * read; a non-finite score from any other source when the tokenizer is
 * built. */
static void test_bad_scores(void)
{
	static const char good[] = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": "
				   "[[\"<unk>\", 0.0], [\"a\", -1.5], [\"b\", -2.5]]}}";
	static const char huge[] = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": "
				   "[[\"<unk>\", 0.0], [\"a\", -5e60], [\"b\", -2.5]]}}";
	moe_arena a;
	moe_vocab_data vd;
	moe_error e = {0};
	moe_arena_init(&a, 0);
	int rc = moe_vocab_data_from_hf(&vd, huge, NULL, &a, &e);
	ok(rc == MOE_EFORMAT && strstr(e.msg, "model.vocab[1]") && strstr(e.msg, "float"),
	   "a Unigram score of -5e60 is refused: %s", rc ? e.msg : "accepted");
	rc = moe_vocab_data_from_hf(&vd, good, NULL, &a, &e);
	ok(rc == 0, "the same vocabulary with finite scores reads: %s", rc ? e.msg : "ok");
	if (rc == 0) {
		moe_tokenizer *t;
		rc = moe_tokenizer_from_data(&t, &vd, &e);
		ok(rc == 0, "and builds a tokenizer: %s", rc ? e.msg : "ok");
		if (rc == 0)
			moe_tokenizer_free(t);
		float *scores = moe_arena_alloc(&a, vd.n_tokens * sizeof *scores, sizeof *scores);
		const float bad[] = {-INFINITY, NAN, INFINITY};
		int refused = 0;
		for (size_t k = 0; scores && k < sizeof bad / sizeof bad[0]; k++) {
			memcpy(scores, vd.scores, vd.n_tokens * sizeof *scores);
			scores[2] = bad[k];
			moe_vocab_data v2 = vd;
			v2.scores = scores;
			if (moe_tokenizer_from_data(&t, &v2, &e) == 0)
				moe_tokenizer_free(t);
			else
				refused += strstr(e.msg, "token 2: score is not a finite number") != NULL;
		}
		is_int(refused, 3, "scores of -inf, nan and inf are refused when building the "
		       "tokenizer (%s)", e.msg);
	}
	moe_arena_free(&a);
}

/* ------------------------------------------------------- pre-tokenizers */

/* A byte-level vocabulary: the 256 byte characters (token b = byte b), then
 * the results of a few merges.  "Ġ" is the stand-in for a space. */
static const char *const toy_merges[] = {
	"1 2", "12 3", "H e", "He l", "Hel l", "Hell o",
	"\xc4\xa0 W", "\xc4\xa0W o", "\xc4\xa0Wo r", "\xc4\xa0Wor l", "\xc4\xa0Worl d",
};
static const char *const toy_results[] = {
	"12", "123", "He", "Hel", "Hell", "Hello",
	"\xc4\xa0W", "\xc4\xa0Wo", "\xc4\xa0Wor", "\xc4\xa0Worl", "\xc4\xa0World",
};
#define N_TOY (sizeof toy_merges / sizeof toy_merges[0])

static int toy_vocab(moe_vocab_data *vd, const char *pre, moe_arena *a)
{
	uint32_t n = 256 + N_TOY;
	char *blob = moe_arena_alloc(a, 256 * 2 + 64 * N_TOY, 1);
	uint32_t *off = moe_arena_alloc(a, (n + 1) * sizeof *off, 4);
	int32_t *types = moe_arena_alloc(a, n * sizeof *types, 4);
	char *mblob = moe_arena_alloc(a, 64 * N_TOY, 1);
	uint32_t *moff = moe_arena_alloc(a, (N_TOY + 1) * sizeof *moff, 4);
	size_t p = 0, mp = 0;
	uint32_t next = 256;
	for (uint32_t b = 0; b < 256; b++) {
		/* GPT-2's stand-in characters, computed here independently:
		 * printable Latin-1 as itself, the others U+0100 on in order. */
		bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		uint32_t cp = printable ? b : next++;
		off[b] = (uint32_t)p;
		if (cp < 0x80) {
			blob[p++] = (char)cp;
		} else {
			blob[p++] = (char)(0xC0 | (cp >> 6));
			blob[p++] = (char)(0x80 | (cp & 0x3F));
		}
		types[b] = MOE_TOKEN_NORMAL;
	}
	for (size_t k = 0; k < N_TOY; k++) {
		off[256 + k] = (uint32_t)p;
		memcpy(blob + p, toy_results[k], strlen(toy_results[k]));
		p += strlen(toy_results[k]);
		types[256 + k] = MOE_TOKEN_NORMAL;
		moff[k] = (uint32_t)mp;
		memcpy(mblob + mp, toy_merges[k], strlen(toy_merges[k]));
		mp += strlen(toy_merges[k]);
	}
	off[n] = (uint32_t)p;
	moff[N_TOY] = (uint32_t)mp;
	memset(vd, 0, sizeof *vd);
	vd->model = MOE_VOCAB_BPE;
	vd->pre = pre;
	vd->n_tokens = n;
	vd->tokens = blob;
	vd->token_offsets = off;
	vd->types = types;
	vd->n_merges = N_TOY;
	vd->merges = mblob;
	vd->merge_offsets = moff;
	vd->bos_id = vd->eos_id = vd->eot_id = vd->eom_id = -1;
	vd->unk_id = vd->pad_id = vd->sep_id = -1;
	return 0;
}

/* Expected tokens of "Hello World 1234512", derived by hand from each
 * pre-tokenizer's regexes: words, then merges inside each word. */
static void test_pre_tokenizers(void)
{
	static const struct {
		const char *pre;
		const char *want; /* token strings, '|'-separated; "_" = "Ġ" */
	} cases[] = {
		/* " 1234512" is one word: 12 merges twice, then 123 */
		{"gpt-2", "Hello|_World|_|123|4|5|12"},
		{"olmo", "Hello|_World|_|123|4|5|12"},
		{"bloom", "Hello|_World|_|123|4|5|12"},
		/* digits as their own word ("\p{N}+"), space apart */
		{"deepseek-llm", "Hello|_World|_|123|4|5|12"},
		/* digits in threes ("\p{N}{1,3}" or [0-9]{3}) */
		{"llama3", "Hello|_World|_|123|4|5|1|2"},
		{"default", "Hello|_World|_|123|4|5|1|2"},
		{"falcon", "Hello|_World|_|123|4|5|1|2"},
		{"deepseek-v3", "Hello|_World|_|123|4|5|1|2"},
		/* one digit per word */
		{"qwen2", "Hello|_World|_|1|2|3|4|5|1|2"},
		{"starcoder", "Hello|_World|_|1|2|3|4|5|1|2"},
		{"refact", "Hello|_World|_|1|2|3|4|5|1|2"},
		{"deepseek-coder", "Hello|_World|_|1|2|3|4|5|1|2"},
		{"viking", "Hello|_World|_|1|2|3|4|5|1|2"},
		{"tekken", "Hello|_World|_|1|2|3|4|5|1|2"},
	};
	const char *text = "Hello World 1234512";
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		moe_arena a;
		moe_vocab_data vd;
		moe_tokenizer *t;
		moe_error e = {0};
		moe_arena_init(&a, 0);
		toy_vocab(&vd, cases[c].pre, &a);
		if (moe_tokenizer_from_data(&t, &vd, &e) < 0) {
			ok(0, "pre-tokenizer %s: %s", cases[c].pre, e.msg);
			moe_arena_free(&a);
			continue;
		}
		size_t n;
		int32_t *ids = enc(t, text, strlen(text), false, false, &n);
		char got[512] = "";
		for (size_t i = 0; i < n; i++) {
			size_t l;
			const char *s = moe_tokenizer_token_text(t, ids[i], &l);
			if (i)
				strcat(got, "|");
			if (l == 2 && memcmp(s, "\xc4\xa0", 2) == 0)
				strcat(got, "_");
			else if (l > 2 && memcmp(s, "\xc4\xa0", 2) == 0)
				strcat(got, "_"), strncat(got, s + 2, l - 2);
			else
				strncat(got, s, l);
		}
		is_str(got, cases[c].want, "pre-tokenizer %s splits as its regexes say", cases[c].pre);
		size_t dl;
		const char *texts[] = {"a\r\n\t b  , c!? 3.14 \xe4\xb8\xad\xe6\x96\x87 "
				       "\xd0\x9f\xd1\x80\xd0\xb8 \xf0\x9f\xa6\x99 x  ",
				       "  \n\n  A1b2C3 ... \xef\xbc\x81\xe3\x80\x82"};
		int rt = 0;
		for (int k = 0; k < 2; k++) {
			size_t m;
			int32_t *i2 = enc(t, texts[k], strlen(texts[k]), false, false, &m);
			char *back = dec(t, i2, m, 0, &dl);
			rt += back && strcmp(back, texts[k]) == 0;
			free(back);
			free(i2);
		}
		is_int(rt, 2, "pre-tokenizer %s keeps every byte", cases[c].pre);
		free(ids);
		moe_tokenizer_free(t);
		moe_arena_free(&a);
	}
	/* HF spellings of the same splits are recognised. */
	const char *hf_llama3[] = {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
				   "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
				   "\\s+(?!\\S)|\\s+"};
	const char *hf_ds[] = {"[\r\n]",
			       "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba"
			       "\xc6\xbc-\xc6\xbf\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3"
			       "\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf\xce\x86\xce\x88-\xce\x8a"
			       "\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81\xd2\x8a-"
			       "\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-"
			       "\xe1\x8f\xb5\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba"
			       "\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1\xb4\xab\xe1\xb5\xab-"
			       "\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95"
			       "\xe1\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-"
			       "\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b"
			       "\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4"
			       "\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-\xe1\xbf\x84"
			       "\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-"
			       "\xe1\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4"
			       "\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-"
			       "\xe2\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4"
			       "\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-"
			       "\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-"
			       "\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-"
			       "\xe2\xb1\xbb\xe2\xb1\xbe-\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae"
			       "\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad\xea\x9a\x80-"
			       "\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87"
			       "\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-"
			       "\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba"
			       "\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91\x8f"
			       "\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-\xf0\x90\x93\xbb"
			       "\xf0\x90\xb2\x80-\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2"
			       "\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
			       "\\s?[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e"
			       "\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+",
			       "\\s+$", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80"
			       "\xea\xb0\x80-\xed\x9f\xbf]+", "\\p{N}+"};
	is_str(moe_pre_recognise(hf_llama3, 1), "llama3", "HF's llama3 Split regex is recognised");
	is_str(moe_pre_recognise(hf_ds, 6), "deepseek-llm",
	       "DeepSeek LLM's Split regexes (literal characters) are recognised");
	const char *other[] = {"\\p{L}+"};
	ok(moe_pre_recognise(other, 1) == NULL, "an unknown regex is not recognised");
}

/* ------------------------------------------------------------ pipelines */

static void test_pipelines(void)
{
	char path[4200];
	size_t len;
	snprintf(path, sizeof path, "%s/tests/golden/tokenizer/pipelines.json", srcdir);
	char *text = slurp(path, &len);
	json_t *root = text ? json_loads(text, 0, NULL) : NULL;
	vocab v;
	if (!root || vocab_open(&v, "gpt-2") < 0) {
		ok(0, "pipelines.json and the gpt-2 vocabulary load");
		free(text);
		json_decref(root);
		return;
	}
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(root, "pipelines"), i, p) {
		const char *name = json_string_value(json_object_get(p, "name"));
		json_t *jn = json_object_get(p, "normalizer"), *jp = json_object_get(p, "pre_tokenizer");
		char *ns = json_is_null(jn) ? NULL : json_dumps(jn, JSON_COMPACT);
		char *ps = json_is_null(jp) ? NULL : json_dumps(jp, JSON_COMPACT);
		moe_vocab_data vd = v.vd;
		vd.normalizer = ns;
		vd.pre_tokenizer = ps;
		vd.ignore_merges_set = true;
		vd.ignore_merges = json_is_true(json_object_get(p, "ignore_merges"));
		moe_tokenizer *t;
		moe_error e = {0};
		if (moe_tokenizer_from_data(&t, &vd, &e) < 0) {
			ok(0, "%s: builds: %s", name, e.msg);
			free(ns);
			free(ps);
			continue;
		}
		int n = 0, bad = 0;
		size_t k;
		json_t *c;
		json_array_foreach(json_object_get(p, "cases"), k, c) {
			const char *txt = json_string_value(json_object_get(c, "text"));
			json_t *want = json_object_get(c, "ids");
			int32_t *ids;
			size_t nid;
			n++;
			if (moe_tokenizer_encode(t, txt, strlen(txt), false, false, &ids, &nid, &e) < 0) {
				bad++;
				continue;
			}
			bool same = nid == json_array_size(want);
			for (size_t j = 0; same && j < nid; j++)
				same = ids[j] == json_integer_value(json_array_get(want, j));
			if (!same) {
				char *g = format_ids(ids, nid);
				tap_diag("%s: \"%s\"\n#   got %s", name, txt, g);
				free(g);
			}
			bad += !same;
			free(ids);
		}
		ok(n >= 10 && bad == 0, "pipeline %s: %d texts as the reference (%d differ)", name, n,
		   bad);
		moe_tokenizer_free(t);
		free(ns);
		free(ps);
	}
	/* The pipeline survives the UTH metadata: to_json, then read back. */
	moe_vocab_data vd = v.vd;
	vd.normalizer = "{\"type\":\"NFC\"}";
	vd.pre_tokenizer = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}";
	json_t *meta;
	moe_error e = {0};
	ok(moe_vocab_data_to_json(&vd, &meta, &e) == 0 &&
	   json_is_object(json_object_get(meta, "normalizer")) &&
	   json_is_object(json_object_get(meta, "pre_tokenizer")),
	   "normalizer and pre_tokenizer are stored in the tokenizer metadata");
	json_decref(meta);
	/* Translation rule: class intersections and \h. */
	char *tr;
	ok(moe_regex_translate("[\\p{L}&&[^\\p{Han}]]+x", &tr) == 0 &&
	   strcmp(tr, "(?:(?![\\p{Han}])[\\p{L}])+x") == 0, "[X&&[^Y]] becomes (?:(?![Y])[X])");
	free(tr);
	ok(moe_regex_translate("[a-z&&[aeiou]]\\h", &tr) == 0 &&
	   strcmp(tr, "(?:(?=[aeiou])[a-z])[0-9A-Fa-f]") == 0, "[X&&[Y]] and \\h translated");
	free(tr);
	/* Kimi K2's split (class intersections) runs by name. */
	moe_vocab_data kd = v.vd;
	kd.pre = "kimi-k2";
	moe_tokenizer *kt;
	int rc = moe_tokenizer_from_data(&kt, &kd, &e);
	ok(rc == 0, "kimi-k2's pre-tokenizer compiles through the translation rule");
	if (rc == 0) {
		int32_t *ids;
		size_t nid;
		/* Han runs split from other letters: "abc" + "中文" */
		const char *s = "abc\xe4\xb8\xad\xe6\x96\x87";
		rc = moe_tokenizer_encode(kt, s, strlen(s), false, false, &ids, &nid, &e);
		size_t pl;
		const char *p0 = rc == 0 && nid ? moe_tokenizer_piece(kt, ids[0], false, &pl) : NULL;
		ok(rc == 0 && p0 && pl == 3 && memcmp(p0, "abc", 3) == 0,
		   "kimi-k2: Latin letters end before Han characters");
		if (rc == 0)
			free(ids);
		moe_tokenizer_free(kt);
	}
	/* Bad pipelines: errors naming what is wrong. */
	static const char *const bad_pipes[] = {
		"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"}",
		"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}",
		"{\"type\":\"UnicodeScripts\"}",
		"{\"type\":\"Sequence\"}",
		"[1, 2]",
		"{\"type\":\"Metaspace\",\"replacement\":\"\"}",
	};
	for (size_t b = 0; b < sizeof bad_pipes / sizeof bad_pipes[0]; b++) {
		moe_vocab_data bd = v.vd;
		bd.pre_tokenizer = bad_pipes[b];
		moe_tokenizer *bt = NULL;
		rc = moe_tokenizer_from_data(&bt, &bd, &e);
		ok(rc < 0 && !bt, "bad pre_tokenizer %zu refused: %s", b, e.msg);
	}
	static const char *const bad_norms[] = {
		"{\"type\":\"Precompiled2\"}",
		"{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"[\"},\"content\":\"x\"}",
		"{\"type\":\"Prepend\"}",
	};
	for (size_t b = 0; b < sizeof bad_norms / sizeof bad_norms[0]; b++) {
		moe_vocab_data bd = v.vd;
		bd.normalizer = bad_norms[b];
		moe_tokenizer *bt = NULL;
		rc = moe_tokenizer_from_data(&bt, &bd, &e);
		ok(rc < 0 && !bt, "bad normalizer %zu refused: %s", b, e.msg);
	}
	vocab_close(&v);
	json_decref(root);
	free(text);
}

/* ------------------------------------------------- Unigram and WordPiece */

/* tests/golden/tokenizer/{unigram,wordpiece}.json: a tokenizer.json and
 * reference ids (sentencepiece's own encoder for Unigram; the WordPiece
 * reference of scripts/gen-tokenizer-vectors). */
static void test_model_vectors(const char *file, moe_vocab_model want_model)
{
	char path[4200];
	size_t len;
	snprintf(path, sizeof path, "%s/tests/golden/tokenizer/%s", srcdir, file);
	char *text = slurp(path, &len);
	json_t *root = text ? json_loads(text, 0, NULL) : NULL;
	char *tj = root ? json_dumps(json_object_get(root, "tokenizer"), JSON_COMPACT) : NULL;
	if (!tj) {
		ok(0, "%s loads", file);
		free(text);
		json_decref(root);
		return;
	}
	moe_arena a;
	moe_vocab_data vd;
	moe_error e = {0};
	moe_tokenizer *t = NULL;
	moe_arena_init(&a, 0);
	int rc = moe_vocab_data_from_hf(&vd, tj, NULL, &a, &e);
	if (rc == 0)
		rc = moe_tokenizer_from_data(&t, &vd, &e);
	ok(rc == 0 && vd.model == want_model, "%s: tokenizer.json read as model '%s': %s", file,
	   moe_vocab_model_name(want_model), rc ? e.msg : "ok");
	if (rc == 0) {
		int n = 0, bad = 0, round = 0;
		size_t k;
		json_t *c;
		json_array_foreach(json_object_get(root, "cases"), k, c) {
			const char *txt = json_string_value(json_object_get(c, "text"));
			json_t *want = json_object_get(c, "ids");
			int32_t *ids;
			size_t nid;
			n++;
			if (moe_tokenizer_encode(t, txt, strlen(txt), false, false, &ids, &nid, &e) < 0) {
				tap_diag("%s: %s", file, e.msg);
				bad++;
				continue;
			}
			bool same = nid == json_array_size(want);
			for (size_t j = 0; same && j < nid; j++)
				same = ids[j] == json_integer_value(json_array_get(want, j));
			if (!same) {
				char *g = format_ids(ids, nid);
				tap_diag("%s: \"%s\"\n#   got %s", file, txt, g);
				free(g);
			}
			bad += !same;
			/* Unigram decodes back to the text when nothing is unknown. */
			char *back;
			size_t bl;
			bool has_unk = false;
			for (size_t j = 0; j < nid; j++)
				has_unk |= ids[j] == moe_tokenizer_special(t, MOE_SPECIAL_UNK);
			if (want_model == MOE_VOCAB_UGM && !has_unk &&
			    moe_tokenizer_decode(t, ids, nid, MOE_DETOK_STRIP_SPACE, &back, &bl, &e) == 0) {
				round += bl == strlen(txt) && memcmp(back, txt, bl) == 0;
				free(back);
			} else {
				round++;
			}
			free(ids);
		}
		ok(n >= 10 && bad == 0, "%s: %d texts give the reference ids (%d differ)", file, n,
		   bad);
		ok(round == n, "%s: decode(encode(x)) == x where no token is unknown", file);
		/* ... and the same after a UTH metadata round trip of the model
		 * name and pipeline. */
		json_t *meta;
		ok(moe_vocab_data_to_json(&vd, &meta, &e) == 0 &&
		   strcmp(json_string_value(json_object_get(meta, "model")),
			  moe_vocab_model_name(want_model)) == 0 &&
		   (want_model != MOE_VOCAB_WPM || json_is_object(json_object_get(meta, "normalizer"))),
		   "%s: model and pipeline in the UTH tokenizer metadata", file);
		json_decref(meta);
	}
	moe_tokenizer_free(t);
	moe_arena_free(&a);
	free(tj);
	free(text);
	json_decref(root);
}

/* Real files: ids written as floats (5.0), a tokenizer_config.json with
 * Python's int(1e30) in model_max_length; a non-integral id is refused. */
/* Precompiled normalizers: charsmaps compiled by python3-sentencepiece
 * (a rule set and its nmt_nfkc), against sentencepiece's own normalized
 * text (scripts/gen-tokenizer-vectors). */
static void test_precompiled(void)
{
	char path[4200];
	size_t len;
	snprintf(path, sizeof path, "%s/tests/golden/tokenizer/precompiled.json", srcdir);
	char *text = slurp(path, &len);
	json_t *root = text ? json_loads(text, 0, NULL) : NULL;
	json_t *maps = json_object_get(root, "maps"), *m;
	size_t i;
	ok(json_array_size(maps) == 2, "precompiled.json loads");
	json_array_foreach(maps, i, m) {
		const char *name = json_string_value(json_object_get(m, "name"));
		char *nj = json_dumps(json_object_get(m, "normalizer"), JSON_COMPACT);
		moe_normalizer *nm = NULL;
		moe_error e;
		int rc = moe_normalizer_from_json(&nm, nj, false, &e);
		ok(rc == 0, "%s: the charsmap is read", name);
		json_t *c;
		size_t k, same = 0, n = 0;
		json_array_foreach(json_object_get(m, "cases"), k, c) {
			const char *t = json_string_value(json_object_get(c, "text"));
			const char *want = json_string_value(json_object_get(c, "normalized"));
			moe_sbuf out = {0};
			n++;
			if (rc == 0 && moe_normalizer_run(nm, t, strlen(t), &out) == 0 &&
			    strcmp(out.p, want) == 0)
				same++;
			else
				tap_diag("%s: '%s' gave '%s', sentencepiece '%s'", name, t,
					 out.p ? out.p : "(error)", want);
			free(out.p);
		}
		ok(n >= 10 && same == n, "%s: %zu of %zu texts normalized as sentencepiece does",
		   name, same, n);
		moe_normalizer_free(nm);
		free(nj);
	}
	json_decref(root);
	free(text);
	/* Broken maps are refused, naming the field. */
	static const char *const bad[] = {
		"{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"AAAA\"}",
		"{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"!!!!\"}",
		"{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"/////wAAAAA=\"}",
		"{\"type\":\"Precompiled\",\"precompiled_charsmap\":7}",
	};
	for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
		moe_normalizer *nm = NULL;
		moe_error e;
		int rc = moe_normalizer_from_json(&nm, bad[b], false, &e);
		ok(rc < 0 && strstr(e.msg, "precompiled_charsmap"), "bad charsmap %zu: %s", b,
		   e.msg);
		moe_normalizer_free(nm);
	}
	/* A trie whose offsets point outside it: text is copied, no crash;
	 * an invalid byte becomes U+FFFD as in sentencepiece.  (Trie of one
	 * unit 0xFFFFFC00: offset far beyond the single unit.) */
	moe_normalizer *nm = NULL;
	moe_error e;
	int rc = moe_normalizer_from_json(
		&nm, "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"BAAAAAD8//8A\"}",
		false, &e);
	moe_sbuf out = {0};
	ok(rc == 0 && moe_normalizer_run(nm, "ab\xff" "c", 4, &out) == 0 &&
	   strcmp(out.p, "ab\xEF\xBF\xBD" "c") == 0, "a trie pointing outside itself is harmless");
	free(out.p);
	moe_normalizer_free(nm);
}

static void test_real_json(void)
{
	char path[4200];
	size_t len;
	snprintf(path, sizeof path, "%s/tests/golden/tokenizer/wordpiece.json", srcdir);
	char *text = slurp(path, &len);
	json_t *root = text ? json_loads(text, 0, NULL) : NULL;
	json_t *tj = root ? json_deep_copy(json_object_get(root, "tokenizer")) : NULL;
	if (!tj) {
		ok(0, "wordpiece.json loads");
		free(text);
		json_decref(root);
		return;
	}
	json_t *jvocab = json_object_get(json_object_get(tj, "model"), "vocab");
	const char *key;
	json_t *v;
	json_object_foreach(jvocab, key, v)
		json_object_set_new(jvocab, key, json_real((double)json_integer_value(v)));
	char *floats = json_dumps(tj, JSON_COMPACT);
	const char *cfg = "{\"model_max_length\": 1000000000000000019884624838656, "
			  "\"bos_token\": \"[CLS]\", \"add_bos_token\": true}";
	moe_arena a;
	moe_vocab_data vd;
	moe_error e = {0};
	moe_arena_init(&a, 0);
	int rc = moe_vocab_data_from_hf(&vd, floats, cfg, &a, &e);
	ok(rc == 0 && vd.bos_id == 2 && vd.add_bos,
	   "float ids and model_max_length = int(1e30) are read: %s", rc ? e.msg : "ok");
	moe_arena_free(&a);
	json_object_set_new(jvocab, "[UNK]", json_real(1.5));
	char *bad = json_dumps(tj, JSON_COMPACT);
	moe_arena_init(&a, 0);
	rc = moe_vocab_data_from_hf(&vd, bad, NULL, &a, &e);
	ok(rc == MOE_EFORMAT && strstr(e.msg, "[UNK]"), "an id of 1.5 is refused: %s", e.msg);
	moe_arena_free(&a);
	free(bad);
	free(floats);
	json_decref(tj);
	json_decref(root);
	free(text);
}

/* ----------------------------------------------------------------- bench */

/* Deterministic mixed text: English prose, code, numbers, whitespace runs,
 * Cyrillic, CJK, emoji. */
static char *mixed_text(size_t size)
{
	static const char *const parts[] = {
		"The quick brown fox jumps over the lazy dog. ",
		"Hello, world! ",
		"It's a test of the tokenizer's speed; ",
		"we'll see how it goes.\n",
		"int main(void) { return 0; }\n",
		"    for (i = 0; i < n; i++)\n\t\tsum += a[i];\n",
		"3.14159 2718281828 1234567890 ",
		"\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440! ",
		"\u6211\u60f3\u5728apple\u5de5\u4f5c ",
		"\U0001f680 \U0001f60a ",
		"   \n\n",
		"naïve café résumé ",
		"Mixture-of-Experts models route tokens to experts. ",
		"<html><body>x</body></html>\n",
	};
	char *s = malloc(size + 64);
	size_t n = 0;
	uint32_t r = 12345;
	while (n < size) {
		r = r * 1103515245u + 12345u;
		const char *p = parts[(r >> 16) % (sizeof parts / sizeof parts[0])];
		size_t l = strlen(p);
		if (n + l > size)
			break;
		memcpy(s + n, p, l);
		n += l;
	}
	s[n] = '\0';
	return s;
}

static int bench(double mb)
{
	size_t size = (size_t)(mb * 1024 * 1024);
	char *text = mixed_text(size);
	size = strlen(text);
	for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
		vocab v;
		if (vocab_open(&v, vocabs[i]) < 0)
			return 1;
		int32_t *ids;
		size_t n;
		moe_error e;
		double best = 1e9;
		for (int rep = 0; rep < 3; rep++) {
			double t0 = moe_time_now();
			if (moe_tokenizer_encode(v.t, text, size, false, false, &ids, &n, &e) < 0) {
				fprintf(stderr, "%s: %s\n", vocabs[i], e.msg);
				return 1;
			}
			double dt = moe_time_now() - t0;
			if (dt < best)
				best = dt;
			free(ids);
		}
		printf("%-14s %8.2f MB/s  %10.0f tokens/s  (%zu bytes -> %zu tokens, %.3f s)\n",
		       vocabs[i], size / best / 1e6, n / best, size, n, best);
		/* Adversarial inputs: one huge word, digit run, space run. */
		static const char fill[] = {'a', '7', ' ', '\n', '\xff'};
		for (size_t f = 0; f < sizeof fill; f++) {
			char *run = malloc(size);
			memset(run, fill[f], size);
			double t0 = moe_time_now();
			if (moe_tokenizer_encode(v.t, run, size, false, false, &ids, &n, &e) < 0)
				return 1;
			double dt = moe_time_now() - t0;
			printf("%-14s %8.2f MB/s  (%zu x 0x%02x -> %zu tokens)\n", "",
			       size / dt / 1e6, size, (unsigned char)fill[f], n);
			free(ids);
			free(run);
		}
		vocab_close(&v);
	}
	/* Every pre-tokenizer's regexes on adversarial text (toy vocabulary:
	 * this times the splitting, not merges). */
	static const char *const pres[] = {"gpt-2", "llama3", "qwen2", "deepseek-llm",
					   "deepseek-coder", "deepseek-v3", "falcon", "starcoder",
					   "default", "bloom", "viking", "tekken"};
	static const char *const fills[] = {" ", "a", "7", "\n", " \n", "!", "\xe4\xb8\xad"};
	for (size_t p = 0; p < sizeof pres / sizeof pres[0]; p++) {
		moe_arena a;
		moe_vocab_data vd;
		moe_tokenizer *t;
		moe_error e;
		moe_arena_init(&a, 0);
		toy_vocab(&vd, pres[p], &a);
		if (moe_tokenizer_from_data(&t, &vd, &e) < 0)
			return 1;
		double worst = 1e9;
		size_t wf = 0;
		for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
			size_t fl = strlen(fills[f]), n;
			char *run = malloc(size + 8);
			size_t len = 0;
			while (len + fl <= size) {
				memcpy(run + len, fills[f], fl);
				len += fl;
			}
			int32_t *ids;
			double t0 = moe_time_now();
			if (moe_tokenizer_encode(t, run, len, false, false, &ids, &n, &e) < 0) {
				fprintf(stderr, "%s: %s\n", pres[p], e.msg);
				return 1;
			}
			double mbs = len / (moe_time_now() - t0) / 1e6;
			if (mbs < worst)
				worst = mbs, wf = f;
			free(ids);
			free(run);
		}
		static const char *const fill_names[] = {"spaces", "letters", "digits", "newlines",
							 "space+newline", "punctuation", "CJK"};
		printf("pre %-15s worst case %7.2f MB/s (1 MB of %s)\n", pres[p], worst,
		       fill_names[wf]);
		moe_tokenizer_free(t);
		moe_arena_free(&a);
	}
	free(text);
	return 0;
}

int main(int argc, char **argv)
{
	const char *env = getenv("MOE_SHARED");
	const char *top = getenv("top_srcdir");
	if (top)
		srcdir = top;
	if (env)
		snprintf(shared, sizeof shared, "%s", env);
	else
		snprintf(shared, sizeof shared, "%s/../shared", srcdir);
	char probe[4200];
	snprintf(probe, sizeof probe, "%s/vocab/ggml-vocab-gpt-2.gguf", shared);
	if (access(probe, R_OK) != 0)
		tap_skip_all("shared vocabularies not found (set MOE_SHARED)");
	if (argc > 1 && strcmp(argv[1], "--bench") == 0)
		return bench(argc > 2 ? atof(argv[2]) : 1.0);
	for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++)
		test_vectors(vocabs[i]);

	char cpath[4200];
	size_t clen;
	snprintf(cpath, sizeof cpath, "%s/tests/unit/tokenizer-corpus.txt", srcdir);
	char *corpus = slurp(cpath, &clen);
	if (!corpus)
		tap_skip_all("tests/unit/tokenizer-corpus.txt not found (set top_srcdir)");
	for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
		vocab v;
		if (vocab_open(&v, vocabs[i]) < 0) {
			ok(0, "%s: loads", vocabs[i]);
			continue;
		}
		char *copy = strdup(corpus);
		test_round_trip(&v, vocabs[i], copy);
		free(copy);
		test_streaming(&v, vocabs[i]);
		vocab_close(&v);
	}
	test_specials();
	test_pre_tokenizers();
	test_pipelines();
	test_model_vectors("unigram.json", MOE_VOCAB_UGM);
	test_model_vectors("wordpiece.json", MOE_VOCAB_WPM);
	test_precompiled();
	test_real_json();
	for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++)
		test_uth(vocabs[i]);
	test_garbage();
	test_bad_scores();
	static const char *const hf[] = {"gpt-2", "llama-spm"};
	for (size_t i = 0; i < 2; i++) {
		char *copy = strdup(corpus);
		test_hf(hf[i], copy);
		free(copy);
	}
	free(corpus);
	return tap_done();
}
