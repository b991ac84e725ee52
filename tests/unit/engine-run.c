/* engine-run — test helper: run the engine on token ids.
 *
 *   engine-run MODEL.uth "ID ID ..." N_GREEDY [BATCH [KV_TYPE]] > out.txt
 *
 * Prints line 1: the logits of the last prompt position (space separated,
 * %.9g); line 2: N_GREEDY greedily generated ids.  BATCH (default 256; 0:
 * the default) sets the prefill batch size, so tests can compare batched
 * and token-by-token prefill; KV_TYPE the cache type (f16, q8_0). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: engine-run MODEL \"IDS\" N_GREEDY [BATCH [KV_TYPE]]\n");
		return 2;
	}
	moe_error e = {0};
	moe_model *m;
	if (moe_model_load(&m, argv[1], &e) < 0) {
		fprintf(stderr, "engine-run: %s\n", e.msg);
		return 1;
	}
	int32_t ids[4096];
	size_t n = 0;
	for (char *s = argv[2], *end; n < 4096; s = end) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		ids[n++] = (int32_t)v;
	}
	int n_greedy = atoi(argv[3]);
	moe_engine_params ep = {.kv_size = (int)n + n_greedy + 1,
				.n_batch = argc > 4 ? atoi(argv[4]) : 0,
				.kv_type = argc > 5 && !strcmp(argv[5], "q8_0") ? MOE_Q8_0 : MOE_F16};
	moe_engine *eng;
	moe_seq *c;
	if (moe_engine_new(&eng, m, &ep, &e) < 0 || moe_seq_new(&c, eng, &e) < 0) {
		fprintf(stderr, "engine-run: %s\n", e.msg);
		return 1;
	}
	uint32_t nv = m->hp.n_vocab;
	float *logits = malloc(nv * sizeof *logits);
	if (moe_seq_eval(c, ids, n, logits, false, &e) < 0) {
		fprintf(stderr, "engine-run: %s\n", e.msg);
		return 1;
	}
	for (uint32_t i = 0; i < nv; i++)
		printf("%s%.9g", i ? " " : "", logits[i]);
	printf("\n");
	for (int g = 0; g < n_greedy; g++) {
		int32_t best = 0;
		for (uint32_t i = 1; i < nv; i++)
			if (logits[i] > logits[best])
				best = (int32_t)i;
		printf("%s%d", g ? " " : "", best);
		if (moe_seq_eval(c, &best, 1, logits, false, &e) < 0) {
			fprintf(stderr, "engine-run: %s\n", e.msg);
			return 1;
		}
	}
	printf("\n");
	free(logits);
	moe_seq_free(c);
	moe_engine_free(eng);
	moe_model_free(m);
	return 0;
}
