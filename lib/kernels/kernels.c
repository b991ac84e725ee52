/* kernels/kernels.c — the kernel tables per ISA level and the run-time
 * choice among them.
 *
 * Each table starts as the generic one and the SIMD files override what they
 * implement, so a type without a SIMD kernel still works at every level.
 * Tables are built once, on first use; a SIMD fill function runs only after
 * the CPU was found to support its instructions (it is compiled with them).
 */
#include <pthread.h>

#include "kernels/kernels_int.h"

static moe_kernels tables[3];
static bool table_ok[3];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
	unsigned f = moe_cpu_features();
	const unsigned avx2 = MOE_CPU_AVX2 | MOE_CPU_FMA | MOE_CPU_F16C;
	/* The AVX-512 file also uses VNNI (vpdpbusd, vpdpwssd). */
	const unsigned avx512 = avx2 | MOE_CPU_AVX512F | MOE_CPU_AVX512BW | MOE_CPU_AVX512VL |
				MOE_CPU_AVX512VNNI;

	moe_kernels_fill_generic(&tables[MOE_ISA_GENERIC]);
	table_ok[MOE_ISA_GENERIC] = true;
#if defined(__x86_64__)
	if ((f & avx2) == avx2) {
		tables[MOE_ISA_AVX2] = tables[MOE_ISA_GENERIC];
		moe_kernels_fill_avx2(&tables[MOE_ISA_AVX2]);
		tables[MOE_ISA_AVX2].isa = MOE_ISA_AVX2;
		table_ok[MOE_ISA_AVX2] = true;
	}
	if ((f & avx512) == avx512) {
		tables[MOE_ISA_AVX512] = tables[MOE_ISA_AVX2];
		moe_kernels_fill_avx512(&tables[MOE_ISA_AVX512]);
		tables[MOE_ISA_AVX512].isa = MOE_ISA_AVX512;
		table_ok[MOE_ISA_AVX512] = true;
	}
#else
	(void)f;
	(void)avx2;
	(void)avx512;
#endif
}

const moe_kernels *moe_kernels_for(moe_isa isa)
{
	if ((int)isa < 0 || isa > MOE_ISA_AVX512)
		return NULL;
	pthread_once(&tables_once, build_tables);
	return table_ok[isa] ? &tables[isa] : NULL;
}

const moe_kernels *moe_kernels_get(void)
{
	/* moe_cpu_isa() may name a level whose table is missing (an AVX-512
	 * CPU without VNNI or BF16): take the best one below it. */
	for (int isa = moe_cpu_isa(); isa > MOE_ISA_GENERIC; isa--) {
		const moe_kernels *k = moe_kernels_for((moe_isa)isa);
		if (k)
			return k;
	}
	return moe_kernels_for(MOE_ISA_GENERIC);
}

int moe_kernels_check(const moe_kernels *k, int dtype, int64_t cols, moe_error *e)
{
	const moe_type_traits *t = moe_type_get(dtype);

	if (!t || !k || !k->vec_dot[dtype])
		return moe_err(e, MOE_EUNSUPPORTED, "no matrix product kernel for weight type %s",
			       moe_type_name(dtype));
	if (cols <= 0 || cols % t->block_size)
		return moe_err(e, MOE_EFORMAT,
			       "%s weights: %lld columns is not a positive multiple of the block "
			       "size %u",
			       t->name, (long long)cols, t->block_size);
	const moe_type_traits *a = moe_type_get(t->vec_dot_type);
	if (!a || (a->is_quantized && !k->quantize_row[t->vec_dot_type]) ||
	    cols % a->block_size)
		return moe_err(e, MOE_EFORMAT,
			       "%s weights: %lld columns do not fit the activation type %s",
			       t->name, (long long)cols, moe_type_name(t->vec_dot_type));
	return 0;
}
