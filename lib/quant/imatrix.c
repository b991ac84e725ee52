/* imatrix.c — importance matrices: per weight tensor (per expert for an
 * expert's tensors) the mean square of each input column over the tokens
 * the tensor saw.  The accumulator the forward pass feeds, our file format
 * (man/moe-quant.1, "IMATRIX FILES"), and llama.cpp's legacy binary format
 * (read only).
 *
 * moe imatrix file v1, little endian:
 *   "MOEIMTX1"  8 bytes
 *   u32 version (1), u32 n_entries
 *   n_entries x { u32 name_len, name (UTF-8, no NUL), u32 n_cols,
 *                 u64 rows (activation rows accumulated),
 *                 f64 sums[n_cols] (sum over rows of x^2) }
 *   u64 XXH3-64 of every byte before it
 * llama.cpp legacy ("imatrix.dat"):
 *   i32 n_entries; n_entries x { i32 len, name, i32 ncall, i32 nval,
 *   f32 values[nval] (mean square x ncall) }; optional i32 chunks, i32 len,
 *   dataset name.  3-D expert tensors ("blk.N.ffn_up_exps.weight") hold
 *   n_expert x n_cols values, expert-major.
 */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "quant.h"

#define MAGIC "MOEIMTX1"

typedef struct entry {
	char *name;
	int64_t n_cols;
	uint64_t rows;
	double *sums;  /* [n_cols] */
	float *mean;   /* [n_cols], filled on demand */
} entry;

struct moe_imatrix {
	entry *e;
	size_t n, cap;
};

int moe_imatrix_new(moe_imatrix **out, moe_error *e)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : moe_err(e, MOE_ENOMEM, "imatrix: out of memory");
}

void moe_imatrix_free(moe_imatrix *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++) {
		free(m->e[i].name);
		free(m->e[i].sums);
		free(m->e[i].mean);
	}
	free(m->e);
	free(m);
}

static entry *find(const moe_imatrix *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->e[i].name, name) == 0)
			return &m->e[i];
	return NULL;
}

static int add_entry(moe_imatrix *m, const char *name, size_t name_len, int64_t n_cols,
		     entry **out, moe_error *e)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		entry *ne = realloc(m->e, cap * sizeof(*ne));
		if (!ne)
			return moe_err(e, MOE_ENOMEM, "imatrix: out of memory");
		m->e = ne;
		m->cap = cap;
	}
	entry *x = &m->e[m->n];
	memset(x, 0, sizeof(*x));
	x->name = malloc(name_len + 1);
	x->sums = calloc((size_t)n_cols, sizeof(double));
	if (!x->name || !x->sums) {
		free(x->name);
		free(x->sums);
		return moe_err(e, MOE_ENOMEM, "imatrix: out of memory");
	}
	memcpy(x->name, name, name_len);
	x->name[name_len] = 0;
	x->n_cols = n_cols;
	m->n++;
	*out = x;
	return 0;
}

int moe_imatrix_add(moe_imatrix *m, const char *name, const float *x, int64_t n_rows,
		    int64_t n_cols, moe_error *e)
{
	return moe_imatrix_add_part(m, name, x, n_rows, n_cols, 0, 1, e);
}

/* Part `part` of n_parts is columns part*n_cols.. of an entry of n_parts *
 * n_cols columns (llama.cpp's layout for a stack of matrices); its rows are
 * counted once, with part 0, as every part sees the same rows. */
int moe_imatrix_add_part(moe_imatrix *m, const char *name, const float *x, int64_t n_rows,
			 int64_t n_cols, int part, int n_parts, moe_error *e)
{
	if (n_cols <= 0 || n_rows < 0 || n_parts < 1 || part < 0 || part >= n_parts ||
	    n_cols > ((int64_t)1 << 30) / n_parts)
		return moe_err(e, MOE_EINVAL, "imatrix: %s: bad shape %lld x %lld (part %d of %d)",
			       name, (long long)n_rows, (long long)n_cols, part, n_parts);
	int64_t all = n_cols * n_parts;
	entry *t = find(m, name);
	if (!t)
		MOE_TRY(add_entry(m, name, strlen(name), all, &t, e));
	if (t->n_cols != all)
		return moe_err(e, MOE_EINVAL, "imatrix: %s: rows of %lld columns, earlier %lld",
			       name, (long long)all, (long long)t->n_cols);
	double *sums = t->sums + (int64_t)part * n_cols;
	for (int64_t r = 0; r < n_rows; r++)
		for (int64_t c = 0; c < n_cols; c++) {
			double v = x[r * n_cols + c];
			sums[c] += v * v;
		}
	if (part == 0)
		t->rows += (uint64_t)n_rows;
	free(t->mean);
	t->mean = NULL;
	return 0;
}

static const float *mean_of(entry *t)
{
	if (!t->mean) {
		t->mean = malloc(sizeof(float) * (size_t)t->n_cols);
		if (!t->mean)
			return NULL;
		for (int64_t c = 0; c < t->n_cols; c++)
			t->mean[c] = t->rows ? (float)(t->sums[c] / (double)t->rows) : 0.0f;
	}
	return t->mean;
}

