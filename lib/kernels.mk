# lib/kernels.mk — compute kernels: generic C (always), AVX2, AVX-VNNI, AVX-512
# and AVX512-BF16 (each its own object with its own flags, chosen at run
# time), matmul.
noinst_HEADERS += lib/kernels.h lib/kernels/kernels_int.h lib/kernels/avx2_body.h
lib_libmoecore_a_SOURCES += lib/kernels/kernels.c lib/kernels/generic.c lib/kernels/matmul.c
# Products over the repacked (row-interleaved) layouts, one file per level
# around one loop (repack_loop.h).
lib_libmoecore_a_SOURCES += lib/kernels/repack_generic.c
noinst_HEADERS += lib/kernels/repack_loop.h lib/kernels/repack_x86.h lib/kernels/hsum_x86.h
# The attention tile: one body (attn_tile.h) compiled once per level.
noinst_HEADERS += lib/kernels/attn_tile.h
lib_libmoecore_a_SOURCES += lib/kernels/attn_generic.c

# Automake has no per-object flags, so each level's files are the only sources of
# a convenience library with the ISA's CFLAGS, and their objects are added to
# libmoecore.a directly (LIBADD of a static library takes objects).  Only
# kernels.c calls into them, after checking the CPU has every feature the
# file is compiled with (lib/core/cpu.c's level table).  x86 hosts only, and
# only the levels whose flags the compiler takes (configure.ac).
# No contraction of a * b + c into fma behind the code's back: which
# products are fused is part of the fixed reduction order that makes
# results batch-invariant, so the kernels say it explicitly.
if MOE_KERNELS_AVX2
noinst_LIBRARIES += lib/libmoe_avx2.a
lib_libmoe_avx2_a_SOURCES = lib/kernels/avx2.c lib/kernels/attn_avx2.c lib/kernels/repack_avx2.c
lib_libmoe_avx2_a_CFLAGS = $(AM_CFLAGS) $(AVX2_CFLAGS) -ffp-contract=off
lib_libmoecore_a_LIBADD += lib/kernels/libmoe_avx2_a-avx2.$(OBJEXT) \
	lib/kernels/libmoe_avx2_a-attn_avx2.$(OBJEXT) \
	lib/kernels/libmoe_avx2_a-repack_avx2.$(OBJEXT)
endif
# The same kernel body (avx2_body.h) with vpdpbusd as its dot product step.
if MOE_KERNELS_AVXVNNI
noinst_LIBRARIES += lib/libmoe_avxvnni.a
lib_libmoe_avxvnni_a_SOURCES = lib/kernels/avxvnni.c
lib_libmoe_avxvnni_a_CFLAGS = $(AM_CFLAGS) $(AVXVNNI_CFLAGS) -ffp-contract=off
lib_libmoecore_a_LIBADD += lib/kernels/libmoe_avxvnni_a-avxvnni.$(OBJEXT)
endif
if MOE_KERNELS_AVX512
noinst_LIBRARIES += lib/libmoe_avx512.a
lib_libmoe_avx512_a_SOURCES = lib/kernels/avx512.c lib/kernels/attn_avx512.c \
	lib/kernels/repack_avx512.c
lib_libmoe_avx512_a_CFLAGS = $(AM_CFLAGS) $(AVX512_CFLAGS) -ffp-contract=off
lib_libmoecore_a_LIBADD += lib/kernels/libmoe_avx512_a-avx512.$(OBJEXT) \
	lib/kernels/libmoe_avx512_a-attn_avx512.$(OBJEXT) \
	lib/kernels/libmoe_avx512_a-repack_avx512.$(OBJEXT)
endif
if MOE_KERNELS_AVX512BF16
noinst_LIBRARIES += lib/libmoe_avx512bf16.a
lib_libmoe_avx512bf16_a_SOURCES = lib/kernels/avx512bf16.c
lib_libmoe_avx512bf16_a_CFLAGS = $(AM_CFLAGS) $(AVX512BF16_CFLAGS) -ffp-contract=off
lib_libmoecore_a_LIBADD += lib/kernels/libmoe_avx512bf16_a-avx512bf16.$(OBJEXT)
endif
EXTRA_DIST += lib/kernels/avx2.c lib/kernels/avx512.c lib/kernels/attn_avx2.c \
	lib/kernels/attn_avx512.c lib/kernels/avxvnni.c lib/kernels/repack_avx2.c \
	lib/kernels/repack_avx512.c lib/kernels/avx512bf16.c

check_PROGRAMS += tests/unit/t-kernels
TESTS += tests/unit/t-kernels tests/unit/t-kernels-generic.sh tests/unit/t-kernels-isa.sh
tests_unit_t_kernels_LDADD = $(MOE_LIBS)
EXTRA_DIST += tests/unit/t-kernels-generic.sh tests/unit/t-kernels-isa.sh

# The attention tile of every level against a double reference, generic,
# and itself in other tiles (batch invariance).
check_PROGRAMS += tests/unit/t-attn
TESTS += tests/unit/t-attn
tests_unit_t_attn_LDADD = $(MOE_LIBS)

# The repacked layouts: transform, and their products equal to the plain
# ones bit for bit on every level.
check_PROGRAMS += tests/unit/t-repack
TESTS += tests/unit/t-repack
tests_unit_t_repack_LDADD = $(MOE_LIBS)

# Micro-benchmark (not a test): make tests/unit/bench-kernels
noinst_PROGRAMS += tests/unit/bench-kernels
tests_unit_bench_kernels_LDADD = $(MOE_LIBS)

# Peak rates of the instruction sequences the prefill tiles are built from
# (not a test; x86-64): make tests/unit/bench-isa
noinst_PROGRAMS += tests/unit/bench-isa
