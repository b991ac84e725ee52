# lib/model.mk — model binding (UTH -> weights), the resident expert store,
# the sampler.
noinst_HEADERS += lib/model.h lib/sampler.h
lib_libmoecore_a_SOURCES += lib/model/load.c lib/model/experts.c lib/model/sampler.c

check_PROGRAMS += tests/unit/t-sampler
TESTS += tests/unit/t-sampler
tests_unit_t_sampler_LDADD = $(MOE_LIBS)
