/* fuzz-tokenizer-json.c — libFuzzer target for tokenizer.json (and
 * tokenizer_config.json): any text must give a vocabulary or a clean error;
 * a vocabulary must build a tokenizer (or fail cleanly) that encodes a
 * sample without crashing.
 * Input: tokenizer.json, optionally followed by a NUL byte and
 * tokenizer_config.json.  Seed corpus: tests/fuzz/tokenizer-json/. */
#include "hf.h"
#include "text.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *text_of(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, p, n);
		s[n] = '\0';
	}
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_error e = {0};
	const uint8_t *nul = memchr(data, 0, size);
	size_t n1 = nul ? (size_t)(nul - data) : size;
	char *tj = text_of(data, n1);
	char *cfg = nul ? text_of(nul + 1, size - n1 - 1) : NULL;
	if (!tj || (nul && !cfg))
		goto out;
	if (moe_hf_json_relax(&tj, &e) < 0 || (cfg && moe_hf_json_relax(&cfg, &e) < 0))
		goto out;
	moe_arena a;
	moe_arena_init(&a, 0);
	moe_vocab_data vd;
	if (moe_vocab_data_from_hf(&vd, tj, cfg, &a, &e) == 0) {
		moe_tokenizer *t;
		if (moe_tokenizer_from_data(&t, &vd, &e) == 0) {
			static const char sample[] = "Hello world, it's 2024! \xc3\xa9\xe4\xb8\xad <s>";
			int32_t *ids = NULL;
			size_t n = 0;
			if (moe_tokenizer_encode(t, sample, sizeof sample - 1, true, true, &ids, &n,
						 &e) == 0)
				for (size_t i = 0; i < n; i++)
					if (ids[i] < 0 || (uint32_t)ids[i] >= moe_tokenizer_n_tokens(t))
						__builtin_trap();
			free(ids);
			moe_tokenizer_free(t);
		} else if (!e.msg[0]) {
			__builtin_trap();
		}
	} else if (!e.msg[0]) {
		__builtin_trap();
	}
	moe_arena_free(&a);
out:
	free(tj);
	free(cfg);
	return 0;
}
