/* gguf_join.c — split GGUF models (llama.cpp's gguf-split: files
 * NAME-00001-of-0000N.gguf, each a complete GGUF holding some of the tensors,
 * the first one all the metadata, every one the keys split.no, split.count
 * and split.tensors.count) joined into one GGUF that moe-convert reads.
 *
 * The output has the first shard's metadata without the split.* keys and
 * every shard's tensors in shard order, each at its own aligned offset; the
 * tensor bytes are copied unchanged.  It is written atomically. */
#include "gguf.h"
#include "registry_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct buf {
	unsigned char *p;
	size_t len, cap;
	bool oom;
} buf;

static void put(buf *b, const void *p, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;
		while (cap < b->len + n)
			cap *= 2;
		unsigned char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s, uint64_t n)
{
	put_u64(b, n);
	put(b, s, (size_t)n);
}

/* A value's payload (not its type tag). */
static void put_value(buf *b, const moe_gguf_value *v)
{
	switch (v->type) {
	case MOE_GGUF_T_UINT8: case MOE_GGUF_T_INT8: case MOE_GGUF_T_BOOL: {
		uint8_t x = v->type == MOE_GGUF_T_BOOL ? v->b : (uint8_t)v->u64;
		put(b, &x, 1);
		break;
	}
	case MOE_GGUF_T_UINT16: case MOE_GGUF_T_INT16: {
		uint16_t x = (uint16_t)v->u64;
		put(b, &x, 2);
		break;
	}
	case MOE_GGUF_T_UINT32: case MOE_GGUF_T_INT32: {
		uint32_t x = (uint32_t)v->u64;
		put(b, &x, 4);
		break;
	}
	case MOE_GGUF_T_FLOAT32: {
		float x = (float)v->f64;
		put(b, &x, 4);
		break;
	}
	case MOE_GGUF_T_UINT64: case MOE_GGUF_T_INT64: put_u64(b, v->u64); break;
	case MOE_GGUF_T_FLOAT64: put(b, &v->f64, 8); break;
	case MOE_GGUF_T_STRING: put_str(b, v->str.ptr, v->str.len); break;
	case MOE_GGUF_T_ARRAY:
		put_u32(b, (uint32_t)v->arr.type);
		put_u64(b, v->arr.n);
		if (v->arr.type == MOE_GGUF_T_STRING) {
			const moe_gguf_str *s = v->arr.data;
			for (uint64_t i = 0; i < v->arr.n; i++)
				put_str(b, s[i].ptr, s[i].len);
		} else if (v->arr.type == MOE_GGUF_T_ARRAY) {
			const moe_gguf_value *a = v->arr.data;
			for (uint64_t i = 0; i < v->arr.n; i++)
				put_value(b, &a[i]);
		} else {
			put(b, v->arr.data, (size_t)(v->arr.n * moe_gguf_type_size(v->arr.type)));
		}
		break;
	}
}

static bool is_split_key(const char *k)
{
	return !strncmp(k, "split.", 6);
}

