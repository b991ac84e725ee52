/* bench-kernels.c — micro-benchmark of moe_matmul per weight type and ISA
 * (not a test: built with `make tests/unit/bench-kernels`, run by hand).
 *
 * decode:  one token through rows x cols weights.  Several copies of the
 *          matrix (together larger than the L3 cache) are used in turn so
 *          the weights come from memory as in a real model; reports GB/s of
 *          weights streamed and GFLOP/s.
 * prefill: n tokens (default 512) through one matrix; reports GFLOP/s (twice
 *          the multiply-adds a second).  With -M each run takes the next copy
 *          of the matrix, last touched 256 MiB ago, so its weights come from
 *          memory once (an expert's product in a prompt); without it the
 *          same copy every run (cached, the kernel's arithmetic alone).
 * Each figure is the median of --reps runs.
 *
 *   bench-kernels [-t THREADS] [-r REPS] [-m ROWSxCOLS] [-n PREFILL_TOKENS]
 *                 [-d DECODE_TOKENS] [-i generic|avx2|avxvnni|avx512|all] [-H] [-S] [-M] [-b] [-c]
 *                 [TYPE...]
 * -d: tokens per decode product (default 1; 2-12 is an expert's share of a
 *     batched step), weights still streamed from memory.
 * -H: decode from one cache-resident copy (kernel speed without memory).
 * -S: decode visits the copies in a scattered order, so no product starts
 *     where the previous one ended (a model's experts: the next one is
 *     elsewhere, and what the last product prefetched past its end is
 *     not used).
 * -M: prefill from memory (above; not with -H).
 * -b: report the fastest run instead of the median.
 * -c: time with the process's CPU clock instead of the wall clock (with
 *     -t 1 on a shared machine: time spent waiting for a core is left out).
 */
#include <time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels.h"
#define TEST_RNG_SEED 88172645463325252ull
#include "testrand.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static bool use_best, use_cpu;

