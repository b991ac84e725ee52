/* tokenizer.c — building a tokenizer from a moe_vocab_data, splitting text
 * at special tokens, and dispatching the raw pieces to the SentencePiece or
 * byte-level encoder; token pieces for decoding.
 *
 * Special tokens are found as llama.cpp does: candidates (control, user-
 * defined and unknown tokens; control and unknown only with parse_special)
 * are taken longest first, and each claims its leftmost non-overlapping
 * occurrences in the text not yet claimed by a longer one.  We collect all
 * occurrences in one pass over the text and resolve them in that priority
 * order, so the cost does not grow with the number of special tokens.
 */
#include <config.h>

#include "text_int.h"

#include <ctype.h>
#include <math.h>

int moe_ids_push(moe_ids *ids, int32_t id)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 256;
		int32_t *v = realloc(ids->v, cap * sizeof *v);
		if (!v)
			return MOE_ENOMEM;
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

/* ----------------------------------------------------------------- build */

/* Texts of tokens that end a turn (llama.cpp's end-of-generation list). */
/* t->eog bits: generating the token ends the turn; the token's text is
 * printed even without MOE_DETOK_SPECIAL (harmony's structure markers). */
enum { EOG_END = 1, EOG_PRINT = 2 };

/* gpt-oss's harmony markers (see moe_harmony_*): a vocabulary holding the
 * first five is a harmony vocabulary.  Then the markers are printed, a
 * turn ends at <|return|> or <|call|>, and <|end|> (in eog_texts, and
 * often the EOT id) only ends a message inside the turn. */
static void find_harmony(moe_tokenizer *t)
{
	static const char *const m[] = {"<|start|>", "<|message|>", "<|channel|>", "<|return|>",
					"<|end|>", "<|call|>", "<|constrain|>"};
	int64_t id[7];
	for (int k = 0; k < 7; k++)
		id[k] = moe_strmap_get(&t->tok_map, m[k], strlen(m[k]));
	for (int k = 0; k < 5; k++)
		if (id[k] < 0)
			return;
	t->harmony = true;
	for (int k = 0; k < 7; k++)
		if (id[k] >= 0)
			t->eog[id[k]] = (uint8_t)(EOG_PRINT | (k == 3 || k == 5 ? EOG_END : 0));
}

static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|eom_id|>", "<EOT>",
};

static bool is_special_type(int type)
{
	return type == MOE_TOKEN_CONTROL || type == MOE_TOKEN_USER_DEFINED ||
	       type == MOE_TOKEN_UNKNOWN;
}

/* Decoded bytes of token i (special = true); appended to b. */
static int build_piece(const moe_tokenizer *t, uint32_t i, moe_sbuf *b)
{
	const char *s = t->blob + t->off[i];
	size_t n = t->off[i + 1] - t->off[i];
	int type = t->types[i];

	if (is_special_type(type))
		return moe_sbuf_add(b, s, n);
	if (t->model == MOE_VOCAB_WPM) {
		/* "##x" continues a word; any other piece starts one. */
		if (type != MOE_TOKEN_NORMAL)
			return 0;
		if (n >= 2 && memcmp(s, "##", 2) == 0)
			return moe_sbuf_add(b, s + 2, n - 2);
		MOE_TRY(moe_sbuf_add(b, " ", 1));
		return moe_sbuf_add(b, s, n);
	}
	if (t->model == MOE_VOCAB_SPM || t->model == MOE_VOCAB_UGM) {
		if (type == MOE_TOKEN_NORMAL) {
			for (size_t k = 0; k < n; k++) {
				if (k + 3 <= n && memcmp(s + k, "\xE2\x96\x81", 3) == 0) {
					MOE_TRY(moe_sbuf_add(b, " ", 1));
					k += 2;
				} else {
					MOE_TRY(moe_sbuf_add(b, s + k, 1));
				}
			}
			return 0;
		}
		if (type == MOE_TOKEN_BYTE) {
			/* "<0xNN>": the byte NN. */
			unsigned v = 0;
			if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
			    isxdigit((unsigned char)s[3]) && isxdigit((unsigned char)s[4])) {
				char hex[3] = {s[3], s[4], 0};
				v = (unsigned)strtoul(hex, NULL, 16);
				char c = (char)v;
				return moe_sbuf_add(b, &c, 1);
			}
			return moe_sbuf_add(b, s, n);
		}
		return 0; /* unused/undefined: nothing, as llama.cpp */
	}
	if (t->model == MOE_VOCAB_BPE && type == MOE_TOKEN_NORMAL) {
		/* Each character stands for one byte; a character outside the
		 * mapping (a foreign vocabulary entry) is kept as it is. */
		size_t k = 0;
		while (k < n) {
			uint32_t cp;
			size_t cl = moe_utf8_valid_len((const unsigned char *)s + k, n - k, &cp);
			int byte = cl ? moe_bpe_char_byte(cp) : -1;
			if (byte >= 0) {
				char c = (char)byte;
				MOE_TRY(moe_sbuf_add(b, &c, 1));
			} else {
				if (!cl)
					cl = 1;
				MOE_TRY(moe_sbuf_add(b, s + k, cl));
			}
			k += cl;
		}
	}
	return 0;
}

