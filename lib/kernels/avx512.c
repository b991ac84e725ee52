/* kernels/avx512.c — AVX-512 kernels (F, BW, VL, VNNI): products for every
 * weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4,
 * Q2_K .. Q6_K, IQ4_XS), the Q8_0, Q8_1 and Q8_K activation quantisers and
 * the F16/BF16 row decoders.
 *
 * Compiled with $(AVX512_CFLAGS); kernels.c calls moe_kernels_fill_avx512
 * only on a CPU that has every one of these features.
 *
 * Two kinds of product, which give the same bits (batch invariance):
 *
 * - Tiles with the lanes along k (xxx_tile, always inlined with constant R
 *   rows and T tokens; MOE_GEMM instantiates the shapes, 1 x 1 being the
 *   vec_dot).  They read the weights directly, so they are the decode path
 *   and the fallback for few tokens.
 * - Q4_K and Q5_K for 2-19 tokens (a batched step: an expert gets 1-4,
 *   the dense weights one per sequence): the same kind of tile with four
 *   rows in the four 128-bit blocks of a vector (k45_x4_tile), which needs
 *   fewer scale products and horizontal sums.
 * - For many tokens, a GEMM with the rows in the
 *   lanes: 16 weight rows are unpacked once into signed or unsigned bytes,
 *   interleaved [k / 4][16 rows][4 bytes], and each vpdpbusd multiplies four
 *   codes of 16 rows with four activation codes of one token (broadcast).
 *
 * Both reduce each block or super-block to exact integers before any float
 * work and then run the same float sequence per output (described at "the
 * K-quant reduction order" and at the 32-element blocks); F32/F16/BF16
 * keep 16 float lanes per output in every tile shape.
 *
 * Integer dot products use vpdpbusd (u8 x s8 -> s32 in groups of four).
 * Its first operand must be unsigned, which fixes how each type is set up:
 * 4/5/6-bit codes are unsigned already, their offsets (-8, -32) and minimums
 * go through activation sums; signed values (Q8_0, code books) meet
 * activations biased by +128 and the bias is removed with the weight sums.
 * Where a group's integer scale applies, vpdpwssd multiplies the group sums
 * (when they fit 16 bits) by it and accumulates in 32 bits.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/hsum_x86.h"
#include "kernels/kernels_int.h"

#define INLINE static inline __attribute__((always_inline))
/* The R x T loops of a tile must be unrolled completely for the
 * accumulators to live in registers: GCC does not do it on its own for
 * bodies this large (measured: 2-3x slower without). */
#define MOE_UNROLL _Pragma("GCC unroll 8")

INLINE uint16_t ld16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

INLINE float h2f(const uint8_t *p)
{
	return _cvtsh_ss(ld16(p));
}

INLINE float ldf32(const uint8_t *p)
{
	float v;
	memcpy(&v, p, 4);
	return v;
}

INLINE uint32_t ldf32_bits(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

INLINE __m512i zero_i(void)
{
	return _mm512_setzero_si512();
}

/* acc + sc * dot4(q, x): q unsigned codes, x signed, the 4-element sums
 * small enough for 16 bits; sc a 16-bit scale in the low half of each lane
 * (high half zero). */
INLINE __m512i dot_scaled(__m512i acc, __m512i q, __m512i x, __m512i sc)
{
	return _mm512_dpwssd_epi32(acc, _mm512_dpbusd_epi32(zero_i(), q, x), sc);
}

/* Store the horizontal sums of the tile's accumulators. */
#define STORE_TILE(R, T, acc, s, lds)                                                  \
	do {                                                                           \
		MOE_UNROLL for (int r_ = 0; r_ < (R); r_++)                            \
			MOE_UNROLL for (int t_ = 0; t_ < (T); t_++)                    \
				(s)[t_ * (lds) + r_] = _mm512_reduce_add_ps((acc)[r_][t_]); \
	} while (0)

/* The driver over tile shapes (see the file comment), and the vec_dot:
 * TR x TT tiles while TT tokens remain; a last 2 or 3 tokens go together
 * in R2 x 2 or R3 x 3 tiles where the type has them (R2, R3 non-zero: the
 * weights are decoded once for the few tokens an expert gets in a step),
 * else one token at a time in DR x 1 tiles. */
#define MOE_GEMM_FEW(name, TR, TT, DR, R2, R3)                                                 \
	static void name##_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw,          \
				const void *x, size_t ldx, float *s, size_t lds)               \
	{                                                                                      \
		const uint8_t *pw = w, *px = x;                                                \
		int t = 0, r;                                                                  \
		for (; t + (TT) <= nt; t += (TT)) {                                            \
			for (r = 0; r + (TR) <= nr; r += (TR))                                 \
				name##_tile(TR, TT, n, pw + r * ldw, ldw, px + t * ldx, ldx,   \
					    s + t * lds + r, lds);                             \
			for (; r < nr; r++)                                                    \
				name##_tile(1, TT, n, pw + r * ldw, ldw, px + t * ldx, ldx,    \
					    s + t * lds + r, lds);                             \
		}                                                                              \
		if ((R2) && nt - t == 2) {                                                     \
			for (r = 0; r + (R2) <= nr; r += (R2))                                 \
				name##_tile(R2, 2, n, pw + r * ldw, ldw, px + t * ldx, ldx,    \
					    s + t * lds + r, lds);                             \
			for (; r < nr; r++)                                                    \
				name##_tile(1, 2, n, pw + r * ldw, ldw, px + t * ldx, ldx,     \
					    s + t * lds + r, lds);                             \
			t = nt;                                                                \
		}                                                                              \
		if ((R3) && nt - t == 3) {                                                     \
			for (r = 0; r + (R3) <= nr; r += (R3))                                 \
				name##_tile(R3, 3, n, pw + r * ldw, ldw, px + t * ldx, ldx,    \
					    s + t * lds + r, lds);                             \
			for (; r < nr; r++)                                                    \
				name##_tile(1, 3, n, pw + r * ldw, ldw, px + t * ldx, ldx,     \
					    s + t * lds + r, lds);                             \
			t = nt;                                                                \
		}                                                                              \
		for (; t < nt; t++) {                                                          \
			for (r = 0; r + (DR) <= nr; r += (DR))                                 \
				name##_tile(DR, 1, n, pw + r * ldw, ldw, px + t * ldx, ldx,    \
					    s + t * lds + r, lds);                             \
			for (; r < nr; r++)                                                    \
				name##_tile(1, 1, n, pw + r * ldw, ldw, px + t * ldx, ldx,     \
					    s + t * lds + r, lds);                             \
		}                                                                              \
	}                                                                                      \
	static void name##_dot(int64_t n, float *s, const void *w, const void *x)              \
	{                                                                                      \
		name##_tile(1, 1, n, w, 0, x, 0, s, 0);                                        \
	}
#define MOE_GEMM(name, TR, TT, DR) MOE_GEMM_FEW(name, TR, TT, DR, 0, 0)

/* Software prefetch of the weight rows, MOE_PF_DIST bytes ahead of where
 * each row of a tile is being read, into L2.  Rows are contiguous, so this
 * runs a few tiles ahead of the whole stream.  Without it decode from memory
 * ran at half the speed of the same kernel on cached weights: the loop body
 * is long, so the out-of-order window reaches only a few hundred bytes
 * ahead, and the hardware prefetchers do not cover the interleaved rows.
 * (16 KiB with the L2 hint measured best on this project's Zen 5, AMD
 * family 26; 4 KiB gains little, and prefetching into L1 thrashes it.) */
#ifndef MOE_PF_DIST
#define MOE_PF_DIST 16384
#endif
INLINE void prefetch_ahead(const uint8_t *p, size_t len)
{
	for (size_t o = 0; o < len; o += 64)
		_mm_prefetch((const char *)p + MOE_PF_DIST + o, _MM_HINT_T1);
}

/* ---------------------------------------------------------- float weights */

/* Sixteen weights as floats: kind 0 F32, 1 F16, 2 BF16; `m` masks a tail. */
INLINE __m512 load_w16(const int kind, const uint8_t *p, __mmask16 m)
{
	if (kind == 0)
		return _mm512_maskz_loadu_ps(m, p);
	__m256i h = _mm256_maskz_loadu_epi16(m, p);
	if (kind == 1)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One step of 16 columns from column i (`m` masks a tail): acc[r][t] +=
 * w[r][i..] * x[t][i..], lane by lane. */
INLINE void float_step(const int kind, const int R, const int T, int64_t i, __mmask16 m,
		       bool prefetch, const uint8_t *w, size_t ldw, const uint8_t *x, size_t ldx,
		       __m512 acc[4][6])
{
	const int esz = kind == 0 ? 4 : 2;
	__m512 wv[4];
	MOE_UNROLL for (int r = 0; r < R; r++) {
		if (prefetch)
			prefetch_ahead(w + r * ldw + i * esz, 64);
		wv[r] = load_w16(kind, w + r * ldw + i * esz, m);
	}
	MOE_UNROLL for (int t = 0; t < T; t++) {
		__m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + i * 4);
		MOE_UNROLL for (int r = 0; r < R; r++)
			acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
	}
}

/* The steps go in column order, one accumulator per output, so every tile
 * shape gives the same bits.  Whole steps go two at a time, with no mask
 * and one prefetch per 64 bytes of each row, the tail last: with the mask
 * and the prefetch test inside the loop, the one-row F16 decode (bound by
 * its accumulator's FMA chain) ran 20-25% slower or faster as unrelated
 * changes moved the loop against 64-byte lines (mixtral-s-f16 tg128). */
INLINE void float_tile(const int kind, const int R, const int T, int64_t n, const uint8_t *w,
		       size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const bool f32 = kind == 0;
	__m512 acc[4][6];
	int64_t i = 0;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (; i + 32 <= n; i += 32) {
		float_step(kind, R, T, i, 0xFFFF, true, w, ldw, x, ldx, acc);
		float_step(kind, R, T, i + 16, 0xFFFF, f32, w, ldw, x, ldx, acc);
	}
	if (i + 16 <= n) {
		float_step(kind, R, T, i, 0xFFFF, true, w, ldw, x, ldx, acc);
		i += 16;
	}
	if (i < n)
		float_step(kind, R, T, i, (__mmask16)((1u << (n - i)) - 1), f32 || !(i & 31), w, ldw,
			   x, ldx, acc);
	STORE_TILE(R, T, acc, s, lds);
}

INLINE void f32_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		     const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	float_tile(0, R, T, n, w, ldw, x, ldx, s, lds);
}

INLINE void f16_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		     const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	float_tile(1, R, T, n, w, ldw, x, ldx, s, lds);
}

INLINE void bf16_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	float_tile(2, R, T, n, w, ldw, x, ldx, s, lds);
}

MOE_GEMM(f32, 4, 6, 4)
MOE_GEMM(f16, 4, 6, 4)

/* F16 decode (one token) goes one row at a time: streaming from memory it
 * ran at 1.3x the speed of 4-row tiles (bench-kernels 2048x1024, one
 * thread, CPU time: 32.7-32.9 GB/s against 24-25, AVX2 30-31).  A prefill's
 * last tokens keep the 4-row tiles (1-row ones there took 2-11% more CPU
 * time in mixtral-s-f16 pp512, 5 interleaved rounds).
 * The order per output does not depend on the rows: same bits either way. */
static void f16_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			 size_t ldx, float *s, size_t lds)
{
	if (nt != 1) {
		f16_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
		return;
	}
	for (int r = 0; r < nr; r++)
		f16_tile(1, 1, n, (const uint8_t *)w + r * ldw, ldw, x, ldx, s + r, lds);
}
MOE_GEMM(bf16, 4, 6, 4)

/* ------------------------------------------------------ 32-element blocks */

/* Q8_0 and the 4/5-bit 32-element types: Q4_0, Q5_0 (plus a fifth bit),
 * Q4_1, Q5_1 (with Q8_1 activations), IQ4_NL and MXFP4 (a 16-entry code
 * book).
 *
 * The reduction order (batch invariance, as for the K-quants): each block b
 * gives an exact integer S_b = sum_j w_j x_j (codes with their offsets), and
 * every output runs the same float sequence, block after block from +0:
 *     acc = fma(float(S_b), dw_b * dx_b, acc)
 *     acc = fma(float(X_b), m_b * dx_b, acc)     (Q4_1, Q5_1: X_b = sum x_j)
 * The decode tiles below (lanes along k) reduce their lanes to S_b; the
 * prefill GEMM further down (rows in lanes) computes S_b directly.
 *
 * Decode tiles: for the nibble types a quad of four blocks per row goes
 * in two vectors, the low nibbles (elements 0-15) of block j in 128-bit
 * lane j of one and the high nibbles (16-31) in the other, the activations
 * split the same way; Q8_0 goes two blocks per 64-lane step in element
 * order (lanes 0-7 block b, 8-15 block b+1; a last odd block is a step
 * with the second half zero).  vpdpbusd's first operand must be unsigned:
 * Q4_0/Q5_0 codes are, their offsets (-8, -16) entering as -8 * sum(x) in
 * the accumulator's start; the code books' signed values take x biased
 * by 128 and start from -128 * sum(w), Q8_0 (below) the other way round. */
enum { B32_Q4_0, B32_Q5_0, B32_Q4_1, B32_Q5_1, B32_IQ4_NL, B32_MXFP4, B32_Q8_0 };

INLINE size_t b32_bsize(const int kind)
{
	switch (kind) {
	case B32_Q4_0: return sizeof(moe_block_q4_0);
	case B32_Q5_0: return sizeof(moe_block_q5_0);
	case B32_Q4_1: return sizeof(moe_block_q4_1);
	case B32_Q5_1: return sizeof(moe_block_q5_1);
	case B32_IQ4_NL: return sizeof(moe_block_iq4_nl);
	case B32_Q8_0: return sizeof(moe_block_q8_0);
	default: return sizeof(moe_block_mxfp4);
	}
}

INLINE size_t b32_qs(const int kind)
{
	switch (kind) {
	case B32_Q4_0: return offsetof(moe_block_q4_0, qs);
	case B32_Q5_0: return offsetof(moe_block_q5_0, qs);
	case B32_Q4_1: return offsetof(moe_block_q4_1, qs);
	case B32_Q5_1: return offsetof(moe_block_q5_1, qs);
	case B32_IQ4_NL: return offsetof(moe_block_iq4_nl, qs);
	case B32_Q8_0: return offsetof(moe_block_q8_0, qs);
	default: return offsetof(moe_block_mxfp4, qs);
	}
}

/* The weight scale of a block as a float. */
INLINE float b32_scale(const int kind, const uint8_t *b)
{
	return kind == B32_MXFP4 ? moe_e8m0_to_f32_half(b[0]) : h2f(b);
}

