/* t-attn.c — the attention tile kernel (kernels.h, moe_attn_tile) of every
 * ISA level this CPU has, on a paged KV cache built here.
 *
 * For F16 and Q8_0 caches, several head sizes, GQA groups and block sizes
 * (ragged: rows not a multiple of four, blocks of 20 positions), with and
 * without attention sinks and a sliding window:
 *
 * 1. Against a double-precision softmax(scale q.k) v computed here from the
 *    cache's decoded values (quant.h's decoders): every output within
 *    TOL_REF of the largest |v|.  Weights sum to one, so an output's size is
 *    bounded by max |v|; what separates the kernel from the reference is
 *    float rounding over a few hundred keys (and the exp polynomial, which
 *    is good to about 1e-7).  A key wrongly taken or left out moves an
 *    output by about 1/n_keys of max |v|, far above the bound.
 * 2. Each SIMD level against generic within TOL_SIMD.
 * 3. Batch invariance: every token's rows are bit for bit the same computed
 *    alone, in tiles of 5 and in one tile of all the tokens.
 * 4. Positions past the written ones hold NaN (an unwritten cache may hold
 *    anything) and no output is NaN; with a window, the block list before
 *    the window's first block lies in an inaccessible page, so a kernel
 *    that read it would crash.
 * 5. The F16 cache write (f16_store) of every level bit for bit equal to
 *    quant.h's scalar moe_f32_to_f16 on the floats around every half: each
 *    half's own value, its float neighbours, the midpoints to the next half
 *    and their neighbours (where rounding to even decides), across the
 *    subnormal and overflow edges; every NaN payload bit and the
 *    signalling NaNs; and 2^20 random bit patterns.  Dense and strided,
 *    lengths that leave every vector tail, and nothing written between
 *    the strided outputs.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"
#include "quant.h"
#include "quant/blocks.h"
#include "tap.h"
#include "testrand.h"

#define TOL_REF 1e-6
#define TOL_SIMD 1e-6

typedef struct {
	int kv_type, hd, hkv, group, bt, n_pos, n_blocks;
	size_t row_bytes, head_bytes, block_bytes;
	uint8_t *data;     /* [n_blocks][block_bytes]: K then V of one layer */
	int32_t *ids;      /* position p in block ids[p / bt] (a shuffled order) */
	float *kf, *vf;    /* [n_pos][hkv * hd] the cache's values, decoded */
} cache;

static uint8_t *block_k(const cache *c, int blk) /* K of block blk */
{
	return c->data + (size_t)blk * c->block_bytes;
}

static void cache_build(cache *c, int kv_type, int hd, int hkv, int group, int bt, int n_pos)
{
	memset(c, 0, sizeof *c);
	c->kv_type = kv_type, c->hd = hd, c->hkv = hkv, c->group = group, c->bt = bt;
	c->n_pos = n_pos;
	c->n_blocks = (n_pos + bt - 1) / bt + 2;
	int kvd = hkv * hd;
	c->row_bytes = kv_type == MOE_F16 ? (size_t)kvd * 2 : (size_t)kvd / MOE_QK * sizeof(moe_block_q8_0);
	c->head_bytes = c->row_bytes / hkv;
	c->block_bytes = 2 * (size_t)bt * c->row_bytes;
	c->data = malloc((size_t)c->n_blocks * c->block_bytes);
	c->ids = malloc((size_t)c->n_blocks * sizeof *c->ids);
	c->kf = malloc((size_t)n_pos * kvd * sizeof(float));
	c->vf = malloc((size_t)n_pos * kvd * sizeof(float));
	/* NaN everywhere first: what is never written stays NaN */
	if (kv_type == MOE_F16) {
		uint16_t *h = (uint16_t *)c->data;
		for (size_t i = 0; i < (size_t)c->n_blocks * c->block_bytes / 2; i++)
			h[i] = 0x7E00;
	} else {
		moe_block_q8_0 *b = (moe_block_q8_0 *)c->data;
		for (size_t i = 0; i < (size_t)c->n_blocks * c->block_bytes / sizeof *b; i++)
			b[i].d = 0x7E00;
	}
	for (int i = 0; i < c->n_blocks; i++) /* blocks in reverse order */
		c->ids[i] = c->n_blocks - 1 - i;
	const moe_type_traits *tr = moe_type_get(kv_type);
	float *k = malloc((size_t)kvd * sizeof(float)), *v = malloc((size_t)kvd * sizeof(float));
	uint8_t *row = malloc(c->row_bytes);
	for (int p = 0; p < n_pos; p++) {
		for (int i = 0; i < kvd; i++)
			k[i] = 2.0f * frand(), v[i] = frand();
		uint8_t *kb = block_k(c, c->ids[p / bt]), *vb = kb + (size_t)bt * c->row_bytes;
		int slot = p % bt;
		tr->from_float(v, vb + (size_t)slot * c->row_bytes, kvd);
		tr->to_float(vb + (size_t)slot * c->row_bytes, c->vf + (size_t)p * kvd, kvd);
		tr->from_float(k, row, kvd);
		tr->to_float(row, c->kf + (size_t)p * kvd, kvd);
		if (kv_type == MOE_F16) /* K transposed: [dims][block_tokens] */
			for (int d = 0; d < kvd; d++)
				((uint16_t *)kb)[(size_t)d * bt + slot] = ((uint16_t *)row)[d];
		else
			memcpy(kb + (size_t)slot * c->row_bytes, row, c->row_bytes);
	}
	free(k), free(v), free(row);
}

