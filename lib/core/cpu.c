/* cpu.c — CPU feature detection and the run-time ISA choice.
 *
 * Features come from cpuid, and the AVX/AVX-512/AMX register states must
 * also be enabled by the OS (xgetbv XCR0), or using them would fault.  The
 * kernels ask moe_cpu_isa() once; MOE_ISA=generic|avx2|avxvnni|avx512|
 * avx512bf16 picks another level the CPU supports, which is how tests
 * exercise every path on one machine, and MOE_CPU_DISABLE=feature,... hides
 * features to simulate other CPUs. */
#include "core.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

static unsigned detect(void)
{
	unsigned a, b, c, d, f = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
	if (!osxsave)
		return 0;
	uint64_t xcr0 = xgetbv0();
	bool ymm_ok = (xcr0 & 0x6) == 0x6;       /* SSE + AVX state */
	bool zmm_ok = (xcr0 & 0xe6) == 0xe6;     /* + opmask, ZMM_Hi256, Hi16_ZMM */
	bool amx_ok = (xcr0 & (3u << 17)) == (3u << 17); /* XTILECFG + XTILEDATA */
	if (!ymm_ok)
		return 0;
	if (fma)
		f |= MOE_CPU_FMA;
	if (f16c)
		f |= MOE_CPU_F16C;
	if (__get_cpuid_max(0, NULL) < 7)
		return f;
	__cpuid_count(7, 0, a, b, c, d);
	if (b & (1u << 5))
		f |= MOE_CPU_AVX2;
	if (zmm_ok) {
		if (b & (1u << 16))
			f |= MOE_CPU_AVX512F;
		if (b & (1u << 30))
			f |= MOE_CPU_AVX512BW;
		if (b & (1u << 31))
			f |= MOE_CPU_AVX512VL;
		if (c & (1u << 11))
			f |= MOE_CPU_AVX512VNNI;
	}
	if (amx_ok) {
		if (d & (1u << 24))
			f |= MOE_CPU_AMX_TILE;
		if (d & (1u << 25))
			f |= MOE_CPU_AMX_INT8;
		if (d & (1u << 22))
			f |= MOE_CPU_AMX_BF16;
	}
	unsigned a1, b1, c1, d1;
	__cpuid_count(7, 1, a1, b1, c1, d1);
	if (zmm_ok && (a1 & (1u << 5)))
		f |= MOE_CPU_AVX512BF16;
	if (a1 & (1u << 4))
		f |= MOE_CPU_AVXVNNI;
	return f;
}
#else
static unsigned detect(void)
{
	return 0;
}
#endif

/* The kernel levels: each names every CPU feature its kernel file is
 * compiled for (kernels.mk, configure.ac's *_CFLAGS must agree) and the level
 * below it, whose kernels fill in the types it has none for.  A level is
 * usable only when the CPU has all of its features: a missing one would be a
 * SIGILL inside a kernel.  Parents come before their children; among
 * levels on different branches the one listed first is preferred (see
 * moe_cpu_isa_for): avxvnni is a child of avx2, not of avx512, because
 * many AVX-512 CPUs lack AVX-VNNI, and a CPU with both gets avx512. */
static const moe_isa_info isa_table[] = {
	[MOE_ISA_GENERIC] = {MOE_ISA_GENERIC, "generic", 0, -1},
	[MOE_ISA_AVX2] = {MOE_ISA_AVX2, "avx2", MOE_CPU_AVX2 | MOE_CPU_FMA | MOE_CPU_F16C,
			  MOE_ISA_GENERIC},
	[MOE_ISA_AVX512] = {MOE_ISA_AVX512, "avx512",
			    MOE_CPU_AVX2 | MOE_CPU_FMA | MOE_CPU_F16C | MOE_CPU_AVX512F |
				    MOE_CPU_AVX512BW | MOE_CPU_AVX512VL | MOE_CPU_AVX512VNNI,
			    MOE_ISA_AVX2},
	[MOE_ISA_AVXVNNI] = {MOE_ISA_AVXVNNI, "avxvnni",
			     MOE_CPU_AVX2 | MOE_CPU_FMA | MOE_CPU_F16C | MOE_CPU_AVXVNNI,
			     MOE_ISA_AVX2},
	/* vdpbf16ps for BF16 weights (lib/kernels/avx512bf16.c); every other
	 * type keeps avx512's kernels. */
	[MOE_ISA_AVX512BF16] = {MOE_ISA_AVX512BF16, "avx512bf16",
				MOE_CPU_AVX2 | MOE_CPU_FMA | MOE_CPU_F16C | MOE_CPU_AVX512F |
					MOE_CPU_AVX512BW | MOE_CPU_AVX512VL |
					MOE_CPU_AVX512VNNI | MOE_CPU_AVX512BF16,
				MOE_ISA_AVX512},
};

#define N_LEVELS (int)(sizeof isa_table / sizeof isa_table[0])
_Static_assert(N_LEVELS == MOE_ISA_COUNT, "a level table entry per moe_isa");

static bool usable(int i, unsigned f)
{
	return (f & isa_table[i].features) == isa_table[i].features;
}

