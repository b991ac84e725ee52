/* t-registry.c — the pure parts of lib/registry: digests against published
 * vectors, source strings, safe file names, split GGUF names, which repo
 * files a pull takes, registry names.  (Downloads and the database are
 * tested end to end by tests/cli/t08*-pull*.sh against a local hub.) */
#include "registry/registry_int.h"
#include "tap.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <stdio.h>

static const char *digest(int kind, const char *s, size_t n, const char *prefix)
{
	static char hex[65];
	moe_digest *d;
	moe_error e = {0};
	if (moe_digest_new(&d, kind, &e) < 0)
		return "";
	if (prefix)
		moe_digest_update(d, prefix, strlen(prefix) + 1);
	moe_digest_update(d, s, n);
	moe_digest_hex(d, hex);
	moe_digest_free(d);
	return hex;
}

static int pick(char **files, size_t n, const char *quant, const char *inc, char *out, size_t on)
{
	size_t *sel, ns;
	bool gguf;
	moe_error e = {0};
	const char *incs[1] = {inc};
	int rc = moe_hub_select(files, n, "o/r", quant, incs, inc ? 1 : 0, &sel, &ns, &gguf, &e);
	out[0] = '\0';
	if (rc < 0) {
		snprintf(out, on, "error: %s", e.msg);
		return rc;
	}
	size_t used = 0;
	for (size_t i = 0; i < ns; i++)
		used += (size_t)snprintf(out + used, on - used, "%s%s", i ? " " : "", files[sel[i]]);
	free(sel);
	return gguf;
}

