/* perplexity.c — perplexity with llama-perplexity's method, the KLD file
 * (a base model's log-probabilities over a text) and KL-divergence of
 * another model against it.
 *
 * KLD file (little-endian; moe-bench(1) describes it for users):
 *   header, 128 bytes:
 *     0  magic "MOEKLD\0\0"          8  u32 version (1)
 *    12  u32 header size (128)      16  u32 n_vocab
 *    20  u32 n_ctx                  24  u32 n_chunks
 *    28  u32 first (n_ctx / 2)      32  i32 BOS put at each chunk's start (-1: none)
 *    36  u32 record size            40  u64 n_tokens (n_chunks * n_ctx)
 *    48  u64 n_records (n_chunks * (n_ctx - 1 - first))
 *    56  u64 tokens of the whole text (information)
 *    64  char[64] base model name, NUL-padded
 *   tokens: n_tokens x i32, the chunks' tokens as the text had them
 *   records, one per scored token, in order, 16 + 2 * n_vocab bytes each:
 *     0  i32 arg-max of the base's logits
 *     4  f32 log p_base(actual next token), exact
 *     8  f32 lo, 12 f32 step: log-probability i is lo + q[i] * step
 *    16  u16 q[n_vocab]; the row's range is [max - 30, max] (below: lo)
 *   trailer: u64 XXH3-64 (seed 0) of every byte before it.
 * 16 bits over at most 30 nats is a step of 4.6e-4 nat: the KL-divergence
 * of a model against its own file is ~1e-8, far below what quantisation
 * does. */
