/* report.c — moe-bench's output formats: a markdown table like
 * llama-bench's, CSV, a JSON array and JSON lines, for throughput rows and
 * for perplexity/KL results.  JSON field names are llama-bench's where the
 * meaning is the same; every format carries the same fields. */
#include "bench.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_bench_format_from_name(const char *name)
{
	static const char *const names[] = {"md", "csv", "json", "jsonl"};
	for (int i = 0; i < 4; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

void moe_bench_derive(const moe_bench_row *r, const moe_bench_env *env, double *ts,
		      moe_bench_derived *d)
{
	memset(d, 0, sizeof *d);
	size_t n = r->n_samples;
	double *ns = malloc((n ? n : 1) * sizeof *ns),
	       *t = ts ? ts : malloc((n ? n : 1) * sizeof *t);
	double tokens = (double)r->test.n_prompt + (double)r->test.n_gen;
	d->bw_gbs = d->bw_pct = NAN;
	if (!ns || !t) {
		d->avg_ts = d->median_ts = NAN;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		ns[i] = (double)r->samples_ns[i];
		t[i] = ns[i] > 0 ? tokens * 1e9 / ns[i] : 0;
	}
	moe_bench_summary s;
	moe_bench_summarize(ns, n, &s);
	d->avg_ns = s.mean;
	d->stddev_ns = s.stddev;
	/* as llama-bench: mean and deviation of the per-run rates */
	moe_bench_summarize(t, n, &s);
	d->avg_ts = s.mean;
	d->stddev_ts = s.stddev;
	d->median_ts = s.median;
	if (r->test.n_prompt == 0 && r->test.n_gen > 0 && r->model) {
		d->bw_gbs = (double)r->model->info.active_bytes * d->avg_ts / 1e9;
		if (env && env->stream_gbs > 0)
			d->bw_pct = 100.0 * d->bw_gbs / env->stream_gbs;
	}
out:
	free(ns);
	if (t != ts)
		free(t);
}

static const char *kv_name(int kv)
{
	return moe_type_name(kv ? kv : MOE_F16);
}

/* ------------------------------------------------------------------ JSON */

static json_t *num_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *row_json(const void *rows, size_t at, const moe_bench_env *env)
{
	const moe_bench_row *r = (const moe_bench_row *)rows + at;
	json_t *o = json_object();
	size_t n = r->n_samples;
	double *ts = malloc((n ? n : 1) * sizeof *ts);
	if (!o || !ts) {
		json_decref(o);
		free(ts);
		return NULL;
	}
	moe_bench_derived d;
	moe_bench_derive(r, env, ts, &d);
	const moe_bench_model_row *m = r->model;
	char name[64];
	moe_bench_test_name(&r->test, name, sizeof name);
#define SET(k, v) json_object_set_new(o, k, v)
	SET("build_commit", json_string(env->build_commit ? env->build_commit : ""));
	SET("cpu_info", json_string(env->cpu_info ? env->cpu_info : ""));
	SET("backends", json_string("CPU"));
	SET("isa", json_string(env->isa ? env->isa : ""));
	SET("model_filename", json_string(m->filename));
	SET("model_type", json_string(m->info.type));
	SET("model_size", json_integer((json_int_t)m->info.size));
	SET("model_n_params", json_integer((json_int_t)m->info.n_params));
	SET("n_params_active", json_integer((json_int_t)m->info.n_params_active));
	SET("weight_types", json_string(m->info.weight_types));
	SET("main_type", json_string(m->info.main_type));
	SET("n_batch", json_integer(r->test.n_batch));
	SET("n_ubatch", json_integer(r->test.n_batch));
	SET("n_threads", json_integer(r->test.n_threads));
	SET("type_k", json_string(kv_name(r->test.kv_type)));
	SET("type_v", json_string(kv_name(r->test.kv_type)));
	SET("use_mmap", json_true());
	SET("n_prompt", json_integer(r->test.n_prompt));
	SET("n_gen", json_integer(r->test.n_gen));
	SET("n_depth", json_integer(r->test.n_depth));
	SET("test", json_string(name));
	SET("test_time", json_string(r->test_time));
	SET("repetitions", json_integer((json_int_t)n));
	SET("avg_ns", json_integer((json_int_t)llround(d.avg_ns)));
	SET("stddev_ns", json_integer((json_int_t)llround(d.stddev_ns)));
	SET("avg_ts", num_or_null(d.avg_ts));
	SET("stddev_ts", num_or_null(d.stddev_ts));
	SET("median_ts", num_or_null(d.median_ts));
	json_t *sn = json_array(), *st = json_array();
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(sn, json_integer((json_int_t)r->samples_ns[i]));
		json_array_append_new(st, num_or_null(ts[i]));
	}
	SET("samples_ns", sn);
	SET("samples_ts", st);
	SET("bytes_per_token", json_integer((json_int_t)m->info.active_bytes));
	SET("bw_gbs", num_or_null(d.bw_gbs));
	SET("bw_pct", num_or_null(d.bw_pct));
	SET("stream_gbs", env->stream_gbs > 0 ? json_real(env->stream_gbs) : json_null());
	SET("load_time_s", num_or_null(m->load_s));
	SET("peak_rss_bytes", json_integer((json_int_t)m->peak_rss));
#undef SET
	free(ts);
	return o;
}

static int dump_json(FILE *f, json_t *j, size_t flags, moe_error *e)
{
	if (!j)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	int rc = json_dumpf(j, f, flags | JSON_REAL_PRECISION(10));
	json_decref(j);
	if (rc != 0)
		return moe_err(e, MOE_EIO, "write error: %s", strerror(errno));
	return 0;
}

/* ------------------------------------------------------------------- CSV */

static void csv_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Every field of a JSON object, in order, as one CSV line (arrays become
 * one quoted field of space-separated values, null an empty field). */
static void csv_line(FILE *f, json_t *o, bool header)
{
	const char *key;
	json_t *v;
	bool first = true;
	json_object_foreach(o, key, v)
	{
		if (!first)
			fputc(',', f);
		first = false;
		if (header) {
			csv_str(f, key);
			continue;
		}
		if (json_is_string(v)) {
			csv_str(f, json_string_value(v));
		} else if (json_is_array(v)) {
			size_t i;
			json_t *x;
			fputc('"', f);
			json_array_foreach(v, i, x)
			{
				if (i)
					fputc(' ', f);
				if (json_is_integer(x))
					fprintf(f, "%lld", (long long)json_integer_value(x));
				else if (json_is_number(x))
					fprintf(f, "%.6f", json_number_value(x));
			}
			fputc('"', f);
		} else if (json_is_integer(v)) {
			fprintf(f, "%lld", (long long)json_integer_value(v));
		} else if (json_is_real(v)) {
			fprintf(f, "%.6f", json_real_value(v));
		} else if (json_is_true(v) || json_is_false(v)) {
			fputs(json_is_true(v) ? "1" : "0", f);
		}
	}
	fputc('\n', f);
}

/* -------------------------------------------------------------- markdown */

static void fmt_size(uint64_t b, char *buf, size_t n)
{
	if (b >= (1ull << 30))
		snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
	else
		snprintf(buf, n, "%.2f MiB", (double)b / (1ull << 20));
}

static void fmt_params(uint64_t p, char *buf, size_t n)
{
	if (p >= 1000000000ull)
		snprintf(buf, n, "%.2f B", (double)p / 1e9);
	else if (p >= 1000000ull)
		snprintf(buf, n, "%.2f M", (double)p / 1e6);
	else
		snprintf(buf, n, "%.2f K", (double)p / 1e3);
}

static void report_md(FILE *f, const moe_bench_env *env, const moe_bench_row *rows, size_t n)
{
	bool show_batch = false, show_kv = false;
	for (size_t i = 0; i < n; i++) {
		show_batch |=
			rows[i].test.n_batch != rows[0].test.n_batch || rows[i].test.n_batch != 512;
		show_kv |= rows[i].test.kv_type && rows[i].test.kv_type != MOE_F16;
	}
	fprintf(f,
		"| model | size | params | active | types | threads |%s%s isa | test | t/s | "
		"median t/s | GB/s | %% bw |\n",
		show_batch ? " n_batch |" : "", show_kv ? " type_k |" : "");
	fprintf(f,
		"| --- | ---: | ---: | ---: | --- | ---: |%s%s --- | ---: | ---: | ---: | ---: | "
		"---: |\n",
		show_batch ? " ---: |" : "", show_kv ? " --- |" : "");
	for (size_t i = 0; i < n; i++) {
		const moe_bench_row *r = &rows[i];
		const moe_bench_model_info *mi = &r->model->info;
		moe_bench_derived d;
		moe_bench_derive(r, env, NULL, &d);
		char size[32], par[32], act[32], name[64], bw[32] = "", pct[32] = "";
		fmt_size(mi->size, size, sizeof size);
		fmt_params(mi->n_params, par, sizeof par);
		fmt_params(mi->n_params_active, act, sizeof act);
		moe_bench_test_name(&r->test, name, sizeof name);
		if (isfinite(d.bw_gbs))
			snprintf(bw, sizeof bw, "%.1f", d.bw_gbs);
		if (isfinite(d.bw_pct))
			snprintf(pct, sizeof pct, "%.0f%%", d.bw_pct);
		fprintf(f, "| %s | %s | %s | %s | %s | %d |", mi->type, size, par, act,
			mi->main_type, r->test.n_threads);
		if (show_batch)
			fprintf(f, " %d |", r->test.n_batch);
		if (show_kv)
			fprintf(f, " %s |", kv_name(r->test.kv_type));
		fprintf(f, " %s | %s | %.2f ± %.2f | %.2f | %s | %s |\n", env->isa ? env->isa : "",
			name, d.avg_ts, d.stddev_ts, d.median_ts, bw, pct);
	}
	/* one line per model: where the numbers came from and what it cost */
	fprintf(f, "\n| model | file | weight types | bytes/token | load s | peak RSS |\n");
	fprintf(f, "| --- | --- | --- | ---: | ---: | ---: |\n");
	for (size_t i = 0; i < n; i++) {
		const moe_bench_model_row *m = rows[i].model;
		bool seen = false;
		for (size_t j = 0; j < i; j++)
			seen |= rows[j].model == m;
		if (seen)
			continue;
		char rss[32], apb[32];
		fmt_size(m->peak_rss, rss, sizeof rss);
		fmt_size(m->info.active_bytes, apb, sizeof apb);
		fprintf(f, "| %s | %s | %s | %s | %.2f | %s |\n", m->info.type, m->filename,
			m->info.weight_types, apb, m->load_s, rss);
	}
	if (env->stream_gbs > 0 && env->stream_threads > 0)
		fprintf(f,
			"\nmemory bandwidth: triad %.1f GB/s, read %.1f GB/s (%d threads, 3 x %zu "
			"MiB "
			"arrays, best run)\n",
			env->stream_gbs, env->stream_read_gbs, env->stream_threads,
			env->stream_array_bytes >> 20);
	else if (env->stream_gbs > 0)
		fprintf(f, "\nmemory bandwidth: %.1f GB/s (given)\n", env->stream_gbs);
	fprintf(f, "\nbuild: %s, kernels %s, cpu: %s\n", env->build_commit ? env->build_commit : "",
		env->isa ? env->isa : "", env->cpu_info ? env->cpu_info : "");
}

/* The machine-readable forms of a report: one JSON array (JSON), one line
 * per object (JSONL), or a header from the first object and one line per
 * object (CSV).  Takes the reference to rows (NULL: out of memory). */
static int write_objects(FILE *f, moe_bench_format fmt, json_t *rows, moe_error *e)
{
	if (!rows)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	int rc = 0;
	if (fmt == MOE_BENCH_JSON) {
		if ((rc = dump_json(f, json_incref(rows), JSON_INDENT(2), e)) == 0)
			fputc('\n', f);
	} else {
		size_t i;
		json_t *o;
		json_array_foreach(rows, i, o) {
			if (fmt == MOE_BENCH_CSV) {
				if (i == 0)
					csv_line(f, o, true);
				csv_line(f, o, false);
			} else if ((rc = dump_json(f, json_incref(o), JSON_COMPACT, e)) < 0) {
				break;
			} else {
				fputc('\n', f);
			}
		}
	}
	json_decref(rows);
	return rc;
}

/* Row `at` of rows as a JSON object (NULL: out of memory); one per report. */
typedef json_t *(*row_json_fn)(const void *rows, size_t at, const moe_bench_env *env);

/* The n rows as a JSON array for write_objects (NULL: out of memory). */
static json_t *rows_json(const void *rows, size_t n, const moe_bench_env *env, row_json_fn fn)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, fn(rows, i, env)) != 0) {
			json_decref(a);
			a = NULL;
		}
	return a;
}