int main(void)
{
	/* FIPS 180-2 / RFC 6234 vectors; git's id of the blob "hello\n"
	 * (`echo hello | git hash-object --stdin`). */
	is_str(digest(MOE_DIGEST_SHA256, "abc", 3, NULL),
	       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256(abc)");
	is_str(digest(MOE_DIGEST_SHA256, "", 0, NULL),
	       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sha256('')");
	is_str(digest(MOE_DIGEST_SHA1, "abc", 3, NULL), "a9993e364706816aba3e25717850c26c9cd0d89d",
	       "sha1(abc)");
	is_str(digest(MOE_DIGEST_SHA1, "hello\n", 6, "blob 6"), "ce013625030ba8dba906f756967f9e9ca394464a",
	       "git blob sha1 of hello\\n");

	moe_source s;
	moe_error e = {0};
	ok(moe_source_parse("Qwen/Qwen3-30B-A3B-GGUF:Q4_K_M", &s, &e) == 0 && s.kind == MOE_SRC_HUB &&
		   !strcmp(s.repo, "Qwen/Qwen3-30B-A3B-GGUF") && !strcmp(s.quant, "Q4_K_M"),
	   "org/name:QUANT");
	ok(moe_source_parse("hf://org/name", &s, &e) == 0 && s.kind == MOE_SRC_HUB &&
		   !strcmp(s.repo, "org/name") && !s.quant[0],
	   "hf://org/name");
	ok(moe_source_parse("https://example.com/m.gguf", &s, &e) == 0 && s.kind == MOE_SRC_URL, "URL");
	ok(moe_source_parse("./x.gguf", &s, &e) == 0 && s.kind == MOE_SRC_PATH, "./path");
	ok(moe_source_parse("org/../x", &s, &e) == MOE_EINVAL, "'..' in a repo refused");
	ok(moe_source_parse("org/na me", &s, &e) == MOE_EINVAL, "space in a repo refused");
	ok(moe_source_parse("justaname", &s, &e) == MOE_EINVAL, "no slash: not a repo");

	ok(moe_hub_safe_name("a/b/c.gguf"), "safe: nested");
	ok(!moe_hub_safe_name("../etc/passwd"), "unsafe: ..");
	ok(!moe_hub_safe_name("a/../../b"), "unsafe: inner ..");
	ok(!moe_hub_safe_name("/etc/passwd"), "unsafe: absolute");
	ok(!moe_hub_safe_name("a//b"), "unsafe: empty part");
	ok(!moe_hub_safe_name("a/./b"), "unsafe: .");
	ok(!moe_hub_safe_name("a\\b"), "unsafe: backslash");
	ok(!moe_hub_safe_name("a\nb"), "unsafe: newline");

	unsigned no, cnt;
	size_t pl;
	ok(moe_gguf_split_name("M-Q4_K_M-00002-of-00003.gguf", &no, &cnt, &pl) && no == 2 && cnt == 3 &&
		   pl == 8,
	   "split name parsed");
	ok(!moe_gguf_split_name("M-Q4_K_M.gguf", &no, &cnt, &pl), "plain GGUF is not split");
	ok(!moe_gguf_split_name("M-00004-of-00003.gguf", &no, &cnt, &pl), "shard past count refused");

	char out[2000];
	char *repo1[] = {"README.md", "M-Q4_K_M.gguf", "M-Q4_K.gguf", "M-Q8_0.gguf", "mmproj-M-f16.gguf"};
	is_int(pick(repo1, 5, "Q4_K_M", NULL, out, sizeof out), 1, "quant picks GGUF");
	is_str(out, "M-Q4_K_M.gguf", "Q4_K_M picks its file, not Q4_K");
	pick(repo1, 5, "q4_k", NULL, out, sizeof out);
	is_str(out, "M-Q4_K.gguf", "quant is case-insensitive and whole-token");
	ok(pick(repo1, 5, "Q5_K", NULL, out, sizeof out) == MOE_ENOTFOUND && strstr(out, "M-Q8_0.gguf"),
	   "missing quant lists what exists (%s)", out);
	ok(pick(repo1, 5, "", NULL, out, sizeof out) == MOE_EINVAL && strstr(out, "M-Q4_K_M.gguf"),
	   "several GGUFs without a quant: ambiguous, listed (%s)", out);
	char *repo2[] = {"Q4_K_M/M-Q4_K_M-00002-of-00002.gguf", "Q4_K_M/M-Q4_K_M-00001-of-00002.gguf",
			 "M-Q8_0.gguf"};
	pick(repo2, 3, "Q4_K_M", NULL, out, sizeof out);
	is_str(out, "Q4_K_M/M-Q4_K_M-00001-of-00002.gguf Q4_K_M/M-Q4_K_M-00002-of-00002.gguf",
	       "split GGUF: all shards in order");
	char *repo3[] = {"M-Q4_K_M-00001-of-00003.gguf", "M-Q4_K_M-00003-of-00003.gguf"};
	ok(pick(repo3, 2, "Q4_K_M", NULL, out, sizeof out) == MOE_ENOTFOUND && strstr(out, "shard 2 of 3"),
	   "missing shard named (%s)", out);
	char *repo4[] = {".gitattributes", "config.json", "model-00001-of-00002.safetensors",
			 "model-00002-of-00002.safetensors", "model.safetensors.index.json",
			 "tokenizer.json", "README.md", "original/consolidated.pth"};
	is_int(pick(repo4, 8, "", NULL, out, sizeof out), 0, "safetensors snapshot");
	is_str(out,
	       "config.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors "
	       "model.safetensors.index.json tokenizer.json",
	       "snapshot files only");
	pick(repo4, 8, "", "*.json", out, sizeof out);
	is_str(out, "config.json model.safetensors.index.json tokenizer.json", "--include glob");

	char nm[256], tg[128];
	ok(moe_registry_split_name("org/name:Q4_K_M", nm, sizeof nm, tg, sizeof tg, &e) == 0 &&
		   !strcmp(nm, "org/name") && !strcmp(tg, "Q4_K_M"),
	   "NAME:TAG");
	ok(moe_registry_split_name("org/name", nm, sizeof nm, tg, sizeof tg, &e) == 0 && !tg[0], "NAME");
	ok(moe_registry_split_name("../x", nm, sizeof nm, tg, sizeof tg, &e) < 0, "bad name refused");
	ok(moe_registry_split_name("a:", nm, sizeof nm, tg, sizeof tg, &e) < 0, "empty tag refused");
	/* response header lines as curl hands them over: not NUL-terminated.
	 * A status line whose code is missing must not be read on past its
	 * end (strtol skipped the CR LF into the bytes after it; found by
	 * fuzz-registry, tests/fuzz/registry/crash-status-past-line) */
	{
		moe_http_resp *r = calloc(1, sizeof *r);
		const char buf[] = "HTTP/1.1   \r\n207 after the line";
		moe_http_parse_header(r, buf, 13);
		is_int(r->status, 0, "status line without a code: status 0, nothing read past the line");
		const char ok200[] = "HTTP/2 200\r\n";
		moe_http_parse_header(r, ok200, sizeof ok200 - 1);
		is_int(r->status, 200, "HTTP/2 200: status 200");
		const char loc[] = "Location: https://x/y \r\n";
		moe_http_parse_header(r, loc, sizeof loc - 1);
		is_str(r->location, "https://x/y", "Location stored, trimmed");
		free(r);
	}
	/* a cache ref holding a NUL is not a commit id: it read as "", the
	 * snapshots directory itself (found by fuzz-registry,
	 * tests/fuzz/registry/crash-ref-nul) */
	{
		char dir[] = "/tmp/t-registry-XXXXXX", p[128], commit[128];
		ok(mkdtemp(dir) != NULL, "temporary cache directory");
		snprintf(p, sizeof p, "%s/refs", dir);
		mkdir(p, 0700);
		snprintf(p, sizeof p, "%s/refs/main", dir);
		FILE *f = fopen(p, "wb");
		fwrite("\0\0\0.ggu\002%", 1, 9, f);
		fclose(f);
		e.msg[0] = 0;
		ok(moe_cache_read_ref(dir, "main", commit, &e) == MOE_EFORMAT &&
			   strstr(e.msg, "refs/main: not a commit id"),
		   "ref with a NUL refused, file named (%s)", e.msg);
		f = fopen(p, "wb");
		fputs("0123456789abcdef0123456789abcdef01234567\n", f);
		fclose(f);
		ok(moe_cache_read_ref(dir, "main", commit, &e) == 0 &&
			   !strcmp(commit, "0123456789abcdef0123456789abcdef01234567"),
		   "a commit id in refs/main read");
		unlink(p);
		snprintf(p, sizeof p, "%s/refs", dir);
		rmdir(p);
		rmdir(dir);
	}
	return tap_done();
}
