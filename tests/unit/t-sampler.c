/* t-sampler.c — the sampler: greedy, truncation, penalties, seeded draws.
 * Expected values are worked out by hand from the definitions. */
#include "sampler.h"
#include "tap.h"

#include <math.h>

static moe_sampler *mk(moe_sampler_params p, int n)
{
	moe_sampler *s = NULL;
	moe_error e = {0};
	if (moe_sampler_new(&s, &p, n, &e) < 0)
		printf("# %s\n", e.msg);
	return s;
}

int main(void)
{
	float l[5] = {1.0f, 3.0f, 2.0f, -1.0f, 2.9f};
	moe_sampler_params g = moe_sampler_defaults();
	g.temp = 0;
	moe_sampler *s = mk(g, 5);
	is_int(moe_sampler_sample(s, l), 1, "greedy picks the largest logit");

	/* repeat penalty 2 after seeing token 1: 3/2 = 1.5 < 2.9 -> token 4 */
	g.repeat_penalty = 2.0f;
	moe_sampler_free(s);
	s = mk(g, 5);
	moe_sampler_accept(s, 1);
	is_int(moe_sampler_sample(s, l), 4, "repeat penalty divides a positive logit");
	/* seeing token 1 three times with frequency penalty 0.5 (no repeat penalty):
	 * 3 - 1.5 = 1.5 -> token 4 (2.9) wins; presence penalty 0.05 on 4 too */
	g.repeat_penalty = 1.0f;
	g.frequency_penalty = 0.5f;
	moe_sampler_free(s);
	s = mk(g, 5);
	for (int i = 0; i < 3; i++)
		moe_sampler_accept(s, 1);
	is_int(moe_sampler_sample(s, l), 4, "frequency penalty scales with the count");
	/* the window forgets: repeat_last_n = 2, then two other tokens */
	g.frequency_penalty = 0;
	g.repeat_penalty = 100.0f;
	g.repeat_last_n = 2;
	moe_sampler_free(s);
	s = mk(g, 5);
	moe_sampler_accept(s, 1);
	moe_sampler_accept(s, 0);
	moe_sampler_accept(s, 3);
	is_int(moe_sampler_sample(s, l), 1, "penalty window of 2 forgets older tokens");
	moe_sampler_free(s);

	/* top-k 1 equals greedy at any temperature */
	moe_sampler_params p = moe_sampler_defaults();
	p.temp = 5.0f;
	p.top_k = 1;
	s = mk(p, 5);
	int all1 = 1;
	for (int i = 0; i < 100; i++)
		all1 &= moe_sampler_sample(s, l) == 1;
	ok(all1, "top-k 1 always picks the argmax");
	moe_sampler_free(s);

	/* two tokens with p = 0.25 / 0.75 at temperature 1 */
	float two[2] = {logf(0.25f), logf(0.75f)};
	p = moe_sampler_defaults();
	p.temp = 1.0f;
	p.top_k = 0;
	p.top_p = 1.0f;
	p.min_p = 0;
	p.seed = 42;
	s = mk(p, 2);
	int n1 = 0, n_draws = 20000;
	for (int i = 0; i < n_draws; i++)
		n1 += moe_sampler_sample(s, two) == 1;
	is_near((double)n1 / n_draws, 0.75, 0.015, "draws follow the distribution (%d/%d)", n1, n_draws);
	/* same seed, same sequence */
	moe_sampler_reset(s);
	int a[10], b[10];
	for (int i = 0; i < 10; i++)
		a[i] = moe_sampler_sample(s, two);
	moe_sampler_reset(s);
	for (int i = 0; i < 10; i++)
		b[i] = moe_sampler_sample(s, two);
	ok(!memcmp(a, b, sizeof a), "a seed reproduces its draws");
	moe_sampler_free(s);

	/* top-p 0.5: the 0.75 token alone covers it */
	p.top_p = 0.5f;
	s = mk(p, 2);
	int only1 = 1;
	for (int i = 0; i < 200; i++)
		only1 &= moe_sampler_sample(s, two) == 1;
	ok(only1, "top-p 0.5 keeps only the most likely token");
	moe_sampler_free(s);

	/* min-p 0.5: 0.25 < 0.5 * 0.75 is cut */
	p.top_p = 1.0f;
	p.min_p = 0.5f;
	s = mk(p, 2);
	only1 = 1;
	for (int i = 0; i < 200; i++)
		only1 &= moe_sampler_sample(s, two) == 1;
	ok(only1, "min-p 0.5 removes tokens below half the top probability");
	moe_sampler_free(s);
	/* min-p 0.3: 0.25 >= 0.3 * 0.75 = 0.225 survives */
	p.min_p = 0.3f;
	s = mk(p, 2);
	n1 = 0;
	for (int i = 0; i < 4000; i++)
		n1 += moe_sampler_sample(s, two) == 1;
	ok(n1 < 4000 && n1 > 2700, "min-p 0.3 keeps the 0.25 token (%d/4000 picked the other)", n1);
	moe_sampler_free(s);

	/* temperature: T -> small concentrates on the max */
	p.min_p = 0;
	p.temp = 0.05f;
	s = mk(p, 2);
	n1 = 0;
	for (int i = 0; i < 1000; i++)
		n1 += moe_sampler_sample(s, two) == 1;
	ok(n1 >= 999, "low temperature is nearly greedy (%d/1000)", n1);
	moe_sampler_free(s);

	/* top-k over a large vocabulary: every draw is one of the k largest
	 * (found here by counting how many logits beat it), and all k occur */
	{
		enum { N = 5000, K = 7 };
		static float big[N];
		uint64_t x = 12345;
		for (int i = 0; i < N; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			big[i] = (float)((x >> 33) % 100000) / 1000.0f; /* ties possible */
		}
		moe_sampler_params q = moe_sampler_defaults();
		q.temp = 1000.0f; /* nearly uniform over the candidates */
		q.top_k = K;
		q.top_p = 1.0f;
		q.min_p = 0;
		s = mk(q, N);
		int in_top = 1, distinct = 0;
		static int hits[N];
		for (int d = 0; d < 2000; d++) {
			int32_t id = moe_sampler_sample(s, big);
			int beaten_by = 0;
			for (int i = 0; i < N; i++)
				beaten_by += big[i] > big[id] || (big[i] == big[id] && i < id);
			in_top &= beaten_by < K;
			distinct += hits[id]++ == 0;
		}
		ok(in_top, "top-k %d of %d: every draw is among the %d best", K, N, K);
		is_int(distinct, K, "all %d candidates are drawn at a high temperature", K);
		moe_sampler_free(s);
	}

	moe_error e = {0};
	p.temp = -1;
	ok(moe_sampler_new(&s, &p, 2, &e) == MOE_EINVAL, "negative temperature rejected");
	return tap_done();
}
