# tools/moe-convert.mk
bin_PROGRAMS += tools/moe-convert
tools_moe_convert_SOURCES = tools/moe-convert.c tools/cli.c
tools_moe_convert_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tools_moe_convert_LDADD = $(MOE_LIBS)
dist_man_MANS += man/moe-convert.1 man/moe.7
TESTS += tests/cli/t0200-convert.sh tests/cli/t0210-convert-errors.sh
EXTRA_DIST += tests/cli/t0200-convert.sh tests/cli/t0210-convert-errors.sh tests/cli/bad-inputs.py
# Hostile input, round two: hangs, non-finite hparams, contradictions,
# careless output paths, JSON as Python writes it.
TESTS += tests/cli/t0220-convert-hostile.sh
EXTRA_DIST += tests/cli/t0220-convert-hostile.sh
# Issue 14's families (deepseek2, gpt-oss, phimoe, granitemoe): GGUF = HF.
TESTS += tests/cli/t0230-convert-moe2.sh
EXTRA_DIST += tests/cli/t0230-convert-moe2.sh tests/cli/hparams-vs-ref.py \
	tests/cli/old-deepseek2-gguf.py
