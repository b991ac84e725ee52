# tools/moe-quant.mk
bin_PROGRAMS += tools/moe-quant
tools_moe_quant_SOURCES = tools/moe-quant.c tools/cli.c
tools_moe_quant_LDADD = $(MOE_LIBS)
dist_man_MANS += man/moe-quant.1
TESTS += tests/cli/t0700-quant.sh tests/cli/t0710-quant-ref.sh tests/cli/t0720-quant-outliers.sh
EXTRA_DIST += tests/cli/t0700-quant.sh tests/cli/t0710-quant-ref.sh tests/cli/t0720-quant-outliers.sh \
	tests/ref/quant_check.py \
	tests/ref/imatrix.py
