/* t-gguf.c — the GGUF reader: every value type, v2/v3, tensor infos and data
 * offsets, the getters, a catalogue of malformed files (each rejected with a
 * specific message), and the real vocabulary files of ../shared/vocab.
 *
 * Files are assembled byte by byte by a small writer here, so the expected
 * values come from the test's own construction, not from the reader.  Facts
 * about the real vocab files were read with an independent Python script.
 * With MOE_GGUF_WRITE_SEEDS=dir the test also writes the fuzzer's seed corpus.
 */
#include "gguf.h"
#include "quant.h"
#include "tap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ the writer */

struct buf {
	uint8_t *d;
	size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->d = realloc(b->d, b->cap);
		if (!b->d)
			abort();
	}
	memcpy(b->d + b->n, p, n);
	b->n += n;
}

static void le(struct buf *b, uint64_t v, int n)
{
	for (int i = 0; i < n; i++) {
		uint8_t c = (uint8_t)(v >> (8 * i));
		put(b, &c, 1);
	}
}

static void u8(struct buf *b, uint8_t v) { le(b, v, 1); }
static void u16(struct buf *b, uint16_t v) { le(b, v, 2); }
static void u32(struct buf *b, uint32_t v) { le(b, v, 4); }
static void u64(struct buf *b, uint64_t v) { le(b, v, 8); }

static void f32(struct buf *b, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u32(b, u);
}

static void f64(struct buf *b, double f)
{
	uint64_t u;
	memcpy(&u, &f, 8);
	u64(b, u);
}

/* gguf string with explicit length (may contain NUL) */
static void strn(struct buf *b, const char *s, size_t n)
{
	u64(b, n);
	put(b, s, n);
}

static void str(struct buf *b, const char *s)
{
	strn(b, s, strlen(s));
}

static void header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	put(b, "GGUF", 4);
	u32(b, version);
	u64(b, n_tensors);
	u64(b, n_kv);
}

/* key + type; the caller writes the value */
static void key(struct buf *b, const char *k, uint32_t type)
{
	str(b, k);
	u32(b, type);
}

static void kv_u32(struct buf *b, const char *k, uint32_t v)
{
	key(b, k, MOE_GGUF_T_UINT32);
	u32(b, v);
}

static void kv_str(struct buf *b, const char *k, const char *v)
{
	key(b, k, MOE_GGUF_T_STRING);
	str(b, v);
}

