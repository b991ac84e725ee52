/* plan.c — per-expert mixed precision: spend bits on the experts the router
 * actually uses.  For every routed expert and every type of a ladder the
 * expected error is
 *
 *     cost(l, x, T) = freq(l, x) * sum over the expert's matrices of the
 *                     importance-weighted squared error at type T
 *
 * (freq: share of tokens routed to expert x of layer l, from a moe-bench
 * --expert-stats profile; the error is measured by quantising evenly spaced
 * sample rows and scaled to the whole matrix).  Starting from the cheapest
 * rung, the upgrade with the largest cost decrease per added byte that still
 * fits the budget is applied until none fits: the greedy solution of this
 * knapsack, optimal when the error falls convexly with size, as it does
 * here within a factor the ladder steps keep small.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "uth.h"

#define SAMPLE_ROWS 32

void moe_quant_plan_free(moe_quant_plan *p)
{
	if (!p)
		return;
	free(p->types);
	free(p->freq);
	memset(p, 0, sizeof(*p));
}

/* The profile of a model with max_layer layers and max_expert experts: its
 * n_layer x n_expert table is allocated before the counts are read, so the
 * sizes are checked against the model's (a profile of a bigger model is
 * another model's; without this check a 40-byte file asked for 3 GB). */
static int load_profile(const char *path, int max_layer, int max_expert, moe_quant_plan *p,
			moe_error *e)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return moe_err(e, MOE_EFORMAT, "%s: not valid JSON: %s (line %d)", path, je.text,
			       je.line);
	int rc = 0;
	const char *fmt = json_string_value(json_object_get(j, "format"));
	json_t *nl = json_object_get(j, "n_layer"), *ne = json_object_get(j, "n_expert");
	json_t *layers = json_object_get(j, "layers");
	if (!fmt || strcmp(fmt, "moe-expert-stats") != 0 || !json_is_integer(nl) ||
	    !json_is_integer(ne) || !json_is_array(layers)) {
		rc = moe_err(e, MOE_EFORMAT, "%s: not a moe-bench --expert-stats profile (needs "
			     "\"format\": \"moe-expert-stats\", n_layer, n_expert, layers)", path);
		goto out;
	}
	p->n_layer = (int)json_integer_value(nl);
	p->n_expert = (int)json_integer_value(ne);
	if (json_integer_value(nl) <= 0 || json_integer_value(nl) > max_layer ||
	    json_integer_value(ne) <= 0 || json_integer_value(ne) > max_expert) {
		rc = moe_err(e, MOE_EFORMAT, "%s: n_layer %lld / n_expert %lld: the model has %d "
			     "layers of %d experts (a profile of another model?)", path,
			     (long long)json_integer_value(nl), (long long)json_integer_value(ne),
			     max_layer, max_expert);
		p->n_layer = p->n_expert = 0;
		goto out;
	}
	size_t n = (size_t)p->n_layer * p->n_expert;
	p->freq = calloc(n, sizeof(double));
	p->types = malloc(n * sizeof(int));
	if (!p->freq || !p->types) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		p->types[i] = -1;
	size_t k;
	json_t *L;
	json_array_foreach(layers, k, L) {
		json_t *li = json_object_get(L, "layer"), *tok = json_object_get(L, "tokens");
		json_t *counts = json_object_get(L, "counts");
		if (!json_is_integer(li) || !json_is_integer(tok) || !json_is_array(counts) ||
		    json_integer_value(li) < 0 || json_integer_value(li) >= p->n_layer ||
		    json_array_size(counts) != (size_t)p->n_expert) {
			rc = moe_err(e, MOE_EFORMAT, "%s: layers[%zu]: needs layer < n_layer, tokens "
				     "and n_expert counts", path, k);
			goto out;
		}
		double t = (double)json_integer_value(tok);
		for (int x = 0; x < p->n_expert; x++) {
			json_t *c = json_array_get(counts, (size_t)x);
			if (!json_is_integer(c) || json_integer_value(c) < 0) {
				rc = moe_err(e, MOE_EFORMAT, "%s: layers[%zu].counts[%d] is not a "
					     "count", path, k, x);
				goto out;
			}
			p->freq[json_integer_value(li) * p->n_expert + x] =
				t > 0 ? (double)json_integer_value(c) / t : 0.0;
		}
	}
out:
	json_decref(j);
	return rc;
}

static uint64_t aligned(uint64_t n)
{
	return (n + MOE_UTH_ALIGN - 1) / MOE_UTH_ALIGN * MOE_UTH_ALIGN;
}

