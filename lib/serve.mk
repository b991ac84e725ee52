# lib/serve.mk — the HTTP server of moe-serve (libmicrohttpd): model slots
# with their scheduler threads, the HTTP layer and safety checks, the
# OpenAI and Ollama endpoints.
noinst_HEADERS += lib/serve.h lib/serve/serve_int.h
lib_libmoecore_a_SOURCES += lib/serve/slot.c lib/serve/http.c lib/serve/api.c \
	lib/serve/reply.c
