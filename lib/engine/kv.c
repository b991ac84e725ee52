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
 * pool needs it (never-used blocks first, then least recently released).
 *
 * Sliding-window layers (gpt-oss: a query sees the window's last positions
 * only) keep their rows apart, in window slots: each block that is written
 * gets one, and a sequence gives it back once the block lies more than
 * `keep` = window + one block behind its position (the block keeps the
 * other layers' rows).  So a long sequence holds its full layers for every
 * position but its sliding layers for about two windows only.  A block gets
 * its slot when the forward chunk that writes it comes (moe_kv_window_ready),
 * not when a step reserves it, so a long prompt in one step also holds only
 * its window and the chunk being computed.  A given-back
 * slot keeps its rows until another block needs it (first the slots of
 * blocks some sequence still holds, only useful for a rewind; then
 * never-used slots; then, least recently released first, those of cached
 * blocks, which prefix sharing can still use).  Whoever takes blocks or
 * rewinds checks that the window before the new position is whole: prefix
 * sharing takes fewer blocks, a rewind past it starts again from 0. */
#include "engine/engine_int.h"

#include <stdlib.h>
#include <string.h>

int moe_kv_init(moe_engine *eng, int n_tokens, int block_tokens, bool keep_all, moe_error *e)
{
	kv_pool *kv = &eng->kv;
	const moe_hparams *hp = &eng->m->hp;
	kv->block_tokens = block_tokens;
	kv->n_blocks = (n_tokens + block_tokens - 1) / block_tokens;
	kv->layer_at = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *kv->layer_at);
	kv->layer_win = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *kv->layer_win);
	if (!kv->layer_at || !kv->layer_win)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	/* window slots only pay when the window (plus the block of slack)
	 * is shorter than what the pool holds */
	kv->window = (int)hp->sliding_window;
	kv->keep = kv->window + block_tokens;
	bool apart = !keep_all && hp->sliding_window && (uint64_t)hp->sliding_window + (uint64_t)block_tokens <
						   (uint64_t)n_tokens;
	int n_full = 0;
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		kv->layer_win[il] = apart && moe_hparams_layer_slides(hp, il);
		kv->layer_at[il] = kv->layer_win[il] ? kv->n_win_layers++ : n_full++;
	}
	uint64_t lb, bb, wb, total, wtotal;
	if (!moe_mul_u64((uint64_t)eng->kv_rows * block_tokens, eng->kv_row_bytes, &lb) ||
	    !moe_mul_u64(lb, (uint64_t)n_full, &bb) || !moe_mul_u64(bb, (uint64_t)kv->n_blocks, &total) ||
	    !moe_mul_u64(lb, (uint64_t)kv->n_win_layers, &wb) ||
	    !moe_mul_u64(wb, (uint64_t)kv->n_blocks, &wtotal) || total > SIZE_MAX / 4 ||
	    wtotal > SIZE_MAX / 4)
		return moe_err(e, MOE_ERANGE, "KV pool of %d tokens is too large", n_tokens);
	kv->layer_bytes = (size_t)lb;
	kv->block_bytes = (size_t)bb;
	kv->wslot_bytes = (size_t)wb;
	/* calloc: pages of slots never used are never touched */
	kv->data = calloc(1, total ? (size_t)total : 1);
	kv->blocks = calloc((size_t)kv->n_blocks, sizeof *kv->blocks);
	kv->tokens = calloc((size_t)kv->n_blocks * (size_t)block_tokens, sizeof *kv->tokens);
	if (kv->n_win_layers) {
		kv->wdata = calloc(1, (size_t)wtotal);
		kv->wslots = calloc((size_t)kv->n_blocks, sizeof *kv->wslots);
	}
	if (!kv->data || !kv->blocks || !kv->tokens ||
	    (kv->n_win_layers && (!kv->wdata || !kv->wslots)))
		return moe_err(e, MOE_ENOMEM, "out of memory for a KV pool of %d tokens (%.1f MiB)",
			       n_tokens, (double)(total + wtotal) / (1 << 20));
	for (int b = 0; b < kv->n_blocks; b++)
		kv->blocks[b].win = -1;
	for (int w = 0; kv->wslots && w < kv->n_blocks; w++)
		kv->wslots[w].block = -1;
	return 0;
}

void moe_kv_free(moe_engine *eng)
{
	free(eng->kv.data);
	free(eng->kv.blocks);
	free(eng->kv.tokens);
	free(eng->kv.wdata);
	free(eng->kv.wslots);
	free(eng->kv.layer_at);
	free(eng->kv.layer_win);
}

/* ---------------------------------------------------------- window slots */

/* A slot for block b: the first of the slots nobody holds whose rows serve
 * no one (their block is held by a sequence past them, or partly filled),
 * else a never-used one, else the least recently released one of a cached
 * block.  Slots held never outnumber the blocks held, so with a block to
 * take there is a slot. */
static void win_take(kv_pool *kv, int b)
{
	int best = -1, rank = 3;
	for (int w = 0; w < kv->n_blocks && rank > 0; w++) {
		const kv_wslot *x = &kv->wslots[w];
		if (x->ref)
			continue;
		const kv_block *o = x->block >= 0 ? &kv->blocks[x->block] : NULL;
		int r = !o ? 1 : o->ref || !o->cached ? 0 : 2;
		if (r < rank || (r == 2 && rank == 2 && x->stamp < kv->wslots[best].stamp)) {
			best = w;
			rank = r;
		}
	}
	kv_wslot *x = &kv->wslots[best];
	if (x->block >= 0)
		kv->blocks[x->block].win = -1;
	x->block = b;
	x->ref = 1;
	kv->blocks[b].win = best;
	if (++kv->n_wused > kv->peak_wused)
		kv->peak_wused = kv->n_wused;
}

