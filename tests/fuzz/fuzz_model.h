/* fuzz_model.h — the model a fuzz target runs its input against: the demo
 * model (MOE_FUZZ_DEFAULT_MODEL) or $MOE_FUZZ_MODEL, loaded on first use. */
#ifndef MOE_FUZZ_MODEL_H
#define MOE_FUZZ_MODEL_H

#include "model.h"

#include <stdio.h>
#include <stdlib.h>

/* Its path. */
static inline const char *fuzz_model_path(void)
{
	const char *mp = getenv("MOE_FUZZ_MODEL");
	return mp ? mp : MOE_FUZZ_DEFAULT_MODEL;
}

/* The model; a harness that cannot load it aborts, naming `target`. */
static inline moe_model *fuzz_model(const char *target)
{
	static moe_model *model;
	if (!model) {
		moe_error e = {0};
		if (moe_model_load(&model, fuzz_model_path(), &e) < 0) {
			fprintf(stderr, "%s: setup: %s\n", target, e.msg);
			abort();
		}
	}
	return model;
}

#endif
