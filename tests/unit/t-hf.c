/* t-hf.c — the Hugging Face snapshot reader: safetensors files assembled
 * byte by byte here, snapshot directories in a temporary directory, the same
 * snapshots packed with libarchive's writer as .tar, .tar.gz, .tar.zst and
 * .zip (read in place), the access pattern of archive sources, and a
 * catalogue of malformed inputs each rejected with a specific message.
 *
 * Expected offsets, shapes and bytes come from the test's own construction,
 * not from the reader.  With MOE_HF_WRITE_SEEDS=dir the test also writes the
 * fuzzer's seed corpus (tests/fuzz/safetensors).
 */
#include "hf.h"
#include "quant.h"
#include "tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];

/* A string literal as (data, length) for struct aent. */
#define S(x) x, sizeof(x) - 1

/* ------------------------------------------------------------- helpers */

static void die(const char *what)
{
	printf("Bail out! %s\n", what);
	exit(1);
}

/* A safetensors file: u64 LE header length, the JSON padded with spaces to
 * a multiple of 8 (as the reference writer does), then the data. */
static uint8_t *st_file(const char *json, const void *data, size_t dlen, size_t *len,
			uint64_t *hlen)
{
	size_t j = strlen(json), pad = (8 - j % 8) % 8, n = 8 + j + pad + dlen;
	uint8_t *b = malloc(n);

	if (!b)
		die("malloc");
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)(j + pad) >> (8 * i));
	memcpy(b + 8, json, j);
	memset(b + 8 + j, ' ', pad);
	if (dlen)
		memcpy(b + 8 + j + pad, data, dlen);
	*len = n;
	if (hlen)
		*hlen = j + pad;
	return b;
}

static void write_file(const char *dir, const char *name, const void *data, size_t n)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
		die(path);
}

static void write_str(const char *dir, const char *name, const char *s)
{
	write_file(dir, name, s, strlen(s));
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long sz = 0;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0)
		die(path);
	rewind(f);
	b = malloc((size_t)sz + 1);
	if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz)
		die(path);
	fclose(f);
	*n = (size_t)sz;
	return b;
}

