/* t-repack — the row-interleaved (repacked) layouts: the transform and its
 * inverse, which tensors may use them, and the products over them.
 *
 * The engine's promise for a repacked model is the plain model's bits: so
 * on every ISA level the repacked gemm must give, for every row and token,
 * exactly (memcmp) what the same level's plain vec_dot gives for the plain
 * row — row lengths 1..35 blocks (every ragged lane count of the 8- and
 * 16-lane orders), 4..52 rows, 1..17 tokens — and moe_matmul over a
 * repacked matrix must equal moe_matmul over the plain one, whatever the
 * thread count and batch.  The plain kernels themselves are checked
 * against the generic reference by t-kernels.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "quant.h"
#include "quant/blocks.h"
#include "tap.h"
#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "testrand.h"
#include "uth.h"


static size_t row_bytes(int dt, int64_t cols)
{
	const moe_type_traits *t = moe_type_get(dt);
	return (size_t)(cols / t->block_size) * t->type_size;
}

/* rows x cols of dt quantised from random floats (varying magnitudes, so
 * the scales differ from block to block and rounding order shows). */
static void make_rows(int dt, uint8_t *w, int rows, int64_t cols)
{
	float *f = malloc(sizeof(float) * (size_t)cols);
	for (int r = 0; r < rows; r++) {
		for (int64_t j = 0; j < cols; j++)
			f[j] = frand() * (1.0f + (float)(rnd32() % 1000));
		moe_type_get(dt)->from_float(f, w + (size_t)r * row_bytes(dt, cols), cols);
	}
	free(f);
}
static void make_q8_0(uint8_t *w, int rows, int64_t cols)
{
	make_rows(MOE_Q8_0, w, rows, cols);
}

static void repack_all(int dt, const uint8_t *plain, uint8_t *packed, int rows, int64_t cols)
{
	size_t rb = row_bytes(dt, cols);
	for (int g = 0; g < rows / 4; g++)
		moe_repack_group(MOE_UTH_LAYOUT_R4, dt, cols, plain + (size_t)g * 4 * rb,
				 packed + (size_t)g * 4 * rb);
}