/* The codes of blocks b and b+1 of a Q8_0 (q1 false) or Q8_1 row. */
INLINE __m512i q8_codes(const uint8_t *b, const int q1, const int two)
{
	const size_t bs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	const size_t qs = q1 ? offsetof(moe_block_q8_1, qs) : offsetof(moe_block_q8_0, qs);
	__m256i lo = _mm256_loadu_si256((const void *)(b + qs));
	__m256i hi = two ? _mm256_loadu_si256((const void *)(b + bs + qs)) : _mm256_setzero_si256();
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Nibble codes of two consecutive 16-byte runs qa, qb (qb only if `two`)
 * as lanes [qa.lo, qb.lo, qa.hi, qb.hi] (IQ4_XS's steps). */
INLINE __m512i nib_codes(const uint8_t *qa, const uint8_t *qb, const int two)
{
	__m128i a = _mm_loadu_si128((const void *)qa);
	__m128i c = two ? _mm_loadu_si128((const void *)qb) : _mm_setzero_si128();
	__m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(a), c, 1);
	__m512i z = _mm512_broadcast_i64x4(v);
	z = _mm512_mask_srli_epi16(z, 0xFFFF0000u, z, 4);
	return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* The reduction order of every output: 16 float partial sums, partial p
 * taking the blocks b with b % 16 == p in order (from +0), then their sum
 * in a fixed tree: p + p+8, then + p+4, then + p+2, then the two that are
 * left.  The prefill GEMM keeps the same 16 partials per output.
 *
 * The nibble types' decode tile goes four blocks at a time (a quad) for
 * R <= 4 rows: each row's lane sums (128-bit lane j = block j) are reduced
 * with in-lane unpacks to one vector of 16 block sums, lane 4j + r for row
 * r and block j, and the scales are built in the same lanes from plain
 * loads and word permutes.  So one float step serves 16 (row, block) pairs;
 * quad q of a run of 16 blocks goes to accumulator q % 4, whose lane 4j + r
 * is partial 4q + j of row r.  (The form Q8_0 keeps below, cross-lane
 * permutes and 16-scale gathers, took 40% more time for Q4_0.) */

/* Per 128-bit lane L: [sum of c0's four 32-bit lanes in L, c1's, c2's,
 * c3's]. */
INLINE __m512i sum_lanes4(__m512i c0, __m512i c1, __m512i c2, __m512i c3)
{
	__m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(c0, c1), _mm512_unpackhi_epi32(c0, c1));
	__m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(c2, c3), _mm512_unpackhi_epi32(c2, c3));
	return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* 64 bytes from p of which the first n matter, when `avail` bytes from p
 * may be read: a plain load when that covers them (the quads of a row's
 * interior), else the first n bytes with the rest zero (its end). */
INLINE __m512i load_upto(const uint8_t *p, int n, int avail)
{
	if (n <= 0)
		return zero_i();
	if (avail >= 64)
		return _mm512_loadu_si512(p);
	return _mm512_maskz_loadu_epi8((__mmask64)((1ull << n) - 1), p);
}

/* The 16-bit field at byte `off` of blocks 0..3 of a quad (stride bs) of
 * rows a and b (b may be NULL: zeros), interleaved: word 2j row a's block
 * j, word 2j + 1 row b's; blocks from `left` on give 0.  MXFP4's one-byte
 * E8M0 scale (at odd offsets too) comes back in the low byte. */
INLINE __m128i b32_fields8(const int mx, const size_t bs, const size_t off, const uint8_t *a,
			   const uint8_t *b, const int left)
{
	const int nb = left < 4 ? left : 4;
	const int need = (nb - 1) * (int)bs + (int)off + (mx ? 1 : 2), avail = nb * (int)bs;
	const __mmask32 lanes = (__mmask32)((1u << (2 * nb)) - 1);
	const int w0 = (int)off / 2, w1 = (int)(bs + off) / 2, w2 = (int)(2 * bs + off) / 2,
		  w3 = (int)(3 * bs + off) / 2;
	__m512i r;
	if (need <= 64) {
		/* Both rows in one permute. */
		const __m512i idx = _mm512_zextsi128_si512(
			_mm_setr_epi16(w0, 32 + w0, w1, 32 + w1, w2, 32 + w2, w3, 32 + w3));
		r = _mm512_maskz_permutex2var_epi16(lanes, load_upto(a, need, avail), idx,
						    b ? load_upto(b, need, avail) : zero_i());
	} else {
		const __m512i idx = _mm512_zextsi128_si512(_mm_setr_epi16(w0, w1, w2, w3, 0, 0, 0, 0));
		__m512i ra = _mm512_permutex2var_epi16(load_upto(a, need, avail), idx,
						       load_upto(a + 64, need - 64, avail - 64));
		__m512i rb = b ? _mm512_permutex2var_epi16(load_upto(b, need, avail), idx,
							   load_upto(b + 64, need - 64, avail - 64))
			       : zero_i();
		r = _mm512_maskz_unpacklo_epi16(lanes, ra, rb);
	}
	if (mx) {
		const int s1 = (int)((bs + off) & 1) * 8, s3 = (int)((3 * bs + off) & 1) * 8;
		const __m512i sh = _mm512_zextsi128_si512(_mm_setr_epi16(0, 0, s1, s1, 0, 0, s3, s3));
		r = _mm512_and_si512(_mm512_srlv_epi16(r, sh), _mm512_set1_epi16(0xFF));
	}
	return _mm512_castsi512_si128(r);
}

/* MXFP4's E8M0 bytes (one per 32-bit lane) as the half scale
 * moe_e8m0_to_f32_half gives: 2^(e-128), subnormal below e = 2. */
INLINE __m512 e8m0_half(__m512i e)
{
	__m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
	__m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
	__mmask16 lt2 = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
	return _mm512_castsi512_ps(_mm512_mask_blend_epi32(lt2, big, small));
}

/* 16 fields (lane 4j + r: row r < R, block j < left of the quad) as
 * floats: f16 values, or with mx E8M0 half scales. */
INLINE __m512 b32_scales_quad(const int mx, const int R, const size_t bs, const size_t off,
			      const uint8_t *w, size_t ldw, const int left)
{
	__m128i f01 = b32_fields8(mx, bs, off, w, R > 1 ? w + ldw : NULL, left);
	__m128i f23 = R > 2 ? b32_fields8(mx, bs, off, w + 2 * ldw, R > 3 ? w + 3 * ldw : NULL,
					  left)
			    : _mm_setzero_si128();
	__m256i f = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi32(f01, f23)),
					    _mm_unpackhi_epi32(f01, f23), 1);
	if (mx)
		return e8m0_half(_mm512_cvtepu16_epi32(f));
	return _mm512_cvtph_ps(f);
}

/* The activation codes of a quad's blocks j < left (others zero): lo has
 * codes 0-15 of block j in 128-bit lane j, hi codes 16-31. */
INLINE void x_quad(const int q1, const uint8_t *x, const int left, __m512i *lo, __m512i *hi)
{
	const size_t xbs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	const size_t xqs = q1 ? offsetof(moe_block_q8_1, qs) : offsetof(moe_block_q8_0, qs);
	__m512i v[2];
	MOE_UNROLL for (int h = 0; h < 2; h++) {
		const uint8_t *p = x + 2 * h * xbs + xqs;
		__m256i a = 2 * h < left ? _mm256_loadu_si256((const void *)p) : _mm256_setzero_si256();
		__m256i b = 2 * h + 1 < left ? _mm256_loadu_si256((const void *)(p + xbs))
					     : _mm256_setzero_si256();
		v[h] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
	}
	*lo = _mm512_shuffle_i64x2(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0));
	*hi = _mm512_shuffle_i64x2(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1));
}

/* The 16 code bytes of blocks j < left of a quad of one row (stride bs),
 * block j in 128-bit lane j (others zero). */
INLINE __m512i nib_bytes_quad(const uint8_t *q, const size_t bs, const int left)
{
	__m512i v = _mm512_zextsi128_si512(_mm_loadu_si128((const void *)q));
	if (left > 1)
		v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(q + bs)), 1);
	if (left > 2)
		v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(q + 2 * bs)), 2);
	if (left > 3)
		v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(q + 3 * bs)), 3);
	return v;
}

/* Q5_0/Q5_1 fifth bits of a quad's blocks j < left (bit e of qh is element
 * e's) for the lo and hi vectors of nib_bytes_quad's lane order. */
INLINE void q5_masks_quad(const uint8_t *qh, const size_t bs, const int left, __mmask64 *lo,
			  __mmask64 *hi)
{
	uint64_t l = 0, h = 0;
	MOE_UNROLL for (int j = 0; j < 4; j++) {
		uint32_t v;
		if (j >= left)
			break;
		memcpy(&v, qh + j * bs, 4);
		l |= (uint64_t)(v & 0xFFFF) << (16 * j);
		h |= (uint64_t)(v >> 16) << (16 * j);
	}
	*lo = l;
	*hi = h;
}

/* The nibble types' quad: S lane 4j + r = integer sum of row r, block j
 * (codes with their offsets, or code-book values, times the activation
 * codes); *xsum lane 4j + r = sum of block j's activation codes (Q4_1,
 * Q5_1). */
INLINE __m512i nib_quad(const int kind, const int R, const int left, const uint8_t *w,
			size_t ldw, const uint8_t *x, __m512i *xsum)
{
	const size_t bs = b32_bsize(kind), qs = b32_qs(kind);
	const int book = kind == B32_IQ4_NL || kind == B32_MXFP4;
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1;
	const int five = kind == B32_Q5_0 || kind == B32_Q5_1;
	const __m512i m4 = _mm512_set1_epi8(0x0F), ones = _mm512_set1_epi8(1);
	__m512i xlo, xhi, xs = zero_i(), dp[4];

	x_quad(q1, x, left, &xlo, &xhi);
	if (book) {
		xlo = _mm512_xor_si512(xlo, _mm512_set1_epi8((char)0x80));
		xhi = _mm512_xor_si512(xhi, _mm512_set1_epi8((char)0x80));
	} else if (q1) {
		__m512i t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero_i(), ones, xlo), ones, xhi);
		*xsum = sum_lanes4(t, t, t, t);
	} else {
		const __m512i off = _mm512_set1_epi8(kind == B32_Q5_0 ? 16 : 8);
		xs = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero_i(), off, xlo), off, xhi);
		xs = _mm512_sub_epi32(zero_i(), xs);
	}
	MOE_UNROLL for (int r = 0; r < 4; r++) {
		const uint8_t *b = w + r * ldw;
		if (r >= R) {
			dp[r] = zero_i();
			continue;
		}
		prefetch_ahead(b, 4 * bs);
		__m512i v = nib_bytes_quad(b + qs, bs, left);
		__m512i lo = _mm512_and_si512(v, m4);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
		if (five) {
			const size_t qh = kind == B32_Q5_0 ? offsetof(moe_block_q5_0, qh)
							  : offsetof(moe_block_q5_1, qh);
			__mmask64 kl, kh;
			q5_masks_quad(b + qh, bs, left, &kl, &kh);
			lo = _mm512_mask_add_epi8(lo, kl, lo, _mm512_set1_epi8(16));
			hi = _mm512_mask_add_epi8(hi, kh, hi, _mm512_set1_epi8(16));
		}
		if (book) {
			const int8_t *tab = kind == B32_IQ4_NL ? moe_kvalues_iq4nl : moe_kvalues_mxfp4;
			const __m512i tb = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)tab));
			lo = _mm512_shuffle_epi8(tb, lo);
			hi = _mm512_shuffle_epi8(tb, hi);
			/* Blocks past `left` have zero codes, hence value tb[0]
			 * and activations 0 + 128: their sum is 0 all the same. */
			__m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero_i(), ones, lo), ones, hi);
			__m512i wc = _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sum, 7));
			dp[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(wc, xlo, lo), xhi, hi);
		} else {
			dp[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xs, lo, xlo), hi, xhi);
		}
	}
	return sum_lanes4(dp[0], dp[1], dp[2], dp[3]);
}

/* One quad of R rows (blocks from w, activations from x; `left` blocks of
 * the row remain from here) into acc (see the order above). */
INLINE void b32_quad(const int kind, const int R, const int left, const uint8_t *w, size_t ldw,
		     const uint8_t *x, __m512 *acc)
{
	const size_t bs = b32_bsize(kind);
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1;
	const size_t xbs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	__m512i X = zero_i();
	/* Lane 4j + r: row r, block j. */
	const __m512i S = nib_quad(kind, R, left, w, ldw, x, &X);
	const __m512 dx = _mm512_permutexvar_ps(
		_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6),
		_mm512_castps256_ps512(_mm256_cvtph_ps(b32_fields8(0, xbs, 0, x, NULL, left))));
	const __m512 dw = b32_scales_quad(kind == B32_MXFP4, R, bs, 0, w, ldw, left);
	*acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, dx), *acc);
	if (q1) {
		const __m512 dm = b32_scales_quad(0, R, bs, 2, w, ldw, left);
		*acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(X), _mm512_mul_ps(dm, dx), *acc);
	}
}

/* R rows x 1 token (the decode tile; matmul loops tokens for small
 * batches). */
INLINE void b32_tile(const int kind, const int R, const int T, int64_t n, const uint8_t *w,
		     size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const size_t bs = b32_bsize(kind);
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1;
	const size_t xbs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	const int64_t nb = n / MOE_QK;
	__m512 acc[4];
	int64_t b0 = 0;

	(void)T; /* always 1 */
	(void)ldx;
	(void)lds;
	MOE_UNROLL for (int q = 0; q < 4; q++)
		acc[q] = _mm512_setzero_ps();
	for (; b0 + 16 <= nb; b0 += 16)
		MOE_UNROLL for (int q = 0; q < 4; q++)
			b32_quad(kind, R, 4, w + (b0 + 4 * q) * bs, ldw, x + (b0 + 4 * q) * xbs,
				 &acc[q]);
	for (int q = 0; b0 < nb; q++, b0 += 4)
		b32_quad(kind, R, (int)(nb - b0), w + b0 * bs, ldw, x + b0 * xbs, &acc[q]);
	/* The partials' tree, all rows at once: partial 4q + j + 4(q + 2) + j,
	 * then quad 0 + quad 1, then blocks j + j+2 (128-bit lanes) and the
	 * last two; row r ends in lane r. */
	__m512 b = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
	__m512 c = _mm512_add_ps(b, _mm512_shuffle_f32x4(b, b, _MM_SHUFFLE(3, 2, 3, 2)));
	__m128 d = _mm_add_ps(_mm512_castps512_ps128(c), _mm512_extractf32x4_ps(c, 1));
	float out[4];
	_mm_storeu_ps(out, d);
	MOE_UNROLL for (int r = 0; r < R; r++)
		s[r] = out[r];
}

/* Q8_0's decode tile: runs of 16 blocks per row, two blocks per 64-lane
 * step in element order.  The weights meet vpdpbusd biased by 128
 * (unsigned), the bias removed through the activations: each lane starts
 * from -128 * the sum of its four activation codes, computed once for the
 * R rows.  The lane sums of a run are reduced with in-lane unpacks to one
 * vector of its 16 block sums, and the scales are picked out of plain loads
 * by word permutes (no gather).  Same float operations in the same order as
 * the quad form and the GEMM (partial b % 16, then hsum16), so the same
 * bits.
 *
 * Decode goes one row at a time (Q8_DR), each run prefetched MOE_PF_DIST
 * ahead, but never past the end of the rows the gemm was given (an expert
 * matrix's neighbour is usually an expert the token did not choose).  An
 * older form (4-row tiles, a -128 * sum(w) correction per row, cross-lane
 * permutes, 16-scale gathers) took more CPU time than the AVX2 decode in
 * mixtral-s-q8_0 tg128; 4-row tiles of this form prefetched 32 KiB ahead
 * without the stop were no better.  Measured (perf stat task-clock of
 * moe-bench -p 0 -n 128 -r 3 -t 2, 4 interleaved rounds, loaded machine):
 * old 3957-4466 ms, AVX2 3557-3871, 4-row 16 KiB 3658-3859, 1-row 16 KiB
 * 3391-3646 (see README). */
#define Q8_DR 1

/* Lane l of a run's vectors holds block blk(l) = (l & 8) + 2 (l & 3) +
 * ((l >> 2) & 1) of the run's 16: [0 2 4 6 | 1 3 5 7 | 8 10 12 14 |
 * 9 11 13 15], the order the in-lane reduction leaves them in; the
 * partials are put back in block order (q8n_inv) before the tree.
 *
 * Word l of window k's permute: the scale of block blk(l) if that is in the
 * window (blocks 4k .. 4k+3 at words 0, 17, 34, 51 of 128 bytes). */