static void cache_free(cache *c)
{
	free(c->data), free(c->ids), free(c->kf), free(c->vf);
}

/* Row (token t, head i of KV head g) in double from the decoded values. */
static void reference(const cache *c, int g, const float *q, int lo, int hi, const float *sink,
		      float scale, double *out)
{
	int hd = c->hd, kvd = c->hkv * hd;
	double *s = malloc((size_t)(hi - lo) * sizeof *s), m = sink ? *sink : -INFINITY, l = 0;
	for (int p = lo; p < hi; p++) {
		double dot = 0;
		for (int d = 0; d < hd; d++)
			dot += (double)q[d] * c->kf[(size_t)p * kvd + g * hd + d];
		s[p - lo] = dot * scale;
		m = s[p - lo] > m ? s[p - lo] : m;
	}
	memset(out, 0, (size_t)hd * sizeof *out);
	for (int p = lo; p < hi; p++) {
		double w = exp(s[p - lo] - m);
		l += w;
		for (int d = 0; d < hd; d++)
			out[d] += w * c->vf[(size_t)p * kvd + g * hd + d];
	}
	if (sink)
		l += exp(*sink - m);
	for (int d = 0; d < hd; d++)
		out[d] /= l;
	free(s);
}

typedef struct {
	const cache *c;
	int n_tok, window;
	const uint8_t **k[4], **v[4]; /* [KV head][block] block addresses */
	const float *q, *sink; /* q [n_tok][H * hd]; sink [H] or NULL */
	int32_t *lo, *hi;
	float scale;
} problem;

/* Tokens [t0, t0 + n) of the problem for KV head g into out [n_tok][H * hd]. */
static void run(const moe_kernels *k, const problem *pb, int g, int t0, int n, float *out,
		float *work)
{
	const cache *c = pb->c;
	int H = c->hkv * c->group, hd = c->hd;
	moe_attn_tile t = {
		.kv_type = c->kv_type, .head_dim = hd, .head_dim_v = hd, .block_tokens = c->bt,
		.k = pb->k[g], .v = pb->v[g],
		.row_bytes = c->row_bytes, .n_tok = n,
		.n_head = c->group, .q = pb->q + (size_t)t0 * H * hd + (size_t)g * c->group * hd,
		.q_stride = (int64_t)H * hd, .out = out + (size_t)t0 * H * hd + (size_t)g * c->group * hd,
		.out_stride = (int64_t)H * hd, .lo = pb->lo + t0, .hi = pb->hi + t0,
		.sink = pb->sink ? pb->sink + g * c->group : NULL, .scale = pb->scale, .work = work,
	};
	k->attn(&t);
}

/* Every KV head, the tokens in tiles of `tile`. */
static void run_all(const moe_kernels *k, const problem *pb, int tile, float *out, float *work)
{
	for (int g = 0; g < pb->c->hkv; g++)
		for (int t0 = 0; t0 < pb->n_tok; t0 += tile)
			run(k, pb, g, t0, pb->n_tok - t0 < tile ? pb->n_tok - t0 : tile, out, work);
}