static void test_transform(void)
{
	const int64_t cols = 96;
	const size_t rb = 3 * 34;
	uint8_t plain[4 * 3 * 34], packed[sizeof plain], back[sizeof plain];
	make_q8_0(plain, 4, cols);
	moe_repack_group(MOE_UTH_LAYOUT_R4, MOE_Q8_0, cols, plain, packed);
	/* Spelled out from the man page: column b = d of rows 0..3, then the
	 * codes of rows 0..3. */
	int bad = 0;
	for (int b = 0; b < 3; b++)
		for (int r = 0; r < 4; r++) {
			bad += memcmp(packed + b * 136 + 2 * r, plain + r * rb + b * 34, 2) != 0;
			bad += memcmp(packed + b * 136 + 8 + 32 * r, plain + r * rb + b * 34 + 2, 32) != 0;
		}
	is_int(bad, 0, "r4: each block column is the four scales, then the four rows' codes");
	moe_unrepack_group(MOE_UTH_LAYOUT_R4, MOE_Q8_0, cols, packed, back);
	ok(memcmp(back, plain, sizeof plain) == 0, "r4: unrepack gives the plain rows back");

	is_int(moe_repack_ktype(MOE_Q8_0, MOE_UTH_LAYOUT_PLAIN), MOE_Q8_0, "plain q8_0 -> q8_0");
	is_int(moe_repack_ktype(MOE_Q8_0, MOE_UTH_LAYOUT_R4), MOE_Q8_0_R4, "r4 q8_0 -> q8_0_r4");
	is_int(moe_repack_ktype(MOE_F16, MOE_UTH_LAYOUT_R4), -1, "r4 f16: no kernel type");
	is_int(moe_repack_ktype(MOE_Q8_0, 2), -1, "layout 2: none");
	is_int(moe_repack_base(MOE_Q8_0_R4), MOE_Q8_0, "base of q8_0_r4");
	is_int(moe_repack_ktype(MOE_Q4_K, MOE_UTH_LAYOUT_R4), MOE_Q4_K_R4, "r4 q4_k -> q4_k_r4");
	{
		/* Q4_K: column b = d[4], dmin[4], scales[4][12], qs[4][128]. */
		uint8_t kp[4 * 2 * 144], kr[sizeof kp], kb[sizeof kp];
		make_rows(MOE_Q4_K, kp, 4, 512);
		moe_repack_group(MOE_UTH_LAYOUT_R4, MOE_Q4_K, 512, kp, kr);
		int kbad = 0;
		for (int b = 0; b < 2; b++)
			for (int r = 0; r < 4; r++) {
				const uint8_t *pb = kp + r * 288 + b * 144, *c = kr + b * 576;
				kbad += memcmp(c + 2 * r, pb, 2) != 0;
				kbad += memcmp(c + 8 + 2 * r, pb + 2, 2) != 0;
				kbad += memcmp(c + 16 + 12 * r, pb + 4, 12) != 0;
				kbad += memcmp(c + 64 + 128 * r, pb + 16, 128) != 0;
			}
		is_int(kbad, 0, "r4 q4_k: d, dmin, scales of the four rows, then their codes");
		moe_unrepack_group(MOE_UTH_LAYOUT_R4, MOE_Q4_K, 512, kr, kb);
		ok(memcmp(kb, kp, sizeof kp) == 0, "r4 q4_k: unrepack gives the plain rows back");
	}
	const moe_type_traits *t = moe_type_get(MOE_Q8_0_R4);
	ok(t && !strcmp(t->name, "q8_0_r4") && t->type_size == 34 && t->block_size == 32 &&
		   t->vec_dot_type == MOE_Q8_0,
	   "q8_0_r4 traits: q8_0's sizes and activation type");
	is_int(moe_type_from_name("q8_0_r4"), -1, "kernel types have no command-line name");

	const uint32_t ne[4] = {64, 8, 1, 1}, ne3[4] = {64, 6, 1, 1}, ne3d[4] = {64, 8, 2, 1};
	char msg[160];
	ok(moe_repack_eligible(MOE_Q8_0, 2, ne, MOE_UTH_ROLE_FFN_UP), "q8_0 ffn_up 8 rows: eligible");
	ok(moe_repack_eligible(MOE_Q8_0, 2, ne, MOE_UTH_ROLE_OUTPUT), "q8_0 output: eligible");
	ok(!moe_repack_eligible(MOE_Q8_0, 2, ne3, MOE_UTH_ROLE_FFN_UP), "6 rows: not eligible");
	ok(!moe_repack_eligible(MOE_Q8_0, 3, ne3d, MOE_UTH_ROLE_ATTN_K_B), "3-D: not eligible");
	const uint32_t ne256[4] = {256, 8, 1, 1};
	ok(moe_repack_eligible(MOE_Q4_K, 2, ne256, MOE_UTH_ROLE_FFN_UP), "q4_k: eligible");
	ok(!moe_repack_eligible(MOE_Q6_K, 2, ne256, MOE_UTH_ROLE_FFN_UP), "q6_k: not (yet) eligible");
	ok(!moe_repack_eligible(MOE_Q8_0, 2, ne, MOE_UTH_ROLE_TOKEN_EMBD),
	   "token_embd (read by row): not eligible");
	ok(!moe_repack_eligible(MOE_Q8_0, 2, ne, MOE_UTH_ROLE_FFN_GATE_INP), "router: not eligible");
	is_int(moe_repack_check(MOE_UTH_LAYOUT_R4, MOE_Q8_0, 2, ne3, MOE_UTH_ROLE_FFN_UP, msg,
				sizeof msg), MOE_EFORMAT, "check: %s", msg);
	is_int(moe_repack_check(9, MOE_Q8_0, 2, ne, MOE_UTH_ROLE_FFN_UP, msg, sizeof msg),
	       MOE_EFORMAT, "check: %s", msg);
	is_int(moe_repack_check(MOE_UTH_LAYOUT_PLAIN, MOE_F32, 1, ne, MOE_UTH_ROLE_ATTN_NORM, msg,
				sizeof msg), 0, "plain is fine for anything");
}

/* Repacked gemm == plain vec_dot, bit for bit, on one level; nbs: row
 * lengths in blocks. */
static void gemm_level(const moe_kernels *k, int dt, int kt, int max_nb)
{
	const moe_kernels *gen = moe_kernels_for(MOE_ISA_GENERIC);
	const int act = moe_type_get(dt)->vec_dot_type;
	const int bsz = (int)moe_type_get(dt)->block_size;
	const int rows = 52, max_tok = 17;
	int runs = 0, diff = 0, outside = 0, order = 0;

	for (int nb = 1; nb <= max_nb; nb++) {
		const int64_t cols = (int64_t)bsz * nb;
		const size_t rb = row_bytes(dt, cols), xb = row_bytes(act, cols);
		uint8_t *W = malloc(rb * rows), *P = malloc(rb * rows), *X = malloc(xb * max_tok);
		float *want = malloc(sizeof(float) * rows * max_tok);
		float *got = malloc(sizeof(float) * (rows + 3) * max_tok);
		float *f = malloc(sizeof(float) * (size_t)cols);
		make_rows(dt, W, rows, cols);
		repack_all(dt, W, P, rows, cols);
		for (int t = 0; t < max_tok; t++) {
			for (int64_t j = 0; j < cols; j++)
				f[j] = frand();
			gen->quantize_row[act](f, X + (size_t)t * xb, cols);
			for (int r = 0; r < rows; r++) {
				float g;
				k->vec_dot[dt](cols, &want[t * rows + r], W + (size_t)r * rb,
					       X + (size_t)t * xb);
				gen->vec_dot[dt](cols, &g, W + (size_t)r * rb, X + (size_t)t * xb);
				order += memcmp(&g, &want[t * rows + r], sizeof g) != 0;
			}
		}
		static const int nrs[] = {4, 8, 12, 16, 20, 52}, nts[] = {1, 2, 3, 5, 17};
		for (size_t a = 0; a < sizeof nrs / sizeof *nrs; a++)
			for (size_t b = 0; b < sizeof nts / sizeof *nts; b++) {
				const int nr = nrs[a], nt = nts[b], lds = rows + 3;
				for (int i = 0; i < lds * max_tok; i++)
					got[i] = -777.0f;
				k->gemm[kt](cols, nr, nt, P, rb, X, xb, got, (size_t)lds);
				runs++;
				for (int t = 0; t < max_tok; t++)
					for (int r = 0; r < lds; r++) {
						float g = got[t * lds + r];
						if (t >= nt || r >= nr)
							outside += g != -777.0f;
						else if (memcmp(&g, &want[t * rows + r], sizeof g)) {
							if (!diff)
								tap_diag("%s: %d blocks, row %d tok %d: "
									 "%.9g vs plain %.9g",
									 moe_isa_name(k->isa), nb, r, t,
									 g, want[t * rows + r]);
							diff++;
						}
					}
			}
		free(W), free(P), free(X), free(want), free(got), free(f);
	}
	ok(diff == 0 && outside == 0,
	   "%s: %s gemm == plain %s vec_dot bit for bit (%d runs, 1..%d blocks, "
	   "%d differ, %d written outside)",
	   moe_isa_name(k->isa), moe_type_name(kt), moe_type_name(dt), runs, max_nb, diff,
	   outside);
	/* The comparison can fail: a kernel keeping the generic order instead
	 * of its level's would differ on these outputs. */
	if (k->isa != MOE_ISA_GENERIC)
		ok(order > 0, "%s: %s: its plain order differs from generic's on %d outputs",
		   moe_isa_name(k->isa), moe_type_name(dt), order);
}