static uint64_t tensor_bytes(const moe_uth_tensor *t, int type)
{
	const moe_type_traits *tt = moe_type_get(type);
	uint64_t rows = (uint64_t)t->ne[1] * t->ne[2] * t->ne[3];
	return rows * (t->ne[0] / tt->block_size) * tt->type_size;
}

/* Weighted squared error of tensor t at type `type`, from sample rows. */
static int sample_error(const moe_uth *u, const moe_uth_tensor *t, int type,
			const moe_imatrix *im, double *out, moe_error *e)
{
	const moe_type_traits *tf = moe_type_get(t->dtype), *tt = moe_type_get(type);
	int64_t nc = t->ne[0];
	uint64_t rows = (uint64_t)t->ne[1] * t->ne[2] * t->ne[3];
	uint64_t ns = rows < SAMPLE_ROWS ? rows : SAMPLE_ROWS;
	size_t in_row = (size_t)(nc / tf->block_size) * tf->type_size;
	size_t out_row = (size_t)(nc / tt->block_size) * tt->type_size;
	float *x = malloc(sizeof(float) * (size_t)nc), *y = malloc(sizeof(float) * (size_t)nc);
	uint8_t *q = malloc(out_row);
	const float *w = im ? moe_imatrix_for(im, t->name, t->layer, t->expert,
					      moe_uth_role_name(t->role), nc) : NULL;
	double sum = 0;
	if (!x || !y || !q) {
		free(x), free(y), free(q);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	const uint8_t *data = moe_uth_data(u, t);
	for (uint64_t s = 0; s < ns; s++) {
		uint64_t r = s * rows / ns;
		tf->to_float(data + r * in_row, x, nc);
		moe_quant_rows(type, x, q, 1, nc, w, NULL, e);
		tt->to_float(q, y, nc);
		for (int64_t c = 0; c < nc; c++) {
			double d = (double)x[c] - y[c];
			sum += (w ? w[c] : 1.0) * d * d;
		}
	}
	*out = sum * (double)rows / (double)ns;
	free(x), free(y), free(q);
	return 0;
}

int moe_quant_plan_experts(const moe_quant_opts *o, const char *profile, uint64_t size,
			   const int *ladder, int n_ladder, moe_quant_plan *p, moe_error *e)
{
	moe_uth *u = NULL;
	int *types = NULL, rc;
	double *err = NULL;    /* [expert][n_ladder + 1]: the last is the recipe's */
	uint64_t *bytes = NULL;
	int *rung = NULL;

	memset(p, 0, sizeof(*p));
	if (strcmp(o->in, "-") == 0)
		return moe_err(e, MOE_EINVAL, "--expert-profile needs the input model as a file, "
			       "not a pipe (it is read twice: moe_quant_spool_stdin)");
	if ((rc = moe_uth_open(&u, o->in, e)) < 0)
		goto out;
	int max_layer = 0, max_expert = 0; /* the model's, as counts */
	for (size_t i = 0; i < u->n_tensors; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		if (t->layer != MOE_UTH_NONE && t->layer >= max_layer)
			max_layer = t->layer + 1;
		if (t->expert != MOE_UTH_NONE && t->expert >= max_expert)
			max_expert = t->expert + 1;
	}
	if ((rc = load_profile(profile, max_layer, max_expert, p, e)) < 0)
		goto out;
	types = calloc(u->n_tensors ? u->n_tensors : 1, sizeof(int));
	size_t nx = (size_t)p->n_layer * p->n_expert, nc = (size_t)n_ladder + 1;
	err = calloc(nx * nc, sizeof(double));
	bytes = calloc(nx * nc, sizeof(uint64_t));
	rung = malloc(nx * sizeof(int));
	if (!types || !err || !bytes || !rung) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto out;
	}
	moe_quant_opts base = *o;
	base.expert_types = NULL;
	if ((rc = moe_quant_assign(u, &base, types, e)) < 0)
		goto out;

	/* fixed part: everything but the routed experts' matrices, plus the
	 * header, directory, names and an allowance for the metadata */
	uint64_t fixed = MOE_UTH_HEADER_SIZE + u->n_tensors * (MOE_UTH_RECORD_SIZE + 96) +
			 u->meta_len + 4096;
	bool *present = calloc(nx, sizeof(bool));
	if (!present) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < u->n_tensors; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		bool routed = t->expert != MOE_UTH_NONE && moe_quant_role_is_matrix(t->role) &&
			      t->layer < p->n_layer && t->expert < p->n_expert && t->n_dims >= 2;
		if (!routed) {
			fixed += aligned(tensor_bytes(t, types[i]));
			continue;
		}
		size_t x = (size_t)t->layer * p->n_expert + t->expert;
		present[x] = true;
		for (size_t k = 0; k < nc; k++) {
			int ty = k < (size_t)n_ladder ? moe_quant_fallback(ladder[k], t->ne[0])
						      : types[i];
			double er = 0;
			if ((rc = sample_error(u, t, ty, o->imatrix, &er, e)) < 0) {
				free(present);
				goto out;
			}
			err[x * nc + k] += er;
			bytes[x * nc + k] += aligned(tensor_bytes(t, ty));
		}
	}
	/* greedy: cheapest rung everywhere, then best cost drop per byte */
	uint64_t total = fixed, uniform = fixed;
	for (size_t x = 0; x < nx; x++) {
		rung[x] = 0;
		if (!present[x])
			continue;
		total += bytes[x * nc];
		uniform += bytes[x * nc + n_ladder];
		p->cost_uniform += p->freq[x] * err[x * nc + n_ladder];
	}
	if (total > size) {
		rc = moe_err(e, MOE_EINVAL, "--size %llu bytes is too small: with every expert at "
			     "%s the model takes %llu bytes", (unsigned long long)size,
			     moe_type_name(ladder[0]), (unsigned long long)total);
		free(present);
		goto out;
	}
	for (;;) {
		double best = 0;
		size_t bx = 0;
		int bk = -1;
		for (size_t x = 0; x < nx; x++) {
			if (!present[x])
				continue;
			int r = rung[x];
			for (int k = r + 1; k < n_ladder; k++) {
				uint64_t add = bytes[x * nc + k] - bytes[x * nc + r];
				double gain = p->freq[x] * (err[x * nc + r] - err[x * nc + k]);
				if (bytes[x * nc + k] < bytes[x * nc + r] || total + add > size ||
				    gain <= 0)
					continue;
				double ratio = gain / (double)(add ? add : 1);
				if (ratio > best) {
					best = ratio;
					bx = x;
					bk = k;
				}
			}
		}
		if (bk < 0)
			break;
		total += bytes[bx * nc + bk] - bytes[bx * nc + rung[bx]];
		rung[bx] = bk;
	}
	for (size_t x = 0; x < nx; x++) {
		p->types[x] = present[x] ? ladder[rung[x]] : -1;
		if (present[x])
			p->cost += p->freq[x] * err[x * nc + rung[x]];
	}
	p->size = total;
	free(present);
	p->size_uniform = uniform;
