/* fuzz-jinja.c — libFuzzer target for the Jinja2 chat-template interpreter
 * (moe_jinja_render): the input is a template, rendered with a fixed
 * conversation (messages with tool calls, tools, bos/eos) under small
 * limits.  Whatever the template, rendering must end (no hang, no crash),
 * and a failure must say why and return no text.  Seeds: tests/fuzz/jinja/
 * (real chat templates and broken ones).
 */
#include "text.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!vars)
		vars = json_loads(
			"{\"messages\": [{\"role\": \"system\", \"content\": \"S\"},"
			" {\"role\": \"user\", \"content\": \"Hi \\u00e9\"},"
			" {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\":"
			" \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1.5}}}]},"
			" {\"role\": \"tool\", \"content\": \"[1, 2]\"}],"
			" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
			" \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\":"
			" \"number\"}}}}}], \"add_generation_prompt\": true,"
			" \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", 0, NULL);
	moe_jinja_opts o = {0};
	o.max_output = 1 << 16;
	o.max_memory = 16u << 20;
	o.max_steps = 20000;
	o.max_depth = 20;
	o.use_now = true;
	o.now = 1700000000;
	char *out = NULL;
	size_t len;
	moe_error e = {0};
	int rc = moe_jinja_render((const char *)data, size, vars, &o, &out, &len, &e);
	if (rc == 0) {
		if (!out || strlen(out) > len || len > o.max_output)
			abort();
	} else if (out || !e.msg[0]) {
		abort();
	}
	free(out);
	return 0;
}
