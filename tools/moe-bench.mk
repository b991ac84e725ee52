# tools/moe-bench.mk — moe-bench: throughput (llama-bench style), perplexity,
# KL-divergence against a base, expert statistics, memory bandwidth.
bin_PROGRAMS += tools/moe-bench
tools_moe_bench_SOURCES = tools/moe-bench.c tools/cli.c
tools_moe_bench_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tools_moe_bench_LDADD = $(MOE_LIBS)
dist_man_MANS += man/moe-bench.1
TESTS += tests/cli/t0500-bench-throughput.sh tests/cli/t0510-bench-perplexity.sh
TESTS += tests/cli/t0520-bench-imatrix.sh
EXTRA_DIST += tests/cli/t0520-bench-imatrix.sh
EXTRA_DIST += tests/cli/t0500-bench-throughput.sh tests/cli/t0510-bench-perplexity.sh
