/* uth_write.c — the UTH v1 writer.  Tensors are described first (all checks
 * happen then, before a byte is written), then written in one pass.  The
 * directory holds each tensor's xxh3 and precedes the data, so on a seekable
 * output the header and directory are patched at the end; on a pipe every
 * tensor's fill callback runs twice (hash, then write).  Both paths emit the
 * same bytes.  Memory: one chunk buffer plus the directory.
 */
#include "format/uth_int.h"
#include "quant.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define CHUNK_MAX ((size_t)4 << 20) /* bytes handed to a fill callback at once */

typedef struct wtensor {
	moe_uth_tensor d; /* d.name points into the arena; offset/size/xxh3 computed */
	moe_uth_fill_fn fill;
	void *ctx;
	uint32_t name_off;
	uint16_t name_len;
} wtensor;

struct moe_uth_writer {
	wtensor *t;
	size_t n, cap;
	moe_arena arena; /* tensor names */
	uint64_t names_size;
	char *meta;
	size_t meta_len;
	uint32_t flags;
	moe_uth_nameset names;
	moe_uth_groupset groups;
};

size_t moe_uth_writer_count(const moe_uth_writer *w)
{
	return w->n;
}

const moe_uth_tensor *moe_uth_writer_tensor(const moe_uth_writer *w, size_t i)
{
	return i < w->n ? &w->t[i].d : NULL;
}

int moe_uth_writer_new(moe_uth_writer **out, moe_error *e)
{
	moe_uth_writer *w = calloc(1, sizeof(*w));

	*out = NULL;
	if (!w || !(w->meta = strdup("{}"))) {
		free(w);
		return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
	}
	w->meta_len = 2;
	moe_arena_init(&w->arena, 64 << 10);
	*out = w;
	return 0;
}

void moe_uth_writer_free(moe_uth_writer *w)
{
	if (!w)
		return;
	moe_arena_free(&w->arena);
	moe_uth_nameset_free(&w->names);
	moe_uth_groupset_free(&w->groups);
	free(w->t);
	free(w->meta);
	free(w);
}

void moe_uth_writer_set_flags(moe_uth_writer *w, uint32_t flags)
{
	w->flags = flags;
}

int moe_uth_writer_set_meta(moe_uth_writer *w, const char *json, size_t len, moe_error *e)
{
	json_error_t je;
	json_t *j;
	char *m;

	if (memchr(json, 0, len))
		return moe_err(e, MOE_EINVAL, "uth writer: metadata: contains a NUL byte");
	j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return moe_err(e, MOE_EINVAL, "uth writer: metadata: not valid JSON: %s at byte %d",
			       je.text, je.position);
	bool obj = json_is_object(j);
	json_decref(j);
	if (!obj)
		return moe_err(e, MOE_EINVAL, "uth writer: metadata: JSON is not an object");
	if (!(m = malloc(len + 1)))
		return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
	memcpy(m, json, len);
	m[len] = 0;
	free(w->meta);
	w->meta = m;
	w->meta_len = len;
	return 0;
}

