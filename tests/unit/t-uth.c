/* t-uth.c — UTH v1: writer -> file -> reader round trips (seekable file,
 * stdout as a regular file, stdout as a pipe: all byte-identical), the byte
 * layout checked field by field against man/uth.5 with libxxhash directly,
 * data checksums, and every reader check exercised by mutating a valid image
 * in memory (re-sealing the checksums where the check lies behind them).
 */
#include "quant.h"
#include "uth.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

/* ------------------------------------------------- independent helpers */

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}
static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}
static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static uint64_t align4k(uint64_t x)
{
	return (x + 4095) & ~(uint64_t)4095;
}

/* Recompute meta_xxh3 (if the section fields are sane) and header_xxh3, per
 * the spec, so a mutation reaches the check behind the checksums. */
static void reseal(uint8_t *buf, uint64_t size)
{
	uint64_t dir = rd64(buf + 32), end = rd64(buf + 64) + rd64(buf + 72);
	if (dir <= end && end <= size)
		wr64(buf + 104, XXH3_64bits(buf + dir, end - dir));
	wr64(buf + 112, XXH3_64bits(buf, 112));
}

static int read_all(const char *path, uint8_t **out, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0)
		return -1;
	*len = (size_t)st.st_size;
	*out = malloc(*len ? *len : 1);
	size_t got = 0;
	while (got < *len) {
		ssize_t r = read(fd, *out + got, *len - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	return got == *len ? 0 : -1;
}

static char tmpdir[256];

static const char *tpath(const char *name)
{
	static char p[8][512];
	static int k;
	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", tmpdir, name);
	return p[k];
}

/* --------------------------------------------------------- the model */

/* Deterministic bytes of a tensor; checks the fill contract (increasing
 * offsets from 0, contiguous). */
typedef struct gen {
	uint32_t seed;
	uint64_t next;
	int passes; /* times offset 0 was requested */
	int broken; /* contract violations seen */
	bool vary;  /* produce different bytes on each pass */
} gen;

static uint8_t gen_byte(uint32_t seed, uint64_t p)
{
	uint64_t x = (p + 1) * 0x9E3779B97F4A7C15ull ^ seed;
	x ^= x >> 29;
	return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static int gen_fill(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e)
{
	gen *g = ctx;
	if (off == 0) {
		g->passes++;
		g->next = 0;
	}
	if (off != g->next)
		g->broken++;
	g->next = off + n;
	if (n > ((size_t)4 << 20))
		g->broken++;
	for (size_t i = 0; i < n; i++)
		((uint8_t *)buf)[i] = gen_byte(g->seed + (g->vary ? (uint32_t)g->passes : 0),
					       off + i);
	return 0;
}

static int fail_fill(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e)
{
	return moe_err(e, MOE_EIO, "source went away");
}

#define NT 8
static const char *const names[NT] = {
	"token_embd.weight",     "blk.0.attn_q.weight",   "blk.0.ffn_gate.0.weight",
	"blk.0.ffn_up.0.weight", "blk.0.ffn_gate.1.weight", "blk.0.ffn_up.1.weight",
	"big.weight",            "output.weight",
};
/* dtype, n_dims, ne, layer, expert, role, and the size by hand:
 * f32 8x5 = 160; f16 8x8 = 128; q8_0 32x4 = 4 blocks x 34 = 136;
 * f32 1024x1100 = 4505600 (more than one 4 MiB chunk); q4_k 256x2 = 2 x 144. */
static const struct {
	uint16_t dtype;
	uint8_t n_dims;
	uint32_t ne[4];
	uint16_t layer, expert, role;
	uint64_t size;
} spec[NT] = {
	{ MOE_F32, 2, { 8, 5 }, 0xFFFF, 0xFFFF, 1, 160 },
	{ MOE_F16, 2, { 8, 8, 1, 1 }, 0, 0xFFFF, 5, 128 },
	{ MOE_Q8_0, 2, { 32, 4 }, 0, 0, 15, 136 },
	{ MOE_Q8_0, 2, { 32, 4 }, 0, 0, 16, 136 },
	{ MOE_Q8_0, 2, { 32, 4 }, 0, 1, 15, 136 },
	{ MOE_Q8_0, 2, { 32, 4 }, 0, 1, 16, 136 },
	{ MOE_F32, 2, { 1024, 1100 }, 0xFFFF, 0xFFFF, 48, 4505600 },
	{ MOE_Q4_K, 2, { 256, 2 }, 0xFFFF, 0xFFFF, 3, 288 },
};
static const char meta_json[] = "{\"arch\":\"test\",\"n_layer\":1,\"name\":\"caf\xc3\xa9\"}";

static gen gens[NT];

static moe_uth_writer *make_writer(void)
{
	moe_uth_writer *w;
	moe_error e = { 0 };
	if (moe_uth_writer_new(&w, &e) < 0)
		return NULL;
	for (int i = 0; i < NT; i++) {
		moe_uth_tensor d = {
			.name = names[i], .dtype = spec[i].dtype, .n_dims = spec[i].n_dims,
			.layer = spec[i].layer, .expert = spec[i].expert, .role = spec[i].role,
		};
		memcpy(d.ne, spec[i].ne, sizeof(d.ne));
		gens[i] = (gen){ .seed = (uint32_t)i * 7919u };
		if (moe_uth_writer_add(w, &d, gen_fill, &gens[i], &e) < 0) {
			tap_diag("add: %s", e.msg);
			moe_uth_writer_free(w);
			return NULL;
		}
	}
	if (moe_uth_writer_set_meta(w, meta_json, strlen(meta_json), &e) < 0) {
		tap_diag("meta: %s", e.msg);
		moe_uth_writer_free(w);
		return NULL;
	}
	return w;
}

static int write_file(const char *path, moe_error *e)
{
	moe_uth_writer *w = make_writer();
	moe_out o;
	int rc;
	if (!w)
		return -1;
	rc = moe_out_open(&o, path, e);
	if (rc == 0) {
		rc = moe_uth_writer_write(w, &o, e);
		if (rc == 0)
			rc = moe_out_commit(&o, e);
		else
			moe_out_abort(&o);
	}
	moe_uth_writer_free(w);
	return rc;
}

/* Write through moe_out on "-" with stdout pointing at fd (a file or a pipe). */
static int write_stdout(int fd, moe_error *e)
{
	int saved, rc;
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	dup2(fd, STDOUT_FILENO);
	rc = write_file("-", e);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	return rc;
}

static int write_pipe(const char *path, moe_error *e)
{
	int p[2], rc, status;
	pid_t pid;
	if (pipe(p) < 0)
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		/* Child: copy the pipe into the file. */
		char buf[65536];
		ssize_t r;
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		close(p[1]);
		while ((r = read(p[0], buf, sizeof(buf))) > 0)
			if (write(fd, buf, (size_t)r) != r)
				_exit(1);
		_exit(close(fd) == 0 && r == 0 ? 0 : 1);
	}
	close(p[0]);
	rc = write_stdout(p[1], e);
	close(p[1]);
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	return rc;
}

/* --------------------------------------------------------------- tests */

static uint8_t *img;   /* the valid file, in memory */
static size_t img_len;
static uint64_t off_names, off_meta, off_data;

static void test_roles(void)
{
	int bad = 0;
	for (int i = 1; i < MOE_UTH_ROLE_COUNT; i++)
		if (!moe_uth_role_name(i) || moe_uth_role_from_name(moe_uth_role_name(i)) != i)
			bad++;
	is_int(bad, 0, "role ids 1..54 round-trip through their names");
	is_int(MOE_UTH_ROLE_COUNT, 55, "54 roles");
	is_str(moe_uth_role_name(1), "token_embd", "role 1");
	is_str(moe_uth_role_name(18), "ffn_gate_inp", "role 18 (router)");
	is_str(moe_uth_role_name(28), "tokenizer_merge_offsets", "role 28");
	is_str(moe_uth_role_name(42), "ffn_exp_probs_b", "role 42");
	is_str(moe_uth_role_name(47), "ffn_post_norm", "role 47");
	is_str(moe_uth_role_name(48), "other", "role 48");
	is_str(moe_uth_role_name(49), "attn_sinks", "role 49");
	is_str(moe_uth_role_name(52), "ffn_down_bias", "role 52");
	is_str(moe_uth_role_name(54), "rope_factors_long", "role 54");
	ok(moe_uth_role_name(0) == NULL && moe_uth_role_name(55) == NULL &&
		   moe_uth_role_name(-1) == NULL, "roles 0, 55, -1 unknown");
	is_int(moe_uth_role_from_name("attn_kv_a_mqa"), 37, "attn_kv_a_mqa is 37");
	is_int(moe_uth_role_from_name("nope"), -1, "unknown name -> -1");
}

static void test_write_read(void)
{
	moe_error e = { 0 };
	moe_uth *u = NULL;
	int rc;

	rc = write_file(tpath("a.uth"), &e);
	is_int(rc, 0, "write to a file: %s", e.msg);
	is_int(gens[6].passes, 1, "seekable output: each fill runs once");
	is_int(gens[6].broken, 0, "fill sees increasing contiguous offsets, chunks <= 4 MiB");

	if (read_all(tpath("a.uth"), &img, &img_len) < 0) {
		ok(0, "read back");
		return;
	}
	/* Expected layout, by the rules of the spec. */
	uint64_t names_size = 0;
	for (int i = 0; i < NT; i++)
		names_size += strlen(names[i]) + 1;
	off_names = 4096 + NT * 64;
	off_meta = off_names + names_size;
	off_data = align4k(off_meta + strlen(meta_json));
	uint64_t pos = off_data, offs[NT];
	for (int i = 0; i < NT; i++) {
		offs[i] = pos;
		pos = align4k(pos + spec[i].size);
	}
	is_int(img_len, pos, "file size = aligned end of the last tensor");

	/* Header, field by field. */
	ok(memcmp(img, "UTH\0v1\0\0", 8) == 0, "magic");
	is_int(rd32(img + 8), 1, "version");
	is_int(rd32(img + 12), 4096, "header_size");
	is_int(rd64(img + 16), img_len, "file_size");
	is_int(rd64(img + 24), NT, "n_tensors");
	is_int(rd64(img + 32), 4096, "dir_offset");
	is_int(rd64(img + 40), NT * 64, "dir_size");
	is_int(rd64(img + 48), off_names, "names_offset");
	is_int(rd64(img + 56), names_size, "names_size");
	is_int(rd64(img + 64), off_meta, "meta_offset");
	is_int(rd64(img + 72), strlen(meta_json), "meta_size");
	is_int(rd64(img + 80), off_data, "data_offset");
	is_int(rd64(img + 88), img_len - off_data, "data_size");
	is_int(rd32(img + 96), 4096, "alignment");
	is_int(rd32(img + 100), 0, "flags");
	ok(rd64(img + 104) == XXH3_64bits(img + 4096, off_meta + strlen(meta_json) - 4096),
	   "meta_xxh3 covers directory, names and metadata");
	ok(rd64(img + 112) == XXH3_64bits(img, 112), "header_xxh3 covers bytes 0..111");
	int nz = 0;
	for (int i = 120; i < 4096; i++)
		nz += img[i] != 0;
	is_int(nz, 0, "header bytes 120..4095 are zero");
	ok(memcmp(img + off_names, "token_embd.weight\0blk.0.attn_q.weight\0", 38) == 0,
	   "names follow the directory, NUL-terminated");
	ok(memcmp(img + off_meta, meta_json, strlen(meta_json)) == 0, "metadata follows names");

	/* Records, field by field. */
	int bad = 0;
	uint64_t name_off = 0;
	for (int i = 0; i < NT; i++) {
		const uint8_t *r = img + 4096 + 64 * i;
		bad += rd16(r) != spec[i].dtype;
		bad += r[2] != spec[i].n_dims;
		bad += r[3] != 0;
		bad += rd32(r + 4) != name_off;
		for (int k = 0; k < 4; k++)
			bad += rd32(r + 8 + 4 * k) != (spec[i].ne[k] ? spec[i].ne[k] : 1);
		bad += rd64(r + 24) != offs[i];
		bad += rd64(r + 32) != spec[i].size;
		bad += rd32(r + 40) != 0;
		bad += rd16(r + 44) != spec[i].layer;
		bad += rd16(r + 46) != spec[i].expert;
		bad += rd16(r + 48) != spec[i].role;
		bad += rd16(r + 50) != strlen(names[i]);
		bad += rd32(r + 52) != 0;
		bad += rd64(r + 56) != XXH3_64bits(img + offs[i], spec[i].size);
		/* The data itself. */
		for (uint64_t b = 0; b < spec[i].size; b += 997)
			bad += img[offs[i] + b] != gen_byte((uint32_t)i * 7919u, b);
		/* Zero padding after it. */
		uint64_t end = offs[i] + spec[i].size;
		for (uint64_t b = end; b < align4k(end); b++)
			bad += img[b] != 0;
		name_off += strlen(names[i]) + 1;
	}
	is_int(bad, 0, "every record field, data byte sample and padding as specified");

	/* Reader. */
	rc = moe_uth_open(&u, tpath("a.uth"), &e);
	is_int(rc, 0, "open: %s", e.msg);
	if (rc < 0)
		return;
	is_int(u->n_tensors, NT, "n_tensors");
	is_int(u->file_size, img_len, "file_size");
	is_int(u->flags, 0, "flags");
	is_int(u->data_offset, off_data, "data_offset");
	is_str(u->meta, meta_json, "metadata, NUL-terminated");
	is_int(u->meta_len, strlen(meta_json), "meta_len");
	bad = 0;
	for (int i = 0; i < NT; i++) {
		const moe_uth_tensor *t = &u->tensors[i];
		bad += strcmp(t->name, names[i]) != 0;
		bad += t->dtype != spec[i].dtype || t->n_dims != spec[i].n_dims;
		bad += t->layer != spec[i].layer || t->expert != spec[i].expert;
		bad += t->role != spec[i].role || t->layout != 0 || t->scale_offset != 0;
		bad += t->offset != offs[i] || t->size != spec[i].size;
		for (int k = 0; k < 4; k++)
			bad += t->ne[k] != (spec[i].ne[k] ? spec[i].ne[k] : 1);
		bad += moe_uth_find(u, names[i]) != t;
		bad += memcmp(moe_uth_data(u, t), img + offs[i], (size_t)t->size) != 0;
	}
	is_int(bad, 0, "descriptors and data read back; find() finds each");
	ok(moe_uth_find(u, "nope") == NULL, "find: missing name -> NULL");
	ok(moe_uth_find(u, "blk.0.attn_q") == NULL, "find: prefix is not a match");

	size_t first = 99, count = 99;
	rc = moe_uth_expert(u, 0, 1, &first, &count);
	ok(rc == 0 && first == 4 && count == 2, "expert (0, 1): tensors 4..5");
	rc = moe_uth_expert(u, 0, 0, &first, &count);
	ok(rc == 0 && first == 2 && count == 2, "expert (0, 0): tensors 2..3");
	is_int(moe_uth_expert(u, 0, 2, &first, &count), MOE_ENOTFOUND, "expert (0, 2) absent");
	is_int(moe_uth_expert(u, 1, 0, &first, &count), MOE_ENOTFOUND, "expert (1, 0) absent");

	rc = moe_uth_verify(u, &e);
	is_int(rc, 0, "verify: all data checksums match: %s", e.msg);
	moe_uth_close(u);

	/* Flip one data byte of tensor 5 on disk: verify names it. */
	int fd = open(tpath("a.uth"), O_RDWR);
	uint8_t x = img[offs[5] + 17] ^ 0x40;
	ok(fd >= 0 && pwrite(fd, &x, 1, (off_t)(offs[5] + 17)) == 1, "flip a data byte");
	close(fd);
	rc = moe_uth_open(&u, tpath("a.uth"), &e);
	is_int(rc, 0, "a data byte is not checked by open");
	if (rc == 0) {
		rc = moe_uth_verify(u, &e);
		is_int(rc, MOE_ECHECKSUM, "verify fails after the flip");
		ok(strstr(e.msg, "'blk.0.ffn_up.1.weight'") && strstr(e.msg, "a.uth"),
		   "error names file and tensor: %s", e.msg);
		const moe_uth_tensor *t = moe_uth_find(u, names[4]);
		is_int(moe_uth_verify_tensor(u, t, NULL, &e), 0, "the tensor before is fine");
		t = moe_uth_find(u, names[5]);
		is_int(moe_uth_verify_tensor(u, t, img + offs[5], &e), 0,
		       "verify_tensor on a caller's (good) copy");
		moe_uth_close(u);
	}
}

static bool same_file(const char *path, const char *what)
{
	uint8_t *b = NULL;
	size_t n = 0;
	bool same = read_all(path, &b, &n) == 0 && n == img_len && memcmp(b, img, n) == 0;
	free(b);
	return ok(same, "%s: byte-identical to the seekable file", what);
}

static void test_stdout_paths(void)
{
	moe_error e = { 0 };
	int rc;

	/* stdout redirected to a regular file: still seekable. */
	int fd = open(tpath("stdout.uth"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	rc = write_stdout(fd, &e);
	close(fd);
	is_int(rc, 0, "write to stdout (a regular file): %s", e.msg);
	same_file(tpath("stdout.uth"), "stdout as a file");

	rc = write_pipe(tpath("pipe.uth"), &e);
	is_int(rc, 0, "write to stdout (a pipe): %s", e.msg);
	is_int(gens[6].passes, 2, "pipe: each fill runs twice (hash, then write)");
	is_int(gens[6].broken, 0, "pipe: fill contract kept on both passes");
	same_file(tpath("pipe.uth"), "pipe");
}

/* A fill that differs between its two passes is caught on a pipe. */
static void test_pipe_unstable(void)
{
	moe_uth_writer *w;
	moe_error e = { 0 };
	gen g = { .seed = 1, .vary = true };
	moe_uth_tensor d = { .name = "x", .dtype = MOE_F32, .n_dims = 1, .ne = { 64 },
			     .layer = 0xFFFF, .expert = 0xFFFF, .role = 48 };
	moe_uth_writer_new(&w, &e);
	moe_uth_writer_add(w, &d, gen_fill, &g, &e);

	int p[2], saved, rc;
	if (pipe(p) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		char buf[4096];
		close(p[1]);
		while (read(p[0], buf, sizeof(buf)) > 0)
			;
		_exit(0);
	}
	close(p[0]);
	fflush(stdout);
	saved = dup(1);
	dup2(p[1], 1);
	moe_out o;
	rc = moe_out_open(&o, "-", &e);
	if (rc == 0) {
		rc = moe_uth_writer_write(w, &o, &e);
		moe_out_abort(&o);
	}
	dup2(saved, 1);
	close(saved);
	close(p[1]);
	waitpid(pid, NULL, 0);
	ok(rc < 0 && strstr(e.msg, "second pass"), "unstable fill on a pipe: %s", e.msg);
	moe_uth_writer_free(w);
}

typedef void (*mut_fn)(uint8_t *b, size_t n);

/* Parse a mutated copy of the valid image; expect failure with `want` in
 * the message. */
static void expect_bad(const char *what, mut_fn f, bool seal, uint64_t size, const char *want)
{
	uint8_t *b = malloc(img_len + 8192);
	moe_error e = { 0 };
	moe_uth *u = NULL;
	memcpy(b, img, img_len);
	memset(b + img_len, 0, 8192);
	if (!size)
		size = img_len;
	f(b, size);
	if (seal)
		reseal(b, size);
	int rc = moe_uth_parse("m.uth", b, size, &u, &e);
	ok(rc < 0 && u == NULL && strstr(e.msg, want) && strncmp(e.msg, "m.uth: ", 7) == 0,
	   "reject %s: %s", what, e.msg);
	if (rc == 0)
		moe_uth_close(u);
	free(b);
}

#define REC(b, i) ((b) + 4096 + 64 * (i))
#define MUT(name, body)                                                                  \
	static void name(uint8_t *b, size_t n)                                          \
	{                                                                               \
		body;                                                                   \
	}

MUT(m_none, (void)b)
MUT(m_magic, b[3] = 1)
MUT(m_version, wr32(b + 8, 2))
MUT(m_header_size, wr32(b + 12, 8192))
MUT(m_hdr_byte, b[20] ^= 1)
MUT(m_hdr_sum, b[113] ^= 1)
MUT(m_file_size, wr64(b + 16, n - 1))
MUT(m_align, wr32(b + 96, 512))
MUT(m_flags, wr32(b + 100, 6))
MUT(m_reserved_hdr, b[2000] = 1)
MUT(m_dir_offset, wr64(b + 32, 0))
MUT(m_ntensors_ovf, wr64(b + 24, (1ull << 58) + 1))
MUT(m_dir_size, wr64(b + 40, rd64(b + 40) - 64))
MUT(m_dir_huge, (wr64(b + 24, n / 64), wr64(b + 40, n / 64 * 64)))
MUT(m_names_offset, wr64(b + 48, rd64(b + 48) + 1))
MUT(m_names_size, wr64(b + 56, UINT64_MAX - 10))
MUT(m_meta_offset, wr64(b + 64, rd64(b + 64) - 1))
MUT(m_meta_size, wr64(b + 72, UINT64_MAX))
MUT(m_meta_size_big, wr64(b + 72, n))
MUT(m_data_offset, wr64(b + 80, rd64(b + 80) + 4096))
MUT(m_data_size, wr64(b + 88, rd64(b + 88) - 4096))
MUT(m_meta_sum, b[off_names] ^= 1)
MUT(m_pad, b[off_data - 1] = 1)
MUT(m_json, b[off_meta + 7] = '#')
MUT(m_json_arr, (memset(b + off_meta, ' ', rd64(b + 72)), b[off_meta] = '[',
	b[off_meta + rd64(b + 72) - 1] = ']'))
MUT(m_json_utf8, b[off_meta + rd64(b + 72) - 3] = 0xff)
MUT(m_json_nul, b[off_meta + 2] = 0)
MUT(m_name_off, wr32(REC(b, 1) + 4, (uint32_t)rd64(b + 56)))
MUT(m_name_len, wr16(REC(b, 0) + 50, 5))
MUT(m_name_empty, (wr32(REC(b, 1) + 4, 17), wr16(REC(b, 1) + 50, 0)))
MUT(m_name_nul, wr16(REC(b, 0) + 50, 17 + 1 + 19))
MUT(m_dtype, wr16(REC(b, 1), 99))
MUT(m_dtype4, wr16(REC(b, 1), 4))
MUT(m_role0, wr16(REC(b, 1) + 48, 0))
MUT(m_role55, wr16(REC(b, 1) + 48, 55))
MUT(m_ndims0, REC(b, 1)[2] = 0)
MUT(m_ndims5, REC(b, 1)[2] = 5)
MUT(m_ne_zero, wr32(REC(b, 1) + 12, 0))
MUT(m_ne_unused, wr32(REC(b, 1) + 16, 2))
MUT(m_ne_block, wr32(REC(b, 2) + 8, 16))
MUT(m_ne_ovf, (REC(b, 1)[2] = 4, wr32(REC(b, 1) + 8, 0xFFFFFFFF), wr32(REC(b, 1) + 12,
	0xFFFFFFFF), wr32(REC(b, 1) + 16, 0xFFFFFFFF), wr32(REC(b, 1) + 20, 0xFFFFFFFF)))
MUT(m_size_ovf, (wr32(REC(b, 2) + 8, 0xFFFFFFE0), wr32(REC(b, 2) + 12, 0xFFFFFFFF)))
MUT(m_size, wr64(REC(b, 1) + 32, 129))
MUT(m_unaligned, wr64(REC(b, 1) + 24, rd64(REC(b, 1) + 24) + 16))
MUT(m_past_end, wr64(REC(b, 7) + 24, n))
MUT(m_before_data, wr64(REC(b, 0) + 24, 0))
MUT(m_overlap, wr64(REC(b, 2) + 24, rd64(REC(b, 1) + 24)))
MUT(m_adjacent, (wr16(REC(b, 3) + 46, 1), wr16(REC(b, 4) + 46, 0)))
MUT(m_dup, (wr32(REC(b, 1) + 4, 0), wr16(REC(b, 1) + 50, 17)))
MUT(m_layout, REC(b, 1)[3] = 9)
MUT(m_layout_f16, REC(b, 1)[3] = 1)
MUT(m_layout_role, (REC(b, 2)[3] = 1, wr16(REC(b, 2) + 48, 1)))
MUT(m_layout_rows, (REC(b, 2)[3] = 1, wr32(REC(b, 2) + 8, 64), wr32(REC(b, 2) + 12, 2)))
MUT(m_layout_ok, REC(b, 2)[3] = 1)
MUT(m_dtype_ktype, wr16(REC(b, 2), 64))
MUT(m_scale, wr32(REC(b, 1) + 40, 64))
MUT(m_reserved_rec, REC(b, 3)[53] = 1)

static void test_malformed(void)
{
	if (!img)
		return;
	expect_bad("a 100-byte file", m_none, false, 100, "shorter than the 4096-byte UTH header");
	expect_bad("bad magic", m_magic, false, 0, "bad magic");
	expect_bad("version 2", m_version, true, 0, "version 2 is not supported");
	expect_bad("header_size", m_header_size, true, 0, "header_size 8192");
	expect_bad("a flipped header byte", m_hdr_byte, false, 0, "header checksum mismatch");
	expect_bad("a flipped header checksum", m_hdr_sum, false, 0, "header checksum mismatch");
	expect_bad("file_size", m_file_size, true, 0, "file_size");
	expect_bad("a file extended by 4096 bytes", m_none, false, img_len + 4096,
		   "file_size");
	expect_bad("alignment 512", m_align, true, 0, "alignment 512");
	expect_bad("unknown flags", m_flags, true, 0, "unknown flags 0x6");
	expect_bad("non-zero reserved header bytes", m_reserved_hdr, true, 0, "reserved bytes");
	expect_bad("dir_offset 0", m_dir_offset, true, 0, "dir_offset 0");
	expect_bad("n_tensors * 64 overflow", m_ntensors_ovf, true, 0, "n_tensors");
	expect_bad("dir_size != n x 64", m_dir_size, true, 0, "dir_size");
	expect_bad("directory past the end", m_dir_huge, true, 0, "directory");
	expect_bad("names_offset", m_names_offset, true, 0, "names_offset");
	expect_bad("names_size overflowing", m_names_size, true, 0, "names [");
	expect_bad("meta_offset", m_meta_offset, true, 0, "meta_offset");
	expect_bad("meta_size overflowing", m_meta_size, true, 0, "metadata [");
	expect_bad("meta_size past the end", m_meta_size_big, true, 0, "outside the file");
	expect_bad("data_offset", m_data_offset, true, 0, "data_offset");
	expect_bad("data_size", m_data_size, true, 0, "data_size");
	expect_bad("a flipped name byte", m_meta_sum, false, 0, "meta checksum mismatch");
	expect_bad("non-zero padding", m_pad, true, 0, "padding after the metadata");
	expect_bad("metadata that is not JSON", m_json, true, 0, "not valid JSON");
	expect_bad("metadata not an object", m_json_arr, true, 0, "not an object");
	expect_bad("metadata not UTF-8", m_json_utf8, true, 0, "not valid JSON");
	expect_bad("metadata with a NUL", m_json_nul, true, 0, "NUL");
	expect_bad("name_offset outside names", m_name_off, true, 0, "name_offset");
	expect_bad("name not NUL-terminated", m_name_len, true, 0, "not NUL-terminated");
	expect_bad("empty name", m_name_empty, true, 0, "empty name");
	expect_bad("NUL inside a name", m_name_nul, true, 0, "contains a NUL");
	expect_bad("dtype 99", m_dtype, true, 0, "dtype 99 is unknown");
	expect_bad("dtype 4 (retired)", m_dtype4, true, 0, "dtype 4 is unknown");
	expect_bad("role 0", m_role0, true, 0, "role 0 is unknown");
	expect_bad("role 55", m_role55, true, 0, "role 55 is unknown");
	expect_bad("n_dims 0", m_ndims0, true, 0, "n_dims 0");
	expect_bad("n_dims 5", m_ndims5, true, 0, "n_dims 5");
	expect_bad("a zero ne", m_ne_zero, true, 0, "ne[1] is 0");
	expect_bad("unused ne != 1", m_ne_unused, true, 0, "ne[2] = 2 but must be 1");
	expect_bad("ne[0] not whole blocks", m_ne_block, true, 0, "block size 32");
	expect_bad("element count overflow", m_ne_ovf, true, 0, "element count overflows");
	expect_bad("data size overflow", m_size_ovf, true, 0, "data size overflows");
	expect_bad("data_size != nbytes", m_size, true, 0, "data_size 129");
	expect_bad("unaligned data", m_unaligned, true, 0, "not aligned");
	expect_bad("data past the end", m_past_end, true, 0, "outside the data section");
	expect_bad("data before data_offset", m_before_data, true, 0,
		   "outside the data section");
	expect_bad("overlapping tensors", m_overlap, true, 0, "overlaps");
	expect_bad("expert adjacency", m_adjacent, true, 0, "expert (layer 0, expert 0) is not "
		   "adjacent");
	expect_bad("duplicate names", m_dup, true, 0, "'token_embd.weight': duplicate name");
	expect_bad("unknown layout", m_layout, true, 0, "layout 9 is unknown");
	expect_bad("layout r4 on f16", m_layout_f16, true, 0,
		   "layout 1 (r4) is not defined for dtype f16");
	expect_bad("layout r4 on token_embd", m_layout_role, true, 0,
		   "layout 1 (r4) is not allowed for role token_embd");
	expect_bad("layout r4 with 2 rows", m_layout_rows, true, 0,
		   "layout 1 (r4) needs a 2-D matrix with a multiple of 4 rows");
	expect_bad("a kernel type id as dtype", m_dtype_ktype, true, 0, "dtype 64 is unknown");
	{
		uint8_t *b = malloc(img_len);
		moe_error e = { 0 };
		moe_uth *u = NULL;
		memcpy(b, img, img_len);
		m_layout_ok(b, img_len);
		reseal(b, img_len);
		int rc = moe_uth_parse("m.uth", b, img_len, &u, &e);
		ok(rc == 0 && u->tensors[2].layout == MOE_UTH_LAYOUT_R4,
		   "layout r4 on a q8_0 ffn_gate with 4 rows is read: %s", rc ? e.msg : "ok");
		moe_uth_close(u);
		free(b);
	}
	expect_bad("scale_offset with layout 0", m_scale, true, 0, "scale_offset 64");
	expect_bad("non-zero reserved record bytes", m_reserved_rec, true, 0,
		   "reserved bytes 52..55");

	/* Truncation at every 4096 boundary. */
	int bad = 0;
	for (size_t k = 0; k * 4096 < img_len; k++) {
		moe_error e = { 0 };
		moe_uth *u = NULL;
		int rc = moe_uth_parse("m.uth", img, k * 4096, &u, &e);
		const char *want = k == 0 ? "shorter than" : "file_size";
		if (rc >= 0 || !strstr(e.msg, want)) {
			if (!bad)
				tap_diag("truncated at %zu: %s", k * 4096, e.msg);
			bad++;
		}
		moe_uth_close(u);
	}
	is_int(bad, 0, "truncation at each of %zu 4096-byte boundaries is rejected",
	       img_len / 4096);
}

/* The control for the mutations below: the unmutated image parses, so each
 * rejection is due to its mutation (and its message says which check). */
static void test_control(void)
{
	moe_error e = { 0 };
	moe_uth *u = NULL;
	if (!img)
		return;
	int rc = moe_uth_parse("m.uth", img, img_len, &u, &e);
	is_int(rc, 0, "the unmutated image parses: %s", e.msg);
	moe_uth_close(u);
}

static void expect_add_fail(moe_uth_writer *w, moe_uth_tensor d, const char *want)
{
	moe_error e = { 0 };
	static const uint8_t zeros[1 << 16];
	int rc = moe_uth_writer_add_mem(w, &d, zeros, &e);
	ok(rc < 0 && strstr(e.msg, want), "writer rejects: %s", e.msg);
}

static void test_writer_checks(void)
{
	moe_uth_writer *w;
	moe_error e = { 0 };
	static const uint8_t zeros[1 << 16];
	moe_uth_tensor base = { .name = "a", .dtype = MOE_F32, .n_dims = 1, .ne = { 4 },
				.layer = 0xFFFF, .expert = 0xFFFF, .role = 48 };
	moe_uth_tensor d;

	moe_uth_writer_new(&w, &e);
	is_int(moe_uth_writer_add_mem(w, &base, zeros, &e), 0, "add a tensor");
	expect_add_fail(w, base, "duplicate name");
	d = base, d.name = "b", d.dtype = 99;
	expect_add_fail(w, d, "dtype 99 is unknown");
	d = base, d.name = "b", d.role = 0;
	expect_add_fail(w, d, "role 0 is unknown");
	d = base, d.name = "b", d.role = 55;
	expect_add_fail(w, d, "role 55 is unknown");
	d = base, d.name = "b", d.n_dims = 5;
	expect_add_fail(w, d, "n_dims 5");
	d = base, d.name = "b", d.n_dims = 0;
	expect_add_fail(w, d, "n_dims 0");
	d = base, d.name = "b", d.n_dims = 2, d.ne[1] = 0;
	d.ne[0] = 4;
	expect_add_fail(w, d, "ne[1] is 0"); /* used dims may not be 0 */
	d = base, d.name = "b", d.ne[1] = 3;
	expect_add_fail(w, d, "ne[1] = 3 but must be 1");
	d = base, d.name = "b", d.dtype = MOE_Q8_0, d.ne[0] = 31;
	expect_add_fail(w, d, "block size 32");
	d = base, d.name = "b", d.layout = 2;
	expect_add_fail(w, d, "layout 2 is unknown");
	d = base, d.name = "b", d.layout = MOE_UTH_LAYOUT_R4;
	expect_add_fail(w, d, "layout 1 (r4) is not defined for dtype");
	d = base, d.name = "b", d.dtype = MOE_Q8_0_R4;
	expect_add_fail(w, d, "dtype 64 is unknown");
	d = base, d.name = "b", d.scale_offset = 8;
	expect_add_fail(w, d, "scale_offset");
	d = base, d.name = "";
	expect_add_fail(w, d, "empty name");
	char *longname = malloc(65537);
	memset(longname, 'x', 65536);
	longname[65536] = 0;
	d = base, d.name = longname;
	expect_add_fail(w, d, "longer than 65535");
	longname[65535] = 0;
	is_int(moe_uth_writer_add_mem(w, &d, zeros, &e), 0, "a 65535-byte name is fine");
	free(longname);

	/* Expert adjacency: (1, 0) (1, 1) (1, 0) is refused. */
	d = base, d.layer = 1, d.expert = 0, d.name = "e0a";
	is_int(moe_uth_writer_add_mem(w, &d, zeros, &e), 0, "expert 0, first tensor");
	d.name = "e0b";
	is_int(moe_uth_writer_add_mem(w, &d, zeros, &e), 0, "expert 0, second tensor");
	d.name = "e1a", d.expert = 1;
	is_int(moe_uth_writer_add_mem(w, &d, zeros, &e), 0, "expert 1");
	d.name = "e0c", d.expert = 0;
	expect_add_fail(w, d, "expert (layer 1, expert 0) is not adjacent");
	d.name = "e0c", d.layer = 2;
	is_int(moe_uth_writer_add_mem(w, &d, zeros, &e), 0, "expert 0 of another layer is fine");

	ok(moe_uth_writer_set_meta(w, "{\"a\":", 5, &e) < 0 && strstr(e.msg, "not valid JSON"),
	   "metadata: truncated JSON refused: %s", e.msg);
	ok(moe_uth_writer_set_meta(w, "[1]", 3, &e) < 0 && strstr(e.msg, "not an object"),
	   "metadata: array refused");
	ok(moe_uth_writer_set_meta(w, "{\"a\":\"\xff\"}", 9, &e) < 0,
	   "metadata: invalid UTF-8 refused");
	ok(moe_uth_writer_set_meta(w, "{\"a\":1,\"a\":2}", 13, &e) < 0,
	   "metadata: duplicate keys refused");

	moe_uth_writer_set_flags(w, 0x80);
	moe_out o;
	moe_out_open(&o, tpath("flags.uth"), &e);
	ok(moe_uth_writer_write(w, &o, &e) < 0 && strstr(e.msg, "flags"),
	   "unknown flag refused");
	moe_out_abort(&o);

	/* The refusals left the writer usable: write what was accepted. */
	moe_uth_writer_set_flags(w, 0);
	moe_out_open(&o, tpath("flags.uth"), &e);
	int rc = moe_uth_writer_write(w, &o, &e);
	if (rc == 0)
		rc = moe_out_commit(&o, &e);
	else
		moe_out_abort(&o);
	is_int(rc, 0, "write the accepted tensors: %s", e.msg);
	moe_uth_writer_free(w);
	moe_uth *u = NULL;
	rc = moe_uth_open(&u, tpath("flags.uth"), &e);
	is_int(rc, 0, "read them: %s", e.msg);
	if (rc == 0) {
		size_t first = 0, count = 0;
		is_int(u->n_tensors, 6, "6 tensors accepted");
		ok(strlen(u->tensors[1].name) == 65535 && u->tensors[1].name[0] == 'x',
		   "the 65535-byte name reads back");
		ok(moe_uth_find(u, u->tensors[1].name) == &u->tensors[1], "and is found");
		ok(moe_uth_expert(u, 1, 0, &first, &count) == 0 && first == 2 && count == 2,
		   "expert (1, 0) = tensors 2..3");
		ok(moe_uth_expert(u, 2, 0, &first, &count) == 0 && first == 5 && count == 1,
		   "expert (2, 0) = tensor 5");
		is_int(moe_uth_verify(u, &e), 0, "verify");
		moe_uth_close(u);
	}
	unlink(tpath("flags.uth"));

	/* A failing fill: the error names the tensor and keeps the cause. */
	moe_uth_writer_new(&w, &e);
	d = base, d.name = "broken";
	moe_uth_writer_add(w, &d, fail_fill, NULL, &e);
	moe_out_open(&o, tpath("fail.uth"), &e);
	ok(moe_uth_writer_write(w, &o, &e) == MOE_EIO && strstr(e.msg, "'broken'") &&
		   strstr(e.msg, "source went away"), "fill error propagates: %s", e.msg);
	moe_out_abort(&o);
	moe_uth_writer_free(w);
}

/* No tensors, vocabulary-only flag, default metadata. */
static void test_empty_and_flags(void)
{
	moe_uth_writer *w;
	moe_error e = { 0 };
	moe_uth *u;
	moe_out o;

	moe_uth_writer_new(&w, &e);
	moe_uth_writer_set_flags(w, MOE_UTH_FLAG_VOCAB_ONLY);
	moe_out_open(&o, tpath("empty.uth"), &e);
	int rc = moe_uth_writer_write(w, &o, &e);
	if (rc == 0)
		rc = moe_out_commit(&o, &e);
	is_int(rc, 0, "write an empty file: %s", e.msg);
	moe_uth_writer_free(w);
	rc = moe_uth_open(&u, tpath("empty.uth"), &e);
	is_int(rc, 0, "open it: %s", e.msg);
	if (rc == 0) {
		is_int(u->file_size, 8192, "header + {} padded = 8192 bytes");
		is_int(u->n_tensors, 0, "no tensors");
		is_int(u->flags, MOE_UTH_FLAG_VOCAB_ONLY, "vocabulary-only flag kept");
		is_str(u->meta, "{}", "default metadata");
		is_int(moe_uth_verify(u, &e), 0, "verify an empty file");
		moe_uth_close(u);
	}

	ok(moe_uth_open(&u, tpath("missing.uth"), &e) == MOE_EIO && u == NULL,
	   "missing file: MOE_EIO");
	ok(moe_uth_open(&u, tmpdir, &e) < 0 && strstr(e.msg, "not a regular file"),
	   "a directory: %s", e.msg);
}

int main(void)
{
	const char *t = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/t-uth.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpdir))
		tap_skip_all("cannot create a temporary directory");

	test_roles();
	test_write_read();
	test_control();
	test_stdout_paths();
	test_pipe_unstable();
	test_malformed();
	test_writer_checks();
	test_empty_and_flags();

	const char *files[] = { "a.uth", "stdout.uth", "pipe.uth", "empty.uth" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		unlink(tpath(files[i]));
	rmdir(tmpdir);
	free(img);
	return tap_done();
}
