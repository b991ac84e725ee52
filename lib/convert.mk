# lib/convert.mk — GGUF/HF -> UTH conversion (hparams live in lib/arch.mk).
noinst_HEADERS += lib/convert.h
lib_libmoecore_a_SOURCES += lib/convert/convert.c

# Test helper: compares two UTH files (metadata and dequantised tensors).
check_PROGRAMS += tests/unit/uth-diff
tests_unit_uth_diff_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_uth_diff_LDADD = $(MOE_LIBS)
