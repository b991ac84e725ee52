/* quant/repack.c — the row-interleaved (kernel-ready) layouts: which
 * tensors may use them, the transform from plain rows and back, and a fill
 * callback that repacks while a UTH file is written.
 *
 * Layout R4 (UTH layout 1) keeps every byte of the plain rows and only
 * reorders them: rows 4g .. 4g+3 form group g, stored where the plain rows
 * were (so a row group's offset is 4g x row bytes either way), block column
 * by block column; a column holds the four rows' scales, then their codes
 * (Q8_0: moe_block_q8_0x4, Q4_K: moe_block_q4_kx4).  A kernel then reads one
 * contiguous stream per four rows and loads each activation block once for
 * the four.
 */
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "quant/blocks.h"
#include "uth.h"

int moe_repack_ktype(int dtype, unsigned layout)
{
	if (layout == MOE_UTH_LAYOUT_PLAIN)
		return moe_type_get(dtype) && dtype < MOE_DTYPE_MAX ? dtype : -1;
	if (layout == MOE_UTH_LAYOUT_R4 && dtype == MOE_Q8_0)
		return MOE_Q8_0_R4;
	if (layout == MOE_UTH_LAYOUT_R4 && dtype == MOE_Q4_K)
		return MOE_Q4_K_R4;
	return -1;
}

int moe_repack_base(int ktype)
{
	switch (ktype) {
	case MOE_Q8_0_R4: return MOE_Q8_0;
	case MOE_Q4_K_R4: return MOE_Q4_K;
	default: return ktype;
	}
}

unsigned moe_repack_rows(unsigned layout)
{
	return layout == MOE_UTH_LAYOUT_PLAIN ? 1 : layout == MOE_UTH_LAYOUT_R4 ? 4 : 0;
}

const char *moe_repack_layout_name(unsigned layout)
{
	return layout == MOE_UTH_LAYOUT_PLAIN ? "plain" : layout == MOE_UTH_LAYOUT_R4 ? "r4" : NULL;
}

/* The matrices the engine only ever multiplies through moe_matmul as whole
 * 2-D weights (moe_quant_role_is_matrix minus the embedding table, read by
 * row, and the 3-D per-head DeepSeek matrices). */
static bool role_multiplied(int role)
{
	switch (role) {
	case MOE_UTH_ROLE_TOKEN_EMBD:
	case MOE_UTH_ROLE_ATTN_KV_B:
	case MOE_UTH_ROLE_ATTN_K_B:
	case MOE_UTH_ROLE_ATTN_V_B:
		return false;
	}
	return moe_quant_role_is_matrix(role);
}

int moe_repack_check(unsigned layout, int dtype, uint8_t n_dims, const uint32_t ne[4], int role,
		     char *msg, size_t msg_n)
{
	const char *ln = moe_repack_layout_name(layout);
	unsigned g = moe_repack_rows(layout);

	if (!ln) {
		snprintf(msg, msg_n, "layout %u is unknown", layout);
		return MOE_EFORMAT;
	}
	if (layout == MOE_UTH_LAYOUT_PLAIN)
		return 0;
	if (moe_repack_ktype(dtype, layout) < 0) {
		snprintf(msg, msg_n, "layout %u (%s) is not defined for dtype %s", layout, ln,
			 moe_type_name(dtype));
		return MOE_EFORMAT;
	}
	if (n_dims != 2 || ne[1] % g) {
		snprintf(msg, msg_n, "layout %u (%s) needs a 2-D matrix with a multiple of %u rows",
			 layout, ln, g);
		return MOE_EFORMAT;
	}
	if (!role_multiplied(role)) {
		const char *rn = moe_uth_role_name(role);
		snprintf(msg, msg_n, "layout %u (%s) is not allowed for role %s", layout, ln,
			 rn ? rn : "?");
		return MOE_EFORMAT;
	}
	return 0;
}

bool moe_repack_eligible(int dtype, uint8_t n_dims, const uint32_t ne[4], int role)
{
	char msg[8];
	return moe_repack_check(MOE_UTH_LAYOUT_R4, dtype, n_dims, ne, role, msg, sizeof msg) == 0;
}

/* One block of row r (plain) <-> its place in column b (packed); `in`
 * true: plain to packed. */
