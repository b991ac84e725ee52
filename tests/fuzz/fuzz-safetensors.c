/* fuzz-safetensors.c — libFuzzer target for the safetensors header parser:
 * the input is a whole file (u64 header length, JSON header, data).  It must
 * parse or be rejected with an error, never crash, hang or leak; what parses
 * must satisfy the promises of hf.h (tensors packed in offset order inside
 * the file, at most 4 dims).
 * Seed corpus: tests/fuzz/safetensors/ (written by tests/unit/t-hf with
 * MOE_HF_WRITE_SEEDS=dir). */
#include "hf.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_src *src;
	moe_arena arena;
	moe_hf_tensor *t;
	uint64_t n, end;
	moe_error e = { 0 };

	if (moe_src_open_mem(&src, "fuzz.safetensors", data, size, &e) < 0)
		return 0;
	moe_arena_init(&arena, 4096);
	if (moe_safetensors_read(src, &arena, &t, &n, &e) == 0) {
		end = n ? t[0].offset : size;
		for (uint64_t i = 0; i < n; i++) {
			if (t[i].offset != end || !moe_range_ok(t[i].offset, t[i].size, size) ||
			    t[i].n_dims > 4 || t[i].src != src || !t[i].name)
				__builtin_trap();
			end = t[i].offset + t[i].size;
		}
		if (end != size)
			__builtin_trap();
	} else if (e.code >= 0 || !e.msg[0]) {
		__builtin_trap();
	}
	moe_arena_free(&arena);
	moe_src_close(src);
	return 0;
}
