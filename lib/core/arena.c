/* arena.c — a bump allocator for many small objects freed together
 * (parsed metadata, names, token tables). */
#include "core.h"

#include <stdlib.h>
#include <string.h>

struct moe_arena_block {
	moe_arena_block *next;
	size_t size, used;
	max_align_t data[]; /* aligned payload */
};

void moe_arena_init(moe_arena *a, size_t block_size)
{
	a->head = NULL;
	a->block_size = block_size ? block_size : 64 * 1024;
	a->used_total = 0;
}

void *moe_arena_alloc(moe_arena *a, size_t size, size_t align)
{
	if (align == 0)
		align = 1;
	if (align & (align - 1) || align > _Alignof(max_align_t))
		align = _Alignof(max_align_t);
	moe_arena_block *b = a->head;
	if (b) {
		size_t off = (b->used + align - 1) & ~(align - 1);
		if (off <= b->size && size <= b->size - off) {
			b->used = off + size;
			a->used_total += size;
			return (char *)b->data + off;
		}
	}
	size_t cap = size > a->block_size ? size : a->block_size;
	if (cap > SIZE_MAX - sizeof *b)
		return NULL;
	b = calloc(1, sizeof *b + cap);
	if (!b)
		return NULL;
	b->size = cap;
	b->used = size;
	b->next = a->head;
	a->head = b;
	a->used_total += size;
	return b->data;
}

char *moe_arena_strndup(moe_arena *a, const char *s, size_t n)
{
	if (n == SIZE_MAX)
		return NULL;
	char *p = moe_arena_alloc(a, n + 1, 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

void moe_arena_free(moe_arena *a)
{
	moe_arena_block *b = a->head;
	while (b) {
		moe_arena_block *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->used_total = 0;
}

void moe_arena_reset(moe_arena *a)
{
	moe_arena_free(a);
}
