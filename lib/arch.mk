# lib/arch.mk — architectures, hyper-parameters and their one validation
# (lib/arch.h), shared by the converter and the loader.
noinst_HEADERS += lib/arch.h
lib_libmoecore_a_SOURCES += lib/arch/arch.c lib/arch/hparams.c lib/arch/check.c

# The shared validation on the loader's side (hand-made UTH files) and on
# its own.
check_PROGRAMS += tests/unit/t-arch
TESTS += tests/unit/t-arch
tests_unit_t_arch_LDADD = $(MOE_LIBS)

# config.json fuzz target; seeds are small configs of every architecture.
EXTRA_DIST += tests/fuzz/hf-config

if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-hf-config
tests_fuzz_fuzz_hf_config_SOURCES = tests/fuzz/fuzz-hf-config.c
tests_fuzz_fuzz_hf_config_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_hf_config_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_hf_config_LDADD = $(MOE_LIBS)
endif
