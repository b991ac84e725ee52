/* fuzz-tokenizer-json.c — libFuzzer target for tokenizer.json reading and
 * the text pipelines it declares: the input is a tokenizer.json text;
 * when moe_vocab_data_from_hf accepts it, a tokenizer is built and encodes
 * a few fixed texts, and every id it returns must be in range.  A failure
 * must say why.  Seeds: tests/fuzz/tokenizer-json/.
 */
#include "text.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	moe_arena a;
	moe_vocab_data vd;
	moe_error e = {0};
	moe_arena_init(&a, 0);
	int rc = moe_vocab_data_from_hf(&vd, text, NULL, &a, &e);
	if (rc < 0 && !e.msg[0])
		abort();
	moe_tokenizer *t = NULL;
	if (rc == 0 && moe_tokenizer_from_data(&t, &vd, &e) == 0) {
		static const char *const texts[] = {
			"Hello world! I'm here.", "  caf\xc3\xa9 123456 \xe4\xb8\xad\xe6\x96\x87\n\n",
			"\xff\xfe bad utf8", ""};
		for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
			int32_t *ids;
			size_t n;
			if (moe_tokenizer_encode(t, texts[i], strlen(texts[i]), true, true, &ids, &n,
						 &e) == 0) {
				for (size_t k = 0; k < n; k++)
					if (ids[k] < 0 || (uint32_t)ids[k] >= moe_tokenizer_n_tokens(t))
						abort();
				free(ids);
			}
		}
		moe_tokenizer_free(t);
	}
	moe_arena_free(&a);
	free(text);
	return 0;
}
