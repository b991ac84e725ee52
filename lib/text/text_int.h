/* text_int.h — what the files of lib/text share and nobody else needs: the
 * tokenizer struct, UTF-8 helpers, the string hash map, the pre-tokenizer
 * table and the per-algorithm encoders. */
#ifndef MOE_TEXT_INT_H
#define MOE_TEXT_INT_H

#include "text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ UTF-8 */

/* Length of the valid UTF-8 character at s[0..n), or 0 if the bytes there
 * do not start a valid character (strict: no overlongs, surrogates or
 * values above U+10FFFF).  *cp receives the code point when valid. */
size_t moe_utf8_valid_len(const unsigned char *s, size_t n, uint32_t *cp);
/* How many bytes a character starting with lead byte c claims, as
 * llama.cpp's unicode_len_utf8 (1 for continuation/invalid bytes). */
static inline size_t moe_utf8_lead_len(unsigned char c)
{
	static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1,
					      1, 1, 1, 1, 2, 2, 3, 4};
	return len[c >> 4];
}
/* True if s[0..n) is valid UTF-8. */
bool moe_utf8_is_valid(const char *s, size_t n);

/* A growable byte buffer. */
typedef struct moe_sbuf {
	char *p;
	size_t len, cap;
} moe_sbuf;
int moe_sbuf_reserve(moe_sbuf *b, size_t extra);
int moe_sbuf_add(moe_sbuf *b, const void *s, size_t n);
static inline int moe_sbuf_adds(moe_sbuf *b, const char *s)
{
	return moe_sbuf_add(b, s, strlen(s));
}
/* Append s with invalid UTF-8 replaced by U+FFFD; a valid but incomplete
 * sequence at the very end is left out and its length returned in *held
 * (when held is NULL it is replaced too). */
int moe_sbuf_add_sanitized(moe_sbuf *b, const char *s, size_t n, size_t *held);

/* -------------------------------------------------------- string hash map */

/* Open addressing over byte strings; values are uint32.  Keys are not
 * copied (they must outlive the map). */
typedef struct moe_strmap {
	uint32_t *slot_val; /* value + 1, 0 = empty */
	const char **slot_key;
	uint32_t *slot_len;
	uint32_t *slot_hash;
	uint32_t mask;
	uint32_t count;
} moe_strmap;

uint32_t moe_str_hash(const char *s, size_t n);
int moe_strmap_init(moe_strmap *m, size_t expected);
void moe_strmap_free(moe_strmap *m);
/* Insert or overwrite.  Returns 0 or MOE_ENOMEM. */
int moe_strmap_put(moe_strmap *m, const char *k, size_t n, uint32_t v);
/* Value or -1. */
int64_t moe_strmap_get(const moe_strmap *m, const char *k, size_t n);

/* ---------------------------------------------------------- pre-tokenizers */

#define MOE_PRE_MAX_REGEX 8

typedef struct moe_pre_def {
	const char *name;     /* canonical GGUF name */
	const char *aliases;  /* NUL-separated list ending with an empty string */
	const char *regex[MOE_PRE_MAX_REGEX]; /* applied in sequence; NULL-ended */
	bool ignore_merges;   /* a whole word that is a token wins (llama3) */
	int add_bos;          /* default add_bos for this pre (-1: model default) */
	const char *normalizer; /* its models' normalizer (tokenizer.json form) */
} moe_pre_def;

/* The definition for a pre-tokenizer name or alias, or NULL. */
const moe_pre_def *moe_pre_find(const char *name);
/* Name of the definition whose regex list equals regex[0..n) (as written
 * in llama.cpp or as HF tokenizer.json writes them; escapes and literal
 * characters compare equal), or NULL. */
const char *moe_pre_recognise(const char *const *regex, size_t n);
/* GPT-2's split pattern (what HF's ByteLevel with use_regex applies). */
const char *moe_pre_gpt2_regex(void);

/* ----------------------------------------- pipelines from tokenizer.json */

/* Pieces of text: spans of a work buffer (pretok.c). */
typedef struct moe_span {
	uint32_t off, len;
} moe_span;
typedef struct moe_pieces {
	moe_sbuf buf;
	moe_span *v;
	size_t n, cap;
} moe_pieces;
void moe_pieces_free(moe_pieces *ps);