/* Every report ends here: an error writing any of it is reported once. */
static int report_flush(FILE *f, moe_error *e)
{
	if (fflush(f) != 0 || ferror(f))
		return moe_err(e, MOE_EIO, "write error: %s", strerror(errno));
	return 0;
}

int moe_bench_report(FILE *f, moe_bench_format fmt, const moe_bench_env *env,
		     const moe_bench_row *rows, size_t n, moe_error *e)
{
	clearerr(f);
	if (fmt == MOE_BENCH_MD)
		report_md(f, env, rows, n);
	else
		MOE_TRY(write_objects(f, fmt, rows_json(rows, n, env, row_json), e));
	return report_flush(f, e);
}

/* ------------------------------------------------ several sequences */

typedef struct batched_numbers {
	double t_pp, t_tg, t;             /* seconds, medians */
	double speed_pp, speed_tg, speed; /* tokens/s */
} batched_numbers;

static batched_numbers batched_derive(const moe_batched_row *r)
{
	batched_numbers b;
	const moe_batched_test *t = &r->test;
	size_t n = (size_t)t->reps;
	b.t_pp = (double)moe_bench_median_ns(r->pp_ns, n) / 1e9;
	b.t_tg = (double)moe_bench_median_ns(r->tg_ns, n) / 1e9;
	b.t = b.t_pp + b.t_tg;
	b.speed_pp = b.t_pp > 0 ? (double)t->n_pl * t->n_pp / b.t_pp : NAN;
	b.speed_tg = b.t_tg > 0 ? (double)t->n_pl * t->n_tg / b.t_tg : NAN;
	b.speed = b.t > 0 ? (double)t->n_pl * (t->n_pp + t->n_tg) / b.t : NAN;
	return b;
}