/* A new directory in tmp (the returned name stays valid). */
static char *mkdir_in(const char *name)
{
	static char dirs[64][512];
	static int k;
	char *p;

	if (k == 64)
		die("too many directories");
	p = dirs[k++];
	snprintf(p, 512, "%s/%s", tmp, name);
	if (mkdir(p, 0755) != 0)
		die(p);
	return p;
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

/* Parse a whole safetensors file from memory; returns the error code and
 * leaves the message in *e. */
static int parse_mem(const uint8_t *b, size_t n, moe_hf_tensor **t, uint64_t *nt,
		     moe_arena *a, moe_error *e)
{
	moe_src *src;
	int rc;

	if (moe_src_open_mem(&src, "t.safetensors", b, n, e) != 0)
		die("moe_src_open_mem");
	rc = moe_safetensors_read(src, a, t, nt, e);
	moe_src_close(src);
	return rc;
}

static void expect_err(int rc, int code, const moe_error *e, const char *sub, const char *what)
{
	ok(rc == code && strstr(e->msg, sub) != NULL, "%s: rejected with '%s'", what, sub);
	if (rc != code || !strstr(e->msg, sub))
		tap_diag("rc %d (want %d), message: %s", rc, code, e->msg);
}

/* ------------------------------------------------ the test snapshots */

/* Snapshot A: one model.safetensors, keys not in offset order, metadata. */
static const char *A_JSON =
	"{\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
	"\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
	"\"__metadata__\":{\"format\":\"pt\"},"
	"\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}";
static uint8_t a_data[40];

/* Snapshot B: two shards and an index. */
static const char *B1_JSON =
	"{\"x.weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
	"\"y\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}}";
static const char *B2_JSON =
	"{\"z\":{\"dtype\":\"F32\",\"shape\":[512,512],\"data_offsets\":[0,1048576]},"
	"\"w\":{\"dtype\":\"I8\",\"shape\":[5],\"data_offsets\":[1048576,1048581]}}";
static const char *B_INDEX =
	"{\"metadata\":{\"total_size\":1048601},\"weight_map\":{"
	"\"x.weight\":\"model-00001-of-00002.safetensors\","
	"\"y\":\"model-00001-of-00002.safetensors\","
	"\"z\":\"model-00002-of-00002.safetensors\","
	"\"w\":\"model-00002-of-00002.safetensors\"}}";
static uint8_t b1_data[20];
static uint8_t *b2_data; /* 1048581 bytes, pseudo-random so it does not compress away */
#define B2_SIZE 1048581

struct want {
	const char *name;
	int dtype;
	uint32_t n_dims;
	uint64_t shape[4];
	const char *shard;
	uint64_t offset; /* absolute, computed from the header length */
	uint64_t size;
	const uint8_t *data;
};

static struct want want_a[3], want_b[4];
static char *dir_a, *dir_b;

static void make_data(void)
{
	uint32_t x = 12345;
	uint16_t bf[4] = { 0x3f80, 0x4000, 0x4040, 0x4080 }; /* 1, 2, 3, 4 */
	int64_t c = -7;

	for (int i = 0; i < 6; i++) {
		float f = 0.5f * (float)i;
		memcpy(a_data + 4 * i, &f, 4);
	}
	memcpy(a_data + 24, bf, 8);
	memcpy(a_data + 32, &c, 8);
	for (int i = 0; i < 20; i++)
		b1_data[i] = (uint8_t)(3 * i + 1);
	b2_data = malloc(B2_SIZE);
	if (!b2_data)
		die("malloc");
	for (size_t i = 0; i < B2_SIZE; i++) {
		x = x * 1103515245u + 12345u;
		b2_data[i] = (uint8_t)(x >> 16);
	}
}

static void make_snapshots(void)
{
	uint8_t *b;
	size_t n;
	uint64_t h, h1, h2;

	dir_a = mkdir_in("snap-a");
	write_str(dir_a, "config.json", "{\"model_type\":\"test\",\"hidden_size\":8}");
	write_str(dir_a, "tokenizer.json", "{\"model\":{}}");
	write_str(dir_a, "tokenizer_config.json", "{\"chat_template\":\"{{x}}\"}");
	b = st_file(A_JSON, a_data, sizeof(a_data), &n, &h);
	write_file(dir_a, "model.safetensors", b, n);
	free(b);
	want_a[0] = (struct want){ "a", MOE_F32, 2, { 2, 3, 1, 1 }, "model.safetensors",
				   8 + h + 0, 24, a_data };
	want_a[1] = (struct want){ "b", MOE_BF16, 1, { 4, 1, 1, 1 }, "model.safetensors",
				   8 + h + 24, 8, a_data + 24 };
	want_a[2] = (struct want){ "c", MOE_I64, 0, { 1, 1, 1, 1 }, "model.safetensors",
				   8 + h + 32, 8, a_data + 32 };

	dir_b = mkdir_in("snap-b");
	write_str(dir_b, "config.json", "{\"model_type\":\"test\"}");
	write_str(dir_b, "generation_config.json", "{\"eos_token_id\":2}");
	write_str(dir_b, "model.safetensors.index.json", B_INDEX);
	b = st_file(B1_JSON, b1_data, sizeof(b1_data), &n, &h1);
	write_file(dir_b, "model-00001-of-00002.safetensors", b, n);
	free(b);
	b = st_file(B2_JSON, b2_data, B2_SIZE, &n, &h2);
	write_file(dir_b, "model-00002-of-00002.safetensors", b, n);
	free(b);
	/* sorted by name: w, x.weight, y, z */
	want_b[0] = (struct want){ "w", MOE_I8, 1, { 5, 1, 1, 1 },
				   "model-00002-of-00002.safetensors", 8 + h2 + 1048576, 5,
				   b2_data + 1048576 };
	want_b[1] = (struct want){ "x.weight", MOE_F16, 2, { 2, 2, 1, 1 },
				   "model-00001-of-00002.safetensors", 8 + h1, 8, b1_data };
	want_b[2] = (struct want){ "y", MOE_F32, 1, { 3, 1, 1, 1 },
				   "model-00001-of-00002.safetensors", 8 + h1 + 8, 12,
				   b1_data + 8 };
	want_b[3] = (struct want){ "z", MOE_F32, 2, { 512, 512, 1, 1 },
				   "model-00002-of-00002.safetensors", 8 + h2, 1048576, b2_data };
}

/* Check an opened snapshot against the expected tensors, reading every
 * tensor's bytes through its source. */
static void check_snapshot(const moe_hf *h, const struct want *w, size_t n, const char *what)
{
	bool meta_ok = h->n_tensors == n, data_ok = true;
	moe_error e = { 0 };

	is_int(h->n_tensors, n, "%s: tensor count", what);
	for (size_t i = 0; meta_ok && i < n; i++) {
		const moe_hf_tensor *t = &h->tensors[i];

		if (strcmp(t->name, w[i].name) != 0 || t->dtype != w[i].dtype ||
		    t->n_dims != w[i].n_dims || memcmp(t->shape, w[i].shape, sizeof(t->shape)) ||
		    t->offset != w[i].offset || t->size != w[i].size || t->shard >= h->n_shards ||
		    strcmp(h->shards[t->shard].name, w[i].shard) != 0 ||
		    t->src != h->shards[t->shard].src || moe_hf_find(h, w[i].name) != t) {
			tap_diag("%s: tensor %zu '%s' differs", what, i, t->name);
			meta_ok = false;
		}
	}
	ok(meta_ok, "%s: names, dtypes, shapes, offsets, shards", what);
	for (size_t i = 0; meta_ok && i < n; i++) {
		const moe_hf_tensor *t = &h->tensors[i];
		uint8_t *buf = malloc(t->size + 1);

		if (moe_src_read(t->src, t->offset, buf, t->size, &e) != 0 ||
		    memcmp(buf, w[i].data, t->size) != 0) {
			tap_diag("%s: data of '%s' differs (%s)", what, t->name, e.msg);
			data_ok = false;
		}
		free(buf);
	}
	ok(meta_ok && data_ok, "%s: tensor bytes read through the sources", what);
	ok(moe_hf_find(h, "nope") == NULL, "%s: unknown name not found", what);
}

/* ---------------------------------------------------------- archives */

enum { K_TAR, K_TGZ, K_TZST, K_ZIP };
static const char *const kind_ext[] = { "tar", "tar.gz", "tar.zst", "zip" };

struct aent {
	const char *path;
	const void *data;
	size_t len;
	int type;           /* 0 file, 1 symlink, 2 hardlink, 3 directory */
	const char *target; /* links */
};

static void write_archive(const char *path, int kind, const struct aent *ents, size_t n)
{
	struct archive *a = archive_write_new();
	int r = ARCHIVE_OK;

	if (kind == K_ZIP)
		r = archive_write_set_format_zip(a);
	else
		r = archive_write_set_format_pax_restricted(a);
	if (r == ARCHIVE_OK && kind == K_TGZ)
		r = archive_write_add_filter_gzip(a);
	if (r == ARCHIVE_OK && kind == K_TZST)
		r = archive_write_add_filter_zstd(a);
	if (r != ARCHIVE_OK || archive_write_open_filename(a, path) != ARCHIVE_OK)
		die(archive_error_string(a));
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();

		archive_entry_set_pathname(ae, ents[i].path);
		archive_entry_set_perm(ae, 0644);
		switch (ents[i].type) {
		case 1:
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, ents[i].target);
			break;
		case 2:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, ents[i].target);
			break;
		case 3:
			archive_entry_set_filetype(ae, AE_IFDIR);
			archive_entry_set_perm(ae, 0755);
			break;
		default:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, (la_int64_t)ents[i].len);
		}
		if (archive_write_header(a, ae) != ARCHIVE_OK)
			die(archive_error_string(a));
		if (ents[i].type == 0 && ents[i].len &&
		    archive_write_data(a, ents[i].data, ents[i].len) != (la_ssize_t)ents[i].len)
			die(archive_error_string(a));
		archive_entry_free(ae);
	}
	if (archive_write_close(a) != ARCHIVE_OK)
		die(archive_error_string(a));
	archive_write_free(a);
}

