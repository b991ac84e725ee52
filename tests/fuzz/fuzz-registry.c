/* fuzz-registry.c — libFuzzer target for what moe-pull reads from a server
 * or a user (lib/registry): the hub's file listing (moe_hub_parse_list) and
 * the file choice made from it (moe_hub_select), response headers
 * (moe_http_parse_header, then the status text moe-pull prints), and the
 * source and registry-name arguments (moe_source_parse,
 * moe_registry_split_name, moe_gguf_split_name).
 *
 * The first input byte selects the parser (its value mod 4), the rest is
 * the text:
 *   0  a listing (JSON), then the selection with a quant, without one, and
 *      with an --include glob;
 *   1  response header lines (each ends with "\n", as curl hands them over);
 *   2  a source argument and a registry name (NUL-terminated at the first NUL);
 *   3  a file name, as a split GGUF shard's.
 * Whatever the input, a failure says why and keeps nothing; a success keeps
 * its promises (safe names, indexes inside the listing, terminated fields).
 * Seeds: tests/fuzz/registry/ (each begins with its mode byte).
 */
#include "registry/registry_int.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_select(char *const *files, size_t n, const char *quant, const char *const *inc,
			 size_t n_inc)
{
	moe_error e = {0};
	size_t *sel = NULL, n_sel = 0;
	bool gguf;
	if (moe_hub_select(files, n, "fuzz/repo", quant, inc, n_inc, &sel, &n_sel, &gguf, &e) == 0) {
		for (size_t i = 0; i < n_sel; i++)
			if (sel[i] >= n)
				__builtin_trap();
	} else if (!e.msg[0]) {
		__builtin_trap();
	}
	free(sel);
}

static void listing(const char *text, size_t len)
{
	moe_error e = {0};
	char **files, commit[128];
	size_t n;
	if (moe_hub_parse_list(text, len, "fuzz/repo (revision main)", &files, &n, commit, &e) < 0) {
		if (files || n || !e.msg[0])
			__builtin_trap();
		return;
	}
	if (!commit[0] || strlen(commit) > 64)
		__builtin_trap();
	for (size_t i = 0; i < n; i++)
		if (!files[i] || !moe_hub_safe_name(files[i]))
			__builtin_trap();
	const char *inc[] = {"*.gguf"};
	check_select(files, n, "Q4_K_M", NULL, 0);
	check_select(files, n, "", NULL, 0);
	check_select(files, n, "", inc, 1);
	moe_hub_free_list(files, n);
}

/* Every stored field must end inside its array. */
#define TERMINATED(f) (memchr((f), 0, sizeof(f)) != NULL)

static void headers(const char *text, size_t len)
{
	moe_http_resp *r = calloc(1, sizeof *r);
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) + 1 : len - i;
		/* an exact-size copy with the "\n" curl guarantees, so a read past
		 * the line is caught */
		char *line = malloc(n + 1);
		memcpy(line, text + i, n);
		if (!nl)
			line[n++] = '\n';
		size_t got = moe_http_parse_header(r, line, n);
		free(line);
		if (got != n && !r->header_overflow)
			__builtin_trap();
		if (!got)
			break;
		i += nl ? n : len - i;
	}
	if (!TERMINATED(r->location) || !TERMINATED(r->etag) || !TERMINATED(r->linked_etag) ||
	    !TERMINATED(r->repo_commit) || !TERMINATED(r->error_code) ||
	    !TERMINATED(r->error_message) || r->retry_after < 0 || r->retry_after > 3600)
		__builtin_trap();
	char st[512];
	moe_http_status_text(r, st, sizeof st);
	if (!TERMINATED(st))
		__builtin_trap();
	free(r);
}

static void arguments(const char *s)
{
	moe_error e = {0};
	moe_source src;
	if (moe_source_parse(s, &src, &e) == 0) {
		if (!TERMINATED(src.repo) || !TERMINATED(src.quant) || !TERMINATED(src.url) ||
		    !TERMINATED(src.path))
			__builtin_trap();
	} else if (!e.msg[0]) {
		__builtin_trap();
	}
	char name[256], tag[128];
	e.msg[0] = 0;
	if (moe_registry_split_name(s, name, sizeof name, tag, sizeof tag, &e) == 0) {
		if (!name[0] || !TERMINATED(name) || !TERMINATED(tag))
			__builtin_trap();
	} else if (!e.msg[0]) {
		__builtin_trap();
	}
}

static void shard_name(const char *s)
{
	unsigned no, count;
	size_t prefix;
	if (moe_gguf_split_name(s, &no, &count, &prefix) &&
	    (no == 0 || no > count || prefix > strlen(s)))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int mode = data[0] % 4;
	/* an exact-size copy (plus a NUL for the string parsers) */
	char *text = malloc(size);
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	if (mode == 0)
		listing(text, size - 1);
	else if (mode == 1)
		headers(text, size - 1);
	else if (mode == 2)
		arguments(text);
	else
		shard_name(text);
	free(text);
	return 0;
}
