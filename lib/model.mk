# lib/model.mk — model binding (UTH -> weights), forward pass, KV cache.
noinst_HEADERS += lib/model.h lib/sampler.h lib/generate.h
lib_libmoecore_a_SOURCES += lib/model/load.c lib/model/forward.c lib/model/sampler.c lib/model/generate.c

check_PROGRAMS += tests/unit/t-sampler
TESTS += tests/unit/t-sampler
tests_unit_t_sampler_LDADD = $(MOE_LIBS)

# Test helper: logits and greedy ids for token ids (compared with tests/ref).
check_PROGRAMS += tests/unit/engine-run
tests_unit_engine_run_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_engine_run_LDADD = $(MOE_LIBS)