#include "bench.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* --------------------------------------------------------- byte helpers */

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f32(uint8_t *p, float f)
{
	uint32_t v;
	memcpy(&v, &f, 4);
	put_u32(p, v);
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static float get_f32(const uint8_t *p)
{
	uint32_t v = get_u32(p);
	float f;
	memcpy(&f, &v, 4);
	return f;
}

/* ------------------------------------------------------------- records */

size_t moe_kld_record_size(uint32_t n_vocab)
{
	return 16 + 2 * (size_t)n_vocab;
}

void moe_kld_encode(const float *logits, uint32_t n_vocab, int32_t next, uint8_t *rec)
{
	double lse;
	int32_t am;
	double lp_next = moe_bench_log_prob(logits, (int)n_vocab, next, &lse, &am);
	float mn = logits[0];
	for (uint32_t i = 1; i < n_vocab; i++)
		mn = logits[i] < mn ? logits[i] : mn;
	double hi = (double)logits[am] - lse, lo = (double)mn - lse;
	if (lo < hi - MOE_KLD_RANGE)
		lo = hi - MOE_KLD_RANGE;
	/* quantise with the stored (float) lo and step so decoding matches */
	float lo_f = (float)lo, step_f = (float)((hi - (double)lo_f) / 65535.0);
	put_u32(rec, (uint32_t)am);
	put_f32(rec + 4, (float)lp_next);
	put_f32(rec + 8, lo_f);
	put_f32(rec + 12, step_f);
	uint8_t *q = rec + 16;
	for (uint32_t i = 0; i < n_vocab; i++) {
		double v = step_f > 0 ? ((double)logits[i] - lse - lo_f) / step_f : 0;
		/* NaN and -inf (v not > 0) quantise to 0 */
		uint32_t qi = !(v > 0) ? 0 : v >= 65535 ? 65535 : (uint32_t)(v + 0.5);
		q[2 * i] = (uint8_t)qi;
		q[2 * i + 1] = (uint8_t)(qi >> 8);
	}
}

void moe_kld_compare(const uint8_t *rec, const float *logits, uint32_t n_vocab, int32_t next,
		     moe_kl_token *out)
{
	int32_t top_b = (int32_t)get_u32(rec);
	double lp_next_b = get_f32(rec + 4), lo = get_f32(rec + 8), step = get_f32(rec + 12);
	const uint8_t *q = rec + 16;
	uint32_t qmax = 0;
	for (uint32_t i = 0; i < n_vocab; i++) {
		uint32_t qi = (uint32_t)q[2 * i] | (uint32_t)q[2 * i + 1] << 8;
		qmax = qi > qmax ? qi : qmax;
	}
	/* KL = sum p_i (lb_i - lse_b - l_i + lse_q) with p_i = exp(lb_i - lse_b):
	 * one pass for s = sum exp(lb_i - lb_max), t = sum exp(..) (lb_i - l_i) */
	double s = 0, t = 0;
	for (uint32_t i = 0; i < n_vocab; i++) {
		uint32_t qi = (uint32_t)q[2 * i] | (uint32_t)q[2 * i + 1] << 8;
		double lb = lo + qi * step;
		double w = exp(((double)qi - (double)qmax) * step);
		s += w;
		t += w * (lb - (double)logits[i]);
	}
	double lse_b = lo + qmax * step + log(s), lse_q;
	int32_t am;
	double lp_next = moe_bench_log_prob(logits, (int)n_vocab, next, &lse_q, &am);
	out->kld = t / s - lse_b + lse_q;
	out->nll = -lp_next;
	out->nll_base = -lp_next_b;
	out->dp = exp(lp_next) - exp(lp_next_b);
	out->same = am == top_b;
}

/* ------------------------------------------------------------ summaries */

void moe_kl_summarize(double *kld, double *dp, const double *nll, const double *nll_base,
		      const uint8_t *same, uint64_t n, moe_kl_result *r)
{
	memset(r, 0, sizeof *r);
	r->n = n;
	if (n == 0)
		return;
	double dn = (double)n, den = n > 1 ? dn - 1 : NAN;
	double mq = 0, mb = 0, mk = 0, md = 0, md2 = 0, ns = 0;
	for (uint64_t i = 0; i < n; i++) {
		mq += nll[i];
		mb += nll_base[i];
		mk += kld[i];
		md += dp[i];
		md2 += dp[i] * dp[i];
		ns += same[i] ? 1 : 0;
	}
	mq /= dn, mb /= dn, mk /= dn, md /= dn, md2 /= dn;
	double vq = 0, vb = 0, cov = 0, vk = 0, vd = 0, vd2 = 0, vdiff = 0;
	for (uint64_t i = 0; i < n; i++) {
		double a = nll[i] - mq, b = nll_base[i] - mb, c = kld[i] - mk, d = dp[i] - md;
		double d2 = dp[i] * dp[i] - md2, diff = a - b;
		vq += a * a, vb += b * b, cov += a * b, vk += c * c, vd += d * d, vd2 += d2 * d2;
		vdiff += diff * diff;
	}
	vq /= dn, vb /= dn, cov /= dn, vk /= dn, vd /= dn, vd2 /= dn, vdiff /= dn;
	/* errors of means: sqrt(population variance / (n - 1)), as
	 * llama-perplexity */
	r->ppl = exp(mq);
	r->ppl_err = r->ppl * sqrt(vq / den);
	r->ppl_base = exp(mb);
	r->ppl_base_err = r->ppl_base * sqrt(vb / den);
	r->cor = vq > 0 && vb > 0 ? cov / sqrt(vq * vb) : NAN;
	r->ln_ratio = mq - mb;
	r->ln_ratio_err = sqrt(vdiff / den);
	r->ratio = exp(r->ln_ratio);
	r->ratio_err = r->ratio * r->ln_ratio_err;
	r->ppl_diff = r->ppl - r->ppl_base;
	double vdiff_ppl = r->ppl * r->ppl * vq + r->ppl_base * r->ppl_base * vb -
			   2 * r->ppl * r->ppl_base * cov;
	r->ppl_diff_err = sqrt(fmax(vdiff_ppl, 0) / den);
	r->kld = mk;
	r->kld_err = sqrt(vk / den);
	r->dp_mean = md;
	r->dp_err = sqrt(vd / den);
	r->dp_rms = sqrt(md2);
	/* delta method: d sqrt(x) = dx / (2 sqrt(x)) */
	r->dp_rms_err = r->dp_rms > 0 ? sqrt(vd2 / den) / (2 * r->dp_rms) : 0;
	r->same_top = ns / dn;
	r->same_top_err = sqrt(r->same_top * (1 - r->same_top) / den);
	moe_bench_sort(kld, n);
	moe_bench_sort(dp, n);
	r->kld_min = kld[0];
	r->kld_max = kld[n - 1];
	r->kld_p999 = moe_bench_quantile(kld, n, 0.999);
	r->kld_p99 = moe_bench_quantile(kld, n, 0.99);
	r->kld_p95 = moe_bench_quantile(kld, n, 0.95);
	r->kld_p90 = moe_bench_quantile(kld, n, 0.90);
	r->kld_median = moe_bench_quantile(kld, n, 0.5);
	r->kld_p10 = moe_bench_quantile(kld, n, 0.10);
	r->kld_p05 = moe_bench_quantile(kld, n, 0.05);
	r->kld_p01 = moe_bench_quantile(kld, n, 0.01);
	r->dp_min = dp[0];
	r->dp_max = dp[n - 1];
}

/* ------------------------------------------------------------ KLD file */

typedef struct kld_file {
	const char *path;
	/* writer */
	moe_out out;
	bool writing;
	/* reader */
	moe_src *src;
	uint64_t off;
	/* both */
	XXH3_state_t *xs;
	uint32_t n_vocab, n_ctx, n_chunks, first, rs;
	int32_t bos;
	uint64_t n_tokens, n_records, n_text;
	int32_t *tokens;
} kld_file;

static int kld_write(kld_file *k, const void *buf, size_t n, moe_error *e)
{
	XXH3_64bits_update(k->xs, buf, n);
	return moe_out_write(&k->out, buf, n, e);
}

static int kld_create(kld_file *k, const char *path, const char *model_name, uint32_t n_vocab,
		      uint32_t n_ctx, uint32_t n_chunks, int32_t bos, const int32_t *tokens,
		      uint64_t n_text, moe_error *e)
{
	k->path = path;
	k->xs = XXH3_createState();
	if (!k->xs)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	XXH3_64bits_reset(k->xs);
	MOE_TRY(moe_out_open(&k->out, path, e));
	k->writing = true;
	uint8_t h[MOE_KLD_HEADER_SIZE] = {0};
	uint32_t first = n_ctx / 2;
	memcpy(h, MOE_KLD_MAGIC, 8);
	put_u32(h + 8, MOE_KLD_VERSION);
	put_u32(h + 12, MOE_KLD_HEADER_SIZE);
	put_u32(h + 16, n_vocab);
	put_u32(h + 20, n_ctx);
	put_u32(h + 24, n_chunks);
	put_u32(h + 28, first);
	put_u32(h + 32, (uint32_t)bos);
	put_u32(h + 36, (uint32_t)moe_kld_record_size(n_vocab));
	put_u64(h + 40, (uint64_t)n_chunks * n_ctx);
	put_u64(h + 48, (uint64_t)n_chunks * (n_ctx - 1 - first));
	put_u64(h + 56, n_text);
	if (model_name) {
		const char *b = strrchr(model_name, '/');
		snprintf((char *)h + 64, 64, "%s", b ? b + 1 : model_name);
	}
	MOE_TRY(kld_write(k, h, sizeof h, e));
	uint64_t nt = (uint64_t)n_chunks * n_ctx;
	uint8_t buf[4096];
	for (uint64_t i = 0; i < nt;) {
		size_t m = 0;
		for (; m < sizeof buf / 4 && i < nt; m++, i++)
			put_u32(buf + 4 * m, (uint32_t)tokens[i]);
		MOE_TRY(kld_write(k, buf, 4 * m, e));
	}
	return 0;
}

static int kld_commit(kld_file *k, moe_error *e)
{
	uint8_t t[8];
	put_u64(t, XXH3_64bits_digest(k->xs));
	MOE_TRY(moe_out_write(&k->out, t, 8, e));
	k->writing = false;
	return moe_out_commit(&k->out, e);
}

static int kld_read(kld_file *k, void *buf, size_t n, moe_error *e)
{
	MOE_TRY(moe_src_read(k->src, k->off, buf, n, e));
	XXH3_64bits_update(k->xs, buf, n);
	k->off += n;
	return 0;
}

static int kld_open(kld_file *k, const char *path, moe_error *e)
{
	k->path = path;
	k->xs = XXH3_createState();
	if (!k->xs)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	XXH3_64bits_reset(k->xs);
	MOE_TRY(moe_src_open_file(&k->src, path, e));
	uint8_t h[MOE_KLD_HEADER_SIZE];
	if (k->src->size < sizeof h + 8)
		return moe_err(e, MOE_EFORMAT, "%s: %llu bytes is too short for a KLD file", path,
			       (unsigned long long)k->src->size);
	MOE_TRY(kld_read(k, h, sizeof h, e));
	if (memcmp(h, MOE_KLD_MAGIC, 8) != 0)
		return moe_err(e, MOE_EFORMAT, "%s: not a KLD file (bad magic)", path);
	if (get_u32(h + 8) != MOE_KLD_VERSION)
		return moe_err(e, MOE_EFORMAT, "%s: KLD version %u not supported (1 is)", path,
			       get_u32(h + 8));
	if (get_u32(h + 12) != MOE_KLD_HEADER_SIZE)
		return moe_err(e, MOE_EFORMAT, "%s: header size %u, expected %u", path,
			       get_u32(h + 12), MOE_KLD_HEADER_SIZE);
	k->n_vocab = get_u32(h + 16);
	k->n_ctx = get_u32(h + 20);
	k->n_chunks = get_u32(h + 24);
	k->first = get_u32(h + 28);
	k->bos = (int32_t)get_u32(h + 32);
	k->rs = get_u32(h + 36);
	k->n_tokens = get_u64(h + 40);
	k->n_records = get_u64(h + 48);
	k->n_text = get_u64(h + 56);
	if (k->n_vocab < 2 || k->n_vocab > (1u << 24))
		return moe_err(e, MOE_EFORMAT, "%s: n_vocab %u out of range", path, k->n_vocab);
	if (k->n_ctx < 3 || k->n_ctx > (1u << 24))
		return moe_err(e, MOE_EFORMAT, "%s: n_ctx %u out of range (3..%u)", path, k->n_ctx,
			       1u << 24);
	if (k->n_chunks < 1)
		return moe_err(e, MOE_EFORMAT, "%s: no chunks", path);
	if (k->first != k->n_ctx / 2)
		return moe_err(e, MOE_EFORMAT, "%s: first %u, expected n_ctx / 2 = %u", path,
			       k->first, k->n_ctx / 2);
	if (k->bos < -1 || k->bos >= (int32_t)k->n_vocab)
		return moe_err(e, MOE_EFORMAT, "%s: BOS id %d out of range", path, k->bos);
	if (k->rs != moe_kld_record_size(k->n_vocab))
		return moe_err(e, MOE_EFORMAT, "%s: record size %u, expected %zu", path, k->rs,
			       moe_kld_record_size(k->n_vocab));
	uint64_t nt, nr, size = MOE_KLD_HEADER_SIZE + 8, b;
	if (!moe_mul_u64(k->n_chunks, k->n_ctx, &nt) || nt != k->n_tokens)
		return moe_err(e, MOE_EFORMAT, "%s: n_tokens %llu, expected n_chunks * n_ctx", path,
			       (unsigned long long)k->n_tokens);
	if (!moe_mul_u64(k->n_chunks, k->n_ctx - 1 - k->first, &nr) || nr != k->n_records)
		return moe_err(e, MOE_EFORMAT, "%s: n_records %llu, expected %llu", path,
			       (unsigned long long)k->n_records, (unsigned long long)nr);
	if (!moe_mul_u64(nt, 4, &b) || !moe_add_u64(size, b, &size) ||
	    !moe_mul_u64(nr, k->rs, &b) || !moe_add_u64(size, b, &size) || size != k->src->size)
		return moe_err(e, MOE_EFORMAT, "%s: file size %llu does not match its header", path,
			       (unsigned long long)k->src->size);
	k->tokens = malloc(nt * sizeof *k->tokens);
	uint8_t *raw = malloc(nt * 4);
	if (!k->tokens || !raw) {
		free(raw);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory for %llu tokens", path,
			       (unsigned long long)nt);
	}
	int rc = kld_read(k, raw, nt * 4, e);
	for (uint64_t i = 0; rc == 0 && i < nt; i++) {
		k->tokens[i] = (int32_t)get_u32(raw + 4 * i);
		if (k->tokens[i] < 0 || (uint32_t)k->tokens[i] >= k->n_vocab)
			rc = moe_err(e, MOE_EFORMAT, "%s: token %llu: id %d out of range", path,
				     (unsigned long long)i, k->tokens[i]);
	}
	free(raw);
	return rc;
}

