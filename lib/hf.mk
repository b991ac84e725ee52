# lib/hf.mk — Hugging Face snapshots (lib/hf.h): safetensors parser, archive
# input through libarchive, the snapshot reader; its unit test and fuzz target.
noinst_HEADERS += lib/hf.h
lib_libmoecore_a_SOURCES += lib/format/safetensors.c lib/format/archive.c lib/format/hf.c

check_PROGRAMS += tests/unit/t-hf
TESTS += tests/unit/t-hf
tests_unit_t_hf_CFLAGS = $(AM_CFLAGS) $(ARCHIVE_CFLAGS)
tests_unit_t_hf_LDADD = $(MOE_LIBS)

# Seed corpus for the fuzzers (tiny valid and invalid files).
EXTRA_DIST += tests/fuzz/safetensors tests/fuzz/tokenizer-json tests/fuzz/archive

if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-safetensors
tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz-safetensors.c
tests_fuzz_fuzz_safetensors_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_safetensors_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_safetensors_LDADD = $(MOE_LIBS)
tests_fuzz_fuzz_tokenizer_json_SOURCES = tests/fuzz/fuzz-tokenizer-json.c
tests_fuzz_fuzz_tokenizer_json_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_tokenizer_json_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_tokenizer_json_LDADD = $(MOE_LIBS)
noinst_PROGRAMS += tests/fuzz/fuzz-tokenizer-json
noinst_PROGRAMS += tests/fuzz/fuzz-archive
tests_fuzz_fuzz_archive_SOURCES = tests/fuzz/fuzz-archive.c
tests_fuzz_fuzz_archive_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_archive_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_archive_LDADD = $(MOE_LIBS)
endif