/* tensor info with up to 4 dims */
static void tinfo(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
		  uint32_t type, uint64_t off)
{
	str(b, name);
	u32(b, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		u64(b, ne[i]);
	u32(b, type);
	u64(b, off);
}

static void pad_to(struct buf *b, size_t align)
{
	while (b->n % align)
		u8(b, 0);
}

static void zeros(struct buf *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		u8(b, 0);
}

static void buf_free(struct buf *b)
{
	free(b->d);
	*b = (struct buf){ 0 };
}

/* Write b into $MOE_GGUF_WRITE_SEEDS/name (the fuzzer's seed corpus). */
static void seed(const struct buf *b, const char *name)
{
	const char *dir = getenv("MOE_GGUF_WRITE_SEEDS");
	char path[1024];
	FILE *f;

	if (!dir || b->n > 4096)
		return;
	snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
	f = fopen(path, "wb");
	if (f) {
		fwrite(b->d, 1, b->n, f);
		fclose(f);
	}
}

/* ------------------------------------------------------------- helpers */

static int open_buf(const struct buf *b, moe_src **src, moe_gguf **g, moe_error *e)
{
	int rc = moe_src_open_mem(src, "mem.gguf", b->d, b->n, e);
	if (rc < 0)
		return rc;
	rc = moe_gguf_open(g, *src, e);
	if (rc < 0) {
		moe_src_close(*src);
		*src = NULL;
	}
	return rc;
}

static void close_buf(moe_src *src, moe_gguf *g)
{
	moe_gguf_close(g);
	moe_src_close(src);
}

/* Expect the file to be rejected with `code` and a message containing `sub`
 * (and naming the source). */
static void expect_fail(struct buf *b, int code, const char *sub, const char *what)
{
	moe_src *src = NULL;
	moe_gguf *g = (moe_gguf *)1;
	moe_error e = { 0 };
	int rc = open_buf(b, &src, &g, &e);

	ok(rc == code && g == NULL && strstr(e.msg, sub) && strncmp(e.msg, "mem.gguf: ", 10) == 0,
	   "rejects %s", what);
	tap_diag("%s", e.msg);
	if (rc != code || !strstr(e.msg, sub))
		printf("#   rc %d (want %d), msg \"%s\", want substring \"%s\"\n", rc, code, e.msg,
		       sub);
	if (rc == 0)
		close_buf(src, g);
	buf_free(b);
}

/* A memory source that counts reads and fails read number fail_at (0 = never),
 * to check the reader's read pattern and its I/O error paths. */
struct count_src {
	moe_src src;
	const uint8_t *data;
	int reads, fail_at;
};

static int count_read(moe_src *s, uint64_t off, void *buf, size_t n, moe_error *e)
{
	struct count_src *c = (struct count_src *)s;
	if (++c->reads == c->fail_at)
		return moe_err(e, MOE_EIO, "%s: injected read error", s->name);
	if (!moe_range_ok(off, n, s->size))
		return moe_err(e, MOE_EINTERNAL, "%s: read past end", s->name);
	memcpy(buf, c->data + off, n);
	return 0;
}

static void count_src_init(struct count_src *c, const struct buf *b, int fail_at)
{
	*c = (struct count_src){ .data = b->d, .fail_at = fail_at };
	c->src.name = "count.gguf";
	c->src.size = b->n;
	c->src.read_at = count_read;
}

/* A read error at any point comes back as the source's error, prefixed with
 * the file name (the sanitizer build checks that nothing leaks). */
static void check_read_errors(const struct buf *b, const char *what)
{
	struct count_src cs;
	moe_gguf *g;
	moe_error e = { 0 };
	int n_reads, bad = 0;

	count_src_init(&cs, b, 0);
	if (moe_gguf_open(&g, &cs.src, &e) == 0)
		moe_gguf_close(g);
	n_reads = cs.reads;
	for (int k = 1; k <= n_reads; k++) {
		moe_gguf *g2 = (moe_gguf *)1;
		moe_error e2 = { 0 };
		count_src_init(&cs, b, k);
		if (moe_gguf_open(&g2, &cs.src, &e2) != MOE_EIO || g2 ||
		    !strstr(e2.msg, "count.gguf: injected read error (reading GGUF metadata)"))
			bad++;
	}
	ok(n_reads >= 1 && bad == 0, "%s: read errors at each of %d reads reported", what,
	   n_reads);
}

/* ---------------------------------------------------- the full example */

/* Offsets the writer records while building the main example. */
struct layout {
	size_t end_of_infos, data_offset;
};

/* Every KV type, arrays of numbers/strings/bools, nested arrays, an explicit
 * alignment of 64 and three tensors. */
static void build_full(struct buf *b, uint32_t version, struct layout *lay)
{
	uint64_t ne_a[] = { 3, 2 }, ne_b[] = { 4 }, ne_q[] = { 32, 2 };

	header(b, version, 3, 20);
	key(b, "t.u8", MOE_GGUF_T_UINT8), u8(b, 200);
	key(b, "t.i8", MOE_GGUF_T_INT8), u8(b, (uint8_t)-5);
	key(b, "t.u16", MOE_GGUF_T_UINT16), u16(b, 65535);
	key(b, "t.i16", MOE_GGUF_T_INT16), u16(b, (uint16_t)-30000);
	kv_u32(b, "t.u32", 4000000000u);
	key(b, "t.i32", MOE_GGUF_T_INT32), u32(b, (uint32_t)-2000000000);
	key(b, "t.f32", MOE_GGUF_T_FLOAT32), f32(b, 1.5f);
	key(b, "t.bool", MOE_GGUF_T_BOOL), u8(b, 1);
	kv_str(b, "t.str", "hello");
	key(b, "t.u64", MOE_GGUF_T_UINT64), u64(b, (1ull << 63) + 5);
	key(b, "t.i64", MOE_GGUF_T_INT64), u64(b, (uint64_t)-(1ll << 40));
	key(b, "t.f64", MOE_GGUF_T_FLOAT64), f64(b, 0.1);
	key(b, "t.arr_u32", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_UINT32), u64(b, 3);
	u32(b, 1), u32(b, 2), u32(b, 0xdeadbeef);
	/* strings may hold any bytes, NUL and invalid UTF-8 included */
	key(b, "t.arr_str", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_STRING), u64(b, 3);
	str(b, "a"), str(b, ""), strn(b, "\xff\0z", 3);
	key(b, "t.arr_f32", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_FLOAT32), u64(b, 2);
	f32(b, 0.5f), f32(b, -2.0f);
	key(b, "t.arr_bool", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_BOOL), u64(b, 3);
	u8(b, 1), u8(b, 0), u8(b, 7);
	/* [[1, 2] as uint8, ["x"]] */
	key(b, "t.nested", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_ARRAY), u64(b, 2);
	u32(b, MOE_GGUF_T_UINT8), u64(b, 2), u8(b, 1), u8(b, 2);
	u32(b, MOE_GGUF_T_STRING), u64(b, 1), str(b, "x");
	key(b, "t.empty", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_INT64), u64(b, 0);
	key(b, "t.arr_i16", MOE_GGUF_T_ARRAY), u32(b, MOE_GGUF_T_INT16), u64(b, 2);
	u16(b, (uint16_t)-2), u16(b, 300);
	kv_u32(b, "general.alignment", 64);
	/* a: f32 3x2 = 24 bytes at 0; b: f16 4 = 8 bytes at 64; q: q8_0 2 rows
	 * of one 34-byte block = 68 bytes at 128 */
	tinfo(b, "a", 2, ne_a, MOE_F32, 0);
	tinfo(b, "b", 1, ne_b, MOE_F16, 64);
	tinfo(b, "q", 2, ne_q, MOE_Q8_0, 128);
	lay->end_of_infos = b->n;
	pad_to(b, 64);
	lay->data_offset = b->n;
	for (int i = 0; i < 196; i++)
		u8(b, (uint8_t)i);
}

static void test_full(uint32_t version)
{
	struct buf b = { 0 };
	struct layout lay;
	moe_src *src;
	moe_gguf *g;
	moe_error e = { 0 };
	const moe_gguf_kv *kv;
	const moe_gguf_tensor *t;
	uint64_t u, n;
	int64_t i;
	double d;
	bool bo;
	const char *s;
	const void *data;
	int et, rc;

	build_full(&b, version, &lay);
	if (version == 3)
		seed(&b, "valid-full");
	rc = open_buf(&b, &src, &g, &e);
	if (!ok(rc == 0, "v%u: full example opens", version)) {
		tap_diag("%s", e.msg);
		buf_free(&b);
		return;
	}
	is_int(g->version, version, "version");
	is_int(g->n_kv, 20, "n_kv");
	is_int(g->n_tensors, 3, "n_tensors");
	is_int(g->alignment, 64, "alignment from general.alignment");
	is_int(g->data_offset, lay.data_offset, "data offset rounded up to 64");
	is_str(g->kv[0].key, "t.u8", "KVs in file order");

	kv = moe_gguf_find(g, "t.u8");
	ok(kv && kv->v.type == MOE_GGUF_T_UINT8 && kv->v.u64 == 200, "uint8");
	kv = moe_gguf_find(g, "t.i8");
	ok(kv && kv->v.type == MOE_GGUF_T_INT8 && kv->v.i64 == -5, "int8");
	kv = moe_gguf_find(g, "t.u16");
	ok(kv && kv->v.type == MOE_GGUF_T_UINT16 && kv->v.u64 == 65535, "uint16");
	kv = moe_gguf_find(g, "t.i16");
	ok(kv && kv->v.type == MOE_GGUF_T_INT16 && kv->v.i64 == -30000, "int16");
	kv = moe_gguf_find(g, "t.u32");
	ok(kv && kv->v.type == MOE_GGUF_T_UINT32 && kv->v.u64 == 4000000000u, "uint32");
	kv = moe_gguf_find(g, "t.i32");
	ok(kv && kv->v.type == MOE_GGUF_T_INT32 && kv->v.i64 == -2000000000, "int32");
	kv = moe_gguf_find(g, "t.f32");
	ok(kv && kv->v.type == MOE_GGUF_T_FLOAT32 && kv->v.f64 == 1.5, "float32");
	kv = moe_gguf_find(g, "t.bool");
	ok(kv && kv->v.type == MOE_GGUF_T_BOOL && kv->v.b, "bool");
	kv = moe_gguf_find(g, "t.str");
	ok(kv && kv->v.type == MOE_GGUF_T_STRING && kv->v.str.len == 5 &&
		   strcmp(kv->v.str.ptr, "hello") == 0,
	   "string");
	kv = moe_gguf_find(g, "t.u64");
	ok(kv && kv->v.type == MOE_GGUF_T_UINT64 && kv->v.u64 == (1ull << 63) + 5, "uint64");
	kv = moe_gguf_find(g, "t.i64");
	ok(kv && kv->v.type == MOE_GGUF_T_INT64 && kv->v.i64 == -(1ll << 40), "int64");
	kv = moe_gguf_find(g, "t.f64");
	ok(kv && kv->v.type == MOE_GGUF_T_FLOAT64 && kv->v.f64 == 0.1, "float64");

	kv = moe_gguf_find(g, "t.arr_u32");
	ok(kv && kv->v.type == MOE_GGUF_T_ARRAY && kv->v.arr.type == MOE_GGUF_T_UINT32 &&
		   kv->v.arr.n == 3 && ((const uint32_t *)kv->v.arr.data)[0] == 1 &&
		   ((const uint32_t *)kv->v.arr.data)[2] == 0xdeadbeef,
	   "array of uint32");
	kv = moe_gguf_find(g, "t.arr_str");
	if (ok(kv && kv->v.arr.type == MOE_GGUF_T_STRING && kv->v.arr.n == 3, "array of string")) {
		const moe_gguf_str *ss = kv->v.arr.data;
		ok(ss[0].len == 1 && strcmp(ss[0].ptr, "a") == 0 && ss[1].len == 0 &&
			   ss[1].ptr[0] == 0 && ss[2].len == 3 &&
			   memcmp(ss[2].ptr, "\xff\0z", 4) == 0,
		   "string elements, NUL and non-UTF-8 bytes kept, NUL-terminated");
	}
	kv = moe_gguf_find(g, "t.arr_f32");
	ok(kv && kv->v.arr.type == MOE_GGUF_T_FLOAT32 && kv->v.arr.n == 2 &&
		   ((const float *)kv->v.arr.data)[0] == 0.5f &&
		   ((const float *)kv->v.arr.data)[1] == -2.0f,
	   "array of float32");
	kv = moe_gguf_find(g, "t.arr_bool");
	ok(kv && kv->v.arr.type == MOE_GGUF_T_BOOL && kv->v.arr.n == 3 &&
		   memcmp(kv->v.arr.data, "\1\0\1", 3) == 0,
	   "array of bool, normalised to 0/1");
	kv = moe_gguf_find(g, "t.arr_i16");
	ok(kv && kv->v.arr.type == MOE_GGUF_T_INT16 && kv->v.arr.n == 2 &&
		   ((const int16_t *)kv->v.arr.data)[0] == -2 &&
		   ((const int16_t *)kv->v.arr.data)[1] == 300,
	   "array of int16");
	kv = moe_gguf_find(g, "t.nested");
	if (ok(kv && kv->v.arr.type == MOE_GGUF_T_ARRAY && kv->v.arr.n == 2, "nested array")) {
		const moe_gguf_value *a = kv->v.arr.data;
		const moe_gguf_str *x = a[1].arr.data;
		ok(a[0].type == MOE_GGUF_T_ARRAY && a[0].arr.type == MOE_GGUF_T_UINT8 &&
			   a[0].arr.n == 2 && memcmp(a[0].arr.data, "\1\2", 2) == 0,
		   "nested [1, 2]");
		ok(a[1].arr.type == MOE_GGUF_T_STRING && a[1].arr.n == 1 && x[0].len == 1 &&
			   strcmp(x[0].ptr, "x") == 0,
		   "nested [\"x\"]");
	}
	kv = moe_gguf_find(g, "t.empty");
	ok(kv && kv->v.arr.type == MOE_GGUF_T_INT64 && kv->v.arr.n == 0 && kv->v.arr.data,
	   "empty array (data not NULL)");
	ok(moe_gguf_find(g, "t.nope") == NULL, "absent key");

	/* getters */
	ok(moe_gguf_get_u64(g, "t.u8", &u, &e) == 0 && u == 200, "get_u64 of uint8");
	ok(moe_gguf_get_u64(g, "t.u64", &u, &e) == 0 && u == (1ull << 63) + 5, "get_u64 of uint64");
	ok(moe_gguf_get_u64(g, "t.i8", &u, &e) == MOE_EFORMAT && strstr(e.msg, "negative"),
	   "get_u64 of negative int8 fails");
	ok(moe_gguf_get_u64(g, "t.str", &u, &e) == MOE_EFORMAT &&
		   strstr(e.msg, "mem.gguf: key 't.str' has type string"),
	   "get_u64 of string fails");
	ok(moe_gguf_get_u64(g, "t.missing", &u, &e) == MOE_ENOTFOUND &&
		   strstr(e.msg, "'t.missing' not found"),
	   "get_u64 of absent key: ENOTFOUND");
	ok(moe_gguf_get_i64(g, "t.i16", &i, &e) == 0 && i == -30000, "get_i64 of int16");
	ok(moe_gguf_get_i64(g, "t.u32", &i, &e) == 0 && i == 4000000000ll, "get_i64 of uint32");
	ok(moe_gguf_get_i64(g, "t.u64", &i, &e) == MOE_EFORMAT, "get_i64 of uint64 > INT64_MAX");
	ok(moe_gguf_get_i64(g, "t.f32", &i, &e) == MOE_EFORMAT, "get_i64 of float fails");
	ok(moe_gguf_get_f64(g, "t.f32", &d, &e) == 0 && d == 1.5, "get_f64 of float32");
	ok(moe_gguf_get_f64(g, "t.f64", &d, &e) == 0 && d == 0.1, "get_f64 of float64");
	ok(moe_gguf_get_f64(g, "t.i32", &d, &e) == 0 && d == -2e9, "get_f64 of int32");
	ok(moe_gguf_get_f64(g, "t.bool", &d, &e) == MOE_EFORMAT, "get_f64 of bool fails");
	ok(moe_gguf_get_bool(g, "t.bool", &bo, &e) == 0 && bo, "get_bool");
	ok(moe_gguf_get_bool(g, "t.u8", &bo, &e) == MOE_EFORMAT, "get_bool of uint8 fails");
	ok(moe_gguf_get_str(g, "t.str", &s, &e) == 0 && strcmp(s, "hello") == 0, "get_str");
	ok(moe_gguf_get_str(g, "t.arr_str", &s, &e) == MOE_EFORMAT &&
		   strstr(e.msg, "has type array, expected string"),
	   "get_str of array fails");
	ok(moe_gguf_get_arr(g, "t.arr_u32", &et, &n, &data, &e) == 0 &&
		   et == MOE_GGUF_T_UINT32 && n == 3 && ((const uint32_t *)data)[1] == 2,
	   "get_arr");
	ok(moe_gguf_get_arr(g, "t.u32", &et, &n, &data, &e) == MOE_EFORMAT, "get_arr of uint32");
	ok(moe_gguf_get_arr(g, "nope", &et, &n, &data, &e) == MOE_ENOTFOUND, "get_arr absent");

	/* tensors */
	t = moe_gguf_find_tensor(g, "a");
	ok(t && t->dtype == MOE_F32 && t->n_dims == 2 && t->ne[0] == 3 && t->ne[1] == 2 &&
		   t->ne[2] == 1 && t->ne[3] == 1 && t->n_elems == 6,
	   "tensor a: f32 [3, 2], unused dims 1");
	ok(t && t->offset == lay.data_offset && t->size == 24, "tensor a: offset and size");
	t = moe_gguf_find_tensor(g, "b");
	ok(t && t->dtype == MOE_F16 && t->n_dims == 1 && t->offset == lay.data_offset + 64 &&
		   t->size == 8,
	   "tensor b: f16 [4] at +64, 8 bytes");
	t = moe_gguf_find_tensor(g, "q");
	ok(t && t->dtype == MOE_Q8_0 && t->offset == lay.data_offset + 128 && t->size == 68,
	   "tensor q: q8_0 [32, 2] at +128, 2 x 34 bytes");
	if (t) {
		uint8_t qb[68];
		ok(moe_gguf_read_tensor(g, t, qb, &e) == 0 && qb[0] == 128 && qb[67] == 195,
		   "read_tensor reads the data bytes");
	}
	ok(g->tensors[1].name && strcmp(g->tensors[1].name, "b") == 0, "tensors in file order");
	ok(moe_gguf_find_tensor(g, "c") == NULL, "absent tensor");
	close_buf(src, g);

	/* Every proper prefix must fail cleanly: inside the header and infos
	 * as truncated, after them as tensor data past the end of the file. */
	if (version == 3) {
		int bad = 0;
		for (size_t len = 0; len < b.n; len++) {
			moe_src *s2;
			moe_gguf *g2 = (moe_gguf *)1;
			/* short prefixes may first fail a count or length check */
			bool early = len < lay.end_of_infos;
			moe_error e2 = { 0 };
			moe_src_open_mem(&s2, "mem.gguf", b.d, len, &e2);
			rc = moe_gguf_open(&g2, s2, &e2);
			bool msg_ok = early ? strstr(e2.msg, "truncated") ||
						      strstr(e2.msg, "does not fit") ||
						      strstr(e2.msg, "exceeds the")
					    : strstr(e2.msg, "past end of file") != NULL;
			if (rc != MOE_EFORMAT || g2 || !msg_ok ||
			    strncmp(e2.msg, "mem.gguf: ", 10) != 0) {
				if (!bad++)
					tap_diag("prefix %zu: rc %d, \"%s\"", len, rc, e2.msg);
			}
			if (rc == 0)
				moe_gguf_close(g2);
			moe_src_close(s2);
		}
		ok(bad == 0, "all %zu proper prefixes rejected (truncated / past end)", b.n);
	}
	if (version == 3)
		check_read_errors(&b, "full example");
	buf_free(&b);
}

/* A minimal valid file: no KVs, one f32 tensor of 4 elements. */
static void test_minimal(void)
{
	struct buf b = { 0 };
	uint64_t ne[] = { 4 };
	moe_src *src;
	moe_gguf *g;
	moe_error e = { 0 };

	header(&b, 2, 1, 0);
	tinfo(&b, "w", 1, ne, MOE_F32, 0);
	pad_to(&b, 32);
	f32(&b, 1), f32(&b, 2), f32(&b, 3), f32(&b, 4);
	seed(&b, "valid-minimal");
	if (ok(open_buf(&b, &src, &g, &e) == 0, "minimal v2 file opens")) {
		ok(g->alignment == 32 && g->data_offset == 64 && g->tensors[0].offset == 64,
		   "default alignment 32: data at 64");
		close_buf(src, g);
	}
	buf_free(&b);

	/* No tensors, the file ends right after the metadata (like vocab files):
	 * the data section would start past the end, which is fine. */
	header(&b, 3, 0, 1);
	kv_str(&b, "general.architecture", "llama");
	seed(&b, "valid-vocab-only");
	if (ok(open_buf(&b, &src, &g, &e) == 0, "metadata-only file opens")) {
		const char *s;
		ok(moe_gguf_get_str(g, "general.architecture", &s, &e) == 0 &&
			   strcmp(s, "llama") == 0,
		   "general.architecture");
		close_buf(src, g);
	}
	buf_free(&b);
}

/* Big metadata: values crossing the 1 MiB read chunks, a 3 MiB string (read
 * around the buffer) and a 200k-entry string array. */
static void test_big(void)
{
	struct buf b = { 0 };
	moe_src *src;
	moe_gguf *g;
	moe_error e = { 0 };
	char tok[32];
	size_t big = 3u << 20;
	char *s = malloc(big);
	const int ntok = 200000;

	for (size_t i = 0; i < big; i++)
		s[i] = (char)('a' + i % 26);
	header(&b, 3, 0, 3);
	key(&b, "pad", MOE_GGUF_T_STRING), strn(&b, s, 1000003);
	key(&b, "tokens", MOE_GGUF_T_ARRAY), u32(&b, MOE_GGUF_T_STRING), u64(&b, ntok);
	for (int i = 0; i < ntok; i++) {
		snprintf(tok, sizeof tok, "tok%d", i);
		str(&b, tok);
	}
	key(&b, "big", MOE_GGUF_T_STRING), strn(&b, s, big);
	{
		struct count_src cs;
		count_src_init(&cs, &b, 0);
		if (ok(moe_gguf_open(&g, &cs.src, &e) == 0, "big metadata opens (counting reads)")) {
			/* 1 MiB chunks, plus one direct read for the 3 MiB string */
			ok(cs.reads <= (int)(b.n >> 20) + 3, "%d source reads for %zu bytes", cs.reads,
			   b.n);
			moe_gguf_close(g);
		}
		check_read_errors(&b, "big metadata");
	}
	if (ok(open_buf(&b, &src, &g, &e) == 0, "big metadata opens")) {
		const moe_gguf_kv *kv = moe_gguf_find(g, "tokens");
		const moe_gguf_str *ts = kv ? kv->v.arr.data : NULL;
		bool good = kv && kv->v.arr.n == (uint64_t)ntok;
		for (int i = 0; good && i < ntok; i++) {
			snprintf(tok, sizeof tok, "tok%d", i);
			good = ts[i].len == strlen(tok) && strcmp(ts[i].ptr, tok) == 0;
		}
		ok(good, "200000 tokens across chunk boundaries");
		kv = moe_gguf_find(g, "big");
		ok(kv && kv->v.str.len == big && memcmp(kv->v.str.ptr, s, big) == 0 &&
			   kv->v.str.ptr[big] == 0,
		   "3 MiB string");
		ok(g->arena.used_total < 2 * b.n, "metadata memory (%zu) < 2 x file size (%zu)",
		   g->arena.used_total, b.n);
		close_buf(src, g);
	} else {
		tap_diag("%s", e.msg);
	}
	buf_free(&b);
	free(s);
}

/* ----------------------------------------------------------- malformed */

/* One tensor with the given dims/type/offset after no KVs, plus 64 data bytes. */
static void one_tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
		       uint32_t type, uint64_t off)
{
	header(b, 3, 1, 0);
	tinfo(b, name, n_dims, ne, type, off);
	pad_to(b, 32);
	zeros(b, 64);
}

