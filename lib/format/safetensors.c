/* safetensors.c — the safetensors header parser.
 *
 * A safetensors file is: u64 little-endian N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data section, offsets relative to its start (8 + N).  We accept
 * exactly what the reference implementation accepts — tensors packed from 0
 * to the end of the file without gaps or overlaps — since a gap or a
 * trailing byte means a writer bug or a file that was tampered with.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hf.h"
#include "quant.h"

static const struct {
	const char *name;
	int dtype;
} st_dtypes[] = {
	{ "F32", MOE_F32 }, { "F16", MOE_F16 }, { "BF16", MOE_BF16 }, { "F64", MOE_F64 },
	{ "I8", MOE_I8 },   { "I16", MOE_I16 }, { "I32", MOE_I32 },   { "I64", MOE_I64 },
};

/* U8 is read as raw bytes (moe_hf_tensor.u8, dtype MOE_I8 for its size):
 * gpt-oss's MXFP4 expert blocks and exponents are stored so.  Whoever reads
 * a tensor must check u8 (values above 127 are not I8's). */
#define ST_U8 "U8"

/* Valid in safetensors but without a moe type: reported as unsupported
 * rather than malformed.  (BOOL is not mapped to I8: it is no number.) */
static const char *const st_unsupported[] = {
	"BOOL", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
	"F6_E2M3", "F6_E3M2", "C64",
};

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

int moe_safetensors_header_len(const char *name, const unsigned char first8[8],
			       uint64_t file_size, uint64_t *header_len, moe_error *e)
{
	uint64_t n = 0;

	if (file_size < 8)
		return moe_err(e, MOE_EFORMAT,
			       "%s: %llu bytes, too short for a safetensors header", name,
			       (unsigned long long)file_size);
	for (int i = 7; i >= 0; i--)
		n = n << 8 | first8[i];
	if (n > file_size - 8)
		return moe_err(e, MOE_EFORMAT,
			       "%s: header length %llu longer than the file (%llu bytes)", name,
			       (unsigned long long)n, (unsigned long long)file_size);
	if (n > MOE_ST_HEADER_MAX)
		return moe_err(e, MOE_EFORMAT, "%s: header length %llu over the limit of %llu",
			       name, (unsigned long long)n, (unsigned long long)MOE_ST_HEADER_MAX);
	*header_len = n;
	return 0;
}

static int st_dtype(const char *name, const char *tname, const char *s, moe_error *e)
{
	for (size_t i = 0; i < N_ELEMS(st_dtypes); i++)
		if (strcmp(s, st_dtypes[i].name) == 0)
			return st_dtypes[i].dtype;
	for (size_t i = 0; i < N_ELEMS(st_unsupported); i++)
		if (strcmp(s, st_unsupported[i]) == 0)
			return moe_err(e, MOE_EUNSUPPORTED,
				       "%s: tensor '%s': dtype %s not supported", name, tname, s);
	return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': unknown dtype '%.32s'", name, tname, s);
}