static const int16_t q8n_idx[4][32] __attribute__((aligned(64))) = {
	{0, 34, 0, 0, 17, 51, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	{0, 0, 0, 34, 0, 0, 17, 51, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	{0, 0, 0, 0, 0, 0, 0, 0, 0, 34, 0, 0, 17, 51, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 34, 0, 0, 17, 51, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};
/* Lanes of window k filled when it has nbk blocks: q8n_mask[k][nbk]. */
static const uint16_t q8n_mask[4][5] = {
	{0x0000, 0x0001, 0x0011, 0x0013, 0x0033},
	{0x0000, 0x0004, 0x0044, 0x004C, 0x00CC},
	{0x0000, 0x0100, 0x1100, 0x1300, 0x3300},
	{0x0000, 0x0400, 0x4400, 0x4C00, 0xCC00},
};

/* The f16 scales (offset 0, stride 34) of blocks 0 .. nv-1 of a run from
 * p as floats in the run's lane order, 0 from nv on: four windows of four
 * blocks, each two 64-byte loads and one word permute. */
INLINE __m512 q8n_scales(const uint8_t *p, const int nv)
{
	const int bs = (int)sizeof(moe_block_q8_0);
	__m512i r = zero_i();
	MOE_UNROLL for (int k = 0; k < 4; k++) {
		const int nbk = nv - 4 * k < 0 ? 0 : nv - 4 * k > 4 ? 4 : nv - 4 * k;
		if (nbk == 0)
			break;
		const int need = (nbk - 1) * bs + 2, avail = nbk * bs;
		const uint8_t *w = p + 4 * k * bs;
		r = _mm512_or_si512(r, _mm512_maskz_permutex2var_epi16(
					       q8n_mask[k][nbk], load_upto(w, need, avail),
					       _mm512_load_si512(q8n_idx[k]),
					       load_upto(w + 64, need - 64, avail - 64)));
	}
	return _mm512_cvtph_ps(_mm512_castsi512_si256(r));
}

INLINE void q8_0_tile_pf(const int R, int64_t n, const uint8_t *w, size_t ldw,
			 const uint8_t *x, float *s, const uint8_t *pf_end)
{
	const size_t bs = sizeof(moe_block_q8_0);
	const int64_t nb = n / MOE_QK;
	const __m512i b80 = _mm512_set1_epi8((char)0x80);
	__m512 acc[4];

	MOE_UNROLL for (int r = 0; r < R; r++)
		acc[r] = _mm512_setzero_ps();
	for (int64_t g0 = 0; g0 < nb; g0 += 16) {
		const int nv = nb - g0 < 16 ? (int)(nb - g0) : 16;
		const uint8_t *wg = w + g0 * bs, *xg = x + g0 * bs;
		__m512i xv[8], xc[8], d[4][8];
		/* Block pair k's activations and -128 * their sums per lane,
		 * once for the R rows. */
		MOE_UNROLL for (int k = 0; k < 8; k++) {
			xv[k] = 2 * k < nv ? q8_codes(xg + 2 * k * bs, 0, 2 * k + 1 < nv) : zero_i();
			xc[k] = _mm512_sub_epi32(zero_i(), _mm512_dpbusd_epi32(zero_i(), b80, xv[k]));
		}
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const uint8_t *b = wg + r * ldw;
			if ((size_t)(pf_end - b) >= MOE_PF_DIST + 16 * bs)
				prefetch_ahead(b, 16 * bs);
			MOE_UNROLL for (int k = 0; k < 8; k++) {
				if (2 * k >= nv) {
					d[r][k] = zero_i();
					continue;
				}
				__m512i wv = _mm512_xor_si512(q8_codes(b + 2 * k * bs, 0, 2 * k + 1 < nv), b80);
				d[r][k] = _mm512_dpbusd_epi32(xc[k], wv, xv[k]);
			}
		}
		const __m512 dx = q8n_scales(xg, nv);
		MOE_UNROLL for (int r = 0; r < R; r++) {
			__m512i u = sum_lanes4(d[r][0], d[r][1], d[r][2], d[r][3]);
			__m512i v = sum_lanes4(d[r][4], d[r][5], d[r][6], d[r][7]);
			__m512i S = _mm512_add_epi32(_mm512_shuffle_i64x2(u, v, _MM_SHUFFLE(2, 0, 2, 0)),
						     _mm512_shuffle_i64x2(u, v, _MM_SHUFFLE(3, 1, 3, 1)));
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S),
						 _mm512_mul_ps(q8n_scales(wg + r * ldw, nv), dx), acc[r]);
		}
	}
	const __m512i q8n_inv = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
	MOE_UNROLL for (int r = 0; r < R; r++)
		s[r] = hsum16(_mm512_permutexvar_ps(q8n_inv, acc[r]));
}

/* Q8_DR-row tiles for each token; the prefetches stop at the last row. */
static void q8_0_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
		      size_t ldx, float *s, size_t lds)
{
	const uint8_t *pw = w, *px = x, *end = pw + (size_t)nr * ldw;
	for (int t = 0; t < nt; t++) {
		int r = 0;
		for (; r + Q8_DR <= nr; r += Q8_DR)
			q8_0_tile_pf(Q8_DR, n, pw + r * ldw, ldw, px + t * ldx, s + t * lds + r, end);
		for (; r < nr; r++)
			q8_0_tile_pf(1, n, pw + r * ldw, ldw, px + t * ldx, s + t * lds + r, end);
	}
}

static void q8_0_dot(int64_t n, float *s, const void *w, const void *x)
{
	q8_0_tile_pf(1, n, w, 0, x, s, w);
}

#define MOE_B32_TILE(name, kind)                                                                \
	INLINE void name##_tile(const int R, const int T, int64_t n, const uint8_t *w,         \
				size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds) \
	{                                                                                      \
		b32_tile(kind, R, T, n, w, ldw, x, ldx, s, lds);                                \
	}
MOE_B32_TILE(q4_0, B32_Q4_0)
MOE_B32_TILE(q5_0, B32_Q5_0)
MOE_B32_TILE(q4_1, B32_Q4_1)
MOE_B32_TILE(q5_1, B32_Q5_1)
MOE_B32_TILE(iq4_nl, B32_IQ4_NL)
MOE_B32_TILE(mxfp4, B32_MXFP4)

MOE_GEMM(q4_0, 4, 1, 4)
MOE_GEMM(q5_0, 4, 1, 4)
MOE_GEMM(q4_1, 4, 1, 4)
MOE_GEMM(q5_1, 4, 1, 4)
MOE_GEMM(iq4_nl, 4, 1, 4)
MOE_GEMM(mxfp4, 4, 1, 4)


/* ---------------------------------------------------------------- K-quants */

/* Offsets inside a Q8_K block: d (f32), qs[256], bsums[16]. */
#define Q8K_D 0
#define Q8K_QS 4
#define Q8K_BSUMS 260
#define Q8K_SIZE 292

/* ------------------------------------------ the K-quant reduction order
 *
 * Batch invariance: a (row, token) result must not depend on the kernel
 * that computed it (decode tiles with lanes along k, or the prefill GEMM
 * with rows in lanes).  Integer sums are exact in any order, so for the
 * K-quants every super-block i is reduced to exact 32-bit integers first —
 * isum = sum_g sc_g * dot_g and (Q4_K, Q5_K) msum = sum_g m_g * bsum_g —
 * and the float work is the same fixed sequence for every output:
 *     acc = fma(float(isum), d * dy, acc)
 *     acc = fnmadd(float(msum), dmin * dy, acc)    (acc starts at +0)
 * for i = 0, 1, ... in order.  Both kernels below follow it lane by lane.
 */

/* Four outputs' integer sums from vectors whose lanes 0-7 add up to isum
 * and lanes 8-15 to msum: *is, *ms get the four totals in lanes 0-3. */
INLINE void reduce4(__m512i c0, __m512i c1, __m512i c2, __m512i c3, __m128i *is, __m128i *ms)
{
	__m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(c0, c1), _mm512_unpackhi_epi32(c0, c1));
	__m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(c2, c3), _mm512_unpackhi_epi32(c2, c3));
	__m512i s4 = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23),
				      _mm512_unpackhi_epi64(t01, t23));
	*is = _mm_add_epi32(_mm512_castsi512_si128(s4), _mm512_extracti32x4_epi32(s4, 1));
	*ms = _mm_add_epi32(_mm512_extracti32x4_epi32(s4, 2), _mm512_extracti32x4_epi32(s4, 3));
}

/* The float sequence of one super-block for four outputs (see above). */
INLINE __m128 ksb_finish4(__m128 acc, __m128i is, __m128i ms, __m128 d, __m128 dmin, __m128 dy)
{
	acc = _mm_fmadd_ps(_mm_cvtepi32_ps(is), _mm_mul_ps(d, dy), acc);
	return _mm_fnmadd_ps(_mm_cvtepi32_ps(ms), _mm_mul_ps(dmin, dy), acc);
}

/* The 12 packed scale bytes of Q4_K/Q5_K (read as 16: the block goes on)
 * as 32-bit lanes: 0-7 the scales, 8-15 the mins.  Dwords a, b, c of the
 * packed bytes give sc 0-3 = a & 63, sc 4-7 = (c & 15) | (a >> 6) << 4,
 * m 0-3 = b & 63, m 4-7 = (c >> 4) | (b >> 6) << 4, per byte. */
INLINE __m512i k4_scales(const uint8_t *p)
{
	__m128i v = _mm_loadu_si128((const void *)p);
	__m128i lo = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* a c b c */
	__m128i hi = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* . a . b */
	lo = _mm_and_si128(_mm_srlv_epi32(lo, _mm_setr_epi32(0, 0, 0, 4)),
			   _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
	hi = _mm_and_si128(_mm_srli_epi32(hi, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
	return _mm512_cvtepu8_epi32(_mm_or_si128(lo, hi));
}

/* Codes 64c .. 64c+63 of block i of a Q8_K row. */
INLINE __m512i q8k_chunk(const uint8_t *row, int64_t i, int c)
{
	return _mm512_loadu_si512(row + i * Q8K_SIZE + Q8K_QS + 64 * c);
}

/* Lanes 8-15: sums of the activation codes per group of 32 (from bsums). */
INLINE __m512i q8k_group_sums(const uint8_t *y)
{
	__m256i bs = _mm256_loadu_si256((const void *)(y + Q8K_BSUMS));
	__m256i ps = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
	return _mm512_inserti64x4(zero_i(), ps, 1);
}

/* Q4_K and Q5_K (five = 1): 64 elements per step p = 0..3 are the low and
 * high nibbles of qs[32p .. 32p+31] (groups 2p and 2p+1) in lane order;
 * Q5_K's fifth bits are bits 2p (low half) and 2p+1 (high half) of qh. */
INLINE void k45_tile(const int five, const int R, const int T, int64_t n, const uint8_t *w,
		     size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const size_t bsz = five ? sizeof(moe_block_q5_k) : sizeof(moe_block_q4_k);
	const size_t qs_off = five ? offsetof(moe_block_q5_k, qs) : offsetof(moe_block_q4_k, qs);
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	const __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	const __m512i bit0 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(1),
						     _mm512_set1_epi8(2));
	__m128 acc4[6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int g = 0; g < 6; g++)
		acc4[g] = _mm_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i scm[4], qh[4], ai[4][6];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const uint8_t *b = w + r * ldw + i * bsz;
			prefetch_ahead(b, bsz);
			scm[r] = k4_scales(b + 4);
			if (five)
				qh[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(
					(const void *)(b + offsetof(moe_block_q5_k, qh))));
			MOE_UNROLL for (int t = 0; t < T; t++)
				ai[r][t] = zero_i();
		}
		MOE_UNROLL for (int p = 0; p < 4; p++) {
			__m512i xq[6];
			const __m512i idx = _mm512_add_epi32(idx0, _mm512_set1_epi32(2 * p));
			MOE_UNROLL for (int t = 0; t < T; t++)
				xq[t] = q8k_chunk(x + t * ldx, i, p);
			MOE_UNROLL for (int r = 0; r < R; r++) {
				const uint8_t *b = w + r * ldw + i * bsz;
				__m512i q = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)(b + qs_off + 32 * p)));
				q = _mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4);
				q = _mm512_and_si512(q, m4);
				if (five) {
					__mmask64 k = _mm512_test_epi8_mask(
						qh[r], _mm512_slli_epi16(bit0, 2 * p));
					q = _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(16));
				}
				__m512i sc = _mm512_permutexvar_epi32(idx, scm[r]);
				MOE_UNROLL for (int t = 0; t < T; t++)
					ai[r][t] = dot_scaled(ai[r][t], q, xq[t], sc);
			}
		}
		/* Lanes 0-7: the group sums folded in pairs (still sc-scaled
		 * integers); lanes 8-15: m_g * (bsum_2g + bsum_2g+1). */
		__m512i c[24];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			MOE_UNROLL for (int t = 0; t < T; t++) {
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE;
				__m512i lo = _mm512_maskz_add_epi32(
					0x00FF, ai[r][t], _mm512_shuffle_i64x2(ai[r][t], ai[r][t], 0x4E));
				c[r * T + t] = _mm512_dpwssd_epi32(lo, scm[r], q8k_group_sums(y));
			}
		}
		MOE_UNROLL for (int o = R * T; o < (R * T + 3) / 4 * 4; o++)
			c[o] = zero_i();
		MOE_UNROLL for (int g = 0; g < (R * T + 3) / 4; g++) {
			/* d | dmin of each output's row, dy of its token, built in
			 * registers (o = r * T + t; padding outputs get zeros). */
#define K_DM(o) ((o) < R * T ? (int)ldf32_bits(w + ((o) / T) * ldw + i * bsz) : 0)
#define K_DY(o) ((o) < R * T ? ldf32(x + ((o) % T) * ldx + i * Q8K_SIZE + Q8K_D) : 0.0f)
			__m256 f = _mm256_cvtph_ps(
				_mm_setr_epi32(K_DM(4 * g), K_DM(4 * g + 1), K_DM(4 * g + 2), K_DM(4 * g + 3)));
			__m128 lo = _mm256_castps256_ps128(f), hi = _mm256_extractf128_ps(f, 1);
			__m128 dy = T == 1 && R * T >= 4 * g + 4
					    ? _mm_set1_ps(K_DY(0))
					    : _mm_setr_ps(K_DY(4 * g), K_DY(4 * g + 1), K_DY(4 * g + 2),
							  K_DY(4 * g + 3));
#undef K_DM
#undef K_DY
			__m128i is, ms;
			reduce4(c[4 * g], c[4 * g + 1], c[4 * g + 2], c[4 * g + 3], &is, &ms);
			acc4[g] = ksb_finish4(acc4[g], is, ms, _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
					      _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)), dy);
		}
	}
	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			s[t * lds + r] = acc4[(r * T + t) / 4][(r * T + t) % 4];
}

INLINE void q4_k_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	k45_tile(0, R, T, n, w, ldw, x, ldx, s, lds);
}

INLINE void q5_k_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	k45_tile(1, R, T, n, w, ldw, x, ldx, s, lds);
}

MOE_GEMM_FEW(q4_k, 3, 4, 4, 4, 4)
MOE_GEMM_FEW(q5_k, 2, 4, 4, 4, 4)

/* ------------------------------------------- Q4_K for a few tokens
 *
 * The tiles above spend more on each output's horizontal sums, its float
 * scalars and the scale per 64 codes than on its products.  This tile puts
 * four rows in the four 128-bit blocks of a vector instead: a vpdpbusd
 * multiplies 16 codes of each of 4 rows with 16 activation codes of one
 * token (broadcast to the 4 blocks), so
 *   - a group's 32 codes are two vpdpbusd into one accumulator, and the
 *     sums of two groups, packed to 16 bits (vpackssdw, exact), meet their
 *     scales (per block: per row) in one vpdpwssd: one per four vpdpbusd
 *     instead of one per vpdpbusd;
 *   - each output's super-block sum is 4 lanes (not 16): the sums of 4
 *     rows x 4 tokens reduce in 6 ops to lane 4r + t of one vector (so do
 *     the minimums' sums), which takes the float sequence for all 16
 *     outputs at once (before: 4 rows x 2 tokens per vector, half its
 *     lanes unused; one 2048 x 1024 product of 4 / 8 tokens, hot, CPU
 *     time: 43.8 -> 41.8 / 85.3 -> 82.6 us);
 *   - the 4 rows' scales are decoded at once (k4_scales on 4 blocks).
 * The sums that fit 16 bits for vpdpwssd: 8 codes * 15 * 128 = 15360.
 * Integer results and the float sequence per output are those of "the
 * K-quant reduction order", so the bits equal the other kernels'. */

/* Block r of the result: row r's 16 header bytes (d, dmin, scales). */
INLINE __m512i k4x_load4(const uint8_t *w, size_t ldw, int64_t off)
{
	__m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const void *)(w + off)));
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(w + ldw + off)), 1);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(w + 2 * ldw + off)), 2);
	return _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(w + 3 * ldw + off)), 3);
}

/* Per block (row): header dwords d|dmin, a, b, c -> bytes sc0-7, m0-7 (as
 * k4_scales). */
INLINE __m512i k4x_scales(__m512i h)
{
	__m512i lo = _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)_MM_SHUFFLE(3, 2, 3, 1)); /* a c b c */
	__m512i hi = _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)_MM_SHUFFLE(2, 2, 1, 1)); /* a a b b */
	lo = _mm512_and_si512(_mm512_srlv_epi32(lo, _mm512_set4_epi32(4, 0, 0, 0)),
			      _mm512_set4_epi32(0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F));
	hi = _mm512_and_si512(_mm512_srli_epi32(hi, 2),
			      _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0));
	return _mm512_or_si512(lo, hi);
}

/* Codes of 4 rows: block r = the nibbles (high if `high`) of row r's
 * qs[off .. off + 15]. */