static json_t *batched_json(const void *rows, size_t at, const moe_bench_env *env)
{
	const moe_batched_row *r = (const moe_batched_row *)rows + at;
	json_t *o = json_object();
	if (!o)
		return NULL;
	batched_numbers b = batched_derive(r);
	const moe_batched_test *t = &r->test;
	const moe_bench_model_row *m = r->model;
#define SET(k, v) json_object_set_new(o, k, v)
	SET("build_commit", json_string(env->build_commit ? env->build_commit : ""));
	SET("cpu_info", json_string(env->cpu_info ? env->cpu_info : ""));
	SET("isa", json_string(env->isa ? env->isa : ""));
	SET("model_filename", json_string(m->filename));
	SET("model_type", json_string(m->info.type));
	SET("n_kv_max", json_integer(r->n_kv));
	SET("n_batch", json_integer(t->n_batch));
	SET("n_ubatch", json_integer(t->n_batch));
	SET("is_pp_shared", json_integer(0));
	SET("n_threads", json_integer(t->n_threads));
	SET("type_k", json_string(kv_name(t->kv_type)));
	SET("pp", json_integer(t->n_pp));
	SET("tg", json_integer(t->n_tg));
	SET("pl", json_integer(t->n_pl));
	SET("n_kv", json_integer(r->n_kv));
	SET("t_pp", num_or_null(b.t_pp));
	SET("speed_pp", num_or_null(b.speed_pp));
	SET("t_tg", num_or_null(b.t_tg));
	SET("speed_tg", num_or_null(b.speed_tg));
	SET("t", num_or_null(b.t));
	SET("speed", num_or_null(b.speed));
	SET("test_time", json_string(r->test_time));
	SET("repetitions", json_integer(t->reps));
	json_t *pp = json_array(), *tg = json_array();
	for (int i = 0; i < t->reps; i++) {
		json_array_append_new(pp, json_integer((json_int_t)r->pp_ns[i]));
		json_array_append_new(tg, json_integer((json_int_t)r->tg_ns[i]));
	}
	SET("samples_pp_ns", pp);
	SET("samples_tg_ns", tg);
	SET("kv_block", json_integer(r->kv_block));
	SET("kv_peak_blocks", json_integer(r->kv_peak_blocks));
	SET("kv_peak_bytes", json_integer((json_int_t)r->kv_peak_bytes));
#undef SET
	return o;
}

