/* unigram.c — the Unigram tokenizer model (SentencePiece unigram, as T5,
 * Gemma-style and many multilingual models use it) and WordPiece (BERT).
 *
 * Unigram: each pre-tokenized piece is segmented by Viterbi into the
 * sequence of vocabulary pieces with the highest total score.  A character
 * no piece starts with becomes the unknown token with score
 * min_score - 10 (SentencePiece's kUnkPenalty); consecutive unknowns are
 * fused into one, and with byte fallback they become <0xNN> tokens
 * instead.  Ties keep the earliest-starting best piece, as sentencepiece.
 *
 * WordPiece: each word (after BERT's normalizer and pre-tokenizer) is
 * split greedily, longest vocabulary match first; pieces after the first
 * carry the "##" prefix; a word with an unmatched rest, or longer than 100
 * characters, is the unknown token as a whole.
 */
#include <config.h>

#include "text_int.h"

#include <float.h>

#define UGM_UNK_PENALTY 10.0

static bool usable(const moe_tokenizer *t, int64_t id)
{
	return id >= 0 && (t->types[id] == MOE_TOKEN_NORMAL || t->types[id] == MOE_TOKEN_USER_DEFINED);
}

static int ugm_piece(const moe_tokenizer *t, const char *s, size_t n, moe_ids *out)
{
	/* best[i]: best score of a segmentation of s[0..i); from[i]: start of
	 * its last piece; tok[i]: that piece's id (-1: unknown). */
	double *best = malloc((n + 1) * sizeof *best);
	uint32_t *from = malloc((n + 1) * sizeof *from);
	int32_t *tok = malloc((n + 1) * sizeof *tok);
	int rc = 0;
	if (!best || !from || !tok) {
		rc = MOE_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i <= n; i++)
		best[i] = -DBL_MAX;
	best[0] = 0;
	for (size_t i = 0; i < n; i++) {
		if (best[i] == -DBL_MAX || (i && ((unsigned char)s[i] & 0xC0) == 0x80))
			continue;
		size_t cl = moe_utf8_lead_len((unsigned char)s[i]);
		if (cl > n - i)
			cl = n - i;
		bool covered = false;
		size_t max = n - i < t->ugm_max_len ? n - i : t->ugm_max_len;
		for (size_t l = 1; l <= max; l++) {
			if (i + l < n && ((unsigned char)s[i + l] & 0xC0) == 0x80)
				continue; /* not a character boundary */
			int64_t id = moe_strmap_get(&t->tok_map, s + i, l);
			if (!usable(t, id))
				continue;
			if (l == cl)
				covered = true;
			double sc = best[i] + t->scores[id];
			if (sc > best[i + l]) {
				best[i + l] = sc;
				from[i + l] = (uint32_t)i;
				tok[i + l] = (int32_t)id;
			}
		}
		if (!covered) {
			double sc = best[i] + t->ugm_unk_score;
			if (sc > best[i + cl]) {
				best[i + cl] = sc;
				from[i + cl] = (uint32_t)i;
				tok[i + cl] = -1;
			}
		}
	}
	/* Walk back, then emit in order. */
	size_t k = 0;
	uint32_t *path = malloc((n + 1) * sizeof *path);
	if (!path) {
		rc = MOE_ENOMEM;
		goto out;
	}
	for (size_t i = n; i > 0; i = from[i])
		path[k++] = (uint32_t)i;
	bool prev_unk = false;
	for (size_t j = k; rc == 0 && j-- > 0;) {
		size_t end = path[j], start = from[end];
		if (tok[end] >= 0) {
			rc = moe_ids_push(out, tok[end]);
			prev_unk = false;
		} else if (t->ugm_byte_fallback) {
			for (size_t b = start; rc == 0 && b < end; b++)
				rc = moe_ids_push(out, t->byte_tok[(unsigned char)s[b]] >= 0
							       ? t->byte_tok[(unsigned char)s[b]]
							       : t->special[MOE_SPECIAL_UNK]);
		} else if (!prev_unk) {
			rc = moe_ids_push(out, t->special[MOE_SPECIAL_UNK]);
			prev_unk = true;
		}
	}
	free(path);
out:
	free(best);
	free(from);
	free(tok);
	return rc;
}