/* A JSON integer >= 0 (jansson already rejects integers beyond int64). */
static bool st_uint(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* One "name": {...} entry: fills t with offsets still relative to the data
 * section. */
static int st_entry(const char *name, const char *tname, const json_t *obj, uint64_t data_size,
		    moe_hf_tensor *t, moe_error *e)
{
	const json_t *dt, *shape, *offs;
	uint64_t count = 1, begin, end, nbytes;
	int rc;

	if (!json_is_object(obj))
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': entry is not an object", name,
			       tname);
	dt = json_object_get(obj, "dtype");
	shape = json_object_get(obj, "shape");
	offs = json_object_get(obj, "data_offsets");
	if (!json_is_string(dt))
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': dtype missing or not a string",
			       name, tname);
	if (!json_is_array(shape))
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': shape missing or not an array",
			       name, tname);
	if (!json_is_array(offs) || json_array_size(offs) != 2)
		return moe_err(e, MOE_EFORMAT,
			       "%s: tensor '%s': data_offsets is not an array of two integers",
			       name, tname);

	t->u8 = strcmp(json_string_value(dt), ST_U8) == 0;
	rc = t->u8 ? MOE_I8 : st_dtype(name, tname, json_string_value(dt), e);
	if (rc < 0)
		return rc;
	t->dtype = rc;

	if (json_array_size(shape) > 4)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': %zu dims (at most 4 supported)",
			       name, tname, json_array_size(shape));
	t->n_dims = (uint32_t)json_array_size(shape);
	for (uint32_t i = 0; i < 4; i++)
		t->shape[i] = 1;
	for (uint32_t i = 0; i < t->n_dims; i++) {
		if (!st_uint(json_array_get(shape, i), &t->shape[i]))
			return moe_err(e, MOE_EFORMAT,
				       "%s: tensor '%s': shape[%u] is not a non-negative integer",
				       name, tname, i);
		if (!moe_mul_u64(count, t->shape[i], &count))
			return moe_err(e, MOE_ERANGE,
				       "%s: tensor '%s': element count overflows", name, tname);
	}
	rc = moe_type_nbytes(t->dtype, count, &nbytes, e);
	if (rc < 0)
		return moe_err_prefix(e, "%s: tensor '%s'", name, tname);

	if (!st_uint(json_array_get(offs, 0), &begin) || !st_uint(json_array_get(offs, 1), &end))
		return moe_err(e, MOE_EFORMAT,
			       "%s: tensor '%s': data_offsets is not an array of two integers",
			       name, tname);
	if (begin > end)
		return moe_err(e, MOE_EFORMAT,
			       "%s: tensor '%s': data_offsets begin %llu after end %llu", name,
			       tname, (unsigned long long)begin, (unsigned long long)end);
	if (end > data_size)
		return moe_err(e, MOE_EFORMAT,
			       "%s: tensor '%s': data_offsets end %llu past the data section (%llu bytes)",
			       name, tname, (unsigned long long)end,
			       (unsigned long long)data_size);
	if (end - begin != nbytes)
		return moe_err(e, MOE_EFORMAT,
			       "%s: tensor '%s': size mismatch: data_offsets span %llu bytes, dtype and shape need %llu",
			       name, tname, (unsigned long long)(end - begin),
			       (unsigned long long)nbytes);
	t->offset = begin;
	t->size = nbytes;
	return 0;
}

