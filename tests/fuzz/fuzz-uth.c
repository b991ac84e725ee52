/* fuzz-uth.c — libFuzzer target for the UTH v1 validator (moe_uth_parse).
 *
 * The first input byte selects a mode, the rest is the file image:
 *   bit 0 clear: the image is parsed as is (the checksums guard the header and
 *                directory, so random mutations mostly stop there);
 *   bit 0 set:   the harness first recomputes meta_xxh3 and header_xxh3 as a
 *                writer would, so mutations reach the section and directory
 *                checks;
 *   bit 1 set:   (with bit 0) also sets file_size and data_size from the
 *                actual input size, so truncations/extensions get past that
 *                check too.
 * Anything accepted must satisfy the invariants users rely on; a violation
 * aborts.  Seeds: tests/fuzz/uth/ (each begins with its mode byte).
 */
#include "uth.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

static void reseal(uint8_t *b, size_t n, int mode)
{
	if (n < MOE_UTH_HEADER_SIZE)
		return;
	if (mode & 2) {
		uint64_t data_off = rd64(b + 80);
		wr64(b + 16, n);
		if (data_off <= n)
			wr64(b + 88, n - data_off);
	}
	uint64_t dir = rd64(b + 32), meta = rd64(b + 64), meta_n = rd64(b + 72), end;
	if (!__builtin_add_overflow(meta, meta_n, &end) && dir <= end && end <= n)
		wr64(b + 104, XXH3_64bits(b + dir, end - dir));
	wr64(b + 112, XXH3_64bits(b, 112));
}

static void check_invariants(const moe_uth *u, size_t n)
{
	uint64_t prev_end = u->data_offset;
	for (uint64_t i = 0; i < u->n_tensors; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		if (t->offset % MOE_UTH_ALIGN || t->offset < prev_end || t->offset > n ||
		    t->size > n - t->offset || t->size == 0)
			abort();
		if (moe_uth_find(u, t->name) != t || strlen(t->name) == 0)
			abort();
		if (!moe_uth_role_name(t->role))
			abort();
		/* Touch the first and last data byte: must be inside the image. */
		const volatile uint8_t *d = moe_uth_data(u, t);
		(void)d[0];
		(void)d[t->size - 1];
		if (t->expert != MOE_UTH_NONE) {
			size_t first, count;
			if (moe_uth_expert(u, t->layer, t->expert, &first, &count) != 0 ||
			    i < first || i >= first + count)
				abort();
		}
		prev_end = t->offset + t->size;
	}
	if (strlen(u->meta) != u->meta_len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_error e = { 0 };
	moe_uth *u = NULL;

	if (size < 1)
		return 0;
	int mode = data[0];
	size--;
	/* An exact-size copy, so any read past the end is caught. */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size);
	if (mode & 1)
		reseal(buf, size, mode);
	if (moe_uth_parse("fuzz.uth", buf, size, &u, &e) == 0) {
		check_invariants(u, size);
		moe_uth_verify(u, &e);
		moe_uth_close(u);
	} else if (u != NULL || e.msg[0] == 0) {
		abort(); /* failures must leave no object and say why */
	}
	free(buf);
	return 0;
}
