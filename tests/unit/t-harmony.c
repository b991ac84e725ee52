/* t-harmony — gpt-oss's harmony format: the streaming parser (every split
 * of the text into two chunks, and byte by byte, gives the same channels),
 * and a harmony vocabulary (markers printed, <|return|>/<|call|> end the
 * turn, <|end|> does not) decoding a fixed token stream.
 *
 * The expected channel contents are written from the format's definition
 * (the message layout "<|start|>ROLE<|channel|>C<|message|>TEXT<|end|>"),
 * not taken from the code's output.
 */
#include <config.h>
#include "tap.h"
#include "text.h"
#include "text/text_int.h" /* moe_sbuf */
#include "serve/serve_int.h" /* serve_reply_* (lib/serve/reply.c) */

#include <stdlib.h>
#include <string.h>

typedef struct {
	moe_sbuf ch[4];
	int calls;
} sink;

static int collect(void *user, moe_harmony_channel ch, const char *text, size_t len)
{
	sink *s = user;
	s->calls++;
	return moe_sbuf_add(&s->ch[ch], text, len);
}

static void sink_free(sink *s)
{
	for (int i = 0; i < 4; i++)
		free(s->ch[i].p);
	memset(s, 0, sizeof *s);
}

static bool sink_is(const sink *s, const char *const want[4])
{
	for (int i = 0; i < 4; i++) {
		size_t n = strlen(want[i]);
		if (s->ch[i].len != n || (n && memcmp(s->ch[i].p, want[i], n) != 0))
			return false;
	}
	return true;
}

/* Parse text in chunks [0,cut) and [cut,n), or byte by byte (cut < 0). */
static bool parse(const char *text, long cut, const char *const want[4])
{
	moe_harmony *h;
	moe_error e;
	sink s = {0};
	size_t n = strlen(text);
	if (moe_harmony_new(&h, &e) < 0)
		return false;
	int rc = 0;
	if (cut < 0) {
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = moe_harmony_feed(h, text + i, 1, collect, &s);
	} else {
		rc = moe_harmony_feed(h, text, (size_t)cut, collect, &s);
		if (rc == 0)
			rc = moe_harmony_feed(h, text + cut, n - (size_t)cut, collect, &s);
	}
	if (rc == 0)
		rc = moe_harmony_finish(h, collect, &s);
	bool good = rc == 0 && sink_is(&s, want);
	if (!good)
		tap_diag("cut %ld: final '%.*s' analysis '%.*s' commentary '%.*s' other '%.*s'", cut,
			 (int)s.ch[0].len, s.ch[0].p ? s.ch[0].p : "", (int)s.ch[1].len,
			 s.ch[1].p ? s.ch[1].p : "", (int)s.ch[2].len, s.ch[2].p ? s.ch[2].p : "",
			 (int)s.ch[3].len, s.ch[3].p ? s.ch[3].p : "");
	sink_free(&s);
	moe_harmony_free(h);
	return good;
}

static void test_parser(void)
{
	static const struct {
		const char *name, *text, *want[4]; /* final, analysis, commentary, other */
	} cases[] = {
		{"analysis then final",
		 "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant"
		 "<|channel|>final<|message|>2 + 2 = 4.<|return|>",
		 {"2 + 2 = 4.", "User asks 2+2. Easy.", "", ""}},
		{"a tool call on the commentary channel",
		 "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
		 "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}"
		 "<|call|>",
		 {"", "Need weather.", "{\"city\":\"Paris\"}", ""}},
		{"'<' and marker-like text inside content",
		 "<|channel|>final<|message|>a < b, <|x|> and <|en d|> stay; <| too",
		 {"a < b, <|x|> and <|en d|> stay; <| too", "", "", ""}},
		{"a message without a channel is the answer",
		 "<|message|>plain<|end|>", {"plain", "", "", ""}},
		{"an unknown channel", "<|channel|>scratch<|message|>s<|end|><|start|>assistant"
		 "<|channel|>final<|message|>f", {"f", "", "", "s"}},
		{"text that is not harmony at all", "Hello there", {"Hello there", "", "", ""}},
		{"text after the end of a message",
		 "<|channel|>final<|message|>A<|end|> tail", {"A tail", "", "", ""}},
		{"multibyte content", "<|channel|>analysis<|message|>caf\xc3\xa9 \xe2\x86\x92"
		 "<|end|><|start|>assistant<|channel|>final<|message|>\xe6\x97\xa5\xe6\x9c\xac",
		 {"\xe6\x97\xa5\xe6\x9c\xac", "caf\xc3\xa9 \xe2\x86\x92", "", ""}},
		{"a marker cut at the very end is not lost",
		 "<|channel|>final<|message|>x <|en", {"x <|en", "", "", ""}},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		size_t n = strlen(cases[c].text), bad = 0;
		for (long cut = -1; cut <= (long)n; cut++)
			bad += !parse(cases[c].text, cut, cases[c].want);
		ok(bad == 0, "%s: the same at all %zu splits and byte by byte", cases[c].name, n + 1);
	}
}