/* Whether level a is b or one of b's descendants. */
static bool descends(int a, int b)
{
	for (; a >= 0; a = isa_table[a].parent)
		if (a == b)
			return true;
	return false;
}

const moe_isa_info *moe_isa_info_get(moe_isa isa)
{
	if ((int)isa < 0 || (size_t)isa >= sizeof isa_table / sizeof isa_table[0])
		return NULL;
	return &isa_table[isa];
}

static const struct {
	unsigned bit;
	const char *name;
} feature_names[] = {
	{MOE_CPU_AVX2, "avx2"}, {MOE_CPU_FMA, "fma"}, {MOE_CPU_F16C, "f16c"},
	{MOE_CPU_AVX512F, "avx512f"}, {MOE_CPU_AVX512BW, "avx512bw"},
	{MOE_CPU_AVX512VL, "avx512vl"}, {MOE_CPU_AVX512VNNI, "avx512vnni"},
	{MOE_CPU_AVX512BF16, "avx512bf16"}, {MOE_CPU_AVXVNNI, "avxvnni"},
	{MOE_CPU_AMX_TILE, "amx-tile"}, {MOE_CPU_AMX_INT8, "amx-int8"},
	{MOE_CPU_AMX_BF16, "amx-bf16"},
};

unsigned moe_cpu_feature_parse(const char *list)
{
	unsigned f = 0;
	const char *p = list;
	while (p && *p) {
		size_t len = strcspn(p, ", ");
		for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++)
			if (strlen(feature_names[i].name) == len &&
			    !strncasecmp(p, feature_names[i].name, len))
				f |= feature_names[i].bit;
		p += len;
		p += strspn(p, ", ");
	}
	return f;
}

static int cached_features = -1;
static int cached_isa = -1;

unsigned moe_cpu_features(void)
{
	if (cached_features < 0) {
		/* MOE_CPU_DISABLE hides features, as if the CPU lacked them: how
		 * tests check the dispatch for CPUs this machine is not. */
		unsigned f = detect() & ~moe_cpu_feature_parse(getenv("MOE_CPU_DISABLE"));
		cached_features = (int)f;
	}
	return (unsigned)cached_features;
}

bool moe_isa_built(moe_isa isa)
{
	switch (isa) {
	case MOE_ISA_GENERIC:
		return true;
	case MOE_ISA_AVX2:
		return MOE_KERNELS_AVX2;
	case MOE_ISA_AVXVNNI:
		return MOE_KERNELS_AVXVNNI;
	case MOE_ISA_AVX512:
		return MOE_KERNELS_AVX512;
	case MOE_ISA_AVX512BF16:
		return MOE_KERNELS_AVX512BF16;
	default:
		return false;
	}
}

/* The best usable level (among the built ones only, if built_only). */
static moe_isa best_for(unsigned f, bool built_only)
{
	int best = MOE_ISA_GENERIC;
	for (int i = 1; i < N_LEVELS; i++)
		if (usable(i, f) && descends(i, best) && (!built_only || moe_isa_built((moe_isa)i)))
			best = i;
	return (moe_isa)best;
}

moe_isa moe_cpu_isa_for(unsigned f)
{
	return best_for(f, false);
}

moe_isa moe_cpu_isa(void)
{
	if (cached_isa >= 0)
		return (moe_isa)cached_isa;
	unsigned f = moe_cpu_features();
	moe_isa best = best_for(f, true), isa = best;
	const char *req = getenv("MOE_ISA");
	if (req && *req) {
		int want = -1;
		for (int i = 0; i < N_LEVELS; i++)
			if (!strcasecmp(req, isa_table[i].name))
				want = i;
		if (want < 0)
			moe_log(MOE_LOG_WARN,
				"MOE_ISA=%s not recognised (generic, avx2, avxvnni, avx512, "
				"avx512bf16); using %s",
				req, moe_isa_name(best));
		else if (!moe_isa_built((moe_isa)want))
			moe_log(MOE_LOG_WARN,
				"MOE_ISA=%s: this build has no %s kernels (the compiler did not "
				"take their flags at configure time); using %s",
				req, moe_isa_name((moe_isa)want), moe_isa_name(best));
		else if (!usable(want, f))
			moe_log(MOE_LOG_WARN, "MOE_ISA=%s not supported by this CPU; using %s", req,
				moe_isa_name(best));
		else
			isa = (moe_isa)want;
	}
	cached_isa = (int)isa;
	return isa;
}

void moe_cpu_reset_cache(void)
{
	cached_isa = -1;
	cached_features = -1;
}

const char *moe_isa_name(moe_isa isa)
{
	const moe_isa_info *i = moe_isa_info_get(isa);
	return i ? i->name : "?";
}

void moe_cpu_feature_string(unsigned f, char *buf, size_t n)
{
	if (!n)
		return;
	buf[0] = '\0';
	size_t len = 0;
	for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++) {
		if (!(f & feature_names[i].bit))
			continue;
		int w = snprintf(buf + len, n - len, "%s%s", len ? " " : "", feature_names[i].name);
		if (w < 0 || (size_t)w >= n - len)
			break;
		len += (size_t)w;
	}
}
