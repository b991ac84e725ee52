/* fuzz-expert-profile.c — libFuzzer target for the warm-start profile of
 * the streamed expert store (moe-bench --expert-profile, a moe-bench
 * --expert-stats JSON file read by moe_experts_open): the input is the
 * file, opened over the demo model (share/moe-demo.uth, or
 * $MOE_FUZZ_MODEL) with a cache of two layers' experts and a quarter
 * pinned.  Any file must give a store or a clean error that names the file
 * and leaves no store.  Seeds: tests/fuzz/expert-profile/.
 */
#include "experts.h"
#include "model.h"
#include "fuzz_file.h"
#include "fuzz_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_model *model = fuzz_model("fuzz-expert-profile");
	const char *path = fuzz_file("fuzz-expert-profile", data, size);
	moe_experts_params p = {
		.budget = moe_experts_fixed_bytes(model) +
			  2 * (uint64_t)model->hp.n_expert * moe_experts_slot_bytes(model),
		.profile = path, .pin_fraction = 0.25, .buffered = true};
	moe_error e = {0};
	moe_expert_store *st = NULL;
	if (moe_experts_open(&st, model, &p, &e) < 0) {
		if (st || !strstr(e.msg, path))
			__builtin_trap(); /* a failure names the file and leaves nothing */
		return 0;
	}
	moe_experts_close(st);
	return 0;
}
