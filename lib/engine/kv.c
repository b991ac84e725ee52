/* kv.c — the paged KV cache: one pool of fixed-size blocks shared by every
 * sequence of an engine, and the sequences' block tables.
 *
 * A block holds block_tokens positions of all layers.  Blocks are counted
 * by reference: a sequence that starts with the same whole blocks of tokens
 * as one seen before (a shared system prompt, the previous turn of a chat)
 * takes those blocks instead of recomputing them.  A full block remembers
 * its tokens and the block before it (with that block's generation, so a
 * recycled predecessor breaks the chain), which makes a match exact: same
 * tokens from position 0.  Writing into a block another sequence also holds
 * copies it first; writing into a cached block only this sequence holds
 * forgets that it was cached.  A block nobody holds stays cached until the
 * pool needs it (never-used blocks first, then least recently released). */
#include "engine/engine_int.h"

#include <stdlib.h>
#include <string.h>

int moe_kv_init(moe_engine *eng, int n_tokens, int block_tokens, moe_error *e)
{
	kv_pool *kv = &eng->kv;
	const moe_hparams *hp = &eng->m->hp;
	kv->block_tokens = block_tokens;
	kv->n_blocks = (n_tokens + block_tokens - 1) / block_tokens;
	uint64_t lb, bb, total;
	if (!moe_mul_u64((uint64_t)eng->kv_rows * block_tokens, eng->kv_row_bytes, &lb) ||
	    !moe_mul_u64(lb, hp->n_layer, &bb) || !moe_mul_u64(bb, (uint64_t)kv->n_blocks, &total) ||
	    total > SIZE_MAX / 2)
		return moe_err(e, MOE_ERANGE, "KV pool of %d tokens is too large", n_tokens);
	kv->layer_bytes = (size_t)lb;
	kv->block_bytes = (size_t)bb;
	kv->data = calloc(1, (size_t)total);
	kv->blocks = calloc((size_t)kv->n_blocks, sizeof *kv->blocks);
	kv->tokens = calloc((size_t)kv->n_blocks * (size_t)block_tokens, sizeof *kv->tokens);
	if (!kv->data || !kv->blocks || !kv->tokens)
		return moe_err(e, MOE_ENOMEM, "out of memory for a KV pool of %d tokens (%.1f MiB)",
			       n_tokens, (double)total / (1 << 20));
	return 0;
}

void moe_kv_free(moe_engine *eng)
{
	free(eng->kv.data);
	free(eng->kv.blocks);
	free(eng->kv.tokens);
}

/* A block for writing: a never-used or partly-used free one, else the
 * least recently released cached one.  -1 if every block is held. */
static int block_take(kv_pool *kv)
{
	int best = -1;
	for (int b = 0; b < kv->n_blocks; b++) {
		const kv_block *k = &kv->blocks[b];
		if (k->ref)
			continue;
		if (!k->cached) {
			best = b;
			break;
		}
		if (best < 0 || k->stamp < kv->blocks[best].stamp)
			best = b;
	}
	if (best < 0)
		return -1;
	kv_block *k = &kv->blocks[best];
	k->cached = false;
	k->gen++; /* blocks cached after it no longer follow it */
	k->ref = 1;
	k->parent = -1;
	if (++kv->n_used > kv->peak_used)
		kv->peak_used = kv->n_used;
	return best;
}

static void block_hold(kv_pool *kv, int b)
{
	if (kv->blocks[b].ref++ == 0 && ++kv->n_used > kv->peak_used)
		kv->peak_used = kv->n_used;
}

static void block_drop(kv_pool *kv, int b)
{
	kv_block *k = &kv->blocks[b];
	if (--k->ref == 0) {
		kv->n_used--;
		k->stamp = ++kv->clock;
	}
}

int moe_engine_blocks_for(const moe_engine *eng, int n_tokens)
{
	return (n_tokens + eng->kv.block_tokens - 1) / eng->kv.block_tokens;
}

int moe_engine_blocks_available(const moe_engine *eng)
{
	return eng->kv.n_blocks - eng->kv.n_used;
}

void moe_engine_kv_stats(const moe_engine *eng, moe_kv_stats *out)
{
	const kv_pool *kv = &eng->kv;
	*out = (moe_kv_stats){.block_tokens = kv->block_tokens, .n_blocks = kv->n_blocks,
			      .n_used = kv->n_used, .peak_used = kv->peak_used,
			      .block_bytes = kv->block_bytes, .n_shared_tokens = kv->shared_tokens};
	for (int b = 0; b < kv->n_blocks; b++)
		if (!kv->blocks[b].ref && kv->blocks[b].cached)
			out->n_cached++;
	out->n_free = kv->n_blocks - out->n_used - out->n_cached;
}

/* ------------------------------------------------------------- sequences */