static int gcd_int(int a, int b)
{
	while (b) {
		int t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static double now(void)
{
	struct timespec ts;
	if (!use_cpu)
		return moe_time_now();
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The median, or with -b the fastest run (for kernel tuning on a machine
 * others are using: interference only ever slows a run down). */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	if (use_best)
		return v[0];
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Types without a reference quantiser: random bytes with the f16 scales
 * (offsets from lib/quant/blocks.h) set to 2^-6 (0x2400), so the speed is
 * that of ordinary finite data. */
static void random_blocks(int dt, uint8_t *p, size_t n)
{
	const moe_type_traits *t = moe_type_get(dt);
	static const struct { int type, off[2]; } scales[] = {
		{MOE_Q2_K, {80, 82}}, {MOE_Q3_K, {108, -1}}, {MOE_IQ4_XS, {0, -1}},
	};
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((int)(frand() * 128.0f) & 0xFF);
	for (size_t k = 0; k < sizeof(scales) / sizeof(scales[0]); k++) {
		if (scales[k].type != dt)
			continue;
		for (size_t b = 0; b + t->type_size <= n; b += t->type_size)
			for (int j = 0; j < 2; j++)
				if (scales[k].off[j] >= 0)
					memcpy(p + b + scales[k].off[j], &(uint16_t){0x2400}, 2);
	}
}

int main(int argc, char **argv)
{
	int threads = 2, reps = 9, n_prefill = 512, n_dec = 1, isa_sel = -1;
	bool hot = false, best = false, pp_mem = false, scatter = false;
	int64_t rows = 4096, cols = 4096;
	int types[MOE_DTYPE_MAX], n_types = 0;
	moe_error e;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-t") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-r") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-b"))
			best = true;
		else if (!strcmp(argv[i], "-c"))
			use_cpu = true;
		else if (!strcmp(argv[i], "-H"))
			hot = true;
		else if (!strcmp(argv[i], "-S"))
			scatter = true;
		else if (!strcmp(argv[i], "-M"))
			pp_mem = true;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n_prefill = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-d") && i + 1 < argc)
			n_dec = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
			long long a, b;
			if (sscanf(argv[++i], "%lldx%lld", &a, &b) != 2) {
				fprintf(stderr, "bad -m %s (want ROWSxCOLS)\n", argv[i]);
				return 2;
			}
			rows = a;
			cols = b;
		} else if (!strcmp(argv[i], "-i") && i + 1 < argc) {
			const char *s = argv[++i];
			isa_sel = -1;
			for (int l = 0; l < MOE_ISA_COUNT; l++)
				if (!strcasecmp(s, moe_isa_name((moe_isa)l)))
					isa_sel = l;
		} else {
			int t = moe_type_from_name(argv[i]);
			if (t < 0) {
				fprintf(stderr, "unknown type or option %s\n", argv[i]);
				return 2;
			}
			types[n_types++] = t;
		}
	}
	if (!n_types) {
		static const int def[] = {MOE_Q4_K, MOE_Q5_K, MOE_Q6_K, MOE_Q8_0, MOE_Q4_0,
					  MOE_F16, MOE_BF16};
		for (size_t i = 0; i < sizeof(def) / sizeof(def[0]); i++)
			types[n_types++] = def[i];
	}
	use_best = best;
	if (reps < 1 || reps > 1000)
		reps = 9;
	if (n_prefill < 1)
		n_prefill = 512;
	if (n_dec < 1 || n_dec > n_prefill)
		n_dec = 1;

	moe_pool *pool = NULL;
	if (moe_pool_create(&pool, threads, &e) < 0) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	float *X = malloc(sizeof(float) * (size_t)cols * n_prefill);
	float *Y = malloc(sizeof(float) * (size_t)rows * n_prefill);
	for (int64_t i = 0; i < cols * n_prefill; i++)
		X[i] = frand();

	printf("# %lldx%lld, %d threads, %s of %d runs; decode (%d token%s) streams copies "
	       "totalling >= 256 MiB%s%s; prefill %s\n",
	       (long long)rows, (long long)cols, threads, best ? "best" : "median", reps, n_dec,
	       n_dec == 1 ? "" : "s", hot ? " (not with -H)" : "", scatter ? " in scattered order" : "",
	       pp_mem && !hot ? "from memory" : "cached");
	printf("%-7s %-7s %10s %10s %10s %12s %12s\n", "type", "isa", "dec GB/s", "dec GFLOP",
	       "dec us", "pp GFLOP/s", "pp tok/s");
	for (int ti = 0; ti < n_types; ti++) {
		int dt = types[ti];
		const moe_type_traits *tr = moe_type_get(dt);
		uint64_t rb;
		if (!tr || moe_type_nbytes(dt, (uint64_t)cols, &rb, &e) < 0) {
			fprintf(stderr, "%s: unknown type or bad width\n", moe_type_name(dt));
			continue;
		}
		size_t mb = (size_t)rb * (size_t)rows;
		int copies = hot ? 1 : (int)((256u << 20) / mb) + 1;
		/* -S: copy c goes (c * step) % copies, step coprime with copies
		 * and far from 1 */
		int step = 1;
		if (scatter && copies > 2) {
			step = copies / 3 + 1;
			while (gcd_int(step, copies) != 1)
				step++;
		}
		uint8_t *W = malloc(mb * copies);
		float *f = malloc(sizeof(float) * (size_t)cols);
		for (int64_t r = 0; r < rows; r++) {
			if (tr->from_float) {
				for (int64_t c = 0; c < cols; c++)
					f[c] = frand() * 0.05f;
				tr->from_float(f, W + r * rb, cols);
			} else {
				random_blocks(dt, W + r * rb, (size_t)rb);
			}
		}
		for (int c = 1; c < copies; c++)
			memcpy(W + c * mb, W, mb);
		free(f);
		size_t sb = moe_matmul_scratch(dt, cols, n_prefill);
		void *scratch = malloc(sb ? sb : 1);

		for (int isa = 0; isa < MOE_ISA_COUNT; isa++) {
			const moe_kernels *k = moe_kernels_for((moe_isa)isa);
			if (!k || (isa_sel >= 0 && isa != isa_sel))
				continue;
			double tdec[1000], tpp[1000];
			/* decode: every rep goes through all copies once */
			for (int c = 0; c < copies; c++) /* warm up */
				moe_matmul(k, pool, dt, W + c * mb, rows, cols, X, cols, n_dec, Y,
					   rows, scratch);
			for (int r = 0; r < reps; r++) {
				double t0 = now();
				for (int c = 0; c < copies; c++)
					moe_matmul(k, pool, dt,
						   W + (size_t)((int64_t)c * step % copies) * mb, rows,
						   cols, X, cols, n_dec, Y, rows, scratch);
				for (int c = 0; hot && c < 99; c++) /* repeat the hot copy */
					moe_matmul(k, pool, dt, W, rows, cols, X, cols, n_dec, Y,
						   rows, scratch);
				tdec[r] = (now() - t0) / (hot ? 100 : copies);
			}
			double dec = median(tdec, reps);
			int pp_reps = isa == 0 ? 1 : reps;
			for (int r = 0; r < pp_reps; r++) {
				const uint8_t *Wp = W + (pp_mem ? (size_t)(r % copies) * mb : 0);
				double t0 = now();
				moe_matmul(k, pool, dt, Wp, rows, cols, X, cols, n_prefill, Y, rows,
					   scratch);
				tpp[r] = now() - t0;
			}
			double pp = median(tpp, pp_reps);
			double flop = 2.0 * rows * cols * n_dec;
			printf("%-7s %-7s %10.2f %10.2f %10.1f %12.1f %12.1f\n", tr->name,
			       moe_isa_name((moe_isa)isa), mb / dec / 1e9, flop / dec / 1e9,
			       dec * 1e6, flop / n_dec * n_prefill / pp / 1e9, n_prefill / pp);
			fflush(stdout);
		}
		free(W);
		free(scratch);
	}
	free(X);
	free(Y);
	moe_pool_free(pool);
	return 0;
}