int moe_batched_report(FILE *f, moe_bench_format fmt, const moe_bench_env *env,
		       const moe_batched_row *rows, size_t n, moe_error *e)
{
	clearerr(f);
	if (fmt == MOE_BENCH_MD) {
		fprintf(f, "| model | threads | n_batch | PP | TG | B | N_KV | T_PP s | S_PP t/s | "
			   "T_TG s | S_TG t/s | T s | S t/s | KV peak |\n");
		fprintf(f, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
			   "---: | ---: | ---: | ---: |\n");
		for (size_t i = 0; i < n; i++) {
			const moe_batched_row *r = &rows[i];
			batched_numbers b = batched_derive(r);
			char kv[32];
			fmt_size(r->kv_peak_bytes, kv, sizeof kv);
			fprintf(f, "| %s | %d | %d | %d | %d | %d | %d | %.3f | %.2f | %.3f | %.2f | "
				   "%.3f | %.2f | %d x %d tok, %s |\n",
				r->model->info.type, r->test.n_threads, r->test.n_batch, r->test.n_pp,
				r->test.n_tg, r->test.n_pl, r->n_kv, b.t_pp, b.speed_pp, b.t_tg,
				b.speed_tg, b.t, b.speed, r->kv_peak_blocks, r->kv_block, kv);
		}
		fprintf(f, "\ntimes: medians of %d repetitions; build: %s, kernels %s, cpu: %s\n",
			n ? rows[0].test.reps : 0, env->build_commit ? env->build_commit : "",
			env->isa ? env->isa : "", env->cpu_info ? env->cpu_info : "");
	} else {
		MOE_TRY(write_objects(f, fmt, rows_json(rows, n, env, batched_json), e));
	}
	return report_flush(f, e);
}