INLINE void k4x_codes(const uint8_t *w, size_t ldw, int64_t off, __m512i c[4])
{
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	__m512i a = _mm512_inserti64x4(
		_mm512_castsi256_si512(_mm256_loadu_si256((const void *)(w + off))),
		_mm256_loadu_si256((const void *)(w + ldw + off)), 1);
	__m512i b = _mm512_inserti64x4(
		_mm512_castsi256_si512(_mm256_loadu_si256((const void *)(w + 2 * ldw + off))),
		_mm256_loadu_si256((const void *)(w + 3 * ldw + off)), 1);
	__m512i p0 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* qs[off ..] */
	__m512i p1 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)); /* qs[off + 16 ..] */
	c[0] = _mm512_and_si512(p0, m4);
	c[1] = _mm512_and_si512(p1, m4);
	c[2] = _mm512_and_si512(_mm512_srli_epi16(p0, 4), m4);
	c[3] = _mm512_and_si512(_mm512_srli_epi16(p1, 4), m4);
}

INLINE __m512i bcast128(const uint8_t *p)
{
	return _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)p));
}

/* Lane 4r + t of the result: the sum of block r's four lanes of v[t]
 * (exact integers, so the order does not matter). */
INLINE __m512i k4x_sum4(const __m512i v[4])
{
	const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]),
					   _mm512_unpackhi_epi32(v[0], v[1]));
	const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]),
					   _mm512_unpackhi_epi32(v[2], v[3]));
	return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* 4 * RG rows x T tokens (T <= 4) of Q4_K, or Q5_K (five = 1: the same
 * header; the fifth bit of element 64h + l is bit 2h of qh[l] for l < 32,
 * bit 2h + 1 of qh[l - 32] above, as in k45_tile). */
INLINE void k45_x4_tile(const int five, const int RG, const int T, int64_t n, const uint8_t *w,
			size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const size_t bsz = five ? sizeof(moe_block_q5_k) : sizeof(moe_block_q4_k);
	const size_t qs_off = five ? offsetof(moe_block_q5_k, qs) : offsetof(moe_block_q4_k, qs);
	const size_t qh_off = offsetof(moe_block_q5_k, qh);
	const __m512i bit4 = _mm512_set1_epi8(0x10);
	/* vpshufb controls: words 0-3 <- scale byte 2h, words 4-7 <- scale
	 * byte 2h + 1 (zero-extended; vpackssdw puts the sums of groups 2h and
	 * 2h + 1 there); dword j <- min byte m_j in both 16-bit halves (j = 0-3,
	 * then 4-7). */
	__m512i ctl_pk[4];
	MOE_UNROLL for (int h = 0; h < 4; h++) {
		const int lo = (int)(0x80008000u | (unsigned)(2 * h) * 0x10001u);
		const int hi = (int)(0x80008000u | (unsigned)(2 * h + 1) * 0x10001u);
		ctl_pk[h] = _mm512_set4_epi32(hi, hi, lo, lo);
	}
	const __m512i ctl_m0 = _mm512_set4_epi32(0x800B800B, 0x800A800A, 0x80098009, 0x80088008);
	const __m512i ctl_m1 = _mm512_set4_epi32(0x800F800F, 0x800E800E, 0x800D800D, 0x800C800C);
	const __m512i idx_dm = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 0, 0, 0, 0, 0, 0, 0, 0);
	__m512 acc[2];
	int64_t nb = n / MOE_QK_K;

#define K_DY(t) ldf32(x + (t) * ldx + i * Q8K_SIZE + Q8K_D)
	MOE_UNROLL for (int g = 0; g < RG; g++)
		acc[g] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i scb[2], is[2][4], qh[2][2];
		__m512 dm[2];
		MOE_UNROLL for (int g = 0; g < RG; g++) {
			const uint8_t *wg = w + 4 * g * ldw + i * bsz;
			MOE_UNROLL for (int r = 0; r < 4; r++)
				prefetch_ahead(wg + r * ldw, bsz);
			__m512i h = k4x_load4(wg, ldw, 0);
			scb[g] = k4x_scales(h);
			if (five) { /* block r: qh[0..15] / qh[16..31] of row r */
				qh[g][0] = k4x_load4(wg, ldw, (int64_t)qh_off);
				qh[g][1] = k4x_load4(wg, ldw, (int64_t)qh_off + 16);
			} else {
				qh[g][0] = qh[g][1] = zero_i();
			}
			/* per block: d, dmin, d, dmin */
			dm[g] = _mm512_cvtph_ps(
				_mm512_castsi512_si256(_mm512_permutexvar_epi32(idx_dm, h)));
			MOE_UNROLL for (int t = 0; t < T; t++)
				is[g][t] = zero_i();
		}
		MOE_UNROLL for (int hh = 0; hh < 4; hh++) {
			__m512i c[2][4], sl[2];
			MOE_UNROLL for (int g = 0; g < RG; g++) {
				k4x_codes(w + 4 * g * ldw + i * bsz, ldw, (int64_t)qs_off + 32 * hh, c[g]);
				if (five) /* bit 2hh (codes 0, 1), 2hh + 1 (2, 3) to bit 4 */
					MOE_UNROLL for (int j = 0; j < 4; j++) {
						const int b = 2 * hh + j / 2;
						const __m512i q = qh[g][j % 2];
						const __m512i f = b <= 4 ? _mm512_slli_epi16(q, 4 - b)
									 : _mm512_srli_epi16(q, b - 4);
						c[g][j] = _mm512_ternarylogic_epi32(c[g][j], f, bit4, 0xF8);
					}
				sl[g] = _mm512_shuffle_epi8(scb[g], ctl_pk[hh]);
			}
			MOE_UNROLL for (int t = 0; t < T; t++) {
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE + Q8K_QS + 64 * hh;
				const __m512i y0 = bcast128(y), y1 = bcast128(y + 16);
				const __m512i y2 = bcast128(y + 32), y3 = bcast128(y + 48);
				MOE_UNROLL for (int g = 0; g < RG; g++) {
					__m512i u = _mm512_dpbusd_epi32(zero_i(), c[g][0], y0);
					u = _mm512_dpbusd_epi32(u, c[g][1], y1);
					__m512i v = _mm512_dpbusd_epi32(zero_i(), c[g][2], y2);
					v = _mm512_dpbusd_epi32(v, c[g][3], y3);
					is[g][t] = _mm512_dpwssd_epi32(is[g][t], _mm512_packs_epi32(u, v), sl[g]);
				}
			}
		}
		/* The float sequence with output (row 4g + r, token t) in lane
		 * 4r + t of acc[g]: dy of token t in lane t of every block (0
		 * past T), d and dmin of each block's row in all four of its
		 * lanes. */
		const __m512 dyv = _mm512_broadcast_f32x4(_mm_setr_ps(
			K_DY(0), T > 1 ? K_DY(1) : 0.0f, T > 2 ? K_DY(2) : 0.0f, T > 3 ? K_DY(3) : 0.0f));
		MOE_UNROLL for (int g = 0; g < RG; g++) {
			const __m512i mm0 = _mm512_shuffle_epi8(scb[g], ctl_m0);
			const __m512i mm1 = _mm512_shuffle_epi8(scb[g], ctl_m1);
			__m512i ms[4];
			MOE_UNROLL for (int t = 0; t < 4; t++) {
				if (t >= T) {
					ms[t] = is[g][t] = zero_i();
					continue;
				}
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE + Q8K_BSUMS;
				ms[t] = _mm512_dpwssd_epi32(zero_i(), mm0, bcast128(y));
				ms[t] = _mm512_dpwssd_epi32(ms[t], mm1, bcast128(y + 16));
			}
			const __m512 fi = _mm512_cvtepi32_ps(k4x_sum4(is[g]));
			const __m512 fm = _mm512_cvtepi32_ps(k4x_sum4(ms));
			const __m512 d = _mm512_permute_ps(dm[g], _MM_SHUFFLE(0, 0, 0, 0));
			const __m512 dmin = _mm512_permute_ps(dm[g], _MM_SHUFFLE(1, 1, 1, 1));
			acc[g] = _mm512_fmadd_ps(fi, _mm512_mul_ps(d, dyv), acc[g]);
			acc[g] = _mm512_fnmadd_ps(fm, _mm512_mul_ps(dmin, dyv), acc[g]);
		}
	}
	MOE_UNROLL for (int g = 0; g < RG; g++) {
		float v[16];
		_mm512_storeu_ps(v, acc[g]);
		MOE_UNROLL for (int r = 0; r < 4; r++)
			MOE_UNROLL for (int t = 0; t < T; t++)
				s[t * lds + 4 * g + r] = v[4 * r + t];
	}
#undef K_DY
}

/* The few-token driver (nt >= 2; one token stays with k45_tile, which
 * streams weights from memory faster): 8 rows (then 4) x 3-4 tokens per
 * tile, 4 rows x 2 tokens, the tokens split evenly, the last rows through
 * k45_tile.  At 2 tokens the tile of 8 rows is faster on cached weights but
 * slower from memory, where an expert's product comes from (2048 x 1024
 * Q4_K, one thread, CPU time, scattered copies (bench-kernels -S), medians
 * of 5 processes: 8 rows 45.0-52.1 us, 4 rows 37.4 us; one token 34-35;
 * cached: 26.5 against 29.5 us).  At 3 and 4 tokens 8 rows stay faster
 * from memory too (41.9 / 48.4 us against 45.7 / 54.2).  Inlined
 * into each type's function so that `five` is a constant there (as an
 * out-of-line function with `five` a variable it ran the Q4_K tiles at
 * about half their speed). */
INLINE void k45_few_gemm(const int five, int64_t n, int nr, int nt, const void *w, size_t ldw,
			 const void *x, size_t ldx, float *s, size_t lds)
{
	const uint8_t *pw = w, *px = x;
	for (int t = 0; t < nt;) {
		const int left = nt - t, T = (left + (left + 3) / 4 - 1) / ((left + 3) / 4);
		const uint8_t *xt = px + t * ldx;
		float *st = s + t * lds;
		int r = 0;
#define X4(RG, TT)                                                                              \
	k45_x4_tile(five, RG, TT, n, pw + r * ldw, ldw, xt, ldx, st + r, lds)
#define ONE(TT) k45_tile(five, 1, TT, n, pw + r * ldw, ldw, xt, ldx, st + r, lds)
		switch (T) {
		case 2: /* 4 rows: streams faster than 8 (see above) */
			for (; r + 4 <= nr; r += 4) X4(1, 2);
			for (; r < nr; r++) ONE(2);
			break;
		case 3:
			for (; r + 8 <= nr; r += 8) X4(2, 3);
			for (; r + 4 <= nr; r += 4) X4(1, 3);
			for (; r < nr; r++) ONE(3);
			break;
		default:
			for (; r + 8 <= nr; r += 8) X4(2, 4);
			for (; r + 4 <= nr; r += 4) X4(1, 4);
			for (; r < nr; r++) ONE(4);
			break;
		}
#undef X4
#undef ONE
		t += T;
	}
}

static void q4_k_few_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	k45_few_gemm(0, n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void q5_k_few_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	k45_few_gemm(1, n, nr, nt, w, ldw, x, ldx, s, lds);
}

/* ------------------------------------------------ prefill GEMM, K-quants
 *
 * For many tokens the weights are unpacked once into an int8 working form
 * with the rows in the lanes — codes[k / 4][16 rows][4 bytes], plus the
 * integer group scales and minimums and the float d, dmin as vectors of 16
 * rows — and reused for every token: each vpdpbusd then multiplies four
 * codes of 16 rows with four activation codes of one token (broadcast), no
 * decoding or horizontal sums in the inner loop.  The integer group scales
 * apply with vpdpwssd to sums of 16 (Q4_K) or 8 (Q5_K) codes, which fit 16
 * bits (16 * 15 * 127, 8 * 31 * 127).  Super-blocks go in chunks of KSB so
 * the working form (about 40 KiB) stays in L1/L2; between chunks the float
 * accumulators wait in Y, which keeps the reduction order of the decode
 * tiles exactly (see "the K-quant reduction order"). */

#define KSB 8 /* super-blocks per unpacked chunk */
#define GT 8  /* tokens per register tile */

typedef struct {
	uint8_t q[KSB][64][64];   /* [sb][k/4][row][4] codes */
	int32_t sc[KSB][16][16];  /* [sb][group][row] scale (Q4_K/Q5_K: low 16 bits) */
	int32_t mm[KSB][8][16];   /* [sb][j][row] Q4_K/Q5_K: m_j | m_j << 16;
				   * Q6_K: -32 sc_2j | -32 sc_2j+1 << 16 */
	float d[KSB][16], dmin[KSB][16];
} kq_pack;

/* out[j] lane r = in[r] lane j (a 16 x 16 transpose of 32-bit lanes). */
INLINE void transpose16(__m512i v[16])
{
	__m512i t[16], u[16];
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
	}
	/* u[4i + c]: 128-bit block L holds column 4L + c of rows 4i..4i+3. */
	for (int i = 0; i < 4; i++) {
		u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
		u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
		u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
		u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
	}
	for (int c = 0; c < 4; c++) {
		__m512i w0 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
		__m512i w1 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
		__m512i w2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
		__m512i w3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
		v[c] = _mm512_shuffle_i32x4(w0, w2, _MM_SHUFFLE(2, 0, 2, 0));
		v[4 + c] = _mm512_shuffle_i32x4(w0, w2, _MM_SHUFFLE(3, 1, 3, 1));
		v[8 + c] = _mm512_shuffle_i32x4(w1, w3, _MM_SHUFFLE(2, 0, 2, 0));
		v[12 + c] = _mm512_shuffle_i32x4(w1, w3, _MM_SHUFFLE(3, 1, 3, 1));
	}
}

/* Unpack super-blocks [i0, i0 + nsb) of `rows` (<= 16) rows; missing rows
 * are zero. */
static void k45_unpack(const int five, kq_pack *pk, const uint8_t *w, size_t ldw, int rows,
		       int64_t i0, int nsb)
{
	const size_t bsz = five ? sizeof(moe_block_q5_k) : sizeof(moe_block_q4_k);
	const size_t qs_off = five ? offsetof(moe_block_q5_k, qs) : offsetof(moe_block_q4_k, qs);
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	const __m512i bit0 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(1), _mm512_set1_epi8(2));

	for (int sb = 0; sb < nsb; sb++) {
		__m512i v[16];
		/* Q4_K: transpose the packed bytes (dword j of qs[64h ..] holds
		 * elements 64p + 4(j % 8) .. +3 in its low nibbles and 32 more in
		 * its high ones, p = 2h + j / 8), then split the nibbles: half the
		 * shuffles of transposing the codes. */
		for (int h = 0; !five && h < 2; h++) {
			for (int r = 0; r < 16; r++)
				v[r] = r < rows ? _mm512_loadu_si512(w + r * ldw + (i0 + sb) * bsz +
								     qs_off + 64 * h)
						: zero_i();
			transpose16(v);
			for (int j = 0; j < 16; j++) {
				const int k4 = 16 * (2 * h + j / 8) + j % 8;
				_mm512_store_si512(pk->q[sb][k4], _mm512_and_si512(v[j], m4));
				_mm512_store_si512(pk->q[sb][k4 + 8],
						   _mm512_and_si512(_mm512_srli_epi16(v[j], 4), m4));
			}
		}
		for (int p = 0; five && p < 4; p++) {
			for (int r = 0; r < 16; r++) {
				if (r >= rows) {
					v[r] = zero_i();
					continue;
				}
				const uint8_t *b = w + r * ldw + (i0 + sb) * bsz;
				__m512i q = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)(b + qs_off + 32 * p)));
				q = _mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4);
				q = _mm512_and_si512(q, m4);
				if (five) {
					__m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
						(const void *)(b + offsetof(moe_block_q5_k, qh))));
					__mmask64 k = _mm512_test_epi8_mask(
						qh, _mm512_slli_epi16(bit0, 2 * p));
					q = _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(16));
				}
				v[r] = q;
			}
			transpose16(v);
			for (int j = 0; j < 16; j++)
				_mm512_store_si512(pk->q[sb][16 * p + j], v[j]);
		}
		float d[16], dmin[16];
		for (int r = 0; r < 16; r++) {
			const uint8_t *b = w + r * ldw + (i0 + sb) * bsz;
			if (r < rows)
				prefetch_ahead(b, bsz);
			v[r] = r < rows ? k4_scales(b + 4) : zero_i();
			d[r] = r < rows ? h2f(b) : 0.0f;
			dmin[r] = r < rows ? h2f(b + 2) : 0.0f;
		}
		transpose16(v);
		for (int g = 0; g < 8; g++) {
			_mm512_store_si512(pk->sc[sb][g], v[g]);
			_mm512_store_si512(pk->mm[sb][g],
					   _mm512_or_si512(v[8 + g], _mm512_slli_epi32(v[8 + g], 16)));
		}
		memcpy(pk->d[sb], d, sizeof(d));
		memcpy(pk->dmin[sb], dmin, sizeof(dmin));
	}
}

