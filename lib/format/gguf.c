/* gguf.c — the GGUF (v2/v3) reader: header, typed metadata, tensor infos.
 *
 * Everything before the data section is parsed front to back through a
 * buffered reader (chunks of up to 1 MiB), because the metadata of a real
 * model can hold 150k-entry token arrays and one source read per value would
 * be ruinous on a file or archive source.  Every count, length and offset is
 * checked against the bytes that remain in the source before anything is
 * allocated, so memory stays proportional to the metadata actually present.
 * Tensor data is never read here.
 *
 * Error messages are built innermost first ("string length 5 exceeds ...")
 * and prefixed on the way out with the field ("KV 3 'general.name'") and,
 * in moe_gguf_open, with the source name.
 */
#include <config.h>

#include "gguf.h"
#include "quant.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define READ_CHUNK ((size_t)1 << 20)

/* Smallest possible encodings, used to reject counts that the remaining
 * bytes could not hold before allocating for them. */
#define MIN_KV_BYTES 13     /* key length u64 + type u32 + one byte of value */
#define MIN_TENSOR_BYTES 32 /* name length + n_dims + one ne + type + offset */
#define MIN_ARRAY_BYTES 12  /* element type u32 + count u64 */

static const char *const type_names[MOE_GGUF_T_COUNT] = {
	[MOE_GGUF_T_UINT8] = "uint8",     [MOE_GGUF_T_INT8] = "int8",
	[MOE_GGUF_T_UINT16] = "uint16",   [MOE_GGUF_T_INT16] = "int16",
	[MOE_GGUF_T_UINT32] = "uint32",   [MOE_GGUF_T_INT32] = "int32",
	[MOE_GGUF_T_FLOAT32] = "float32", [MOE_GGUF_T_BOOL] = "bool",
	[MOE_GGUF_T_STRING] = "string",   [MOE_GGUF_T_ARRAY] = "array",
	[MOE_GGUF_T_UINT64] = "uint64",   [MOE_GGUF_T_INT64] = "int64",
	[MOE_GGUF_T_FLOAT64] = "float64",
};

static const uint8_t type_sizes[MOE_GGUF_T_COUNT] = {
	[MOE_GGUF_T_UINT8] = 1,   [MOE_GGUF_T_INT8] = 1,   [MOE_GGUF_T_UINT16] = 2,
	[MOE_GGUF_T_INT16] = 2,   [MOE_GGUF_T_UINT32] = 4, [MOE_GGUF_T_INT32] = 4,
	[MOE_GGUF_T_FLOAT32] = 4, [MOE_GGUF_T_BOOL] = 1,   [MOE_GGUF_T_STRING] = 0,
	[MOE_GGUF_T_ARRAY] = 0,   [MOE_GGUF_T_UINT64] = 8, [MOE_GGUF_T_INT64] = 8,
	[MOE_GGUF_T_FLOAT64] = 8,
};

const char *moe_gguf_type_name(int type)
{
	return type >= 0 && type < MOE_GGUF_T_COUNT ? type_names[type] : "?";
}

size_t moe_gguf_type_size(int type)
{
	return type >= 0 && type < MOE_GGUF_T_COUNT ? type_sizes[type] : 0;
}

static bool is_unsigned(int t)
{
	return t == MOE_GGUF_T_UINT8 || t == MOE_GGUF_T_UINT16 || t == MOE_GGUF_T_UINT32 ||
	       t == MOE_GGUF_T_UINT64;
}

static bool is_signed(int t)
{
	return t == MOE_GGUF_T_INT8 || t == MOE_GGUF_T_INT16 || t == MOE_GGUF_T_INT32 ||
	       t == MOE_GGUF_T_INT64;
}

/* A key or tensor name made safe for a message: control bytes escaped,
 * long names cut.  Names come from the file and may hold anything. */
#define SHOW_MAX 100
struct shown {
	char s[SHOW_MAX * 4 + 4];
};

static const char *show(struct shown *o, const char *name)
{
	size_t j = 0;

	for (size_t i = 0; name[i]; i++) {
		unsigned char c = (unsigned char)name[i];
		if (i == SHOW_MAX) {
			memcpy(o->s + j, "...", 3);
			j += 3;
			break;
		}
		if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'') {
			snprintf(o->s + j, 5, "\\x%02x", c);
			j += 4;
		} else {
			o->s[j++] = (char)c;
		}
	}
	o->s[j] = '\0';
	return o->s;
}

