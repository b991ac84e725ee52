# lib/core.mk — errors, logging, arena, thread pool, cpu, paths, sources, atomic output.
noinst_HEADERS += lib/core.h
lib_libmoecore_a_SOURCES += lib/core/error.c lib/core/log.c lib/core/arena.c \
	lib/core/pool.c lib/core/cpu.c lib/core/paths.c \
	lib/core/source.c lib/core/out.c

check_PROGRAMS += tests/unit/t-core
TESTS += tests/unit/t-core
tests_unit_t_core_LDADD = $(MOE_LIBS)
