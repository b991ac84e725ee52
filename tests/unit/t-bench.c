/* t-bench.c — lib/bench against hand-computed values: statistics and
 * llama-perplexity's error estimate, log-softmax, the KLD record encoding
 * against an exact KL-divergence, the KL summary, every report format
 * (parsed back), expert statistics and the STREAM probe's plumbing. */
#include "bench.h"
#include "tap.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_stats(void)
{
	double v[] = {4, 1, 3, 2};
	moe_bench_summary s;
	moe_bench_summarize(v, 4, &s);
	is_near(s.mean, 2.5, 1e-12, "mean of 1..4");
	is_near(s.stddev, sqrt(5.0 / 3.0), 1e-12, "sample stddev of 1..4 = sqrt(5/3)");
	is_near(s.median, 2.5, 1e-12, "median of 1..4");
	ok(s.min == 1 && s.max == 4, "min and max");
	is_near(v[0], 4, 0, "summarize leaves the input alone");
	moe_bench_summarize(v, 1, &s);
	ok(s.stddev == 0 && s.median == 4, "one value: stddev 0, median itself");

	double q[] = {0, 10, 20, 30, 40};
	is_near(moe_bench_quantile(q, 5, 0.25), 10, 1e-12, "quantile 0.25");
	is_near(moe_bench_quantile(q, 5, 0.9), 36, 1e-12, "quantile 0.9 interpolates");
	ok(moe_bench_quantile(q, 5, 0) == 0 && moe_bench_quantile(q, 5, 1) == 40, "quantile ends");
	ok(isnan(moe_bench_quantile(q, 0, 0.5)), "quantile of nothing is NAN");

	/* nll 1, 2, 3: ppl e^2; error e^2 sqrt((14/3 - 4) / 2) */
	moe_ppl_acc a = {0};
	ok(isnan(moe_ppl_acc_ppl(&a)), "no tokens: NAN perplexity");
	moe_ppl_acc_add(&a, 1);
	ok(isnan(moe_ppl_acc_err(&a)), "one token: no error estimate");
	moe_ppl_acc_add(&a, 2);
	moe_ppl_acc_add(&a, 3);
	is_near(moe_ppl_acc_ppl(&a), exp(2.0), 1e-12, "perplexity = exp(mean nll)");
	is_near(moe_ppl_acc_err(&a), exp(2.0) * sqrt((2.0 / 3.0) / 2.0), 1e-12,
		"llama-perplexity's error estimate");

	/* logits 0, ln 3: p = 1/4, 3/4 */
	float lg[] = {0.0f, logf(3.0f)};
	double lse;
	int32_t am;
	is_near(moe_bench_log_prob(lg, 2, 1, &lse, &am), log(0.75), 1e-6, "log p = log 3/4");
	is_near(lse, log(4.0), 1e-6, "log-sum-exp = log 4");
	is_int(am, 1, "arg-max");
	/* large logits must not overflow */
	float big[] = {1000.0f, 1000.0f};
	is_near(moe_bench_log_prob(big, 2, 0, NULL, NULL), log(0.5), 1e-9, "no overflow at 1000");
}

/* KL(P || Q) over logits, straight from the definition. */
static double kl_exact(const float *p, const float *q, int n)
{
	double zp = 0, zq = 0, kl = 0;
	for (int i = 0; i < n; i++) {
		zp += exp(p[i]);
		zq += exp(q[i]);
	}
	for (int i = 0; i < n; i++) {
		double pp = exp(p[i]) / zp, qq = exp(q[i]) / zq;
		kl += pp * log(pp / qq);
	}
	return kl;
}