/* ------------------------------------------------------ buffered reader */

struct parser {
	moe_gguf *g;
	moe_src *src;
	uint64_t size;    /* of the source */
	uint64_t pos;     /* absolute offset of the next unread byte; <= size */
	uint8_t *buf;     /* holds [buf_off, buf_off + buf_len) of the source */
	size_t cap;
	uint64_t buf_off;
	size_t buf_len;
	moe_error *e;
	/* A failed source read: its message already names the source, so it
	 * is reported as is (see moe_gguf_open), not under field prefixes. */
	bool io_failed;
	moe_error io_err;
};

static uint64_t left(const struct parser *p)
{
	return p->size - p->pos;
}

static int truncated(struct parser *p, uint64_t need)
{
	return moe_err(p->e, MOE_EFORMAT,
		       "truncated: %" PRIu64 " bytes needed at offset %" PRIu64
		       ", file size %" PRIu64,
		       need, p->pos, p->size);
}

static int src_read(struct parser *p, void *dst, size_t n)
{
	int rc = moe_src_read(p->src, p->pos, dst, n, p->e);
	if (rc < 0 && !p->io_failed) {
		p->io_failed = true;
		p->io_err = *p->e;
	}
	return rc;
}

/* Bytes of the buffer from pos onwards. */
static size_t buffered(const struct parser *p)
{
	if (p->pos < p->buf_off || p->pos - p->buf_off >= p->buf_len)
		return 0;
	return p->buf_len - (size_t)(p->pos - p->buf_off);
}

/* Make [pos, pos + n) available in the buffer; n <= cap. */
static int rd_fill(struct parser *p, size_t n)
{
	size_t want;

	if (buffered(p) >= n)
		return 0;
	if (n > left(p))
		return truncated(p, n);
	want = left(p) < p->cap ? (size_t)left(p) : p->cap;
	MOE_TRY(src_read(p, p->buf, want));
	p->buf_off = p->pos;
	p->buf_len = want;
	return 0;
}

static const uint8_t *rd_ptr(const struct parser *p)
{
	return p->buf + (p->pos - p->buf_off);
}

static uint64_t le_load(const uint8_t *b, size_t n)
{
	uint64_t v = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(&v, b, n);
#else
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)b[i] << (8 * i);
#endif
	return v;
}

/* Read an n-byte little-endian unsigned integer (n <= 8). */
static int rd_uint(struct parser *p, size_t n, uint64_t *out)
{
	MOE_TRY(rd_fill(p, n));
	*out = le_load(rd_ptr(p), n);
	p->pos += n;
	return 0;
}

static int rd_u32(struct parser *p, uint32_t *out)
{
	uint64_t v;
	MOE_TRY(rd_uint(p, 4, &v));
	*out = (uint32_t)v;
	return 0;
}

static int rd_u64(struct parser *p, uint64_t *out)
{
	return rd_uint(p, 8, out);
}

/* Copy n bytes to dst; large reads bypass the buffer. */
static int rd_bytes(struct parser *p, void *dst, uint64_t n)
{
	uint8_t *d = dst;

	if (n > left(p))
		return truncated(p, n);
	while (n > 0) {
		size_t have = buffered(p);
		if (have == 0 && n >= p->cap) {
			size_t chunk = n > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)n;
			MOE_TRY(src_read(p, d, chunk));
			p->pos += chunk;
			d += chunk;
			n -= chunk;
			continue;
		}
		if (have == 0) {
			MOE_TRY(rd_fill(p, 1));
			have = buffered(p);
		}
		if (have > n)
			have = (size_t)n;
		memcpy(d, rd_ptr(p), have);
		p->pos += have;
		d += have;
		n -= have;
	}
	return 0;
}

/* ------------------------------------------------------------- values */

static void *arena_alloc(struct parser *p, uint64_t size, size_t align)
{
	void *r;

	if (size > SIZE_MAX / 2) {
		moe_err(p->e, MOE_ENOMEM, "%" PRIu64 " bytes of metadata do not fit in memory",
			size);
		return NULL;
	}
	r = moe_arena_alloc(&p->g->arena, size ? (size_t)size : 1, align);
	if (!r)
		moe_err(p->e, MOE_ENOMEM, "out of memory (%" PRIu64 " bytes)", size);
	return r;
}

