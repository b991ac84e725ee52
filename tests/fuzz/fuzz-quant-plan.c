/* fuzz-quant-plan.c — libFuzzer target for moe-quant --expert-profile's
 * routing profile (a moe-bench --expert-stats JSON file, read by
 * moe_quant_plan_experts in lib/quant/plan.c), planned for the demo model
 * (share/moe-demo.uth, or $MOE_FUZZ_MODEL) with the default ladder and a
 * budget the smallest rung fits.  The input is the profile.  It must plan
 * or fail with a message; a plan keeps its promises: the profile's sizes
 * no larger than the model's, each expert's type from the ladder or -1,
 * the size within the budget.
 * Seeds: tests/fuzz/quant-plan/ (t0700's profile, and ones of another
 * model's size, with a bad count, a duplicate layer, a huge table).
 */
#include "quant.h"
#include "fuzz_file.h"
#include "fuzz_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int ladder[] = {MOE_Q2_K, MOE_Q3_K, MOE_Q4_K, MOE_Q5_K, MOE_Q6_K};
	const int n_ladder = 5;
	const uint64_t budget = (uint64_t)1 << 40;
	const char *path = fuzz_file("fuzz-quant-plan", data, size);

	moe_quant_opts o = {.in = fuzz_model_path(), .allow_requantize = true,
			    .threads = 1};
	if (moe_quant_recipe_find("q4_k_m", &o.recipe) < 0)
		abort();
	moe_quant_plan p;
	moe_error e = {0};
	if (moe_quant_plan_experts(&o, path, budget, ladder, n_ladder, &p, &e) < 0) {
		if (!e.msg[0] || p.types || p.freq)
			__builtin_trap(); /* a failure says why and keeps nothing */
		return 0;
	}
	if (p.n_layer <= 0 || p.n_expert <= 0 || p.n_layer > 4096 || p.n_expert > 4096 ||
	    p.size > budget)
		__builtin_trap();
	for (size_t x = 0; x < (size_t)p.n_layer * p.n_expert; x++) {
		bool in_ladder = p.types[x] == -1;
		for (int k = 0; k < n_ladder; k++)
			in_ladder |= p.types[x] == ladder[k];
		if (!in_ladder || !(p.freq[x] >= 0))
			__builtin_trap();
	}
	moe_quant_plan_free(&p);
	return 0;
}