int moe_uth_writer_add(moe_uth_writer *w, const moe_uth_tensor *desc, moe_uth_fill_fn fill,
		       void *ctx, moe_error *e)
{
	moe_uth_tensor d = *desc;
	char msg[256];
	size_t len, dup;
	int rc;

	if (!d.name || !(len = strlen(d.name)))
		return moe_err(e, MOE_EINVAL, "uth writer: tensor %zu: empty name", w->n);
	if (len > 0xFFFF)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor %zu: name is %zu bytes, longer "
			       "than 65535", w->n, len);
	if (!fill)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': no fill callback", d.name);
	if (!moe_uth_role_name(d.role))
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': role %u is unknown",
			       d.name, d.role);
	if (!moe_repack_layout_name(d.layout))
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': layout %u is unknown",
			       d.name, d.layout);
	if (d.dtype >= MOE_DTYPE_MAX)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': dtype %u is unknown",
			       d.name, d.dtype);
	if (d.scale_offset != 0)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': scale_offset must be 0 "
			       "for layout %u", d.name, d.layout);
	/* Callers may leave unused dimensions 0 (designated initialisers). */
	for (int k = d.n_dims; k < 4 && d.n_dims >= 1 && d.n_dims <= 4; k++)
		if (d.ne[k] == 0)
			d.ne[k] = 1;
	rc = moe_uth_tensor_nbytes(d.dtype, d.n_dims, d.ne, &d.size, msg, sizeof(msg));
	if (rc < 0)
		return moe_err(e, rc == MOE_ERANGE ? MOE_ERANGE : MOE_EINVAL,
			       "uth writer: tensor '%s': %s", d.name, msg);
	if (moe_repack_check(d.layout, d.dtype, d.n_dims, d.ne, d.role, msg, sizeof(msg)) < 0)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': %s", d.name, msg);
	/* name_offset is a u32 in the record. */
	if (w->names_size + len + 1 > UINT32_MAX)
		return moe_err(e, MOE_ERANGE, "uth writer: tensor '%s': names exceed 4 GiB",
			       d.name);

	if (moe_uth_nameset_get(&w->names, d.name) >= 0)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': duplicate name (also "
			       "tensor %lld)", d.name, moe_uth_nameset_get(&w->names, d.name));

	/* Expert adjacency: a (layer, expert) group may only grow at the end. */
	struct moe_uth_groupslot *g = NULL;
	uint32_t key = (uint32_t)d.layer << 16 | d.expert;
	if (d.expert != MOE_UTH_NONE) {
		const wtensor *p = w->n ? &w->t[w->n - 1] : NULL;
		g = moe_uth_groupset_get(&w->groups, key, false);
		if (g && g->count && (!p || p->d.layer != d.layer || p->d.expert != d.expert))
			return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': expert (layer %u, "
				       "expert %u) is not adjacent: its tensors must be added "
				       "one after another (first is '%s')", d.name, d.layer,
				       d.expert, w->t[g->first].d.name);
	}

	/* Allocate everything before changing any state, so a failure leaves
	 * the writer as it was (an empty group slot counts as absent). */
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		wtensor *nt = realloc(w->t, cap * sizeof(*nt));
		if (!nt)
			return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
		w->t = nt;
		w->cap = cap;
	}
	char *name = moe_arena_strndup(&w->arena, d.name, len);
	if (!name)
		return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
	if (d.expert != MOE_UTH_NONE && !(g = moe_uth_groupset_get(&w->groups, key, true)))
		return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
	if (moe_uth_nameset_add(&w->names, name, w->n, &dup) != 0)
		return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
	if (g && g->count++ == 0)
		g->first = w->n;

	wtensor *t = &w->t[w->n++];
	d.name = name;
	d.offset = 0;
	d.xxh3 = 0;
	t->d = d;
	t->fill = fill;
	t->ctx = ctx;
	t->name_off = (uint32_t)w->names_size;
	t->name_len = (uint16_t)len;
	w->names_size += len + 1;
	return 0;
}

static int fill_mem(void *ctx, uint64_t off, void *buf, size_t n, moe_error *e)
{
	memcpy(buf, (const uint8_t *)ctx + off, n);
	return 0;
}

int moe_uth_writer_add_mem(moe_uth_writer *w, const moe_uth_tensor *desc, const void *data,
			   moe_error *e)
{
	if (!data)
		return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': no data",
			       desc->name ? desc->name : "");
	return moe_uth_writer_add(w, desc, fill_mem, (void *)data, e);
}

/* ------------------------------------------------------------- writing */

typedef struct wctx {
	moe_uth_writer *w;
	moe_out *out;
	uint8_t *buf; /* chunk buffer */
	size_t buf_n;
	XXH3_state_t *st;
	moe_uth_hdr h;
	uint8_t *dir;   /* n x 64 */
	uint8_t *names; /* names_size */
} wctx;

/* Run a tensor's fill callback over all its bytes, hashing them and, if
 * `write`, writing them to the output.  Returns the hash in *x. */
static int stream_tensor(wctx *c, wtensor *t, bool write, uint64_t *x, moe_error *e)
{
	if (XXH3_64bits_reset(c->st) == XXH_ERROR)
		return moe_err(e, MOE_EINTERNAL, "uth writer: xxh3 reset failed");
	for (uint64_t off = 0; off < t->d.size;) {
		size_t n = t->d.size - off < c->buf_n ? (size_t)(t->d.size - off) : c->buf_n;
		if (e) {
			e->code = 0;
			e->msg[0] = 0;
		}
		int rc = t->fill(t->ctx, off, c->buf, n, e);
		if (rc < 0) {
			if (!e)
				return rc;
			if (!e->msg[0])
				moe_err(e, rc, "fill callback failed at offset %llu",
					(unsigned long long)off);
			e->code = rc;
			return moe_err_prefix(e, "uth writer: tensor '%s'", t->d.name);
		}
		XXH3_64bits_update(c->st, c->buf, n);
		if (write)
			MOE_TRY(moe_out_write(c->out, c->buf, n, e));
		off += n;
	}
	*x = XXH3_64bits_digest(c->st);
	return 0;
}