/* A gguf string: u64 length, then the bytes; stored with a NUL after them. */
static int read_str(struct parser *p, moe_gguf_str *s)
{
	uint64_t len;
	char *c;

	/* Fast path for the common case, a short string wholly in the buffer
	 * (token arrays hold 100k+ of them). */
	if (buffered(p) >= 8) {
		len = le_load(rd_ptr(p), 8);
		if (len <= buffered(p) - 8) {
			c = arena_alloc(p, len + 1, 1);
			if (!c)
				return MOE_ENOMEM;
			memcpy(c, rd_ptr(p) + 8, len);
			c[len] = '\0';
			p->pos += 8 + len;
			s->len = len;
			s->ptr = c;
			return 0;
		}
	}
	MOE_TRY(rd_u64(p, &len));
	if (len > left(p))
		return moe_err(p->e, MOE_EFORMAT,
			       "string length %" PRIu64 " at offset %" PRIu64
			       " exceeds the %" PRIu64 " bytes left in the file",
			       len, p->pos - 8, left(p));
	c = arena_alloc(p, len + 1, 1);
	if (!c)
		return MOE_ENOMEM;
	MOE_TRY(rd_bytes(p, c, len));
	c[len] = '\0';
	s->len = len;
	s->ptr = c;
	return 0;
}

/* A key or tensor name: a string that is non-empty and has no NUL inside,
 * so it can be used as a C string. */
static int read_name(struct parser *p, const char **out, const char *what)
{
	moe_gguf_str s;
	struct shown sh;

	MOE_TRY(read_str(p, &s));
	if (s.len == 0)
		return moe_err(p->e, MOE_EFORMAT, "empty %s", what);
	if (memchr(s.ptr, '\0', s.len))
		return moe_err(p->e, MOE_EFORMAT, "%s '%s' contains a NUL byte", what,
			       show(&sh, s.ptr));
	*out = s.ptr;
	return 0;
}

static int read_scalar(struct parser *p, int type, moe_gguf_value *v)
{
	size_t n = type_sizes[type];
	uint64_t raw;
	union {
		uint32_t u;
		float f;
	} f32;

	MOE_TRY(rd_uint(p, n, &raw));
	switch (type) {
	case MOE_GGUF_T_INT8:
		v->i64 = (int8_t)raw;
		break;
	case MOE_GGUF_T_INT16:
		v->i64 = (int16_t)raw;
		break;
	case MOE_GGUF_T_INT32:
		v->i64 = (int32_t)raw;
		break;
	case MOE_GGUF_T_INT64:
		v->i64 = (int64_t)raw;
		break;
	case MOE_GGUF_T_FLOAT32:
		f32.u = (uint32_t)raw;
		v->f64 = f32.f;
		break;
	case MOE_GGUF_T_FLOAT64:
		memcpy(&v->f64, &raw, 8);
		break;
	case MOE_GGUF_T_BOOL:
		v->b = raw != 0;
		break;
	default: /* unsigned */
		v->u64 = raw;
		break;
	}
	return 0;
}

static int read_array(struct parser *p, moe_gguf_value *v, int depth);

/* The value of `type` (already validated) at the read position. */
static int read_value(struct parser *p, int type, moe_gguf_value *v, int depth)
{
	v->type = type;
	if (type == MOE_GGUF_T_STRING)
		return read_str(p, &v->str);
	if (type == MOE_GGUF_T_ARRAY)
		return read_array(p, v, depth + 1);
	return read_scalar(p, type, v);
}

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
static void swap_elems(uint8_t *d, uint64_t n, size_t size)
{
	for (uint64_t i = 0; i < n; i++, d += size)
		for (size_t a = 0, b = size - 1; a < b; a++, b--) {
			uint8_t t = d[a];
			d[a] = d[b];
			d[b] = t;
		}
}
#endif

/* Array header (element type, count) and elements; depth counts the arrays
 * this one is nested in, itself included. */