static void test_kld_records(void)
{
	enum { NV = 50 };
	float p[NV], q[NV];
	uint64_t s = 12345;
	for (int i = 0; i < NV; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
		q[i] = p[i] + (float)((i % 7) - 3) * 0.1f;
	}
	size_t rs = moe_kld_record_size(NV);
	is_int(rs, 16 + 2 * NV, "record size 16 + 2 n_vocab");
	uint8_t *rec = malloc(rs);
	moe_kld_encode(p, NV, 7, rec);
	moe_kl_token t;
	moe_kld_compare(rec, p, NV, 7, &t);
	ok(fabs(t.kld) < 1e-7, "a model against its own record: KL %.3g ~ 0", t.kld);
	ok(t.same, "same arg-max");
	is_near(t.nll, t.nll_base, 1e-6, "same nll");
	is_near(t.dp, 0, 1e-6, "no change in p(next)");
	moe_kld_compare(rec, q, NV, 7, &t);
	double want = kl_exact(p, q, NV);
	ok(want > 1e-3, "the test distributions differ (KL %.4f)", want);
	is_near(t.kld, want, 1e-5, "KL against the record equals the exact KL");
	double lq = moe_bench_log_prob(q, NV, 7, NULL, NULL),
	       lp = moe_bench_log_prob(p, NV, 7, NULL, NULL);
	is_near(t.nll, -lq, 1e-9, "nll of the model");
	is_near(t.nll_base, -lp, 1e-6, "nll of the base (stored exactly)");
	is_near(t.dp, exp(lq) - exp(lp), 1e-6, "dp = p(next) - p_base(next)");

	/* a flat row: zero range */
	float flat[NV];
	for (int i = 0; i < NV; i++)
		flat[i] = 2.0f;
	moe_kld_encode(flat, NV, 3, rec);
	moe_kld_compare(rec, flat, NV, 3, &t);
	ok(fabs(t.kld) < 1e-9, "flat row against itself: KL 0");
	is_near(t.nll, log((double)NV), 1e-6, "flat row: nll = log n_vocab");
	/* a peaked row: log-probabilities below max - 30 are clipped, which
	 * changes almost nothing */
	float peak[NV];
	for (int i = 0; i < NV; i++)
		peak[i] = i == 0 ? 0.0f : -40.0f - (float)i;
	moe_kld_encode(peak, NV, 0, rec);
	moe_kld_compare(rec, peak, NV, 0, &t);
	ok(fabs(t.kld) < 1e-9 && t.same, "clipped tail: KL ~ 0");
	moe_kld_compare(rec, q, NV, 0, &t);
	is_near(t.kld, kl_exact(peak, q, NV), 1e-6, "clipped base against another row");
	free(rec);
}

static void test_kl_summary(void)
{
	double kld[] = {0.4, 0.1, 0.3, 0.2}, dp[] = {0.1, -0.1, 0.2, 0.0};
	double nll[] = {1, 2, 3, 4}, nllb[] = {1, 2, 3, 3};
	uint8_t same[] = {1, 1, 0, 1};
	moe_kl_result r;
	moe_kl_summarize(kld, dp, nll, nllb, same, 4, &r);
	is_near(r.kld, 0.25, 1e-12, "mean KLD");
	is_near(r.kld_err, sqrt(0.0125 / 3), 1e-12, "KLD error: sqrt(var / (n - 1))");
	ok(r.kld_min == 0.1 && r.kld_max == 0.4, "KLD min and max");
	is_near(r.kld_median, 0.25, 1e-12, "median KLD");
	is_near(r.same_top, 0.75, 1e-12, "same top 3 of 4");
	is_near(r.same_top_err, sqrt(0.75 * 0.25 / 3), 1e-12, "binomial error of same top");
	is_near(r.ppl, exp(2.5), 1e-9, "PPL(Q)");
	is_near(r.ppl_base, exp(2.25), 1e-9, "PPL(base)");
	is_near(r.ln_ratio, 0.25, 1e-12, "mean ln(PPL(Q)/PPL(base))");
	is_near(r.ln_ratio_err, sqrt(0.1875 / 3), 1e-12,
		"its error from the per-token differences");
	is_near(r.ratio, exp(0.25), 1e-12, "PPL ratio");
	is_near(r.dp_mean, 0.05, 1e-12, "mean dp");
	is_near(r.dp_rms, sqrt(0.06 / 4), 1e-12, "RMS dp");
	/* cor of (1,2,3,4) and (1,2,3,3): cov 0.875, var 1.25 and 0.6875 */
	is_near(r.cor, 0.875 / sqrt(1.25 * 0.6875), 1e-12, "correlation of nll");
}

/* ------------------------------------------------------------- reports */

static char *render(moe_bench_format fmt, const moe_bench_env *env, const moe_bench_row *rows,
		    size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	moe_error e = {0};
	int rc = moe_bench_report(f, fmt, env, rows, n, &e);
	fclose(f);
	ok(rc == 0, "report in format %d", (int)fmt);
	return buf;
}

