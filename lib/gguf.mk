# lib/gguf.mk — the GGUF reader (lib/gguf.h), its unit test and fuzz target.
noinst_HEADERS += lib/gguf.h
lib_libmoecore_a_SOURCES += lib/format/gguf.c

check_PROGRAMS += tests/unit/t-gguf
TESTS += tests/unit/t-gguf
tests_unit_t_gguf_LDADD = $(MOE_LIBS)

# Seed corpus for the fuzzer (tiny valid and invalid files).
EXTRA_DIST += tests/fuzz/gguf

if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-gguf
tests_fuzz_fuzz_gguf_SOURCES = tests/fuzz/fuzz-gguf.c
tests_fuzz_fuzz_gguf_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_gguf_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_gguf_LDADD = $(MOE_LIBS)
endif
