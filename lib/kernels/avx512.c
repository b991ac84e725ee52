/* kernels/avx512.c — AVX-512 kernels (F, BW, VL, VNNI): register-tiled
 * products for every weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, MXFP4, Q2_K .. Q6_K, IQ4_XS), the Q8_0, Q8_1 and Q8_K
 * activation quantisers and the F16/BF16 row decoders.
 *
 * Compiled with $(AVX512_CFLAGS); kernels.c calls moe_kernels_fill_avx512
 * only on a CPU that has these instructions.
 *
 * Every product is written once as a tile of R weight rows x T tokens
 * (xxx_tile, always inlined with constant R and T): each weight block is
 * decoded once per tile and each activation block loaded once per tile, and
 * the R x T partial sums stay in registers.  Lanes run along the columns
 * (k), so each tile ends with a horizontal sum per (row, token).  MOE_GEMM
 * instantiates the tile shapes: the main TR x TT tile, 1 x TT for leftover
 * rows, DR x 1 for single tokens (decode) and 1 x 1 (vec_dot).
 *
 * Integer dot products use vpdpbusd (u8 x s8 -> s32 in groups of four).
 * Its first operand must be unsigned, which fixes how each type is set up:
 * 4/5/6-bit codes are unsigned already, their offsets (-8, -32) and minimums
 * go through activation sums; for Q8_0 x Q8_0 the activations are biased by
 * +128 and the bias removed with the weight sums.  Where a group's integer
 * scale applies, vpdpwssd multiplies the group sums (which fit 16 bits) by
 * it and accumulates in 32 bits, so the float work is once per super-block.
 */
#include <immintrin.h>
#include <string.h>

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

/* acc + dp * (a * b), dp converted to float. */
INLINE __m512 fma_scaled(__m512 acc, __m512i dp, __m512 a, __m512 b)
{
	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(a, b), acc);
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

/* The driver over tile shapes (see the file comment), and the vec_dot. */
#define MOE_GEMM(name, TR, TT, DR)                                                             \
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

/* Software prefetch of the weight rows, MOE_PF_DIST bytes ahead of where
 * each row of a tile is being read, into L2.  Rows are contiguous, so this
 * runs a few tiles ahead of the whole stream.  Without it decode from memory
 * ran at half the speed of the same kernel on cached weights: the loop body
 * is long, so the out-of-order window reaches only a few hundred bytes
 * ahead, and the hardware prefetchers do not cover the interleaved rows.
 * (16 KiB with the L2 hint measured best on Zen 4; 4 KiB gains little, and
 * prefetching into L1 thrashes it.) */
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

INLINE void float_tile(const int kind, const int R, const int T, int64_t n, const uint8_t *w,
		       size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int esz = kind == 0 ? 4 : 2;
	__m512 acc[4][6];
	int64_t i = 0;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		__m512 wv[4];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			if (esz == 4 || !(i & 31))
				prefetch_ahead(w + r * ldw + i * esz, 64);
			wv[r] = load_w16(kind, w + r * ldw + i * esz, m);
		}
		MOE_UNROLL for (int t = 0; t < T; t++) {
			__m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + i * 4);
			MOE_UNROLL for (int r = 0; r < R; r++)
				acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
		}
	}
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
MOE_GEMM(bf16, 4, 6, 4)

/* ------------------------------------------------------ 32-element blocks */

/* Two consecutive 32-element blocks are one 64-lane step; a last odd block
 * is a step with the second half zero (`two` false). */

/* The codes of blocks b and b+1 of a Q8_0 (q1 false) or Q8_1 row. */
INLINE __m512i q8_codes(const uint8_t *b, const int q1, const int two)
{
	const size_t bs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	const size_t qs = q1 ? offsetof(moe_block_q8_1, qs) : offsetof(moe_block_q8_0, qs);
	__m256i lo = _mm256_loadu_si256((const void *)(b + qs));
	__m256i hi = two ? _mm256_loadu_si256((const void *)(b + bs + qs)) : _mm256_setzero_si256();
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

INLINE __m512i q8_0_codes(const uint8_t *b, const int two)
{
	return q8_codes(b, 0, two);
}

/* The two f16 scales a, b as floats spread over the lanes by idx (0 -> a,
 * 1 -> b). */
INLINE __m512 pair_scale(uint16_t a, uint16_t b, __m512i idx)
{
	__m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(a | (uint32_t)b << 16)));
	return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