INLINE __m512i bcast32(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/* T tokens x 16 rows over nsb unpacked super-blocks; acc[t] lane r is the
 * running sum of (row r, token t). */
INLINE void k45_rows_tile(const int five, const int T, const kq_pack *pk, int nsb, int64_t i0,
			  const uint8_t *x, size_t ldx, __m512 acc[GT])
{
	/* Q4_K: 4 steps of 4 codes per scaled sum; Q5_K: 2. */
	const int U = five ? 2 : 4;
	for (int sb = 0; sb < nsb; sb++) {
		const uint8_t *y = x + (i0 + sb) * Q8K_SIZE;
		__m512i is[GT], ms[GT];
		MOE_UNROLL for (int t = 0; t < T; t++)
			is[t] = ms[t] = zero_i();
		for (int g = 0; g < 8; g++) {
			const __m512i sc = _mm512_load_si512(pk->sc[sb][g]);
			for (int h = 0; h < 8; h += U) {
				__m512i u[GT];
				MOE_UNROLL for (int t = 0; t < T; t++)
					u[t] = zero_i();
				MOE_UNROLL for (int j = 0; j < U; j++) {
					const int k4 = 8 * g + h + j;
					const __m512i wv = _mm512_load_si512(pk->q[sb][k4]);
					MOE_UNROLL for (int t = 0; t < T; t++)
						u[t] = _mm512_dpbusd_epi32(
							u[t], wv, bcast32(y + t * ldx + Q8K_QS + 4 * k4));
				}
				MOE_UNROLL for (int t = 0; t < T; t++)
					is[t] = _mm512_dpwssd_epi32(is[t], u[t], sc);
			}
			const __m512i mm = _mm512_load_si512(pk->mm[sb][g]);
			MOE_UNROLL for (int t = 0; t < T; t++)
				ms[t] = _mm512_dpwssd_epi32(ms[t], mm,
							    bcast32(y + t * ldx + Q8K_BSUMS + 4 * g));
		}
		const __m512 d = _mm512_load_ps(pk->d[sb]), dmin = _mm512_load_ps(pk->dmin[sb]);
		MOE_UNROLL for (int t = 0; t < T; t++) {
			__m512 dy = _mm512_set1_ps(ldf32(y + t * ldx + Q8K_D));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(d, dy), acc[t]);
			acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms[t]), _mm512_mul_ps(dmin, dy),
						  acc[t]);
		}
	}
}


/* Q2_K and Q3_K: 2-bit fields; element 128h + 32j + l (l < 32) is field j
 * of qs[32h + l], so step c = 0..3 (64 elements, h = c / 2) takes fields
 * 2(c % 2) and 2(c % 2) + 1 of qs[32h .. 32h+31], one per half of the lanes.
 * Groups of 16 as Q6_K.  Q2_K: x = d * sc * q - dmin * m (the minimums
 * through bsums); Q3_K: the third bit (bit 4h + j of hmask[l]) set adds 4,
 * the codes run 0..7 and the -4 offset goes through bsums: x = d *
 * (sc - 32) * (q - 4). */
INLINE void k23_tile(const int three, const int R, const int T, int64_t n, const uint8_t *w,
		     size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const size_t bsz = three ? sizeof(moe_block_q3_k) : sizeof(moe_block_q2_k);
	const size_t qs_off = three ? offsetof(moe_block_q3_k, qs) : offsetof(moe_block_q2_k, qs);
	/* d, and for Q2_K dmin after it: read as one 32-bit word (Q3_K's
	 * d is the block's last field: read from 2 bytes before it and
	 * shifted). */
	const size_t dm_off = three ? offsetof(moe_block_q3_k, d) - 2 : offsetof(moe_block_q2_k, d);
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF), m2 = _mm512_set1_epi8(3);
	const __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	/* Per 16-bit lane shift counts: fields 0/1 (lower/upper 32 bytes). */
	const __m512i sh01 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0),
						     _mm512_set1_epi16(2));
	const __m512i bit01 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(1),
						      _mm512_set1_epi8(2));
	__m128 acc4[6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int g = 0; g < 6; g++)
		acc4[g] = _mm_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i sc16[4], mn16[4], hm[4], ai[4][6];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const uint8_t *b = w + r * ldw + i * bsz;
			prefetch_ahead(b, bsz);
			if (three) {
				/* 6-bit scales: low nibbles from bytes 0-7 (groups
				 * 0-7) and their high nibbles (8-15); top bits from
				 * byte 8 + g % 4 at bit 2 (g / 4). */
				const moe_block_q3_k *q3 = (const void *)b;
				uint64_t a;
				uint32_t c;
				memcpy(&a, q3->scales, 8);
				memcpy(&c, q3->scales + 8, 4);
				__m512i L = _mm512_cvtepu8_epi32(_mm_set1_epi64x((long long)a));
				__m512i H = _mm512_cvtepu8_epi32(_mm_set1_epi32((int)c));
				L = _mm512_and_si512(_mm512_srlv_epi32(L, _mm512_setr_epi32(
					0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
						     _mm512_set1_epi32(15));
				H = _mm512_and_si512(_mm512_srlv_epi32(H, _mm512_setr_epi32(
					0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
						     _mm512_set1_epi32(3));
				__m512i sc = _mm512_or_si512(L, _mm512_slli_epi32(H, 4));
				sc = _mm512_sub_epi32(sc, _mm512_set1_epi32(32));
				sc16[r] = _mm512_and_si512(sc, lo16);
				/* -4 * scale against the bsums (sign-extended). */
				__m512i m4s = _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sc, 2));
				mn16[r] = _mm512_and_si512(m4s, lo16);
				hm[r] = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)q3->hmask));
			} else {
				const moe_block_q2_k *q2 = (const void *)b;
				__m512i v = _mm512_cvtepu8_epi32(
					_mm_loadu_si128((const void *)q2->scales));
				sc16[r] = _mm512_and_si512(v, _mm512_set1_epi32(15));
				mn16[r] = _mm512_srli_epi32(v, 4);
			}
			MOE_UNROLL for (int t = 0; t < T; t++) {
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE;
				__m512i bs = _mm512_cvtepi16_epi32(
					_mm256_loadu_si256((const void *)(y + Q8K_BSUMS)));
				/* Q3_K: the offset sum in the start value; Q2_K:
				 * kept apart, it has its own scale dmin. */
				ai[r][t] = three ? _mm512_dpwssd_epi32(zero_i(), mn16[r], bs)
						 : zero_i();
			}
		}
		MOE_UNROLL for (int c = 0; c < 4; c++) {
			const int h = c / 2, j0 = 2 * (c % 2);
			const __m512i idx = _mm512_add_epi32(idx0, _mm512_set1_epi32(4 * c));
			__m512i xq[6];
			MOE_UNROLL for (int t = 0; t < T; t++)
				xq[t] = q8k_chunk(x + t * ldx, i, c);
			MOE_UNROLL for (int r = 0; r < R; r++) {
				const uint8_t *b = w + r * ldw + i * bsz;
				__m512i q = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)(b + qs_off + 32 * h)));
				__m512i cnt = _mm512_add_epi16(sh01, _mm512_set1_epi16(2 * j0));
				q = _mm512_srlv_epi16(q, cnt);
				q = _mm512_and_si512(q, m2);
				if (three) {
					__mmask64 k = _mm512_test_epi8_mask(
						hm[r], _mm512_slli_epi16(bit01, 4 * h + j0));
					q = _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(4));
				}
				__m512i sc = _mm512_permutexvar_epi32(idx, sc16[r]);
				MOE_UNROLL for (int t = 0; t < T; t++)
					ai[r][t] = dot_scaled(ai[r][t], q, xq[t], sc);
			}
		}
		/* The K-quant order: lanes 0-7 fold to isum, 8-15 (Q2_K) to
		 * msum = sum_g m_g * bsum_g. */
		__m512i c[24];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			MOE_UNROLL for (int t = 0; t < T; t++) {
				__m512i v = _mm512_maskz_add_epi32(
					0x00FF, ai[r][t], _mm512_shuffle_i64x2(ai[r][t], ai[r][t], 0x4E));
				if (!three) {
					const uint8_t *y = x + t * ldx + i * Q8K_SIZE;
					__m512i bs = _mm512_cvtepi16_epi32(
						_mm256_loadu_si256((const void *)(y + Q8K_BSUMS)));
					__m512i mi = _mm512_dpwssd_epi32(zero_i(), mn16[r], bs);
					v = _mm512_mask_add_epi32(v, 0xFF00, mi,
								  _mm512_shuffle_i64x2(mi, mi, 0x4E));
				}
				c[r * T + t] = v;
			}
		}
		MOE_UNROLL for (int o = R * T; o < (R * T + 3) / 4 * 4; o++)
			c[o] = zero_i();
		MOE_UNROLL for (int g = 0; g < (R * T + 3) / 4; g++) {
			/* d (and Q2_K's dmin) of each output's row, dy of its
			 * token (o = r * T + t; padding outputs get zeros). */
#define K_DM(o) ((o) < R * T ? (int)ldf32_bits(w + ((o) / T) * ldw + i * bsz + dm_off) : 0)
#define K_DY(o) ((o) < R * T ? ldf32(x + ((o) % T) * ldx + i * Q8K_SIZE + Q8K_D) : 0.0f)
			__m256 f = _mm256_cvtph_ps(
				_mm_setr_epi32(K_DM(4 * g), K_DM(4 * g + 1), K_DM(4 * g + 2), K_DM(4 * g + 3)));
			__m128 lo = _mm256_castps256_ps128(f), hi = _mm256_extractf128_ps(f, 1);
			__m128 dy = _mm_setr_ps(K_DY(4 * g), K_DY(4 * g + 1), K_DY(4 * g + 2),
						K_DY(4 * g + 3));
#undef K_DM
#undef K_DY
			__m128 ev = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
			__m128 od = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
			__m128i is, ms;
			reduce4(c[4 * g], c[4 * g + 1], c[4 * g + 2], c[4 * g + 3], &is, &ms);
			if (three)
				acc4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(is), _mm_mul_ps(od, dy), acc4[g]);
			else
				acc4[g] = ksb_finish4(acc4[g], is, ms, ev, od, dy);
		}
	}
	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			s[t * lds + r] = acc4[(r * T + t) / 4][(r * T + t) % 4];
}

INLINE void q2_k_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	k23_tile(0, R, T, n, w, ldw, x, ldx, s, lds);
}

INLINE void q3_k_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	k23_tile(1, R, T, n, w, ldw, x, ldx, s, lds);
}

MOE_GEMM_FEW(q2_k, 2, 4, 4, 2, 2)
MOE_GEMM_FEW(q3_k, 2, 4, 4, 2, 2)

/* IQ4_XS: groups of 32 with 6-bit signed scales (ls - 32) over the IQ4_NL
 * code book.  Step p covers groups 2p and 2p+1, whose 16 code bytes each
 * sit at qs[32p] and qs[32p + 16]: the same lane order as the 32-element
 * types, so the activations are permuted the same way.  Code-book values
 * are signed (the Q8_0 route: x biased by 128, minus 128 * sum(w)); four
 * products of up to 127 * 127 overflow 16 bits, so the group scales apply
 * with a 32-bit multiply. */
INLINE void iq4_xs_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
			const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
	const __m512i tb = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)moe_kvalues_iq4nl));
	const __m256i sh_l = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
	const __m256i sh_h = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
	__m128 acc4[6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int g = 0; g < 6; g++)
		acc4[g] = _mm_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i ls[4], ai[4][6];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const moe_block_iq4_xs *b = (const void *)(w + r * ldw + i * sizeof(*b));
			uint32_t lo;
			uint16_t hi;
			prefetch_ahead((const uint8_t *)b, sizeof(*b));
			memcpy(&lo, b->scales_l, 4);
			memcpy(&hi, (const uint8_t *)b + offsetof(moe_block_iq4_xs, scales_h), 2);
			__m256i nib = _mm256_srlv_epi32(_mm256_set1_epi32((int)lo), sh_l);
			__m256i top = _mm256_srlv_epi32(_mm256_set1_epi32(hi), sh_h);
			nib = _mm256_and_si256(nib, _mm256_set1_epi32(15));
			top = _mm256_and_si256(top, _mm256_set1_epi32(3));
			__m256i v = _mm256_or_si256(nib, _mm256_slli_epi32(top, 4));
			v = _mm256_sub_epi32(v, _mm256_set1_epi32(32));
			ls[r] = _mm512_castsi256_si512(v);
			MOE_UNROLL for (int t = 0; t < T; t++)
				ai[r][t] = zero_i();
		}
		MOE_UNROLL for (int p = 0; p < 4; p++) {
			const __m512i idx = _mm512_add_epi32(idx0, _mm512_set1_epi32(2 * p));
			__m512i xq[6];
			MOE_UNROLL for (int t = 0; t < T; t++) {
				__m512i v = q8k_chunk(x + t * ldx, i, p);
				v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
				xq[t] = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
			}
			MOE_UNROLL for (int r = 0; r < R; r++) {
				const moe_block_iq4_xs *b =
					(const void *)(w + r * ldw + i * sizeof(*b));
				__m512i q = _mm512_shuffle_epi8(
					tb, nib_codes(b->qs + 32 * p, b->qs + 32 * p + 16, 1));
				__m512i sum = _mm512_dpbusd_epi32(zero_i(), _mm512_set1_epi8(1), q);
				__m512i wc = _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sum, 7));
				__m512i sc = _mm512_permutexvar_epi32(idx, ls[r]);
				MOE_UNROLL for (int t = 0; t < T; t++) {
					__m512i dp = _mm512_dpbusd_epi32(wc, xq[t], q);
					ai[r][t] = _mm512_add_epi32(ai[r][t],
								    _mm512_mullo_epi32(dp, sc));
				}
			}
		}
		/* The K-quant order: isum = sum_g ls_g dot_g exactly, then
		 * acc = fma(isum, d * dy, acc). */
		__m512i c[24];
		MOE_UNROLL for (int r = 0; r < R; r++)
			MOE_UNROLL for (int t = 0; t < T; t++)
				c[r * T + t] = _mm512_maskz_add_epi32(
					0x00FF, ai[r][t], _mm512_shuffle_i64x2(ai[r][t], ai[r][t], 0x4E));
		MOE_UNROLL for (int o = R * T; o < (R * T + 3) / 4 * 4; o++)
			c[o] = zero_i();
		MOE_UNROLL for (int g = 0; g < (R * T + 3) / 4; g++) {
#define K_D(o) ((o) < R * T ? (short)ld16(w + ((o) / T) * ldw + i * sizeof(moe_block_iq4_xs)) \
			     : (short)0)
#define K_DY(o) ((o) < R * T ? ldf32(x + ((o) % T) * ldx + i * Q8K_SIZE + Q8K_D) : 0.0f)
			__m128 d = _mm_cvtph_ps(_mm_setr_epi16(K_D(4 * g), K_D(4 * g + 1), K_D(4 * g + 2),
							       K_D(4 * g + 3), 0, 0, 0, 0));
			__m128 dy = _mm_setr_ps(K_DY(4 * g), K_DY(4 * g + 1), K_DY(4 * g + 2),
						K_DY(4 * g + 3));
#undef K_D
#undef K_DY
			__m128i is, ms;
			reduce4(c[4 * g], c[4 * g + 1], c[4 * g + 2], c[4 * g + 3], &is, &ms);
			acc4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(is), _mm_mul_ps(d, dy), acc4[g]);
		}
	}
	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			s[t * lds + r] = acc4[(r * T + t) / 4][(r * T + t) % 4];
}

MOE_GEMM_FEW(iq4_xs, 2, 4, 4, 2, 2)

