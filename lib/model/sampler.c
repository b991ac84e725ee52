/* sampler.c — penalties, truncation (top-k, top-p, min-p), temperature and
 * a seeded draw; see sampler.h for the order. */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct moe_sampler {
	moe_sampler_params p;
	int n_vocab;
	uint64_t rng;
	int32_t *hist; /* ring of recent tokens */
	int hist_cap, hist_len, hist_head;
	float *work;
	int32_t *idx;
	int *count; /* occurrences in the window, per token */
};

moe_sampler_params moe_sampler_defaults(void)
{
	return (moe_sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
				    .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0x5eed};
}

int moe_sampler_new(moe_sampler **out, const moe_sampler_params *p, int n_vocab, moe_error *e)
{
	if (n_vocab <= 0)
		return moe_err(e, MOE_EINVAL, "sampler: empty vocabulary");
	if (!(p->temp >= 0) || !(p->top_p > 0) || p->min_p < 0 || p->min_p > 1 ||
	    !(p->repeat_penalty > 0))
		return moe_err(e, MOE_EINVAL, "sampler: temperature >= 0, top-p in (0,1], min-p in "
					      "[0,1] and repeat penalty > 0 are required");
	moe_sampler *s = calloc(1, sizeof *s);
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s->p = *p;
	s->n_vocab = n_vocab;
	s->hist_cap = p->repeat_last_n < 0 ? 1 << 20 : p->repeat_last_n;
	s->hist = malloc((size_t)(s->hist_cap ? s->hist_cap : 1) * sizeof *s->hist);
	s->work = malloc((size_t)n_vocab * sizeof *s->work);
	s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
	s->count = calloc((size_t)n_vocab, sizeof *s->count);
	if (!s->hist || !s->work || !s->idx || !s->count) {
		moe_sampler_free(s);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	moe_sampler_reset(s);
	*out = s;
	return 0;
}

void moe_sampler_free(moe_sampler *s)
{
	if (!s)
		return;
	free(s->hist);
	free(s->work);
	free(s->idx);
	free(s->count);
	free(s);
}

void moe_sampler_reset(moe_sampler *s)
{
	s->rng = s->p.seed ^ 0x9E3779B97F4A7C15ull;
	s->hist_len = s->hist_head = 0;
	memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
}

void moe_sampler_accept(moe_sampler *s, int32_t id)
{
	if (id < 0 || id >= s->n_vocab || s->hist_cap == 0)
		return;
	if (s->hist_len == s->hist_cap) {
		int32_t old = s->hist[s->hist_head];
		s->count[old]--;
		s->hist_len--;
	}
	s->hist[s->hist_head] = id;
	s->hist_head = (s->hist_head + 1) % s->hist_cap;
	s->hist_len++;
	s->count[id]++;
}

/* splitmix64: a small, well-mixed generator; same seed, same draws. */
static double next_uniform(moe_sampler *s)
{
	uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static const float *cmp_base;
static int cmp_desc(const void *a, const void *b)
{
	float x = cmp_base[*(const int32_t *)a], y = cmp_base[*(const int32_t *)b];
	if (x != y)
		return x > y ? -1 : 1;
	return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t moe_sampler_sample(moe_sampler *s, const float *logits)
{
	int n = s->n_vocab;
	float *l = s->work;
	memcpy(l, logits, (size_t)n * sizeof *l);
	/* penalties, on tokens seen in the window */
	const moe_sampler_params *p = &s->p;
	if (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0) {
		for (int i = 0; i < s->hist_len; i++) {
			int32_t id = s->hist[(s->hist_head - 1 - i + s->hist_cap) % s->hist_cap];
			if (s->count[id] < 0)
				continue; /* already applied (marked) */
			float v = l[id];
			v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
			v -= (float)s->count[id] * p->frequency_penalty + p->presence_penalty;
			l[id] = v;
			s->count[id] = -s->count[id] - 1; /* mark */
		}
		for (int i = 0; i < s->hist_len; i++) {
			int32_t id = s->hist[i];
			if (s->count[id] < 0)
				s->count[id] = -s->count[id] - 1;
		}
	}
	if (p->temp <= 0) {
		int best = 0;
		for (int i = 1; i < n; i++)
			if (l[i] > l[best])
				best = i;
		return best;
	}
	/* candidates sorted by logit (top-k bounds the sort) */
	int m = n;
	for (int i = 0; i < n; i++)
		s->idx[i] = i;
	cmp_base = l;
	qsort(s->idx, (size_t)n, sizeof *s->idx, cmp_desc);
	if (p->top_k > 0 && p->top_k < m)
		m = p->top_k;
	/* softmax over the candidates (temperature last, as llama.cpp) */
	float mx = l[s->idx[0]];
	double sum = 0;
	for (int i = 0; i < m; i++)
		sum += exp((double)l[s->idx[i]] - mx);
	if (p->top_p < 1.0f) {
		double cum = 0;
		for (int i = 0; i < m; i++) {
			cum += exp((double)l[s->idx[i]] - mx) / sum;
			if (cum >= p->top_p) {
				m = i + 1;
				break;
			}
		}
	}
	if (p->min_p > 0) {
		/* keep tokens with probability >= min_p * max probability */
		double lim = log(p->min_p);
		int keep = 1;
		while (keep < m && (double)l[s->idx[keep]] - mx >= lim)
			keep++;
		m = keep;
	}
	double total = 0;
	for (int i = 0; i < m; i++)
		total += exp(((double)l[s->idx[i]] - mx) / p->temp);
	double r = next_uniform(s) * total, acc = 0;
	for (int i = 0; i < m; i++) {
		acc += exp(((double)l[s->idx[i]] - mx) / p->temp);
		if (r < acc)
			return s->idx[i];
	}
	return s->idx[m - 1];
}