static void check_case(int kv_type, int hd, int hkv, int group, int bt, int n_pos, int n_tok,
		       int window, int sinks)
{
	cache c;
	cache_build(&c, kv_type, hd, hkv, group, bt, n_pos);
	int H = hkv * group;
	size_t n_out = (size_t)n_tok * H * hd;
	float *q = malloc(n_out * sizeof(float)), sink[64];
	int32_t lo[64], hi[64];
	for (size_t i = 0; i < n_out; i++)
		q[i] = frand();
	for (int i = 0; i < H; i++)
		sink[i] = 3.0f * frand() + 1.0f;
	/* the last n_tok positions, as a prefill chunk has them */
	int first_block = c.n_blocks;
	for (int t = 0; t < n_tok; t++) {
		hi[t] = n_pos - n_tok + t + 1;
		lo[t] = window && hi[t] > window ? hi[t] - window : 0;
		first_block = lo[t] / bt < first_block ? lo[t] / bt : first_block;
	}
	/* each KV head's K and V address lists: the entries from first_block
	 * on start a page after an inaccessible one */
	problem pb = {&c, n_tok, window, {NULL}, {NULL}, q, sinks ? sink : NULL, lo, hi,
		      1.0f / sqrtf((float)hd)};
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n_lists = 2 * (size_t)hkv;
	uint8_t *map = mmap(NULL, 2 * page * n_lists, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (size_t i = 0; map != MAP_FAILED && i < n_lists; i++) {
		if (mprotect(map + 2 * page * i, page, PROT_NONE)) {
			ok(0, "mprotect");
			return;
		}
		const uint8_t **list = (const uint8_t **)(map + 2 * page * i + page) - first_block;
		int g = (int)(i / 2);
		for (int b = first_block; b < c.n_blocks; b++) {
			uint8_t *blk = block_k(&c, c.ids[b]);
			if (i % 2)
				list[b] = blk + (size_t)bt * c.row_bytes + (size_t)g * c.head_bytes;
			else
				list[b] = blk + (kv_type == MOE_F16 ? (size_t)g * hd * bt * 2
								    : (size_t)g * c.head_bytes);
		}
		if (i % 2)
			pb.v[g] = list;
		else
			pb.k[g] = list;
	}
	if (map == MAP_FAILED) {
		ok(0, "mmap guard pages");
		return;
	}

	char name[160];
	snprintf(name, sizeof name, "%s hd %d, %d KV heads x %d, blocks of %d, %d tokens at %d%s%s",
		 moe_type_name(kv_type), hd, hkv, group, bt, n_tok, n_pos, window ? ", window" : "",
		 sinks ? ", sinks" : "");
	double *ref = malloc(n_out * sizeof(double)), vmax = 0;
	for (size_t i = 0; i < (size_t)n_pos * hkv * hd; i++)
		vmax = fabs(c.vf[i]) > vmax ? fabs(c.vf[i]) : vmax;
	for (int t = 0; t < n_tok; t++)
		for (int h = 0; h < H; h++)
			reference(&c, h / group, q + ((size_t)t * H + h) * hd, lo[t], hi[t],
				  sinks ? &sink[h] : NULL, pb.scale, ref + ((size_t)t * H + h) * hd);

	size_t wb = moe_attn_work_bytes(hd, hd, bt, n_tok * group);
	float *work = aligned_alloc(64, (wb + 63) / 64 * 64);
	float *gen = malloc(n_out * sizeof(float)), *all = malloc(n_out * sizeof(float));
	float *one = malloc(n_out * sizeof(float)), *five = malloc(n_out * sizeof(float));
	run_all(moe_kernels_for(MOE_ISA_GENERIC), &pb, n_tok, gen, work);
	for (int isa = MOE_ISA_GENERIC; isa <= MOE_ISA_AVX512; isa++) {
		const moe_kernels *k = moe_kernels_for((moe_isa)isa);
		if (!k)
			continue;
		run_all(k, &pb, n_tok, all, work);
		run_all(k, &pb, 1, one, work);
		run_all(k, &pb, 5, five, work);
		double err = 0, derr = 0;
		int nan = 0;
		for (size_t i = 0; i < n_out; i++) {
			nan += isnan(all[i]);
			err = fmax(err, fabs(all[i] - ref[i]));
			derr = fmax(derr, fabs(all[i] - gen[i]));
		}
		const char *in = moe_isa_name((moe_isa)isa);
		ok(!nan && err <= TOL_REF * vmax, "%s %s: within %g of the reference (%.3g, max |v| %.3g)",
		   in, name, TOL_REF, err, vmax);
		if (isa != MOE_ISA_GENERIC)
			ok(derr <= TOL_SIMD * vmax, "%s %s: within %g of generic (%.3g)", in, name,
			   TOL_SIMD, derr);
		ok(!memcmp(all, one, n_out * sizeof(float)) && !memcmp(all, five, n_out * sizeof(float)),
		   "%s %s: the same bits alone, in tiles of 5 and of %d", in, name, n_tok);
	}
	free(ref), free(work), free(gen), free(all), free(one), free(five), free(q);
	munmap(map, 2 * page * n_lists);
	cache_free(&c);
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* The test floats of section 5 into x (returns how many; x has room). */
static size_t f16_store_inputs(float *x)
{
	size_t n = 0;
	for (uint32_t h = 0; h < 0x7C00; h++) { /* every finite half >= 0 */
		uint32_t a = f32_bits(moe_f16_to_f32((uint16_t)h));
		/* the midpoint to the next half (65520 after the largest) */
		uint32_t m = f32_bits(h == 0x7BFF ? 65520.0f
						  : (bits_f32(a) + moe_f16_to_f32((uint16_t)(h + 1))) / 2);
		for (int d = -2; d <= 2; d++) {
			if (a + d < 0x7F800000u && (d >= 0 || a >= 2))
				x[n++] = bits_f32(a + d);
			x[n++] = bits_f32(m + d);
		}
	}
	/* below the smallest half subnormal's midpoint 2^-25, float
	 * subnormals, the largest float, infinity, NaNs of every payload bit */
	const uint32_t edge[] = {0x33000000, 0x32FFFFFF, 0x33000001, 0x00000001, 0x007FFFFF,
				 0x00800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001,
				 0x7FBFFFFF, 0x7FFFFFFF, 0x7FA00000, 0x7F802000, 0x7F801FFF};
	for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
		x[n++] = bits_f32(edge[i]);
	for (int b = 0; b < 23; b++)
		x[n++] = bits_f32(0x7F800000u | 1u << b);
	for (int i = 0; i < 1 << 20; i++)
		x[n++] = bits_f32(rnd32() << 1 ^ rnd32());
	size_t pos = n; /* the same with the sign bit set */
	for (size_t i = 0; i < pos; i++)
		x[n++] = bits_f32(f32_bits(x[i]) | 0x80000000u);
	return n;
}

static void check_f16_store(void)
{
	float *x = malloc(((size_t)0x7C00 * 10 + 64 + (1 << 20)) * 2 * sizeof *x);
	size_t n = f16_store_inputs(x);
	uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
	for (size_t i = 0; i < n; i++)
		want[i] = moe_f32_to_f16(x[i]);
	enum { STRIDE = 3, LEN = 37 };
	uint16_t sy[LEN * STRIDE];
	for (int isa = MOE_ISA_GENERIC; isa <= MOE_ISA_AVX512; isa++) {
		const moe_kernels *k = moe_kernels_for((moe_isa)isa);
		if (!k)
			continue;
		const char *in = moe_isa_name((moe_isa)isa);
		memset(got, 0xAA, n * sizeof *got);
		k->f16_store(x, got, (int64_t)n, 1);
		size_t bad = 0, first = 0;
		for (size_t i = 0; i < n; i++)
			if (got[i] != want[i] && !bad++)
				first = i;
		ok(!bad, "%s f16_store: %zu floats as moe_f32_to_f16 (%zu differ)", in, n, bad);
		if (bad)
			printf("# first: %08x gave %04x, not %04x\n", f32_bits(x[first]), got[first],
			       want[first]);
		/* strided, every length to LEN (every tail), from varying offsets */
		bad = 0;
		for (int len = 0; len <= LEN; len++) {
			size_t at = (size_t)len * 977 % (n - LEN);
			memset(sy, 0x55, sizeof sy);
			k->f16_store(x + at, sy, len, STRIDE);
			for (int i = 0; i < LEN * STRIDE; i++)
				bad += sy[i] != (i % STRIDE || i / STRIDE >= len ? 0x5555 : want[at + i / STRIDE]);
		}
		ok(!bad, "%s f16_store: strided, lengths 0-%d, nothing else written (%zu wrong)", in, LEN,
		   bad);
	}
	free(x), free(want), free(got);
}

int main(void)
{
	printf("# levels:");
	for (int isa = MOE_ISA_GENERIC; isa <= MOE_ISA_AVX512; isa++)
		if (moe_kernels_for((moe_isa)isa))
			printf(" %s", moe_isa_name((moe_isa)isa));
	printf("\n");
	const int kv[] = {MOE_F16, MOE_Q8_0};
	for (int i = 0; i < 2; i++) {
		/* kv, hd, KV heads, group, block, positions, tokens, window, sinks */
		check_case(kv[i], 64, 2, 4, 64, 300, 37, 0, 0);
		check_case(kv[i], 64, 2, 4, 64, 1, 1, 0, 0);    /* the first token */
		check_case(kv[i], 32, 3, 3, 16, 150, 19, 0, 1); /* 57 rows; sinks */
		check_case(kv[i], 128, 1, 1, 20, 97, 13, 0, 0); /* no GQA; blocks of 20 */
		check_case(kv[i], 64, 2, 2, 16, 260, 23, 40, 1); /* window and sinks, as gpt-oss */
		check_case(kv[i], 96, 1, 5, 64, 70, 6, 0, 0);
	}
	check_case(MOE_F16, 80, 2, 2, 64, 130, 9, 0, 0); /* F16 head not a multiple of 16 */
	check_case(MOE_F16, 36, 1, 3, 16, 40, 7, 0, 0); /* nor of 8: the output's scalar tail */
	check_f16_store();
	return tap_done();
}
