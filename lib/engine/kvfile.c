/* kvfile.c — a sequence's KV state on disk (moe-run --prompt-cache).
 *
 * The file (little-endian; moe-run(1), PROMPT CACHE FILES):
 *
 *   0  magic "MOEKVC\0\0"          32  kv_row_bytes (u32)
 *   8  version 1 (u32)             36  n_tokens (u32)
 *  12  header size 64 (u32)        40  payload bytes, compressed (u64)
 *  16  model id (u64)              48  payload bytes, raw (u64)
 *  24  KV type (u32, dtype id)     56  XXH3-64 of the raw payload (u64)
 *  28  n_layer (u32)
 *  64  the payload as one zstd frame: n_tokens token ids (i32), then for
 *      every layer and position the K row and the V row (kv_row_bytes each,
 *      in the KV type, position-major whatever the cache's layout); for
 *      multi-head latent attention (deepseek2) the one row the cache holds
 *      (the latent and the rope key).
 *
 * The model id is the XXH3-64 of the model file's 4096-byte header, which
 * holds the checksums of its directory (and so of every tensor) and
 * metadata: another model, or the same one converted differently, has
 * another id.  Anything that does not check out is an error the caller
 * turns into a warning and a recomputation; the state is only written into
 * the sequence after everything has been checked. */
#include "engine/engine_int.h"
#include "uth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#define KVC_MAGIC "MOEKVC\0\0"
#define KVC_VERSION 1u
#define KVC_HEADER 64u
#define KVC_MAX_FILE ((size_t)1 << 34)

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint64_t model_id(const moe_engine *eng)
{
	const moe_uth *u = eng->m->file;
	return XXH3_64bits(u->map, u->file_size < 4096 ? (size_t)u->file_size : 4096);
}

/* Position p of layer il: K row and V row into / out of the blocks. */
static void row_copy(moe_seq *s, int il, int p, uint8_t *k, uint8_t *v, bool to_cache)
{
	moe_engine *eng = s->eng;
	int bt = eng->kv.block_tokens, b = s->blocks[p / bt], slot = p % bt;
	size_t rb = eng->kv_row_bytes;
	uint8_t *kc = moe_kv_k(eng, b, il), *vc;
	if (eng->kv_rows == 1) { /* the latent (deepseek2): one row, no V */
		if (to_cache)
			memcpy(kc + (size_t)slot * rb, k, rb);
		else
			memcpy(k, kc + (size_t)slot * rb, rb);
		return;
	}
	vc = moe_kv_v(eng, b, il) + (size_t)slot * rb;
	if (to_cache)
		memcpy(vc, v, rb);
	else
		memcpy(v, vc, rb);
	if (!eng->k_trans) {
		if (to_cache)
			memcpy(kc + (size_t)slot * rb, k, rb);
		else
			memcpy(k, kc + (size_t)slot * rb, rb);
		return;
	}
	/* an F16 cache keeps K transposed (engine_int.h) */
	uint16_t *kt = (uint16_t *)kc, *row = (uint16_t *)k;
	size_t dims = rb / sizeof(uint16_t);
	for (size_t d = 0; d < dims; d++) {
		if (to_cache)
			kt[d * bt + slot] = row[d];
		else
			row[d] = kt[d * bt + slot];
	}
}

static uint64_t raw_size(const moe_engine *eng, uint32_t n)
{
	return (uint64_t)n * 4 + (uint64_t)eng->m->hp.n_layer * n * eng->kv_rows * eng->kv_row_bytes;
}