static int cmp_spec(const void *pa, const void *pb, void *ctx)
{
	const moe_tokenizer *t = ctx;
	int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
	uint32_t la = t->off[a + 1] - t->off[a], lb = t->off[b + 1] - t->off[b];
	if (la != lb)
		return la > lb ? -1 : 1;
	return a < b ? -1 : a > b;
}

static int build_specials(moe_tokenizer *t, moe_error *e)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < t->n_tokens; i++)
		if (is_special_type(t->types[i]) && t->off[i + 1] > t->off[i])
			n++;
	t->spec_ids = malloc((n ? n : 1) * sizeof *t->spec_ids);
	t->spec_rank = malloc((size_t)t->n_tokens * sizeof *t->spec_rank + 1);
	if (!t->spec_ids || !t->spec_rank || moe_strmap_init(&t->spec_map, n) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (special tokens)");
	n = 0;
	for (uint32_t i = 0; i < t->n_tokens; i++)
		if (is_special_type(t->types[i]) && t->off[i + 1] > t->off[i])
			t->spec_ids[n++] = (int32_t)i;
	t->n_spec = n;
	qsort_r(t->spec_ids, n, sizeof *t->spec_ids, cmp_spec, t);
	memset(t->spec_rank, 0xFF, (size_t)t->n_tokens * sizeof *t->spec_rank);
	t->spec_min_len = UINT32_MAX;
	for (uint32_t k = 0; k < n; k++) {
		int32_t id = t->spec_ids[k];
		const char *s = t->blob + t->off[id];
		uint32_t len = t->off[id + 1] - t->off[id];
		t->spec_rank[id] = k;
		t->spec_first[(unsigned char)s[0]] = 1;
		if (len > t->spec_max_len)
			t->spec_max_len = len;
		if (len < t->spec_min_len)
			t->spec_min_len = len;
		/* Identical texts: the first in priority order is the one
		 * llama.cpp would find first. */
		if (moe_strmap_get(&t->spec_map, s, len) < 0 &&
		    moe_strmap_put(&t->spec_map, s, len, (uint32_t)id) < 0)
			return moe_err(e, MOE_ENOMEM, "out of memory (special tokens)");
	}
	return 0;
}

