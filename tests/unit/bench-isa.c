/* bench-isa.c — peak rates of the instruction sequences the prefill tiles
 * are built from (not a test: built by `make`, run by hand).
 *
 * Each sequence is one loop of inline assembly with enough independent
 * accumulators to hide latencies, so it runs at the rate the core issues
 * it; the rate is taken over the thread's CPU time (time waiting for a core
 * on a shared machine is left out), best of several runs.  The clock is
 * measured the same way, by a chain of dependent adds (one a cycle), so
 * the per-cycle figures need no cycle counter (a VM often has none).
 *
 * Two kinds of lines: single instructions (how many issue per cycle), and
 * each level's inner step of a prefill tile as lib/kernels compiles it
 * (the weight and activation loads included), with the multiply-adds one
 * step does.  Their GMAC/s is the most that tile can reach: bench-kernels'
 * pp figure against it says how much headroom a kernel has.
 *
 *   bench-isa [-r RUNS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t buf[8192] __attribute__((aligned(64)));

/* Text repeated 2, 4, 8 times (the unrolled loop bodies). */
#define R2(s) s s
#define R4(s) R2(s) R2(s)
#define R8(s) R4(s) R4(s)

/* One loop: `body` iters times, with the buffer's address in %rsi (the
 * bodies read only from it); every vector register may be clobbered. */