/* Pack the files `names` of dir under `prefix` ("" or "dir/"). */
static void pack_dir(const char *path, int kind, const char *dir, const char *prefix,
		     const char *const *names, size_t n)
{
	struct aent ents[16];
	char paths[16][256], file[512];
	uint8_t *data[16];
	size_t k = 0;

	if (prefix[0]) {
		snprintf(paths[k], 256, "%s", prefix);
		ents[k] = (struct aent){ paths[k], NULL, 0, 3, NULL };
		data[k++] = NULL;
	}
	for (size_t i = 0; i < n; i++, k++) {
		snprintf(paths[k], 256, "%s%s", prefix, names[i]);
		snprintf(file, sizeof(file), "%s/%s", dir, names[i]);
		data[k] = slurp(file, &ents[k].len);
		ents[k].path = paths[k];
		ents[k].data = data[k];
		ents[k].type = 0;
		ents[k].target = NULL;
	}
	write_archive(path, kind, ents, k);
	for (size_t i = 0; i < k; i++)
		free(data[i]);
}

static const char *const names_a[] = { "config.json", "tokenizer.json",
				       "tokenizer_config.json", "model.safetensors" };
/* Shard 2 first in the archive: read order must follow the archive. */
static const char *const names_b[] = { "model-00002-of-00002.safetensors", "config.json",
				       "model.safetensors.index.json",
				       "model-00001-of-00002.safetensors",
				       "generation_config.json" };

/* ---------------------------------------------------------------- tests */

static void test_dirs(void)
{
	moe_hf *h;
	moe_error e = { 0 };

	ok(moe_hf_open(&h, dir_a, &e) == 0, "open single-file snapshot dir (%s)", e.msg);
	if (h) {
		ok(!h->is_archive && h->archive == NULL, "A: is a directory");
		is_str(h->config_json, "{\"model_type\":\"test\",\"hidden_size\":8}",
		       "A: config.json");
		is_str(h->tokenizer_json, "{\"model\":{}}", "A: tokenizer.json");
		is_str(h->tokenizer_config_json, "{\"chat_template\":\"{{x}}\"}",
		       "A: tokenizer_config.json");
		ok(h->generation_config_json == NULL, "A: no generation_config.json");
		is_int(h->n_shards, 1, "A: one shard");
		check_snapshot(h, want_a, 3, "A dir");
		moe_hf_close(h);
	}
	ok(moe_hf_open(&h, dir_b, &e) == 0, "open sharded snapshot dir (%s)", e.msg);
	if (h) {
		ok(h->tokenizer_json == NULL && h->tokenizer_config_json == NULL,
		   "B: no tokenizer files");
		is_str(h->generation_config_json, "{\"eos_token_id\":2}",
		       "B: generation_config.json");
		is_int(h->n_shards, 2, "B: two shards");
		is_str(h->shards[0].name, "model-00001-of-00002.safetensors",
		       "B: directory shards in name order");
		check_snapshot(h, want_b, 4, "B dir");
		moe_hf_close(h);
	}
}

static void test_archives(void)
{
	char path[512], what[64];
	moe_hf *h;
	moe_error e = { 0 };

	for (int k = K_TAR; k <= K_ZIP; k++) {
		/* A at the top level, B under a directory. */
		snprintf(path, sizeof(path), "%s/a.%s", tmp, kind_ext[k]);
		pack_dir(path, k, dir_a, "", names_a, 4);
		snprintf(what, sizeof(what), "A %s", kind_ext[k]);
		{
			static const char *const magic[] = { NULL, "\x1f\x8b", "\x28\xb5\x2f\xfd",
							     "PK\x03\x04" };
			size_t n;
			uint8_t *b = slurp(path, &n);

			ok(!magic[k] || (n > 4 && memcmp(b, magic[k], strlen(magic[k])) == 0),
			   "%s: written with the right compression", what);
			free(b);
		}
		ok(moe_hf_open(&h, path, &e) == 0, "%s: open (%s)", what, e.msg);
		if (h) {
			ok(h->is_archive, "%s: is an archive", what);
			is_str(h->tokenizer_config_json, "{\"chat_template\":\"{{x}}\"}",
			       "%s: tokenizer_config.json", what);
			check_snapshot(h, want_a, 3, what);
			moe_hf_close(h);
		}
		snprintf(path, sizeof(path), "%s/b.%s", tmp, kind_ext[k]);
		pack_dir(path, k, dir_b, "snap/", names_b, 5);
		snprintf(what, sizeof(what), "B %s", kind_ext[k]);
		ok(moe_hf_open(&h, path, &e) == 0, "%s: open (%s)", what, e.msg);
		if (h) {
			is_str(h->generation_config_json, "{\"eos_token_id\":2}",
			       "%s: generation_config.json", what);
			is_str(h->shards[0].name, "model-00002-of-00002.safetensors",
			       "%s: shards in archive order", what);
			check_snapshot(h, want_b, 4, what);
			moe_hf_close(h);
		}
	}
}

