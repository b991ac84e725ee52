/* stats.c — summary statistics, quantiles, llama-perplexity's accumulator
 * and the log-softmax of a logit row (see bench.h). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	if (isnan(x) || isnan(y))
		return isnan(x) - isnan(y); /* NaNs last */
	return (x > y) - (x < y);
}

void moe_bench_sort(double *v, size_t n)
{
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_double);
}

double moe_bench_quantile(const double *sorted, size_t n, double q)
{
	if (n == 0)
		return NAN;
	if (q <= 0)
		return sorted[0];
	if (q >= 1)
		return sorted[n - 1];
	double pos = q * (double)(n - 1);
	size_t i = (size_t)pos;
	double f = pos - (double)i;
	if (i + 1 >= n)
		return sorted[n - 1];
	return sorted[i] + f * (sorted[i + 1] - sorted[i]);
}

void moe_bench_summarize(const double *v, size_t n, moe_bench_summary *s)
{
	*s = (moe_bench_summary){.n = n};
	if (n == 0)
		return;
	double sum = 0, mn = v[0], mx = v[0];
	for (size_t i = 0; i < n; i++) {
		sum += v[i];
		mn = v[i] < mn ? v[i] : mn;
		mx = v[i] > mx ? v[i] : mx;
	}
	s->mean = sum / (double)n;
	s->min = mn;
	s->max = mx;
	/* two passes: the variance of nearly equal timings must not cancel */
	if (n > 1) {
		double ss = 0;
		for (size_t i = 0; i < n; i++)
			ss += (v[i] - s->mean) * (v[i] - s->mean);
		s->stddev = sqrt(ss / (double)(n - 1));
	}
	double *tmp = malloc(n * sizeof *tmp);
	if (!tmp) {
		s->median = NAN;
		return;
	}
	for (size_t i = 0; i < n; i++)
		tmp[i] = v[i];
	moe_bench_sort(tmp, n);
	s->median = moe_bench_quantile(tmp, n, 0.5);
	free(tmp);
}

void moe_ppl_acc_add(moe_ppl_acc *a, double nll)
{
	a->nll += nll;
	a->nll2 += nll * nll;
	a->count++;
}

double moe_ppl_acc_ppl(const moe_ppl_acc *a)
{
	return a->count ? exp(a->nll / (double)a->count) : NAN;
}

double moe_ppl_acc_err(const moe_ppl_acc *a)
{
	if (a->count < 2)
		return NAN;
	double n = (double)a->count, mean = a->nll / n;
	double var = a->nll2 / n - mean * mean;
	if (!(var > 0))
		return NAN;
	return exp(mean) * sqrt(var / (n - 1));
}

double moe_bench_log_prob(const float *logits, int n_vocab, int32_t tok, double *lse,
			  int32_t *argmax)
{
	int32_t am = 0;
	float mx = logits[0];
	for (int i = 1; i < n_vocab; i++)
		if (logits[i] > mx) {
			mx = logits[i];
			am = i;
		}
	double sum = 0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - mx);
	double l = (double)mx + log(sum);
	if (lse)
		*lse = l;
	if (argmax)
		*argmax = am;
	return tok >= 0 && tok < n_vocab ? (double)logits[tok] - l : NAN;
}