/* A byte-level BPE vocabulary: the 256 bytes (GPT-2's stand-in
 * characters), then the given special tokens as control tokens. */
static int vocab(moe_vocab_data *vd, const char *const *specials, size_t ns, moe_arena *a)
{
	uint32_t n = 256 + (uint32_t)ns;
	char *blob = moe_arena_alloc(a, 256 * 2 + 32 * ns + 1, 1);
	uint32_t *off = moe_arena_alloc(a, (n + 1) * sizeof *off, 4);
	int32_t *types = moe_arena_alloc(a, n * sizeof *types, 4);
	if (!blob || !off || !types)
		return -1;
	size_t p = 0;
	uint32_t next = 256;
	for (uint32_t b = 0; b < 256; b++) {
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
	for (size_t k = 0; k < ns; k++) {
		off[256 + k] = (uint32_t)p;
		memcpy(blob + p, specials[k], strlen(specials[k]));
		p += strlen(specials[k]);
		types[256 + k] = MOE_TOKEN_CONTROL;
	}
	off[n] = (uint32_t)p;
	memset(vd, 0, sizeof *vd);
	vd->model = MOE_VOCAB_BPE;
	vd->pre = "default";
	vd->n_tokens = n;
	vd->tokens = blob;
	vd->token_offsets = off;
	vd->types = types;
	vd->bos_id = vd->eos_id = vd->eom_id = -1;
	vd->unk_id = vd->pad_id = vd->sep_id = -1;
	vd->eot_id = -1;
	return 0;
}

static void test_vocabulary(void)
{
	/* gpt-oss's markers (ids here: 256 on, in this order) */
	static const char *const hm[] = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>",
					 "<|constrain|>", "<|return|>", "<|call|>",
					 "<|endoftext|>"};
	enum { START = 256, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL, EOT };
	moe_arena a = {0};
	moe_vocab_data vd;
	moe_tokenizer *t = NULL;
	moe_error e;
	int rc = vocab(&vd, hm, 8, &a);
	vd.eot_id = END; /* as GGUF files of gpt-oss may declare it */
	if (rc == 0)
		rc = moe_tokenizer_from_data(&t, &vd, &e);
	ok(rc == 0, "a harmony vocabulary loads");
	if (rc < 0) {
		moe_arena_free(&a);
		return;
	}
	ok(moe_tokenizer_is_harmony(t), "... and is recognised as harmony");
	ok(moe_tokenizer_is_eog(t, RETURN) && moe_tokenizer_is_eog(t, CALL) &&
	   moe_tokenizer_is_eog(t, EOT), "<|return|>, <|call|> and <|endoftext|> end the turn");
	ok(!moe_tokenizer_is_eog(t, END) && !moe_tokenizer_is_eog(t, START) &&
	   !moe_tokenizer_is_eog(t, CHANNEL), "<|end|> (even as the EOT id), <|start|> and "
	   "<|channel|> do not");

	/* A fixed token stream, as a model would generate it, decoded token
	 * by token (no MOE_DETOK_SPECIAL) and parsed, up to the first token
	 * that ends the turn. */
	static const char text[] =
		"<|channel|>analysis<|message|>Think: 6*7.<|end|><|start|>assistant"
		"<|channel|>final<|message|>It is 42.<|return|>ignored after the turn";
	int32_t *ids;
	size_t n;
	rc = moe_tokenizer_encode(t, text, strlen(text), false, true, &ids, &n, &e);
	ok(rc == 0 && n > 10 && ids[0] == CHANNEL, "the stream encodes with its markers as tokens");
	moe_detok *d = NULL;
	moe_harmony *h = NULL;
	sink s = {0};
	moe_sbuf raw = {0};
	if (rc == 0 && moe_detok_new(&d, t, 0, &e) == 0 && moe_harmony_new(&h, &e) == 0) {
		for (size_t i = 0; i < n && !moe_tokenizer_is_eog(t, ids[i]); i++) {
			const char *piece;
			size_t len;
			if (moe_detok_push(d, ids[i], &piece, &len, &e) < 0)
				break;
			moe_sbuf_add(&raw, piece, len);
			moe_harmony_feed(h, piece, len, collect, &s);
		}
		moe_harmony_finish(h, collect, &s);
	}
	static const char raw_want[] = "<|channel|>analysis<|message|>Think: 6*7.<|end|>"
				       "<|start|>assistant<|channel|>final<|message|>It is 42.";
	ok(raw.len == strlen(raw_want) && memcmp(raw.p, raw_want, raw.len) == 0,
	   "the detokeniser prints the markers without MOE_DETOK_SPECIAL");
	static const char *const want[4] = {"It is 42.", "Think: 6*7.", "", ""};
	ok(sink_is(&s, want), "final and analysis channels of the stream");

	/* moe-serve's split of the same text in pieces of 5 bytes: the answer
	 * and the reasoning, or no reasoning (think: false), or nothing split
	 * for a raw completion. */
	for (int show = 0; show < 2; show++) {
		serve_reply *sr = serve_reply_new(t, true, show);
		moe_sbuf c = {0}, rsn = {0};
		for (size_t i = 0; sr && i <= raw.len; i += 5) {
			const char *pa, *pb;
			size_t al, bl, step = raw.len - i < 5 ? raw.len - i : 5;
			serve_reply_split(sr, raw.p + i, step, i + 5 > raw.len, &pa, &al, &pb, &bl);
			moe_sbuf_add(&c, pa, al);
			moe_sbuf_add(&rsn, pb, bl);
		}
		ok(sr && c.len == 9 && !memcmp(c.p, "It is 42.", 9) &&
		   (show ? rsn.len == 11 && !memcmp(rsn.p, "Think: 6*7.", 11) : rsn.len == 0),
		   "moe-serve's reply split, reasoning %s", show ? "shown" : "hidden");
		free(c.p);
		free(rsn.p);
		serve_reply_free(sr);
	}
	ok(!serve_reply_new(t, false, true), "... not for a raw completion");
	free(raw.p);
	sink_free(&s);
	moe_harmony_free(h);
	moe_detok_free(d);
	free(ids);
	moe_tokenizer_free(t);

	/* Without <|channel|> the vocabulary is not harmony: <|end|> ends the
	 * turn as before and control tokens stay silent. */
	static const char *const plain[] = {"<|start|>", "<|end|>", "<|message|>", "<|return|>"};
	t = NULL;
	rc = vocab(&vd, plain, 4, &a);
	if (rc == 0)
		rc = moe_tokenizer_from_data(&t, &vd, &e);
	ok(rc == 0 && !serve_reply_new(t, true, true), "... nor for a vocabulary that is not harmony");
	size_t len = 1;
	ok(rc == 0 && !moe_tokenizer_is_harmony(t) && moe_tokenizer_is_eog(t, 257) &&
	   (moe_tokenizer_piece(t, 256, false, &len), len == 0),
	   "a vocabulary without <|channel|> is not harmony");
	moe_tokenizer_free(t);
	moe_arena_free(&a);
}

int main(void)
{
	test_parser();
	test_vocabulary();
	return tap_done();
}