/* Reads forward in archive order share one pass; going back reopens. */
static void test_access_pattern(void)
{
	char path[512];
	moe_hf *h;
	moe_error e = { 0 };
	const moe_hf_tensor *z, *x, *w;
	uint8_t *buf = malloc(1 << 20);
	uint64_t r0;
	bool same;

	snprintf(path, sizeof(path), "%s/b.tar.gz", tmp);
	if (moe_hf_open(&h, path, &e) != 0) {
		ok(0, "access pattern: open (%s)", e.msg);
		free(buf);
		return;
	}
	z = moe_hf_find(h, "z");
	x = moe_hf_find(h, "x.weight");
	w = moe_hf_find(h, "w");
	r0 = moe_archive_reopens(h->archive);
	is_int(r0, 0, "no reader opened before the first read");

	/* z in forward pieces: one open. */
	same = true;
	for (uint64_t off = 0; off < z->size; off += 100000) {
		size_t n = z->size - off < 100000 ? (size_t)(z->size - off) : 100000;

		same &= moe_src_read(z->src, z->offset + off, buf, n, &e) == 0 &&
			memcmp(buf, b2_data + off, n) == 0;
	}
	ok(same, "z read forward in pieces");
	ok(moe_src_read(w->src, w->offset, buf, 5, &e) == 0 &&
	   memcmp(buf, b2_data + 1048576, 5) == 0, "w after z");
	is_int(moe_archive_reopens(h->archive), 1, "forward reads: one pass");

	/* x is in the next member (shard 1 comes after shard 2): still forward. */
	ok(moe_src_read(x->src, x->offset, buf, 8, &e) == 0 && memcmp(buf, b1_data, 8) == 0,
	   "x.weight in a later member");
	is_int(moe_archive_reopens(h->archive), 1, "later member: no reopen");

	/* Back to the middle of z: reopen and skip to it. */
	ok(moe_src_read(z->src, z->offset + 500000, buf, 300000, &e) == 0 &&
	   memcmp(buf, b2_data + 500000, 300000) == 0, "z middle after x.weight");
	is_int(moe_archive_reopens(h->archive), 2, "earlier member: reopened");
	ok(moe_src_read(z->src, z->offset + 1000, buf, 1000, &e) == 0 &&
	   memcmp(buf, b2_data + 1000, 1000) == 0, "z start after z middle");
	is_int(moe_archive_reopens(h->archive), 3, "earlier offset in the same member: reopened");
	ok(moe_src_read(z->src, z->offset + 1000, buf, 0, &e) == 0, "empty read");
	ok(moe_src_read(x->src, x->size + x->offset + 1000000, buf, 1, &e) < 0,
	   "read past the member's end refused");
	ok(moe_src_read(x->src, x->offset, buf, 8, &e) == 0 && memcmp(buf, b1_data, 8) == 0,
	   "x.weight again");
	moe_hf_close(h);
	free(buf);
}

/* Paths with "./" and "//", a deeper config.json of a sub-model, symlinks
 * to files we do not use. */
static void test_archive_layouts(void)
{
	char path[512], file[512];
	moe_hf *h;
	moe_error e = { 0 };
	size_t n_st;
	uint8_t *st;

	snprintf(file, sizeof(file), "%s/model.safetensors", dir_a);
	st = slurp(file, &n_st);
	{
		struct aent ents[] = {
			{ "./", NULL, 0, 3, NULL },
			{ "./x//", NULL, 0, 3, NULL },
			{ "./x//config.json", "{}", 2, 0, NULL },
			{ "./x/1_Pooling/config.json", "{\"p\":1}", 7, 0, NULL },
			{ "./x/./model.safetensors", st, n_st, 0, NULL },
			{ "./x/README.md", NULL, 0, 1, "../../somewhere" },
		};
		snprintf(path, sizeof(path), "%s/layout.tar", tmp);
		write_archive(path, K_TAR, ents, sizeof(ents) / sizeof(ents[0]));
		ok(moe_hf_open(&h, path, &e) == 0, "odd but valid entry paths (%s)", e.msg);
		if (h) {
			is_str(h->config_json, "{}", "layout: the shallowest config.json");
			check_snapshot(h, want_a, 3, "layout");
			ok(strstr(h->shards[0].src->name, "layout.tar:x/model.safetensors") != NULL,
			   "member source named archive:member");
			moe_hf_close(h);
		}
	}
	{
		/* A shard without the .safetensors suffix is not cached by the
		 * scan: its header is read through the member source. */
		struct aent ents[] = {
			{ "config.json", S("{}"), 0, NULL },
			{ "model.safetensors.index.json",
			  S("{\"weight_map\":{\"a\":\"w.bin\",\"b\":\"w.bin\",\"c\":\"w.bin\"}}"), 0,
			  NULL },
			{ "w.bin", st, n_st, 0, NULL },
		};
		const moe_hf_tensor *t;
		uint8_t buf[8];

		snprintf(path, sizeof(path), "%s/bin.tar.gz", tmp);
		write_archive(path, K_TGZ, ents, sizeof(ents) / sizeof(ents[0]));
		ok(moe_hf_open(&h, path, &e) == 0, "shard named w.bin (%s)", e.msg);
		if (h) {
			t = moe_hf_find(h, "c");
			ok(h->n_tensors == 3 && t && t->offset == want_a[2].offset &&
			   moe_src_read(t->src, t->offset, buf, 8, &e) == 0 &&
			   memcmp(buf, a_data + 32, 8) == 0, "w.bin: tensors and bytes");
			is_str(h->shards[0].name, "w.bin", "w.bin: shard name");
			moe_hf_close(h);
		}
	}
	free(st);
}