static int st_cmp_offset(const void *a, const void *b)
{
	const moe_hf_tensor *x = a, *y = b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Tensors sorted by offset must tile [0, data_size) exactly. */
static int st_check_packed(const char *name, const moe_hf_tensor *t, uint64_t n,
			   uint64_t data_size, moe_error *e)
{
	uint64_t end = 0;
	const char *prev = NULL;

	for (uint64_t i = 0; i < n; i++) {
		if (t[i].offset < end)
			return moe_err(e, MOE_EFORMAT,
				       "%s: tensor '%s': data [%llu, %llu) overlaps tensor '%s'",
				       name, t[i].name, (unsigned long long)t[i].offset,
				       (unsigned long long)(t[i].offset + t[i].size), prev);
		if (t[i].offset > end) {
			if (!prev)
				return moe_err(e, MOE_EFORMAT,
					       "%s: tensor '%s': non-contiguous offsets: data starts at %llu, not 0",
					       name, t[i].name, (unsigned long long)t[i].offset);
			return moe_err(e, MOE_EFORMAT,
				       "%s: tensor '%s': non-contiguous offsets: begins at %llu but tensor '%s' ends at %llu",
				       name, t[i].name, (unsigned long long)t[i].offset, prev,
				       (unsigned long long)end);
		}
		end = t[i].offset + t[i].size;
		prev = t[i].name;
	}
	if (end != data_size)
		return moe_err(e, MOE_EFORMAT,
			       "%s: non-contiguous offsets: %llu bytes after the last tensor", name,
			       (unsigned long long)(data_size - end));
	return 0;
}

static int st_metadata(const char *name, const json_t *meta, moe_error *e)
{
	const char *k;
	json_t *v;

	if (!json_is_object(meta))
		return moe_err(e, MOE_EFORMAT, "%s: __metadata__ is not an object", name);
	json_object_foreach((json_t *)meta, k, v) {
		if (!json_is_string(v))
			return moe_err(e, MOE_EFORMAT, "%s: __metadata__ '%s' is not a string",
				       name, k);
	}
	return 0;
}

int moe_safetensors_parse(const char *name, const char *json, size_t n, uint64_t data_base,
			  uint64_t data_size, moe_src *src, moe_arena *arena,
			  moe_hf_tensor **out, uint64_t *n_out, moe_error *e)
{
	json_error_t jerr;
	json_t *root, *val;
	const char *key;
	moe_hf_tensor *t = NULL;
	uint64_t nt = 0, end;
	size_t cap;
	int rc = 0;

	*out = NULL;
	*n_out = 0;
	if (!moe_add_u64(data_base, data_size, &end))
		return moe_err(e, MOE_ERANGE, "%s: data section size overflows", name);
	root = json_loadb(json, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return moe_err(e, MOE_EFORMAT, "%s: header JSON: %s (line %d, column %d)", name,
			       jerr.text, jerr.line, jerr.column);
	if (!json_is_object(root)) {
		rc = moe_err(e, MOE_EFORMAT, "%s: header JSON is not an object", name);
		goto out;
	}
	cap = json_object_size(root);
	if (cap) {
		/* cap <= n, so the multiplication cannot overflow */
		t = moe_arena_alloc(arena, cap * sizeof(*t), _Alignof(moe_hf_tensor));
		if (!t) {
			rc = moe_err(e, MOE_ENOMEM, "%s: out of memory for %zu tensors", name, cap);
			goto out;
		}
	}
	json_object_foreach(root, key, val) {
		if (strcmp(key, "__metadata__") == 0) {
			rc = st_metadata(name, val, e);
			if (rc < 0)
				goto out;
			continue;
		}
		rc = st_entry(name, key, val, data_size, &t[nt], e);
		if (rc < 0)
			goto out;
		t[nt].name = moe_arena_strndup(arena, key, strlen(key));
		if (!t[nt].name) {
			rc = moe_err(e, MOE_ENOMEM, "%s: out of memory", name);
			goto out;
		}
		nt++;
	}
	if (nt > 1)
		qsort(t, nt, sizeof(*t), st_cmp_offset);
	rc = st_check_packed(name, t, nt, data_size, e);
	if (rc < 0)
		goto out;
	/* data_base + end <= data_base + data_size, checked above */
	for (uint64_t i = 0; i < nt; i++) {
		t[i].offset += data_base;
		t[i].src = src;
		t[i].shard = 0;
	}
	*out = t;
	*n_out = nt;
out:
	json_decref(root);
	return rc;
}

int moe_safetensors_read(moe_src *src, moe_arena *arena, moe_hf_tensor **out,
			 uint64_t *n_out, moe_error *e)
{
	unsigned char first8[8] = { 0 };
	uint64_t n;
	char *buf;
	int rc;

	*out = NULL;
	*n_out = 0;
	if (src->size >= 8)
		MOE_TRY(moe_src_read(src, 0, first8, 8, e));
	MOE_TRY(moe_safetensors_header_len(src->name, first8, src->size, &n, e));
	buf = malloc(n ? n : 1);
	if (!buf)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory for a %llu-byte header",
			       src->name, (unsigned long long)n);
	rc = moe_src_read(src, 8, buf, n, e);
	if (rc == 0)
		rc = moe_safetensors_parse(src->name, buf, n, 8 + n, src->size - 8 - n, src,
					   arena, out, n_out, e);
	free(buf);
	return rc;
}
