# tools/moe-pull.mk — moe-pull: models by name from the Hugging Face hub, URLs
# and files; the registry commands list, show, rm, tag, repair.
bin_PROGRAMS += tools/moe-pull
tools_moe_pull_SOURCES = tools/moe-pull.c tools/cli.c
tools_moe_pull_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tools_moe_pull_LDADD = $(MOE_LIBS)
dist_man_MANS += man/moe-pull.1
PULL_TESTS = tests/cli/t0800-pull-hub.sh tests/cli/t0810-pull-faults.sh \
	tests/cli/t0820-pull-registry.sh tests/cli/t0830-pull-robust.sh
TESTS += $(PULL_TESTS)
EXTRA_DIST += $(PULL_TESTS) tests/cli/hubsim.py tests/cli/pull-lib.sh tests/cli/gguf-split.py \
	scripts/bench-pull