/* dot(x + 128, w) - 128 * sum(w) = dot(x, w): vpdpbusd needs x unsigned. */
INLINE void q8_0_step(const int R, const int T, const int two, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, __m512 acc[4][6])
{
	const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	__m512i wv[4], wc[4];
	__m512 wd[4];

	MOE_UNROLL for (int r = 0; r < R; r++) {
		const uint8_t *b = w + r * ldw;
		prefetch_ahead(b, 2 * 34);
		wv[r] = q8_0_codes(b, two);
		__m512i sum = _mm512_dpbusd_epi32(zero_i(), _mm512_set1_epi8(1), wv[r]);
		wc[r] = _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sum, 7));
		wd[r] = pair_scale(ld16(b), two ? ld16(b + 34) : 0, idx);
	}
	MOE_UNROLL for (int t = 0; t < T; t++) {
		const uint8_t *a = x + t * ldx;
		__m512i xv = _mm512_xor_si512(q8_0_codes(a, two), _mm512_set1_epi8((char)0x80));
		__m512 xd = pair_scale(ld16(a), two ? ld16(a + 34) : 0, idx);
		MOE_UNROLL for (int r = 0; r < R; r++) {
			__m512i dp = _mm512_dpbusd_epi32(wc[r], xv, wv[r]);
			acc[r][t] = fma_scaled(acc[r][t], dp, wd[r], xd);
		}
	}
}

INLINE void q8_0_tile(const int R, const int T, int64_t n, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	__m512 acc[4][6];
	int64_t nb = n / MOE_QK, i = 0;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (; i + 2 <= nb; i += 2)
		q8_0_step(R, T, 1, w + i * 34, ldw, x + i * 34, ldx, acc);
	if (i < nb)
		q8_0_step(R, T, 0, w + i * 34, ldw, x + i * 34, ldx, acc);
	STORE_TILE(R, T, acc, s, lds);
}

MOE_GEMM(q8_0, 4, 4, 4)

/* The 4-bit 32-element types share one step: Q4_0, Q5_0 (plus a fifth bit),
 * Q4_1, Q5_1 (with Q8_1 activations), IQ4_NL and MXFP4 (a 16-entry code
 * book).  The 16 code bytes of blocks b and b+1 give lanes [b.lo, b+1.lo,
 * b.hi, b+1.hi] (16 each; lo = elements 0-15, hi = 16-31) with one shift of
 * the upper half; the activations are permuted to the same order, which is
 * cheaper than reordering the nibbles.
 *
 * Q4_0 and Q5_0 codes are unsigned, their offsets (-8, -16) entering as
 * -8 * sum(x) in the accumulator's start; Q4_1 and Q5_1 add m * dy * sum(x)
 * with one more multiply-add per block; the code-book values are signed, so
 * those take the Q8_0 route (x biased by 128, minus 128 * sum(w)). */
enum { B32_Q4_0, B32_Q5_0, B32_Q4_1, B32_Q5_1, B32_IQ4_NL, B32_MXFP4 };

INLINE size_t b32_bsize(const int kind)
{
	switch (kind) {
	case B32_Q4_0: return sizeof(moe_block_q4_0);
	case B32_Q5_0: return sizeof(moe_block_q5_0);
	case B32_Q4_1: return sizeof(moe_block_q4_1);
	case B32_Q5_1: return sizeof(moe_block_q5_1);
	case B32_IQ4_NL: return sizeof(moe_block_iq4_nl);
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
	default: return offsetof(moe_block_mxfp4, qs);
	}
}

/* The fifth bits of Q5_0 / Q5_1 (bit e of qh is element e's) as a mask in
 * the lane order above. */
INLINE __mmask64 q5_mask(const uint8_t *qa, const uint8_t *qb, const int two)
{
	uint32_t ha, hb = 0;
	memcpy(&ha, qa, 4);
	if (two)
		memcpy(&hb, qb, 4);
	return (uint64_t)(ha & 0xFFFF) | (uint64_t)(hb & 0xFFFF) << 16 |
	       (uint64_t)(ha >> 16) << 32 | (uint64_t)(hb >> 16) << 48;
}

/* Nibble codes of blocks b, b+1 in the lane order above. */
INLINE __m512i nib_codes(const uint8_t *qa, const uint8_t *qb, const int two)
{
	__m128i a = _mm_loadu_si128((const void *)qa);
	__m128i c = two ? _mm_loadu_si128((const void *)qb) : _mm_setzero_si128();
	__m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(a), c, 1);
	__m512i z = _mm512_broadcast_i64x4(v);
	z = _mm512_mask_srli_epi16(z, 0xFFFF0000u, z, 4);
	return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* Two f32 scales spread over the lanes by idx (0 -> a, 1 -> b). */