/* moe_matmul over the repacked matrix == over the plain one (threads,
 * batches, the prefill and decode paths, blocks of rows). */
static void matmul_level(const moe_kernels *k, int dt, int kt, moe_pool *pools[3])
{
	const int64_t cols = 256 * 5;
	const size_t rb = row_bytes(dt, cols);
	const int rows = 200, max_tok = 40, ldy = rows + 1;
	uint8_t *W = malloc(rb * rows), *P = malloc(rb * rows);
	float *X = malloc(sizeof(float) * (size_t)cols * max_tok);
	float *Y0 = malloc(sizeof(float) * ldy * max_tok), *Y1 = malloc(sizeof(float) * ldy * max_tok);
	void *scratch = malloc(moe_matmul_scratch(dt, cols, max_tok));
	int bad = 0, runs = 0;

	make_rows(dt, W, rows, cols);
	repack_all(dt, W, P, rows, cols);
	for (int64_t i = 0; i < cols * max_tok; i++)
		X[i] = frand();
	static const int nts[] = {1, 2, 7, 40};
	for (int p = 0; p < 3; p++)
		for (size_t a = 0; a < sizeof nts / sizeof *nts; a++) {
			memset(Y0, 0, sizeof(float) * ldy * max_tok);
			memset(Y1, 0, sizeof(float) * ldy * max_tok);
			moe_matmul(k, pools[p], dt, W, rows, cols, X, cols, nts[a], Y0, ldy, scratch);
			moe_matmul(k, pools[p], kt, P, rows, cols, X, cols, nts[a], Y1, ldy, scratch);
			bad += memcmp(Y0, Y1, sizeof(float) * ldy * max_tok) != 0;
			runs++;
		}
	ok(bad == 0, "%s: moe_matmul %s == %s bit for bit (%d runs: 1, 2, 3 threads; "
	   "1..40 tokens; %d differ)", moe_isa_name(k->isa), moe_type_name(kt),
	   moe_type_name(dt), runs, bad);
	moe_error e = {0};
	is_int(moe_kernels_check(k, kt, cols, &e), 0, "%s: kernels_check %s",
	       moe_isa_name(k->isa), moe_type_name(kt));
	free(W), free(P), free(X), free(Y0), free(Y1), free(scratch);
}

int main(void)
{
	moe_pool *pools[3] = {NULL, NULL, NULL};
	moe_error e = {0};
	test_transform();
	if (moe_pool_create(&pools[1], 2, &e) < 0 || moe_pool_create(&pools[2], 3, &e) < 0) {
		ok(0, "pools: %s", e.msg);
		return tap_done();
	}
	for (int i = 0; i < MOE_ISA_COUNT; i++) {
		const moe_kernels *k = moe_kernels_for((moe_isa)i);
		if (!k) {
			tap_diag("%s: not available here", moe_isa_name((moe_isa)i));
			continue;
		}
		gemm_level(k, MOE_Q8_0, MOE_Q8_0_R4, 35);
		gemm_level(k, MOE_Q4_K, MOE_Q4_K_R4, 9);
		matmul_level(k, MOE_Q8_0, MOE_Q8_0_R4, pools);
		matmul_level(k, MOE_Q4_K, MOE_Q4_K_R4, pools);
	}
	moe_pool_free(pools[1]);
	moe_pool_free(pools[2]);
	return tap_done();
}