static int copy_vocab(moe_tokenizer *t, const moe_vocab_data *vd, moe_error *e)
{
	uint32_t n = vd->n_tokens;
	size_t blob = vd->token_offsets[n];

	t->blob = malloc(blob + 1);
	t->off = malloc(((size_t)n + 1) * sizeof *t->off);
	t->scores = calloc((size_t)n + 1, sizeof *t->scores);
	t->types = malloc((size_t)n + 1);
	t->flags = calloc((size_t)n + 1, 1);
	t->eog = calloc((size_t)n + 1, 1);
	if (!t->blob || !t->off || !t->scores || !t->types || !t->flags || !t->eog)
		return moe_err(e, MOE_ENOMEM, "out of memory (vocabulary of %" PRIu32 " tokens)",
			       n);
	memcpy(t->blob, vd->tokens, blob);
	t->blob[blob] = '\0';
	memcpy(t->off, vd->token_offsets, ((size_t)n + 1) * sizeof *t->off);
	for (uint32_t i = 0; i < n; i++) {
		if (t->off[i + 1] < t->off[i] || t->off[i + 1] > blob)
			return moe_err(e, MOE_EFORMAT, "vocabulary: token %" PRIu32
				       ": offsets not increasing", i);
		t->scores[i] = vd->scores ? vd->scores[i] : 0.0f;
		if (!isfinite(t->scores[i])) /* Viterbi and merge ranks need numbers */
			return moe_err(e, MOE_EFORMAT, "vocabulary: token %" PRIu32
				       ": score is not a finite number", i);
		int32_t ty = vd->types ? vd->types[i] : MOE_TOKEN_NORMAL;
		t->types[i] = (uint8_t)(ty >= 0 && ty <= MOE_TOKEN_BYTE ? ty : MOE_TOKEN_UNDEFINED);
		t->flags[i] = vd->flags ? vd->flags[i] : 0;
	}
	if (moe_strmap_init(&t->tok_map, n) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (token map)");
	for (uint32_t i = 0; i < n; i++)
		if (moe_strmap_put(&t->tok_map, t->blob + t->off[i], t->off[i + 1] - t->off[i],
				   i) < 0)
			return moe_err(e, MOE_ENOMEM, "out of memory (token map)");
	return 0;
}

static int check_special(const moe_vocab_data *vd, const char *what, int32_t id, moe_error *e)
{
	if (id < -1 || (id >= 0 && (uint32_t)id >= vd->n_tokens))
		return moe_err(e, MOE_EFORMAT, "vocabulary: %s %" PRId32
			       " out of range (%" PRIu32 " tokens)", what, id, vd->n_tokens);
	return 0;
}

static int build(moe_tokenizer *t, const moe_vocab_data *vd, moe_error *e)
{
	const int32_t sp[MOE_SPECIAL_COUNT] = {vd->bos_id, vd->eos_id, vd->eot_id, vd->eom_id,
					       vd->unk_id, vd->pad_id, vd->sep_id};
	static const char *const sp_names[MOE_SPECIAL_COUNT] = {"bos_id", "eos_id", "eot_id",
								"eom_id", "unk_id", "pad_id",
								"sep_id"};

	if (vd->model != MOE_VOCAB_NONE && vd->model != MOE_VOCAB_SPM &&
	    vd->model != MOE_VOCAB_BPE && vd->model != MOE_VOCAB_UGM && vd->model != MOE_VOCAB_WPM)
		return moe_err(e, MOE_EUNSUPPORTED, "vocabulary: unknown tokenizer model %d",
			       (int)vd->model);
	t->model = vd->model;
	t->n_tokens = vd->n_tokens;
	if (vd->model != MOE_VOCAB_NONE && vd->n_tokens == 0)
		return moe_err(e, MOE_EFORMAT, "vocabulary: no tokens");
	if (vd->token_offsets[0] != 0)
		return moe_err(e, MOE_EFORMAT, "vocabulary: first token offset is not 0");
	for (int k = 0; k < MOE_SPECIAL_COUNT; k++) {
		MOE_TRY(check_special(vd, sp_names[k], sp[k], e));
		t->special[k] = sp[k];
	}
	t->add_bos = vd->add_bos;
	t->add_eos = vd->add_eos;
	t->add_space_prefix = vd->add_space_prefix;
	if (vd->chat_template && !(t->chat_template = strdup(vd->chat_template)))
		return moe_err(e, MOE_ENOMEM, "out of memory (chat template)");
	if (vd->n_chat_templates) {
		t->named_names = calloc(vd->n_chat_templates, sizeof *t->named_names);
		t->named_texts = calloc(vd->n_chat_templates, sizeof *t->named_texts);
		if (!t->named_names || !t->named_texts)
			return moe_err(e, MOE_ENOMEM, "out of memory (chat template)");
		for (uint32_t i = 0; i < vd->n_chat_templates; i++, t->n_named++)
			if (!(t->named_names[i] = strdup(vd->chat_template_names[i])) ||
			    !(t->named_texts[i] = strdup(vd->chat_template_texts[i]))) {
				free(t->named_names[i]);
				return moe_err(e, MOE_ENOMEM, "out of memory (chat template)");
			}
	}
	MOE_TRY(copy_vocab(t, vd, e));

	/* Pieces, the end-of-turn set and the special-token matcher. */
	moe_sbuf pb = {0};
	t->poff = malloc(((size_t)t->n_tokens + 1) * sizeof *t->poff);
	if (!t->poff || moe_sbuf_reserve(&pb, (size_t)t->off[t->n_tokens] + 16) < 0) {
		free(pb.p);
		return moe_err(e, MOE_ENOMEM, "out of memory (token pieces)");
	}
	for (uint32_t i = 0; i < t->n_tokens; i++) {
		t->poff[i] = (uint32_t)pb.len;
		if (build_piece(t, i, &pb) < 0 || pb.len > UINT32_MAX) {
			free(pb.p);
			return moe_err(e, MOE_ENOMEM, "out of memory (token pieces)");
		}
	}
	t->poff[t->n_tokens] = (uint32_t)pb.len;
	t->pblob = pb.p;
	for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++) {
		int64_t id = moe_strmap_get(&t->tok_map, eog_texts[k], strlen(eog_texts[k]));
		if (id >= 0)
			t->eog[id] = 1;
	}
	for (int k = MOE_SPECIAL_EOS; k <= MOE_SPECIAL_EOM; k++)
		if (t->special[k] >= 0)
			t->eog[t->special[k]] = 1;
	find_harmony(t);
	MOE_TRY(build_specials(t, e));

	if (t->model == MOE_VOCAB_SPM || t->model == MOE_VOCAB_UGM) {
		/* Byte fallback: <0xNN>, else the byte itself as a token. */
		for (unsigned b = 0; b < 256; b++) {
			char name[8];
			snprintf(name, sizeof name, "<0x%02X>", b);
			int64_t id = moe_strmap_get(&t->tok_map, name, 6);
			if (id < 0) {
				char c = (char)b;
				id = moe_strmap_get(&t->tok_map, &c, 1);
			}
			t->byte_tok[b] = (int32_t)id;
		}
		/* Words may be merged separately unless some token joins a
		 * character and a following U+2581 (see spm.c). */
		t->spm_can_split = t->model == MOE_VOCAB_SPM;
		for (uint32_t i = 0; i < t->n_tokens && t->spm_can_split; i++) {
			const char *s = t->blob + t->off[i];
			size_t n = t->off[i + 1] - t->off[i];
			for (size_t p = 1; p + 3 <= n; p++)
				if (memcmp(s + p, "\xE2\x96\x81", 3) == 0 &&
				    (p < 3 || memcmp(s + p - 3, "\xE2\x96\x81", 3) != 0)) {
					t->spm_can_split = false;
					break;
				}
		}
	}
	if (t->model == MOE_VOCAB_UGM || t->model == MOE_VOCAB_WPM) {
		MOE_TRY(moe_ugm_wpm_build(t, vd, e));
	} else if (t->model == MOE_VOCAB_BPE) {
		t->pre = moe_pre_find(vd->pre ? vd->pre : "default");
		if (!t->pre)
			return moe_err(e, MOE_EUNSUPPORTED,
				       "vocabulary: unknown pre-tokenizer '%s'", vd->pre);
		t->ignore_merges = vd->ignore_merges_set ? vd->ignore_merges : t->pre->ignore_merges;
		MOE_TRY(moe_bpe_build(t, vd, e));
	}
	if (vd->normalizer && t->model != MOE_VOCAB_NONE)
		MOE_TRY(moe_normalizer_from_json(&t->norm, vd->normalizer,
						 t->model == MOE_VOCAB_SPM, e));
	return 0;
}