#define LOOP(body)                                                                               \
	__asm__ volatile("mov %[b], %%rsi\n\t"                                                   \
			 "1:\n\t" body "dec %[n]\n\t"                                            \
			 "jnz 1b\n\t"                                                            \
			 : [n] "+r"(iters)                                                       \
			 : [b] "r"(buf)                                                          \
			 : "rsi", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", \
			   "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",   \
			   "xmm14", "xmm15")

/* Zero every register the bodies use (no denormals, no stale state). */
static void zero_avx2(void)
{
	__asm__ volatile("vzeroall" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
			 "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
			 "xmm15");
}

__attribute__((target("avx512f"))) static void zero_avx512(void)
{
	zero_avx2();
	__asm__ volatile(
#define Z(n) "vpxord %%zmm" #n ", %%zmm" #n ", %%zmm" #n "\n\t"
		Z(16) Z(17) Z(18) Z(19) Z(20) Z(21) Z(22) Z(23) Z(24) Z(25) Z(26) Z(27) Z(28)
			Z(29) Z(30) Z(31)
#undef Z
		::: "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",
		"xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
}

/* 32 dependent adds: 32 cycles. */
static void clock_chain(long iters)
{
	__asm__ volatile("xor %%eax, %%eax\n\t"
			 "1:\n\t" R8(R4("add $1, %%rax\n\t")) "dec %[n]\n\t"
			 "jnz 1b\n\t"
			 : [n] "+r"(iters)
			 :
			 : "rax", "cc");
}

/* Twelve independent results of one instruction from two sources. */
#define INDEP12(ins, a, b, r)                                                                    \
	ins " %%" r "12, %%" r "13, %%" r "0\n\t" ins " %%" r "12, %%" r "13, %%" r "1\n\t" ins  \
	    " %%" r "12, %%" r "13, %%" r "2\n\t" ins " %%" r "12, %%" r "13, %%" r "3\n\t" ins  \
	    " %%" r "12, %%" r "13, %%" r "4\n\t" ins " %%" r "12, %%" r "13, %%" r "5\n\t" ins  \
	    " %%" r "12, %%" r "13, %%" r "6\n\t" ins " %%" r "12, %%" r "13, %%" r "7\n\t" ins  \
	    " %%" r "12, %%" r "13, %%" r "8\n\t" ins " %%" r "12, %%" r "13, %%" r "9\n\t" ins  \
	    " %%" r "12, %%" r "13, %%" r "10\n\t" ins " %%" r "12, %%" r "13, %%" r "11\n\t"

static void s_maddubs(long iters) { LOOP(INDEP12("vpmaddubsw", 0, 0, "ymm")); }
static void s_maddwd(long iters) { LOOP(INDEP12("vpmaddwd", 0, 0, "ymm")); }
static void s_paddd(long iters) { LOOP(INDEP12("vpaddd", 0, 0, "ymm")); }
static void s_signb(long iters) { LOOP(INDEP12("vpsignb", 0, 0, "ymm")); }
/* Accumulating forms: twelve chains. */
static void s_fma_y(long iters) { LOOP(INDEP12("vfmadd231ps", 0, 0, "ymm")); }
static void s_fma_z(long iters) { LOOP(INDEP12("vfmadd231ps", 0, 0, "zmm")); }
static void s_dpbusd_y(long iters) { LOOP(INDEP12("%{vex%} vpdpbusd", 0, 0, "ymm")); }
static void s_dpbusd_z(long iters) { LOOP(INDEP12("vpdpbusd", 0, 0, "zmm")); }

/* vpmaddubsw and vpmaddwd in turn (six of each): do they share ports? */
static void s_mix(long iters)
{
	LOOP(R2("vpmaddubsw %%ymm12, %%ymm13, %%ymm0\n\t"
		"vpmaddwd %%ymm12, %%ymm13, %%ymm1\n\t"
		"vpmaddubsw %%ymm12, %%ymm13, %%ymm2\n\t"
		"vpmaddwd %%ymm12, %%ymm13, %%ymm3\n\t"
		"vpmaddubsw %%ymm12, %%ymm13, %%ymm4\n\t"
		"vpmaddwd %%ymm12, %%ymm13, %%ymm5\n\t"));
}

/* avx2's Q8_0/IQ4_NL tile step (b32x_tile, 8 rows x 4 tokens, one k4):
 * |w| and sign(w) loaded once, then per token a broadcast activation,
 * vpsignb, vpmaddubsw, vpmaddwd by ones, vpaddd.  32 x 4 MACs. */
#define Q8_AVX2_T(t, acc, tmp)                                                                   \
	"vpbroadcastd " #t "*4(%%rsi), %%ymm" #tmp "\n\t"                                        \
	"vpsignb %%ymm13, %%ymm" #tmp ", %%ymm" #tmp "\n\t"                                      \
	"vpmaddubsw %%ymm" #tmp ", %%ymm12, %%ymm" #tmp "\n\t"                                   \
	"vpmaddwd %%ymm15, %%ymm" #tmp ", %%ymm" #tmp "\n\t"                                     \
	"vpaddd %%ymm" #tmp ", %%ymm" #acc ", %%ymm" #acc "\n\t"
#define Q8_AVX2_STEP                                                                             \
	"vmovdqa 1024(%%rsi), %%ymm12\n\t"                                                       \
	"vmovdqa 2048(%%rsi), %%ymm13\n\t" Q8_AVX2_T(0, 0, 4) Q8_AVX2_T(1, 1, 5)                  \
		Q8_AVX2_T(2, 2, 6) Q8_AVX2_T(3, 3, 7)
static void s_q8_avx2(long iters) { LOOP(R4(Q8_AVX2_STEP)); }

/* avxvnni's: the same with vpdpbusd for vpmaddubsw + vpmaddwd + vpaddd. */
#define Q8_VNNI_T(t, acc, tmp)                                                                   \
	"vpbroadcastd " #t "*4(%%rsi), %%ymm" #tmp "\n\t"                                        \
	"vpsignb %%ymm13, %%ymm" #tmp ", %%ymm" #tmp "\n\t"                                      \
	"%{vex%} vpdpbusd %%ymm" #tmp ", %%ymm12, %%ymm" #acc "\n\t"
#define Q8_VNNI_STEP                                                                             \
	"vmovdqa 1024(%%rsi), %%ymm12\n\t"                                                       \
	"vmovdqa 2048(%%rsi), %%ymm13\n\t" Q8_VNNI_T(0, 0, 4) Q8_VNNI_T(1, 1, 5)                  \
		Q8_VNNI_T(2, 2, 6) Q8_VNNI_T(3, 3, 7)
static void s_q8_vnni(long iters) { LOOP(R4(Q8_VNNI_STEP)); }

/* avx512's Q8_0 rows tile step (b32_rows_tile, 16 rows x 8 tokens, one
 * k4): a weight load, then per token vpdpbusd with the activation
 * broadcast from memory.  64 x 8 MACs. */
#define Q8_Z_T(t) "vpdpbusd " #t "*4(%%rsi)%{1to16%}, %%zmm12, %%zmm" #t "\n\t"
#define Q8_Z_STEP                                                                                \
	"vmovdqa64 1024(%%rsi), %%zmm12\n\t" Q8_Z_T(0) Q8_Z_T(1) Q8_Z_T(2) Q8_Z_T(3) Q8_Z_T(4)   \
		Q8_Z_T(5) Q8_Z_T(6) Q8_Z_T(7)
static void s_q8_avx512(long iters) { LOOP(R4(Q8_Z_STEP)); }

/* avx2's F16 tile step (float_step_rt, 3 rows x 4 tokens, 8 elements):
 * three vcvtph2ps from memory, four activation loads, 12 FMAs.
 * 8 x 12 MACs. */
#define F16_Y_T(t, a0, a1, a2)                                                                   \
	"vmovups " #t "*32+2048(%%rsi), %%ymm15\n\t"                                             \
	"vfmadd231ps %%ymm12, %%ymm15, %%ymm" #a0 "\n\t"                                         \
	"vfmadd231ps %%ymm13, %%ymm15, %%ymm" #a1 "\n\t"                                         \
	"vfmadd231ps %%ymm14, %%ymm15, %%ymm" #a2 "\n\t"
#define F16_Y_STEP                                                                               \
	"vcvtph2ps 1024(%%rsi), %%ymm12\n\t"                                                     \
	"vcvtph2ps 1280(%%rsi), %%ymm13\n\t"                                                     \
	"vcvtph2ps 1536(%%rsi), %%ymm14\n\t" F16_Y_T(0, 0, 1, 2) F16_Y_T(1, 3, 4, 5)             \
		F16_Y_T(2, 6, 7, 8) F16_Y_T(3, 9, 10, 11)
static void s_f16_avx2(long iters) { LOOP(R4(F16_Y_STEP)); }

/* avx512's F16 tile step (float_tile, 4 rows x 6 tokens, 16 elements):
 * four vcvtph2ps zmm from memory, six activation loads, 24 FMAs.
 * 16 x 24 MACs. */
#define F16_Z_T(t, a0, a1, a2, a3)                                                               \
	"vmovups " #t "*64+2048(%%rsi), %%zmm28\n\t"                                             \
	"vfmadd231ps %%zmm24, %%zmm28, %%zmm" #a0 "\n\t"                                         \
	"vfmadd231ps %%zmm25, %%zmm28, %%zmm" #a1 "\n\t"                                         \
	"vfmadd231ps %%zmm26, %%zmm28, %%zmm" #a2 "\n\t"                                         \
	"vfmadd231ps %%zmm27, %%zmm28, %%zmm" #a3 "\n\t"
#define F16_Z_STEP                                                                               \
	"vcvtph2ps 1024(%%rsi), %%zmm24\n\t"                                                     \
	"vcvtph2ps 1280(%%rsi), %%zmm25\n\t"                                                     \
	"vcvtph2ps 1536(%%rsi), %%zmm26\n\t"                                                     \
	"vcvtph2ps 1792(%%rsi), %%zmm27\n\t" F16_Z_T(0, 0, 1, 2, 3) F16_Z_T(1, 4, 5, 6, 7)       \
		F16_Z_T(2, 8, 9, 10, 11) F16_Z_T(3, 12, 13, 14, 15)                              \
			F16_Z_T(4, 16, 17, 18, 19) F16_Z_T(5, 20, 21, 22, 23)
__attribute__((target("avx512f"))) static void s_f16_avx512(long iters)
{
	__asm__ volatile("mov %[b], %%rsi\n\t"
			 "1:\n\t" R4(F16_Z_STEP) "dec %[n]\n\t"
			 "jnz 1b\n\t"
			 : [n] "+r"(iters)
			 : [b] "r"(buf)
			 : "rsi", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",
			   "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
			   "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21",
			   "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28");
}

typedef struct {
	const char *name, *need; /* CPU features (__builtin_cpu_supports names) */
	int avx512;		 /* uses zmm16-31 */
	double ins, macs;	 /* per loop iteration: counted instructions, MACs */
	void (*fn)(long);
} seq;

static const seq seqs[] = {
	{"vpmaddubsw ymm", "avx2", 0, 12, 12 * 32, s_maddubs},
	{"vpmaddwd ymm", "avx2", 0, 12, 12 * 16, s_maddwd},
	{"vpmaddubsw+vpmaddwd ymm", "avx2", 0, 12, 0, s_mix},
	{"vpaddd ymm", "avx2", 0, 12, 0, s_paddd},
	{"vpsignb ymm", "avx2", 0, 12, 0, s_signb},
	{"vfmadd231ps ymm", "fma", 0, 12, 12 * 8, s_fma_y},
	{"vfmadd231ps zmm", "avx512f", 1, 12, 12 * 16, s_fma_z},
	{"vpdpbusd ymm (avxvnni)", "avxvnni", 0, 12, 12 * 32, s_dpbusd_y},
	{"vpdpbusd zmm", "avx512vnni", 1, 12, 12 * 64, s_dpbusd_z},
	{"Q8_0 step avx2 (8r x 4t)", "avx2", 0, 4 * 22, 4 * 4 * 32, s_q8_avx2},
	{"Q8_0 step avxvnni (8r x 4t)", "avxvnni", 0, 4 * 14, 4 * 4 * 32, s_q8_vnni},
	{"Q8_0 step avx512 (16r x 8t)", "avx512vnni", 1, 4 * 9, 4 * 8 * 64, s_q8_avx512},
	{"F16 step avx2 (3r x 4t)", "f16c", 0, 4 * 19, 4 * 12 * 8, s_f16_avx2},
	{"F16 step avx512 (4r x 6t)", "avx512f", 1, 4 * 34, 4 * 24 * 16, s_f16_avx512},
};

static int supports(const char *f)
{
	if (!strcmp(f, "avx2"))
		return __builtin_cpu_supports("avx2");
	if (!strcmp(f, "fma"))
		return __builtin_cpu_supports("fma");
	if (!strcmp(f, "f16c"))
		return __builtin_cpu_supports("avx2"); /* F16C comes with every AVX2 CPU */
	if (!strcmp(f, "avx512f"))
		return __builtin_cpu_supports("avx512f");
	if (!strcmp(f, "avx512vnni"))
		return __builtin_cpu_supports("avx512vnni");
	if (!strcmp(f, "avxvnni"))
		return __builtin_cpu_supports("avxvnni");
	return 0;
}

/* Best (highest) rate over `runs` runs of about 0.1 s: iterations / s. */
static double rate(void (*fn)(long), int runs)
{
	long iters = 1000;
	for (;;) { /* size a run */
		double t0 = cpu_now();
		fn(iters);
		double t = cpu_now() - t0;
		if (t > 0.02) {
			iters = (long)(iters * 0.1 / t) + 1;
			break;
		}
		iters *= 4;
	}
	double best = 0;
	for (int r = 0; r < runs; r++) {
		double t0 = cpu_now();
		fn(iters);
		double v = iters / (cpu_now() - t0);
		if (v > best)
			best = v;
	}
	return best;
}

int main(int argc, char **argv)
{
	int runs = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-r") && i + 1 < argc) {
			runs = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: bench-isa [-r RUNS]\n");
			return 2;
		}
	}
	if (runs < 1)
		runs = 1;
	__builtin_cpu_init();
	const double ghz = rate(clock_chain, runs) * 32 / 1e9;
	printf("# clock %.2f GHz (dependent adds); rates per thread, best of %d runs\n", ghz, runs);
	printf("%-30s %10s %10s %10s %10s\n", "sequence", "ins/cycle", "MAC/cycle", "GMAC/s",
	       "iter ns");
	for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
		const seq *s = &seqs[i];
		if (!supports(s->need)) {
			printf("%-30s (no %s)\n", s->name, s->need);
			continue;
		}
		if (s->avx512)
			zero_avx512();
		else
			zero_avx2();
		const double r = rate(s->fn, runs);
		const double cyc = ghz * 1e9 / r;
		printf("%-30s %10.2f %10.1f %10.1f %10.2f\n", s->name, s->ins / cyc, s->macs / cyc,
		       s->macs * r / 1e9, 1e9 / r);
	}
	return 0;
}

#else

int main(void)
{
	fprintf(stderr, "bench-isa: x86-64 only\n");
	return 1;
}

#endif