out:
	if (rc < 0)
		moe_quant_plan_free(p);
	moe_uth_close(u);
	free(types);
	free(err);
	free(bytes);
	free(rung);
	return rc;
}

/* ----------------------------------------------- a piped input, spooled */

int moe_quant_spool_stdin(int *fd_out, char *path, size_t path_size, moe_error *e)
{
	const char *dir = getenv("TMPDIR");
	char tmpl[4096];
	enum { CHUNK = 1 << 20 };

	*fd_out = -1;
	dir = dir && *dir ? dir : "/tmp";
	snprintf(tmpl, sizeof(tmpl), "%s/moe-quant-in-XXXXXX", dir);
	int fd = mkstemp(tmpl);
	if (fd < 0)
		return moe_err(e, MOE_EIO, "%s: cannot create the temporary copy of standard "
			       "input (set TMPDIR to a directory with room for the model): %s",
			       dir, strerror(errno));
	unlink(tmpl); /* the space is freed when the descriptor closes, whatever happens */
	char *buf = malloc(CHUNK);
	if (!buf) {
		close(fd);
		return moe_err(e, MOE_ENOMEM, "out of memory");
	}
	uint64_t total = 0;
	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf, CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;
			free(buf);
			close(fd);
			return moe_err(e, MOE_EIO, "standard input: read error: %s", strerror(err));
		}
		if (n == 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				int err = errno;
				free(buf);
				close(fd);
				return moe_err(e, MOE_EIO, "%s: copying standard input (%llu bytes so "
					       "far) to a temporary file: %s", dir,
					       (unsigned long long)total, strerror(err));
			}
			off += w;
			total += (uint64_t)w;
		}
	}
	free(buf);
	snprintf(path, path_size, "/dev/fd/%d", fd);
	*fd_out = fd;
	return 0;
}