/* ------------------------------------------------------ perplexity / KL */

static json_t *ppl_json(const void *rows, size_t at, const moe_bench_env *env)
{
	const moe_ppl_row *row = (const moe_ppl_row *)rows + at;
	const moe_ppl_result *r = row->r;
	json_t *o = json_object();
	if (!o)
		return NULL;
#define SET(k, v) json_object_set_new(o, k, v)
	SET("model_filename", json_string(row->model_filename));
	SET("text", json_string(row->text ? row->text : ""));
	SET("n_ctx", json_integer(r->n_ctx));
	SET("n_chunks", json_integer(r->n_chunks));
	SET("n_text_tokens", json_integer((json_int_t)r->n_text_tokens));
	SET("n_scored", json_integer((json_int_t)r->n_scored));
	SET("ppl", num_or_null(r->ppl));
	SET("ppl_err", num_or_null(r->ppl_err));
	if (r->has_kl) {
		const moe_kl_result *k = &r->kl;
		SET("ppl_base", num_or_null(k->ppl_base));
		SET("ppl_base_err", num_or_null(k->ppl_base_err));
		SET("ppl_cor", num_or_null(k->cor));
		SET("ln_ppl_ratio", num_or_null(k->ln_ratio));
		SET("ln_ppl_ratio_err", num_or_null(k->ln_ratio_err));
		SET("ppl_ratio", num_or_null(k->ratio));
		SET("ppl_ratio_err", num_or_null(k->ratio_err));
		SET("ppl_diff", num_or_null(k->ppl_diff));
		SET("ppl_diff_err", num_or_null(k->ppl_diff_err));
		SET("kld", num_or_null(k->kld));
		SET("kld_err", num_or_null(k->kld_err));
		SET("kld_max", num_or_null(k->kld_max));
		SET("kld_p99_9", num_or_null(k->kld_p999));
		SET("kld_p99", num_or_null(k->kld_p99));
		SET("kld_p95", num_or_null(k->kld_p95));
		SET("kld_p90", num_or_null(k->kld_p90));
		SET("kld_median", num_or_null(k->kld_median));
		SET("kld_p10", num_or_null(k->kld_p10));
		SET("kld_p5", num_or_null(k->kld_p05));
		SET("kld_p1", num_or_null(k->kld_p01));
		SET("kld_min", num_or_null(k->kld_min));
		SET("dp_mean", num_or_null(k->dp_mean));
		SET("dp_err", num_or_null(k->dp_err));
		SET("dp_rms", num_or_null(k->dp_rms));
		SET("dp_rms_err", num_or_null(k->dp_rms_err));
		SET("dp_max", num_or_null(k->dp_max));
		SET("dp_min", num_or_null(k->dp_min));
		SET("same_top", num_or_null(k->same_top));
		SET("same_top_err", num_or_null(k->same_top_err));
	}
#undef SET
	return o;
}

