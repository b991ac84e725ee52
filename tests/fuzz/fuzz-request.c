/* fuzz-request.c — libFuzzer target for request parsing (moe_req_parse:
 * one line of moe-run --jsonl, the body of a moe-serve request): any text
 * must give a request or a clean error naming what is wrong, never crash,
 * leak or overflow a float-to-integer conversion.  A request that parses
 * must pass the shared parameter check again (what moe_req_new relies on)
 * and its prompt must tokenize.
 * The tokenizer and chat template are the demo model's (share/moe-demo.uth,
 * or $MOE_FUZZ_MODEL), loaded once.  Seed corpus: tests/fuzz/request/. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static moe_model *model;

static const moe_tokenizer *tokenizer(void)
{
	if (!model) {
		const char *path = getenv("MOE_FUZZ_MODEL");
		moe_error e = {0};
		if (moe_model_load(&model, path ? path : MOE_FUZZ_DEFAULT_MODEL, &e) < 0)
			abort(); /* the harness itself is broken: say so loudly */
	}
	return model->tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const moe_tokenizer *tok = tokenizer();
	moe_error e = {0};
	moe_req_defaults d = {.params = moe_req_params_defaults()};
	moe_req_input in;
	if (moe_req_parse((const char *)data, size, tok, &d, &in, &e) < 0) {
		if (!e.msg[0])
			__builtin_trap(); /* an error must say what is wrong */
		return 0;
	}
	if (moe_req_params_check(&in.params, &e) < 0)
		__builtin_trap(); /* parsed parameters are always valid */
	int32_t *ids = NULL;
	size_t n = 0;
	if (moe_req_tokenize(tok, in.prompt, in.prompt_len, in.chat, &ids, &n, &e) == 0)
		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0 || (uint32_t)ids[i] >= moe_tokenizer_n_tokens(tok))
				__builtin_trap();
	free(ids);
	moe_req_input_free(&in);
	return 0;
}
