/* t-quant-imatrix.c — importance matrices (quant/imatrix.c): the
 * accumulator's mean squares against values worked out by hand, save/load
 * round trips of our format, llama.cpp's legacy imatrix.dat written byte by
 * byte here (with the expert slices of a merged _exps tensor), and every
 * malformed file refused with a message naming the file. */
#include "quant.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/t-imatrix.XXXXXX";

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	fwrite(p, 1, n, f);
	fclose(f);
}

static void test_accumulate(void)
{
	moe_imatrix *m;
	moe_error e;
	ok(moe_imatrix_new(&m, &e) == 0, "new");
	/* two calls, rows (1, -2, 3), (3, 0, -1), then (2, 2, 2):
	 * means of squares (1 + 9 + 4) / 3, (4 + 0 + 4) / 3, (9 + 1 + 4) / 3 */
	float a[] = {1, -2, 3, 3, 0, -1}, b[] = {2, 2, 2};
	ok(moe_imatrix_add(m, "blk.0.ffn_up.1.weight", a, 2, 3, &e) == 0, "add 2 rows");
	ok(moe_imatrix_add(m, "blk.0.ffn_up.1.weight", b, 1, 3, &e) == 0, "add 1 row");
	uint64_t rows = 0;
	const float *v = moe_imatrix_get(m, "blk.0.ffn_up.1.weight", 3, &rows);
	ok(v && rows == 3, "3 rows accumulated");
	ok(v && v[0] == 14.0f / 3 && v[1] == 8.0f / 3 && v[2] == 14.0f / 3,
	   "mean squares 14/3 8/3 14/3: %g %g %g", v ? v[0] : -1, v ? v[1] : -1, v ? v[2] : -1);
	ok(!moe_imatrix_get(m, "blk.0.ffn_up.1.weight", 4, NULL), "other width: not found");
	ok(!moe_imatrix_get(m, "nope", 3, NULL), "other name: not found");
	is_int(moe_imatrix_add(m, "blk.0.ffn_up.1.weight", a, 1, 6, &e), MOE_EINVAL,
	       "width change refused");
	ok(strstr(e.msg, "ffn_up.1") != NULL, "message names the tensor");
	/* a stack of 2 matrices of 3 columns (deepseek2's per-head products):
	 * 6 columns, part-major; rows counted with part 0 */
	ok(moe_imatrix_add_part(m, "blk.0.attn_v_b.weight", b, 1, 3, 1, 2, &e) == 0, "part 1 of 2");
	ok(moe_imatrix_add_part(m, "blk.0.attn_v_b.weight", a, 2, 3, 0, 2, &e) == 0, "part 0 of 2");
	const float *p = moe_imatrix_get(m, "blk.0.attn_v_b.weight", 6, &rows);
	ok(p && rows == 2 && p[0] == 5 && p[1] == 2 && p[2] == 5 && p[3] == 2 && p[5] == 2,
	   "parts: columns of their own, rows of part 0");
	is_int(moe_imatrix_add_part(m, "blk.0.attn_v_b.weight", a, 1, 3, 2, 2, &e), MOE_EINVAL,
	       "part 2 of 2: refused");
	ok(strstr(e.msg, "attn_v_b") != NULL, "message names the tensor: %s", e.msg);
	is_int(moe_imatrix_add_part(m, "blk.0.attn_v_b.weight", a, 1, 3, 0, 3, &e), MOE_EINVAL,
	       "another number of parts: refused");

	/* save / load: our format keeps sums and counts exactly */
	char path[256];
	snprintf(path, sizeof(path), "%s/a.imatrix", dir);
	ok(moe_imatrix_save(m, path, &e) == 0, "save");
	moe_imatrix *r;
	ok(moe_imatrix_load(&r, path, &e) == 0, "load: %s", e.msg);
	const float *w = r ? moe_imatrix_get(r, "blk.0.ffn_up.1.weight", 3, &rows) : NULL;
	ok(w && rows == 3 && memcmp(v, w, 12) == 0, "round trip identical");
	moe_imatrix_free(r);

	/* corrupt: flip a byte, truncate */
	FILE *f = fopen(path, "rb");
	uint8_t buf[4096];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	buf[30] ^= 1;
	write_file(path, buf, n);
	is_int(moe_imatrix_load(&r, path, &e), MOE_ECHECKSUM, "flipped byte: checksum error");
	ok(strstr(e.msg, "a.imatrix") != NULL, "message names the file: %s", e.msg);
	buf[30] ^= 1;
	write_file(path, buf, 20);
	ok(moe_imatrix_load(&r, path, &e) < 0 && r == NULL, "truncated: refused (%s)", e.msg);
	moe_imatrix_free(m);

	/* a mean square beyond a float (activations of 1e30: sums of 1e60
	 * over one row), which the quantisers would take as an infinite
	 * weight: the file is refused naming the entry (found by
	 * fuzz-imatrix; tests/fuzz/imatrix/crash-mean-overflow) */
	ok(moe_imatrix_new(&m, &e) == 0, "new");
	float huge[2] = {1e30f, 1.0f};
	ok(moe_imatrix_add(m, "blk.0.attn_k.weight", huge, 1, 2, &e) == 0, "add 1e30");
	ok(moe_imatrix_save(m, path, &e) == 0, "save it");
	moe_imatrix_free(m);
	r = NULL;
	is_int(moe_imatrix_load(&r, path, &e), MOE_EFORMAT, "a mean square beyond a float: refused");
	ok(r == NULL && strstr(e.msg, "a.imatrix") && strstr(e.msg, "blk.0.attn_k.weight") &&
	   strstr(e.msg, "column 0"), "... naming the file, entry and column: %s", e.msg);
}