/* ----------------------------------------------------- malformed inputs */

static void test_bad_safetensors(void)
{
	moe_arena a;
	moe_error e = { 0 };
	moe_hf_tensor *t;
	uint64_t nt;
	uint8_t zeros[64] = { 0 };
	uint8_t *b;
	size_t n;
	int rc;

	moe_arena_init(&a, 4096);
	struct {
		const char *json;
		size_t dlen;
		int code;
		const char *sub;
		const char *what;
	} cases[] = {
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
		  20, MOE_EFORMAT, "tensor 'b': non-contiguous offsets: begins at 12 but tensor 'a' ends at 8",
		  "gap between tensors" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, MOE_EFORMAT,
		  "non-contiguous offsets: data starts at 4", "gap before the first tensor" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, MOE_EFORMAT,
		  "4 bytes after the last tensor", "gap after the last tensor" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		  16, MOE_EFORMAT, "overlaps tensor 'a'", "overlapping tensors" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20, MOE_EFORMAT,
		  "tensor 'a': size mismatch: data_offsets span 20 bytes, dtype and shape need 24",
		  "size mismatch" },
		{ "{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MOE_EFORMAT,
		  "tensor 'a': unknown dtype 'Q9'", "unknown dtype" },
		{ "{\"a\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
		  MOE_EUNSUPPORTED, "dtype BOOL not supported", "BOOL unsupported" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
		  MOE_EFORMAT, "5 dims", "5 dims" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}",
		  4, MOE_ERANGE, "element count overflows", "shape product overflow" },
		{ "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,4]}}",
		  4, MOE_ERANGE, "tensor 'a'", "byte size overflow" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, MOE_EFORMAT,
		  "begin 8 after end 0", "begin after end" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, MOE_EFORMAT,
		  "end 8 past the data section (4 bytes)", "end past the data" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		  16, MOE_EFORMAT, "duplicate", "duplicate name" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8, MOE_EFORMAT,
		  "header JSON", "JSON syntax" },
		{ "[1,2]", 0, MOE_EFORMAT, "not an object", "header not an object" },
		{ "{\"a\":[]}", 0, MOE_EFORMAT, "tensor 'a': entry is not an object", "entry type" },
		{ "{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MOE_EFORMAT,
		  "dtype missing or not a string", "dtype type" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, MOE_EFORMAT,
		  "shape[0] is not a non-negative integer", "shape element type" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, MOE_EFORMAT,
		  "shape[0] is not a non-negative integer", "negative dim" },
		{ "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, MOE_EFORMAT,
		  "shape missing", "shape missing" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, MOE_EFORMAT,
		  "data_offsets is not an array of two integers", "data_offsets length" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, MOE_EFORMAT,
		  "data_offsets is not an array of two integers", "data_offsets type" },
		{ "{\"__metadata__\":{\"k\":1}}", 0, MOE_EFORMAT, "__metadata__ 'k' is not a string",
		  "metadata value type" },
		{ "{\"__metadata__\":[]}", 0, MOE_EFORMAT, "__metadata__ is not an object",
		  "metadata type" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		b = st_file(cases[i].json, zeros, cases[i].dlen, &n, NULL);
		rc = parse_mem(b, n, &t, &nt, &a, &e);
		expect_err(rc, cases[i].code, &e, cases[i].sub, cases[i].what);
		free(b);
	}

	/* header length longer than the file */
	b = st_file("{}", NULL, 0, &n, NULL);
	b[0] = 200;
	rc = parse_mem(b, n, &t, &nt, &a, &e);
	expect_err(rc, MOE_EFORMAT, &e, "t.safetensors: header length 200 longer than the file (16 bytes)",
		   "header longer than the file");
	b[0] = 0;
	b[7] = 0x80;
	rc = parse_mem(b, n, &t, &nt, &a, &e);
	expect_err(rc, MOE_EFORMAT, &e, "longer than the file", "huge header length");
	rc = parse_mem(b, 5, &t, &nt, &a, &e);
	expect_err(rc, MOE_EFORMAT, &e, "too short", "file shorter than 8 bytes");
	free(b);

	/* valid corner cases: empty header, zero-sized tensors, padding */
	b = st_file("{}", NULL, 0, &n, NULL);
	ok(parse_mem(b, n, &t, &nt, &a, &e) == 0 && nt == 0, "empty header accepted (%s)", e.msg);
	free(b);
	b = st_file("{\"e\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
		    "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		    "\"f\":{\"dtype\":\"I16\",\"shape\":[0],\"data_offsets\":[0,0]}}",
		    zeros, 4, &n, NULL);
	rc = parse_mem(b, n, &t, &nt, &a, &e);
	ok(rc == 0 && nt == 3, "zero-sized tensors accepted (%s)", e.msg);
	if (rc == 0 && nt == 3)
		ok(strcmp(t[0].name, "f") == 0 && strcmp(t[1].name, "a") == 0 &&
		   strcmp(t[2].name, "e") == 0 && t[2].size == 0 && t[2].n_dims == 2 &&
		   t[2].shape[0] == 0 && t[2].offset == n - 4 + 4,
		   "parse returns tensors in offset order, absolute offsets");
	free(b);
	moe_arena_free(&a);
}

