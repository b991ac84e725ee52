/* cpu.c — CPU feature detection and the run-time ISA choice.
 *
 * Features come from cpuid, and the AVX/AVX-512/AMX register states must
 * also be enabled by the OS (xgetbv XCR0), or using them would fault.  The
 * kernels ask moe_cpu_isa() once; MOE_ISA=generic|avx2|avx512 lowers the
 * choice, which is how tests exercise every path on one machine. */
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

static int cached_features = -1;
static int cached_isa = -1;

unsigned moe_cpu_features(void)
{
	if (cached_features < 0)
		cached_features = (int)detect();
	return (unsigned)cached_features;
}

static moe_isa best_isa(unsigned f)
{
	const unsigned avx2 = MOE_CPU_AVX2 | MOE_CPU_FMA | MOE_CPU_F16C;
	const unsigned avx512 = avx2 | MOE_CPU_AVX512F | MOE_CPU_AVX512BW | MOE_CPU_AVX512VL;
	if ((f & avx512) == avx512)
		return MOE_ISA_AVX512;
	if ((f & avx2) == avx2)
		return MOE_ISA_AVX2;
	return MOE_ISA_GENERIC;
}

moe_isa moe_cpu_isa(void)
{
	if (cached_isa >= 0)
		return (moe_isa)cached_isa;
	moe_isa best = best_isa(moe_cpu_features()), isa = best;
	const char *req = getenv("MOE_ISA");
	if (req && *req) {
		moe_isa want;
		if (!strcasecmp(req, "generic"))
			want = MOE_ISA_GENERIC;
		else if (!strcasecmp(req, "avx2"))
			want = MOE_ISA_AVX2;
		else if (!strcasecmp(req, "avx512"))
			want = MOE_ISA_AVX512;
		else {
			moe_log(MOE_LOG_WARN, "MOE_ISA=%s not recognised (generic, avx2, avx512); using %s",
				req, moe_isa_name(best));
			want = best;
		}
		if (want > best)
			moe_log(MOE_LOG_WARN, "MOE_ISA=%s not supported by this CPU; using %s", req,
				moe_isa_name(best));
		else
			isa = want;
	}
	cached_isa = (int)isa;
	return isa;
}

void moe_cpu_reset_cache(void)
{
	cached_isa = -1;
}

const char *moe_isa_name(moe_isa isa)
{
	switch (isa) {
	case MOE_ISA_GENERIC: return "generic";
	case MOE_ISA_AVX2: return "avx2";
	case MOE_ISA_AVX512: return "avx512";
	}
	return "?";
}

void moe_cpu_feature_string(unsigned f, char *buf, size_t n)
{
	static const struct { unsigned bit; const char *name; } names[] = {
		{MOE_CPU_AVX2, "avx2"}, {MOE_CPU_FMA, "fma"}, {MOE_CPU_F16C, "f16c"},
		{MOE_CPU_AVX512F, "avx512f"}, {MOE_CPU_AVX512BW, "avx512bw"},
		{MOE_CPU_AVX512VL, "avx512vl"}, {MOE_CPU_AVX512VNNI, "avx512vnni"},
		{MOE_CPU_AVX512BF16, "avx512bf16"}, {MOE_CPU_AVXVNNI, "avxvnni"},
		{MOE_CPU_AMX_TILE, "amx-tile"}, {MOE_CPU_AMX_INT8, "amx-int8"},
		{MOE_CPU_AMX_BF16, "amx-bf16"},
	};
	if (!n)
		return;
	buf[0] = '\0';
	size_t len = 0;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!(f & names[i].bit))
			continue;
		int w = snprintf(buf + len, n - len, "%s%s", len ? " " : "", names[i].name);
		if (w < 0 || (size_t)w >= n - len)
			break;
		len += (size_t)w;
	}
}