int moe_seq_save(moe_seq *s, int n_tokens, const char *path, moe_error *e)
{
	moe_engine *eng = s->eng;
	if (n_tokens <= 0 || n_tokens > s->n_pos)
		return moe_err(e, MOE_EINVAL, "%s: %d tokens to save, the sequence has %d", path,
			       n_tokens, s->n_pos);
	/* the file holds every layer's rows from position 0 */
	if (!moe_kv_window_whole(s, n_tokens))
		return moe_err(e, MOE_EUNSUPPORTED, "%s: cannot save %d tokens: the sliding-window layers "
					      "keep only the last %d positions (the rows before were "
					      "given back); save before the window is passed",
			       path, n_tokens, eng->kv.keep);
	uint32_t n = (uint32_t)n_tokens, L = eng->m->hp.n_layer;
	size_t rb = eng->kv_row_bytes;
	uint64_t rs = raw_size(eng, n);
	uint8_t *raw = malloc((size_t)rs);
	size_t bound = ZSTD_compressBound((size_t)rs);
	uint8_t *file = malloc(KVC_HEADER + bound);
	int rc = 0;
	if (!raw || !file) {
		rc = moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		put32(raw + 4 * (size_t)i, (uint32_t)s->tokens[i]);
	uint8_t *kv = raw + 4 * (size_t)n;
	size_t step = (size_t)eng->kv_rows * rb;
	for (uint32_t il = 0; il < L; il++)
		for (uint32_t p = 0; p < n; p++, kv += step)
			row_copy(s, (int)il, (int)p, kv, kv + rb, false);
	size_t cs = ZSTD_compress(file + KVC_HEADER, bound, raw, (size_t)rs, 3);
	if (ZSTD_isError(cs)) {
		rc = moe_err(e, MOE_EINTERNAL, "%s: zstd: %s", path, ZSTD_getErrorName(cs));
		goto out;
	}
	memcpy(file, KVC_MAGIC, 8);
	put32(file + 8, KVC_VERSION);
	put32(file + 12, KVC_HEADER);
	put64(file + 16, model_id(eng));
	put32(file + 24, (uint32_t)eng->kv_type);
	put32(file + 28, L);
	put32(file + 32, (uint32_t)rb);
	put32(file + 36, n);
	put64(file + 40, cs);
	put64(file + 48, rs);
	put64(file + 56, XXH3_64bits(raw, (size_t)rs));
	moe_out o;
	if ((rc = moe_out_open(&o, path, e)) < 0)
		goto out;
	if ((rc = moe_out_write(&o, file, KVC_HEADER + cs, e)) < 0 ||
	    (rc = moe_out_commit(&o, e)) < 0) {
		moe_out_abort(&o);
		goto out;
	}
out:
	free(raw);
	free(file);
	return rc;
}

int moe_seq_load(moe_seq *s, const char *path, const int32_t *prompt, size_t n_prompt,
		 int *n_loaded, moe_error *e)
{
	moe_engine *eng = s->eng;
	*n_loaded = 0;
	if (s->n_pos != 0)
		return moe_err(e, MOE_EINVAL, "%s: the sequence is not empty", path);
	char *buf;
	size_t len;
	MOE_TRY(moe_read_file(path, KVC_MAX_FILE, &buf, &len, e));
	const uint8_t *h = (const uint8_t *)buf;
	uint8_t *raw = NULL;
	int rc = 0;
	uint32_t L = eng->m->hp.n_layer, n = len >= KVC_HEADER ? get32(h + 36) : 0;
	if (len < KVC_HEADER || memcmp(h, KVC_MAGIC, 8)) {
		rc = moe_err(e, MOE_EFORMAT, "%s: not a prompt cache (bad magic or too short)", path);
		goto out;
	}
	if (get32(h + 8) != KVC_VERSION || get32(h + 12) != KVC_HEADER) {
		rc = moe_err(e, MOE_EFORMAT, "%s: prompt cache version %u not supported", path,
			     get32(h + 8));
		goto out;
	}
	if (get64(h + 16) != model_id(eng)) {
		rc = moe_err(e, MOE_EINVAL, "%s: made for another model", path);
		goto out;
	}
	if (get32(h + 24) != (uint32_t)eng->kv_type || get32(h + 28) != L ||
	    get32(h + 32) != eng->kv_row_bytes) {
		rc = moe_err(e, MOE_EINVAL, "%s: made with another KV cache type (%s) or shape", path,
			     moe_type_name((int)get32(h + 24)));
		goto out;
	}
	uint64_t rs = raw_size(eng, n);
	if (n == 0 || n > (uint32_t)eng->n_ctx || get64(h + 48) != rs ||
	    get64(h + 40) != len - KVC_HEADER) {
		rc = moe_err(e, MOE_EFORMAT, "%s: truncated or inconsistent (%u tokens, %zu bytes)",
			     path, n, len);
		goto out;
	}
	if (!(raw = malloc((size_t)rs))) {
		rc = moe_err(e, MOE_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	size_t got = ZSTD_decompress(raw, (size_t)rs, h + KVC_HEADER, len - KVC_HEADER);
	if (ZSTD_isError(got) || got != rs) {
		rc = moe_err(e, MOE_EFORMAT, "%s: damaged data (%s)", path,
			     ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
		goto out;
	}
	if (XXH3_64bits(raw, (size_t)rs) != get64(h + 56)) {
		rc = moe_err(e, MOE_ECHECKSUM, "%s: checksum mismatch", path);
		goto out;
	}
	/* the tokens the prompt starts with; at least one left to evaluate */
	size_t keep = 0;
	while (keep < n && keep < n_prompt && (int32_t)get32(raw + 4 * keep) == prompt[keep])
		keep++;
	if (keep == n_prompt && keep > 0)
		keep--;
	if (keep == 0)
		goto out;
	if ((rc = moe_kv_reserve(s, (int)keep, e)) < 0)
		goto out;
	moe_kv_window_ready(s, (int)keep);
	size_t step = (size_t)eng->kv_rows * eng->kv_row_bytes;
	for (uint32_t il = 0; il < L; il++) {
		uint8_t *kv = raw + 4 * (size_t)n + (size_t)il * n * step;
		for (size_t p = 0; p < keep; p++, kv += step)
			row_copy(s, (int)il, (int)p, kv, kv + eng->kv_row_bytes, true);
	}
	memcpy(s->tokens, prompt, keep * sizeof *prompt);
	s->n_pos = (int)keep;
	moe_kv_seal(s);
	*n_loaded = (int)keep;
out:
	free(raw);
	free(buf);
	return rc;
}
