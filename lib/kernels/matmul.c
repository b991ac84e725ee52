/* kernels/matmul.c — the matrix product Y = X W^T over a thread pool, for
 * one token (decode) or a batch (prefill).
 *
 * X is quantised once into the caller's scratch (each thread a share of the
 * tokens), then each thread takes a contiguous range of weight rows, or of
 * tokens when there are too few rows to share (a router with 8 rows and a
 * long prompt).  Within a thread, rows go in blocks that fit the L2 cache and
 * the ISA's gemm kernel walks each block with register tiles of rows x
 * tokens, so every weight block is read from memory once per matmul and from
 * L2 once per token tile.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels_int.h"

/* Weight bytes per cache block: half the 1 MiB L2 of the cores we tune for,
 * leaving room for activations and Y. */
#define MOE_MM_L2_BYTES (512u * 1024)

static size_t row_bytes(int dtype, int64_t cols)
{
	uint64_t nb;
	if (cols < 0 || moe_type_nbytes(dtype, (uint64_t)cols, &nb, NULL) < 0 || nb > SIZE_MAX)
		return SIZE_MAX;
	return (size_t)nb;
}

size_t moe_matmul_scratch(int dtype, int64_t cols, int64_t n_tokens)
{
	const moe_type_traits *t = moe_type_get(dtype);
	uint64_t total;

	if (!t || n_tokens < 0)
		return SIZE_MAX;
	if (t->vec_dot_type == MOE_F32)
		return 0;
	size_t rb = row_bytes(t->vec_dot_type, cols);
	if (rb == SIZE_MAX || !moe_mul_u64(rb, (uint64_t)n_tokens, &total) || total > SIZE_MAX)
		return SIZE_MAX;
	return (size_t)total;
}

/* [*lo, *hi) = the share of thread ith of n items, in steps of `quantum`
 * (a multiple of the register tiles: 4 rows for decode, 16 — the prefill
 * GEMMs' row groups — for prefill) so that only the last share has a
 * ragged edge. */
static void share(int64_t n, int64_t quantum, int ith, int nth, int64_t *lo, int64_t *hi)
{
	int64_t units = (n + quantum - 1) / quantum;
	int64_t per = (units + nth - 1) / nth;
	*lo = ith * per * quantum;
	*hi = *lo + per * quantum;
	if (*lo > n)
		*lo = n;
	if (*hi > n)
		*hi = n;
}

void moe_matmul_quantize(const moe_kernels *k, int dtype, int64_t cols, const float *X,
			 int64_t ldx, int64_t n_tokens, void *scratch, int ith, int nth)
{
	const moe_type_traits *t = moe_type_get(dtype);
	if (!t || t->vec_dot_type == MOE_F32)
		return;
	moe_quantize_row_fn q = k->quantize_row[t->vec_dot_type];
	size_t rb = row_bytes(t->vec_dot_type, cols);
	int64_t t0, t1;
	if (!q || rb == SIZE_MAX)
		return;
	share(n_tokens, 1, ith, nth, &t0, &t1);
	for (int64_t i = t0; i < t1; i++)
		q(X + i * ldx, (uint8_t *)scratch + (size_t)i * rb, cols);
}

/* Rows [r0, r1) x tokens [t0, t1) of Y. */
static void compute_range(const moe_kernels *k, int dtype, const uint8_t *W, size_t wb,
			  int64_t cols, const uint8_t *x, size_t xs, float *Y, int64_t ldy,
			  int64_t r0, int64_t r1, int64_t t0, int64_t t1)
{
	moe_gemm_fn gemm = k->gemm[dtype];
	moe_vec_dot_fn dot = k->vec_dot[dtype];
	int64_t rb = (int64_t)(MOE_MM_L2_BYTES / (wb ? wb : 1));

	/* A multiple of every tile height (3 and 4 rows for the decode tiles,
	 * 8 and 16 for the prefill GEMMs) so only the last block of a thread
	 * has leftover rows. */
	rb -= rb % 48;
	if (rb < 48)
		rb = 48;
	/* One token: the rows stream from memory once whatever the blocking. */
	if (t1 - t0 == 1)
		rb = r1 - r0;
	for (int64_t r = r0; r < r1; r += rb) {
		int64_t nr = r1 - r < rb ? r1 - r : rb;
		const uint8_t *w = W + (size_t)r * wb;
		if (gemm) {
			/* gemm takes int counts: go in slices well below INT_MAX. */
			for (int64_t t = t0; t < t1; t += 1 << 20) {
				int64_t nt = t1 - t < (1 << 20) ? t1 - t : (1 << 20);
				for (int64_t rr = 0; rr < nr; rr += 1 << 20) {
					int64_t nrr = nr - rr < (1 << 20) ? nr - rr : (1 << 20);
					gemm(cols, (int)nrr, (int)nt, w + (size_t)rr * wb, wb,
					     x + (size_t)t * xs, xs, Y + t * ldy + r + rr,
					     (size_t)ldy);
				}
			}
			continue;
		}
		for (int64_t t = t0; t < t1; t++)
			for (int64_t i = 0; i < nr; i++)
				dot(cols, Y + t * ldy + r + i, w + (size_t)i * wb,
				    x + (size_t)t * xs);
	}
}