int moe_tokenizer_from_data(moe_tokenizer **out, const moe_vocab_data *vd, moe_error *e)
{
	moe_tokenizer *t = calloc(1, sizeof *t);
	*out = NULL;
	if (!t)
		return moe_err(e, MOE_ENOMEM, "out of memory (tokenizer)");
	moe_arena_init(&t->arena, 0);
	int rc = build(t, vd, e);
	if (rc < 0) {
		moe_tokenizer_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int moe_tokenizer_load(moe_tokenizer **out, const struct moe_uth *u, moe_error *e)
{
	moe_arena a;
	moe_vocab_data vd;
	moe_arena_init(&a, 0);
	*out = NULL;
	int rc = moe_vocab_data_from_uth(&vd, u, &a, e);
	if (rc == 0)
		rc = moe_tokenizer_from_data(out, &vd, e);
	moe_arena_free(&a);
	return rc;
}

void moe_tokenizer_free(moe_tokenizer *t)
{
	if (!t)
		return;
	if (t->model == MOE_VOCAB_BPE)
		moe_bpe_free(t);
	else
		moe_pretok_free(t->pretok);
	moe_normalizer_free(t->norm);
	free(t->blob);
	free(t->off);
	free(t->scores);
	free(t->types);
	free(t->flags);
	free(t->pblob);
	free(t->poff);
	free(t->eog);
	free(t->chat_template);
	for (uint32_t i = 0; i < t->n_named; i++) {
		free(t->named_names[i]);
		free(t->named_texts[i]);
	}
	free(t->named_names);
	free(t->named_texts);
	free(t->spec_ids);
	free(t->spec_rank);
	moe_strmap_free(&t->tok_map);
	moe_strmap_free(&t->spec_map);
	moe_arena_free(&t->arena);
	free(t);
}

/* ------------------------------------------------------- special tokens */

typedef struct occ {
	uint32_t rank; /* priority of the token (position in spec_ids) */
	uint32_t pos;
	int32_t id;
} occ;

static int cmp_occ(const void *pa, const void *pb)
{
	const occ *a = pa, *b = pb;
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return a->pos < b->pos ? -1 : a->pos > b->pos;
}

typedef struct frag {
	uint32_t off, len;
	int32_t id; /* -1: raw text */
} frag;

static bool ascii_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

static int cmp_frag(const void *pa, const void *pb)
{
	const frag *a = pa, *b = pb;
	return a->off < b->off ? -1 : a->off > b->off;
}

/* Raw fragments for the unclaimed bytes of [from, to). */
static void raw_runs(const uint8_t *cov, size_t from, size_t to, frag *f, size_t *n_f)
{
	size_t i = from;
	while (i < to) {
		if (cov[i]) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < to && !cov[j])
			j++;
		f[(*n_f)++] = (frag){(uint32_t)i, (uint32_t)(j - i), -1};
		i = j;
	}
}

/* Split text into raw and special-token fragments.  *frags is malloc'd. */
static int partition(const moe_tokenizer *t, const char *text, size_t len, bool parse_special,
		     frag **frags, size_t *n_frags)
{
	occ *o = NULL;
	size_t n_o = 0, cap_o = 0;
	uint8_t *cov = NULL; /* 1: claimed by a token, 2: stripped whitespace */
	frag *acc = NULL, *f = NULL;
	size_t n_acc = 0, n_f = 0;
	int rc = MOE_ENOMEM;

	*frags = NULL;
	*n_frags = 0;
	if (t->n_spec && len >= t->spec_min_len) {
		for (size_t i = 0; i + t->spec_min_len <= len; i++) {
			if (!t->spec_first[(unsigned char)text[i]])
				continue;
			size_t max = len - i < t->spec_max_len ? len - i : t->spec_max_len;
			for (size_t l = t->spec_min_len; l <= max; l++) {
				int64_t id = moe_strmap_get(&t->spec_map, text + i, l);
				if (id < 0)
					continue;
				if (!parse_special && t->types[id] != MOE_TOKEN_USER_DEFINED)
					continue;
				if (n_o == cap_o) {
					cap_o = cap_o ? cap_o * 2 : 64;
					occ *p = realloc(o, cap_o * sizeof *p);
					if (!p)
						goto out;
					o = p;
				}
				o[n_o++] = (occ){t->spec_rank[id], (uint32_t)i, (int32_t)id};
			}
		}
	}
	f = malloc((2 * n_o + 1) * sizeof *f);
	acc = malloc((n_o + 1) * sizeof *acc);
	if (!f || !acc)
		goto out;
	if (n_o == 0) {
		if (len)
			f[n_f++] = (frag){0, (uint32_t)len, -1};
		rc = 0;
		goto out;
	}
	cov = calloc(len, 1);
	if (!cov)
		goto out;
	/* Longest tokens first; each takes its occurrences left to right,
	 * skipping overlaps with its own previous match and with text a
	 * longer token already took (or stripped). */
	qsort(o, n_o, sizeof *o, cmp_occ);
	uint32_t cur = UINT32_MAX;
	size_t last_end = 0;
	for (size_t k = 0; k < n_o; k++) {
		size_t pos = o[k].pos;
		size_t tl = t->off[o[k].id + 1] - t->off[o[k].id];
		if (o[k].rank != cur) {
			cur = o[k].rank;
			last_end = 0;
		}
		if (pos < last_end || memchr(cov + pos, 1, tl) || memchr(cov + pos, 2, tl))
			continue;
		memset(cov + pos, 1, tl);
		last_end = pos + tl;
		acc[n_acc++] = (frag){(uint32_t)pos, (uint32_t)tl, o[k].id};
		uint8_t fl = t->flags[o[k].id];
		if (fl & MOE_TOKEN_LSTRIP)
			for (size_t j = pos; j > 0 && !cov[j - 1] && ascii_space(text[j - 1]); j--)
				cov[j - 1] = 2;
		if (fl & MOE_TOKEN_RSTRIP)
			for (size_t j = pos + tl; j < len && !cov[j] && ascii_space(text[j]); j++)
				cov[j] = 2;
	}
	qsort(acc, n_acc, sizeof *acc, cmp_frag);
	size_t p = 0;
	for (size_t k = 0; k < n_acc; k++) {
		raw_runs(cov, p, acc[k].off, f, &n_f);
		f[n_f++] = acc[k];
		p = acc[k].off + acc[k].len;
	}
	raw_runs(cov, p, len, f, &n_f);
	rc = 0;
out:
	free(o);
	free(cov);
	free(acc);
	if (rc < 0) {
		free(f);
		return rc;
	}
	*frags = f;
	*n_frags = n_f;
	return 0;
}

/* ---------------------------------------------------------------- encode */

int moe_tokenizer_encode(const moe_tokenizer *t, const char *text, size_t len, bool add_special,
			 bool parse_special, int32_t **ids, size_t *n, moe_error *e)
{
	moe_ids out = {0};
	frag *f = NULL;
	size_t n_f = 0;
	int rc;

	*ids = NULL;
	*n = 0;
	if (t->model == MOE_VOCAB_NONE)
		return moe_err(e, MOE_EUNSUPPORTED,
			       "the model has no tokenizer (vocabulary 'none')");
	if (add_special && t->add_bos && t->special[MOE_SPECIAL_BOS] < 0)
		return moe_err(e, MOE_EINVAL, "the vocabulary asks for BOS but has no BOS token");
	if (add_special && t->add_eos && t->special[MOE_SPECIAL_EOS] < 0)
		return moe_err(e, MOE_EINVAL, "the vocabulary asks for EOS but has no EOS token");
	if (len > UINT32_MAX / 4)
		return moe_err(e, MOE_ERANGE, "text too long for the tokenizer (%zu bytes)", len);
	/* Invalid UTF-8 becomes U+FFFD (one per bad byte) before anything
	 * else: PCRE2 needs valid text, and SentencePiece would otherwise
	 * let a broken lead byte swallow the "▁" of the next space, so
	 * decode(encode(x)) would not give x back even with the repair. */
	moe_sbuf clean = {0};
	if (!moe_utf8_is_valid(text, len)) {
		if (moe_sbuf_reserve(&clean, 1) < 0 ||
		    moe_sbuf_add_sanitized(&clean, text, len, NULL) < 0) {
			free(clean.p);
			return moe_err(e, MOE_ENOMEM, "out of memory (tokenizer)");
		}
		text = clean.p;
		len = clean.len;
	}
	rc = partition(t, text, len, parse_special, &f, &n_f);
	if (rc < 0) {
		free(clean.p);
		return moe_err(e, rc, "out of memory (tokenizer)");
	}
	if (add_special && t->add_bos)
		rc = moe_ids_push(&out, t->special[MOE_SPECIAL_BOS]);
	/* SentencePiece adds its space in front of the text and after every
	 * special token (llama.cpp: "prefix with space if previous is
	 * special"). */
	bool prev_special = true;
	moe_sbuf norm = {0};
	for (size_t i = 0; rc == 0 && i < n_f; i++) {
		const char *s = text + f[i].off;
		size_t sl = f[i].len;
		if (f[i].id < 0 && t->norm) {
			/* The normalizer sees each piece between special
			 * tokens, as HF's does. */
			if ((rc = moe_normalizer_run(t->norm, s, sl, &norm)) < 0) {
				rc = moe_err(e, rc, "out of memory (normalizer)");
				break;
			}
			s = norm.p;
			sl = norm.len;
		}
		if (f[i].id >= 0) {
			rc = moe_ids_push(&out, f[i].id);
			prev_special = true;
		} else if (t->model == MOE_VOCAB_SPM) {
			rc = moe_spm_encode(t, s, sl, t->add_space_prefix && prev_special, &out, e);
			prev_special = false;
		} else if (t->model == MOE_VOCAB_BPE) {
			rc = moe_bpe_encode(t, s, sl, &out, e);
		} else {
			rc = moe_ugm_wpm_encode(t, s, sl, &out, e);
		}
	}
	free(norm.p);
	if (rc == 0 && add_special && t->add_eos)
		rc = moe_ids_push(&out, t->special[MOE_SPECIAL_EOS]);
	free(f);
	free(clean.p);
	if (rc < 0) {
		free(out.v);
		if (rc == MOE_ENOMEM)
			return moe_err(e, rc, "out of memory (tokenizer)");
		return rc;
	}
	if (add_special && t->add_bos && out.n >= 2 && out.v[1] == t->special[MOE_SPECIAL_BOS])
		moe_log(MOE_LOG_WARN, "the prompt starts with two BOS tokens "
			"(the model adds one and the text has one)");
	*ids = out.v;
	*n = out.n;
	return 0;
}

/* ------------------------------------------------------------- accessors */

uint32_t moe_tokenizer_n_tokens(const moe_tokenizer *t)
{
	return t->n_tokens;
}

moe_vocab_model moe_tokenizer_model(const moe_tokenizer *t)
{
	return t->model;
}

int32_t moe_tokenizer_special(const moe_tokenizer *t, moe_special which)
{
	return (unsigned)which < MOE_SPECIAL_COUNT ? t->special[which] : -1;
}

bool moe_tokenizer_is_eog(const moe_tokenizer *t, int32_t id)
{
	return id >= 0 && (uint32_t)id < t->n_tokens && (t->eog[id] & EOG_END);
}

bool moe_tokenizer_is_harmony(const moe_tokenizer *t)
{
	return t->harmony;
}

int moe_tokenizer_token_type(const moe_tokenizer *t, int32_t id)
{
	return id >= 0 && (uint32_t)id < t->n_tokens ? t->types[id] : -1;
}

const char *moe_tokenizer_token_text(const moe_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->n_tokens) {
		*len = 0;
		return NULL;
	}
	*len = t->off[id + 1] - t->off[id];
	return t->blob + t->off[id];
}

const char *moe_tokenizer_piece(const moe_tokenizer *t, int32_t id, bool special, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->n_tokens) {
		*len = 0;
		return NULL;
	}
	int type = t->types[id];
	if (!special && (type == MOE_TOKEN_CONTROL || type == MOE_TOKEN_UNKNOWN) &&
	    !(t->eog[id] & EOG_PRINT)) {
		*len = 0;
		return t->pblob + t->poff[id];
	}
	*len = t->poff[id + 1] - t->poff[id];
	return t->pblob + t->poff[id];
}

const char *moe_tokenizer_chat_template(const moe_tokenizer *t)
{
	return t->chat_template;
}

const char *moe_tokenizer_chat_template_named(const moe_tokenizer *t, const char *name)
{
	if (!name)
		return NULL;
	for (uint32_t i = 0; i < t->n_named; i++)
		if (strcmp(t->named_names[i], name) == 0)
			return t->named_texts[i];
	if (strcmp(name, "default") == 0)
		return t->chat_template;
	return NULL;
}