static int read_array(struct parser *p, moe_gguf_value *v, int depth)
{
	uint32_t et;
	uint64_t n, min;

	MOE_TRY(rd_u32(p, &et));
	MOE_TRY(rd_u64(p, &n));
	if (et >= MOE_GGUF_T_COUNT)
		return moe_err(p->e, MOE_EFORMAT, "unknown array element type %" PRIu32, et);
	if (et == MOE_GGUF_T_ARRAY && depth >= MOE_GGUF_MAX_ARRAY_DEPTH)
		return moe_err(p->e, MOE_EFORMAT, "arrays nested deeper than %d",
			       MOE_GGUF_MAX_ARRAY_DEPTH);
	min = et == MOE_GGUF_T_STRING ? 8 : et == MOE_GGUF_T_ARRAY ? MIN_ARRAY_BYTES
								   : type_sizes[et];
	if (n > left(p) / min)
		return moe_err(p->e, MOE_EFORMAT,
			       "array count %" PRIu64 " of %s does not fit in the %" PRIu64
			       " bytes left in the file",
			       n, type_names[et], left(p));
	v->arr.type = (int)et;
	v->arr.n = n;

	if (type_sizes[et] > 0) {
		uint8_t *d = arena_alloc(p, n * min, 8);
		if (!d)
			return MOE_ENOMEM;
		MOE_TRY(rd_bytes(p, d, n * min));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		if (min > 1)
			swap_elems(d, n, min);
#endif
		if (et == MOE_GGUF_T_BOOL)
			for (uint64_t i = 0; i < n; i++)
				d[i] = d[i] != 0;
		v->arr.data = d;
		return 0;
	}
	if (et == MOE_GGUF_T_STRING) {
		moe_gguf_str *s = arena_alloc(p, n * sizeof(*s), _Alignof(moe_gguf_str));
		if (!s)
			return MOE_ENOMEM;
		for (uint64_t i = 0; i < n; i++) {
			int rc = read_str(p, &s[i]);
			if (rc < 0)
				return depth == 1 ? moe_err_prefix(p->e, "element %" PRIu64, i) : rc;
		}
		v->arr.data = s;
		return 0;
	}
	/* Arrays of arrays: each element is itself typed, e.g. [[1, 2], ["a"]]. */
	moe_gguf_value *a = arena_alloc(p, n * sizeof(*a), _Alignof(moe_gguf_value));
	if (!a)
		return MOE_ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		int rc;
		a[i].type = MOE_GGUF_T_ARRAY;
		rc = read_array(p, &a[i], depth + 1);
		/* name the outermost element only: "element 3: ..." */
		if (rc < 0)
			return depth == 1 ? moe_err_prefix(p->e, "element %" PRIu64, i) : rc;
	}
	v->arr.data = a;
	return 0;
}

/* ----------------------------------------------------------- hash index */

typedef const char *(*name_fn)(const moe_gguf *g, uint64_t i);

static const char *kv_name(const moe_gguf *g, uint64_t i)
{
	return g->kv[i].key;
}

static const char *tensor_name(const moe_gguf *g, uint64_t i)
{
	return g->tensors[i].name;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3u;
	/* The table uses the low bits, which in FNV depend only on the low
	 * bits of each byte: mix the high bits down (a 64-bit finaliser). */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdu;
	h ^= h >> 33;
	return h;
}

/* Index of `name` in the table, or -1.  Slots hold index + 1; 0 is empty. */
static int64_t index_find(const moe_gguf *g, const uint32_t *tab, uint64_t cap, name_fn fn,
			  const char *name)
{
	if (!tab)
		return -1;
	for (uint64_t h = hash_str(name) & (cap - 1);; h = (h + 1) & (cap - 1)) {
		if (tab[h] == 0)
			return -1;
		if (strcmp(fn(g, tab[h] - 1), name) == 0)
			return tab[h] - 1;
	}
}

/* Build a table for n names; on a duplicate store both indexes in dup[]
 * and return 1. */
static int index_build(struct parser *p, uint64_t n, name_fn fn, uint32_t **tab_out,
		       uint64_t *cap_out, uint64_t dup[2])
{
	uint64_t cap = 8;
	uint32_t *tab;

	while (cap < 2 * n)
		cap *= 2;
	tab = arena_alloc(p, cap * sizeof(*tab), _Alignof(uint32_t));
	if (!tab)
		return MOE_ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		const char *name = fn(p->g, i);
		uint64_t h = hash_str(name) & (cap - 1);
		for (; tab[h]; h = (h + 1) & (cap - 1)) {
			if (strcmp(fn(p->g, tab[h] - 1), name) == 0) {
				dup[0] = tab[h] - 1;
				dup[1] = i;
				return 1;
			}
		}
		tab[h] = (uint32_t)(i + 1);
	}
	*tab_out = tab;
	*cap_out = cap;
	return 0;
}

/* ------------------------------------------------------------- sections */