INLINE __m512 pair_scale_f(float a, float b, __m512i idx)
{
	return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_setr_ps(a, b, 0, 0)));
}

INLINE void b32_step(const int kind, const int R, const int T, const int two, const uint8_t *w,
		    size_t ldw, const uint8_t *x, size_t ldx, __m512 acc[4][6])
{
	const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
	const size_t bs = b32_bsize(kind), qs = b32_qs(kind);
	const int book = kind == B32_IQ4_NL || kind == B32_MXFP4;
	const int q1 = kind == B32_Q4_1 || kind == B32_Q5_1; /* Q8_1 activations */
	const size_t xbs = q1 ? sizeof(moe_block_q8_1) : sizeof(moe_block_q8_0);
	__m512i wv[4], wc[4];
	__m512 wd[4], wm[4];

	MOE_UNROLL for (int r = 0; r < R; r++) {
		const uint8_t *b = w + r * ldw;
		prefetch_ahead(b, 2 * bs);
		wv[r] = nib_codes(b + qs, b + bs + qs, two);
		if (kind == B32_Q5_0 || kind == B32_Q5_1) {
			const size_t qh = kind == B32_Q5_0 ? offsetof(moe_block_q5_0, qh)
							  : offsetof(moe_block_q5_1, qh);
			__mmask64 k = q5_mask(b + qh, b + bs + qh, two);
			wv[r] = _mm512_mask_add_epi8(wv[r], k, wv[r], _mm512_set1_epi8(16));
		}
		if (q1) /* m, the offset, at bytes 2-3 of both */
			wm[r] = pair_scale(ld16(b + 2), two ? ld16(b + bs + 2) : 0, idx);
		if (book) {
			const int8_t *tab = kind == B32_IQ4_NL ? moe_kvalues_iq4nl
							      : moe_kvalues_mxfp4;
			__m512i tb = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)tab));
			wv[r] = _mm512_shuffle_epi8(tb, wv[r]);
			__m512i sum = _mm512_dpbusd_epi32(zero_i(), _mm512_set1_epi8(1), wv[r]);
			wc[r] = _mm512_sub_epi32(zero_i(), _mm512_slli_epi32(sum, 7));
		}
		if (kind == B32_MXFP4)
			wd[r] = pair_scale_f(moe_e8m0_to_f32_half(b[0]),
					     two ? moe_e8m0_to_f32_half(b[bs]) : 0.0f, idx);
		else
			wd[r] = pair_scale(ld16(b), two ? ld16(b + bs) : 0, idx);
	}
	MOE_UNROLL for (int t = 0; t < T; t++) {
		const uint8_t *a = x + t * ldx;
		__m512i xv = q8_codes(a, q1, two), xs = zero_i();
		__m512 xd = pair_scale(ld16(a), two ? ld16(a + xbs) : 0, idx), xm;
		xv = _mm512_shuffle_i64x2(xv, xv, _MM_SHUFFLE(3, 1, 2, 0));
		if (book) {
			xv = _mm512_xor_si512(xv, _mm512_set1_epi8((char)0x80));
		} else if (q1) {
			/* dy * sum(x) per lane, for the offsets m. */
			xs = _mm512_dpbusd_epi32(zero_i(), _mm512_set1_epi8(1), xv);
			xm = _mm512_mul_ps(_mm512_cvtepi32_ps(xs), xd);
			xs = zero_i();
		} else {
			xs = _mm512_dpbusd_epi32(zero_i(),
						 _mm512_set1_epi8(kind == B32_Q5_0 ? 16 : 8), xv);
			xs = _mm512_sub_epi32(zero_i(), xs);
		}
		MOE_UNROLL for (int r = 0; r < R; r++) {
			__m512i dp = book ? _mm512_dpbusd_epi32(wc[r], xv, wv[r])
					  : _mm512_dpbusd_epi32(xs, wv[r], xv);
			acc[r][t] = fma_scaled(acc[r][t], dp, wd[r], xd);
			if (q1)
				acc[r][t] = _mm512_fmadd_ps(xm, wm[r], acc[r][t]);
		}
	}
}