const float *moe_imatrix_get(const moe_imatrix *m, const char *name, int64_t n_cols,
			     uint64_t *rows)
{
	entry *t = find(m, name);
	if (!t || t->n_cols != n_cols)
		return NULL;
	if (rows)
		*rows = t->rows;
	return mean_of(t);
}

/* An expert's tensor "blk.L.ffn_up.E.weight" may be stored the llama.cpp
 * way, as slice E of "blk.L.ffn_up_exps.weight". */
const float *moe_imatrix_for(const moe_imatrix *m, const char *name, int layer, int expert,
			     const char *role, int64_t n_cols)
{
	const float *v = moe_imatrix_get(m, name, n_cols, NULL);
	if (v || expert < 0 || !role)
		return v;
	char key[128];
	snprintf(key, sizeof(key), "blk.%d.%s_exps.weight", layer, role);
	entry *t = find(m, key);
	if (!t || t->n_cols < (int64_t)(expert + 1) * n_cols || t->n_cols % n_cols)
		return NULL;
	const float *all = mean_of(t);
	return all ? all + (int64_t)expert * n_cols : NULL;
}

size_t moe_imatrix_count(const moe_imatrix *m)
{
	return m->n;
}

/* ------------------------------------------------------------ files */

static void put_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

int moe_imatrix_save(const moe_imatrix *m, const char *path, moe_error *e)
{
	moe_out out;
	XXH3_state_t *h = XXH3_createState();
	int rc;

	if (!h)
		return moe_err(e, MOE_ENOMEM, "imatrix: out of memory");
	XXH3_64bits_reset(h);
	rc = moe_out_open(&out, path, e);
	if (rc < 0) {
		XXH3_freeState(h);
		return rc;
	}
#define W(buf, n)                                                      \
	do {                                                           \
		XXH3_64bits_update(h, (buf), (n));                     \
		if ((rc = moe_out_write(&out, (buf), (n), e)) < 0)     \
			goto fail;                                     \
	} while (0)
	uint8_t hdr[16];
	memcpy(hdr, MAGIC, 8);
	put_u32(hdr + 8, 1);
	put_u32(hdr + 12, (uint32_t)m->n);
	W(hdr, 16);
	for (size_t i = 0; i < m->n; i++) {
		const entry *t = &m->e[i];
		uint8_t b[16];
		uint32_t len = (uint32_t)strlen(t->name);
		put_u32(b, len);
		W(b, 4);
		W(t->name, len);
		put_u32(b, (uint32_t)t->n_cols);
		memcpy(b + 4, &t->rows, 8);
		W(b, 12);
		W(t->sums, sizeof(double) * (size_t)t->n_cols);
	}
#undef W
	uint64_t x = XXH3_64bits_digest(h);
	if ((rc = moe_out_write(&out, &x, 8, e)) < 0)
		goto fail;
	XXH3_freeState(h);
	return moe_out_commit(&out, e);
fail:
	XXH3_freeState(h);
	moe_out_abort(&out);
	return rc;
}

/* Bounded reader over a whole file in memory. */
typedef struct rd {
	const uint8_t *p;
	size_t n, off;
	const char *path;
} rd;

static int rd_take(rd *r, void *dst, size_t n, const char *what, moe_error *e)
{
	if (n > r->n - r->off)
		return moe_err(e, MOE_EFORMAT, "%s: truncated imatrix file: %s at byte %zu needs "
			       "%zu bytes, %zu left", r->path, what, r->off, n, r->n - r->off);
	memcpy(dst, r->p + r->off, n);
	r->off += n;
	return 0;
}

