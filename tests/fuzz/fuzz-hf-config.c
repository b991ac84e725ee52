/* fuzz-hf-config.c — libFuzzer target for config.json: any text must give
 * hparams or a clean error, never crash, hang, leak or overflow a float to
 * integer conversion.  And the converter/loader agreement: hparams that pass
 * moe_hparams_check must survive their UTH metadata form (JSON with reals
 * rounded to float) and pass the loader's check again.
 * Input: byte 0 chooses whether lm_head.weight exists; the rest is the
 * config.json text.  Seed corpus: tests/fuzz/hf-config/. */
#include "arch.h"
#include "hf.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	moe_error e = {0};
	moe_hparams hp, back;
	if (size < 1)
		return 0;
	char *text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	if (moe_hf_json_relax(&text, &e) < 0) {
		free(text);
		return 0;
	}
	int rc = moe_hparams_from_hf(&hp, text, data[0] & 1, &e);
	if (rc == 0)
		rc = moe_hparams_check(&hp, &e);
	if (rc < 0) {
		if (!e.msg[0])
			__builtin_trap(); /* every error says what */
	} else {
		json_t *j = moe_hparams_to_json(&hp);
		if (!j || moe_hparams_from_json(&back, j, &e) < 0)
			__builtin_trap(); /* the converter would write what the loader refuses */
		if (back.n_layer != hp.n_layer || back.n_vocab != hp.n_vocab ||
		    back.n_rot != hp.n_rot || back.n_expert != hp.n_expert)
			__builtin_trap();
		json_decref(j);
	}
	free(text);
	return 0;
}