static void move_q8_0(moe_block_q8_0 *p, moe_block_q8_0x4 *c, int r, bool in)
{
	if (in) {
		c->d[r] = p->d;
		memcpy(c->qs[r], p->qs, sizeof p->qs);
	} else {
		p->d = c->d[r];
		memcpy(p->qs, c->qs[r], sizeof p->qs);
	}
}

static void move_q4_k(moe_block_q4_k *p, moe_block_q4_kx4 *c, int r, bool in)
{
	if (in) {
		c->d[r] = p->d;
		c->dmin[r] = p->dmin;
		memcpy(c->scales[r], p->scales, sizeof p->scales);
		memcpy(c->qs[r], p->qs, sizeof p->qs);
	} else {
		p->d = c->d[r];
		p->dmin = c->dmin[r];
		memcpy(p->scales, c->scales[r], sizeof p->scales);
		memcpy(p->qs, c->qs[r], sizeof p->qs);
	}
}

/* Block b of row r of the group is plain block r * nb + b and packed
 * column b, slot r. */
static void regroup(int dtype, int64_t cols, uint8_t *plain, uint8_t *packed, bool in)
{
	if (dtype == MOE_Q8_0) {
		const int64_t nb = cols / MOE_QK;
		moe_block_q8_0 *p = (void *)plain;
		moe_block_q8_0x4 *c = (void *)packed;
		for (int64_t b = 0; b < nb; b++)
			for (int r = 0; r < 4; r++)
				move_q8_0(&p[r * nb + b], &c[b], r, in);
	} else if (dtype == MOE_Q4_K) {
		const int64_t nb = cols / MOE_QK_K;
		moe_block_q4_k *p = (void *)plain;
		moe_block_q4_kx4 *c = (void *)packed;
		for (int64_t b = 0; b < nb; b++)
			for (int r = 0; r < 4; r++)
				move_q4_k(&p[r * nb + b], &c[b], r, in);
	}
}

void moe_repack_group(unsigned layout, int dtype, int64_t cols, const void *plain, void *out)
{
	if (layout == MOE_UTH_LAYOUT_R4)
		regroup(dtype, cols, (uint8_t *)plain, out, true);
}

void moe_unrepack_group(unsigned layout, int dtype, int64_t cols, const void *packed,
			void *plain)
{
	if (layout == MOE_UTH_LAYOUT_R4)
		regroup(dtype, cols, plain, (uint8_t *)packed, false);
}

/* Inner fills are called with at most 4 MiB at a time (uth.h). */
#define PIECE ((size_t)4 << 20)

int moe_repack_fill_fn(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e)
{
	moe_repack_fill *f = ctx;
	uint64_t rb;
	MOE_TRY(moe_type_nbytes(f->dtype, (uint64_t)f->cols, &rb, e));
	const size_t gb = (size_t)rb * moe_repack_rows(f->layout);

	if (!f->plain) {
		f->plain = malloc(gb);
		f->packed = malloc(gb);
		f->group = UINT64_MAX;
		if (!f->plain || !f->packed)
			return moe_err(e, MOE_ENOMEM, "out of memory repacking rows");
	}
	if (off == 0)
		f->group = UINT64_MAX; /* a new pass: the inner fill starts again */
	uint8_t *out = buf;
	while (n) {
		uint64_t g = off / gb;
		size_t at = (size_t)(off % gb);
		if (g != f->group) {
			/* Whole groups, in order: the inner fill sees increasing
			 * offsets from 0, as it requires. */
			for (size_t p = 0; p < gb; p += PIECE) {
				size_t len = gb - p < PIECE ? gb - p : PIECE;
				MOE_TRY(f->inner(f->inner_ctx, g * gb + p, f->plain + p, len, e));
			}
			moe_repack_group(f->layout, f->dtype, f->cols, f->plain, f->packed);
			f->group = g;
		}
		size_t take = gb - at < n ? gb - at : n;
		memcpy(out, f->packed + at, take);
		out += take;
		off += take;
		n -= take;
	}
	return 0;
}

void moe_repack_fill_free(moe_repack_fill *f)
{
	if (!f)
		return;
	free(f->plain);
	free(f->packed);
	f->plain = f->packed = NULL;
}
