/* rows.c — quantising a whole matrix: rows split over a thread pool, each
 * row through the searching quantiser of search.c with per-element weights
 * derived from the importance vector of its input columns.
 *
 * Which weights: the search minimises sum_i w_i (x_i - q_i)^2.  w_i = imp_i,
 * the mean square of the activation that multiplies x_i, makes that the
 * expected squared error of the layer's output (for uncorrelated
 * activations), and is what the 4-bit and wider types use (without an
 * importance matrix: all ones, the plain squared error).
 *
 * The 2- and 3-bit K-quants (Q2_K, Q3_K) have grids too coarse to represent
 * every element of a group well; there it pays to favour the large weights,
 * which carry most of each output:
 *
 *     w_i = imp_i * sqrt(sigma^2 + x_i^2)   with an importance matrix,
 *     w_i = sigma + |x_i|                    without one,
 *
 * sigma^2 the mean of x^2 over the 256-element super-block (it keeps small
 * elements from losing all weight).  Measured on the demo model (README,
 * "moe-quant"): KL divergence 10-22% lower at q2_k and q3_k_m than with
 * imp_i (or ones) alone; at q4_k_m it was worse (KL 0.00237 without and
 * 0.00230 with the importance matrix, against 0.00199 and 0.00198), so the
 * wider types keep imp_i. */
#include <math.h>
#include <stdlib.h>

#include "quant.h"

typedef struct rows_job {
	moe_quantize_fn fn;
	const float *x;
	uint8_t *dst;
	int64_t nrows, ncols;
	size_t row_bytes;
	const float *imp;     /* importance per column, or NULL */
	bool size_weights;    /* Q2_K / Q3_K: weigh by the elements' sizes */
	int64_t span;         /* elements over which sigma is taken */
	float *scratch;       /* ncols floats per thread, when size_weights */
} rows_job;

/* The element weights of one row into w (see the comment at the top). */
static void row_weights(const rows_job *j, const float *x, float *w)
{
	for (int64_t b = 0; b < j->ncols; b += j->span) {
		double s2 = 0;
		for (int64_t i = b; i < b + j->span; i++)
			s2 += (double)x[i] * x[i];
		float sigma2 = (float)(s2 / (double)j->span);
		for (int64_t i = b; i < b + j->span; i++)
			w[i] = j->imp ? j->imp[i] * sqrtf(sigma2 + x[i] * x[i])
				      : sqrtf(sigma2) + fabsf(x[i]);
	}
}

static void rows_run(void *arg, int ith, int nth)
{
	rows_job *j = arg;
	int64_t r0 = j->nrows * ith / nth, r1 = j->nrows * (ith + 1) / nth;
	float *w = j->scratch ? j->scratch + (size_t)ith * (size_t)j->ncols : NULL;
	for (int64_t r = r0; r < r1; r++) {
		const float *x = j->x + r * j->ncols;
		if (w)
			row_weights(j, x, w);
		j->fn(x, j->dst + (size_t)r * j->row_bytes, j->ncols, w ? w : j->imp);
	}
}

int moe_quant_rows(int dtype, const float *x, void *dst, int64_t nrows, int64_t ncols,
		   const float *imatrix, moe_pool *pool, moe_error *e)
{
	const moe_type_traits *t = moe_type_get(dtype);
	moe_quantize_fn fn = moe_quant_fn(dtype);

	if (!t || !fn)
		return moe_err(e, MOE_EUNSUPPORTED, "no weight quantiser for type %s",
			       moe_type_name(dtype));
	if (ncols <= 0 || nrows < 0 || ncols % t->block_size)
		return moe_err(e, MOE_EINVAL, "%s: a row of %lld elements is not a whole number "
			       "of %u-element blocks", t->name, (long long)ncols, t->block_size);
	rows_job j = {
		.fn = fn, .x = x, .dst = dst, .nrows = nrows, .ncols = ncols,
		.row_bytes = (size_t)(ncols / t->block_size) * t->type_size,
		.imp = imatrix,
		.size_weights = dtype == MOE_Q2_K || dtype == MOE_Q3_K,
		.span = t->block_size,
	};
	int nth = pool && nrows > 1 ? moe_pool_threads(pool) : 1;
	if (j.size_weights) {
		j.scratch = malloc(sizeof(float) * (size_t)ncols * (size_t)nth);
		if (!j.scratch)
			return moe_err(e, MOE_ENOMEM, "out of memory for the weights of %lld columns",
				       (long long)ncols);
	}
	if (nth > 1)
		moe_pool_run(pool, rows_run, &j);
	else
		rows_run(&j, 0, 1);
	free(j.scratch);
	return 0;
}

double moe_quant_rel_error(const float *x, const float *y, const float *w, int64_t n)
{
	double num = 0, den = 0;
	for (int64_t i = 0; i < n; i++) {
		double wi = w ? w[i] : 1.0, r = (double)x[i] - y[i];
		num += wi * r * r;
		den += wi * (double)x[i] * x[i];
	}
	return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}