static int check_alignment(struct parser *p, const moe_gguf_value *v)
{
	if (v->type != MOE_GGUF_T_UINT32)
		return moe_err(p->e, MOE_EFORMAT, "alignment has type %s, must be uint32",
			       type_names[v->type]);
	if (v->u64 == 0 || (v->u64 & (v->u64 - 1)) != 0)
		return moe_err(p->e, MOE_EFORMAT, "alignment %" PRIu64 " is not a power of two",
			       v->u64);
	p->g->alignment = (uint32_t)v->u64;
	return 0;
}

static int parse_kv(struct parser *p, moe_gguf_kv *kv)
{
	uint32_t type;

	MOE_TRY(read_name(p, &kv->key, "key"));
	MOE_TRY(rd_u32(p, &type));
	if (type >= MOE_GGUF_T_COUNT)
		return moe_err(p->e, MOE_EFORMAT, "unknown value type %" PRIu32, type);
	MOE_TRY(read_value(p, (int)type, &kv->v, 0));
	if (strcmp(kv->key, "general.alignment") == 0)
		MOE_TRY(check_alignment(p, &kv->v));
	return 0;
}

static int parse_kvs(struct parser *p)
{
	moe_gguf *g = p->g;
	struct shown sh;
	uint64_t dup[2];
	int rc;

	g->kv = arena_alloc(p, g->n_kv * sizeof(*g->kv), _Alignof(moe_gguf_kv));
	if (!g->kv)
		return MOE_ENOMEM;
	for (uint64_t i = 0; i < g->n_kv; i++) {
		rc = parse_kv(p, &g->kv[i]);
		if (rc < 0) {
			if (g->kv[i].key)
				return moe_err_prefix(p->e, "KV %" PRIu64 " '%s'", i,
						      show(&sh, g->kv[i].key));
			return moe_err_prefix(p->e, "KV %" PRIu64, i);
		}
	}
	rc = index_build(p, g->n_kv, kv_name, &g->kv_index, &g->kv_index_cap, dup);
	if (rc < 0)
		return rc;
	if (rc > 0)
		return moe_err(p->e, MOE_EFORMAT, "duplicate key '%s' (KV %" PRIu64 " and %" PRIu64 ")",
			       show(&sh, g->kv[dup[1]].key), dup[0], dup[1]);
	return 0;
}

/* One tensor info; t->offset is still relative to the data section. */
static int parse_tensor(struct parser *p, moe_gguf_tensor *t)
{
	const moe_type_traits *tr;
	uint32_t type;
	uint64_t n = 1;
	int rc;

	MOE_TRY(read_name(p, &t->name, "tensor name"));
	MOE_TRY(rd_u32(p, &t->n_dims));
	if (t->n_dims == 0 || t->n_dims > MOE_GGUF_MAX_DIMS)
		return moe_err(p->e, MOE_EFORMAT, "%" PRIu32 " dimensions (must be 1 to %d)",
			       t->n_dims, MOE_GGUF_MAX_DIMS);
	for (uint32_t d = 0; d < MOE_GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		MOE_TRY(rd_u64(p, &t->ne[d]));
		if (t->ne[d] == 0)
			return moe_err(p->e, MOE_EFORMAT, "dimension %" PRIu32 " is zero", d);
		/* ggml stores dimensions as int64 */
		if (t->ne[d] > INT64_MAX)
			return moe_err(p->e, MOE_EFORMAT,
				       "dimension %" PRIu32 " is negative (%" PRId64 ")", d,
				       (int64_t)t->ne[d]);
		if (!moe_mul_u64(n, t->ne[d], &n) || n > INT64_MAX)
			return moe_err(p->e, MOE_EFORMAT,
				       "element count overflows (dimension %" PRIu32 " = %" PRIu64
				       ")",
				       d, t->ne[d]);
	}
	t->n_elems = n;
	MOE_TRY(rd_u32(p, &type));
	tr = type < MOE_DTYPE_MAX ? moe_type_get((int)type) : NULL;
	if (!tr)
		return moe_err(p->e, MOE_EUNSUPPORTED, "unknown or unsupported ggml type %" PRIu32,
			       type);
	t->dtype = (int)type;
	if (t->ne[0] % tr->block_size != 0)
		return moe_err(p->e, MOE_EFORMAT,
			       "row length %" PRIu64 " is not a multiple of the %s block size %" PRIu32,
			       t->ne[0], tr->name, tr->block_size);
	rc = moe_type_nbytes(t->dtype, n, &t->size, p->e);
	if (rc == MOE_ERANGE)
		return moe_err(p->e, MOE_EFORMAT,
			       "byte size of %" PRIu64 " %s elements overflows", n, tr->name);
	if (rc < 0)
		return rc;
	MOE_TRY(rd_u64(p, &t->offset));
	if (t->offset % p->g->alignment != 0)
		return moe_err(p->e, MOE_EFORMAT,
			       "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
			       t->offset, p->g->alignment);
	return 0;
}

