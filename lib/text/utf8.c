/* utf8.c — UTF-8 validation and repair, a growable byte buffer, the string
 * hash map the tokenizers look tokens up in, and the streaming detokeniser
 * that never emits half a character. */
#include <config.h>

#include "text_int.h"

/* ------------------------------------------------------------------ UTF-8 */

/* Classify the bytes at s[0..n): > 0 the length of a complete valid
 * character, 0 if s[0] cannot start one (or a later byte breaks it), -1 if
 * every available byte is a valid prefix but the character is cut off. */
static int utf8_check(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	size_t need;
	unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
	uint32_t v;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		need = 2;
		v = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		v = c & 0x0F;
		if (c == 0xE0)
			lo = 0xA0; /* overlong */
		else if (c == 0xED)
			hi = 0x9F; /* surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		v = c & 0x07;
		if (c == 0xF0)
			lo = 0x90; /* overlong */
		else if (c == 0xF4)
			hi = 0x8F; /* above U+10FFFF */
	} else {
		return 0;
	}
	for (size_t i = 1; i < need; i++) {
		if (i >= n)
			return -1;
		unsigned b = s[i];
		if (i == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (b & 0x3F);
	}
	*cp = v;
	return (int)need;
}

size_t moe_utf8_valid_len(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (n == 0)
		return 0;
	int r = utf8_check(s, n, cp);
	return r > 0 ? (size_t)r : 0;
}

bool moe_utf8_is_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	uint32_t cp;
	while (i < n) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		int r = utf8_check(p + i, n - i, &cp);
		if (r <= 0)
			return false;
		i += (size_t)r;
	}
	return true;
}

/* ----------------------------------------------------------------- buffer */

int moe_sbuf_reserve(moe_sbuf *b, size_t extra)
{
	if (b->cap - b->len > extra) /* keep room for a NUL */
		return 0;
	if (extra > SIZE_MAX / 2 - b->len)
		return MOE_ENOMEM;
	size_t cap = b->cap ? b->cap : 64;
	while (cap - b->len < extra + 1) /* + 1: room for a NUL */
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return MOE_ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int moe_sbuf_add(moe_sbuf *b, const void *s, size_t n)
{
	if (moe_sbuf_reserve(b, n) < 0)
		return MOE_ENOMEM;
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

static const char replacement[3] = {'\xEF', '\xBF', '\xBD'}; /* U+FFFD */

int moe_sbuf_add_sanitized(moe_sbuf *b, const char *s, size_t n, size_t *held)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	uint32_t cp;

	if (held)
		*held = 0;
	/* Worst case every byte becomes 3. */
	if (n > SIZE_MAX / 3 || moe_sbuf_reserve(b, 3 * n) < 0)
		return MOE_ENOMEM;
	while (i < n) {
		size_t run = i;
		while (run < n && p[run] < 0x80)
			run++;
		if (run > i) {
			memcpy(b->p + b->len, p + i, run - i);
			b->len += run - i;
			i = run;
			if (i == n)
				break;
		}
		int r = utf8_check(p + i, n - i, &cp);
		if (r > 0) {
			memcpy(b->p + b->len, p + i, (size_t)r);
			b->len += (size_t)r;
			i += (size_t)r;
		} else if (r < 0 && held) {
			*held = n - i;
			break;
		} else {
			/* One replacement per bad byte; the next byte is
			 * looked at afresh (it may start a character). */
			memcpy(b->p + b->len, replacement, 3);
			b->len += 3;
			i++;
		}
	}
	b->p[b->len] = '\0';
	return 0;
}

int moe_utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len, moe_error *e)
{
	moe_sbuf b = {0};
	if (moe_sbuf_reserve(&b, 1) < 0 || moe_sbuf_add_sanitized(&b, s, len, NULL) < 0) {
		free(b.p);
		return moe_err(e, MOE_ENOMEM, "out of memory repairing UTF-8");
	}
	*out = b.p;
	*out_len = b.len;
	return 0;
}

