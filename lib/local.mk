# lib/local.mk — libmoecore.a, one fragment per module.
noinst_LIBRARIES += lib/libmoecore.a
lib_libmoecore_a_SOURCES =
# Objects built with other flags (the SIMD kernels, lib/kernels.mk).
lib_libmoecore_a_LIBADD =
lib_libmoecore_a_CFLAGS = $(AM_CFLAGS) $(ARCHIVE_CFLAGS) $(XXHASH_CFLAGS) $(ZSTD_CFLAGS) \
	$(JANSSON_CFLAGS) $(PCRE2_CFLAGS) $(CURL_CFLAGS) $(SQLITE_CFLAGS) $(URING_CFLAGS) $(MHD_CFLAGS) \
	$(CRYPTO_CFLAGS)
# Everything a program linking libmoecore needs.
MOE_LIBS = lib/libmoecore.a gnu/libgnu.a $(ARCHIVE_LIBS) $(XXHASH_LIBS) $(ZSTD_LIBS) \
	$(JANSSON_LIBS) $(PCRE2_LIBS) $(CURL_LIBS) $(SQLITE_LIBS) $(URING_LIBS) $(MHD_LIBS) \
	$(CRYPTO_LIBS) -lpthread -lm

include lib/core.mk
include lib/quant.mk
include lib/gguf.mk
include lib/uth.mk
include lib/hf.mk
include lib/arch.mk
include lib/convert.mk
include lib/text.mk
include lib/kernels.mk
include lib/model.mk
include lib/experts.mk
include lib/engine.mk
include lib/bench.mk
include lib/registry.mk
include lib/serve.mk