/* Offsets of every section and tensor; fails only on overflow. */
static int plan(wctx *c, moe_error *e)
{
	moe_uth_writer *w = c->w;
	moe_uth_hdr *h = &c->h;
	uint64_t pos;

	memset(h, 0, sizeof(*h));
	h->version = MOE_UTH_VERSION;
	h->header_size = MOE_UTH_HEADER_SIZE;
	h->alignment = MOE_UTH_ALIGN;
	h->flags = w->flags;
	h->n_tensors = w->n;
	h->dir_offset = MOE_UTH_HEADER_SIZE;
	if (!moe_mul_u64(w->n, MOE_UTH_RECORD_SIZE, &h->dir_size) ||
	    !moe_add_u64(h->dir_offset, h->dir_size, &h->names_offset))
		goto overflow;
	h->names_size = w->names_size;
	if (!moe_add_u64(h->names_offset, h->names_size, &h->meta_offset))
		goto overflow;
	h->meta_size = w->meta_len;
	if (!moe_add_u64(h->meta_offset, h->meta_size, &pos) ||
	    !moe_align_u64(pos, MOE_UTH_ALIGN, &h->data_offset))
		goto overflow;
	pos = h->data_offset;
	for (size_t i = 0; i < w->n; i++) {
		w->t[i].d.offset = pos;
		if (!moe_add_u64(pos, w->t[i].d.size, &pos) ||
		    !moe_align_u64(pos, MOE_UTH_ALIGN, &pos))
			goto overflow;
	}
	/* The file ends on a 4096 boundary so O_DIRECT reads of the last
	 * tensor are whole blocks. */
	h->file_size = pos;
	h->data_size = pos - h->data_offset;
	return 0;
overflow:
	return moe_err(e, MOE_ERANGE, "uth writer: file size overflows");
}

/* Directory, meta checksum and header from the (now complete) tensor list. */
static void finish_head(wctx *c, uint8_t *hbuf)
{
	moe_uth_writer *w = c->w;

	for (size_t i = 0; i < w->n; i++)
		moe_uth_rec_encode(&w->t[i].d, w->t[i].name_off, w->t[i].name_len,
				   c->dir + i * MOE_UTH_RECORD_SIZE);
	XXH3_64bits_reset(c->st);
	XXH3_64bits_update(c->st, c->dir, (size_t)c->h.dir_size);
	XXH3_64bits_update(c->st, c->names, (size_t)c->h.names_size);
	XXH3_64bits_update(c->st, w->meta, w->meta_len);
	c->h.meta_xxh3 = XXH3_64bits_digest(c->st);
	moe_uth_hdr_encode(&c->h, hbuf);
}

/* Header, directory, names, metadata and the padding up to data_offset; with
 * `placeholder` the header and directory are written as zeros. */
static int write_head(wctx *c, bool placeholder, moe_error *e)
{
	moe_uth_writer *w = c->w;
	uint8_t *hbuf = calloc(1, MOE_UTH_HEADER_SIZE);
	int rc = 0;

	if (!hbuf)
		return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
	if (!placeholder)
		finish_head(c, hbuf);
	rc = moe_out_write(c->out, hbuf, MOE_UTH_HEADER_SIZE, e);
	free(hbuf);
	if (rc < 0)
		return rc;
	if (placeholder) {
		/* Zeros from the (zeroed) chunk buffer. */
		memset(c->buf, 0, c->buf_n);
		for (uint64_t left = c->h.dir_size; left;) {
			size_t n = left < c->buf_n ? (size_t)left : c->buf_n;
			MOE_TRY(moe_out_write(c->out, c->buf, n, e));
			left -= n;
		}
	} else {
		MOE_TRY(moe_out_write(c->out, c->dir, (size_t)c->h.dir_size, e));
	}
	MOE_TRY(moe_out_write(c->out, c->names, (size_t)c->h.names_size, e));
	MOE_TRY(moe_out_write(c->out, w->meta, w->meta_len, e));
	return moe_out_pad(c->out, MOE_UTH_ALIGN, e);
}