/* --------------------------------------------------------------- hash map */

struct strmap_slot; /* the arrays of moe_strmap are parallel */

uint32_t moe_str_hash(const char *s, size_t n)
{
	/* 64-bit multiply-xorshift over 8-byte words: token strings are
	 * short and looked up millions of times per second. */
	const uint64_t k = 0x9E3779B97F4A7C15ull;
	uint64_t h = 0x243F6A8885A308D3ull ^ (n * k);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		h = (h ^ w) * k;
		h ^= h >> 29;
	}
	if (i < n) {
		uint64_t w = 0;
		memcpy(&w, s + i, n - i);
		h = (h ^ w) * k;
		h ^= h >> 29;
	}
	h *= 0xBF58476D1CE4E5B9ull;
	h ^= h >> 32;
	return (uint32_t)h;
}

int moe_strmap_init(moe_strmap *m, size_t expected)
{
	size_t cap = 16;
	while (cap < expected * 2 + 16)
		cap *= 2;
	memset(m, 0, sizeof *m);
	if (cap > UINT32_MAX)
		return MOE_ENOMEM;
	m->slot_val = calloc(cap, sizeof *m->slot_val);
	m->slot_key = calloc(cap, sizeof *m->slot_key);
	m->slot_len = calloc(cap, sizeof *m->slot_len);
	m->slot_hash = calloc(cap, sizeof *m->slot_hash);
	if (!m->slot_val || !m->slot_key || !m->slot_len || !m->slot_hash) {
		moe_strmap_free(m);
		return MOE_ENOMEM;
	}
	m->mask = (uint32_t)(cap - 1);
	return 0;
}

void moe_strmap_free(moe_strmap *m)
{
	free(m->slot_val);
	free(m->slot_key);
	free(m->slot_len);
	free(m->slot_hash);
	memset(m, 0, sizeof *m);
}

static int strmap_grow(moe_strmap *m)
{
	moe_strmap n;
	if (moe_strmap_init(&n, (size_t)m->mask + 1) < 0)
		return MOE_ENOMEM;
	for (uint32_t i = 0; i <= m->mask; i++) {
		if (!m->slot_val[i])
			continue;
		uint32_t j = m->slot_hash[i] & n.mask;
		while (n.slot_val[j])
			j = (j + 1) & n.mask;
		n.slot_val[j] = m->slot_val[i];
		n.slot_key[j] = m->slot_key[i];
		n.slot_len[j] = m->slot_len[i];
		n.slot_hash[j] = m->slot_hash[i];
	}
	n.count = m->count;
	moe_strmap_free(m);
	*m = n;
	return 0;
}

int moe_strmap_put(moe_strmap *m, const char *k, size_t n, uint32_t v)
{
	if (n > UINT32_MAX || v == UINT32_MAX)
		return MOE_ENOMEM;
	if ((size_t)(m->count + 1) * 2 > (size_t)m->mask + 1 && strmap_grow(m) < 0)
		return MOE_ENOMEM;
	uint32_t h = moe_str_hash(k, n);
	uint32_t i = h & m->mask;
	while (m->slot_val[i]) {
		if (m->slot_hash[i] == h && m->slot_len[i] == n &&
		    memcmp(m->slot_key[i], k, n) == 0) {
			m->slot_val[i] = v + 1;
			return 0;
		}
		i = (i + 1) & m->mask;
	}
	m->slot_val[i] = v + 1;
	m->slot_key[i] = k;
	m->slot_len[i] = (uint32_t)n;
	m->slot_hash[i] = h;
	m->count++;
	return 0;
}

int64_t moe_strmap_get(const moe_strmap *m, const char *k, size_t n)
{
	if (!m->slot_val)
		return -1;
	uint32_t h = moe_str_hash(k, n);
	uint32_t i = h & m->mask;
	while (m->slot_val[i]) {
		if (m->slot_hash[i] == h && m->slot_len[i] == n &&
		    memcmp(m->slot_key[i], k, n) == 0)
			return (int64_t)m->slot_val[i] - 1;
		i = (i + 1) & m->mask;
	}
	return -1;
}

