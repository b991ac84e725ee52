/* imatrix.c — an importance matrix from calibration text: the text runs
 * through the model chunk by chunk (as moe_bench_perplexity splits it) with
 * an engine observer that adds the input rows of every weight product to a
 * moe_imatrix under the tensor's UTH name.  The engine calls the observer
 * for an expert's matrices with only the rows routed to that expert, so an
 * expert's importances are over its own tokens.  A stack of matrices used
 * one at a time (deepseek2's per-head attn_k_b / attn_v_b) gets one set of
 * columns per matrix, as llama.cpp stores it. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core.h"
#include "engine.h"
#include "model.h"
#include "quant.h"
#include "text.h"

typedef struct {
	moe_imatrix *im;
	int rc;           /* first error of the observer (it cannot return one) */
	moe_error *e;
} im_obs;

static void observe(void *user, const moe_matmul_obs *o)
{
	im_obs *s = user;
	/* the engine calls from one thread at a time (see moe_engine_set_observer),
	 * which moe_imatrix_add needs: it is not thread-safe */
	if (s->rc < 0 || !o->w->name || o->n_rows <= 0)
		return;
	s->rc = o->n_parts > 1
		? moe_imatrix_add_part(s->im, o->w->name, o->x, o->n_rows, o->w->cols, o->part,
				       o->n_parts, s->e)
		: moe_imatrix_add(s->im, o->w->name, o->x, o->n_rows, o->w->cols, s->e);
}

int moe_bench_imatrix(const moe_model *m, const char *text, size_t len,
		      const moe_imatrix_params *p, moe_imatrix_result *r, moe_error *e)
{
	memset(r, 0, sizeof *r);
	if (!p->out || !*p->out)
		return moe_err(e, MOE_EINVAL, "no output file for the importance matrix");
	if (!m->tok)
		return moe_err(e, MOE_EINVAL, "the model has no tokenizer");
	int32_t *ids = NULL, *chunk = NULL;
	size_t n_ids = 0;
	float *logits = NULL;
	moe_imatrix *im = NULL;
	moe_engine *eng = NULL;
	moe_seq *seq = NULL;
	int rc;

	/* the tokens as moe_bench_perplexity takes them */
	MOE_TRY(moe_tokenizer_encode(m->tok, text, len, true, false, &ids, &n_ids, e));
	uint32_t n_ctx = p->n_ctx > 0 ? (uint32_t)p->n_ctx : 512;
	uint32_t nv = m->hp.n_vocab;
	if (n_ctx < 2 || n_ctx > (1u << 24)) {
		rc = moe_err(e, MOE_EINVAL, "a context of %u tokens (2 at least)", n_ctx);
		goto out;
	}
	if (n_ids < n_ctx) {
		rc = moe_err(e, MOE_EINVAL,
			     "the calibration text has %zu tokens, less than one chunk of %u "
			     "(give more text or a smaller -c)",
			     n_ids, n_ctx);
		goto out;
	}
	uint32_t n_chunks = (uint32_t)(n_ids / n_ctx);
	if (p->n_chunks > 0 && (uint32_t)p->n_chunks < n_chunks)
		n_chunks = (uint32_t)p->n_chunks;
	if ((uint64_t)n_ctx * nv > SIZE_MAX / sizeof(float) / 2) {
		rc = moe_err(e, MOE_ERANGE, "%u x %u logits do not fit in memory", n_ctx, nv);
		goto out;
	}
	/* all the logits: the output matrix then sees every token, as the
	 * other matrices do */
	logits = malloc((size_t)n_ctx * nv * sizeof *logits);
	chunk = malloc((size_t)n_ctx * sizeof *chunk);
	if (!logits || !chunk) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory for %u x %u logits", n_ctx, nv);
		goto out;
	}
	if ((rc = moe_imatrix_new(&im, e)) < 0)
		goto out;
	moe_engine_params ep = {.kv_size = (int)n_ctx,
				.n_threads = p->n_threads,
				.n_batch = p->n_batch > 0 ? p->n_batch : (int)n_ctx};
	if ((rc = moe_engine_new(&eng, m, &ep, e)) < 0 || (rc = moe_seq_new(&seq, eng, e)) < 0)
		goto out;
	im_obs obs = {.im = im, .e = e};
	moe_engine_set_observer(eng, observe, &obs);
	int32_t bos = moe_bench_bos(m);
	for (uint32_t c = 0; c < n_chunks; c++) {
		memcpy(chunk, ids + (size_t)c * n_ctx, (size_t)n_ctx * sizeof *chunk);
		if (bos >= 0)
			chunk[0] = bos;
		moe_seq_truncate(seq, 0);
		if ((rc = moe_seq_eval(seq, chunk, n_ctx, logits, true, e)) < 0)
			goto out;
		if ((rc = obs.rc) < 0)
			goto out;
		r->n_chunks = (int)c + 1;
		r->n_tokens += n_ctx;
		if (p->chunk_done)
			p->chunk_done(p->user, (int)c + 1, (int)n_chunks);
	}
	r->n_ctx = (int)n_ctx;
	r->n_text_tokens = n_ids;
	r->n_tensors = moe_imatrix_count(im);
	rc = moe_imatrix_save(im, p->out, e);
out:
	moe_seq_free(seq);
	moe_engine_free(eng);
	moe_imatrix_free(im);
	free(ids);
	free(chunk);
	free(logits);
	return rc;
}