int moe_seq_new(moe_seq **out, moe_engine *eng, moe_error *e)
{
	*out = NULL;
	moe_seq *s = calloc(1, sizeof *s);
	int max_blocks = moe_engine_blocks_for(eng, eng->n_ctx);
	if (s)
		s->blocks = calloc((size_t)max_blocks, sizeof *s->blocks);
	if (!s || !s->blocks) {
		free(s);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	s->eng = eng;
	eng->n_seqs++;
	*out = s;
	return 0;
}

void moe_seq_free(moe_seq *s)
{
	if (!s)
		return;
	moe_seq_truncate(s, 0);
	s->eng->n_seqs--;
	free(s->tokens);
	free(s->blocks);
	free(s);
}

int moe_seq_pos(const moe_seq *s)
{
	return s->n_pos;
}

const int32_t *moe_seq_tokens(const moe_seq *s)
{
	return s->tokens;
}

void moe_seq_truncate(moe_seq *s, int pos)
{
	if (pos < 0 || pos > s->n_pos)
		return;
	s->n_pos = pos;
	int keep = moe_engine_blocks_for(s->eng, pos);
	while (s->n_blocks > keep)
		block_drop(&s->eng->kv, s->blocks[--s->n_blocks]);
}

static int tokens_grow(moe_seq *s, int n, moe_error *e)
{
	if (n <= s->cap)
		return 0;
	int cap = s->cap ? s->cap : 64;
	while (cap < n)
		cap = cap > s->eng->n_ctx / 2 ? s->eng->n_ctx : cap * 2;
	int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
	if (!t)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s->tokens = t;
	s->cap = cap;
	return 0;
}

int moe_seq_share_prefix(moe_seq *s, const int32_t *ids, size_t n)
{
	kv_pool *kv = &s->eng->kv;
	int bt = kv->block_tokens;
	if (s->n_pos != 0 || n == 0 || tokens_grow(s, (int)(n < (size_t)s->eng->n_ctx ? n : (size_t)s->eng->n_ctx), NULL) < 0)
		return 0;
	int prev = -1;
	size_t taken = 0;
	while (taken + (size_t)bt <= n && taken + (size_t)bt <= (size_t)s->eng->n_ctx) {
		int found = -1;
		for (int b = 0; b < kv->n_blocks && found < 0; b++) {
			const kv_block *k = &kv->blocks[b];
			if (k->cached && k->parent == prev &&
			    (prev < 0 || k->parent_gen == kv->blocks[prev].gen) &&
			    !memcmp(kv->tokens + (size_t)b * bt, ids + taken, (size_t)bt * sizeof *ids))
				found = b;
		}
		if (found < 0)
			break;
		block_hold(kv, found);
		s->blocks[s->n_blocks++] = found;
		memcpy(s->tokens + taken, ids + taken, (size_t)bt * sizeof *ids);
		taken += (size_t)bt;
		prev = found;
	}
	/* leave the last token to evaluate (its block is copied when written) */
	if (taken == n && taken > 0)
		taken--;
	s->n_pos = (int)taken;
	kv->shared_tokens += taken;
	return (int)taken;
}

int moe_kv_reserve(moe_seq *s, int upto, moe_error *e)
{
	moe_engine *eng = s->eng;
	kv_pool *kv = &eng->kv;
	int bt = kv->block_tokens;
	if (upto > eng->n_ctx)
		return moe_err(e, MOE_ERANGE, "context full: %d tokens do not fit in %d", upto,
			       eng->n_ctx);
	MOE_TRY(tokens_grow(s, upto, e));
	/* The block being written to (if any) must be private and uncached. */
	if (s->n_pos % bt && s->n_pos < upto) {
		int i = s->n_pos / bt, b = s->blocks[i];
		if (kv->blocks[b].ref > 1) {
			int c = block_take(kv);
			if (c < 0)
				return moe_err(e, MOE_ERANGE, "KV pool full (%d blocks of %d tokens)",
					       kv->n_blocks, bt);
			memcpy(kv->data + (size_t)c * kv->block_bytes,
			       kv->data + (size_t)b * kv->block_bytes, kv->block_bytes);
			block_drop(kv, b);
			s->blocks[i] = c;
		} else {
			kv->blocks[b].cached = false;
			kv->blocks[b].gen++;
		}
	}
	while (s->n_blocks < moe_engine_blocks_for(eng, upto)) {
		int c = block_take(kv);
		if (c < 0)
			return moe_err(e, MOE_ERANGE, "KV pool full (%d blocks of %d tokens)",
				       kv->n_blocks, bt);
		s->blocks[s->n_blocks++] = c;
	}
	return 0;
}

void moe_kv_seal(moe_seq *s)
{
	kv_pool *kv = &s->eng->kv;
	int bt = kv->block_tokens;
	for (int i = 0; i < s->n_pos / bt; i++) {
		kv_block *k = &kv->blocks[s->blocks[i]];
		if (k->cached)
			continue;
		int prev = i ? s->blocks[i - 1] : -1;
		k->cached = true;
		k->parent = prev;
		k->parent_gen = prev >= 0 ? kv->blocks[prev].gen : 0;
		memcpy(kv->tokens + (size_t)s->blocks[i] * bt, s->tokens + (size_t)i * bt,
		       (size_t)bt * sizeof *s->tokens);
	}
}