static int wpm_word(const moe_tokenizer *t, const char *s, size_t n, moe_ids *out, moe_sbuf *tmp)
{
	int32_t unk = t->special[MOE_SPECIAL_UNK];
	size_t mark = out->n, start = 0;
	size_t chars = 0;
	for (size_t i = 0; i < n; i++)
		chars += ((unsigned char)s[i] & 0xC0) != 0x80;
	if (chars > 100)
		return moe_ids_push(out, unk);
	while (start < n) {
		size_t end = n;
		int64_t id = -1;
		while (start < end) {
			tmp->len = 0;
			if (start && moe_sbuf_add(tmp, "##", 2) < 0)
				return MOE_ENOMEM;
			if (moe_sbuf_add(tmp, s + start, end - start) < 0)
				return MOE_ENOMEM;
			id = moe_strmap_get(&t->tok_map, tmp->p, tmp->len);
			if (id >= 0)
				break;
			/* one character shorter */
			do
				end--;
			while (end > start && ((unsigned char)s[end] & 0xC0) == 0x80);
		}
		if (id < 0) {
			out->n = mark;
			return moe_ids_push(out, unk);
		}
		MOE_TRY(moe_ids_push(out, (int32_t)id));
		start = end;
	}
	return 0;
}

int moe_ugm_wpm_encode(const moe_tokenizer *t, const char *text, size_t len, moe_ids *out,
		       moe_error *e)
{
	moe_pieces ps = {0};
	moe_sbuf tmp = {0};
	int rc;
	if (t->pretok) {
		rc = moe_pretok_run(t->pretok, text, len, &ps);
	} else {
		rc = moe_sbuf_add(&ps.buf, text, len);
		if (rc == 0 && len) {
			ps.v = malloc(sizeof *ps.v);
			if (!ps.v)
				rc = MOE_ENOMEM;
			else
				ps.v[ps.n++] = (moe_span){0, (uint32_t)len};
		}
	}
	for (size_t i = 0; rc == 0 && i < ps.n; i++) {
		const char *s = ps.buf.p + ps.v[i].off;
		if (t->model == MOE_VOCAB_UGM)
			rc = ugm_piece(t, s, ps.v[i].len, out);
		else
			rc = wpm_word(t, s, ps.v[i].len, out, &tmp);
	}
	moe_pieces_free(&ps);
	free(tmp.p);
	if (rc == MOE_ERANGE)
		return moe_err(e, rc, "pre-tokenizer: regular expression limit reached");
	if (rc < 0)
		return moe_err(e, rc, "out of memory (tokenizer)");
	return 0;
}

int moe_ugm_wpm_build(moe_tokenizer *t, const moe_vocab_data *vd, moe_error *e)
{
	if (t->special[MOE_SPECIAL_UNK] < 0)
		return moe_err(e, MOE_EFORMAT, "vocabulary: a %s tokenizer needs an unknown token",
			       t->model == MOE_VOCAB_UGM ? "Unigram" : "WordPiece");
	if (vd->pre_tokenizer)
		MOE_TRY(moe_pretok_from_json(&t->pretok, vd->pre_tokenizer, e));
	double min = 0;
	for (uint32_t i = 0; i < t->n_tokens; i++) {
		uint32_t l = t->off[i + 1] - t->off[i];
		if (l > t->ugm_max_len)
			t->ugm_max_len = l;
		if (t->types[i] == MOE_TOKEN_NORMAL && t->scores[i] < min)
			min = t->scores[i];
		if (t->types[i] == MOE_TOKEN_BYTE)
			t->ugm_byte_fallback = true;
	}
	t->ugm_unk_score = min - UGM_UNK_PENALTY;
	return 0;
}