/* A record's numbers before they are used: a file whose checksum is
 * consistent may still hold NaN or Inf (written so, or crafted), which
 * would turn every statistic into NaN.  Log-probabilities are <= 0 (a
 * little rounding above is fine), the step is >= 0 and the row's range
 * spans at most MOE_KLD_RANGE nats. */
static int kld_record_check(const kld_file *k, const uint8_t *rec, uint64_t index,
			    moe_error *e)
{
	int32_t top = (int32_t)get_u32(rec);
	float lp = get_f32(rec + 4), lo = get_f32(rec + 8), step = get_f32(rec + 12);
	if (top < 0 || (uint32_t)top >= k->n_vocab)
		return moe_err(e, MOE_EFORMAT, "%s: record %llu: arg-max %d out of range", k->path,
			       (unsigned long long)index, top);
	if (!isfinite(lp) || !isfinite(lo) || !isfinite(step))
		return moe_err(e, MOE_EFORMAT, "%s: record %llu: non-finite value (log p %g, lo %g, "
					       "step %g)", k->path, (unsigned long long)index,
			       (double)lp, (double)lo, (double)step);
	if (lp > 1e-3f || step < 0 || (double)step * 65535.0 > MOE_KLD_RANGE + 1 || lo > 1e-3f)
		return moe_err(e, MOE_EFORMAT, "%s: record %llu: values out of range (log p %g, lo "
					       "%g, step %g)", k->path, (unsigned long long)index,
			       (double)lp, (double)lo, (double)step);
	return 0;
}

