/* fuzz-bench-plan.c — libFuzzer target for moe-bench --plan's routing
 * profile (profile_counts in lib/bench/plan.c, through moe_bench_plan) on
 * the demo model (share/moe-demo.uth, or $MOE_FUZZ_MODEL).  The input is
 * the --expert-stats profile.  It must plan or fail with a message; a plan
 * keeps its promises: at most 6 rows, hit rates within [0, 1], budgets of
 * at least the fixed bytes.
 * Seeds: tests/fuzz/bench-plan/ (the demo model's profile, another model's,
 * bad counts, more layers than the model has).
 */
#include "bench.h"
#include "model.h"
#include "fuzz_file.h"
#include "fuzz_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_model *model = fuzz_model("fuzz-bench-plan");
	const char *path = fuzz_file("fuzz-bench-plan", data, size);
	moe_plan_params p = {.mem_bw = 10e9, .disk_bw = 1e9, .mem_available = (uint64_t)1 << 30,
			     .profile = path};
	moe_plan out;
	moe_error e = {0};
	if (moe_bench_plan(model, &p, &out, &e) < 0) {
		if (!e.msg[0])
			__builtin_trap();
		return 0;
	}
	if (out.n < 0 || out.n > 6)
		__builtin_trap();
	for (int i = 0; i < out.n; i++)
		if (!(out.rows[i].hit_rate >= 0 && out.rows[i].hit_rate <= 1) ||
		    out.rows[i].budget < out.fixed || !isfinite(out.rows[i].tok_s))
			__builtin_trap();
	return 0;
}