/* ------------------------------------------------------------- detokeniser */

struct moe_detok {
	const moe_tokenizer *t;
	unsigned flags;
	bool started;         /* a non-empty piece has been seen */
	unsigned char held[4];
	size_t n_held;        /* bytes of an incomplete character */
	moe_sbuf out;
	moe_sbuf tmp;
};

int moe_detok_new(moe_detok **out, const moe_tokenizer *t, unsigned flags, moe_error *e)
{
	moe_detok *d = calloc(1, sizeof *d);
	if (!d)
		return moe_err(e, MOE_ENOMEM, "out of memory (detokeniser)");
	d->t = t;
	d->flags = flags;
	*out = d;
	return 0;
}

void moe_detok_free(moe_detok *d)
{
	if (!d)
		return;
	free(d->out.p);
	free(d->tmp.p);
	free(d);
}

int moe_detok_push(moe_detok *d, int32_t id, const char **text, size_t *len, moe_error *e)
{
	size_t n;
	const char *piece = moe_tokenizer_piece(d->t, id, d->flags & MOE_DETOK_SPECIAL, &n);

	*text = "";
	*len = 0;
	if (!piece)
		return moe_err(e, MOE_EINVAL, "token id %" PRId32 " out of range (vocabulary has %"
			       PRIu32 " tokens)", id, moe_tokenizer_n_tokens(d->t));
	if (n && !d->started) {
		d->started = true;
		if ((d->flags & MOE_DETOK_STRIP_SPACE) && d->t->add_space_prefix &&
		    piece[0] == ' ') {
			piece++;
			n--;
		}
	}
	if (n == 0)
		return 0;
	d->out.len = 0;
	d->tmp.len = 0;
	if (moe_sbuf_add(&d->tmp, d->held, d->n_held) < 0 ||
	    moe_sbuf_add(&d->tmp, piece, n) < 0 || moe_sbuf_reserve(&d->out, 1) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (detokeniser)");
	size_t held;
	if (moe_sbuf_add_sanitized(&d->out, d->tmp.p, d->tmp.len, &held) < 0)
		return moe_err(e, MOE_ENOMEM, "out of memory (detokeniser)");
	/* held <= 3: a valid prefix is at most 3 bytes of a 4-byte char. */
	memcpy(d->held, d->tmp.p + d->tmp.len - held, held);
	d->n_held = held;
	*text = d->out.p;
	*len = d->out.len;
	return 0;
}

void moe_detok_flush(moe_detok *d, const char **text, size_t *len)
{
	d->out.len = 0;
	*text = "";
	*len = 0;
	if (d->n_held && moe_sbuf_add_sanitized(&d->out, (const char *)d->held, d->n_held,
						NULL) == 0) {
		*text = d->out.p;
		*len = d->out.len;
	}
	d->n_held = 0;
	d->started = false;
}

int moe_tokenizer_decode(const moe_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
			 char **text, size_t *len, moe_error *e)
{
	moe_detok *d = NULL;
	moe_sbuf b = {0};
	const char *s;
	size_t sn;
	int rc;

	MOE_TRY(moe_detok_new(&d, t, flags, e));
	rc = moe_sbuf_reserve(&b, 1);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = moe_detok_push(d, ids[i], &s, &sn, e);
		if (rc == 0 && moe_sbuf_add(&b, s, sn) < 0)
			rc = moe_err(e, MOE_ENOMEM, "out of memory decoding tokens");
	}
	if (rc == 0) {
		moe_detok_flush(d, &s, &sn);
		if (moe_sbuf_add(&b, s, sn) < 0)
			rc = moe_err(e, MOE_ENOMEM, "out of memory decoding tokens");
	}
	moe_detok_free(d);
	if (rc < 0) {
		free(b.p);
		return rc;
	}
	*text = b.p;
	*len = b.len;
	return 0;
}
