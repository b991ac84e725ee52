/* arch_phimoe.c — what Phi-3.5-MoE computes differently from the Llama
 * family (transformers' modeling_phimoe.py, the published definition):
 * LayerNorm with a bias instead of RMSNorm, and the sparsemixer router.
 * (LongRoPE is in forward.c's rope tables, the biases where they apply.) */
#include "engine/engine_int.h"

#include <float.h>
#include <math.h>

void moe_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n,
		   double eps)
{
	double mean = 0, var = 0;
	for (int64_t i = 0; i < n; i++)
		mean += x[i];
	mean /= (double)n;
	for (int64_t i = 0; i < n; i++)
		var += ((double)x[i] - mean) * ((double)x[i] - mean);
	float scale = (float)(1.0 / sqrt(var / (double)n + eps)), m = (float)mean;
	for (int64_t i = 0; i < n; i++)
		y[i] = (x[i] - m) * scale * w[i] + (b ? b[i] : 0.0f);
}

/* Exactly two experts.  For the k-th (k = 0, 1): best = the largest score
 * not taken (the first of equal ones); the experts kept are those with
 * (s_best - s_i) / max(|s_i|, s_best) <= 2 eps, the ones taken before
 * excluded; the weight is the softmax over the kept experts at best.  Not
 * a renormalised top-2 softmax: each weight has its own neighbourhood. */
void moe_sparsemixer(const float *s, int n, double eps, int32_t sel[2], float w[2])
{
	for (int k = 0; k < 2; k++) {
		int best = -1;
		for (int i = 0; i < n; i++)
			if ((k == 0 || i != sel[0]) && (best < 0 || s[i] > s[best]))
				best = i;
		double top = s[best], sum = 0;
		for (int i = 0; i < n; i++) {
			if (k == 1 && i == sel[0])
				continue;
			double f = fabs((double)s[i]) > top ? fabs((double)s[i]) : top;
			if ((top - s[i]) / f > 2 * eps)
				continue;
			sum += exp((double)s[i] - top);
		}
		sel[k] = best;
		w[k] = (float)(1.0 / sum); /* exp(s_best - top) = 1 */
	}
}