/* Q6_K: 64 elements per step c = 0..3 (half h = c / 2): the low (c even) or
 * high (c odd) nibbles of ql[64h .. 64h+63] with two bits of qh[32h ..
 * 32h+31] on top: bits 0-1 / 2-3 for c even (lower / upper 32 lanes), 4-5 /
 * 6-7 for c odd.  Groups of 16 with signed 8-bit scales; x = d * sc *
 * (q - 32), the -32 entering as -32 * sc_g * bsum_g in the start value. */
INLINE void q6_k_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F);
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
	/* Shift counts per 16-bit lane: lower 32 bytes / upper 32 bytes. */
	const __m512i shl_even = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(4),
							 _mm512_set1_epi16(2));
	const __m512i shr_odd = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0),
							_mm512_set1_epi16(2));
	/* Words of the packed sums of steps 2P, 2P + 1 (128-bit lane l: words
	 * 0-3 group 8P + l, 4-7 group 8P + 4 + l) <- word 2g of sc16 (for P =
	 * 0; add 16 for P = 1). */
	const __m512i idx_pk = _mm512_set_epi16(
		14, 14, 14, 14, 6, 6, 6, 6, 12, 12, 12, 12, 4, 4, 4, 4,
		10, 10, 10, 10, 2, 2, 2, 2, 8, 8, 8, 8, 0, 0, 0, 0);
	__m128 acc4[6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int g = 0; g < 6; g++)
		acc4[g] = _mm_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i sc16[4], ai[4][8];
		/* Scales as 16-bit values in the low half of each 32-bit lane
		 * (high half zero, as vpdpwssd multiplies both halves). */
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const moe_block_q6_k *b = (const void *)(w + r * ldw + i * sizeof(*b));
			prefetch_ahead((const uint8_t *)b, sizeof(*b));
			__m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)b->scales));
			sc16[r] = _mm512_and_si512(sc, lo16);
			__m512i m32 = _mm512_and_si512(_mm512_sub_epi32(zero_i(),
									_mm512_slli_epi32(sc, 5)),
						       lo16);
			MOE_UNROLL for (int t = 0; t < T; t++) {
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE;
				__m512i bs = _mm512_cvtepi16_epi32(
					_mm256_loadu_si256((const void *)(y + Q8K_BSUMS)));
				ai[r][t] = _mm512_dpwssd_epi32(zero_i(), m32, bs);
			}
		}
		/* Steps c = 2P, 2P + 1 together: their 4-code sums fit 16 bits
		 * (4 * 63 * 128), so vpackssdw packs them exactly and one vpdpwssd
		 * applies both steps' scales (both halves of a dword share a
		 * group): 3 multiply ops per 128 codes instead of 4. */
		MOE_UNROLL for (int P = 0; P < 2; P++) {
			const __m512i idx = _mm512_add_epi16(idx_pk, _mm512_set1_epi16((short)(16 * P)));
			MOE_UNROLL for (int r = 0; r < R; r++) {
				const moe_block_q6_k *b =
					(const void *)(w + r * ldw + i * sizeof(*b));
				const __m512i L = _mm512_loadu_si512(b->ql + 64 * P);
				const __m512i H = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)(b->qh + 32 * P)));
				/* c = 2P (low nibbles), c = 2P + 1 (high nibbles) */
				const __m512i qa = _mm512_and_si512(
					_mm512_ternarylogic_epi32(L, _mm512_sllv_epi16(H, shl_even), m4, 0xE4), m6);
				const __m512i qb = _mm512_and_si512(
					_mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4),
								  _mm512_srlv_epi16(H, shr_odd), m4, 0xE4),
					m6);
				const __m512i sc = _mm512_permutexvar_epi16(idx, sc16[r]);
				MOE_UNROLL for (int t = 0; t < T; t++) {
					const __m512i a = _mm512_dpbusd_epi32(zero_i(), qa,
									      q8k_chunk(x + t * ldx, i, 2 * P));
					const __m512i bb = _mm512_dpbusd_epi32(
						zero_i(), qb, q8k_chunk(x + t * ldx, i, 2 * P + 1));
					ai[r][t] = _mm512_dpwssd_epi32(ai[r][t], _mm512_packs_epi32(a, bb), sc);
				}
			}
		}
		/* isum = sum_g sc_g * (dot_g - 32 bsum_g), exact; then the
		 * float sequence acc = fma(float(isum), d * dy, acc). */
		__m512i c[24];
		MOE_UNROLL for (int r = 0; r < R; r++)
			MOE_UNROLL for (int t = 0; t < T; t++)
				c[r * T + t] = ai[r][t];
		MOE_UNROLL for (int o = R * T; o < (R * T + 3) / 4 * 4; o++)
			c[o] = zero_i();
		MOE_UNROLL for (int g = 0; g < (R * T + 3) / 4; g++) {
#define K_D(o) ((o) < R * T ? (short)ld16(w + ((o) / T) * ldw + i * sizeof(moe_block_q6_k) + \
					      offsetof(moe_block_q6_k, d))                      \
			     : (short)0)
#define K_DY(o) ((o) < R * T ? ldf32(x + ((o) % T) * ldx + i * Q8K_SIZE + Q8K_D) : 0.0f)
			__m128 d = _mm_cvtph_ps(_mm_setr_epi16(K_D(4 * g), K_D(4 * g + 1), K_D(4 * g + 2),
							       K_D(4 * g + 3), 0, 0, 0, 0));
			__m128 dy = T == 1 && R * T >= 4 * g + 4
					    ? _mm_set1_ps(K_DY(0))
					    : _mm_setr_ps(K_DY(4 * g), K_DY(4 * g + 1), K_DY(4 * g + 2),
							  K_DY(4 * g + 3));
#undef K_D
#undef K_DY
			__m128i is, ms;
			reduce4(c[4 * g], c[4 * g + 1], c[4 * g + 2], c[4 * g + 3], &is, &ms);
			acc4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_add_epi32(is, ms)), _mm_mul_ps(d, dy),
					       acc4[g]);
		}
	}
	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			s[t * lds + r] = acc4[(r * T + t) / 4][(r * T + t) % 4];
}

/* One row at a time for every token count up to 4: from memory (an
 * expert's ffn_down in a decode step, the output head of one sequence)
 * these stream faster than tiles of 4 rows x 1-3 tokens and 2 rows x 4
 * (one thread, CPU time, scattered copies, medians of 5 processes:
 * 1024 x 2048, 2 / 3 / 4 tokens about 69 / 79 / 87 us -> 61 / 69 / 76 us;
 * 32000 x 1024, one token, 1013 -> 835 us), though they are a little
 * slower on cached weights (1024 x 2048, 4 tokens 64.6 -> 67.9 us). */
MOE_GEMM_FEW(q6_k, 1, 4, 1, 1, 1)

/* Q6_K through the rows-in-lanes GEMM: codes 0-63 in element order (the
 * same 64-element steps as the tile above), 16 groups of 16 with signed
 * scales.  A group's sum (up to 16 * 63 * 127) does not fit 16 bits, so its
 * scale applies with a 32-bit multiply; the -32 offsets go in through the
 * activation sums, two groups per vpdpwssd. */
static void q6_k_unpack(kq_pack *pk, const uint8_t *w, size_t ldw, int rows, int64_t i0, int nsb)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F);
	const __m512i shl_even = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(4),
							 _mm512_set1_epi16(2));
	const __m512i shr_odd = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0),
							_mm512_set1_epi16(2));
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF);

	for (int sb = 0; sb < nsb; sb++) {
		__m512i v[16];
		for (int c = 0; c < 4; c++) {
			const int h = c / 2, odd = c % 2;
			for (int r = 0; r < 16; r++) {
				if (r >= rows) {
					v[r] = zero_i();
					continue;
				}
				const moe_block_q6_k *b =
					(const void *)(w + r * ldw + (i0 + sb) * sizeof(*b));
				__m512i L = _mm512_loadu_si512(b->ql + 64 * h);
				__m512i H = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)(b->qh + 32 * h)));
				__m512i q;
				if (!odd)
					q = _mm512_ternarylogic_epi32(
						L, _mm512_sllv_epi16(H, shl_even), m4, 0xE4);
				else
					q = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4),
								      _mm512_srlv_epi16(H, shr_odd),
								      m4, 0xE4);
				v[r] = _mm512_and_si512(q, m6);
			}
			transpose16(v);
			for (int j = 0; j < 16; j++)
				_mm512_store_si512(pk->q[sb][16 * c + j], v[j]);
		}
		float d[16];
		for (int r = 0; r < 16; r++) {
			const moe_block_q6_k *b = (const void *)(w + r * ldw + (i0 + sb) * sizeof(*b));
			if (r < rows)
				prefetch_ahead((const uint8_t *)b, sizeof(*b));
			v[r] = r < rows ? _mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)b->scales))
					: zero_i();
			d[r] = r < rows ? _cvtsh_ss(ld16((const uint8_t *)&b->d)) : 0.0f;
		}
		transpose16(v);
		for (int g = 0; g < 16; g++)
			_mm512_store_si512(pk->sc[sb][g], v[g]);
		for (int j = 0; j < 8; j++) {
			__m512i a = _mm512_and_si512(_mm512_slli_epi32(_mm512_sub_epi32(zero_i(), v[2 * j]), 5), lo16);
			__m512i b = _mm512_slli_epi32(_mm512_sub_epi32(zero_i(), v[2 * j + 1]), 5 + 16);
			_mm512_store_si512(pk->mm[sb][j], _mm512_or_si512(a, b));
		}
		memcpy(pk->d[sb], d, sizeof(d));
	}
}

INLINE void q6_k_rows_tile(const int T, const kq_pack *pk, int nsb, int64_t i0, const uint8_t *x,
			   size_t ldx, __m512 acc[GT])
{
	for (int sb = 0; sb < nsb; sb++) {
		const uint8_t *y = x + (i0 + sb) * Q8K_SIZE;
		__m512i is[GT];
		MOE_UNROLL for (int t = 0; t < T; t++)
			is[t] = zero_i();
		for (int j = 0; j < 8; j++) {
			const __m512i mm = _mm512_load_si512(pk->mm[sb][j]);
			MOE_UNROLL for (int t = 0; t < T; t++)
				is[t] = _mm512_dpwssd_epi32(is[t], mm,
							    bcast32(y + t * ldx + Q8K_BSUMS + 4 * j));
		}
		for (int g = 0; g < 16; g++) {
			__m512i u[GT];
			MOE_UNROLL for (int t = 0; t < T; t++)
				u[t] = zero_i();
			MOE_UNROLL for (int j = 0; j < 4; j++) {
				const int k4 = 4 * g + j;
				const __m512i wv = _mm512_load_si512(pk->q[sb][k4]);
				MOE_UNROLL for (int t = 0; t < T; t++)
					u[t] = _mm512_dpbusd_epi32(
						u[t], wv, bcast32(y + t * ldx + Q8K_QS + 4 * k4));
			}
			const __m512i sc = _mm512_load_si512(pk->sc[sb][g]);
			MOE_UNROLL for (int t = 0; t < T; t++)
				is[t] = _mm512_add_epi32(is[t], _mm512_mullo_epi32(u[t], sc));
		}
		const __m512 d = _mm512_load_ps(pk->d[sb]);
		MOE_UNROLL for (int t = 0; t < T; t++) {
			__m512 dy = _mm512_set1_ps(ldf32(y + t * ldx + Q8K_D));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(d, dy), acc[t]);
		}
	}
}

/* Q2_K and Q3_K through the rows-in-lanes GEMM: codes 0-3 (Q3_K 0-7,
 * the third bit added) in element order, built as k23_tile builds its
 * 64-element steps; 16 groups of 16 with 16-bit scales (Q3_K: signed,
 * sc - 32) that apply with vpdpwssd to group sums of at most 16 * 7 * 127;
 * Q2_K's minimums and Q3_K's -4 offsets go through the activation sums,
 * two groups per vpdpwssd. */
static void k23_unpack(const int three, kq_pack *pk, const uint8_t *w, size_t ldw, int rows,
		       int64_t i0, int nsb)
{
	const size_t bsz = three ? sizeof(moe_block_q3_k) : sizeof(moe_block_q2_k);
	const size_t qs_off = three ? offsetof(moe_block_q3_k, qs) : offsetof(moe_block_q2_k, qs);
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF), m2 = _mm512_set1_epi8(3);
	const __m512i sh01 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
	const __m512i bit01 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(1), _mm512_set1_epi8(2));

	for (int sb = 0; sb < nsb; sb++) {
		__m512i v[16], m[16];
		for (int c = 0; c < 4; c++) {
			const int h = c / 2, j0 = 2 * (c % 2);
			for (int r = 0; r < 16; r++) {
				if (r >= rows) {
					v[r] = zero_i();
					continue;
				}
				const uint8_t *b = w + r * ldw + (i0 + sb) * bsz;
				__m512i q = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const void *)(b + qs_off + 32 * h)));
				q = _mm512_srlv_epi16(q, _mm512_add_epi16(sh01, _mm512_set1_epi16(2 * j0)));
				q = _mm512_and_si512(q, m2);
				if (three) {
					__m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(
						(const void *)(b + offsetof(moe_block_q3_k, hmask))));
					__mmask64 k = _mm512_test_epi8_mask(
						hm, _mm512_slli_epi16(bit01, 4 * h + j0));
					q = _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(4));
				}
				v[r] = q;
			}
			transpose16(v);
			for (int j = 0; j < 16; j++)
				_mm512_store_si512(pk->q[sb][16 * c + j], v[j]);
		}
		float d[16], dmin[16];
		for (int r = 0; r < 16; r++) {
			const uint8_t *b = w + r * ldw + (i0 + sb) * bsz;
			if (r < rows)
				prefetch_ahead(b, bsz);
			if (r >= rows) {
				v[r] = m[r] = zero_i();
				d[r] = dmin[r] = 0.0f;
				continue;
			}
			if (three) {
				const moe_block_q3_k *q3 = (const void *)b;
				uint64_t a;
				uint32_t cc;
				memcpy(&a, q3->scales, 8);
				memcpy(&cc, q3->scales + 8, 4);
				__m512i L = _mm512_cvtepu8_epi32(_mm_set1_epi64x((long long)a));
				__m512i H = _mm512_cvtepu8_epi32(_mm_set1_epi32((int)cc));
				L = _mm512_and_si512(_mm512_srlv_epi32(L, _mm512_setr_epi32(
					0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
						     _mm512_set1_epi32(15));
				H = _mm512_and_si512(_mm512_srlv_epi32(H, _mm512_setr_epi32(
					0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
						     _mm512_set1_epi32(3));
				__m512i sc = _mm512_sub_epi32(_mm512_or_si512(L, _mm512_slli_epi32(H, 4)),
							      _mm512_set1_epi32(32));
				v[r] = _mm512_and_si512(sc, lo16);
				m[r] = _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sc, 2));
				d[r] = h2f(b + offsetof(moe_block_q3_k, d));
				dmin[r] = 0.0f;
			} else {
				const moe_block_q2_k *q2 = (const void *)b;
				__m512i sv = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)q2->scales));
				v[r] = _mm512_and_si512(sv, _mm512_set1_epi32(15));
				m[r] = _mm512_srli_epi32(sv, 4);
				d[r] = h2f(b + offsetof(moe_block_q2_k, d));
				dmin[r] = h2f(b + offsetof(moe_block_q2_k, dmin));
			}
		}
		transpose16(v);
		transpose16(m);
		for (int g = 0; g < 16; g++)
			_mm512_store_si512(pk->sc[sb][g], v[g]);
		for (int j = 0; j < 8; j++)
			_mm512_store_si512(pk->mm[sb][j],
					   _mm512_or_si512(_mm512_and_si512(m[2 * j], lo16),
							   _mm512_slli_epi32(m[2 * j + 1], 16)));
		memcpy(pk->d[sb], d, sizeof(d));
		memcpy(pk->dmin[sb], dmin, sizeof(dmin));
	}
}

/* T tokens x 16 rows over nsb unpacked Q2_K/Q3_K super-blocks (the order
 * of k23_tile: isum, Q2_K's msum, then the float steps). */
