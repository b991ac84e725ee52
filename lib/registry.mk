# lib/registry.mk — model registry (sqlite3), downloads (libcurl), Hugging Face
# hub conventions and cache layout, split GGUF joining, name resolution.
noinst_HEADERS += lib/registry.h lib/registry/registry_int.h
lib_libmoecore_a_SOURCES += lib/registry/digest.c lib/registry/http.c lib/registry/hub.c \
	lib/registry/cache.c lib/registry/download.c lib/registry/gguf_join.c \
	lib/registry/db.c lib/registry/pull.c

check_PROGRAMS += tests/unit/t-registry
TESTS += tests/unit/t-registry
tests_unit_t_registry_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS)
tests_unit_t_registry_LDADD = $(MOE_LIBS)

# Fuzz target (configure --enable-fuzz, CC=clang): the hub's listing and
# response headers, source and name arguments; seeds in tests/fuzz/registry.
EXTRA_DIST += tests/fuzz/registry
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-registry
tests_fuzz_fuzz_registry_SOURCES = tests/fuzz/fuzz-registry.c
tests_fuzz_fuzz_registry_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_fuzz_registry_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_registry_LDADD = $(MOE_LIBS)
endif