void moe_matmul_compute(const moe_kernels *k, int dtype, const void *W, int64_t rows,
			int64_t cols, const float *X, int64_t ldx, int64_t n_tokens, float *Y,
			int64_t ldy, const void *scratch, int ith, int nth)
{
	const moe_type_traits *t = moe_type_get(dtype);
	const uint8_t *x;
	size_t xs, wb = row_bytes(dtype, cols);
	int64_t r0 = 0, r1 = rows, t0 = 0, t1 = n_tokens;

	if (!t || wb == SIZE_MAX || rows <= 0 || n_tokens <= 0)
		return;
	if (t->vec_dot_type == MOE_F32) {
		x = (const uint8_t *)X;
		xs = (size_t)ldx * sizeof(float);
	} else {
		x = scratch;
		xs = row_bytes(t->vec_dot_type, cols);
	}
	/* Rows are the natural split (each thread reads its own weights); with
	 * few rows and many tokens, split the tokens instead. */
	if (rows >= 16 * (int64_t)nth || n_tokens < 2 * (int64_t)nth)
		share(rows, n_tokens > 1 ? 16 : 4, ith, nth, &r0, &r1);
	else
		share(n_tokens, 4, ith, nth, &t0, &t1);
	if (r0 < r1 && t0 < t1)
		compute_range(k, dtype, W, wb, cols, x, xs, Y, ldy, r0, r1, t0, t1);
}

typedef struct {
	const moe_kernels *k;
	int dtype;
	const void *W;
	int64_t rows, cols;
	const float *X;
	int64_t ldx, n_tokens;
	float *Y;
	int64_t ldy;
	void *scratch;
} mm_job;

static void quantize_job(void *arg, int ith, int nth)
{
	mm_job *j = arg;
	moe_matmul_quantize(j->k, j->dtype, j->cols, j->X, j->ldx, j->n_tokens, j->scratch, ith,
			    nth);
}

static void compute_job(void *arg, int ith, int nth)
{
	mm_job *j = arg;
	moe_matmul_compute(j->k, j->dtype, j->W, j->rows, j->cols, j->X, j->ldx, j->n_tokens,
			   j->Y, j->ldy, j->scratch, ith, nth);
}

void moe_matmul(const moe_kernels *k, moe_pool *pool, int dtype, const void *W, int64_t rows,
		int64_t cols, const float *X, int64_t ldx, int64_t n_tokens, float *Y, int64_t ldy,
		void *scratch)
{
	mm_job j = {k, dtype, W, rows, cols, X, ldx, n_tokens, Y, ldy, scratch};
	moe_error e;

	if (rows <= 0 || n_tokens <= 0)
		return;
	if (moe_kernels_check(k, dtype, cols, &e) < 0) {
		/* No way to return an error: make the failure impossible to miss. */
		moe_log(MOE_LOG_ERROR, "moe_matmul: %s", e.msg);
		for (int64_t t = 0; t < n_tokens; t++)
			for (int64_t r = 0; r < rows; r++)
				Y[t * ldy + r] = NAN;
		return;
	}
	if (moe_type_get(dtype)->vec_dot_type != MOE_F32) {
		/* One token quantises faster than threads wake up. */
		if (pool && n_tokens >= 2 * (int64_t)moe_pool_threads(pool))
			moe_pool_run(pool, quantize_job, &j);
		else
			quantize_job(&j, 0, 1);
	}
	moe_pool_run(pool, compute_job, &j);
}