static void ppl_md(FILE *f, const moe_ppl_row *row)
{
	const moe_ppl_result *r = row->r;
	if (r->has_kl) {
		const moe_kl_result *k = &r->kl;
		fprintf(f, "====== Perplexity statistics ======\n");
		fprintf(f, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", k->ppl, k->ppl_err);
		fprintf(f, "Mean PPL(base)                : %10.6f ± %10.6f\n", k->ppl_base,
			k->ppl_base_err);
		fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * k->cor);
		fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", k->ln_ratio,
			k->ln_ratio_err);
		fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", k->ratio,
			k->ratio_err);
		fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", k->ppl_diff,
			k->ppl_diff_err);
		fprintf(f, "\n====== KL divergence statistics ======\n");
		fprintf(f, "Mean    KLD: %10.6f ± %10.6f\n", k->kld, k->kld_err);
		fprintf(f, "Maximum KLD: %10.6f\n", k->kld_max);
		fprintf(f, "99.9%%   KLD: %10.6f\n", k->kld_p999);
		fprintf(f, "99.0%%   KLD: %10.6f\n", k->kld_p99);
		fprintf(f, "95.0%%   KLD: %10.6f\n", k->kld_p95);
		fprintf(f, "90.0%%   KLD: %10.6f\n", k->kld_p90);
		fprintf(f, "Median  KLD: %10.6f\n", k->kld_median);
		fprintf(f, "10.0%%   KLD: %10.6f\n", k->kld_p10);
		fprintf(f, " 5.0%%   KLD: %10.6f\n", k->kld_p05);
		fprintf(f, " 1.0%%   KLD: %10.6f\n", k->kld_p01);
		fprintf(f, "Minimum KLD: %10.6f\n", k->kld_min);
		fprintf(f, "\n====== Token probability statistics ======\n");
		fprintf(f, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * k->dp_mean, 100.0 * k->dp_err);
		fprintf(f, "Maximum Δp: %6.3f%%\n", 100.0 * k->dp_max);
		fprintf(f, "Minimum Δp: %6.3f%%\n", 100.0 * k->dp_min);
		fprintf(f, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * k->dp_rms,
			100.0 * k->dp_rms_err);
		fprintf(f, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * k->same_top,
			100.0 * k->same_top_err);
		fprintf(f, "\n");
	}
	fprintf(f, "perplexity: %.4f +/- %.5f\n", r->ppl, r->ppl_err);
}

int moe_ppl_report(FILE *f, moe_bench_format fmt, const moe_ppl_row *rows, size_t n, moe_error *e)
{
	clearerr(f);
	if (fmt == MOE_BENCH_MD) {
		for (size_t i = 0; i < n; i++)
			ppl_md(f, &rows[i]);
	} else {
		MOE_TRY(write_objects(f, fmt, rows_json(rows, n, NULL, ppl_json), e));
	}
	return report_flush(f, e);
}
