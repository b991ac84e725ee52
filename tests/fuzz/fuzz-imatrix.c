/* fuzz-imatrix.c — libFuzzer target for the importance matrix reader
 * (moe_imatrix_load: our MOEIMTX1 format and llama.cpp's imatrix.dat, as
 * moe-quant --imatrix takes them).  Any file must load or fail with a
 * message and no object; a loaded matrix must save and load again with the
 * same entries, and the importances of the probed names (those of the
 * seeds) must be finite, non-negative and usable by the quantisers.
 *
 * The first input byte selects a mode, the rest is the file:
 *   bit 0 clear: the file as is;
 *   bit 0 set:   if it has our magic, the harness rewrites the trailing
 *                XXH3 as a writer would, so mutations get past the checksum.
 * Seeds: tests/fuzz/imatrix/ (each begins with its mode byte).
 */
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64], path2[64];

static void write_file(const char *p, const uint8_t *b, size_t n)
{
	FILE *f = fopen(p, "wb");
	if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f) != 0)
		abort();
}

static void cleanup(void)
{
	unlink(path);
	unlink(path2);
}

static void setup(void)
{
	strcpy(path, "/tmp/fuzz-imatrix-XXXXXX");
	strcpy(path2, "/tmp/fuzz-imatrix2-XXXXXX");
	int a = mkstemp(path), b = mkstemp(path2);
	if (a < 0 || b < 0)
		abort();
	close(a);
	close(b);
	atexit(cleanup);
}

/* What the quantiser does with an importance vector of n: it must not trap
 * (the sanitizers watch its float-to-integer conversions). */
static void use(const float *w, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!(w[i] >= 0.0f) || !isfinite(w[i]))
			__builtin_trap(); /* the loader promised usable importances */
	static const int types[] = {MOE_Q4_0, MOE_Q4_K, MOE_IQ4_XS};
	float *x = malloc(sizeof(float) * (size_t)n);
	uint8_t *dst = malloc(4 * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)((i * 37) % 19) - 9.0f;
	moe_error e = {0};
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
		if (n % 256 == 0)
			moe_quant_rows(types[t], x, dst, 1, n, w, NULL, &e);
	free(x);
	free(dst);
}

/* The seeds' names: plain tensors and llama.cpp's merged experts. */
static void probe(const moe_imatrix *m)
{
	static const char *const names[] = {"blk.0.attn_q.weight", "blk.0.ffn_up.weight",
					    "output.weight"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const float *w = moe_imatrix_get(m, names[i], 256, NULL);
		if (w)
			use(w, 256);
	}
	for (int x = 0; x < 4; x++) {
		const float *w = moe_imatrix_for(m, "blk.0.ffn_down.1.weight", 0, x, "ffn_down", 256);
		if (w)
			use(w, 256);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!path[0])
		setup();
	if (size < 1)
		return 0;
	int mode = data[0];
	data++, size--;
	uint8_t *buf = malloc(size ? size : 1);
	memcpy(buf, data, size);
	if ((mode & 1) && size >= 24 && memcmp(buf, "MOEIMTX1", 8) == 0) {
		uint64_t x = XXH3_64bits(buf, size - 8);
		memcpy(buf + size - 8, &x, 8);
	}
	write_file(path, buf, size);
	free(buf);

	moe_error e = {0};
	moe_imatrix *m = NULL, *r = NULL;
	if (moe_imatrix_load(&m, path, &e) < 0) {
		if (m || !e.msg[0])
			__builtin_trap(); /* a failure says why and leaves nothing */
		return 0;
	}
	probe(m);
	if (moe_imatrix_save(m, path2, &e) < 0 || moe_imatrix_load(&r, path2, &e) < 0 ||
	    moe_imatrix_count(r) != moe_imatrix_count(m))
		__builtin_trap(); /* what loaded must round-trip */
	moe_imatrix_free(r);
	moe_imatrix_free(m);
	return 0;
}
