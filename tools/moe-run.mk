# tools/moe-run.mk — moe-run: text generation, --chat, --jsonl and the
# tokenizer modes (--tokenize, --detokenize, --render-chat).
bin_PROGRAMS += tools/moe-run
tools_moe_run_SOURCES = tools/moe-run.c tools/cli.c
tools_moe_run_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
# Without -m, moe-run looks for the demo model where `make install` puts it
# (share/local.mk), then in this source tree's share/ (uninstalled builds).
tools_moe_run_CPPFLAGS = $(AM_CPPFLAGS) -DMOE_PKGDATADIR='"$(pkgdatadir)"' \
	-DMOE_SRC_SHAREDIR='"$(abs_top_srcdir)/share"'
tools_moe_run_LDADD = $(MOE_LIBS)
dist_man_MANS += man/moe-run.1
TESTS += tests/cli/t0300-tokenize.sh tests/cli/t0310-detokenize.sh \
	tests/cli/t0320-render-chat.sh tests/cli/t0420-run-generate.sh tests/cli/t0440-run-parallel.sh \
	tests/cli/t0450-run-prompt-cache.sh
EXTRA_DIST += tests/cli/t0300-tokenize.sh tests/cli/t0310-detokenize.sh \
	tests/cli/t0320-render-chat.sh tests/cli/t0420-run-generate.sh tests/cli/t0440-run-parallel.sh \
	tests/cli/t0450-run-prompt-cache.sh
