/* fuzz-registry.c — libFuzzer target for what moe-pull reads from a server
 * or a user (lib/registry): the hub's file listing (moe_hub_parse_list) and
 * the file choice made from it (moe_hub_select), response headers
 * (moe_http_parse_header, then the status text moe-pull prints), and the
 * source and registry-name arguments (moe_source_parse,
 * moe_registry_split_name, moe_gguf_split_name), and what it reads back from
 * its own files, which a crash or another program may have left in any
 * state: the cache's refs (moe_cache_read_ref) and a parallel download's
 * resume state (moe_dl_read_state).
 *
 * The first input byte selects the parser (its value mod 6), the rest is
 * the text:
 *   0  a listing (JSON), then the selection with a quant, without one, and
 *      with an --include glob;
 *   1  response header lines (each ends with "\n", as curl hands them over);
 *   2  a source argument and a registry name (NUL-terminated at the first NUL);
 *   3  a file name, as a split GGUF shard's;
 *   4  the file refs/main of a cache's repository directory;
 *   5  a resume state file, read for a download of 3 chunks and a half
 *      (and for the size its own header names, up to 64 chunks).
 * Whatever the input, a failure says why and keeps nothing; a success keeps
 * its promises (safe names, indexes inside the listing, terminated fields).
 * Seeds: tests/fuzz/registry/ (each begins with its mode byte).
 */
#include "registry/registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static char dir[64], file[96];

static void cleanup(void)
{
	char p[128];
	snprintf(p, sizeof p, "%s/refs/main", dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/refs", dir);
	rmdir(p);
	unlink(file);
	rmdir(dir);
}

static void write_file(const char *p, const char *b, size_t n)
{
	FILE *f = fopen(p, "wb");
	if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f) != 0)
		abort();
}

static void cache_ref(const char *text, size_t len)
{
	char p[128], commit[128];
	moe_error e = {0};
	snprintf(p, sizeof p, "%s/refs/main", dir);
	write_file(p, text, len);
	memset(commit, 0x55, sizeof commit);
	if (moe_cache_read_ref(dir, "main", commit, &e) == 0) {
		/* a commit id names a snapshot directory: one path component */
		if (!TERMINATED(commit) || !commit[0] || strchr(commit, '/') ||
		    !strcmp(commit, ".") || !strcmp(commit, ".."))
			__builtin_trap();
	} else if (!e.msg[0]) {
		__builtin_trap();
	}
}

static void resume_state(const char *text, size_t len)
{
	write_file(file, text, len);
	uint64_t sizes[2] = {3 * MOE_DL_CHUNK + MOE_DL_CHUNK / 2, 0};
	unsigned long long sz;
	if (sscanf(text, "moe-parts 1 %llu", &sz) == 1 && sz <= 64 * MOE_DL_CHUNK)
		sizes[1] = sz;
	for (int i = 0; i < 2; i++) {
		uint64_t n_chunks = (sizes[i] + MOE_DL_CHUNK - 1) / MOE_DL_CHUNK;
		/* an exact-size array: a mark past it is caught */
		bool *done = calloc(n_chunks ? n_chunks : 1, sizeof *done);
		(void)moe_dl_read_state(file, sizes[i], done, n_chunks);
		free(done);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		char p[128];
		strcpy(dir, "/tmp/fuzz-registry-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		snprintf(p, sizeof p, "%s/refs", dir);
		snprintf(file, sizeof file, "%s/state", dir);
		if (mkdir(p, 0700) != 0)
			abort();
		atexit(cleanup);
	}
	if (size < 1)
		return 0;
	int mode = data[0] % 6;
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
	else if (mode == 3)
		shard_name(text);
	else if (mode == 4)
		cache_ref(text, size - 1);
	else
		resume_state(text, size - 1);
	free(text);
	return 0;
}
