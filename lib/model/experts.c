/* experts.c — the resident expert store: every expert's weights are the
 * model's own bindings into the mapped file, so acquiring is a lookup and
 * releasing does nothing.  A streaming store (issue 11) implements the same
 * two calls over an aligned cache. */
#include "model.h"

#include <stdlib.h>

static int resident_acquire(moe_expert_store *s, int layer, const int32_t *ids, int n,
			    moe_expert *out, moe_error *e)
{
	(void)e;
	const moe_layer *L = &((const moe_model *)s->impl)->layers[layer];
	for (int i = 0; i < n; i++)
		out[i] = (moe_expert){&L->exp_gate[ids[i]], &L->exp_up[ids[i]], &L->exp_down[ids[i]]};
	return 0;
}

static void resident_release(moe_expert_store *s, int layer, const int32_t *ids, int n)
{
	(void)s, (void)layer, (void)ids, (void)n;
}

int moe_model_resident_new(moe_model *m, moe_error *e)
{
	m->resident = malloc(sizeof *m->resident);
	if (!m->resident)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	*m->resident = (moe_expert_store){.acquire = resident_acquire, .release = resident_release, .impl = m};
	return 0;
}

moe_expert_store *moe_model_resident_experts(const moe_model *m)
{
	return m->resident;
}
