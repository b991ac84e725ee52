# tests/local.mk — shared test harness; tests themselves are listed by the
# fragment of the module they test (lib/*.mk, tools/*.mk).
noinst_HEADERS += tests/unit/tap.h tests/unit/testrand.h tests/fuzz/fuzz_file.h tests/fuzz/fuzz_model.h
EXTRA_DIST += tests/cli/lib.sh tests/cli/engine-lib.sh
include tests/ref/local.mk

# The fuzz targets' seed corpora replayed by make check, every target linked
# with tests/fuzz/replay.c instead of libFuzzer (t0050).
# The model a model-driven fuzz target (libFuzzer build, lib/*.mk) or its
# replay defaults to: tests/fuzz/fuzz_model.h.
FUZZ_MODEL_CPPFLAGS = $(AM_CPPFLAGS) -DMOE_FUZZ_DEFAULT_MODEL='"$(abs_top_srcdir)/share/moe-demo.uth"'
FUZZ_REPLAY_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS)
check_PROGRAMS += tests/fuzz/replay-gguf tests/fuzz/replay-hf-config tests/fuzz/replay-jinja \
	tests/fuzz/replay-request tests/fuzz/replay-safetensors tests/fuzz/replay-tokenizer-json \
	tests/fuzz/replay-uth tests/fuzz/replay-prompt-cache tests/fuzz/replay-imatrix \
	tests/fuzz/replay-registry tests/fuzz/replay-expert-profile tests/fuzz/replay-serve \
	tests/fuzz/replay-archive tests/fuzz/replay-quant-plan tests/fuzz/replay-endpoint \
	tests/fuzz/replay-bench-plan
tests_fuzz_replay_gguf_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-gguf.c
tests_fuzz_replay_hf_config_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-hf-config.c
tests_fuzz_replay_jinja_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-jinja.c
tests_fuzz_replay_request_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-request.c
tests_fuzz_replay_safetensors_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-safetensors.c
tests_fuzz_replay_tokenizer_json_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-tokenizer-json.c
tests_fuzz_replay_uth_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-uth.c
tests_fuzz_replay_prompt_cache_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-prompt-cache.c
tests_fuzz_replay_imatrix_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-imatrix.c
tests_fuzz_replay_registry_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-registry.c
tests_fuzz_replay_expert_profile_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-expert-profile.c
tests_fuzz_replay_serve_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-serve.c
tests_fuzz_replay_archive_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-archive.c
tests_fuzz_replay_quant_plan_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-quant-plan.c
tests_fuzz_replay_endpoint_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-endpoint.c
tests_fuzz_replay_bench_plan_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-bench-plan.c
tests_fuzz_replay_gguf_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_gguf_LDADD = $(MOE_LIBS)
tests_fuzz_replay_hf_config_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_hf_config_LDADD = $(MOE_LIBS)
tests_fuzz_replay_jinja_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_jinja_LDADD = $(MOE_LIBS)
tests_fuzz_replay_request_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_request_LDADD = $(MOE_LIBS)
tests_fuzz_replay_safetensors_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_safetensors_LDADD = $(MOE_LIBS)
tests_fuzz_replay_tokenizer_json_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_tokenizer_json_LDADD = $(MOE_LIBS)
tests_fuzz_replay_uth_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_uth_LDADD = $(MOE_LIBS)
tests_fuzz_replay_prompt_cache_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_prompt_cache_LDADD = $(MOE_LIBS)
tests_fuzz_replay_imatrix_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_imatrix_LDADD = $(MOE_LIBS)
tests_fuzz_replay_registry_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_registry_LDADD = $(MOE_LIBS)
tests_fuzz_replay_expert_profile_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_expert_profile_LDADD = $(MOE_LIBS)
tests_fuzz_replay_serve_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_serve_LDADD = $(MOE_LIBS)
tests_fuzz_replay_archive_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_archive_LDADD = $(MOE_LIBS)
tests_fuzz_replay_quant_plan_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_quant_plan_LDADD = $(MOE_LIBS)
tests_fuzz_replay_endpoint_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_endpoint_LDADD = $(MOE_LIBS)
tests_fuzz_replay_bench_plan_CFLAGS = $(FUZZ_REPLAY_CFLAGS)
tests_fuzz_replay_bench_plan_LDADD = $(MOE_LIBS)
tests_fuzz_replay_bench_plan_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_replay_quant_plan_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_replay_request_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_replay_prompt_cache_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_replay_expert_profile_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_replay_serve_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
TESTS += tests/cli/t0050-fuzz-corpora.sh
EXTRA_DIST += tests/cli/t0050-fuzz-corpora.sh tests/fuzz/replay.c
