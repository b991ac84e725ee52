/* plan.c — moe-bench --plan: which --mem-budget for this machine.  The
 * model of a decode step: the active weights read from memory at the
 * measured memory bandwidth, plus the experts the cache misses read from the
 * disk at the measured O_DIRECT bandwidth (added, not overlapped: the
 * conservative case).  The hit rate of a cache of S slots is the share of
 * the routing profile's choices that go to its S most chosen (layer, expert)
 * pairs, or S / all experts without a profile (uniform routing). */
#include "bench.h"
#include "experts.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t moe_bench_mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

static int desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x < y) - (x > y);
}

/* counts[n_all] sorted descending, from the profile; NULL: none. */
static int profile_counts(const moe_model *m, const char *path, double **out, size_t *n,
			  moe_error *e)
{
	*out = NULL;
	*n = 0;
	if (!path)
		return 0;
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j)
		return moe_err(e, MOE_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
	json_t *layers = json_object_get(j, "layers");
	size_t nx = m->hp.n_expert, cap = (size_t)m->hp.n_layer * nx;
	double *c = calloc(cap ? cap : 1, sizeof *c);
	int rc = 0;
	if (!c)
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	else if (!json_is_array(layers) || json_integer_value(json_object_get(j, "n_expert")) != (json_int_t)nx)
		rc = moe_err(e, MOE_EFORMAT, "%s: not an --expert-stats profile of this model", path);
	size_t li;
	json_t *lo;
	if (rc == 0)
		json_array_foreach(layers, li, lo) {
			json_t *a = json_object_get(lo, "counts");
			if (!json_is_array(a) || json_array_size(a) != nx || *n + nx > cap) {
				rc = moe_err(e, MOE_EFORMAT, "%s: layers[%zu]: bad counts", path, li);
				break;
			}
			/* a negative count made a "hit rate" above 1 and a negative
			 * disk read per token */
			for (size_t x = 0; x < nx && rc == 0; x++) {
				json_t *v = json_array_get(a, x);
				if (!json_is_integer(v) || json_integer_value(v) < 0)
					rc = moe_err(e, MOE_EFORMAT, "%s: layers[%zu].counts[%zu] "
						     "is not a count", path, li, x);
				else
					c[(*n)++] = (double)json_integer_value(v);
			}
			if (rc < 0)
				break;
		}
	json_decref(j);
	if (rc < 0) {
		free(c);
		*n = 0;
		return rc;
	}
	qsort(c, *n, sizeof *c, desc);
	*out = c;
	return 0;
}

int moe_bench_plan(const moe_model *m, const moe_plan_params *p, moe_plan *out, moe_error *e)
{
	memset(out, 0, sizeof *out);
	out->fixed = moe_experts_fixed_bytes(m);
	out->experts = moe_experts_total_bytes(m);
	out->slot = moe_experts_slot_bytes(m);
	out->active = (double)moe_model_active_bytes(m);
	uint64_t n_all = 0;
	int n_moe = 0;
	for (uint32_t l = 0; l < m->hp.n_layer; l++)
		n_moe += m->layers[l].is_moe;
	n_all = (uint64_t)n_moe * m->hp.n_expert;
	if (!n_all || !out->slot)
		return moe_err(e, MOE_EINVAL, "--plan: the model has no experts to stream");
	double *c;
	size_t nc;
	MOE_TRY(profile_counts(m, p->profile, &c, &nc, e));
	double total = 0;
	for (size_t i = 0; i < nc; i++)
		total += c[i];
	double per_expert = (double)out->experts / (double)n_all;
	double misses_all = (double)n_moe * m->hp.n_expert_used; /* experts per token */
	uint64_t min_slots = m->hp.n_expert;
	/* what fits: the available memory less a tenth and 64 MiB for the KV cache and buffers */
	double fit = (double)p->mem_available * 0.9 - 64.0 * 1048576;
	uint64_t fit_slots = fit > (double)out->fixed ? (uint64_t)((fit - (double)out->fixed) / (double)out->slot) : 0;
	uint64_t cand[6] = {min_slots, n_all / 4, n_all / 2, 3 * n_all / 4, n_all,
			    fit_slots < n_all ? fit_slots : n_all};
	for (int i = 0; i < 6; i++) {
		uint64_t s = cand[i];
		if (s < min_slots || (i < 5 && i > 0 && s <= min_slots))
			continue;
		double h;
		if (nc && total > 0) {
			double sum = 0;
			for (size_t k = 0; k < nc && k < s; k++)
				sum += c[k];
			h = sum / total;
		} else
			h = (double)s / (double)n_all;
		moe_plan_row *r = &out->rows[out->n++];
		r->budget = out->fixed + s * out->slot;
		r->slots = s;
		r->hit_rate = h;
		r->read_per_token = (1 - h) * misses_all * per_expert;
		double t = out->active / p->mem_bw + (p->disk_bw > 0 ? r->read_per_token / p->disk_bw : 0);
		r->tok_s = t > 0 ? 1 / t : 0;
		r->fits = s <= fit_slots;
		r->is_fit = i == 5;
	}
	out->recommended = fit_slots >= min_slots ? out->fixed + (fit_slots < n_all ? fit_slots : n_all) * out->slot : 0;
	free(c);
	return 0;
}