int moe_gguf_join(char *const *shards, size_t n, const char *out, moe_error *e)
{
	moe_src **src = calloc(n, sizeof *src);
	moe_gguf **g = calloc(n, sizeof *g);
	buf b = {0};
	unsigned char *copy = NULL;
	moe_out o;
	bool opened = false;
	int rc = 0;
	if (!src || !g) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto done;
	}
	uint64_t n_tensors = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = moe_src_open_file(&src[i], shards[i], e);
		if (rc == 0)
			rc = moe_gguf_open(&g[i], src[i], e);
		if (rc < 0)
			break;
		uint64_t no, cnt;
		moe_error ig = {0};
		if (moe_gguf_get_u64(g[i], "split.no", &no, &ig) == 0 && no != i)
			rc = moe_err(e, MOE_EFORMAT, "%s: split.no is %llu, expected %zu", shards[i],
				     (unsigned long long)no, i);
		else if (moe_gguf_get_u64(g[i], "split.count", &cnt, &ig) == 0 && cnt != n)
			rc = moe_err(e, MOE_EFORMAT, "%s: split.count is %llu, but there are %zu shards",
				     shards[i], (unsigned long long)cnt, n);
		else if (g[i]->alignment != g[0]->alignment)
			rc = moe_err(e, MOE_EFORMAT, "%s: alignment %u differs from the first shard's %u",
				     shards[i], g[i]->alignment, g[0]->alignment);
		else if (!moe_add_u64(n_tensors, g[i]->n_tensors, &n_tensors))
			rc = moe_err(e, MOE_ERANGE, "tensor count overflows");
	}
	if (rc < 0)
		goto done;
	uint64_t want;
	moe_error ig = {0};
	if (moe_gguf_get_u64(g[0], "split.tensors.count", &want, &ig) == 0 && want != n_tensors) {
		rc = moe_err(e, MOE_EFORMAT, "%s: split.tensors.count is %llu, the shards hold %llu",
			     shards[0], (unsigned long long)want, (unsigned long long)n_tensors);
		goto done;
	}
	uint64_t n_kv = 0;
	for (uint64_t i = 0; i < g[0]->n_kv; i++)
		n_kv += !is_split_key(g[0]->kv[i].key);
	put(&b, "GGUF", 4);
	put_u32(&b, 3);
	put_u64(&b, n_tensors);
	put_u64(&b, n_kv);
	for (uint64_t i = 0; i < g[0]->n_kv; i++) {
		const moe_gguf_kv *kv = &g[0]->kv[i];
		if (is_split_key(kv->key))
			continue;
		put_str(&b, kv->key, strlen(kv->key));
		put_u32(&b, (uint32_t)kv->v.type);
		put_value(&b, &kv->v);
	}
	uint64_t align = g[0]->alignment, off = 0;
	for (size_t s = 0; s < n; s++)
		for (uint64_t t = 0; t < g[s]->n_tensors; t++) {
			const moe_gguf_tensor *ti = &g[s]->tensors[t];
			put_str(&b, ti->name, strlen(ti->name));
			put_u32(&b, ti->n_dims);
			for (uint32_t d = 0; d < ti->n_dims; d++)
				put_u64(&b, ti->ne[d]);
			put_u32(&b, (uint32_t)ti->dtype);
			if (!moe_align_u64(off, align, &off)) {
				rc = moe_err(e, MOE_ERANGE, "joined GGUF too large");
				goto done;
			}
			put_u64(&b, off);
			if (!moe_add_u64(off, ti->size, &off)) {
				rc = moe_err(e, MOE_ERANGE, "joined GGUF too large");
				goto done;
			}
		}
	if (b.oom) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
		goto done;
	}
	rc = moe_out_open(&o, out, e);
	if (rc < 0)
		goto done;
	opened = true;
	rc = moe_out_write(&o, b.p, b.len, e);
	if (rc == 0)
		rc = moe_out_pad(&o, align, e);
	uint64_t data0 = o.pos;
	enum { COPY = 8 << 20 };
	copy = malloc(COPY);
	if (!copy && rc == 0)
		rc = moe_err(e, MOE_ENOMEM, "out of memory");
	for (size_t s = 0; s < n && rc == 0; s++)
		for (uint64_t t = 0; t < g[s]->n_tensors && rc == 0; t++) {
			const moe_gguf_tensor *ti = &g[s]->tensors[t];
			uint64_t rel = o.pos - data0, pad;
			if (!moe_align_u64(rel, align, &pad))
				break;
			static const unsigned char zero[256];
			while (rc == 0 && rel < pad) {
				size_t k = pad - rel > sizeof zero ? sizeof zero : (size_t)(pad - rel);
				rc = moe_out_write(&o, zero, k, e);
				rel += k;
			}
			for (uint64_t done = 0; rc == 0 && done < ti->size;) {
				size_t k = ti->size - done > COPY ? COPY : (size_t)(ti->size - done);
				rc = moe_src_read(src[s], ti->offset + done, copy, k, e);
				if (rc == 0)
					rc = moe_out_write(&o, copy, k, e);
				done += k;
			}
		}
	if (rc == 0)
		rc = moe_out_commit(&o, e);
done:
	if (rc < 0 && opened)
		moe_out_abort(&o);
	free(copy);
	free(b.p);
	for (size_t i = 0; g && i < n; i++)
		moe_gguf_close(g[i]);
	for (size_t i = 0; src && i < n; i++)
		if (src[i])
			moe_src_close(src[i]);
	free(g);
	free(src);
	return rc;
}
