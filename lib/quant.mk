# lib/quant.mk — the dtype traits table, reference codecs, the searching weight
# quantisers, recipes, importance matrices, model quantisation and the expert planner.
noinst_HEADERS += lib/quant.h lib/quant/blocks.h
lib_libmoecore_a_SOURCES += lib/quant/types.c lib/quant/legacy.c lib/quant/kquants.c \
	lib/quant/search.c lib/quant/rows.c \
	lib/quant/recipe.c lib/quant/imatrix.c lib/quant/model.c lib/quant/plan.c lib/quant/repack.c

check_PROGRAMS += tests/unit/t-quant
TESTS += tests/unit/t-quant
tests_unit_t_quant_LDADD = $(MOE_LIBS)

check_PROGRAMS += tests/unit/t-quant-search
TESTS += tests/unit/t-quant-search
tests_unit_t_quant_search_LDADD = $(MOE_LIBS)

check_PROGRAMS += tests/unit/t-quant-imatrix
TESTS += tests/unit/t-quant-imatrix
tests_unit_t_quant_imatrix_LDADD = $(MOE_LIBS)

# Repacked (row-interleaved) models end to end: the plain model's logits on
# every kernel set, the numpy reference, the expert store, moe-quant --repack.
TESTS += tests/cli/t0432-engine-repack.sh
EXTRA_DIST += tests/cli/t0432-engine-repack.sh

# Fuzz target (configure --enable-fuzz, CC=clang): the importance matrix
# reader (ours and llama.cpp's imatrix.dat); seeds in tests/fuzz/imatrix.
EXTRA_DIST += tests/fuzz/imatrix tests/fuzz/quant-plan
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-imatrix
tests_fuzz_fuzz_imatrix_SOURCES = tests/fuzz/fuzz-imatrix.c
tests_fuzz_fuzz_imatrix_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_imatrix_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_imatrix_LDADD = $(MOE_LIBS)
# moe-quant --expert-profile's routing profile, planned for the demo model
noinst_PROGRAMS += tests/fuzz/fuzz-quant-plan
tests_fuzz_fuzz_quant_plan_SOURCES = tests/fuzz/fuzz-quant-plan.c
tests_fuzz_fuzz_quant_plan_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_fuzz_quant_plan_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_quant_plan_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_quant_plan_LDADD = $(MOE_LIBS)
endif