struct span {
	uint64_t off, end;
	uint64_t idx;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Make offsets absolute, check every tensor lies in the file and no two
 * overlap (sort by offset, compare neighbours). */
static int place_tensors(struct parser *p)
{
	moe_gguf *g = p->g;
	struct shown sh, sh2;
	struct span *sp;
	int rc = 0;

	for (uint64_t i = 0; i < g->n_tensors; i++) {
		moe_gguf_tensor *t = &g->tensors[i];
		uint64_t abs;
		if (!moe_add_u64(g->data_offset, t->offset, &abs) ||
		    !moe_range_ok(abs, t->size, p->size))
			return moe_err(p->e, MOE_EFORMAT,
				       "tensor '%s': %" PRIu64 " bytes at offset %" PRIu64
				       " of the data section (which starts at %" PRIu64
				       ") run past end of file (size %" PRIu64 ")",
				       show(&sh, t->name), t->size, t->offset, g->data_offset,
				       p->size);
		t->offset = abs;
	}
	if (g->n_tensors < 2)
		return 0;
	sp = malloc(g->n_tensors * sizeof(*sp));
	if (!sp)
		return moe_err(p->e, MOE_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		sp[i].off = g->tensors[i].offset;
		sp[i].end = g->tensors[i].offset + g->tensors[i].size;
		sp[i].idx = i;
	}
	qsort(sp, g->n_tensors, sizeof(*sp), span_cmp);
	for (uint64_t i = 1; i < g->n_tensors; i++) {
		if (sp[i - 1].end > sp[i].off) {
			rc = moe_err(p->e, MOE_EFORMAT,
				     "tensors '%s' and '%s' overlap ([%" PRIu64 ", %" PRIu64
				     ") and [%" PRIu64 ", %" PRIu64 "))",
				     show(&sh, g->tensors[sp[i - 1].idx].name),
				     show(&sh2, g->tensors[sp[i].idx].name),
				     sp[i - 1].off, sp[i - 1].end, sp[i].off, sp[i].end);
			break;
		}
	}
	free(sp);
	return rc;
}

static int parse_tensors(struct parser *p)
{
	moe_gguf *g = p->g;
	struct shown sh;
	uint64_t dup[2];
	int rc;

	if (g->n_tensors > left(p) / MIN_TENSOR_BYTES)
		return moe_err(p->e, MOE_EFORMAT,
			       "tensor count %" PRIu64 " does not fit in the %" PRIu64
			       " bytes left in the file",
			       g->n_tensors, left(p));
	g->tensors = arena_alloc(p, g->n_tensors * sizeof(*g->tensors),
				 _Alignof(moe_gguf_tensor));
	if (!g->tensors)
		return MOE_ENOMEM;
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		rc = parse_tensor(p, &g->tensors[i]);
		if (rc < 0) {
			if (g->tensors[i].name)
				return moe_err_prefix(p->e, "tensor %" PRIu64 " '%s'", i,
						      show(&sh, g->tensors[i].name));
			return moe_err_prefix(p->e, "tensor %" PRIu64, i);
		}
	}
	rc = index_build(p, g->n_tensors, tensor_name, &g->tensor_index, &g->tensor_index_cap,
			 dup);
	if (rc < 0)
		return rc;
	if (rc > 0)
		return moe_err(p->e, MOE_EFORMAT,
			       "duplicate tensor name '%s' (tensors %" PRIu64 " and %" PRIu64 ")",
			       show(&sh, g->tensors[dup[1]].name), dup[0], dup[1]);
	/* The data section starts at the next multiple of the alignment.  With
	 * no tensors the file may end before it (vocab-only files do). */
	if (!moe_align_u64(p->pos, g->alignment, &g->data_offset))
		return moe_err(p->e, MOE_EFORMAT, "data section offset overflows");
	return place_tensors(p);
}