static int write_all(wctx *c, moe_error *e)
{
	moe_uth_writer *w = c->w;
	moe_out *out = c->out;
	uint64_t x;

	if (!out->seekable) {
		/* Pass 1: hashes for the directory. */
		for (size_t i = 0; i < w->n; i++)
			MOE_TRY(stream_tensor(c, &w->t[i], false, &w->t[i].d.xxh3, e));
		MOE_TRY(write_head(c, false, e));
	} else {
		MOE_TRY(write_head(c, true, e));
	}
	for (size_t i = 0; i < w->n; i++) {
		wtensor *t = &w->t[i];
		MOE_TRY(moe_out_pad(out, MOE_UTH_ALIGN, e));
		if (out->pos != t->d.offset)
			return moe_err(e, MOE_EINTERNAL, "uth writer: tensor '%s' at %llu, planned "
				       "%llu", t->d.name, (unsigned long long)out->pos,
				       (unsigned long long)t->d.offset);
		MOE_TRY(stream_tensor(c, t, true, &x, e));
		if (!out->seekable && x != t->d.xxh3)
			return moe_err(e, MOE_EINVAL, "uth writer: tensor '%s': the fill callback "
				       "produced different bytes on its second pass", t->d.name);
		t->d.xxh3 = x;
	}
	MOE_TRY(moe_out_pad(out, MOE_UTH_ALIGN, e));
	if (out->pos != c->h.file_size)
		return moe_err(e, MOE_EINTERNAL, "uth writer: wrote %llu bytes, planned %llu",
			       (unsigned long long)out->pos, (unsigned long long)c->h.file_size);
	if (out->seekable) {
		uint8_t *hbuf = malloc(MOE_UTH_HEADER_SIZE);
		int rc;
		if (!hbuf)
			return moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
		finish_head(c, hbuf);
		rc = moe_out_pwrite(out, c->h.dir_offset, c->dir, (size_t)c->h.dir_size, e);
		if (rc == 0)
			rc = moe_out_pwrite(out, 0, hbuf, MOE_UTH_HEADER_SIZE, e);
		free(hbuf);
		return rc;
	}
	return 0;
}

int moe_uth_writer_write(moe_uth_writer *w, moe_out *out, moe_error *e)
{
	wctx c = { .w = w, .out = out };
	uint64_t max_size = MOE_UTH_HEADER_SIZE;
	int rc;

	if (w->flags & ~MOE_UTH_FLAGS_KNOWN)
		return moe_err(e, MOE_EINVAL, "uth writer: unknown flags 0x%x",
			       w->flags & ~MOE_UTH_FLAGS_KNOWN);
	if (out->pos != 0)
		return moe_err(e, MOE_EINVAL, "uth writer: output is not at offset 0");
	MOE_TRY(plan(&c, e));
	if (c.h.dir_size > SIZE_MAX || c.h.names_size > SIZE_MAX)
		return moe_err(e, MOE_ERANGE, "uth writer: directory too large");
	for (size_t i = 0; i < w->n; i++)
		if (w->t[i].d.size > max_size)
			max_size = w->t[i].d.size;
	/* Small files get a small buffer; big ones the full chunk. */
	c.buf_n = max_size < CHUNK_MAX ? (size_t)max_size : CHUNK_MAX;
	c.buf = calloc(1, c.buf_n);
	c.dir = malloc(c.h.dir_size ? (size_t)c.h.dir_size : 1);
	c.names = malloc(c.h.names_size ? (size_t)c.h.names_size : 1);
	c.st = XXH3_createState();
	if (!c.buf || !c.dir || !c.names || !c.st) {
		rc = moe_err(e, MOE_ENOMEM, "uth writer: out of memory");
		goto out;
	}
	for (size_t i = 0; i < w->n; i++)
		memcpy(c.names + w->t[i].name_off, w->t[i].d.name, (size_t)w->t[i].name_len + 1);
	rc = write_all(&c, e);
out:
	free(c.buf);
	free(c.dir);
	free(c.names);
	XXH3_freeState(c.st);
	return rc;
}
