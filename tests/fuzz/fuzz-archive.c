/* fuzz-archive.c — libFuzzer target for moe-convert's archive input
 * (lib/format/archive.c through moe_hf_open): the input is a whole archive
 * file (tar, compressed tar, zip: whatever libarchive recognises) holding a
 * Hugging Face snapshot.  It must open or fail with a message and no object;
 * what opens must keep hf.h's promises (config.json present, tensors inside
 * their shard), and every tensor must read, in member order and then the
 * first one again (a read backwards reopens the shared reader), with no
 * crash, hang or leak.  Reads stop after 4 MiB so a member's declared size
 * cannot make one input take minutes.
 * Seeds: tests/fuzz/archive/ (snapshots of a tiny model as tar, tar.gz and
 * zip, and broken ones: a ".." member, a truncated tar, two snapshots).
 */
#include "hf.h"
#include "fuzz_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_tensor(const moe_hf_tensor *t, uint64_t *budget)
{
	unsigned char buf[4096];
	moe_error e = {0};
	if (!moe_range_ok(t->offset, t->size, t->src->size))
		__builtin_trap(); /* hf.h: inside the shard */
	for (uint64_t off = 0; off < t->size && *budget;) {
		size_t n = t->size - off < sizeof buf ? (size_t)(t->size - off) : sizeof buf;
		if (n > *budget)
			n = (size_t)*budget;
		if (moe_src_read(t->src, t->offset + off, buf, n, &e) < 0) {
			if (!e.msg[0])
				__builtin_trap(); /* a failure says why */
			return;
		}
		off += n;
		*budget -= n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("fuzz-archive", data, size);

	moe_hf *h = NULL;
	moe_error e = {0};
	if (moe_hf_open(&h, path, &e) < 0) {
		if (h || !e.msg[0])
			__builtin_trap();
		return 0;
	}
	if (!h->is_archive || !h->config_json)
		__builtin_trap();
	uint64_t budget = 4u << 20;
	for (uint32_t s = 0; s < h->n_shards; s++)
		for (uint64_t i = 0; i < h->n_tensors; i++)
			if (h->tensors[i].shard == s)
				read_tensor(&h->tensors[i], &budget);
	if (h->n_tensors)
		read_tensor(&h->tensors[0], &budget);
	moe_hf_close(h);
	return 0;
}