static void test_malformed(void)
{
	struct buf b = { 0 };
	uint64_t ne4[] = { 4 }, ne16[] = { 16 }, ne5[] = { 2, 2, 2, 2, 2 };

	put(&b, "GGUX", 4), u32(&b, 3), u64(&b, 0), u64(&b, 0);
	seed(&b, "bad-magic");
	expect_fail(&b, MOE_EFORMAT, "not a GGUF file (bad magic 'GGUX')", "bad magic");

	header(&b, 0, 0, 0);
	expect_fail(&b, MOE_EFORMAT, "bad GGUF version 0", "version 0");
	header(&b, 1, 0, 0);
	expect_fail(&b, MOE_EUNSUPPORTED, "GGUF version 1 is not supported", "version 1");
	header(&b, 99, 0, 0);
	seed(&b, "bad-version");
	expect_fail(&b, MOE_EUNSUPPORTED, "GGUF version 99 is not supported", "version 99");
	header(&b, 3u << 24, 0, 0);
	expect_fail(&b, MOE_EFORMAT, "big-endian", "big-endian file");

	header(&b, 3, UINT64_MAX, 0);
	seed(&b, "bad-tensor-count");
	expect_fail(&b, MOE_EFORMAT, "tensor count 18446744073709551615 does not fit",
		    "tensor count 2^64-1");
	header(&b, 3, 0, UINT64_MAX);
	expect_fail(&b, MOE_EFORMAT, "KV count 18446744073709551615 does not fit",
		    "KV count 2^64-1");
	/* plausible in the header, but not after the KVs */
	header(&b, 3, 2, 1);
	kv_str(&b, "k", "a long enough string to make room for two tensors.........");
	expect_fail(&b, MOE_EFORMAT, "tensor count 2 does not fit", "tensor count vs. KVs");

	one_tensor(&b, "w", 5, ne5, MOE_F32, 0);
	expect_fail(&b, MOE_EFORMAT, "tensor 0 'w': 5 dimensions", "5 dims");
	one_tensor(&b, "w", 0, ne5, MOE_F32, 0);
	expect_fail(&b, MOE_EFORMAT, "tensor 0 'w': 0 dimensions", "0 dims");
	{
		uint64_t ne[] = { 4, 0, 2 };
		one_tensor(&b, "w", 3, ne, MOE_F32, 0);
		seed(&b, "bad-zero-dim");
		expect_fail(&b, MOE_EFORMAT, "tensor 0 'w': dimension 1 is zero", "zero dim");
	}
	{
		uint64_t ne[] = { 1ull << 32, 1ull << 32 };
		one_tensor(&b, "w", 2, ne, MOE_F32, 0);
		expect_fail(&b, MOE_EFORMAT, "element count overflows", "element count overflow");
	}
	{
		uint64_t ne[] = { 1ull << 62 };
		one_tensor(&b, "w", 1, ne, MOE_F32, 0);
		expect_fail(&b, MOE_EFORMAT, "byte size of 4611686018427387904 f32 elements overflows",
			    "byte size overflow");
	}
	{
		uint64_t ne[] = { UINT64_MAX - 1 };
		one_tensor(&b, "w", 1, ne, MOE_F32, 0);
		expect_fail(&b, MOE_EFORMAT, "dimension 0 is negative", "negative dimension");
	}
	one_tensor(&b, "w", 1, ne4, MOE_F32, 1024);
	seed(&b, "bad-offset");
	expect_fail(&b, MOE_EFORMAT, "tensor 'w': 16 bytes at offset 1024 of the data section",
		    "offset past end");
	one_tensor(&b, "w", 1, ne16, MOE_F32, 32);
	expect_fail(&b, MOE_EFORMAT, "past end of file (size 128)", "data running past end");
	one_tensor(&b, "w", 1, ne4, MOE_F32, UINT64_MAX - 31);
	expect_fail(&b, MOE_EFORMAT, "past end of file", "offset overflowing");
	one_tensor(&b, "w", 1, ne4, MOE_F32, 16);
	expect_fail(&b, MOE_EFORMAT, "offset 16 is not a multiple of the alignment 32",
		    "unaligned offset");
	one_tensor(&b, "w", 1, ne4, 99, 0);
	seed(&b, "bad-dtype");
	expect_fail(&b, MOE_EUNSUPPORTED, "tensor 0 'w': unknown or unsupported ggml type 99",
		    "unknown dtype");
	one_tensor(&b, "w", 1, ne4, 0x80000000u, 0);
	expect_fail(&b, MOE_EUNSUPPORTED, "ggml type 2147483648", "dtype id 2^31");
	one_tensor(&b, "w", 1, ne16, MOE_Q8_0, 0);
	expect_fail(&b, MOE_EFORMAT, "row length 16 is not a multiple of the q8_0 block size 32",
		    "row not a whole number of blocks");

	/* two tensors: overlap, duplicate names */
	header(&b, 3, 2, 0);
	tinfo(&b, "a", 1, ne16, MOE_F32, 0);
	tinfo(&b, "b", 1, ne4, MOE_F32, 32);
	pad_to(&b, 32);
	zeros(&b, 64);
	seed(&b, "bad-overlap");
	expect_fail(&b, MOE_EFORMAT, "tensors 'a' and 'b' overlap", "overlapping tensors");
	header(&b, 3, 2, 0);
	tinfo(&b, "b", 1, ne4, MOE_F32, 32);
	tinfo(&b, "a", 1, ne4, MOE_F32, 32);
	pad_to(&b, 32);
	zeros(&b, 64);
	expect_fail(&b, MOE_EFORMAT, "tensors 'b' and 'a' overlap", "tensors at the same offset");
	header(&b, 3, 2, 0);
	tinfo(&b, "a", 1, ne4, MOE_F32, 0);
	tinfo(&b, "a", 1, ne4, MOE_F32, 32);
	pad_to(&b, 32);
	zeros(&b, 64);
	seed(&b, "bad-dup-tensor");
	expect_fail(&b, MOE_EFORMAT, "duplicate tensor name 'a' (tensors 0 and 1)",
		    "duplicate tensor names");
	header(&b, 3, 1, 0);
	strn(&b, "a\0b", 3), u32(&b, 1), u64(&b, 4), u32(&b, MOE_F32), u64(&b, 0);
	pad_to(&b, 32);
	zeros(&b, 16);
	expect_fail(&b, MOE_EFORMAT, "tensor name 'a' contains a NUL byte", "NUL in tensor name");
	header(&b, 3, 2, 0);
	tinfo(&b, "x\n'y", 1, ne4, MOE_F32, 0);
	tinfo(&b, "x\n'y", 1, ne4, MOE_F32, 32);
	pad_to(&b, 32);
	zeros(&b, 64);
	expect_fail(&b, MOE_EFORMAT, "duplicate tensor name 'x\\x0a\\x27y'",
		    "control characters in names escaped in messages");
	header(&b, 3, 1, 0);
	tinfo(&b, "", 1, ne4, MOE_F32, 0);
	pad_to(&b, 32);
	zeros(&b, 16);
	expect_fail(&b, MOE_EFORMAT, "empty tensor name", "empty tensor name");

	/* strings and KVs */
	header(&b, 3, 0, 1);
	key(&b, "k", MOE_GGUF_T_STRING), u64(&b, 1u << 30), put(&b, "abc", 3);
	seed(&b, "bad-string-length");
	expect_fail(&b, MOE_EFORMAT, "KV 0 'k': string length 1073741824 at offset 37 exceeds",
		    "1 GiB string length");
	header(&b, 3, 0, 1);
	u64(&b, UINT64_MAX), put(&b, "k", 1), zeros(&b, 8);
	expect_fail(&b, MOE_EFORMAT, "KV 0: string length 18446744073709551615",
		    "key length 2^64-1");
	header(&b, 3, 0, 2);
	kv_u32(&b, "k", 1);
	kv_u32(&b, "k", 2);
	seed(&b, "bad-dup-key");
	expect_fail(&b, MOE_EFORMAT, "duplicate key 'k' (KV 0 and 1)", "duplicate keys");
	header(&b, 3, 0, 1);
	key(&b, "k", 13), u64(&b, 0);
	expect_fail(&b, MOE_EFORMAT, "KV 0 'k': unknown value type 13", "unknown KV type");
	header(&b, 3, 0, 1);
	strn(&b, "k\0", 2), u32(&b, MOE_GGUF_T_UINT8), u8(&b, 0);
	expect_fail(&b, MOE_EFORMAT, "key 'k' contains a NUL byte", "NUL in key");
	header(&b, 3, 0, 1);
	strn(&b, "", 0), u32(&b, MOE_GGUF_T_UINT32), u32(&b, 0);
	expect_fail(&b, MOE_EFORMAT, "KV 0: empty key", "empty key");
	header(&b, 3, 0, 1);
	key(&b, "k", MOE_GGUF_T_ARRAY), u32(&b, MOE_GGUF_T_UINT32), u64(&b, 1ull << 62);
	u32(&b, 0), u32(&b, 0);
	seed(&b, "bad-array-count");
	expect_fail(&b, MOE_EFORMAT, "array count 4611686018427387904 of uint32 does not fit",
		    "array count overflow");
	header(&b, 3, 0, 1);
	key(&b, "k", MOE_GGUF_T_ARRAY), u32(&b, MOE_GGUF_T_STRING), u64(&b, 3);
	str(&b, "a"), u64(&b, 100), put(&b, "bc", 2);
	zeros(&b, 16);
	expect_fail(&b, MOE_EFORMAT, "KV 0 'k': element 1: string length 100",
		    "bad string inside an array");
	header(&b, 3, 0, 1);
	key(&b, "k", MOE_GGUF_T_ARRAY), u32(&b, 14), u64(&b, 0);
	expect_fail(&b, MOE_EFORMAT, "unknown array element type 14", "unknown array type");
	/* 9 nested arrays (the limit is 8) */
	header(&b, 3, 0, 1);
	key(&b, "k", MOE_GGUF_T_ARRAY);
	for (int i = 0; i < 8; i++)
		u32(&b, MOE_GGUF_T_ARRAY), u64(&b, 1);
	u32(&b, MOE_GGUF_T_UINT8), u64(&b, 1), u8(&b, 0);
	seed(&b, "bad-deep-nesting");
	expect_fail(&b, MOE_EFORMAT, "arrays nested deeper than 8", "too deep nesting");
	/* exactly 8 deep is fine */
	{
		moe_src *src;
		moe_gguf *g;
		moe_error e = { 0 };
		header(&b, 3, 0, 1);
		key(&b, "k", MOE_GGUF_T_ARRAY);
		for (int i = 0; i < 7; i++)
			u32(&b, MOE_GGUF_T_ARRAY), u64(&b, 1);
		u32(&b, MOE_GGUF_T_UINT8), u64(&b, 1), u8(&b, 42);
		if (ok(open_buf(&b, &src, &g, &e) == 0, "arrays nested 8 deep accepted")) {
			const moe_gguf_value *v = &g->kv[0].v;
			for (int i = 0; i < 7; i++)
				v = v->arr.data;
			ok(v->arr.type == MOE_GGUF_T_UINT8 && *(const uint8_t *)v->arr.data == 42,
			   "innermost element");
			close_buf(src, g);
		}
		buf_free(&b);
	}

	/* alignment */
	header(&b, 3, 0, 1);
	kv_u32(&b, "general.alignment", 0);
	seed(&b, "bad-alignment");
	expect_fail(&b, MOE_EFORMAT, "'general.alignment': alignment 0 is not a power of two",
		    "alignment 0");
	header(&b, 3, 0, 1);
	kv_u32(&b, "general.alignment", 3);
	expect_fail(&b, MOE_EFORMAT, "alignment 3 is not a power of two", "alignment 3");
	header(&b, 3, 0, 1);
	key(&b, "general.alignment", MOE_GGUF_T_UINT64), u64(&b, 64);
	expect_fail(&b, MOE_EFORMAT, "alignment has type uint64, must be uint32",
		    "alignment as uint64");
}

