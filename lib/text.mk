# lib/text.mk — tokenizers (SentencePiece BPE, byte-level BPE with PCRE2
# pre-tokenizers), the streaming detokeniser and chat templates.
noinst_HEADERS += lib/text.h lib/text/text_int.h
lib_libmoecore_a_SOURCES += lib/text/utf8.c lib/text/vocab.c lib/text/vocab_uth.c \
	lib/text/vocab_hf.c lib/text/tokenizer.c lib/text/spm.c lib/text/bpe.c \
	lib/text/chat.c lib/text/chat_apply.c lib/text/jinja_int.h lib/text/jinja_parse.c \
	lib/text/jinja_eval.c lib/text/jinja_lib.c lib/text/jinja_fmt.c lib/text/pretok.c lib/text/normalize.c \
	lib/text/unigram.c lib/text/harmony.c
lib_libmoecore_a_CFLAGS += $(UTF8PROC_CFLAGS)
MOE_LIBS += $(UTF8PROC_LIBS)

check_PROGRAMS += tests/unit/t-tokenizer tests/unit/t-chat tests/unit/t-jinja tests/unit/t-harmony
TESTS += tests/unit/t-tokenizer tests/unit/t-chat tests/unit/t-jinja tests/unit/t-harmony
tests_unit_t_harmony_LDADD = $(MOE_LIBS)
tests_unit_t_jinja_LDADD = $(MOE_LIBS)
tests_unit_t_jinja_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_tokenizer_LDADD = $(MOE_LIBS)
tests_unit_t_tokenizer_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_chat_LDADD = $(MOE_LIBS)
EXTRA_DIST += tests/unit/tokenizer-corpus.txt tests/unit/vocab-to-hf.py \
	tests/golden/chat/chatml.txt tests/golden/chat/llama2.txt \
	tests/golden/chat/mistral.txt tests/golden/chat/llama3.txt \
	tests/golden/chat/phi3.txt tests/golden/chat/tulu.txt \
	tests/golden/chat/deepseek.txt tests/golden/chat/deepseek3.txt \
	tests/golden/chat/templates tests/golden/chat/conversations tests/golden/chat/render \
	tests/golden/chat/filters.jsonl \
	scripts/gen-chat-goldens scripts/gen-tokenizer-vectors tests/golden/tokenizer

# Fuzz target (configure --enable-fuzz, CC=clang): chat templates; seeds in
# tests/fuzz/jinja (tokenizer.json's target and seeds: lib/hf.mk).
EXTRA_DIST += tests/fuzz/jinja
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz-jinja
tests_fuzz_fuzz_jinja_SOURCES = tests/fuzz/fuzz-jinja.c
tests_fuzz_fuzz_jinja_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS) $(JANSSON_CFLAGS)
tests_fuzz_fuzz_jinja_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_jinja_LDADD = $(MOE_LIBS)
endif

# End to end: a snapshot with a real-looking tokenizer_config.json, its own
# chat template run by moe-run.
TESTS += tests/cli/t0330-chat-template.sh tests/cli/t0340-harmony.sh
EXTRA_DIST += tests/cli/t0330-chat-template.sh tests/cli/t0340-harmony.sh
