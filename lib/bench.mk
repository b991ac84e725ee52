# lib/bench.mk — measurement for moe-bench: statistics, STREAM triad,
# throughput tests, perplexity and KL-divergence, expert statistics, reports.
noinst_HEADERS += lib/bench.h lib/bench/endpoint_int.h
lib_libmoecore_a_SOURCES += lib/bench/stats.c lib/bench/stream.c lib/bench/throughput.c \
	lib/bench/perplexity.c lib/bench/experts.c lib/bench/report.c \
	lib/bench/endpoint.c lib/bench/budget.c lib/bench/plan.c \
	lib/bench/imatrix.c

check_PROGRAMS += tests/unit/t-bench
TESTS += tests/unit/t-bench
tests_unit_t_bench_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_bench_LDADD = $(MOE_LIBS)

# Fuzz target (configure --enable-fuzz, CC=clang): moe-bench --endpoint's
# reply parsing; seeds in tests/fuzz/endpoint.
EXTRA_DIST += tests/fuzz/endpoint tests/fuzz/bench-plan
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-endpoint
tests_fuzz_fuzz_endpoint_SOURCES = tests/fuzz/fuzz-endpoint.c
tests_fuzz_fuzz_endpoint_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_endpoint_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_endpoint_LDADD = $(MOE_LIBS)
# moe-bench --plan's routing profile, on the demo model
noinst_PROGRAMS += tests/fuzz/fuzz-bench-plan
tests_fuzz_fuzz_bench_plan_SOURCES = tests/fuzz/fuzz-bench-plan.c
tests_fuzz_fuzz_bench_plan_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_fuzz_bench_plan_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_bench_plan_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_bench_plan_LDADD = $(MOE_LIBS)
endif
