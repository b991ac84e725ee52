# lib/serve.mk — the HTTP server of moe-serve (libmicrohttpd): model slots
# with their scheduler threads, the HTTP layer and safety checks, the
# OpenAI and Ollama endpoints.
noinst_HEADERS += lib/serve.h lib/serve/serve_int.h
lib_libmoecore_a_SOURCES += lib/serve/slot.c lib/serve/http.c lib/serve/api.c \
	lib/serve/reply.c

# Fuzz target (configure --enable-fuzz, CC=clang): requests to a server in
# the process (HTTP checks, every endpoint); seeds in tests/fuzz/serve.
EXTRA_DIST += tests/fuzz/serve
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-serve
tests_fuzz_fuzz_serve_SOURCES = tests/fuzz/fuzz-serve.c
tests_fuzz_fuzz_serve_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_serve_CPPFLAGS = $(FUZZ_MODEL_CPPFLAGS)
tests_fuzz_fuzz_serve_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_serve_LDADD = $(MOE_LIBS)
endif
