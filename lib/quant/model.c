/* model.c — quantising a whole UTH model: read it front to back (a pipe or
 * a file, lib/format/uth_stream.c), choose each tensor's type (recipe,
 * expert plan, --tensor-type overrides, row-size fallback), and write the
 * result with the UTH writer, converting row batches as the writer asks for
 * bytes.  Memory: one batch of rows (a few MiB) plus the directories.
 *
 * The writer wants every tensor's checksum before the data.  On a seekable
 * output it patches them in at the end, so each tensor is produced once, as
 * it is written.  On a pipe it runs all tensors twice (hash, then write):
 * the first pass consumes the input, so what it produces is also spilled to
 * an unlinked temporary file ($TMPDIR) and the second pass reads it back.
 * Either way nothing reaches the output before the whole input has been
 * read and checked on a pipe, and a seekable output is a temporary file
 * that is removed on error: no partial output is ever left.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "uth.h"

#define BATCH_BYTES ((size_t)8 << 20) /* f32 bytes of rows converted at once */

typedef struct qjob qjob;
typedef struct tctx {
	qjob *g;
	size_t i;
	moe_repack_fill repack; /* o->repack: wraps fill (layout R4) */
} tctx;

struct qjob {
	const moe_quant_opts *o;
	moe_uth_stream *s;
	const moe_uth *u;
	const int *types;
	moe_pool *pool;
	tctx *ctx;
	/* the tensor being produced */
	size_t cur;
	uint64_t rows, rows_done, in_row, out_row, in_done;
	int64_t ncols;
	const float *w;       /* importances, or NULL */
	uint64_t w_rows;      /* > 0: w holds one set per w_rows rows (a stack of matrices) */
	uint8_t *inbuf, *fifo;
	float *fbuf;
	size_t fifo_len, fifo_cap, batch_rows;
	/* pipe output: spill */
	int spill_fd;
	uint64_t spill_end, *spill_off;
	bool *produced;
	/* progress */
	uint64_t done_bytes, total_bytes;
};

/* ----------------------------------------------------------- type choice */

/* Layers and routed experts per layer: one more than the largest index. */
static int n_layers(const moe_uth *u, int *n_expert)
{
	int n = 0;
	*n_expert = 0;
	for (size_t i = 0; i < u->n_tensors; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		if (t->layer != MOE_UTH_NONE && t->layer + 1 > n)
			n = t->layer + 1;
		if (t->expert != MOE_UTH_NONE && t->expert + 1 > *n_expert)
			*n_expert = t->expert + 1;
	}
	return n;
}

