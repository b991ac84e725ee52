/* fuzz-gguf.c — libFuzzer target for the GGUF reader: any byte string must
 * open cleanly or be rejected with an error, never crash, hang or leak; a
 * file that opens goes on to the hparams reader and their validation (an
 * absurd block_count once made that loop for half an hour).
 * Seed corpus: tests/fuzz/gguf/ (written by tests/unit/t-gguf with
 * MOE_GGUF_WRITE_SEEDS=dir). */
#include "arch.h"
#include "gguf.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_src *src;
	moe_gguf *g;
	moe_error e = { 0 };

	if (moe_src_open_mem(&src, "fuzz.gguf", data, size, &e) < 0)
		return 0;
	if (moe_gguf_open(&g, src, &e) == 0) {
		/* Touch what a consumer would: lookups and every tensor's range. */
		for (uint64_t i = 0; i < g->n_kv; i++)
			if (moe_gguf_find(g, g->kv[i].key) != &g->kv[i])
				__builtin_trap();
		for (uint64_t i = 0; i < g->n_tensors; i++) {
			const moe_gguf_tensor *t = &g->tensors[i];
			if (moe_gguf_find_tensor(g, t->name) != t ||
			    !moe_range_ok(t->offset, t->size, size))
				__builtin_trap();
		}
		moe_hparams hp;
		moe_error he = {0};
		if (moe_hparams_from_gguf(&hp, g, &he) == 0 && moe_hparams_check(&hp, &he) == 0) {
			json_t *j = moe_hparams_to_json(&hp);
			moe_hparams back;
			if (!j || moe_hparams_from_json(&back, j, &he) < 0)
				__builtin_trap(); /* converter and loader disagree */
			json_decref(j);
		} else if (!he.msg[0]) {
			__builtin_trap();
		}
		moe_gguf_close(g);
	} else if (e.msg[0] == '\0' || strncmp(e.msg, "fuzz.gguf: ", 11) != 0) {
		__builtin_trap(); /* every error must say what and where */
	}
	moe_src_close(src);
	return 0;
}
