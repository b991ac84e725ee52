/* fuzz-endpoint.c — libFuzzer target for moe-bench --endpoint's reply
 * parsing (moe_endpoint_on_data in lib/bench/endpoint.c): the server's SSE
 * stream of "data: JSON" events, handed over in pieces as libcurl does.
 * Whatever the reply, every piece is taken (the return is its size), the
 * bytes kept are the tail after the last complete event, NUL-terminated,
 * the error text is terminated, and a text event's times are ordered.
 *
 * The first input byte seeds the piece sizes (1 to 64 bytes; 0: the whole
 * reply at once), the rest is the reply.
 * Seeds: tests/fuzz/endpoint/ (moe-serve's and OpenAI-style chat streams,
 * an error event, a reply that is not JSON, events cut mid-line).
 */
#include "bench/endpoint_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned seed = data[0];
	moe_endpoint_run o = {0};
	for (size_t i = 1; i < size;) {
		size_t n = size - i;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			size_t piece = 1 + (seed >> 16) % 64;
			n = piece < n ? piece : n;
		}
		/* an exact-size copy, as curl's buffer: a read past it is caught */
		char *piece = malloc(n);
		memcpy(piece, data + i, n);
		size_t got = moe_endpoint_on_data(piece, 1, n, &o);
		free(piece);
		if (got != n)
			__builtin_trap();
		if (!o.line || o.len >= o.cap || o.line[o.len] != '\0')
			__builtin_trap();
		i += n;
	}
	if (!memchr(o.err, 0, sizeof o.err) || (o.err[0] && !o.error))
		__builtin_trap();
	if (o.t_first && (!o.t_last || o.t_last < o.t_first))
		__builtin_trap();
	free(o.line);
	return 0;
}