INLINE void b32_tile(const int kind, const int R, const int T, int64_t n, const uint8_t *w,
		    size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const size_t bs = b32_bsize(kind);
	const size_t xbs = kind == B32_Q4_1 || kind == B32_Q5_1 ? sizeof(moe_block_q8_1)
							      : sizeof(moe_block_q8_0);
	__m512 acc[4][6];
	int64_t nb = n / MOE_QK, i = 0;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (; i + 2 <= nb; i += 2)
		b32_step(kind, R, T, 1, w + i * bs, ldw, x + i * xbs, ldx, acc);
	if (i < nb)
		b32_step(kind, R, T, 0, w + i * bs, ldw, x + i * xbs, ldx, acc);
	STORE_TILE(R, T, acc, s, lds);
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

MOE_GEMM(q4_0, 4, 4, 4)
MOE_GEMM(q5_0, 4, 4, 4)
MOE_GEMM(q4_1, 4, 4, 4)
MOE_GEMM(q5_1, 4, 4, 4)
MOE_GEMM(iq4_nl, 4, 4, 4)
MOE_GEMM(mxfp4, 4, 4, 4)

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
		float dd[24], dmn[24], dyv[24];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const uint8_t *b = w + r * ldw + i * bsz;
			MOE_UNROLL for (int t = 0; t < T; t++) {
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE;
				__m512i lo = _mm512_maskz_add_epi32(
					0x00FF, ai[r][t], _mm512_shuffle_i64x2(ai[r][t], ai[r][t], 0x4E));
				c[r * T + t] = _mm512_dpwssd_epi32(lo, scm[r], q8k_group_sums(y));
				dd[r * T + t] = h2f(b);
				dmn[r * T + t] = h2f(b + 2);
				dyv[r * T + t] = ldf32(y + Q8K_D);
			}
		}
		MOE_UNROLL for (int o = R * T; o < (R * T + 3) / 4 * 4; o++) {
			c[o] = zero_i();
			dd[o] = dmn[o] = dyv[o] = 0.0f;
		}
		MOE_UNROLL for (int g = 0; g < (R * T + 3) / 4; g++) {
			__m128i is, ms;
			reduce4(c[4 * g], c[4 * g + 1], c[4 * g + 2], c[4 * g + 3], &is, &ms);
			acc4[g] = ksb_finish4(acc4[g], is, ms, _mm_loadu_ps(dd + 4 * g),
					      _mm_loadu_ps(dmn + 4 * g), _mm_loadu_ps(dyv + 4 * g));
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

MOE_GEMM(q4_k, 3, 4, 4)
MOE_GEMM(q5_k, 2, 4, 4)

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
	int32_t sc[KSB][8][16];   /* [sb][group][row] scale (low 16 bits) */
	int32_t mm[KSB][8][16];   /* [sb][group][row] m | m << 16 */
	float d[KSB][16], dmin[KSB][16];
} k45_pack;

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
static void k45_unpack(const int five, k45_pack *pk, const uint8_t *w, size_t ldw, int rows,
		       int64_t i0, int nsb)
{
	const size_t bsz = five ? sizeof(moe_block_q5_k) : sizeof(moe_block_q4_k);
	const size_t qs_off = five ? offsetof(moe_block_q5_k, qs) : offsetof(moe_block_q4_k, qs);
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	const __m512i bit0 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(1), _mm512_set1_epi8(2));

	for (int sb = 0; sb < nsb; sb++) {
		__m512i v[16];
		for (int p = 0; p < 4; p++) {
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
INLINE void k45_rows_tile(const int five, const int T, const k45_pack *pk, int nsb, int64_t i0,
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

INLINE void k45_rows_gemm(const int five, int64_t n, int nr, int nt, const uint8_t *w, size_t ldw,
			  const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / MOE_QK_K;
	k45_pack pk __attribute__((aligned(64)));

	for (int r0 = 0; r0 < nr; r0 += 16) {
		const int rows = nr - r0 < 16 ? nr - r0 : 16;
		const __mmask16 m = (__mmask16)((1u << rows) - 1);
		for (int64_t i0 = 0; i0 < nb; i0 += KSB) {
			const int nsb = nb - i0 < KSB ? (int)(nb - i0) : KSB;
			k45_unpack(five, &pk, w + (size_t)r0 * ldw, ldw, rows, i0, nsb);
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
		k45_rows_tile(five, TT, &pk, nsb, i0, xt, ldx, acc);           \
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
 * bits. */
#define K45_ROWS_MIN_TOKENS 6

static void q4_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= K45_ROWS_MIN_TOKENS)
		k45_rows_gemm(0, n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q4_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void q5_k_gemm_any(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
			  size_t ldx, float *s, size_t lds)
{
	if (nt >= K45_ROWS_MIN_TOKENS)
		k45_rows_gemm(1, n, nr, nt, w, ldw, x, ldx, s, lds);
	else
		q5_k_gemm(n, nr, nt, w, ldw, x, ldx, s, lds);
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
	const __m512i lo16 = _mm512_set1_epi32(0xFFFF), m2 = _mm512_set1_epi8(3);
	const __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	/* Per 16-bit lane shift counts: fields 0/1 (lower/upper 32 bytes). */
	const __m512i sh01 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0),
						     _mm512_set1_epi16(2));
	const __m512i bit01 = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(1),
						      _mm512_set1_epi8(2));
	__m512 acc[4][6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i sc16[4], mn16[4], hm[4], ai[4][6];
		__m512 dm[4];
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
				dm[r] = _mm512_set1_ps(h2f(b + offsetof(moe_block_q3_k, d)));
			} else {
				const moe_block_q2_k *q2 = (const void *)b;
				__m512i v = _mm512_cvtepu8_epi32(
					_mm_loadu_si128((const void *)q2->scales));
				sc16[r] = _mm512_and_si512(v, _mm512_set1_epi32(15));
				mn16[r] = _mm512_srli_epi32(v, 4);
				dm[r] = _mm512_set1_ps(h2f(b + offsetof(moe_block_q2_k, d)));
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
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const uint8_t *b = w + r * ldw + i * bsz;
			MOE_UNROLL for (int t = 0; t < T; t++) {
				const uint8_t *y = x + t * ldx + i * Q8K_SIZE;
				__m512 dy = _mm512_set1_ps(ldf32(y + Q8K_D));
				acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r][t]),
							    _mm512_mul_ps(dm[r], dy), acc[r][t]);
				if (!three) {
					__m512i bs = _mm512_cvtepi16_epi32(
						_mm256_loadu_si256((const void *)(y + Q8K_BSUMS)));
					__m512i mi = _mm512_dpwssd_epi32(zero_i(), mn16[r], bs);
					__m512 dmin = _mm512_set1_ps(
						-h2f(b + offsetof(moe_block_q2_k, dmin)));
					acc[r][t] = fma_scaled(acc[r][t], mi, dmin, dy);
				}
			}
		}
	}
	STORE_TILE(R, T, acc, s, lds);
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