/* Fields of one CSV line (RFC 4180 quoting). */
static int csv_fields(const char *line)
{
	int n = 1;
	bool q = false;
	for (const char *p = line; *p && *p != '\n'; p++) {
		if (*p == '"')
			q = !q;
		else if (*p == ',' && !q)
			n++;
	}
	return q ? -1 : n;
}

static void test_reports(void)
{
	moe_bench_model_row mr = {.filename = "m \"q\".uth", .load_s = 0.5, .peak_rss = 1 << 20};
	snprintf(mr.info.type, sizeof mr.info.type, "llama 1B Q4_K mix");
	snprintf(mr.info.main_type, sizeof mr.info.main_type, "q4_k");
	snprintf(mr.info.weight_types, sizeof mr.info.weight_types, "q4_k 90%%, f32 10%%");
	mr.info.size = 1000;
	mr.info.n_params = 2000;
	mr.info.n_params_active = 500;
	mr.info.active_bytes = 1000000000;
	uint64_t s1[] = {1000000000, 2000000000}, s2[] = {1000000000, 1000000000};
	moe_bench_row rows[2] = {
		{.model = &mr,
		 .test = {.n_prompt = 512,
			  .n_batch = 512,
			  .n_threads = 2,
			  .kv_type = MOE_F16,
			  .reps = 2},
		 .test_time = "2026-01-01T00:00:00Z",
		 .samples_ns = s1,
		 .n_samples = 2},
		{.model = &mr,
		 .test = {.n_gen = 10,
			  .n_depth = 4096,
			  .n_batch = 512,
			  .n_threads = 2,
			  .kv_type = MOE_F16,
			  .reps = 2},
		 .test_time = "2026-01-01T00:00:01Z",
		 .samples_ns = s2,
		 .n_samples = 2},
	};
	moe_bench_env env = {.build_commit = "moe 0.1.0",
			     .cpu_info = "cpu",
			     .isa = "avx2",
			     .stream_gbs = 40,
			     .stream_read_gbs = 35,
			     .stream_threads = 2,
			     .stream_array_bytes = 256 << 20};
	char name[64];
	is_str(moe_bench_test_name(&rows[0].test, name, sizeof name), "pp512", "test name pp");
	is_str(moe_bench_test_name(&rows[1].test, name, sizeof name), "tg10 @ d4096",
	       "test name tg at depth");
	moe_bench_test pg = {.n_prompt = 512, .n_gen = 128};
	is_str(moe_bench_test_name(&pg, name, sizeof name), "pp512+tg128", "test name pp+tg");

	/* pp512 in 1 s and 2 s: 512 and 256 tokens/s */
	moe_bench_derived d;
	moe_bench_derive(&rows[0], &env, NULL, &d);
	is_near(d.avg_ts, 384, 1e-9, "avg_ts: mean of per-run rates");
	is_near(d.stddev_ts, sqrt(2 * 128.0 * 128.0), 1e-9, "stddev_ts");
	is_near(d.avg_ns, 1.5e9, 1e-3, "avg_ns");
	ok(isnan(d.bw_gbs), "no bandwidth for a pp row");
	/* tg10 in 1 s: 10 t/s x 1 GB = 10 GB/s, 25%% of 40 */
	moe_bench_derive(&rows[1], &env, NULL, &d);
	is_near(d.bw_gbs, 10, 1e-9, "tg bandwidth: bytes/token x t/s");
	is_near(d.bw_pct, 25, 1e-9, "share of the measured bandwidth");

	char *js = render(MOE_BENCH_JSON, &env, rows, 2);
	json_error_t je;
	json_t *a = json_loads(js, 0, &je);
	ok(json_is_array(a) && json_array_size(a) == 2, "json: an array of 2 objects");
	json_t *o = json_array_get(a, 0), *o2 = json_array_get(a, 1);
	static const char *const fields[] = {
		"build_commit",    "cpu_info",     "model_filename",  "model_type", "model_size",
		"model_n_params",  "n_batch",      "n_threads",       "type_k",     "n_prompt",
		"n_gen",           "n_depth",      "test_time",       "avg_ns",     "stddev_ns",
		"avg_ts",          "stddev_ts",    "samples_ns",      "samples_ts", "isa",
		"n_params_active", "weight_types", "bytes_per_token", "bw_gbs",     "bw_pct",
		"median_ts",       "load_time_s",  "peak_rss_bytes"};
	bool all = true;
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
		if (!json_object_get(o, fields[i])) {
			all = false;
			tap_diag("missing %s", fields[i]);
		}
	ok(all, "json: llama-bench's field names and ours");
	is_near(json_number_value(json_object_get(o, "avg_ts")), 384, 1e-6, "json avg_ts");
	ok(json_array_size(json_object_get(o, "samples_ns")) == 2 &&
		   json_integer_value(json_array_get(json_object_get(o, "samples_ns"), 1)) ==
			   2000000000,
	   "json samples_ns carries every run");
	is_near(json_number_value(json_array_get(json_object_get(o, "samples_ts"), 1)), 256, 1e-6,
		"json samples_ts");
	ok(json_is_null(json_object_get(o, "bw_pct")), "pp row: bw_pct null");
	is_near(json_number_value(json_object_get(o2, "bw_pct")), 25, 1e-6, "tg row: bw_pct 25");
	is_int(json_integer_value(json_object_get(o2, "n_depth")), 4096, "json n_depth");
	is_str(json_string_value(json_object_get(o, "model_filename")), "m \"q\".uth",
	       "json escapes");
	is_str(json_string_value(json_object_get(o, "type_k")), "f16", "json type_k");
	json_decref(a);
	free(js);

	js = render(MOE_BENCH_JSONL, &env, rows, 2);
	int lines = 0;
	bool parsed = true;
	for (char *l = js, *nl; *l; l = nl + 1) {
		nl = strchr(l, '\n');
		if (!nl)
			break;
		json_t *x = json_loadb(l, (size_t)(nl - l), 0, &je);
		parsed &= json_is_object(x);
		json_decref(x);
		lines++;
	}
	ok(parsed && lines == 2, "jsonl: 2 lines, each an object");
	free(js);

	js = render(MOE_BENCH_CSV, &env, rows, 2);
	int cols[3] = {0}, nl = 0;
	for (char *l = js; *l && nl < 3; l = strchr(l, '\n') + 1, nl++)
		cols[nl] = csv_fields(l);
	ok(nl == 3 && cols[0] > 20 && cols[0] == cols[1] && cols[1] == cols[2],
	   "csv: header and rows with the same number of columns (%d %d %d)", cols[0], cols[1],
	   cols[2]);
	ok(strstr(js, "\"m \"\"q\"\".uth\"") != NULL, "csv quotes embedded quotes");
	free(js);

	js = render(MOE_BENCH_MD, &env, rows, 2);
	int bars = -1;
	bool same = true;
	int tlines = 0;
	for (char *l = js; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (*l != '|') {
			bars = -1; /* a new table may follow */
			continue;
		}
		int b = 0;
		for (char *p = l; *p && *p != '\n'; p++)
			b += *p == '|';
		if (bars >= 0 && b != bars)
			same = false;
		bars = b;
		tlines++;
	}
	ok(same && tlines == 7, "md: tables with consistent columns (%d table lines)", tlines);
	ok(strstr(js, "| tg10 @ d4096 |") && strstr(js, "25%") && strstr(js, "384.00 ± 181.02"),
	   "md: test names, t/s and %% of bandwidth");
	free(js);
}