static void expect_open_err(const char *path, int code, const char *sub, const char *what)
{
	moe_hf *h = (moe_hf *)1;
	moe_error e = { 0 };
	int rc = moe_hf_open(&h, path, &e);

	expect_err(rc, code, &e, sub, what);
	ok(h == NULL, "%s: no handle", what);
	if (rc == 0)
		moe_hf_close(h);
}

static void test_bad_snapshots(void)
{
	char path[512], sub[600];
	char *d;
	uint8_t *b;
	size_t n;

	snprintf(path, sizeof(path), "%s/does-not-exist", tmp);
	expect_open_err(path, MOE_ENOTFOUND, "No such file", "missing path");

	d = mkdir_in("no-config");
	b = st_file(A_JSON, a_data, sizeof(a_data), &n, NULL);
	write_file(d, "model.safetensors", b, n);
	snprintf(sub, sizeof(sub), "%s: missing config.json", d);
	expect_open_err(d, MOE_ENOTFOUND, sub, "dir without config.json");

	d = mkdir_in("bad-config");
	write_file(d, "model.safetensors", b, n);
	write_str(d, "config.json", "{\"a\":");
	expect_open_err(d, MOE_EFORMAT, "config.json:", "config.json not JSON");
	free(b);

	d = mkdir_in("no-weights");
	write_str(d, "config.json", "{}");
	expect_open_err(d, MOE_ENOTFOUND, "missing model.safetensors", "no weights");

	d = mkdir_in("bad-st");
	write_str(d, "config.json", "{}");
	b = st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", a_data, 12,
		    &n, NULL);
	write_file(d, "model.safetensors", b, n);
	free(b);
	snprintf(sub, sizeof(sub), "%s/model.safetensors: tensor 'a': non-contiguous", d);
	expect_open_err(d, MOE_EFORMAT, sub, "bad model.safetensors names the file");

	/* sharded: a shard missing, a shard named "../x", a tensor in two
	 * shards, the index naming a tensor the shard lacks or another shard */
	{
		static const char *const idx[][2] = {
			{ "{\"weight_map\":{\"y\":\"model-00001-of-00002.safetensors\","
			  "\"q\":\"model-00003-of-00003.safetensors\"}}",
			  "missing shard model-00003-of-00003.safetensors" },
			{ "{\"weight_map\":{\"y\":\"../x\"}}", "shard '../x' is not a plain file name" },
			{ "{\"weight_map\":{\"y\":\"sub/x.safetensors\"}}", "is not a plain file name" },
			{ "{\"weight_map\":{\"y\":\"model-00001-of-00002.safetensors\","
			  "\"y2\":\"dup.safetensors\"}}",
			  "tensor 'x.weight' is in both" },
			{ "{\"weight_map\":{\"y\":\"model-00001-of-00002.safetensors\","
			  "\"q\":\"model-00001-of-00002.safetensors\"}}",
			  "tensor 'q' is not in model-00001-of-00002.safetensors" },
			{ "{\"weight_map\":{\"y\":\"model-00001-of-00002.safetensors\","
			  "\"w\":\"model-00001-of-00002.safetensors\","
			  "\"z\":\"model-00002-of-00002.safetensors\"}}",
			  "tensor 'w' is in model-00002-of-00002.safetensors, not in model-00001" },
			{ "{\"weight_map\":{}}", "weight_map is empty" },
			{ "{\"weight_map\":{\"y\":3}}", "weight_map 'y' is not a string" },
			{ "{\"weight_map\":{\"y\":\"a\",\"y\":\"b\"}}", "duplicate" },
			{ "[]", "weight_map missing" },
		};
		char src[512], dst[512];

		for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
			char name[32];

			snprintf(name, sizeof(name), "bad-index-%zu", i);
			d = mkdir_in(name);
			write_str(d, "config.json", "{}");
			write_str(d, "model.safetensors.index.json", idx[i][0]);
			for (int s = 1; s <= 2; s++) {
				snprintf(src, sizeof(src), "%s/model-0000%d-of-00002.safetensors",
					 dir_b, s);
				snprintf(dst, sizeof(dst),
					 "%s/model-0000%d-of-00002.safetensors", d, s);
				if (symlink(src, dst) != 0)
					die(dst);
			}
			snprintf(dst, sizeof(dst), "%s/dup.safetensors", d);
			snprintf(src, sizeof(src), "%s/model-00001-of-00002.safetensors", dir_b);
			if (symlink(src, dst) != 0)
				die(dst);
			expect_open_err(d, i == 0 ? MOE_ENOTFOUND : MOE_EFORMAT, idx[i][1],
					idx[i][1]);
		}
	}
}

