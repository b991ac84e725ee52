/* uth-diff — test helper: do two UTH files hold the same model?
 *
 *   uth-diff [--ignore KEY]... [--ignore-tensor NAME]... [--tol T] A.uth B.uth
 *
 * Compares the metadata JSON (top-level KEYs ignored, e.g. provenance) and
 * every tensor by name: same shape, and values equal after dequantisation to
 * float within T times the tensor's largest magnitude (default 0: exact).
 * Tensor types may differ (a quantised GGUF tensor against the dequantised
 * values stored as F32 in a safetensors file).  Exit 0 if equal, 1 otherwise,
 * with each difference on stderr. */
#include "quant.h"
#include "uth.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *dequant(const moe_uth *u, const moe_uth_tensor *t, uint64_t n)
{
	float *f = malloc(n * sizeof *f);
	if (f)
		moe_type_get(t->dtype)->to_float(moe_uth_data(u, t), f, (int64_t)n);
	return f;
}

int main(int argc, char **argv)
{
	const char *ignore[16], *ignore_t[16];
	int n_ignore = 0, n_ignore_t = 0;
	double tol = 0;
	int i = 1;
	for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		if (!strcmp(argv[i], "--ignore") && i + 1 < argc && n_ignore < 16)
			ignore[n_ignore++] = argv[++i];
		else if (!strcmp(argv[i], "--ignore-tensor") && i + 1 < argc && n_ignore_t < 16)
			ignore_t[n_ignore_t++] = argv[++i];
		else if (!strcmp(argv[i], "--tol") && i + 1 < argc)
			tol = atof(argv[++i]);
		else
			break;
	}
	if (argc - i != 2) {
		fprintf(stderr, "usage: uth-diff [--ignore KEY]... [--ignore-tensor NAME]... [--tol T] A B\n");
		return 2;
	}
	moe_error e = {0};
	moe_uth *a, *b;
	if (moe_uth_open(&a, argv[i], &e) < 0 || moe_uth_open(&b, argv[i + 1], &e) < 0) {
		fprintf(stderr, "uth-diff: %s\n", e.msg);
		return 2;
	}
	int diffs = 0;
	json_t *ma = json_loadb(a->meta, a->meta_len, 0, NULL);
	json_t *mb = json_loadb(b->meta, b->meta_len, 0, NULL);
	for (int k = 0; k < n_ignore; k++) {
		json_object_del(ma, ignore[k]);
		json_object_del(mb, ignore[k]);
	}
	const char *key;
	json_t *va;
	json_object_foreach(ma, key, va) {
		json_t *vb = json_object_get(mb, key);
		if (!json_equal(va, vb)) {
			char *sa = json_dumps(va, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
			char *sb = vb ? json_dumps(vb, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT) : NULL;
			fprintf(stderr, "metadata '%s' differs:\n  A: %.600s\n  B: %.600s\n", key, sa,
				sb ? sb : "(absent)");
			free(sa);
			free(sb);
			diffs++;
		}
	}
	json_object_foreach(mb, key, va) {
		if (!json_object_get(ma, key)) {
			fprintf(stderr, "metadata '%s' only in B\n", key);
			diffs++;
		}
	}
	json_decref(ma);
	json_decref(mb);

	if (a->n_tensors != b->n_tensors) {
		fprintf(stderr, "tensor count differs: %llu vs %llu\n", (unsigned long long)a->n_tensors,
			(unsigned long long)b->n_tensors);
		diffs++;
	}
	for (uint64_t t = 0; t < a->n_tensors; t++) {
		const moe_uth_tensor *ta = &a->tensors[t], *tb = moe_uth_find(b, ta->name);
		bool skip = false;
		for (int k = 0; k < n_ignore_t; k++)
			skip |= !strcmp(ta->name, ignore_t[k]);
		if (skip)
			continue;
		if (!tb) {
			fprintf(stderr, "tensor '%s' only in A\n", ta->name);
			diffs++;
			continue;
		}
		if (memcmp(ta->ne, tb->ne, sizeof ta->ne) || ta->role != tb->role ||
		    ta->layer != tb->layer || ta->expert != tb->expert) {
			fprintf(stderr, "tensor '%s': shape/role/layer/expert differ\n", ta->name);
			diffs++;
			continue;
		}
		uint64_t n = (uint64_t)ta->ne[0] * ta->ne[1] * ta->ne[2] * ta->ne[3];
		if (ta->dtype == tb->dtype && ta->xxh3 == tb->xxh3)
			continue;
		if (ta->dtype == MOE_I8 || ta->dtype == MOE_I32 || tb->dtype == MOE_I8 || tb->dtype == MOE_I32) {
			fprintf(stderr, "tensor '%s': integer data differs\n", ta->name);
			diffs++;
			continue;
		}
		float *fa = dequant(a, ta, n), *fb = dequant(b, tb, n);
		double amax = 0, dmax = 0;
		uint64_t worst = 0;
		for (uint64_t k = 0; k < n; k++) {
			amax = fmax(amax, fabs(fa[k]));
			double d = fabs((double)fa[k] - fb[k]);
			if (d > dmax || isnan(d))
				dmax = isnan(d) ? INFINITY : d, worst = k;
		}
		if (dmax > tol * amax) {
			fprintf(stderr, "tensor '%s' (%s vs %s): max |diff| %g at %llu (%g vs %g), max |a| %g\n",
				ta->name, moe_type_name(ta->dtype), moe_type_name(tb->dtype), dmax,
				(unsigned long long)worst, fa[worst], fb[worst], amax);
			diffs++;
		}
		free(fa);
		free(fb);
	}
	moe_uth_close(a);
	moe_uth_close(b);
	if (diffs)
		fprintf(stderr, "uth-diff: %d difference(s)\n", diffs);
	return diffs ? 1 : 0;
}
