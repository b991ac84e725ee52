/* engine-run — test helper: run the engine on token ids.
 *
 *   engine-run MODEL.uth "ID ID ..." N_GREEDY [BATCH [KV_BLOCK [all|all-keep]]] > out.txt
 *
 * Prints line 1: the logits of the last prompt position (space separated,
 * %.9g); line 2: N_GREEDY greedily generated ids.  BATCH (default 256) sets
 * the prefill batch size, so tests can compare batched and token-by-token
 * prefill; KV_BLOCK (default 64) the KV block size, so that sliding-window
 * layers keep their window only (t0435).  "all": then one line per
 * generated id, the logits that followed it; "all-keep": the same with the
 * sliding layers keeping every position (moe_engine_params.kv_keep_all).
 * On stderr, one line: the KV cache's peak bytes (moe_kv_stats).
 * ENGINE_RUN_KV_TYPE=q8_0 in the environment: a Q8_0 cache (t0412). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: engine-run MODEL \"IDS\" N_GREEDY [BATCH [KV_BLOCK [all|all-keep]]]\n");
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
				.kv_block = argc > 5 ? atoi(argv[5]) : 0,
				.kv_keep_all = argc > 6 && !strcmp(argv[6], "all-keep")};
	const char *kvt = getenv("ENGINE_RUN_KV_TYPE");
	ep.kv_type = kvt && !strcmp(kvt, "q8_0") ? MOE_Q8_0 : MOE_F16;
	bool all = argc > 6 && !strncmp(argv[6], "all", 3);
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
	/* every step's logits, kept for printing after the ids */
	float *steps = all ? malloc((size_t)(n_greedy ? n_greedy : 1) * nv * sizeof *steps) : NULL;
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
		if (steps)
			memcpy(steps + (size_t)g * nv, logits, nv * sizeof *logits);
	}
	printf("\n");
	for (int g = 0; steps && g < n_greedy; g++)
		for (uint32_t i = 0; i < nv; i++)
			printf("%.9g%s", steps[(size_t)g * nv + i], i + 1 < nv ? " " : "\n");
	free(steps);
	moe_kv_stats ks;
	moe_engine_kv_stats(eng, &ks);
	unsigned long long peak = (unsigned long long)ks.peak_used * ks.block_bytes +
				  (unsigned long long)ks.peak_win_used * ks.win_slot_bytes;
	fprintf(stderr, "kv: %d positions; peak %d blocks x %zu bytes + %d window slots x %zu "
			"bytes (%d sliding layers apart) = %llu bytes\n", moe_seq_pos(c), ks.peak_used,
		ks.block_bytes, ks.peak_win_used, ks.win_slot_bytes, ks.n_win_layers, peak);
	free(logits);
	moe_seq_free(c);
	moe_engine_free(eng);
	moe_model_free(m);
	return 0;
}