static void test_bad_archives(void)
{
	char path[512], file[700];
	uint8_t *st;
	size_t n_st;

	snprintf(file, sizeof(file), "%s/model.safetensors", dir_a);
	st = slurp(file, &n_st);

	snprintf(path, sizeof(path), "%s/evil.tar", tmp);
	{
		struct aent ents[] = {
			{ "config.json", "{}", 2, 0, NULL },
			{ "model.safetensors", st, n_st, 0, NULL },
			{ "../evil", "x", 1, 0, NULL },
		};
		write_archive(path, K_TAR, ents, 3);
	}
	snprintf(file, sizeof(file), "%s: entry '../evil': path escapes the archive", path);
	expect_open_err(path, MOE_EFORMAT, file, "tar entry ../evil");

	snprintf(path, sizeof(path), "%s/evil2.tar.gz", tmp);
	{
		struct aent ents[] = {
			{ "snap/config.json", "{}", 2, 0, NULL },
			{ "snap/a/../../b", "x", 1, 0, NULL },
		};
		write_archive(path, K_TGZ, ents, 2);
	}
	expect_open_err(path, MOE_EFORMAT, "entry 'snap/a/../../b': path escapes the archive",
			"tar entry with .. inside");

	snprintf(path, sizeof(path), "%s/abs.zip", tmp);
	{
		struct aent ents[] = {
			{ "config.json", "{}", 2, 0, NULL },
			{ "/etc/x", "x", 1, 0, NULL },
		};
		write_archive(path, K_ZIP, ents, 2);
	}
	expect_open_err(path, MOE_EFORMAT, "entry '/etc/x': path escapes the archive",
			"zip entry with absolute path");

	snprintf(path, sizeof(path), "%s/symlink.tar", tmp);
	{
		struct aent ents[] = {
			{ "real.json", "{}", 2, 0, NULL },
			{ "config.json", NULL, 0, 1, "real.json" },
			{ "model.safetensors", st, n_st, 0, NULL },
		};
		write_archive(path, K_TAR, ents, 3);
	}
	expect_open_err(path, MOE_EFORMAT, "entry 'config.json' is a symbolic link",
			"config.json a symlink");

	snprintf(path, sizeof(path), "%s/hardlink.tar", tmp);
	{
		struct aent ents[] = {
			{ "config.json", "{}", 2, 0, NULL },
			{ "w.bin", st, n_st, 0, NULL },
			{ "model.safetensors", NULL, 0, 2, "w.bin" },
		};
		write_archive(path, K_TAR, ents, 3);
	}
	expect_open_err(path, MOE_EFORMAT, "entry 'model.safetensors' is a hard link",
			"model.safetensors a hard link");

	snprintf(path, sizeof(path), "%s/two.zip", tmp);
	{
		struct aent ents[] = {
			{ "a/config.json", "{}", 2, 0, NULL },
			{ "a/model.safetensors", st, n_st, 0, NULL },
			{ "b/config.json", "{}", 2, 0, NULL },
		};
		write_archive(path, K_ZIP, ents, 3);
	}
	expect_open_err(path, MOE_EFORMAT, "several snapshots: 'a/config.json' and 'b/config.json'",
			"two snapshots in one archive");

	snprintf(path, sizeof(path), "%s/dup.tar", tmp);
	{
		struct aent ents[] = {
			{ "config.json", "{}", 2, 0, NULL },
			{ "model.safetensors", st, n_st, 0, NULL },
			{ "./model.safetensors", st, n_st, 0, NULL },
		};
		write_archive(path, K_TAR, ents, 3);
	}
	expect_open_err(path, MOE_EFORMAT, "entry 'model.safetensors' appears more than once",
			"member twice");

	snprintf(path, sizeof(path), "%s/noconf.tar.zst", tmp);
	{
		struct aent ents[] = { { "model.safetensors", st, n_st, 0, NULL } };
		write_archive(path, K_TZST, ents, 1);
	}
	expect_open_err(path, MOE_ENOTFOUND, "missing config.json", "archive without config.json");

	snprintf(path, sizeof(path), "%s/noshard.tar", tmp);
	{
		struct aent ents[] = {
			{ "s/config.json", "{}", 2, 0, NULL },
			{ "s/model.safetensors.index.json",
			  S("{\"weight_map\":{\"a\":\"model-00001-of-00001.safetensors\"}}"), 0, NULL },
		};
		write_archive(path, K_TAR, ents, 2);
	}
	expect_open_err(path, MOE_ENOTFOUND, "missing shard s/model-00001-of-00001.safetensors",
			"archive with a shard missing");

	snprintf(path, sizeof(path), "%s/dotdot-index.tar", tmp);
	{
		struct aent ents[] = {
			{ "s/config.json", "{}", 2, 0, NULL },
			{ "s/model.safetensors.index.json", S("{\"weight_map\":{\"a\":\"../x\"}}"), 0,
			  NULL },
			{ "x", st, n_st, 0, NULL },
		};
		write_archive(path, K_TAR, ents, 3);
	}
	expect_open_err(path, MOE_EFORMAT, "shard '../x' is not a plain file name",
			"archive index naming ../x");

	snprintf(path, sizeof(path), "%s/short.tar", tmp);
	{
		uint8_t bad[16];

		memcpy(bad, st, 16);
		struct aent ents[] = {
			{ "config.json", "{}", 2, 0, NULL },
			{ "model.safetensors", bad, 16, 0, NULL },
		};
		write_archive(path, K_TAR, ents, 2);
	}
	expect_open_err(path, MOE_EFORMAT, "short.tar:model.safetensors: header length",
			"archive shard with header longer than the member");

	snprintf(path, sizeof(path), "%s/not-an-archive.txt", tmp);
	{
		FILE *f = fopen(path, "w");

		if (!f)
			die(path);
		fputs("hello, this is not an archive\n", f);
		fclose(f);
	}
	expect_open_err(path, MOE_EFORMAT, "not a readable tar or zip archive", "not an archive");

	/* a truncated .tar.gz: the scan fails cleanly */
	{
		char good[512];
		uint8_t *gz;
		size_t n;

		snprintf(good, sizeof(good), "%s/b.tar.gz", tmp);
		gz = slurp(good, &n);
		snprintf(path, sizeof(path), "%s/trunc.tar.gz", tmp);
		write_file(tmp, "trunc.tar.gz", gz, n / 2);
		free(gz);
		{
			moe_hf *h;
			moe_error e = { 0 };
			int rc = moe_hf_open(&h, path, &e);

			ok(rc < 0 && h == NULL && strstr(e.msg, "trunc.tar.gz") != NULL,
			   "truncated .tar.gz rejected (%s)", e.msg);
		}
	}
	free(st);
}