static void win_hold(kv_pool *kv, int b)
{
	kv_wslot *x = &kv->wslots[kv->blocks[b].win];
	if (x->ref++ == 0 && ++kv->n_wused > kv->peak_wused)
		kv->peak_wused = kv->n_wused;
}

static void win_drop(kv_pool *kv, int b)
{
	kv_wslot *x = &kv->wslots[kv->blocks[b].win];
	if (--x->ref == 0) {
		kv->n_wused--;
		x->stamp = ++kv->clock;
	}
}

/* Positions before this one are not needed by a sequence at pos. */
static int win_needed_from(const kv_pool *kv, int pos)
{
	return pos - kv->keep > 0 ? pos - kv->keep : 0;
}

/* Give back the window slots of s's blocks that lie wholly before what
 * position pos needs. */
static void win_release_behind(moe_seq *s, int pos)
{
	kv_pool *kv = &s->eng->kv;
	if (!kv->n_win_layers)
		return;
	int lo = win_needed_from(kv, pos) / kv->block_tokens;
	for (; s->win_lo < lo && s->win_lo < s->win_hi; s->win_lo++)
		win_drop(kv, s->blocks[s->win_lo]);
}

void moe_kv_window_ready(moe_seq *s, int upto)
{
	kv_pool *kv = &s->eng->kv;
	if (!kv->n_win_layers)
		return;
	win_release_behind(s, s->n_pos);
	int hi = moe_engine_blocks_for(s->eng, upto);
	for (; s->win_hi < hi && s->win_hi < s->n_blocks; s->win_hi++)
		win_take(kv, s->blocks[s->win_hi]);
}

/* Extend the slots s holds downwards so that position pos can be computed
 * next (s holds up to its last block): every block from the window before
 * pos on must still have its slot
 * (taken again if it was given back but not reused).  Blocks further back
 * are taken too while their slots are there (a later rewind may need them).
 * False, changing nothing, if the window's rows are gone. */
static bool win_regain(moe_seq *s, int pos)
{
	kv_pool *kv = &s->eng->kv;
	if (!kv->n_win_layers)
		return true;
	int bt = kv->block_tokens;
	int need = pos + 1 - kv->window > 0 ? (pos + 1 - kv->window) / bt : 0;
	int want = win_needed_from(kv, pos) / bt;
	int lo = s->win_lo;
	while (lo > want && kv->blocks[s->blocks[lo - 1]].win >= 0)
		lo--;
	if (lo > need)
		return false;
	for (int i = lo; i < s->win_lo; i++)
		win_hold(kv, s->blocks[i]);
	s->win_lo = lo;
	return true;
}

bool moe_kv_window_whole(const moe_seq *s, int n)
{
	const kv_pool *kv = &s->eng->kv;
	if (!kv->n_win_layers)
		return true;
	for (int i = 0; i < moe_engine_blocks_for(s->eng, n); i++)
		if (kv->blocks[s->blocks[i]].win < 0)
			return false;
	return true;
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
	/* its old window rows are of no use: the slot goes back to the unused
	 * ones; a new one comes with the chunk that writes the block */
	if (k->win >= 0) {
		kv->wslots[k->win].block = -1;
		k->win = -1;
	}
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
			      .block_bytes = kv->block_bytes, .n_shared_tokens = kv->shared_tokens,
			      .n_win_layers = kv->n_win_layers, .n_win_used = kv->n_wused,
			      .peak_win_used = kv->peak_wused, .win_slot_bytes = kv->wslot_bytes};
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

/* Drop the blocks (and the window slots s holds) from block index keep on. */
static void blocks_drop_from(moe_seq *s, int keep)
{
	kv_pool *kv = &s->eng->kv;
	while (s->n_blocks > keep) {
		int b = s->blocks[--s->n_blocks];
		if (kv->n_win_layers && s->n_blocks >= s->win_lo && s->n_blocks < s->win_hi)
			win_drop(kv, b);
		block_drop(kv, b);
	}
	if (s->win_hi > s->n_blocks)
		s->win_hi = s->n_blocks;
	if (s->win_lo > s->win_hi)
		s->win_lo = s->win_hi;
}

void moe_seq_truncate(moe_seq *s, int pos)
{
	if (pos < 0 || pos > s->n_pos)
		return;
	s->n_pos = pos;
	blocks_drop_from(s, moe_engine_blocks_for(s->eng, pos));
	/* the window before pos was given back: start again */
	if (pos && !win_regain(s, pos)) {
		s->n_pos = 0;
		blocks_drop_from(s, 0);
	}
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
	/* sliding layers: only as far as the window before it is still there */
	s->win_lo = s->win_hi = s->n_blocks;
	while (taken > 0 && !win_regain(s, (int)taken)) {
		taken = (size_t)(s->n_blocks - 1) * (size_t)bt;
		blocks_drop_from(s, s->n_blocks - 1);
		s->win_lo = s->win_hi = s->n_blocks;
	}
	if (taken == 0)
		blocks_drop_from(s, 0);
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
			if (kv->n_win_layers) {
				/* the copy's rows now: it is written next */
				win_take(kv, c);
				memcpy(kv->wdata + (size_t)kv->blocks[c].win * kv->wslot_bytes,
				       kv->wdata + (size_t)kv->blocks[b].win * kv->wslot_bytes,
				       kv->wslot_bytes);
				win_drop(kv, b);
			}
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
	win_release_behind(s, s->n_pos);
}