MOE_GEMM(q2_k, 2, 4, 4)
MOE_GEMM(q3_k, 2, 4, 4)

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
	__m512 acc[4][6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
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
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const uint8_t *b = w + r * ldw + i * sizeof(moe_block_iq4_xs);
			float d = _cvtsh_ss(ld16(b));
			MOE_UNROLL for (int t = 0; t < T; t++) {
				float dy = ldf32(x + t * ldx + i * Q8K_SIZE + Q8K_D);
				acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r][t]),
							    _mm512_set1_ps(d * dy), acc[r][t]);
			}
		}
	}
	STORE_TILE(R, T, acc, s, lds);
}

MOE_GEMM(iq4_xs, 2, 4, 4)

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
	const __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	__m512 acc[4][6];
	int64_t nb = n / MOE_QK_K;

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m512i sc16[4], ai[4][6];
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
		MOE_UNROLL for (int c = 0; c < 4; c++) {
			const int h = c / 2, odd = c % 2;
			const __m512i idx = _mm512_add_epi32(idx0, _mm512_set1_epi32(4 * c));
			__m512i xq[6];
			MOE_UNROLL for (int t = 0; t < T; t++)
				xq[t] = q8k_chunk(x + t * ldx, i, c);
			MOE_UNROLL for (int r = 0; r < R; r++) {
				const moe_block_q6_k *b =
					(const void *)(w + r * ldw + i * sizeof(*b));
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
				q = _mm512_and_si512(q, m6);
				__m512i sc = _mm512_permutexvar_epi32(idx, sc16[r]);
				MOE_UNROLL for (int t = 0; t < T; t++)
					ai[r][t] = dot_scaled(ai[r][t], q, xq[t], sc);
			}
		}
		MOE_UNROLL for (int r = 0; r < R; r++) {
			const moe_block_q6_k *b = (const void *)(w + r * ldw + i * sizeof(*b));
			float d = _cvtsh_ss(ld16((const uint8_t *)&b->d));
			MOE_UNROLL for (int t = 0; t < T; t++) {
				float dy = ldf32(x + t * ldx + i * Q8K_SIZE + Q8K_D);
				acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[r][t]),
							    _mm512_set1_ps(d * dy), acc[r][t]);
			}
		}
	}
	STORE_TILE(R, T, acc, s, lds);
}

MOE_GEMM(q6_k, 2, 4, 4)

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
	k->quantize_row[MOE_Q8_0] = quantize_row_q8_0;
	k->quantize_row[MOE_Q8_1] = quantize_row_q8_1;
	k->quantize_row[MOE_Q8_K] = quantize_row_q8_k;
	k->to_float[MOE_F16] = f16_to_float;
	k->to_float[MOE_BF16] = bf16_to_float;
}