INLINE void k23_rows_tile(const int three, const int T, const kq_pack *pk, int nsb, int64_t i0,
			  const uint8_t *x, size_t ldx, __m512 acc[GT])
{
	for (int sb = 0; sb < nsb; sb++) {
		const uint8_t *y = x + (i0 + sb) * Q8K_SIZE;
		__m512i is[GT], ms[GT];
		MOE_UNROLL for (int t = 0; t < T; t++)
			is[t] = ms[t] = zero_i();
		for (int j = 0; j < 8; j++) {
			const __m512i mm = _mm512_load_si512(pk->mm[sb][j]);
			MOE_UNROLL for (int t = 0; t < T; t++) {
				__m512i b = bcast32(y + t * ldx + Q8K_BSUMS + 4 * j);
				if (three)
					is[t] = _mm512_dpwssd_epi32(is[t], mm, b);
				else
					ms[t] = _mm512_dpwssd_epi32(ms[t], mm, b);
			}
		}
		for (int g = 0; g < 16; g++) {
			__m512i u[GT];
			MOE_UNROLL for (int t = 0; t < T; t++)
				u[t] = zero_i();
			MOE_UNROLL for (int j = 0; j < 4; j++) {
				const int k4 = 4 * g + j;
				const __m512i wv = _mm512_load_si512(pk->q[sb][k4]);
				MOE_UNROLL for (int t = 0; t < T; t++)
					u[t] = _mm512_dpbusd_epi32(
						u[t], wv, bcast32(y + t * ldx + Q8K_QS + 4 * k4));
			}
			const __m512i sc = _mm512_load_si512(pk->sc[sb][g]);
			MOE_UNROLL for (int t = 0; t < T; t++)
				is[t] = _mm512_dpwssd_epi32(is[t], u[t], sc);
		}
		const __m512 d = _mm512_load_ps(pk->d[sb]), dmin = _mm512_load_ps(pk->dmin[sb]);
		MOE_UNROLL for (int t = 0; t < T; t++) {
			__m512 dy = _mm512_set1_ps(ldf32(y + t * ldx + Q8K_D));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(d, dy), acc[t]);
			if (!three)
				acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms[t]),
							  _mm512_mul_ps(dmin, dy), acc[t]);
		}
	}
}

/* IQ4_XS through the rows-in-lanes GEMM: code-book values in element order
 * (group g's 16 bytes give elements 0-15 of the group in their low nibbles
 * and 16-31 in their high ones), stored biased by +128 so that they are
 * vpdpbusd's unsigned operand; the bias comes back out as -128 * ls_g *
 * (sum of the group's activation codes), from the bsums two halves at a
 * time.  A group's biased sum needs 32 bits, so ls_g (signed 6-bit) applies
 * with a 32-bit multiply. */
static void iq4_xs_unpack(kq_pack *pk, const uint8_t *w, size_t ldw, int rows, int64_t i0,
			  int nsb)
{
	const __m512i tb = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)moe_kvalues_iq4nl));
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
	const __m256i sh_l = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
	const __m256i sh_h = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);

	for (int sb = 0; sb < nsb; sb++) {
		__m512i v[16];
		for (int p = 0; p < 4; p++) {
			for (int r = 0; r < 16; r++) {
				if (r >= rows) {
					v[r] = zero_i();
					continue;
				}
				const moe_block_iq4_xs *b =
					(const void *)(w + r * ldw + (i0 + sb) * sizeof(*b));
				__m256i q = _mm256_loadu_si256((const void *)(b->qs + 32 * p));
				__m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
				/* [g.lo, g.hi, g+1.lo, g+1.hi] in 128-bit lanes. */
				z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
				z = _mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4);
				z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
				v[r] = _mm512_xor_si512(_mm512_shuffle_epi8(tb, z),
							_mm512_set1_epi8((char)0x80));
			}
			transpose16(v);
			for (int j = 0; j < 16; j++)
				_mm512_store_si512(pk->q[sb][16 * p + j], v[j]);
		}
		float d[16];
		for (int r = 0; r < 16; r++) {
			const moe_block_iq4_xs *b = (const void *)(w + r * ldw + (i0 + sb) * sizeof(*b));
			if (r < rows)
				prefetch_ahead((const uint8_t *)b, sizeof(*b));
			if (r >= rows) {
				v[r] = zero_i();
				d[r] = 0.0f;
				continue;
			}
			uint32_t l;
			uint16_t h;
			memcpy(&l, b->scales_l, 4);
			memcpy(&h, (const uint8_t *)b + offsetof(moe_block_iq4_xs, scales_h), 2);
			__m256i nib = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)l), sh_l),
						       _mm256_set1_epi32(15));
			__m256i top = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), sh_h),
						       _mm256_set1_epi32(3));
			__m256i ls = _mm256_sub_epi32(_mm256_or_si256(nib, _mm256_slli_epi32(top, 4)),
						      _mm256_set1_epi32(32));
			v[r] = _mm512_castsi256_si512(ls);
			v[r] = _mm512_inserti64x4(v[r], _mm256_setzero_si256(), 1);
			d[r] = _cvtsh_ss(ld16((const uint8_t *)b));
		}
		transpose16(v);
		for (int g = 0; g < 8; g++) {
			_mm512_store_si512(pk->sc[sb][g], v[g]);
			__m512i m = _mm512_and_si512(_mm512_slli_epi32(_mm512_sub_epi32(zero_i(), v[g]), 7),
						     lo16);
			_mm512_store_si512(pk->mm[sb][g], _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
		}
		memcpy(pk->d[sb], d, sizeof(d));
	}
}

INLINE void iq4_xs_rows_tile(const int T, const kq_pack *pk, int nsb, int64_t i0,
			     const uint8_t *x, size_t ldx, __m512 acc[GT])
{
	for (int sb = 0; sb < nsb; sb++) {
		const uint8_t *y = x + (i0 + sb) * Q8K_SIZE;
		__m512i is[GT];
		MOE_UNROLL for (int t = 0; t < T; t++)
			is[t] = zero_i();
		for (int g = 0; g < 8; g++) {
			const __m512i mm = _mm512_load_si512(pk->mm[sb][g]);
			MOE_UNROLL for (int t = 0; t < T; t++)
				is[t] = _mm512_dpwssd_epi32(is[t], mm,
							    bcast32(y + t * ldx + Q8K_BSUMS + 4 * g));
		}
		for (int g = 0; g < 8; g++) {
			__m512i u[GT];
			MOE_UNROLL for (int t = 0; t < T; t++)
				u[t] = zero_i();
			MOE_UNROLL for (int j = 0; j < 8; j++) {
				const int k4 = 8 * g + j;
				const __m512i wv = _mm512_load_si512(pk->q[sb][k4]);
				MOE_UNROLL for (int t = 0; t < T; t++)
					u[t] = _mm512_dpbusd_epi32(
						u[t], wv, bcast32(y + t * ldx + Q8K_QS + 4 * k4));
			}
			const __m512i sc = _mm512_load_si512(pk->sc[sb][g]);
			MOE_UNROLL for (int t = 0; t < T; t++)
				is[t] = _mm512_add_epi32(is[t], _mm512_mullo_epi32(u[t], sc));
		}
		const __m512 d = _mm512_load_ps(pk->d[sb]);
		MOE_UNROLL for (int t = 0; t < T; t++) {
			__m512 dy = _mm512_set1_ps(ldf32(y + t * ldx + Q8K_D));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(d, dy), acc[t]);
		}
	}
}

enum { KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_Q2_K, KQ_Q3_K, KQ_IQ4_XS };

INLINE void kq_rows_gemm(const int kind, int64_t n, int nr, int nt, const uint8_t *w, size_t ldw,
			  const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / MOE_QK_K;
	kq_pack pk __attribute__((aligned(64)));

	for (int r0 = 0; r0 < nr; r0 += 16) {
		const int rows = nr - r0 < 16 ? nr - r0 : 16;
		const __mmask16 m = (__mmask16)((1u << rows) - 1);
		for (int64_t i0 = 0; i0 < nb; i0 += KSB) {
			const int nsb = nb - i0 < KSB ? (int)(nb - i0) : KSB;
			if (kind == KQ_Q6_K)
				q6_k_unpack(&pk, w + (size_t)r0 * ldw, ldw, rows, i0, nsb);
			else if (kind == KQ_IQ4_XS)
				iq4_xs_unpack(&pk, w + (size_t)r0 * ldw, ldw, rows, i0, nsb);
			else if (kind == KQ_Q2_K || kind == KQ_Q3_K)
				k23_unpack(kind == KQ_Q3_K, &pk, w + (size_t)r0 * ldw, ldw, rows,
					   i0, nsb);
			else
				k45_unpack(kind == KQ_Q5_K, &pk, w + (size_t)r0 * ldw, ldw, rows,
					   i0, nsb);
			for (int t0 = 0; t0 < nt; t0 += GT) {
				const int T = nt - t0 < GT ? nt - t0 : GT;
				float *st = s + (size_t)t0 * lds + r0;
				const uint8_t *xt = x + (size_t)t0 * ldx;
				__m512 acc[GT];
				for (int t = 0; t < T; t++)
					acc[t] = i0 ? _mm512_maskz_loadu_ps(m, st + t * lds)
						    : _mm512_setzero_ps();
				switch (T) {
#define K45_CASE(TT)                                                                   \
	case TT:                                                               \
		if (kind == KQ_Q6_K)                                           \
			q6_k_rows_tile(TT, &pk, nsb, i0, xt, ldx, acc);        \
		else if (kind == KQ_IQ4_XS)                                    \
			iq4_xs_rows_tile(TT, &pk, nsb, i0, xt, ldx, acc);      \
		else if (kind == KQ_Q2_K || kind == KQ_Q3_K)                   \
			k23_rows_tile(kind == KQ_Q3_K, TT, &pk, nsb, i0, xt, ldx, acc); \
		else                                                           \
			k45_rows_tile(kind == KQ_Q5_K, TT, &pk, nsb, i0, xt, ldx, acc); \
		break;
					K45_CASE(1) K45_CASE(2) K45_CASE(3) K45_CASE(4)
					K45_CASE(5) K45_CASE(6) K45_CASE(7) K45_CASE(8)
#undef K45_CASE
				}
				for (int t = 0; t < T; t++)
					_mm512_mask_storeu_ps(st + t * lds, m, acc[t]);
			}
		}
	}
}

/* Tokens from which unpacking the weights pays (it costs about as much as
 * a few tokens' products); below, the decode tiles.  Both give the same
 * bits.  Measured with the weights coming from memory (decode steps of
 * several sequences), one thread, 2048 x 1024: Q5_K's GEMM matched
 * k45_tile at 5-6 tokens, and Q6_K's (its unpacking costs three times a
 * token's products) only at 12.  Q4_K's four-rows tile (q4_k_few_gemm)
 * matches its GEMM at 20 tokens (CPU time per product at 16 / 20 / 24
 * tokens: 170 / 211 / 253 us against the GEMM's 186 / 215 / 239); Q5_K's
 * (the same tile with the fifth bits) at about 20 too (1024 x 1024, hot,
 * 16 / 18 / 19 tokens: 96 / 112 / 117 us against the GEMM's 107 / 114 /
 * 120). */
#define KQ_ROWS_MIN_TOKENS 6
#define KQ_ROWS_MIN_TOKENS_Q4_K 20
#define KQ_ROWS_MIN_TOKENS_Q5_K 20
#define KQ_ROWS_MIN_TOKENS_Q6_K 12

static void q4_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= KQ_ROWS_MIN_TOKENS_Q4_K)
		kq_rows_gemm(KQ_Q4_K, n, nr, nt, w, ldw, x, ldx, s, lds);
	else if (nt >= 2)
		q4_k_few_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q4_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void q5_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= KQ_ROWS_MIN_TOKENS_Q5_K)
		kq_rows_gemm(KQ_Q5_K, n, nr, nt, w, ldw, x, ldx, s, lds);
	else if (nt >= 2)
		q5_k_few_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q5_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void q2_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= KQ_ROWS_MIN_TOKENS)
		kq_rows_gemm(KQ_Q2_K, n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q2_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void q3_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= KQ_ROWS_MIN_TOKENS)
		kq_rows_gemm(KQ_Q3_K, n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q3_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void iq4_xs_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw,
			    const void *x, size_t ldx, float *s, size_t lds)
{
	if (nt >= KQ_ROWS_MIN_TOKENS)
		kq_rows_gemm(KQ_IQ4_XS, n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		iq4_xs_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

/* Q6_K for 5-11 tokens (the output head and attn_v of a decode step of 8
 * sequences): one row by up to 8 tokens, so each row's codes are unpacked
 * once for 8 tokens instead of once per 4 (the 2 x 4 tiles of q6_k_gemm);
 * a tile's unpacking and scale work is most of its instructions.  Same
 * bits: every output keeps its integer sums and float sequence.  One
 * 32000 x 1024 product, one thread, CPU time (bench-kernels -c -t 1):
 * 5 / 6 / 8 tokens 1640-1886 / 1886-2048 / 2233-2276 us with q6_k_gemm's
 * tiles, 1400 / 1543-1561 / 1836-1857 us with these.  Tiles of 2 rows by 8
 * were 2% faster on cached weights but 11% slower from memory (8 tokens,
 * medians of 3 processes: 1794 against 1988 us), as with the other
 * few-token tiles: fewer rows at a time stream faster. */
static void q6_k_few_gemm(int64_t n, int nr, int nt, const uint8_t *w, size_t ldw,
			  const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	int t = 0;
	for (int T; nt - t >= 5; t += T) {
		T = nt - t < 8 ? nt - t : 8;
		const uint8_t *xt = x + t * ldx;
		float *st = s + t * lds;
		for (int r = 0; r < nr; r++) {
			const uint8_t *wr = w + r * ldw;
			switch (T) {
			case 5: q6_k_tile(1, 5, n, wr, ldw, xt, ldx, st + r, lds); break;
			case 6: q6_k_tile(1, 6, n, wr, ldw, xt, ldx, st + r, lds); break;
			case 7: q6_k_tile(1, 7, n, wr, ldw, xt, ldx, st + r, lds); break;
			default: q6_k_tile(1, 8, n, wr, ldw, xt, ldx, st + r, lds); break;
			}
		}
	}
	if (t < nt)
		q6_k_gemm(n, nr, nt - t, w, ldw, x + t * ldx, ldx, s + t * lds, lds);
}

static void q6_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= KQ_ROWS_MIN_TOKENS_Q6_K)
		kq_rows_gemm(KQ_Q6_K, n, nr, nt, w, ldw, x, ldx, s, lds);
	else if (nt >= 5)
		q6_k_few_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q6_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

/* ------------------------------------------- prefill GEMM, 32-element blocks
 *
 * As for the K-quants, rows in the lanes: the weights of 16 rows become
 * signed byte values (codes with their offsets, or code-book values)
 * interleaved as [block][k / 4][16 rows][4 bytes], with -128 * sum(w) per
 * block and row and the scales as vectors of 16 rows; the activations of up
 * to 128 tokens are copied once with their codes biased by 128 (vpdpbusd's
 * unsigned operand, broadcast four at a time) and their scales as floats.
 * Every output keeps the 16 partial sums of the decode tiles (block b into
 * partial b % 16) and adds them up in the same tree, so batched and single
 * results are the same bits.  The working buffers grow with the row length,
 * so they live in moe_kernels_work_buffer; if it cannot be allocated the
 * decode tiles do the work (same results, slower). */

#define B32_TS 128 /* tokens whose activations are prepared at once */

typedef struct {
	const uint8_t *wq;    /* [nb][8][16][4] signed values */
	const int32_t *wc;    /* [nb][16] -128 * sum of the block's values */
	const float *wd, *wm; /* [nb][16] scales, Q4_1/Q5_1 offsets */
	const uint8_t *xq;    /* [t][n] activation codes + 128 */
	const float *xd;      /* [t][nb] activation scales */
	const int32_t *xs;    /* [t][nb] Q4_1/Q5_1: sums of the codes */
	int64_t n, nb;
} b32_work;

/* The signed values of blocks i, i+1 (two) of one row in element order. */
INLINE __m512i b32_values(const int kind, const uint8_t *b, const int two)
{
	const size_t bs = b32_bsize(kind), qs = b32_qs(kind);
	if (kind == B32_Q8_0)
		return q8_codes(b, 0, two);
	__m512i v = zero_i();
	MOE_UNROLL for (int h = 0; h < 2; h++) {
		if (h && !two)
			break;
		const uint8_t *p = b + h * bs;
		__m128i q = _mm_loadu_si128((const void *)(p + qs));
		__m256i z = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
		z = _mm256_and_si256(z, _mm256_set1_epi8(0x0F));
		if (kind == B32_Q5_0 || kind == B32_Q5_1) {
			const size_t qh = kind == B32_Q5_0 ? offsetof(moe_block_q5_0, qh)
							  : offsetof(moe_block_q5_1, qh);
			uint32_t bits;
			memcpy(&bits, p + qh, 4);
			z = _mm256_mask_add_epi8(z, bits, z, _mm256_set1_epi8(16));
		}
		if (kind == B32_IQ4_NL || kind == B32_MXFP4) {
			const int8_t *tab = kind == B32_IQ4_NL ? moe_kvalues_iq4nl : moe_kvalues_mxfp4;
			z = _mm256_shuffle_epi8(
				_mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)tab)), z);
		} else if (kind == B32_Q4_0) {
			z = _mm256_sub_epi8(z, _mm256_set1_epi8(8));
		} else if (kind == B32_Q5_0) {
			z = _mm256_sub_epi8(z, _mm256_set1_epi8(16));
		}
		v = h ? _mm512_inserti64x4(v, z, 1) : _mm512_inserti64x4(v, z, 0); /* clang wants an immediate */
	}
	return v;
}