int moe_quant_assign(const moe_uth *u, const moe_quant_opts *o, int *types, moe_error *e)
{
	int ne, nl = n_layers(u, &ne);
	pcre2_code **re = NULL;
	int rc = 0;
	bool warned = false;

	if (o->n_tensor_types) {
		re = calloc(o->n_tensor_types, sizeof(*re));
		if (!re)
			return moe_err(e, MOE_ENOMEM, "out of memory");
		for (size_t k = 0; k < o->n_tensor_types; k++) {
			int ec;
			PCRE2_SIZE eo;
			re[k] = pcre2_compile((PCRE2_SPTR)o->tensor_types[k].regex,
					      PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
			if (!re[k]) {
				PCRE2_UCHAR msg[256];
				pcre2_get_error_message(ec, msg, sizeof(msg));
				rc = moe_err(e, MOE_EINVAL, "--tensor-type '%s': bad regular expression "
					     "at offset %zu: %s", o->tensor_types[k].regex,
					     (size_t)eo, (char *)msg);
				goto out;
			}
		}
	}
	for (size_t i = 0; i < u->n_tensors; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		/* The quantisers read plain rows. */
		if (t->layout != MOE_UTH_LAYOUT_PLAIN) {
			rc = moe_err(e, MOE_EUNSUPPORTED, "%s: tensor '%s' is repacked (layout %s): "
				     "moe-quant reads plain layouts; convert or quantise from "
				     "the original without --repack", u->path, t->name,
				     moe_repack_layout_name(t->layout));
			goto out;
		}
		int ty = moe_quant_recipe_type(&o->recipe, t, nl, ne);
		bool matrix = ty >= 0;
		/* the expert plan sets the routed experts' matrices */
		if (matrix && o->expert_types && t->expert != MOE_UTH_NONE &&
		    t->layer < o->plan_n_layer && t->expert < o->plan_n_expert) {
			int p = o->expert_types[(size_t)t->layer * o->plan_n_expert + t->expert];
			if (p >= 0)
				ty = p;
		}
		/* --tensor-type: the first matching pattern wins, for matrices
		 * only (norms and tokenizer tables are not weights) */
		for (size_t k = 0; matrix && k < o->n_tensor_types; k++) {
			pcre2_match_data *md = pcre2_match_data_create_from_pattern(re[k], NULL);
			if (!md) {
				rc = moe_err(e, MOE_ENOMEM, "out of memory");
				goto out;
			}
			int m = pcre2_match(re[k], (PCRE2_SPTR)t->name, PCRE2_ZERO_TERMINATED, 0, 0,
					    md, NULL);
			pcre2_match_data_free(md);
			if (m >= 0) {
				ty = o->tensor_types[k].dtype;
				break;
			}
		}
		if (!matrix) {
			types[i] = t->dtype;
			continue;
		}
		ty = moe_quant_fallback(ty, t->ne[0]);
		const moe_type_traits *from = moe_type_get(t->dtype);
		if (ty != t->dtype && from->is_quantized) {
			if (!o->allow_requantize) {
				rc = moe_err(e, MOE_EINVAL, "tensor '%s' is already %s: requantising it "
					     "to %s loses quality; pass --allow-requantize to do it "
					     "anyway", t->name, from->name, moe_type_name(ty));
				goto out;
			}
			if (!warned)
				moe_log(MOE_LOG_WARN, "requantising already quantised tensors (first: "
					"'%s', %s -> %s): expect lower quality than from F16/BF16",
					t->name, from->name, moe_type_name(ty));
			warned = true;
		}
		types[i] = ty;
	}
out:
	for (size_t k = 0; re && k < o->n_tensor_types; k++)
		pcre2_code_free(re[k]);
	free(re);
	return rc;
}

/* ------------------------------------------------------------- metadata */

static int make_meta(const moe_uth *u, const moe_quant_opts *o, const int *types, char **out,
		     moe_error *e)
{
	json_error_t je;
	json_t *m = json_loadb(u->meta, u->meta_len, 0, &je);
	if (!m || !json_is_object(m)) {
		json_decref(m);
		return moe_err(e, MOE_EFORMAT, "%s: metadata is not a JSON object", u->path);
	}
	json_t *q = json_object(), *counts = json_object(), *per = json_object();
	for (size_t i = 0; i < u->n_tensors; i++) {
		const char *tn = moe_type_name(types[i]);
		json_t *c = json_object_get(counts, tn);
		json_object_set_new(counts, tn, json_integer(c ? json_integer_value(c) + 1 : 1));
		if (moe_quant_role_is_matrix(u->tensors[i].role) && u->tensors[i].n_dims >= 2)
			json_object_set_new(per, u->tensors[i].name, json_string(tn));
	}
	json_object_set_new(q, "recipe", json_string(o->recipe.name));
	json_object_set_new(q, "quantizer", json_string("moe-quant " PACKAGE_VERSION));
	json_object_set_new(q, "imatrix", o->imatrix_name ? json_string(o->imatrix_name)
							  : json_null());
	if (o->expert_types)
		json_object_set_new(q, "expert_plan", json_string(o->plan_desc ? o->plan_desc : ""));
	if (o->n_tensor_types) {
		json_t *a = json_array();
		for (size_t k = 0; k < o->n_tensor_types; k++) {
			char buf[1024];
			snprintf(buf, sizeof(buf), "%s=%s", o->tensor_types[k].regex,
				 moe_type_name(o->tensor_types[k].dtype));
			json_array_append_new(a, json_string(buf));
		}
		json_object_set_new(q, "tensor_type_overrides", a);
	}
	json_object_set_new(q, "tensor_types", counts);
	json_object_set_new(q, "tensors", per);
	json_object_set_new(m, "quantization", q);
	*out = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(m);
	return *out ? 0 : moe_err(e, MOE_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------ producing */

/* Start tensor i: sizes and buffers of its row batches. */
static int start_tensor(qjob *g, size_t i, moe_error *e)
{
	const moe_uth_tensor *t = &g->u->tensors[i];
	int to = g->types[i];
	const moe_type_traits *tf = moe_type_get(t->dtype), *tt = moe_type_get(to);

	g->cur = i;
	g->ncols = t->ne[0];
	g->rows = (uint64_t)t->ne[1] * t->ne[2] * t->ne[3];
	g->in_row = (uint64_t)(t->ne[0] / tf->block_size) * tf->type_size;
	g->out_row = (uint64_t)(t->ne[0] / tt->block_size) * tt->type_size;
	g->rows_done = 0;
	g->in_done = 0;
	g->fifo_len = 0;
	g->w = NULL;
	g->w_rows = 0;
	if (to != t->dtype && g->o->imatrix) {
		const char *role = moe_uth_role_name(t->role);
		g->w = moe_imatrix_for(g->o->imatrix, t->name,
				       t->layer == MOE_UTH_NONE ? -1 : t->layer,
				       t->expert == MOE_UTH_NONE ? -1 : t->expert, role, g->ncols);
		/* a 3-D tensor used matrix by matrix (deepseek2's per-head attn_k_b
		 * / attn_v_b): one set of importances per matrix of ne[1] rows */
		if (!g->w && t->ne[2] > 1 && t->ne[3] <= 1 &&
		    (g->w = moe_imatrix_get(g->o->imatrix, t->name, g->ncols * t->ne[2], NULL)))
			g->w_rows = t->ne[1];
	}
	size_t br = BATCH_BYTES / (sizeof(float) * (size_t)g->ncols);
	g->batch_rows = br ? br : 1;
	size_t need_in = g->batch_rows * (size_t)g->in_row;
	size_t need_f = g->batch_rows * (size_t)g->ncols * sizeof(float);
	size_t need_fifo = ((size_t)4 << 20) + g->batch_rows * (size_t)g->out_row + BATCH_BYTES;
	free(g->inbuf);
	free(g->fbuf);
	g->inbuf = malloc(need_in ? need_in : 1);
	g->fbuf = malloc(need_f);
	if (need_fifo > g->fifo_cap) {
		free(g->fifo);
		g->fifo = malloc(need_fifo);
		g->fifo_cap = need_fifo;
	}
	if (!g->inbuf || !g->fbuf || !g->fifo)
		return moe_err(e, MOE_ENOMEM, "tensor '%s': out of memory for a batch of %zu rows",
			       t->name, g->batch_rows);
	return 0;
}

/* Append the next batch of the current tensor to the fifo. */
static int produce(qjob *g, moe_error *e)
{
	const moe_uth_tensor *t = &g->u->tensors[g->cur];
	int to = g->types[g->cur];

	if (to == t->dtype) { /* kept: copy bytes */
		size_t k = BATCH_BYTES;
		if (k > t->size - g->in_done)
			k = (size_t)(t->size - g->in_done);
		MOE_TRY(moe_uth_stream_read(g->s, g->cur, g->fifo + g->fifo_len, k, e));
		g->in_done += k;
		g->fifo_len += k;
		return 0;
	}
	uint64_t nr = g->rows - g->rows_done;
	if (nr > g->batch_rows)
		nr = g->batch_rows;
	const float *w = g->w;
	if (g->w_rows) { /* a batch within one matrix, with its importances */
		uint64_t k = g->rows_done / g->w_rows, left = (k + 1) * g->w_rows - g->rows_done;
		nr = nr < left ? nr : left;
		w += k * (uint64_t)g->ncols;
	}
	MOE_TRY(moe_uth_stream_read(g->s, g->cur, g->inbuf, (size_t)(nr * g->in_row), e));
	moe_type_get(t->dtype)->to_float(g->inbuf, g->fbuf, (int64_t)nr * g->ncols);
	for (uint64_t k = 0; k < nr * (uint64_t)g->ncols; k++)
		if (!isfinite(g->fbuf[k]))
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': row %llu holds a NaN or "
				       "infinity", g->u->path, t->name,
				       (unsigned long long)(g->rows_done + k / (uint64_t)g->ncols));
	MOE_TRY(moe_quant_rows(to, g->fbuf, g->fifo + g->fifo_len, (int64_t)nr, g->ncols, w,
			       g->pool, e));
	g->rows_done += nr;
	g->fifo_len += (size_t)(nr * g->out_row);
	return 0;
}

static int fill(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e)
{
	tctx *c = ctx;
	qjob *g = c->g;
	size_t i = c->i;

	if (g->produced && g->produced[i]) { /* second pass on a pipe */
		size_t done = 0;
		while (done < n) {
			ssize_t r = pread(g->spill_fd, (uint8_t *)buf + done, n - done,
					  (off_t)(g->spill_off[i] + off + done));
			if (r <= 0)
				return moe_err(e, MOE_EIO, "temporary file: read error: %s",
					       r < 0 ? strerror(errno) : "short read");
			done += (size_t)r;
		}
		return 0;
	}
	if (off == 0) {
		MOE_TRY(start_tensor(g, i, e));
		if (g->spill_off) {
			g->spill_off[i] = g->spill_end;
			g->spill_end += g->rows * g->out_row;
		}
	}
	while (g->fifo_len < n)
		MOE_TRY(produce(g, e));
	memcpy(buf, g->fifo, n);
	memmove(g->fifo, g->fifo + n, g->fifo_len - n);
	g->fifo_len -= n;
	if (g->spill_off) {
		size_t done = 0;
		while (done < n) {
			ssize_t r = pwrite(g->spill_fd, (const uint8_t *)buf + done, n - done,
					   (off_t)(g->spill_off[i] + off + done));
			if (r < 0)
				return moe_err(e, MOE_EIO, "temporary file ($TMPDIR): write error: %s",
					       strerror(errno));
			done += (size_t)r;
		}
	}
	if (g->produced && off + n == g->rows * g->out_row)
		g->produced[i] = true; /* the writing pass reads the spill */
	g->done_bytes += n;
	if (g->o->progress)
		g->o->progress(g->o->progress_ctx, g->u->tensors[i].name, g->done_bytes,
			       g->total_bytes);
	return 0;
}

static int spill_open(qjob *g, moe_error *e)
{
	const char *dir = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/moe-quant-XXXXXX", dir && *dir ? dir : "/tmp");
	g->spill_fd = mkstemp(path);
	if (g->spill_fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot create a temporary file for pipe output: %s",
			       path, strerror(errno));
	unlink(path);
	return 0;
}

int moe_quant_model(const moe_quant_opts *o, moe_quant_result *res, moe_error *e)
{
	qjob g = {.o = o, .spill_fd = -1};
	moe_uth_writer *w = NULL;
	moe_out out;
	bool out_open = false;
	int *types = NULL;
	char *meta = NULL;
	int rc;

	memset(res, 0, sizeof(*res));
	rc = moe_uth_stream_open(&g.s, o->in, e);
	if (rc < 0)
		return rc;
	g.u = moe_uth_stream_info(g.s);
	size_t n = (size_t)g.u->n_tensors;
	types = calloc(n ? n : 1, sizeof(int));
	g.ctx = calloc(n ? n : 1, sizeof(tctx));
	if (!types || !g.ctx) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto done;
	}
	g.types = types;
	if ((rc = moe_quant_assign(g.u, o, types, e)) < 0)
		goto done;
	if ((rc = make_meta(g.u, o, types, &meta, e)) < 0)
		goto done;
	if ((rc = moe_uth_writer_new(&w, e)) < 0)
		goto done;
	moe_uth_writer_set_flags(w, g.u->flags);
	if ((rc = moe_uth_writer_set_meta(w, meta, strlen(meta), e)) < 0)
		goto done;
	for (size_t i = 0; i < n; i++) {
		moe_uth_tensor d = g.u->tensors[i];
		d.dtype = (uint16_t)types[i];
		g.ctx[i].g = &g;
		g.ctx[i].i = i;
		/* --repack: rows regrouped as fill produces them. */
		if (o->repack && moe_repack_eligible(d.dtype, d.n_dims, d.ne, d.role)) {
			d.layout = MOE_UTH_LAYOUT_R4;
			g.ctx[i].repack = (moe_repack_fill){.inner = fill, .inner_ctx = &g.ctx[i],
							    .layout = MOE_UTH_LAYOUT_R4,
							    .dtype = d.dtype, .cols = d.ne[0]};
			rc = moe_uth_writer_add(w, &d, moe_repack_fill_fn, &g.ctx[i].repack, e);
		} else {
			rc = moe_uth_writer_add(w, &d, fill, &g.ctx[i], e);
		}
		if (rc < 0)
			goto done;
		const moe_uth_tensor *wt = moe_uth_writer_tensor(w, i);
		g.total_bytes += wt->size;
		res->in_bytes += g.u->tensors[i].size;
		res->out_bytes += wt->size;
		if (types[i] != g.u->tensors[i].dtype)
			res->n_quantized++;
	}
	res->n_tensors = n;
	if ((rc = moe_pool_create(&g.pool, o->threads > 0 ? o->threads : 1, e)) < 0)
		goto done;
	if ((rc = moe_out_check_not_input(o->out, o->in, e)) < 0 ||
	    (rc = moe_out_open(&out, o->out, e)) < 0)
		goto done;
	out_open = true;
	if (!out.seekable) {
		g.spill_off = calloc(n ? n : 1, sizeof(uint64_t));
		g.produced = calloc(n ? n : 1, sizeof(bool));
		if (!g.spill_off || !g.produced) {
			rc = moe_err(e, MOE_ENOMEM, "out of memory");
			goto done;
		}
		if ((rc = spill_open(&g, e)) < 0)
			goto done;
		g.total_bytes *= 2;
	}
	rc = moe_uth_writer_write(w, &out, e);
	if (rc < 0)
		goto done;
	if ((rc = moe_uth_stream_finish(g.s, e)) < 0)
		goto done;
	rc = moe_out_commit(&out, e);
	out_open = false;
done:
	if (out_open)
		moe_out_abort(&out);
	moe_uth_writer_free(w);
	moe_pool_free(g.pool);
	moe_uth_stream_close(g.s);
	if (g.spill_fd >= 0)
		close(g.spill_fd);
	free(g.spill_off);
	free(g.produced);
	free(g.inbuf);
	free(g.fbuf);
	free(g.fifo);
	for (size_t i = 0; g.ctx && i < n; i++)
		moe_repack_fill_free(&g.ctx[i].repack);
	free(g.ctx);
	free(types);
	free(meta);
	return rc;
}