/* The fuzzer's seeds: tiny valid and invalid safetensors files. */
static void write_seeds(const char *dir)
{
	static const struct {
		const char *name, *json;
		size_t dlen;
	} seeds[] = {
		{ "empty.safetensors", "{}", 0 },
		{ "one.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8 },
		{ "meta.safetensors",
		  "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],"
		  "\"data_offsets\":[4,8]},\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}",
		  8 },
		{ "types.safetensors",
		  "{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
		  "\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[2,10]},"
		  "\"c\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[10,12]},"
		  "\"d\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[12,14]},"
		  "\"e\":{\"dtype\":\"I64\",\"shape\":[1,1,1,1],\"data_offsets\":[14,22]}}",
		  22 },
		{ "gap.safetensors",
		  "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		  12 },
		{ "overlap.safetensors",
		  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
		  8 },
		{ "zero.safetensors", "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]}}", 0 },
	};
	uint8_t data[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		size_t n;
		uint8_t *b = st_file(seeds[i].json, data, seeds[i].dlen, &n, NULL);

		write_file(dir, seeds[i].name, b, n);
		free(b);
	}
}

/* Inputs that are not regular files are refused without blocking: a FIFO
 * opened for reading would wait for a writer for ever (an alarm turns a
 * regression into a failure instead of a hang). */
static void test_not_regular(void)
{
	char path[600];
	uint8_t *b;
	size_t n;
	char *d = mkdir_in("fifo-config");

	b = st_file(A_JSON, a_data, sizeof(a_data), &n, NULL);
	write_file(d, "model.safetensors", b, n);
	free(b);
	snprintf(path, sizeof(path), "%s/config.json", d);
	if (mkfifo(path, 0600) != 0) {
		printf("# mkfifo not permitted: FIFO cases not run\n");
		return;
	}
	alarm(20);
	expect_open_err(d, MOE_EIO, "not a regular file", "config.json is a FIFO");
	snprintf(path, sizeof(path), "%s/snapshot.fifo", tmp);
	mkfifo(path, 0600);
	expect_open_err(path, MOE_EFORMAT, "not a regular file", "the snapshot path is a FIFO");
	moe_src *src = NULL;
	moe_error e = { 0 };
	int rc = moe_src_open_file(&src, path, &e);
	ok(rc == MOE_EIO && strstr(e.msg, "not a regular file"), "moe_src_open_file on a FIFO: %s",
	   e.msg);
	alarm(0);
}

/* JSON as Python writes it: integers beyond 64 bits become reals. */
static void test_python_json(void)
{
	char *d = mkdir_in("big-int");
	uint8_t *b;
	size_t n;
	moe_hf *h = NULL;
	moe_error e = { 0 };

	b = st_file(A_JSON, a_data, sizeof(a_data), &n, NULL);
	write_file(d, "model.safetensors", b, n);
	free(b);
	write_str(d, "config.json", "{\"max_position_embeddings\": 1000000000000000019884624838656}");
	write_str(d, "tokenizer_config.json",
		  "{\"model_max_length\": 1000000000000000019884624838656, \"x\": [1, -2]}");
	int rc = moe_hf_open(&h, d, &e);
	ok(rc == 0, "a snapshot whose JSON holds int(1e30) opens (%s)", e.msg);
	if (rc == 0) {
		ok(strstr(h->tokenizer_config_json, "1000000000000000019884624838656.0") &&
		   strstr(h->tokenizer_config_json, "[1, -2]"),
		   "tokenizer_config.json: the huge integer is a real, the small ones unchanged: %s",
		   h->tokenizer_config_json);
		moe_hf_close(h);
	}
}

int main(void)
{
	const char *seeds = getenv("MOE_HF_WRITE_SEEDS");
	const char *t = getenv("TMPDIR");

	snprintf(tmp, sizeof(tmp), "%s/t-hf-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmp))
		die("mkdtemp");
	if (seeds)
		write_seeds(seeds);
	make_data();
	make_snapshots();
	test_dirs();
	test_archives();
	test_access_pattern();
	test_archive_layouts();
	test_bad_safetensors();
	test_bad_snapshots();
	test_bad_archives();
	test_not_regular();
	test_python_json();
	nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(b2_data);
	return tap_done();
}
