/* fuzz-prompt-cache.c — libFuzzer target for the prompt cache loader
 * (moe_seq_load, moe-run --prompt-cache; the format is in moe-run(1) and
 * lib/engine/kvfile.c).  Any file must either load into the empty sequence
 * or fail with a message and leave the sequence empty; a loaded prefix must
 * be the prompt's, and the sequence must then evaluate its next token.
 *
 * The first input byte selects a mode, the rest is the data:
 *   bit 0 clear: the data is the file, as is (the model id, shape and
 *                checksum guard the payload, so most mutations stop there);
 *   bit 0 set:   the data is the raw payload (token ids, then the KV rows):
 *                the harness cuts it to a whole number of positions and
 *                writes it as a writer would (header for the demo model,
 *                zstd, XXH3), so mutations reach the token match and the
 *                row copy; the prompt is the cached ids (modulo the
 *                vocabulary) plus one.
 * The model is the demo model (share/moe-demo.uth, or $MOE_FUZZ_MODEL),
 * loaded once with a small KV pool.  Seeds: tests/fuzz/prompt-cache/ (each
 * begins with its mode byte).
 */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR 64

static moe_model *model;
static moe_engine *eng;
static char path[64];
static uint8_t header[HDR]; /* a valid header of the demo model's, from a save */
static uint64_t pos_bytes;  /* bytes of one position in the payload: id + rows */

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}
static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

static void cleanup(void)
{
	unlink(path);
}

/* The harness itself is broken: say so loudly. */
static void setup(void)
{
	const char *mp = getenv("MOE_FUZZ_MODEL");
	moe_error e = {0};
	moe_seq *s;
	strcpy(path, "/tmp/fuzz-prompt-cache-XXXXXX");
	int fd = mkstemp(path);
	if (fd >= 0)
		close(fd);
	/* the save replaces the file (atomically): read it back by name */
	FILE *f = NULL;
	if (fd < 0 || moe_model_load(&model, mp ? mp : MOE_FUZZ_DEFAULT_MODEL, &e) < 0 ||
	    moe_engine_new(&eng, model, &(moe_engine_params){.n_threads = 1, .kv_size = 256}, &e) < 0 ||
	    moe_seq_new(&s, eng, &e) < 0 || moe_seq_eval(s, (int32_t[]){1}, 1, NULL, false, &e) < 0 ||
	    moe_seq_save(s, 1, path, &e) < 0 || !(f = fopen(path, "rb")) ||
	    fread(header, 1, HDR, f) != HDR) {
		fprintf(stderr, "fuzz-prompt-cache: setup: %s\n", e.msg);
		abort();
	}
	fclose(f);
	atexit(cleanup);
	moe_seq_free(s);
	pos_bytes = get32(header + 48) | (uint64_t)get32(header + 52) << 32; /* one token's */
}

static void write_file(const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0)
		abort();
}

/* Mode 1: the payload as a writer would store it; returns the number of
 * positions written (0: nothing usable). */
static uint32_t seal(const uint8_t *raw, size_t n)
{
	uint32_t np = (uint32_t)(n / pos_bytes);
	if (np == 0)
		return 0;
	size_t rs = (size_t)np * pos_bytes;
	/* the first np positions' worth of bytes: ids, then every layer's rows */
	size_t bound = ZSTD_compressBound(rs);
	uint8_t *f = malloc(HDR + bound);
	size_t cs = f ? ZSTD_compress(f + HDR, bound, raw, rs, 1) : 0;
	if (!f || ZSTD_isError(cs))
		abort();
	memcpy(f, header, HDR);
	put32(f + 36, np);
	put64(f + 40, cs);
	put64(f + 48, rs);
	put64(f + 56, XXH3_64bits(raw, rs));
	write_file(f, HDR + cs);
	free(f);
	return np;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!eng)
		setup();
	if (size < 1)
		return 0;
	int mode = data[0];
	data++, size--;
	uint32_t n_vocab = moe_engine_n_vocab(eng);
	int32_t prompt[201]; /* well inside the pool's 256 tokens */
	size_t n_prompt = 0;
	if (mode & 1) {
		uint32_t np = seal(data, size);
		if (np == 0)
			return 0;
		for (uint32_t i = 0; i < np && n_prompt < 200; i++)
			prompt[n_prompt++] = (int32_t)(get32(data + 4 * (size_t)i) % n_vocab);
	} else {
		write_file(data, size);
		prompt[n_prompt++] = 1;
	}
	prompt[n_prompt++] = 2;

	moe_error e = {0};
	moe_seq *s;
	if (moe_seq_new(&s, eng, &e) < 0)
		abort();
	int loaded = -1;
	if (moe_seq_load(s, path, prompt, n_prompt, &loaded, &e) < 0) {
		if (!e.msg[0] || moe_seq_pos(s) != 0 || loaded != 0)
			__builtin_trap(); /* a failure says why and changes nothing */
	} else {
		if (loaded < 0 || (size_t)loaded >= n_prompt || moe_seq_pos(s) != loaded ||
		    memcmp(moe_seq_tokens(s), prompt, (size_t)loaded * sizeof *prompt))
			__builtin_trap(); /* a loaded prefix is the prompt's, one token left */
		if (moe_seq_eval(s, prompt + loaded, 1, NULL, false, &e) < 0)
			__builtin_trap();
	}
	moe_seq_free(s);
	return 0;
}