static int parse_header(struct parser *p)
{
	moe_gguf *g = p->g;
	uint32_t magic, version, swapped;

	MOE_TRY(rd_u32(p, &magic));
	if (magic != GGUF_MAGIC) {
		char m[5] = { (char)magic, (char)(magic >> 8), (char)(magic >> 16),
			      (char)(magic >> 24), 0 };
		struct shown sh;
		for (int i = 0; i < 4; i++)
			if (m[i] == 0)
				m[i] = '.';
		return moe_err(p->e, MOE_EFORMAT, "not a GGUF file (bad magic '%s')",
			       show(&sh, m));
	}
	MOE_TRY(rd_u32(p, &version));
	swapped = __builtin_bswap32(version);
	if (version == 1)
		return moe_err(p->e, MOE_EUNSUPPORTED,
			       "GGUF version 1 is not supported (only 2 and 3)");
	if (version == 0 || (version > 3 && (swapped == 2 || swapped == 3)))
		return moe_err(p->e, MOE_EFORMAT, "bad GGUF version %" PRIu32 "%s", version,
			       version ? " (a big-endian file? only little-endian is supported)"
				       : "");
	if (version > 3)
		return moe_err(p->e, MOE_EUNSUPPORTED,
			       "GGUF version %" PRIu32 " is not supported (only 2 and 3)", version);
	g->version = version;
	MOE_TRY(rd_u64(p, &g->n_tensors));
	MOE_TRY(rd_u64(p, &g->n_kv));
	/* The index tables hold 32-bit slots; real files have far fewer. */
	if (g->n_kv > left(p) / MIN_KV_BYTES || g->n_kv >= UINT32_MAX)
		return moe_err(p->e, MOE_EFORMAT,
			       "KV count %" PRIu64 " does not fit in the %" PRIu64
			       " bytes left in the file",
			       g->n_kv, left(p));
	if (g->n_tensors > left(p) / MIN_TENSOR_BYTES || g->n_tensors >= UINT32_MAX)
		return moe_err(p->e, MOE_EFORMAT,
			       "tensor count %" PRIu64 " does not fit in the %" PRIu64
			       " bytes left in the file",
			       g->n_tensors, left(p));
	return 0;
}

/* ------------------------------------------------------------ public API */

int moe_gguf_open(moe_gguf **out, moe_src *src, moe_error *e)
{
	moe_error tmp;
	struct parser p = { 0 };
	moe_gguf *g;
	const char *name = src->name ? src->name : "(gguf)";
	int rc;

	*out = NULL;
	if (!e)
		e = &tmp;
	g = calloc(1, sizeof(*g));
	if (!g)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", name);
	/* Metadata is at most a few times the file size: small files get small
	 * arena blocks and a small read buffer (this matters to the fuzzer). */
	p.cap = src->size < READ_CHUNK ? (size_t)src->size : READ_CHUNK;
	if (p.cap < 64)
		p.cap = 64;
	moe_arena_init(&g->arena, p.cap < 4096 ? 4096 : p.cap);
	g->src = src;
	g->alignment = MOE_GGUF_DEFAULT_ALIGNMENT;
	p.g = g;
	p.src = src;
	p.size = src->size;
	p.e = e;
	p.buf = malloc(p.cap);
	g->name = moe_arena_strndup(&g->arena, name, strlen(name));
	if (!p.buf || !g->name) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto fail;
	}
	rc = parse_header(&p);
	if (rc == 0)
		rc = parse_kvs(&p);
	if (rc == 0)
		rc = parse_tensors(&p);
	if (rc < 0)
		goto fail;
	free(p.buf);
	*out = g;
	return 0;
fail:
	free(p.buf);
	moe_gguf_close(g);
	if (p.io_failed)
		return moe_err(e, p.io_err.code, "%s (reading GGUF metadata)", p.io_err.msg);
	return moe_err_prefix(e, "%s", name);
}

void moe_gguf_close(moe_gguf *g)
{
	if (!g)
		return;
	moe_arena_free(&g->arena);
	free(g);
}

const moe_gguf_kv *moe_gguf_find(const moe_gguf *g, const char *key)
{
	int64_t i = index_find(g, g->kv_index, g->kv_index_cap, kv_name, key);
	return i < 0 ? NULL : &g->kv[i];
}

const moe_gguf_tensor *moe_gguf_find_tensor(const moe_gguf *g, const char *name)
{
	int64_t i = index_find(g, g->tensor_index, g->tensor_index_cap, tensor_name, name);
	return i < 0 ? NULL : &g->tensors[i];
}

