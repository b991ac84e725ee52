/* spm.c — SentencePiece-style BPE (Llama 2, Mistral/Mixtral, Phi-3).
 *
 * Spaces become U+2581 ("▁"), the text starts as one symbol per UTF-8
 * character, and the adjacent pair whose concatenation is the token with
 * the highest score is merged first (ties to the left) until no pair is a
 * token.  Symbols that are not tokens fall back to byte tokens <0xNN>.
 *
 * Long texts: when no token contains "▁" after another character (true of
 * SentencePiece vocabularies, checked when the tokenizer is built), no
 * merge can cross the start of a word, so each word is merged on its own —
 * the same result with a small, cache-resident queue.
 */
#include <config.h>

#include "text_int.h"

static const char ws[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */

typedef struct ssym {
	uint32_t start, n; /* bytes of the escaped text; n = 0 once merged */
	int32_t prev, next;
} ssym;

typedef struct sq {
	float score;
	int32_t left, right;
	uint32_t size;
} sq;

/* Higher score first, then the leftmost pair. */
static bool sq_before(const sq *a, const sq *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

MOE_DEFINE_HEAP(sq_heap, sq, sq_before)

typedef struct spm_work {
	ssym *sym;
	size_t n_sym, cap_sym;
	sq_heap heap;
} spm_work;

static int try_pair(const moe_tokenizer *t, spm_work *w, const char *s, int32_t l, int32_t r)
{
	if (l < 0 || r < 0)
		return 0;
	const ssym *a = &w->sym[l], *b = &w->sym[r];
	/* Adjacent symbols are adjacent in the text: the pair's string is
	 * the text from a's start to b's end, no copy needed. */
	uint32_t size = a->n + b->n;
	int64_t id = moe_strmap_get(&t->tok_map, s + a->start, size);
	if (id < 0)
		return 0;
	return sq_heap_push(&w->heap, (sq){t->scores[id], l, r, size});
}

static int emit(const moe_tokenizer *t, const char *s, const ssym *y, moe_ids *out)
{
	int64_t id = moe_strmap_get(&t->tok_map, s + y->start, y->n);
	if (id >= 0)
		return moe_ids_push(out, (int32_t)id);
	/* Only single characters can fail to be tokens (merges make tokens):
	 * spell them in bytes, or as the unknown token without byte tokens. */
	for (uint32_t k = 0; k < y->n; k++) {
		int32_t b = t->byte_tok[(unsigned char)s[y->start + k]];
		if (b < 0)
			b = t->special[MOE_SPECIAL_UNK];
		if (b >= 0 && moe_ids_push(out, b) < 0)
			return MOE_ENOMEM;
	}
	return 0;
}

/* Merge the symbols w->sym[0..n_sym) (one word or the whole text). */
static int merge_run(const moe_tokenizer *t, spm_work *w, const char *s, moe_ids *out)
{
	size_t n = w->n_sym;
	w->heap.n = 0;
	for (size_t i = 1; i < n; i++)
		if (try_pair(t, w, s, (int32_t)i - 1, (int32_t)i) < 0)
			return MOE_ENOMEM;
	while (w->heap.n) {
		sq q = sq_heap_pop(&w->heap);
		ssym *l = &w->sym[q.left], *r = &w->sym[q.right];
		if (l->n == 0 || r->n == 0 || l->n + r->n != q.size)
			continue; /* one side changed since the pair was queued */
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = q.left;
		if (try_pair(t, w, s, l->prev, q.left) < 0 ||
		    try_pair(t, w, s, q.left, l->next) < 0)
			return MOE_ENOMEM;
	}
	for (int32_t i = n ? 0 : -1; i >= 0; i = w->sym[i].next)
		if (emit(t, s, &w->sym[i], out) < 0)
			return MOE_ENOMEM;
	return 0;
}

static bool is_ws(const char *s, uint32_t start, uint32_t n)
{
	return n == 3 && memcmp(s + start, ws, 3) == 0;
}

int moe_spm_encode(const moe_tokenizer *t, const char *text, size_t len, bool space_prefix,
		   moe_ids *out, moe_error *e)
{
	moe_sbuf buf = {0};
	spm_work w = {0};
	int rc = 0;

	if (len > (UINT32_MAX - 3) / 3)
		return moe_err(e, MOE_ERANGE, "text too long for the tokenizer (%zu bytes)", len);
	if (moe_sbuf_reserve(&buf, 3 * len + 3) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (tokenizer)");
	if (space_prefix)
		moe_sbuf_add(&buf, ws, 3);
	for (size_t i = 0; i < len; i++) {
		size_t run = i;
		while (run < len && text[run] != ' ')
			run++;
		moe_sbuf_add(&buf, text + i, run - i);
		if (run < len)
			moe_sbuf_add(&buf, ws, 3);
		i = run;
	}
	const char *s = buf.p;
	size_t n = buf.len;
	uint32_t off = 0;
	bool prev_ws = true;

	/* One symbol per character, measured like llama.cpp (the lead byte
	 * decides the length, cut at the end of the text). */
	while (off < n && rc == 0) {
		uint32_t cl = (uint32_t)moe_utf8_lead_len((unsigned char)s[off]);
		if (cl > n - off)
			cl = (uint32_t)(n - off);
		bool cur_ws = is_ws(s, off, cl);
		if (t->spm_can_split && cur_ws && !prev_ws && w.n_sym) {
			w.sym[w.n_sym - 1].next = -1;
			rc = merge_run(t, &w, s, out);
			w.n_sym = 0;
		}
		prev_ws = cur_ws;
		if (w.n_sym == w.cap_sym) {
			size_t cap = w.cap_sym ? w.cap_sym * 2 : 256;
			ssym *p = realloc(w.sym, cap * sizeof *p);
			if (!p) {
				rc = MOE_ENOMEM;
				break;
			}
			w.sym = p;
			w.cap_sym = cap;
		}
		w.sym[w.n_sym] = (ssym){off, cl, (int32_t)w.n_sym - 1, (int32_t)w.n_sym + 1};
		w.n_sym++;
		off += cl;
	}
	if (rc == 0 && w.n_sym) {
		w.sym[w.n_sym - 1].next = -1;
		rc = merge_run(t, &w, s, out);
	}
	free(buf.p);
	free(w.sym);
	free(w.heap.v);
	if (rc < 0)
		return moe_err(e, rc, "out of memory (tokenizer)");
	return 0;
}
