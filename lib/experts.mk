# lib/experts.mk — the streamed expert store (models larger than RAM):
# slot cache, O_DIRECT reads through io_uring, prefetch, statistics.
noinst_HEADERS += lib/experts.h
lib_libmoecore_a_SOURCES += lib/experts/store.c

check_PROGRAMS += tests/unit/t-experts
TESTS += tests/unit/t-experts
tests_unit_t_experts_LDADD = $(MOE_LIBS)
tests_unit_t_experts_CPPFLAGS = $(AM_CPPFLAGS) -DMOE_SRC_SHAREDIR='"$(abs_top_srcdir)/share"'
TESTS += tests/cli/t1000-stream.sh tests/cli/t1010-stream-cgroup.sh
EXTRA_DIST += tests/cli/t1000-stream.sh tests/cli/t1010-stream-cgroup.sh

# Fuzz target (configure --enable-fuzz, CC=clang): the warm-start profile
# (--expert-profile); seeds in tests/fuzz/expert-profile.
EXTRA_DIST += tests/fuzz/expert-profile
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-expert-profile
tests_fuzz_fuzz_expert_profile_SOURCES = tests/fuzz/fuzz-expert-profile.c
tests_fuzz_fuzz_expert_profile_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_expert_profile_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_fuzz_expert_profile_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_expert_profile_LDADD = $(MOE_LIBS)
endif
