# tools/moe-serve.mk — moe-serve: OpenAI and Ollama HTTP APIs (lib/serve).
bin_PROGRAMS += tools/moe-serve
tools_moe_serve_SOURCES = tools/moe-serve.c tools/cli.c
tools_moe_serve_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(MHD_CFLAGS)
tools_moe_serve_CPPFLAGS = $(AM_CPPFLAGS) -DMOE_PKGDATADIR='"$(pkgdatadir)"' \
	-DMOE_SRC_SHAREDIR='"$(abs_top_srcdir)/share"'
tools_moe_serve_LDADD = $(MOE_LIBS)
dist_man_MANS += man/moe-serve.1
TESTS += tests/cli/t0900-serve.sh tests/cli/t0910-serve-registry.sh tests/cli/t0920-serve-memory.sh
EXTRA_DIST += tests/cli/t0900-serve.sh tests/cli/t0910-serve-registry.sh tests/cli/t0920-serve-memory.sh tests/cli/serve_client.py tests/cli/serve_embed_ref.py
# what the server adds to the engine: TTFT, throughput against moe-bench -np, RSS
dist_noinst_SCRIPTS += scripts/bench-serve