typedef struct moe_pretok moe_pretok;
/* Compile a tokenizer.json "pre_tokenizer" (JSON text).  0, MOE_EFORMAT,
 * MOE_EUNSUPPORTED (an unknown type or a regex PCRE2 cannot take even
 * after translation) or MOE_ENOMEM. */
int moe_pretok_from_json(moe_pretok **out, const char *json, moe_error *e);
/* Split text into pieces (ps is reused across calls).  0, MOE_ENOMEM or
 * MOE_ERANGE (a regex limit). */
int moe_pretok_run(const moe_pretok *p, const char *text, size_t len, moe_pieces *ps);
void moe_pretok_free(moe_pretok *p);
/* The documented Oniguruma -> PCRE2 translation (class intersections,
 * \h); *out malloc'd.  0 or MOE_ENOMEM. */
int moe_regex_translate(const char *re, char **out);
/* Compile a pattern (regex, translated if PCRE2 refuses it as written, or a
 * literal string) with UTF/UCP; *code is a pcre2_code. */
int moe_regex_compile(const char *pat, bool literal, const char *what, void **code, bool *jit,
		      moe_error *e);

typedef struct moe_normalizer moe_normalizer;
/* Compile a tokenizer.json "normalizer" (JSON text); *out is NULL when it
 * does nothing.  With spm, Prepend and Replace(' ') are left to the
 * SentencePiece encoder.  0, MOE_EFORMAT, MOE_EUNSUPPORTED or MOE_ENOMEM. */
int moe_normalizer_from_json(moe_normalizer **out, const char *json, bool spm, moe_error *e);
/* Normalize text into *out (replaced; NUL-terminated).  0 or MOE_ENOMEM. */
int moe_normalizer_run(const moe_normalizer *nm, const char *text, size_t len, moe_sbuf *out);
void moe_normalizer_free(moe_normalizer *nm);

/* ---------------------------------------------------------------- tokenizer */

typedef struct moe_bpe_pair moe_bpe_pair;
typedef struct moe_pre_re moe_pre_re;

struct moe_tokenizer {
	moe_vocab_model model;
	const moe_pre_def *pre;
	uint32_t n_tokens;
	char *blob;              /* token strings, concatenated */
	uint32_t *off;           /* [n_tokens + 1] */
	float *scores;           /* [n_tokens] */
	uint8_t *types;          /* [n_tokens] */
	uint8_t *flags;          /* [n_tokens] */
	char *pblob;             /* pieces (decoded bytes), special = true */
	uint32_t *poff;          /* [n_tokens + 1] */
	int32_t special[MOE_SPECIAL_COUNT];
	bool add_bos, add_eos, add_space_prefix, ignore_merges;
	char *chat_template;
	uint32_t n_named;        /* named chat templates */
	char **named_names, **named_texts;
	uint8_t *eog;            /* [n_tokens] EOG_* bits (tokenizer.c) */
	bool harmony;            /* gpt-oss's harmony markers are present */
	moe_strmap tok_map;      /* token string -> id (last id wins) */

	/* Special-token matching: candidates in priority order (longest
	 * first), and a first-byte filter. */
	uint32_t n_spec;
	int32_t *spec_ids;       /* priority order */
	uint32_t *spec_rank;     /* [n_tokens]: position in spec_ids or ~0 */
	uint8_t spec_first[256]; /* some candidate starts with this byte */
	moe_strmap spec_map;     /* candidate text -> id */
	uint32_t spec_max_len, spec_min_len;

	/* SPM */
	int32_t byte_tok[256];   /* <0xNN> token (or single-byte token), -1 */
	bool spm_can_split;      /* no token contains "x▁" with x != ▁ */

	/* BPE: symbols are strings of the token/merge table ("entries"). */
	uint32_t n_ent;
	int32_t *ent_tok;        /* entry -> token id or -1 */
	moe_strmap ent_map;      /* string -> entry */
	int32_t byte_ent[256];   /* entry of the byte-level char of byte b */
	int32_t byte_ent_tok[256][2]; /* fallback tokens for byte b, -1 */
	moe_bpe_pair *pairs;     /* hash (left, right) -> (rank, result) */
	uint32_t pair_mask;
	moe_pre_re *re;          /* compiled pre-tokenizer regexes */
	moe_pretok *pretok;      /* pre-tokenizer from tokenizer.json (else re) */
	/* Unigram / WordPiece */
	uint32_t ugm_max_len;    /* longest token, bytes */
	double ugm_unk_score;    /* min score - 10 */
	bool ugm_byte_fallback;
	moe_normalizer *norm;    /* normalizer, or NULL */
	uint32_t n_re;
	moe_arena arena;         /* strings of entries that are not tokens */
};

