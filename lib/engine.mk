# lib/engine.mk — the engine: one thread pool and scratch over a model, the
# paged KV cache, the forward pass over steps of many sequences, requests
# and the scheduler.
noinst_HEADERS += lib/engine.h lib/engine/engine_int.h
lib_libmoecore_a_SOURCES += lib/engine/engine.c lib/engine/kv.c lib/engine/forward.c \
	lib/engine/request.c lib/engine/sched.c lib/engine/kvfile.c
lib_libmoecore_a_SOURCES += lib/engine/arch_phimoe.c lib/engine/arch_deepseek2.c

# Test helper: logits and greedy ids for token ids (compared with tests/ref).
check_PROGRAMS += tests/unit/engine-run
tests_unit_engine_run_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_engine_run_LDADD = $(MOE_LIBS)

# Test helper: batch invariance, prefix sharing, pool accounting (t0430).
check_PROGRAMS += tests/unit/engine-batch
tests_unit_engine_batch_LDADD = $(MOE_LIBS)
TESTS += tests/cli/t0430-engine-batch.sh
EXTRA_DIST += tests/cli/t0430-engine-batch.sh

check_PROGRAMS += tests/unit/t-engine
TESTS += tests/unit/t-engine
tests_unit_t_engine_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_engine_CPPFLAGS = $(AM_CPPFLAGS) -DMOE_SRC_SHAREDIR='"$(abs_top_srcdir)/share"'
tests_unit_t_engine_LDADD = $(MOE_LIBS)
# Issue 14: phimoe's LongRoPE long factors against the reference.
TESTS += tests/cli/t0415-engine-longrope.sh
EXTRA_DIST += tests/cli/t0415-engine-longrope.sh
# Issue 14: deepseek2 (latent attention, DeepSeek's routers) against the reference.
TESTS += tests/cli/t0412-engine-deepseek2.sh
EXTRA_DIST += tests/cli/t0412-engine-deepseek2.sh
# Issue 14: gpt-oss's sliding layers keep their window only (kv.c);
# engine-window: prefix sharing and rewinds past the window.
check_PROGRAMS += tests/unit/engine-window
tests_unit_engine_window_LDADD = $(MOE_LIBS)
TESTS += tests/cli/t0435-engine-window.sh
EXTRA_DIST += tests/cli/t0435-engine-window.sh

# Fuzz target (configure --enable-fuzz, CC=clang): request parsing, as
# moe-run --jsonl and moe-serve take it; seeds in tests/fuzz/request.
EXTRA_DIST += tests/fuzz/request
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-request
tests_fuzz_fuzz_request_SOURCES = tests/fuzz/fuzz-request.c
tests_fuzz_fuzz_request_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_request_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_fuzz_request_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_request_LDADD = $(MOE_LIBS)
endif

# Fuzz target: the prompt cache loader (moe-run --prompt-cache); seeds in
# tests/fuzz/prompt-cache.
EXTRA_DIST += tests/fuzz/prompt-cache
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-prompt-cache
tests_fuzz_fuzz_prompt_cache_SOURCES = tests/fuzz/fuzz-prompt-cache.c
tests_fuzz_fuzz_prompt_cache_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_prompt_cache_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_fuzz_prompt_cache_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_prompt_cache_LDADD = $(MOE_LIBS)
endif
