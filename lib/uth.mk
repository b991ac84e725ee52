# lib/uth.mk — UTH v1 container: reader (mmap), validator, writer; its man page
# is man/uth.5.
noinst_HEADERS += lib/uth.h lib/format/uth_int.h
lib_libmoecore_a_SOURCES += lib/format/uth.c lib/format/uth_write.c
lib_libmoecore_a_SOURCES += lib/format/uth_stream.c

check_PROGRAMS += tests/unit/t-uth
TESTS += tests/unit/t-uth
tests_unit_t_uth_LDADD = $(MOE_LIBS)

# Seeds for the fuzzer: tiny valid files, each prefixed with the harness's
# mode byte (see tests/fuzz/fuzz-uth.c).
EXTRA_DIST += tests/fuzz/uth

if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-uth
tests_fuzz_fuzz_uth_SOURCES = tests/fuzz/fuzz-uth.c
tests_fuzz_fuzz_uth_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_uth_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_uth_LDADD = $(MOE_LIBS)
endif

check_PROGRAMS += tests/unit/t-uth-stream
TESTS += tests/unit/t-uth-stream
tests_unit_t_uth_stream_LDADD = $(MOE_LIBS)