/* ------------------------------------------------------ real vocab files */

struct vocab_fact {
	const char *file, *arch;
	uint64_t n_kv, n_tokens;
	const char *first_token, *last_token;
	uint64_t n_merges;   /* 0: no merges */
	uint64_t bos;
};

/* Read with an independent Python script (struct.unpack over the bytes). */
static const struct vocab_fact facts[] = {
	{ "ggml-vocab-gpt-2.gguf", "gpt2", 16, 50257, "!", "<|endoftext|>", 50000, 50256 },
	{ "ggml-vocab-llama-spm.gguf", "llama", 22, 32000, "<unk>", "\xe7\xbb\x99", 0, 1 },
	{ "ggml-vocab-phi-3.gguf", "phi3", 26, 32064, "<unk>", "[PAD32063]", 0, 1 },
	{ "ggml-vocab-deepseek-llm.gguf", "llama", 23, 102400, "!", "[PAD102399]", 99757,
	  100000 },
};

static void test_vocab(void)
{
	const char *shared = getenv("MOE_SHARED"), *top = getenv("top_srcdir");
	char dir[1024], path[1200];
	struct stat st;

	if (shared)
		snprintf(dir, sizeof dir, "%s/vocab", shared);
	else
		snprintf(dir, sizeof dir, "%s/../shared/vocab", top ? top : ".");
	if (stat(dir, &st) != 0) {
		tap_diag("no %s: skipping the real vocab files", dir);
		return;
	}
	for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++) {
		const struct vocab_fact *vf = &facts[f];
		moe_src *src;
		moe_gguf *g;
		moe_error e = { 0 };
		const char *s;
		uint64_t n, bos;
		const void *data;
		int et;

		snprintf(path, sizeof path, "%s/%s", dir, vf->file);
		if (moe_src_open_file(&src, path, &e) < 0) {
			tap_diag("%s", e.msg);
			continue;
		}
		if (!ok(moe_gguf_open(&g, src, &e) == 0, "%s opens", vf->file)) {
			tap_diag("%s", e.msg);
			moe_src_close(src);
			continue;
		}
		ok(g->version == 3 && g->n_tensors == 0 && g->n_kv == vf->n_kv,
		   "%s: v3, no tensors, %llu KVs", vf->file, (unsigned long long)vf->n_kv);
		ok(moe_gguf_get_str(g, "general.architecture", &s, &e) == 0 &&
			   strcmp(s, vf->arch) == 0,
		   "%s: general.architecture = %s", vf->file, vf->arch);
		if (ok(moe_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, &e) == 0 &&
			       et == MOE_GGUF_T_STRING && n == vf->n_tokens,
		       "%s: %llu tokens", vf->file, (unsigned long long)vf->n_tokens)) {
			const moe_gguf_str *t = data;
			ok(strcmp(t[0].ptr, vf->first_token) == 0 &&
				   strcmp(t[n - 1].ptr, vf->last_token) == 0,
			   "%s: first and last token", vf->file);
		}
		ok(moe_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data, &e) == 0 &&
			   et == MOE_GGUF_T_INT32 && n == vf->n_tokens,
		   "%s: token_type is int32[n_tokens]", vf->file);
		if (vf->n_merges)
			ok(moe_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data, &e) == 0 &&
				   et == MOE_GGUF_T_STRING && n == vf->n_merges,
			   "%s: %llu merges", vf->file, (unsigned long long)vf->n_merges);
		ok(moe_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &bos, &e) == 0 &&
			   bos == vf->bos,
		   "%s: bos id %llu", vf->file, (unsigned long long)vf->bos);
		if (strcmp(vf->file, "ggml-vocab-llama-spm.gguf") == 0) {
			bool add_bos;
			double eps;
			ok(moe_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data, &e) == 0 &&
				   et == MOE_GGUF_T_FLOAT32 && n == 32000 &&
				   ((const float *)data)[31999] == -31740.0f,
			   "llama-spm: scores float32[32000], last -31740");
			ok(moe_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, &e) == 0 &&
				   add_bos,
			   "llama-spm: add_bos_token true");
			ok(moe_gguf_get_f64(g, "llama.attention.layer_norm_rms_epsilon", &eps, &e) ==
					   0 &&
				   eps == (double)1e-5f,
			   "llama-spm: rms epsilon 1e-5 (as float32)");
		}
		if (strcmp(vf->file, "ggml-vocab-phi-3.gguf") == 0)
			ok(moe_gguf_get_str(g, "tokenizer.chat_template", &s, &e) == 0 &&
				   strncmp(s, "{{ bos_token }}{% for message in messages %}", 44) == 0,
			   "phi-3: chat template");
		ok(g->arena.used_total < 3 * src->size, "%s: metadata memory %zu < 3 x %llu",
		   vf->file, g->arena.used_total, (unsigned long long)src->size);
		moe_gguf_close(g);
		moe_src_close(src);
	}
}

int main(void)
{
	test_full(3);
	test_full(2);
	test_minimal();
	test_big();
	test_malformed();
	test_vocab();
	return tap_done();
}