/* A growable id vector. */
typedef struct moe_ids {
	int32_t *v;
	size_t n, cap;
} moe_ids;
int moe_ids_push(moe_ids *ids, int32_t id);

/* Encode one fragment of raw text (no special tokens inside). */
int moe_spm_encode(const moe_tokenizer *t, const char *text, size_t len, bool space_prefix,
		   moe_ids *out, moe_error *e);
int moe_bpe_encode(const moe_tokenizer *t, const char *text, size_t len, moe_ids *out,
		   moe_error *e);
/* Unigram and WordPiece (unigram.c): build after the common tables;
 * encode one raw fragment. */
int moe_ugm_wpm_build(moe_tokenizer *t, const moe_vocab_data *vd, moe_error *e);
int moe_ugm_wpm_encode(const moe_tokenizer *t, const char *text, size_t len, moe_ids *out,
		       moe_error *e);
/* Build/free the BPE tables and regexes of t (from merges). */
int moe_bpe_build(moe_tokenizer *t, const moe_vocab_data *vd, moe_error *e);
void moe_bpe_free(moe_tokenizer *t);

/* GPT-2's byte <-> unicode mapping: the UTF-8 text (1 or 2 bytes) of the
 * character that stands for byte b; and the byte for a code point, or -1. */
const char *moe_bpe_byte_char(unsigned b, size_t *len);
int moe_bpe_char_byte(uint32_t cp);

/* Shared by vocab.c and hf.c: llama.cpp's fix-ups applied after
 * extraction (end-of-turn detection, control overrides). */
void moe_vocab_fixup(moe_vocab_data *vd, int32_t *types);
/* Default flags for a model/pre when the source does not say. */
void moe_vocab_defaults(moe_vocab_data *vd);


/* A binary heap of TYPE, first element = the one BEFORE(a, b) puts first:
 * MOE_DEFINE_HEAP(name, TYPE, BEFORE) defines `name` ({v, n, cap}),
 * name_push (0 or MOE_ENOMEM) and name_pop (n must be > 0).  Both BPE
 * tokenizers merge the best pair first with one; a macro keeps the
 * comparison inlined in their hot loops. */
#define MOE_DEFINE_HEAP(NAME, TYPE, BEFORE)                                      \
	typedef struct NAME {                                                    \
		TYPE *v;                                                         \
		size_t n, cap;                                                   \
	} NAME;                                                                  \
	static int NAME##_push(NAME *h, TYPE x)                                  \
	{                                                                        \
		if (h->n == h->cap) {                                            \
			size_t cap = h->cap ? h->cap * 2 : 64;                   \
			TYPE *v = realloc(h->v, cap * sizeof *v);                \
			if (!v)                                                  \
				return MOE_ENOMEM;                               \
			h->v = v;                                                \
			h->cap = cap;                                            \
		}                                                                \
		size_t i = h->n++;                                               \
		while (i > 0) {                                                  \
			size_t p = (i - 1) / 2;                                  \
			if (!BEFORE(&x, &h->v[p]))                               \
				break;                                           \
			h->v[i] = h->v[p];                                       \
			i = p;                                                   \
		}                                                                \
		h->v[i] = x;                                                     \
		return 0;                                                        \
	}                                                                        \
	static TYPE NAME##_pop(NAME *h)                                          \
	{                                                                        \
		TYPE top = h->v[0], x = h->v[--h->n];                            \
		size_t i = 0, n = h->n;                                          \
		for (;;) {                                                       \
			size_t c = 2 * i + 1;                                    \
			if (c >= n)                                              \
				break;                                           \
			if (c + 1 < n && BEFORE(&h->v[c + 1], &h->v[c]))         \
				c++;                                             \
			if (!BEFORE(&h->v[c], &x))                               \
				break;                                           \
			h->v[i] = h->v[c];                                       \
			i = c;                                                   \
		}                                                                \
		if (n)                                                           \
			h->v[i] = x;                                             \
		return top;                                                      \
	}

#endif