static int load_moe(moe_imatrix *m, rd *r, moe_error *e)
{
	uint32_t ver, n;
	if (r->n < 24)
		return moe_err(e, MOE_EFORMAT, "%s: truncated imatrix file", r->path);
	uint64_t stored;
	memcpy(&stored, r->p + r->n - 8, 8);
	if (XXH3_64bits(r->p, r->n - 8) != stored)
		return moe_err(e, MOE_ECHECKSUM, "%s: imatrix checksum mismatch (corrupt or "
			       "truncated file)", r->path);
	r->n -= 8;
	r->off = 8;
	MOE_TRY(rd_take(r, &ver, 4, "version", e));
	MOE_TRY(rd_take(r, &n, 4, "entry count", e));
	if (ver != 1)
		return moe_err(e, MOE_EUNSUPPORTED, "%s: imatrix version %u (expected 1)", r->path,
			       ver);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len, cols;
		uint64_t rows;
		MOE_TRY(rd_take(r, &len, 4, "name length", e));
		if (len == 0 || len > 4096 || len > r->n - r->off)
			return moe_err(e, MOE_EFORMAT, "%s: entry %u: bad name length %u", r->path, i,
				       len);
		const char *name = (const char *)r->p + r->off;
		if (memchr(name, 0, len))
			return moe_err(e, MOE_EFORMAT, "%s: entry %u: NUL in name", r->path, i);
		r->off += len;
		MOE_TRY(rd_take(r, &cols, 4, "n_cols", e));
		MOE_TRY(rd_take(r, &rows, 8, "rows", e));
		if (cols == 0 || cols > (1u << 30) || (uint64_t)cols * 8 > r->n - r->off)
			return moe_err(e, MOE_EFORMAT, "%s: entry %u: %u columns do not fit the file",
				       r->path, i, cols);
		entry *t;
		MOE_TRY(add_entry(m, name, len, cols, &t, e));
		if (find(m, t->name) != t)
			return moe_err(e, MOE_EFORMAT, "%s: duplicate entry '%s'", r->path, t->name);
		memcpy(t->sums, r->p + r->off, 8 * (size_t)cols);
		r->off += 8 * (size_t)cols;
		t->rows = rows;
		for (uint32_t c = 0; c < cols; c++) {
			if (!(t->sums[c] >= 0.0) || t->sums[c] > 1e300)
				return moe_err(e, MOE_EFORMAT, "%s: entry '%s': column %u is not a "
					       "finite non-negative sum", r->path, t->name, c);
			/* the quantisers take the mean square as a float weight:
			 * one that overflows to infinity would make NaN scales */
			if (rows && t->sums[c] / (double)rows > FLT_MAX)
				return moe_err(e, MOE_EFORMAT, "%s: entry '%s': column %u: mean square "
					       "%g (sum over %llu rows) does not fit a float", r->path,
					       t->name, c, t->sums[c] / (double)rows,
					       (unsigned long long)rows);
		}
	}
	if (r->off != r->n)
		return moe_err(e, MOE_EFORMAT, "%s: %zu bytes of trailing data", r->path,
			       r->n - r->off);
	return 0;
}

static int load_legacy(moe_imatrix *m, rd *r, moe_error *e)
{
	int32_t n;
	MOE_TRY(rd_take(r, &n, 4, "entry count", e));
	if (n <= 0 || n > 1000000)
		return moe_err(e, MOE_EFORMAT, "%s: not an imatrix file (entry count %d)", r->path,
			       n);
	for (int32_t i = 0; i < n; i++) {
		int32_t len, ncall, nval;
		MOE_TRY(rd_take(r, &len, 4, "name length", e));
		if (len <= 0 || len > 4096 || (size_t)len > r->n - r->off)
			return moe_err(e, MOE_EFORMAT, "%s: entry %d: bad name length %d", r->path, i,
				       len);
		const char *name = (const char *)r->p + r->off;
		if (memchr(name, 0, (size_t)len))
			return moe_err(e, MOE_EFORMAT, "%s: entry %d: NUL in name", r->path, i);
		r->off += (size_t)len;
		MOE_TRY(rd_take(r, &ncall, 4, "ncall", e));
		MOE_TRY(rd_take(r, &nval, 4, "nval", e));
		if (ncall < 0 || nval <= 0 || (uint64_t)nval * 4 > r->n - r->off)
			return moe_err(e, MOE_EFORMAT, "%s: entry %d: ncall %d / nval %d do not fit "
				       "the file", r->path, i, ncall, nval);
		entry *t;
		MOE_TRY(add_entry(m, name, (size_t)len, nval, &t, e));
		if (find(m, t->name) != t)
			return moe_err(e, MOE_EFORMAT, "%s: duplicate entry '%s'", r->path, t->name);
		/* values are mean squares times ncall: keep them as sums over
		 * ncall "rows" so the mean comes out right */
		t->rows = ncall > 0 ? (uint64_t)ncall : 1;
		for (int32_t c = 0; c < nval; c++) {
			float v;
			memcpy(&v, r->p + r->off + 4 * (size_t)c, 4);
			if (!(v >= 0.0f) || v > 3e38f)
				return moe_err(e, MOE_EFORMAT, "%s: entry '%s': value %d is not finite "
					       "and non-negative", r->path, t->name, c);
			t->sums[c] = v;
		}
		r->off += 4 * (size_t)nval;
	}
	/* the optional trailer (chunk count and data set name) is ignored */
	return 0;
}

int moe_imatrix_load(moe_imatrix **out, const char *path, moe_error *e)
{
	moe_src *src;
	*out = NULL;
	MOE_TRY(moe_src_open_file(&src, path, e));
	if (src->size > ((uint64_t)1 << 34)) {
		src->close(src);
		return moe_err(e, MOE_ERANGE, "%s: imatrix file too large", path);
	}
	size_t n = (size_t)src->size;
	uint8_t *buf = malloc(n ? n : 1);
	int rc = buf ? moe_src_read(src, 0, buf, n, e)
		     : moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
	src->close(src);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	moe_imatrix *m;
	rc = moe_imatrix_new(&m, e);
	if (rc == 0) {
		rd r = {.p = buf, .n = n, .path = path};
		if (n >= 8 && memcmp(buf, MAGIC, 8) == 0)
			rc = load_moe(m, &r, e);
		else
			rc = load_legacy(m, &r, e);
	}
	free(buf);
	if (rc < 0) {
		moe_imatrix_free(m);
		return rc;
	}
	*out = m;
	return 0;
}
