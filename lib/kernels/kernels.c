/* kernels/kernels.c — the kernel tables per ISA level and the run-time
 * choice among them.
 *
 * Each table starts as the generic one and the SIMD files override what they
 * implement, so a type without a SIMD kernel still works at every level.
 * Tables are built once, on first use; a SIMD fill function runs only after
 * the CPU was found to support its instructions (it is compiled with them).
 */
#include <config.h>
#include <pthread.h>
#include <stdlib.h>

#include "kernels/kernels_int.h"

static moe_kernels tables[MOE_ISA_COUNT];
static bool table_ok[MOE_ISA_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Each level's fill function, run on a copy of its parent's table (NULL:
 * not built: not an x86 host, or the compiler lacks the level's flags;
 * configure.ac). */
static void (*const fill[MOE_ISA_COUNT])(moe_kernels *) = {
	[MOE_ISA_GENERIC] = moe_kernels_fill_generic,
#if MOE_KERNELS_AVX2
	[MOE_ISA_AVX2] = moe_kernels_fill_avx2,
#endif
#if MOE_KERNELS_AVX512
	[MOE_ISA_AVX512] = moe_kernels_fill_avx512,
#endif
#if MOE_KERNELS_AVXVNNI
	[MOE_ISA_AVXVNNI] = moe_kernels_fill_avxvnni,
#endif
#if MOE_KERNELS_AVX512BF16
	[MOE_ISA_AVX512BF16] = moe_kernels_fill_avx512bf16,
#endif
};

/* The repacked-layout kernels of each level (repack_*.c), added after
 * the level's own.  AVX-VNNI runs AVX2's float sequence (avx2_body.h), so
 * it takes AVX2's (configure builds avxvnni only with avx2). */
static void (*const fill_repack[MOE_ISA_COUNT])(moe_kernels *) = {
	[MOE_ISA_GENERIC] = moe_repack_fill_generic,
#if MOE_KERNELS_AVX2
	[MOE_ISA_AVX2] = moe_repack_fill_avx2,
#endif
#if MOE_KERNELS_AVX512
	[MOE_ISA_AVX512] = moe_repack_fill_avx512,
#endif
#if MOE_KERNELS_AVXVNNI
	[MOE_ISA_AVXVNNI] = moe_repack_fill_avx2,
#endif
	/* avx512bf16: none of its own; its copy of avx512's table has them */
};

/* The F16 cache write of each level (attn_*.c, beside the attention that
 * reads the cache); a level without its own keeps its parent's. */
static const moe_f16_store_fn f16_store[MOE_ISA_COUNT] = {
	[MOE_ISA_GENERIC] = moe_f16_store_generic,
#if MOE_KERNELS_AVX2
	[MOE_ISA_AVX2] = moe_f16_store_avx2,
#endif
#if MOE_KERNELS_AVX512
	[MOE_ISA_AVX512] = moe_f16_store_avx512,
#endif
};

static void build_tables(void)
{
	unsigned f = moe_cpu_features();

	/* Parents come before their children in the table. */
	for (int isa = 0; isa < MOE_ISA_COUNT; isa++) {
		const moe_isa_info *info = moe_isa_info_get((moe_isa)isa);
		/* Every feature the level's file was compiled for, and a
		 * usable parent to start from. */
		if (!info || !fill[isa] || (f & info->features) != info->features ||
		    (info->parent >= 0 && !table_ok[info->parent]))
			continue;
		if (info->parent >= 0)
			tables[isa] = tables[info->parent];
		fill[isa](&tables[isa]);
		if (fill_repack[isa])
			fill_repack[isa](&tables[isa]);
		if (f16_store[isa])
			tables[isa].f16_store = f16_store[isa];
		tables[isa].isa = (moe_isa)isa;
		table_ok[isa] = true;
	}
}

const moe_kernels *moe_kernels_for(moe_isa isa)
{
	if ((int)isa < 0 || isa >= MOE_ISA_COUNT)
		return NULL;
	pthread_once(&tables_once, build_tables);
	return table_ok[isa] ? &tables[isa] : NULL;
}

const moe_kernels *moe_kernels_get(void)
{
	/* moe_cpu_isa() may name a level whose kernels are not built for
	 * this host: take the nearest ancestor that is. */
	for (int isa = moe_cpu_isa(); isa > MOE_ISA_GENERIC;
	     isa = moe_isa_info_get((moe_isa)isa)->parent) {
		const moe_kernels *k = moe_kernels_for((moe_isa)isa);
		if (k)
			return k;
	}
	return moe_kernels_for(MOE_ISA_GENERIC);
}

int moe_kernels_check(const moe_kernels *k, int dtype, int64_t cols, moe_error *e)
{
	const moe_type_traits *t = moe_type_get(dtype);

	/* A repacked kernel type has only a gemm (its rows are not apart). */
	if (!t || !k || (!k->vec_dot[dtype] && !(dtype >= MOE_DTYPE_MAX && k->gemm[dtype])))
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

/* The per-thread work buffer of the tiled kernels: a block of memory kept
 * by a pthread key (freed when the thread ends), grown on demand. */
static pthread_key_t work_key;
static bool work_key_ok;
static pthread_once_t work_once = PTHREAD_ONCE_INIT;

static void work_key_make(void)
{
	work_key_ok = pthread_key_create(&work_key, free) == 0;
}

void *moe_kernels_work_buffer(size_t size)
{
	struct header {
		size_t cap;
	} *h;
	pthread_once(&work_once, work_key_make);
	if (!work_key_ok || size > SIZE_MAX - 128)
		return NULL;
	h = pthread_getspecific(work_key);
	if (!h || h->cap < size) {
		void *p = aligned_alloc(64, (size + 64 + 63) / 64 * 64);
		if (!p)
			return NULL;
		if (pthread_setspecific(work_key, p) != 0) {
			free(p);
			return NULL;
		}
		free(h);
		h = p;
		h->cap = size;
	}
	return (uint8_t *)h + 64;
}
