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
	int *count;    /* occurrences in the window, per token */
	uint8_t *seen; /* scratch: penalty already applied to this token */
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
	s->seen = calloc((size_t)n_vocab, 1);
	if (!s->hist || !s->work || !s->idx || !s->count || !s->seen) {
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
	free(s->seen);
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

/* Candidate a before b: higher logit, ties to the lower id (deterministic). */
static bool better(const float *l, int32_t a, int32_t b)
{
	return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static int cmp_desc(const void *a, const void *b, void *logits)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return better(logits, x, y) ? -1 : better(logits, y, x) ? 1 : 0;
}

/* The k best ids of l[0..n) into idx[0..k), best first: a min-heap of the
 * k best seen so far (its root the worst of them), O(n log k) instead of
 * sorting the whole vocabulary for every token. */
static void select_top_k(const float *l, int n, int k, int32_t *idx)
{
	for (int i = 0; i < n; i++) {
		int m = i < k ? i : k;
		if (i >= k) {
			if (!better(l, i, idx[0]))
				continue;
			m = k - 1; /* replace the root: sift the last element down */
			int32_t last = idx[m];
			int p = 0;
			for (;;) {
				int c = 2 * p + 1;
				if (c >= m)
					break;
				if (c + 1 < m && better(l, idx[c], idx[c + 1]))
					c++;
				if (!better(l, last, idx[c]))
					break;
				idx[p] = idx[c];
				p = c;
			}
			idx[p] = last;
		}
		/* sift up the new id from position m */
		int c = m;
		while (c > 0 && better(l, idx[(c - 1) / 2], i)) {
			idx[c] = idx[(c - 1) / 2];
			c = (c - 1) / 2;
		}
		idx[c] = i;
	}
	qsort_r(idx, (size_t)k, sizeof *idx, cmp_desc, (void *)l);
}

/* Repetition, presence and frequency penalties, once per distinct token of
 * the window. */
static void apply_penalties(moe_sampler *s, float *l)
{
	const moe_sampler_params *p = &s->p;
	if (p->repeat_penalty == 1.0f && p->presence_penalty == 0 && p->frequency_penalty == 0)
		return;
	for (int i = 0; i < s->hist_len; i++) {
		int32_t id = s->hist[i];
		if (s->seen[id])
			continue;
		s->seen[id] = 1;
		float v = l[id];
		v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
		l[id] = v - (float)s->count[id] * p->frequency_penalty - p->presence_penalty;
	}
	for (int i = 0; i < s->hist_len; i++)
		s->seen[s->hist[i]] = 0;
}

int32_t moe_sampler_sample(moe_sampler *s, const float *logits)
{
	int n = s->n_vocab;
	float *l = s->work;
	const moe_sampler_params *p = &s->p;
	memcpy(l, logits, (size_t)n * sizeof *l);
	apply_penalties(s, l);
	if (p->temp <= 0) {
		int best = 0;
		for (int i = 1; i < n; i++)
			if (l[i] > l[best])
				best = i;
		return best;
	}
	/* candidates, best first */
	int m = p->top_k > 0 && p->top_k < n ? p->top_k : n;
	if (m < n) {
		select_top_k(l, n, m, s->idx);
	} else {
		for (int i = 0; i < n; i++)
			s->idx[i] = i;
		qsort_r(s->idx, (size_t)n, sizeof *s->idx, cmp_desc, l);
	}
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