static void b32_unpack(const int kind, uint8_t *wq, int32_t *wc, float *wd, float *wm,
		       const uint8_t *w, size_t ldw, int rows, int64_t nb)
{
	const size_t bs = b32_bsize(kind);
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1;
	for (int64_t i = 0; i < nb; i += 2) {
		const int two = i + 1 < nb;
		__m512i v[16];
		for (int r = 0; r < 16; r++) {
			if (r < rows)
				prefetch_ahead(w + r * ldw + i * bs, 2 * bs);
			v[r] = r < rows ? b32_values(kind, w + r * ldw + i * bs, two) : zero_i();
		}
		transpose16(v);
		for (int j = 0; j < (two ? 16 : 8); j++)
			_mm512_store_si512(wq + (i * 8 + j) * 64, v[j]);
		for (int h = 0; h < 1 + two; h++) {
			__m512i sum = zero_i();
			for (int j = 0; j < 8; j++)
				sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), v[8 * h + j]);
			_mm512_store_si512(wc + (i + h) * 16,
					   _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sum, 7)));
		}
	}
	for (int64_t i = 0; i < nb; i++) {
		for (int r = 0; r < 16; r++) {
			const uint8_t *b = w + r * ldw + i * bs;
			wd[i * 16 + r] = r < rows ? b32_scale(kind, b) : 0.0f;
			if (q1)
				wm[i * 16 + r] = r < rows ? h2f(b + 2) : 0.0f;
		}
	}
}

static void b32_prep(const int kind, uint8_t *xq, float *xd, int32_t *xs, const uint8_t *x,
		     size_t ldx, int nt, int64_t n)
{
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1;
	const size_t xbs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	const size_t xqs = q1 ? offsetof(moe_block_q8_1, qs) : offsetof(moe_block_q8_0, qs);
	const int64_t nb = n / MOE_QK;
	for (int t = 0; t < nt; t++) {
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *a = x + t * ldx + i * xbs;
			__m256i c = _mm256_loadu_si256((const void *)(a + xqs));
			_mm256_store_si256((void *)(xq + t * n + i * MOE_QK),
					   _mm256_xor_si256(c, _mm256_set1_epi8((char)0x80)));
			xd[t * nb + i] = h2f(a);
			if (q1) {
				__m256i p = _mm256_maddubs_epi16(_mm256_set1_epi8(1), c);
				__m256i q = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
				__m128i r = _mm_add_epi32(_mm256_castsi256_si128(q),
							  _mm256_extracti128_si256(q, 1));
				r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
				r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
				xs[t * nb + i] = _mm_cvtsi128_si32(r);
			}
		}
	}
}

/* T tokens (from t0 of the prepared ones) x 16 rows. */
INLINE void b32_rows_tile(const int kind, const int T, const b32_work *k, int t0, float *s,
			  size_t lds, __mmask16 m)
{
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1;
	__m512 P[GT][16];
	MOE_UNROLL for (int t = 0; t < T; t++)
		for (int j = 0; j < 16; j++)
			P[t][j] = _mm512_setzero_ps();
	for (int64_t i = 0; i < k->nb; i++) {
		const int j = (int)(i & 15);
		const __m512i wc = _mm512_load_si512(k->wc + i * 16);
		__m512i u[GT];
		MOE_UNROLL for (int t = 0; t < T; t++)
			u[t] = wc;
		MOE_UNROLL for (int k4 = 0; k4 < 8; k4++) {
			const __m512i wv = _mm512_load_si512(k->wq + (i * 8 + k4) * 64);
			MOE_UNROLL for (int t = 0; t < T; t++)
				u[t] = _mm512_dpbusd_epi32(
					u[t], bcast32(k->xq + (t0 + t) * k->n + i * MOE_QK + 4 * k4), wv);
		}
		const __m512 wd = _mm512_load_ps(k->wd + i * 16);
		MOE_UNROLL for (int t = 0; t < T; t++) {
			const __m512 dx = _mm512_set1_ps(k->xd[(t0 + t) * k->nb + i]);
			P[t][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u[t]), _mm512_mul_ps(wd, dx), P[t][j]);
			if (q1)
				P[t][j] = _mm512_fmadd_ps(
					_mm512_set1_ps((float)k->xs[(t0 + t) * k->nb + i]),
					_mm512_mul_ps(_mm512_load_ps(k->wm + i * 16), dx), P[t][j]);
		}
	}
	/* The partials' tree (see the 32-element reduction order). */
	MOE_UNROLL for (int t = 0; t < T; t++) {
		__m512 a[8], b[4], c[2];
		for (int j = 0; j < 8; j++)
			a[j] = _mm512_add_ps(P[t][j], P[t][j + 8]);
		for (int j = 0; j < 4; j++)
			b[j] = _mm512_add_ps(a[j], a[j + 4]);
		for (int j = 0; j < 2; j++)
			c[j] = _mm512_add_ps(b[j], b[j + 2]);
		_mm512_mask_storeu_ps(s + t * lds, m, _mm512_add_ps(c[0], c[1]));
	}
}

/* Returns false (nothing done) when the working buffer is unavailable. */
INLINE bool b32_rows_gemm(const int kind, int64_t n, int nr, int nt, const uint8_t *w,
			  size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / MOE_QK;
	const int ts = nt < B32_TS ? nt : B32_TS;
	/* wq 16n, wc wd wm 3 * 64 nb, xq ts n, xd xs 8 ts nb (all multiples of
	 * 64 bytes when laid out in this order, n being a multiple of 32). */
	const size_t need = 16 * (size_t)n + 192 * (size_t)nb + (size_t)ts * (size_t)n +
			    8 * (size_t)ts * (size_t)nb + 128;
	uint8_t *buf = moe_kernels_work_buffer(need);
	if (!buf)
		return false;
	b32_work k = {0};
	uint8_t *wq = buf;
	int32_t *wc = (int32_t *)(wq + 16 * n);
	float *wd = (float *)(wc + 16 * nb), *wm = wd + 16 * nb;
	uint8_t *xq = (uint8_t *)(wm + 16 * nb);
	float *xd = (float *)(xq + (size_t)ts * n);
	int32_t *xs = (int32_t *)(xd + (size_t)ts * nb);
	k = (b32_work){wq, wc, wd, wm, xq, xd, xs, n, nb};

	for (int t0s = 0; t0s < nt; t0s += ts) {
		const int tn = nt - t0s < ts ? nt - t0s : ts;
		b32_prep(kind, xq, xd, xs, x + (size_t)t0s * ldx, ldx, tn, n);
		for (int r0 = 0; r0 < nr; r0 += 16) {
			const int rows = nr - r0 < 16 ? nr - r0 : 16;
			const __mmask16 m = (__mmask16)((1u << rows) - 1);
			b32_unpack(kind, wq, wc, wd, wm, w + (size_t)r0 * ldw, ldw, rows, nb);
			for (int t = 0; t < tn; t += GT) {
				const int T = tn - t < GT ? tn - t : GT;
				float *st = s + (size_t)(t0s + t) * lds + r0;
				switch (T) {
#define B32_CASE(TT)                                                           \
	case TT:                                                       \
		b32_rows_tile(kind, TT, &k, t, st, lds, m);            \
		break;
					B32_CASE(1) B32_CASE(2) B32_CASE(3) B32_CASE(4)
					B32_CASE(5) B32_CASE(6) B32_CASE(7) B32_CASE(8)
#undef B32_CASE
				}
			}
		}
	}
	return true;
}

/* Tokens from which unpacking the weights pays: it costs about as much as
 * 2.6 blocks' products per block, and the rows-in-lanes products then
 * about 0.15 ns a block against the decode tile's 0.41 (Q4_0), 0.5-0.55
 * (Q4_1, IQ4_NL, MXFP4), 0.7 (Q5_0, Q8_0) on the Zen 5 (AMD family 26)
 * measured.  Both give the same bits. */
INLINE int b32_rows_min_tokens(const int kind)
{
	switch (kind) {
	case B32_Q4_0: return 10;
	case B32_Q4_1: case B32_IQ4_NL: case B32_MXFP4: return 7;
	case B32_Q5_0: case B32_Q5_1: return 5;
	default: return 4;
	}
}

#define MOE_B32_ANY(name, kind)                                                                \
	static void name##_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw,      \
				    const void *x, size_t ldx, float *s, size_t lds)           \
	{                                                                                      \
		if (nt >= b32_rows_min_tokens(kind) &&                                         \
		    b32_rows_gemm(kind, n, nr, nt, w, ldw, x, ldx, s, lds))                    \
			return;                                                                \
		name##_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);                                \
	}
MOE_B32_ANY(q8_0, B32_Q8_0)
MOE_B32_ANY(q4_0, B32_Q4_0)
MOE_B32_ANY(q5_0, B32_Q5_0)
MOE_B32_ANY(q4_1, B32_Q4_1)
MOE_B32_ANY(q5_1, B32_Q5_1)
MOE_B32_ANY(iq4_nl, B32_IQ4_NL)
MOE_B32_ANY(mxfp4, B32_MXFP4)

/* ------------------------------------------------------------ quantisers */

/* roundf (half away from zero) of 16 floats, as the reference uses. */
INLINE __m512 round_away(__m512 v)
{
	__m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	__m512 f = _mm512_abs_ps(_mm512_sub_ps(v, t));
	__mmask16 k = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
	__m512 one = _mm512_castsi512_ps(_mm512_or_si512(
		_mm512_castps_si512(_mm512_set1_ps(1.0f)),
		_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u))));
	return _mm512_mask_add_ps(t, k, t, one);
}

/* As moe_q8_0_from_float / moe_q8_1_from_float: d = amax / 127, codes
 * roundf(x / d); Q8_1 also stores s = d * sum(codes). */
INLINE void quantize_q8(const int q1, const float *x, void *y, int64_t n)
{
	const size_t bs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	const size_t qs = q1 ? offsetof(moe_block_q8_1, qs) : offsetof(moe_block_q8_0, qs);
	uint8_t *b = y;
	for (int64_t i = 0; i < n / MOE_QK; i++, x += MOE_QK, b += bs) {
		__m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
		__m512 am = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
		float amax = _mm512_reduce_max_ps(am);
		float d = amax / 127.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		uint16_t h = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
		__m512 vid = _mm512_set1_ps(id);
		__m512i q0 = _mm512_cvttps_epi32(round_away(_mm512_mul_ps(v0, vid)));
		__m512i q1v = _mm512_cvttps_epi32(round_away(_mm512_mul_ps(v1, vid)));
		memcpy(b, &h, 2);
		if (q1) {
			int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1v));
			uint16_t hs = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
			memcpy(b + offsetof(moe_block_q8_1, s), &hs, 2);
		}
		_mm_storeu_si128((void *)(b + qs), _mm512_cvtsepi32_epi8(q0));
		_mm_storeu_si128((void *)(b + qs + 16), _mm512_cvtsepi32_epi8(q1v));
	}
}

static void quantize_row_q8_0(const float *x, void *y, int64_t n)
{
	quantize_q8(0, x, y, n);
}

static void quantize_row_q8_1(const float *x, void *y, int64_t n)
{
	quantize_q8(1, x, y, n);
}

/* As moe_q8_k_from_float: the first element of largest magnitude maps to
 * -127, codes round to nearest even, bsums per 16. */
static void quantize_row_q8_k(const float *x, void *y, int64_t n)
{
	uint8_t *b = y;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, x += MOE_QK_K, b += Q8K_SIZE) {
		__m512 v[16], am = _mm512_setzero_ps();
		for (int j = 0; j < 16; j++) {
			v[j] = _mm512_loadu_ps(x + 16 * j);
			am = _mm512_max_ps(am, _mm512_abs_ps(v[j]));
		}
		float amax = _mm512_reduce_max_ps(am), max = 0.0f;
		if (!(amax > 0.0f)) {
			memset(b, 0, Q8K_SIZE);
			continue;
		}
		for (int j = 0; j < 16; j++) {
			__mmask16 k = _mm512_cmp_ps_mask(_mm512_abs_ps(v[j]), _mm512_set1_ps(amax),
							 _CMP_EQ_OQ);
			if (k) {
				max = x[16 * j + __builtin_ctz(k)];
				break;
			}
		}
		float iscale = -127.0f / max, d = 1.0f / iscale;
		__m512 vs = _mm512_set1_ps(iscale);
		int16_t bsums[16];
		for (int j = 0; j < 16; j++) {
			__m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[j], vs));
			q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)),
					     _mm512_set1_epi32(-127));
			_mm_storeu_si128((void *)(b + Q8K_QS + 16 * j), _mm512_cvtsepi32_epi8(q));
			bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
		}
		memcpy(b + Q8K_D, &d, 4);
		memcpy(b + Q8K_BSUMS, bsums, sizeof(bsums));
	}
}

/* ---------------------------------------------------------- row decoders */

static void f16_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(dst + i, m, load_w16(1, p + 2 * i, m));
	}
}

static void bf16_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(dst + i, m, load_w16(2, p + 2 * i, m));
	}
}

/* ------------------------------------------------------------------ table */

void moe_kernels_fill_avx512(moe_kernels *k)
{
#define SET(T, name)                                                           \
	do {                                                                   \
		k->vec_dot[T] = name##_dot;                                    \
		k->gemm[T] = name##_gemm;                                      \
	} while (0)
	SET(MOE_F32, f32);
	SET(MOE_F16, f16);
	SET(MOE_BF16, bf16);
	SET(MOE_Q8_0, q8_0);
	SET(MOE_Q4_0, q4_0);
	SET(MOE_Q5_0, q5_0);
	SET(MOE_Q4_1, q4_1);
	SET(MOE_Q5_1, q5_1);
	SET(MOE_IQ4_NL, iq4_nl);
	SET(MOE_MXFP4, mxfp4);
	SET(MOE_Q4_K, q4_k);
	SET(MOE_Q5_K, q5_k);
	SET(MOE_Q6_K, q6_k);
	SET(MOE_IQ4_XS, iq4_xs);
	SET(MOE_Q2_K, q2_k);
	SET(MOE_Q3_K, q3_k);
#undef SET
	k->gemm[MOE_Q4_K] = q4_k_gemm_any;
	k->gemm[MOE_Q5_K] = q5_k_gemm_any;
	k->gemm[MOE_Q6_K] = q6_k_gemm_any;
	k->gemm[MOE_Q2_K] = q2_k_gemm_any;
	k->gemm[MOE_Q3_K] = q3_k_gemm_any;
	k->gemm[MOE_IQ4_XS] = iq4_xs_gemm_any;
	k->gemm[MOE_F16] = f16_gemm_any;
	k->gemm[MOE_Q8_0] = q8_0_gemm_any;
	k->gemm[MOE_Q4_0] = q4_0_gemm_any;
	k->gemm[MOE_Q5_0] = q5_0_gemm_any;
	k->gemm[MOE_Q4_1] = q4_1_gemm_any;
	k->gemm[MOE_Q5_1] = q5_1_gemm_any;
	k->gemm[MOE_IQ4_NL] = iq4_nl_gemm_any;
	k->gemm[MOE_MXFP4] = mxfp4_gemm_any;
	k->quantize_row[MOE_Q8_0] = quantize_row_q8_0;
	k->quantize_row[MOE_Q8_1] = quantize_row_q8_1;
	k->quantize_row[MOE_Q8_K] = quantize_row_q8_k;
	k->to_float[MOE_F16] = f16_to_float;
	k->to_float[MOE_BF16] = bf16_to_float;
	k->attn = moe_attn_avx512; /* attn_avx512.c */
}