static void test_expert_stats(void)
{
	/* three layers, the first dense; 4 experts, 2 used */
	moe_layer layers[3] = {{.is_moe = false}, {.is_moe = true}, {.is_moe = true}};
	moe_model m = {.layers = layers};
	m.hp.n_layer = 3;
	m.hp.n_expert = 4;
	m.hp.n_expert_used = 2;
	moe_expert_stats *s;
	moe_error e = {0};
	ok(moe_expert_stats_new(&s, &m, 2, &e) == 0, "expert stats for 3 layers");
	/* a batch of 2 tokens, then 1: layer 1 then layer 2 each time */
	int32_t l1[3][2] = {{0, 1}, {2, 3}, {0, 3}}, l2[3][2] = {{1, 2}, {1, 3}, {0, 0}};
	float w[2] = {0.75f, 0.25f};
	moe_expert_stats_route(s, 1, l1[0], w, 2);
	moe_expert_stats_route(s, 1, l1[1], w, 2);
	moe_expert_stats_route(s, 2, l2[0], w, 2);
	moe_expert_stats_route(s, 2, l2[1], w, 2);
	moe_expert_stats_route(s, 1, l1[2], w, 2);
	moe_expert_stats_route(s, 2, l2[2], w, 2);
	moe_expert_stats_route(s, 7, l2[2], w, 2); /* ignored */
	is_int(moe_expert_stats_tokens(s, 1), 3, "layer 1 saw 3 tokens");
	is_int(moe_expert_stats_tokens(s, 0), 0, "the dense layer none");
	is_int(moe_expert_stats_count(s, 1, 0), 2, "layer 1 expert 0 chosen twice");
	is_int(moe_expert_stats_count(s, 2, 0), 2, "layer 2 expert 0 twice (one token)");
	json_t *info = json_pack("{s:s}", "source", "test");
	json_t *j = moe_expert_stats_json(s, info);
	json_decref(info);
	is_str(json_string_value(json_object_get(j, "source")), "test", "info merged in");
	is_int(json_integer_value(json_object_get(j, "n_tokens")), 3, "n_tokens");
	json_t *ls = json_object_get(j, "layers");
	is_int(json_array_size(ls), 2, "two MoE layers listed");
	bool sums = true;
	size_t i;
	json_t *lo;
	json_array_foreach(ls, i, lo)
	{
		json_int_t sum = 0;
		size_t x;
		json_t *c;
		json_array_foreach(json_object_get(lo, "counts"), x, c) sum +=
			json_integer_value(c);
		sums &= sum == 3 * 2;
	}
	ok(sums, "counts sum to tokens x experts used per layer");
	is_near(json_number_value(
			json_array_get(json_object_get(json_array_get(ls, 0), "weight_sums"), 0)),
		1.5, 1e-6, "weight sums: expert 0 of layer 1 chosen first twice");
	json_t *tr = json_array_get(json_object_get(j, "transitions"), 0);
	is_int(json_integer_value(json_object_get(tr, "from")), 1, "transition from layer 1");
	is_int(json_integer_value(json_object_get(tr, "to")), 2, "to layer 2");
	is_int(json_integer_value(json_object_get(tr, "tokens")), 3, "3 tokens paired");
	json_t *c = json_object_get(tr, "counts");
#define TR(a, b) json_integer_value(json_array_get(json_array_get(c, a), b))
	/* token 0: {0,1} -> {1,2}; token 1: {2,3} -> {1,3}; token 2: {0,3} -> {0,0} */
	ok(TR(0, 1) == 1 && TR(0, 2) == 1 && TR(1, 1) == 1 && TR(1, 2) == 1 && TR(2, 1) == 1 &&
		   TR(2, 3) == 1 && TR(3, 1) == 1 && TR(3, 3) == 1 && TR(0, 0) == 2 &&
		   TR(3, 0) == 2,
	   "co-occurrence counts by hand");
	json_int_t total = 0;
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			total += TR(a, b);
	is_int(total, 3 * 2 * 2, "transitions sum to tokens x k x k");
#undef TR
	is_int(json_integer_value(json_object_get(j, "unpaired_tokens")), 0, "nothing unpaired");
	json_decref(j);
	moe_expert_stats_free(s);

	m.hp.n_expert = 0;
	ok(moe_expert_stats_new(&s, &m, 2, &e) == MOE_EINVAL, "a dense model: EINVAL");
}

static void test_stream(void)
{
	moe_stream_result r;
	moe_error e = {0};
	ok(moe_bench_stream(1000, 1, 1, &r, &e) == MOE_EINVAL, "stream arrays under 1 MiB refused");
	ok(moe_bench_stream(4 << 20, 2, 2, &r, &e) == 0, "stream over 3 x 4 MiB");
	ok(r.triad_gbs > 0 && isfinite(r.triad_gbs) && r.read_gbs > 0, "bandwidths measured");
	is_int(r.array_bytes, 4 << 20, "array size reported");
	is_int(r.n_threads, 2, "threads reported");
	ok(moe_bench_peak_rss() > 0, "peak RSS known");
}

int main(void)
{
	test_stats();
	test_kld_records();
	test_kl_summary();
	test_reports();
	test_expert_stats();
	test_stream();
	return tap_done();
}
