/* rows.c — quantising a whole matrix: rows split over a thread pool, each
 * row through the searching quantiser of search.c with the importance
 * vector of its input columns. */
#include <math.h>
#include <stdlib.h>

#include "quant.h"

typedef struct rows_job {
	moe_quantize_fn fn;
	const float *x;
	uint8_t *dst;
	int64_t nrows, ncols;
	size_t row_bytes;
	const float *w;
} rows_job;

static void rows_run(void *arg, int ith, int nth)
{
	rows_job *j = arg;
	int64_t r0 = j->nrows * ith / nth, r1 = j->nrows * (ith + 1) / nth;
	for (int64_t r = r0; r < r1; r++)
		j->fn(j->x + r * j->ncols, j->dst + (size_t)r * j->row_bytes, j->ncols, j->w);
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
		.row_bytes = (size_t)(ncols / t->block_size) * t->type_size, .w = imatrix,
	};
	if (pool && nrows > 1)
		moe_pool_run(pool, rows_run, &j);
	else
		rows_run(&j, 0, 1);
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