static void put_i32(uint8_t **p, int32_t v)
{
	memcpy(*p, &v, 4);
	*p += 4;
}

static void test_legacy(void)
{
	/* two entries: a plain tensor (4 columns, ncall 2: values are mean
	 * squares x 2) and a merged expert tensor of 2 experts x 2 columns */
	uint8_t buf[512], *p = buf;
	const char *n1 = "blk.0.attn_q.weight", *n2 = "blk.1.ffn_down_exps.weight";
	float v1[] = {2, 4, 6, 8}, v2[] = {10, 20, 30, 40};
	put_i32(&p, 2);
	put_i32(&p, (int32_t)strlen(n1));
	memcpy(p, n1, strlen(n1)), p += strlen(n1);
	put_i32(&p, 2);
	put_i32(&p, 4);
	memcpy(p, v1, 16), p += 16;
	put_i32(&p, (int32_t)strlen(n2));
	memcpy(p, n2, strlen(n2)), p += strlen(n2);
	put_i32(&p, 10);
	put_i32(&p, 4);
	memcpy(p, v2, 16), p += 16;
	put_i32(&p, 10); /* trailer: chunks, data set name */
	put_i32(&p, 4);
	memcpy(p, "wiki", 4), p += 4;
	char path[256];
	snprintf(path, sizeof(path), "%s/legacy.dat", dir);
	write_file(path, buf, (size_t)(p - buf));

	moe_imatrix *m;
	moe_error e;
	ok(moe_imatrix_load(&m, path, &e) == 0, "legacy imatrix.dat loads: %s", e.msg);
	if (!m)
		return;
	const float *a = moe_imatrix_get(m, n1, 4, NULL);
	ok(a && a[0] == 1 && a[3] == 4, "values divided by ncall");
	const float *x1 = moe_imatrix_for(m, "blk.1.ffn_down.1.weight", 1, 1, "ffn_down", 2);
	ok(x1 && x1[0] == 3 && x1[1] == 4, "expert 1 = the second slice of _exps");
	ok(!moe_imatrix_for(m, "blk.1.ffn_down.2.weight", 1, 2, "ffn_down", 2),
	   "expert 2 does not exist");
	moe_imatrix_free(m);

	/* malformed: negative count, name past the end, NaN value */
	int32_t neg = -3;
	memcpy(buf, &neg, 4);
	write_file(path, buf, (size_t)(p - buf));
	is_int(moe_imatrix_load(&m, path, &e), MOE_EFORMAT, "negative entry count refused");
	int32_t two = 2, big = 100000;
	memcpy(buf, &two, 4);
	memcpy(buf + 4, &big, 4);
	write_file(path, buf, (size_t)(p - buf));
	is_int(moe_imatrix_load(&m, path, &e), MOE_EFORMAT, "name length past the end refused");
	ok(strstr(e.msg, "legacy.dat") != NULL, "message names the file: %s", e.msg);
	int32_t len1 = (int32_t)strlen(n1);
	memcpy(buf + 4, &len1, 4);
	float nan = __builtin_nanf("");
	memcpy(buf + 8 + strlen(n1) + 8, &nan, 4);
	write_file(path, buf, (size_t)(p - buf));
	is_int(moe_imatrix_load(&m, path, &e), MOE_EFORMAT, "NaN value refused");
	write_file(path, buf, 3);
	ok(moe_imatrix_load(&m, path, &e) < 0, "3-byte file refused");
	snprintf(path, sizeof(path), "%s/missing", dir);
	is_int(moe_imatrix_load(&m, path, &e), MOE_ENOTFOUND, "missing file: MOE_ENOTFOUND");
}

int main(void)
{
	if (!mkdtemp(dir))
		tap_skip_all("no temporary directory");
	test_accumulate();
	test_legacy();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		tap_diag("could not remove %s", dir);
	return tap_done();
}