static int get_kv(const moe_gguf *g, const char *key, const moe_gguf_kv **kv, moe_error *e)
{
	*kv = moe_gguf_find(g, key);
	if (!*kv)
		return moe_err(e, MOE_ENOTFOUND, "%s: key '%s' not found", g->name, key);
	return 0;
}

static int bad_type(const moe_gguf *g, const moe_gguf_kv *kv, const char *want, moe_error *e)
{
	return moe_err(e, MOE_EFORMAT, "%s: key '%s' has type %s, expected %s", g->name,
		       kv->key, moe_gguf_type_name(kv->v.type), want);
}

int moe_gguf_get_u64(const moe_gguf *g, const char *key, uint64_t *out, moe_error *e)
{
	const moe_gguf_kv *kv;

	MOE_TRY(get_kv(g, key, &kv, e));
	if (is_unsigned(kv->v.type)) {
		*out = kv->v.u64;
		return 0;
	}
	if (!is_signed(kv->v.type))
		return bad_type(g, kv, "an integer", e);
	if (kv->v.i64 < 0)
		return moe_err(e, MOE_EFORMAT, "%s: key '%s' is negative (%" PRId64 ")", g->name,
			       key, kv->v.i64);
	*out = (uint64_t)kv->v.i64;
	return 0;
}

int moe_gguf_get_i64(const moe_gguf *g, const char *key, int64_t *out, moe_error *e)
{
	const moe_gguf_kv *kv;

	MOE_TRY(get_kv(g, key, &kv, e));
	if (is_signed(kv->v.type)) {
		*out = kv->v.i64;
		return 0;
	}
	if (!is_unsigned(kv->v.type))
		return bad_type(g, kv, "an integer", e);
	if (kv->v.u64 > INT64_MAX)
		return moe_err(e, MOE_EFORMAT, "%s: key '%s' is too large (%" PRIu64 ")", g->name,
			       key, kv->v.u64);
	*out = (int64_t)kv->v.u64;
	return 0;
}

int moe_gguf_get_f64(const moe_gguf *g, const char *key, double *out, moe_error *e)
{
	const moe_gguf_kv *kv;

	MOE_TRY(get_kv(g, key, &kv, e));
	if (kv->v.type == MOE_GGUF_T_FLOAT32 || kv->v.type == MOE_GGUF_T_FLOAT64)
		*out = kv->v.f64;
	else if (is_unsigned(kv->v.type))
		*out = (double)kv->v.u64;
	else if (is_signed(kv->v.type))
		*out = (double)kv->v.i64;
	else
		return bad_type(g, kv, "a number", e);
	return 0;
}

int moe_gguf_get_bool(const moe_gguf *g, const char *key, bool *out, moe_error *e)
{
	const moe_gguf_kv *kv;

	MOE_TRY(get_kv(g, key, &kv, e));
	if (kv->v.type != MOE_GGUF_T_BOOL)
		return bad_type(g, kv, "bool", e);
	*out = kv->v.b;
	return 0;
}

int moe_gguf_get_str(const moe_gguf *g, const char *key, const char **out, moe_error *e)
{
	const moe_gguf_kv *kv;

	MOE_TRY(get_kv(g, key, &kv, e));
	if (kv->v.type != MOE_GGUF_T_STRING)
		return bad_type(g, kv, "string", e);
	*out = kv->v.str.ptr;
	return 0;
}

int moe_gguf_get_arr(const moe_gguf *g, const char *key, int *elem_type, uint64_t *n,
		     const void **data, moe_error *e)
{
	const moe_gguf_kv *kv;

	MOE_TRY(get_kv(g, key, &kv, e));
	if (kv->v.type != MOE_GGUF_T_ARRAY)
		return bad_type(g, kv, "array", e);
	*elem_type = kv->v.arr.type;
	*n = kv->v.arr.n;
	*data = kv->v.arr.data;
	return 0;
}

int moe_gguf_read_tensor(const moe_gguf *g, const moe_gguf_tensor *t, void *buf,
			 moe_error *e)
{
	if (t->size > SIZE_MAX)
		return moe_err(e, MOE_ERANGE, "%s: tensor '%s': %" PRIu64 " bytes do not fit in memory",
			       g->name, t->name, t->size);
	return moe_src_read(g->src, t->offset, buf, (size_t)t->size, e);
}
