# lib/convert.mk — architectures, hparams normalisation, GGUF/HF -> UTH conversion.
noinst_HEADERS += lib/arch.h lib/convert.h
lib_libmoecore_a_SOURCES += lib/convert/arch.c lib/convert/convert.c

# Test helper: compares two UTH files (metadata and dequantised tensors).
check_PROGRAMS += tests/unit/uth-diff
tests_unit_uth_diff_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_uth_diff_LDADD = $(MOE_LIBS)