/* After the last record: the trailer must match everything read. */
static int kld_check(kld_file *k, moe_error *e)
{
	uint8_t t[8];
	uint64_t want = XXH3_64bits_digest(k->xs);
	MOE_TRY(moe_src_read(k->src, k->src->size - 8, t, 8, e));
	if (get_u64(t) != want)
		return moe_err(e, MOE_ECHECKSUM, "%s: checksum mismatch (the file is damaged)",
			       k->path);
	return 0;
}

static void kld_close(kld_file *k)
{
	if (k->writing)
		moe_out_abort(&k->out);
	if (k->src)
		moe_src_close(k->src);
	if (k->xs)
		XXH3_freeState(k->xs);
	free(k->tokens);
}

/* --------------------------------------------------------------- driver */

typedef struct kl_arrays {
	double *kld, *dp, *nll, *nll_base;
	uint8_t *same;
	uint64_t n;
	double sum_kld, sum_nll_base;
	uint64_t n_same;
} kl_arrays;

int moe_bench_perplexity(const moe_model *m, const char *text, size_t len, const moe_ppl_params *p,
			 moe_ppl_result *r, moe_error *e)
{
	memset(r, 0, sizeof *r);
	uint32_t nv = m->hp.n_vocab;
	kld_file kin = {0}, kout = {0};
	kl_arrays ka = {0};
	int32_t *text_ids = NULL, *chunk = NULL;
	size_t n_text_ids = 0;
	float *logits = NULL;
	uint8_t *recs = NULL;
	moe_engine *eng = NULL;
	moe_seq *ctx = NULL;
	const int32_t *tokens;
	int32_t bos;
	uint32_t n_ctx, n_chunks;
	int rc = 0;

	if (text && !m->tok)
		return moe_err(e, MOE_EINVAL, "the model has no tokenizer");
	if (text) {
		/* as llama-perplexity: BOS/EOS as the tokenizer adds them, special
		 * token text is plain text */
		MOE_TRY(moe_tokenizer_encode(m->tok, text, len, true, false, &text_ids, &n_text_ids,
					     e));
	}
	if (p->kld_in) {
		if ((rc = kld_open(&kin, p->kld_in, e)) < 0)
			goto out;
		if (kin.n_vocab != nv) {
			rc = moe_err(e, MOE_EINVAL,
				     "%s: base vocabulary of %u tokens, the model has %u",
				     p->kld_in, kin.n_vocab, nv);
			goto out;
		}
		if (p->n_ctx > 0 && (uint32_t)p->n_ctx != kin.n_ctx) {
			rc = moe_err(e, MOE_EINVAL,
				     "%s: the base was made with a context of %u, not %d",
				     p->kld_in, kin.n_ctx, p->n_ctx);
			goto out;
		}
		if (text && (n_text_ids < kin.n_tokens ||
			     memcmp(text_ids, kin.tokens, kin.n_tokens * sizeof *text_ids) != 0)) {
			rc = moe_err(e, MOE_EINVAL,
				     "%s: the text does not tokenize to the base's tokens "
				     "(another text or tokenizer?)",
				     p->kld_in);
			goto out;
		}
		if (moe_bench_bos(m) != kin.bos)
			moe_log(MOE_LOG_WARN,
				"%s: the base used BOS %d, this model's tokenizer %d; "
				"using the base's",
				p->kld_in, kin.bos, moe_bench_bos(m));
		tokens = kin.tokens;
		n_ctx = kin.n_ctx;
		n_chunks = kin.n_chunks;
		if (p->n_chunks > 0 && (uint32_t)p->n_chunks < n_chunks)
			n_chunks = (uint32_t)p->n_chunks;
		bos = kin.bos;
		r->n_text_tokens = kin.n_text;
	} else {
		if (!text) {
			rc = moe_err(e, MOE_EINVAL, "perplexity needs a text");
			goto out;
		}
		n_ctx = p->n_ctx > 0 ? (uint32_t)p->n_ctx : 512;
		if (n_ctx < 3 || n_ctx > (1u << 24)) {
			rc = moe_err(e, MOE_EINVAL,
				     "a context of %u tokens cannot be scored (3 at least)", n_ctx);
			goto out;
		}
		if (n_text_ids < 2 * (uint64_t)n_ctx) {
			rc = moe_err(
				e, MOE_EINVAL,
				"the text has %zu tokens; perplexity with a context of %u needs "
				"at least %llu",
				n_text_ids, n_ctx, 2 * (unsigned long long)n_ctx);
			goto out;
		}
		n_chunks = (uint32_t)(n_text_ids / n_ctx);
		if (p->n_chunks > 0 && (uint32_t)p->n_chunks < n_chunks)
			n_chunks = (uint32_t)p->n_chunks;
		tokens = text_ids;
		bos = moe_bench_bos(m);
		r->n_text_tokens = n_text_ids;
	}
	uint32_t first = n_ctx / 2, n_scored = n_ctx - 1 - first;
	r->n_ctx = (int)n_ctx;
	r->n_chunks = (int)n_chunks;
	r->has_kl = p->kld_in != NULL;
	if ((uint64_t)n_ctx * nv > SIZE_MAX / sizeof(float) / 2) {
		rc = moe_err(e, MOE_ERANGE, "%u x %u logits do not fit in memory", n_ctx, nv);
		goto out;
	}
	size_t rs = moe_kld_record_size(nv);
	logits = malloc((size_t)n_ctx * nv * sizeof *logits);
	chunk = malloc((size_t)n_ctx * sizeof *chunk);
	if (p->kld_in || p->kld_out)
		recs = malloc(rs * n_scored);
	if (!logits || !chunk || ((p->kld_in || p->kld_out) && !recs)) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory for %u x %u logits", n_ctx, nv);
		goto out;
	}
	if (p->kld_in) {
		uint64_t n = (uint64_t)n_chunks * n_scored;
		ka.kld = malloc(n * sizeof(double));
		ka.dp = malloc(n * sizeof(double));
		ka.nll = malloc(n * sizeof(double));
		ka.nll_base = malloc(n * sizeof(double));
		ka.same = malloc(n);
		if (!ka.kld || !ka.dp || !ka.nll || !ka.nll_base || !ka.same) {
			rc = moe_err(e, MOE_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (p->kld_out && (rc = kld_create(&kout, p->kld_out, p->model_name, nv, n_ctx, n_chunks,
					   bos, tokens, r->n_text_tokens, e)) < 0)
		goto out;
	moe_engine_params ep = {.kv_size = (int)n_ctx,
				.n_threads = p->n_threads,
				.n_batch = p->n_batch > 0 ? p->n_batch : (int)n_ctx,
				.kv_type = p->kv_type};
	if ((rc = moe_engine_new(&eng, m, &ep, e)) < 0 || (rc = moe_seq_new(&ctx, eng, e)) < 0)
		goto out;
	if (p->route_fn)
		moe_engine_set_route_callback(eng, p->route_fn, p->route_user);

	moe_ppl_acc acc = {0};
	for (uint32_t c = 0; c < n_chunks; c++) {
		const int32_t *tk = tokens + (size_t)c * n_ctx;
		memcpy(chunk, tk, (size_t)n_ctx * sizeof *chunk);
		if (bos >= 0)
			chunk[0] = bos;
		moe_seq_truncate(ctx, 0);
		if ((rc = moe_seq_eval(ctx, chunk, n_ctx, logits, true, e)) < 0)
			goto out;
		if (p->kld_in && (rc = kld_read(&kin, recs, rs * n_scored, e)) < 0)
			goto out;
		for (uint32_t j = 0; p->kld_in && j < n_scored; j++)
			if ((rc = kld_record_check(&kin, recs + (size_t)j * rs,
						   (uint64_t)c * n_scored + j, e)) < 0)
				goto out;
		/* the logits of position j predict token j + 1 of the text */
		for (uint32_t j = first; j + 1 < n_ctx; j++) {
			const float *row = logits + (size_t)j * nv;
			int32_t next = tk[j + 1];
			uint8_t *rec = recs ? recs + (size_t)(j - first) * rs : NULL;
			if (p->kld_in) {
				moe_kl_token kt;
				moe_kld_compare(rec, row, nv, next, &kt);
				moe_ppl_acc_add(&acc, kt.nll);
				ka.kld[ka.n] = kt.kld;
				ka.dp[ka.n] = kt.dp;
				ka.nll[ka.n] = kt.nll;
				ka.nll_base[ka.n] = kt.nll_base;
				ka.same[ka.n] = kt.same;
				ka.n++;
				ka.sum_kld += kt.kld;
				ka.sum_nll_base += kt.nll_base;
				ka.n_same += kt.same;
			} else {
				moe_ppl_acc_add(
					&acc, -moe_bench_log_prob(row, (int)nv, next, NULL, NULL));
				if (rec)
					moe_kld_encode(row, nv, next, rec);
			}
		}
		if (p->kld_out && (rc = kld_write(&kout, recs, rs * n_scored, e)) < 0)
			goto out;
		r->n_scored = acc.count;
		r->ppl = moe_ppl_acc_ppl(&acc);
		r->ppl_err = moe_ppl_acc_err(&acc);
		if (p->kld_in) {
			/* running means only; the full summary comes at the end */
			double n = (double)ka.n;
			r->kl.n = ka.n;
			r->kl.ppl = r->ppl;
			r->kl.kld = ka.sum_kld / n;
			r->kl.ppl_base = exp(ka.sum_nll_base / n);
			r->kl.ln_ratio = log(r->ppl) - ka.sum_nll_base / n;
			r->kl.same_top = (double)ka.n_same / n;
		}
		if (p->chunk_done)
			p->chunk_done(p->user, (int)c + 1, r);
	}
	if (p->kld_in) {
		/* the checksum covers the whole file: read what was skipped */
		for (uint32_t c = n_chunks; rc == 0 && c < kin.n_chunks; c++)
			rc = kld_read(&kin, recs, rs * n_scored, e);
		if (rc < 0 || (rc = kld_check(&kin, e)) < 0)
			goto out;
		moe_kl_summarize(ka.kld, ka.dp, ka.nll, ka.nll_base, ka.same, ka.n, &r->kl);
	}
	if (p->kld_out)
		rc = kld_commit(&kout, e);
out:
	moe_seq_free(ctx);
	moe_engine_free(eng);
	kld_close(&kin);
	kld_close(&kout);
	free(ka.kld);
	free(ka.dp);
	free(ka.nll);
	free(ka.nll_base);
	free(ka.same);
	free(text_ids);
	free(chunk);
	free(logits);
	free(recs);
	return rc;
}
