/* t-uth-stream.c — the front-to-back UTH reader (format/uth_stream.c): a
 * file written by the UTH writer is read back in odd-sized pieces and
 * equals what was written; reads out of order are refused; finish checks
 * unread tensors; truncation, a flipped data byte, trailing bytes and a
 * corrupt directory are errors that name the problem. */
#include "tap.h"
#include "uth.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/t-uth-stream.XXXXXX";
static uint8_t a[4 * 300], b[2 * 64 * 5];

static void write_model(const char *path)
{
	moe_uth_writer *w;
	moe_error e;
	moe_out out;
	moe_uth_tensor t = {.dtype = 0, .n_dims = 1, .ne = {300, 1, 1, 1},
			    .layer = MOE_UTH_NONE, .expert = MOE_UTH_NONE,
			    .role = MOE_UTH_ROLE_OUTPUT_NORM};
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i * 7);
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (uint8_t)(i * 13 + 1);
	moe_uth_writer_new(&w, &e);
	t.name = "a";
	moe_uth_writer_add_mem(w, &t, a, &e);
	t.name = "b";
	t.dtype = 1;
	t.n_dims = 2;
	t.ne[0] = 64;
	t.ne[1] = 5;
	t.role = MOE_UTH_ROLE_OUTPUT;
	moe_uth_writer_add_mem(w, &t, b, &e);
	moe_out_open(&out, path, &e);
	moe_uth_writer_write(w, &out, &e);
	moe_out_commit(&out, &e);
	moe_uth_writer_free(w);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	uint8_t *p = malloc(*n + 16);
	if (fread(p, 1, *n, f) != *n)
		*n = 0;
	fclose(f);
	return p;
}

static void spit(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	fwrite(p, 1, n, f);
	fclose(f);
}

/* Read every tensor in pieces of 77 bytes, then finish. */
static int read_all(const char *path, moe_error *e)
{
	moe_uth_stream *s;
	MOE_TRY(moe_uth_stream_open(&s, path, e));
	const moe_uth *u = moe_uth_stream_info(s);
	uint8_t buf[2048];
	int rc = 0;
	for (size_t i = 0; i < u->n_tensors && rc == 0; i++)
		for (uint64_t off = 0; off < u->tensors[i].size && rc == 0; off += 77) {
			size_t k = u->tensors[i].size - off < 77 ? (size_t)(u->tensors[i].size - off) : 77;
			rc = moe_uth_stream_read(s, i, buf + off, k, e);
			if (rc == 0 && off + k == u->tensors[i].size)
				rc = memcmp(buf, i ? b : a, (size_t)u->tensors[i].size) ? -100 : 0;
		}
	if (rc == 0)
		rc = moe_uth_stream_finish(s, e);
	moe_uth_stream_close(s);
	return rc;
}

int main(void)
{
	char path[256], bad[256];
	moe_error e;
	if (!mkdtemp(dir))
		tap_skip_all("no temporary directory");
	snprintf(path, sizeof(path), "%s/m.uth", dir);
	snprintf(bad, sizeof(bad), "%s/bad.uth", dir);
	write_model(path);

	is_int(read_all(path, &e), 0, "read back in 77-byte pieces, equal to what was written");

	moe_uth_stream *s;
	ok(moe_uth_stream_open(&s, path, &e) == 0, "open");
	uint8_t buf[1024];
	is_int(moe_uth_stream_read(s, 1, buf, 10, &e), MOE_EINVAL, "tensor 1 before tensor 0: refused");
	ok(moe_uth_stream_read(s, 0, buf, 100, &e) == 0, "part of tensor 0");
	is_int(moe_uth_stream_read(s, 1, buf, 10, &e), MOE_EINVAL,
	       "tensor 1 while tensor 0 is unfinished: refused");
	is_int(moe_uth_stream_read(s, 0, buf, 1101, &e), MOE_EINVAL, "past the end of tensor 0");
	ok(moe_uth_stream_finish(s, &e) == 0, "finish reads and checks the rest");
	moe_uth_stream_close(s);
	ok(moe_uth_stream_open(&s, path, &e) == 0 && moe_uth_stream_finish(s, &e) == 0,
	   "finish with nothing read checks everything");
	moe_uth_stream_close(s);

	size_t n;
	uint8_t *img = slurp(path, &n);
	const moe_uth_tensor *tb = NULL;
	moe_uth *u;
	ok(moe_uth_open(&u, path, &e) == 0 && (tb = moe_uth_find(u, "b")) != NULL, "mmap reader agrees");
	uint64_t boff = tb ? tb->offset : 0;
	moe_uth_close(u);

	spit(bad, img, n - 4000);
	is_int(read_all(bad, &e), MOE_EFORMAT, "truncated in the data");
	ok(strstr(e.msg, "truncated") && strstr(e.msg, "'b'"), "names the tensor: %s", e.msg);
	spit(bad, img, 5000);
	is_int(read_all(bad, &e), MOE_EFORMAT, "truncated after the header");
	ok(strstr(e.msg, "truncated") != NULL, "says truncated: %s", e.msg);
	spit(bad, img, 100);
	is_int(read_all(bad, &e), MOE_EFORMAT, "shorter than the header");
	img[boff + 3] ^= 1;
	spit(bad, img, n);
	is_int(read_all(bad, &e), MOE_ECHECKSUM, "flipped data byte: checksum error");
	ok(strstr(e.msg, "'b'") != NULL, "names the tensor: %s", e.msg);
	img[boff + 3] ^= 1;
	memcpy(img + n, "extra", 5);
	spit(bad, img, n + 5);
	is_int(read_all(bad, &e), MOE_EFORMAT, "trailing bytes refused");
	ok(strstr(e.msg, "trailing") != NULL, "says trailing: %s", e.msg);
	img[4096 + 1] ^= 1; /* directory: n_dims of tensor 0 */
	spit(bad, img, n);
	ok(read_all(bad, &e) < 0, "corrupt directory refused: %s", e.msg);
	img[4096 + 1] ^= 1;
	img[16] ^= 0x80; /* file_size */
	spit(bad, img, n);
	ok(read_all(bad, &e) < 0, "absurd file_size refused: %s", e.msg);
	snprintf(bad, sizeof(bad), "%s/missing.uth", dir);
	is_int(read_all(bad, &e), MOE_EIO, "missing file");
	free(img);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		tap_diag("could not remove %s", dir);
	return tap_done();
}
