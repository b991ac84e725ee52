/* kernels/avx2_body.h — AVX2 + FMA + F16C dot products for every weight type
 * (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, MXFP4, Q2_K .. Q6_K,
 * IQ4_XS), the Q8_0 and Q8_K activation quantisers and the F16/BF16 row
 * decoders: one body compiled twice, by avx2.c and by avxvnni.c (with
 * MOE_AVXVNNI defined, where the 8-bit dot product step is vpdpbusd).
 *
 * Compiled with $(AVX2_CFLAGS) (or $(AVXVNNI_CFLAGS)); kernels.c calls the
 * fill function only on a CPU that has these instructions.  Dot products
 * for every type, and for every type a tiled GEMM that gives the same bits
 * as the dot products (the reduction orders are described with each): for
 * the quantised types rows in the lanes, the weights unpacked once for many
 * tokens; for the float types three rows by four tokens (few tokens: one
 * row by three).
 *
 * Without VNNI the 8-bit products use vpmaddubsw (u8 x s8 -> pairs summed to
 * s16, saturating) then vpmaddwd (s16 x s16 -> pairs summed to s32).  The
 * first operand must be unsigned and the pair sums must stay below 2^15:
 * 4/5/6-bit codes are unsigned (pair sums at most 2 * 63 * 127), and Q8_0
 * weights go in as |w| with the sign moved onto the activation (at most
 * 2 * 128 * 127).  AVX-VNNI's vpdpbusd adds the four u8 x s8 products of a
 * lane to a 32-bit accumulator in one instruction, with no 16-bit step;
 * since the AVX2 form never saturates, both give the same integers, so the
 * two levels give the same bits.  The K-quant and IQ4_XS tiles, which sum
 * several 16-bit steps before applying a group scale with vpmaddwd, keep
 * that form on both.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/hsum_x86.h"
#include "kernels/kernels_int.h"

#define INLINE static inline __attribute__((always_inline))
#define MOE_UNROLL2 _Pragma("GCC unroll 8")

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

/* acc + the sums of u8 x s8 products, four per 32-bit lane (the pair sums
 * of u x s must fit 16 bits; see above). */
#ifdef MOE_AVXVNNI
#define MOE_FILL_FN moe_kernels_fill_avxvnni
INLINE __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s)
{
	return _mm256_dpbusd_avx_epi32(acc, u, s);
}
#else
#define MOE_FILL_FN moe_kernels_fill_avx2
INLINE __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s)
{
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
						       _mm256_set1_epi16(1)));
}
#endif

/* Sum of u8 x s8 products, four per 32-bit lane. */
INLINE __m256i dot_u8s8(__m256i u, __m256i s)
{
	return dot_u8s8_acc(_mm256_setzero_si256(), u, s);
}

/* ---------------------------------------------------------- float weights */

/* kind 0 F32, 1 F16, 2 BF16: eight weights as floats. */
INLINE __m256 load_w8(const int kind, const uint8_t *p)
{
	if (kind == 0)
		return _mm256_loadu_ps((const float *)p);
	__m128i h = _mm_loadu_si128((const void *)p);
	if (kind == 1)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float load_w1(const int kind, const uint8_t *p)
{
	if (kind == 0) {
		float v;
		memcpy(&v, p, 4);
		return v;
	}
	return kind == 1 ? moe_f16_to_f32(ld16(p)) : moe_bf16_to_f32(ld16(p));
}

INLINE void float_dot(const int kind, int64_t n, float *s, const uint8_t *w, const float *x)
{
	const int esz = kind == 0 ? 4 : 2;
	__m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			 _mm256_setzero_ps()};
	int64_t i = 0;
	for (; i + 32 <= n; i += 32)
		for (int j = 0; j < 4; j++)
			acc[j] = _mm256_fmadd_ps(load_w8(kind, w + (i + 8 * j) * esz),
						 _mm256_loadu_ps(x + i + 8 * j), acc[j]);
	for (; i + 8 <= n; i += 8)
		acc[0] = _mm256_fmadd_ps(load_w8(kind, w + i * esz), _mm256_loadu_ps(x + i),
					 acc[0]);
	float sum = hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
					_mm256_add_ps(acc[2], acc[3])));
	for (; i < n; i++)
		sum += load_w1(kind, w + i * esz) * x[i];
	*s = sum;
}

static void vec_dot_f32(int64_t n, float *s, const void *w, const void *x)
{
	float_dot(0, n, s, w, x);
}

static void vec_dot_f16(int64_t n, float *s, const void *w, const void *x)
{
	float_dot(1, n, s, w, x);
}

static void vec_dot_bf16(int64_t n, float *s, const void *w, const void *x)
{
	float_dot(2, n, s, w, x);
}

/* ------------------------------------------------------------ Q8_0, Q4_0 */

/* sum w_j x_j per 32-bit lane for signed w (|w| <= 127): |w| unsigned and
 * the sign moved onto x keep the pairs within 16 bits. */
INLINE __m256i dot_s8(__m256i w, __m256i x)
{
	return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* Nibbles of a Q4_0/IQ4_NL-style block in element order: lo 0-15, hi 16-31. */
INLINE __m256i nibbles32(const uint8_t *qs)
{
	__m128i v = _mm_loadu_si128((const void *)qs);
	__m256i z = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
	return _mm256_and_si256(z, _mm256_set1_epi8(0x0F));
}

/* Q8_0, Q4_0, Q5_0, IQ4_NL: the reduction order (batch invariance).  Each block b
 * gives an exact integer S_b = sum w_j x_j; every output keeps 8 float
 * partial sums, lane j taking the blocks b with b % 8 == j in order,
 *     P_j = fma(S_b, dw_b * dx_b, P_j),
 * and the result is hsum8 of them.  The dot products here get S_b for 8
 * blocks at once with horizontal adds; the tiled GEMM below keeps the 8
 * partials of each output in memory. */

/* Lane j: the sum of the lanes of p[j]. */
INLINE __m256i sum8_blocks(const __m256i p[8])
{
	__m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
	__m256i h2 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
	return _mm256_add_epi32(_mm256_permute2x128_si256(h1, h2, 0x20),
				_mm256_permute2x128_si256(h1, h2, 0x31));
}

/* The f16 scales at offset 0 of nv (<= 8) blocks of bs bytes from p; the
 * other lanes zero. */
INLINE __m256 scales8(const uint8_t *p, size_t bs, int nv)
{
	if (nv == 8) {
		const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
						       _mm256_set1_epi32((int)bs));
		__m256i g = _mm256_i32gather_epi32((const int *)p, idx, 1);
		g = _mm256_and_si256(g, _mm256_set1_epi32(0xFFFF));
		__m128i h = _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
		return _mm256_cvtph_ps(h);
	}
	uint16_t h[8] = {0};
	for (int j = 0; j < nv; j++)
		h[j] = ld16(p + j * bs);
	return _mm256_cvtph_ps(_mm_loadu_si128((const void *)h));
}

/* The fifth bits of a Q5_0/Q5_1 block (bit j of qh: element j) as 0x10 in
 * each byte whose bit is set. */
INLINE __m256i q5_high(const uint8_t *qh)
{
	uint32_t h;
	memcpy(&h, qh, 4);
	const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
					     2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), idx);
	b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
	return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

INLINE __m256i book32(const int8_t *tab, const uint8_t *qs)
{
	return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)tab)),
				   nibbles32(qs));
}

/* The 32-element types that share the dot product and GEMM below. */
enum { X_Q8_0, X_Q4_0, X_Q5_0, X_IQ4_NL };

INLINE size_t b32x_bsize(const int kind)
{
	switch (kind) {
	case X_Q4_0: return sizeof(moe_block_q4_0);
	case X_Q5_0: return sizeof(moe_block_q5_0);
	case X_IQ4_NL: return sizeof(moe_block_iq4_nl);
	default: return sizeof(moe_block_q8_0);
	}
}

/* The signed values of a block in element order: Q8_0's codes, Q4_0's
 * q - 8, Q5_0's q - 16, the code books' entries. */
INLINE __m256i b32x_values(const int kind, const uint8_t *b)
{
	switch (kind) {
	case X_Q4_0:
		return _mm256_sub_epi8(nibbles32(b + offsetof(moe_block_q4_0, qs)),
				       _mm256_set1_epi8(8));
	case X_Q5_0: {
		const moe_block_q5_0 *q = (const void *)b;
		return _mm256_sub_epi8(_mm256_or_si256(nibbles32(q->qs), q5_high(q->qh)),
				       _mm256_set1_epi8(16));
	}
	case X_IQ4_NL:
		return book32(moe_kvalues_iq4nl, b + offsetof(moe_block_iq4_nl, qs));
	default:
		return _mm256_loadu_si256((const void *)(b + offsetof(moe_block_q8_0, qs)));
	}
}

INLINE void b32x_dot(const int kind, int64_t n, float *s, const void *w, const void *x)
{
	const size_t bs = b32x_bsize(kind);
	const uint8_t *pw = w, *px = x;
	const int64_t nb = n / MOE_QK;
	__m256 P = _mm256_setzero_ps();

	for (int64_t g0 = 0; g0 < nb; g0 += 8) {
		const int nv = nb - g0 < 8 ? (int)(nb - g0) : 8;
		__m256i p[8];
		if (nv == 8) {
			MOE_UNROLL2 for (int j = 0; j < 8; j++)
				p[j] = dot_s8(b32x_values(kind, pw + (g0 + j) * bs),
					      _mm256_loadu_si256((const void *)(px + (g0 + j) * 34 + 2)));
		} else {
			for (int j = 0; j < 8; j++)
				p[j] = j < nv ? dot_s8(b32x_values(kind, pw + (g0 + j) * bs),
						       _mm256_loadu_si256(
							       (const void *)(px + (g0 + j) * 34 + 2)))
					      : _mm256_setzero_si256();
		}
		__m256 d = _mm256_mul_ps(scales8(pw + g0 * bs, bs, nv), scales8(px + g0 * 34, 34, nv));
		P = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8_blocks(p)), d, P);
	}
	*s = hsum8(P);
}

static void vec_dot_q8_0(int64_t n, float *s, const void *w, const void *x)
{
	b32x_dot(X_Q8_0, n, s, w, x);
}

static void vec_dot_q4_0(int64_t n, float *s, const void *w, const void *x)
{
	b32x_dot(X_Q4_0, n, s, w, x);
}

/* ------------------------------------- the other 32-element block types */


/* Q5_0 (x = d * (q - 16)) and IQ4_NL (a code book): signed values like
 * Q8_0's, in the same order. */
static void vec_dot_q5_0(int64_t n, float *s, const void *w, const void *x)
{
	b32x_dot(X_Q5_0, n, s, w, x);
}

static void vec_dot_iq4_nl(int64_t n, float *s, const void *w, const void *x)
{
	b32x_dot(X_IQ4_NL, n, s, w, x);
}

/* MXFP4 keeps 8 float lanes per output and no GEMM: in the order above
 * its dot product took 16% more time (the E8M0 scales), and gpt-oss decode
 * is what it is used for. */
static void vec_dot_mxfp4(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_mxfp4 *b = w;
	const moe_block_q8_0 *y = x;
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / MOE_QK; i++) {
		__m256i p = dot_s8(book32(moe_kvalues_mxfp4, b[i].qs),
				   _mm256_loadu_si256((const void *)y[i].qs));
		float d = moe_e8m0_to_f32_half(b[i].e) * _cvtsh_ss(y[i].d);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
}

/* Q4_1 / Q5_1: x = d * q + m with Q8_1 activations: d * dy * sum(q y) +
 * m * dy * sum(y), the code sums recomputed (Q8_1's s is rounded). */
INLINE void q51_dot(const int five, int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q8_1 *y = x;
	const size_t bs = five ? sizeof(moe_block_q5_1) : sizeof(moe_block_q4_1);
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / MOE_QK; i++) {
		const uint8_t *b = (const uint8_t *)w + i * bs;
		__m256i q = nibbles32(b + (five ? offsetof(moe_block_q5_1, qs)
					       : offsetof(moe_block_q4_1, qs)));
		if (five)
			q = _mm256_or_si256(q, q5_high(b + offsetof(moe_block_q5_1, qh)));
		__m256i xv = _mm256_loadu_si256((const void *)y[i].qs);
		__m256i p = dot_u8s8(q, xv);
		__m256i sx = dot_u8s8(_mm256_set1_epi8(1), xv);
		float dy = _cvtsh_ss(y[i].d);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(b) * dy), acc);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sx), _mm256_set1_ps(h2f(b + 2) * dy), acc);
	}
	*s = hsum8(acc);
}

static void vec_dot_q4_1(int64_t n, float *s, const void *w, const void *x)
{
	q51_dot(0, n, s, w, x);
}

static void vec_dot_q5_1(int64_t n, float *s, const void *w, const void *x)
{
	q51_dot(1, n, s, w, x);
}

/* ---------------------------------------------------------------- K-quants */

/* The K-quant reduction order (batch invariance): each super-block is
 * reduced to exact integers isum = sum_g sc_g dot_g and msum = sum_g m_g
 * bsum_g, then every output runs acc = fma(isum, d dy, acc); acc =
 * fnmadd(msum, dmin dy, acc) from +0, super-block after super-block.  The
 * dot products below and the tiled GEMM (rows in lanes) both do exactly
 * this, so a token gets the same bits batched or alone. */
INLINE __m128 ksb_step(__m128 acc, int32_t isum, int32_t msum, float d, float dmin, float dy)
{
	acc = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), isum),
			   _mm_mul_ss(_mm_set_ss(d), _mm_set_ss(dy)), acc);
	return _mm_fnmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), msum),
			     _mm_mul_ss(_mm_set_ss(dmin), _mm_set_ss(dy)), acc);
}


/* Q4_K / Q5_K: per 64 elements j, the low nibbles of qs[32j .. 32j+31] are
 * group 2j and the high nibbles group 2j+1; the integer scales multiply
 * through vpmaddwd and the minimums use the bsums. */
INLINE void k45_dot(const int five, int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q8_k *y = x;
	const size_t bsz = five ? sizeof(moe_block_q5_k) : sizeof(moe_block_q4_k);
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m128 acc = _mm_setzero_ps();

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		const uint8_t *b = (const uint8_t *)w + i * bsz;
		const uint8_t *qs = b + (five ? offsetof(moe_block_q5_k, qs)
					      : offsetof(moe_block_q4_k, qs));
		uint32_t u[4];
		uint8_t sc[8], m[8];
		moe_k4_unpack_scales(b + 4, u);
		memcpy(sc, u, 8);
		memcpy(m, u + 2, 8);
		__m256i qh = _mm256_setzero_si256();
		if (five)
			qh = _mm256_loadu_si256((const void *)(b + offsetof(moe_block_q5_k, qh)));
		__m256i sumi = _mm256_setzero_si256();
		for (int j = 0; j < 4; j++) {
			__m256i q = _mm256_loadu_si256((const void *)(qs + 32 * j));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			if (five) {
				/* Bit 2j / 2j+1 of each qh byte becomes bit 4. */
				__m256i one = _mm256_set1_epi8(1);
				__m256i hl = _mm256_srli_epi16(qh, 2 * j);
				__m256i hh = _mm256_srli_epi16(qh, 2 * j + 1);
				hl = _mm256_and_si256(hl, one);
				hh = _mm256_and_si256(hh, one);
				lo = _mm256_or_si256(lo, _mm256_slli_epi16(hl, 4));
				hi = _mm256_or_si256(hi, _mm256_slli_epi16(hh, 4));
			}
			__m256i xl = _mm256_loadu_si256((const void *)(y[i].qs + 64 * j));
			__m256i xh = _mm256_loadu_si256((const void *)(y[i].qs + 64 * j + 32));
			__m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl),
						       _mm256_set1_epi16(sc[2 * j]));
			__m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh),
						       _mm256_set1_epi16(sc[2 * j + 1]));
			sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
		}
		int summ = 0;
		for (int g = 0; g < 8; g++)
			summ += m[g] * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
		/* The reduction order the tiled GEMM shares (see below). */
		acc = ksb_step(acc, hsum8i(sumi), summ, _cvtsh_ss(ld16(b)), _cvtsh_ss(ld16(b + 2)),
			       y[i].d);
	}
	*s = _mm_cvtss_f32(acc);
}

static void vec_dot_q4_k(int64_t n, float *s, const void *w, const void *x)
{
	k45_dot(0, n, s, w, x);
}

static void vec_dot_q5_k(int64_t n, float *s, const void *w, const void *x)
{
	k45_dot(1, n, s, w, x);
}

/* Q6_K: 32 elements k of each half h are nibble k/2 of ql[64h + 32(k%2)
 * ..] with bits 2k, 2k+1 of qh[32h ..] on top; groups of 16, so the two
 * 16-lane halves of a 32-element vector take scales g and g+1. */
static void vec_dot_q6_k(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q6_k *b = w;
	const moe_block_q8_k *y = x;
	const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
	__m128 acc = _mm_setzero_ps();

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		__m256i sumi = _mm256_setzero_si256();
		int off = 0;
		for (int h = 0; h < 2; h++) {
			__m256i qh = _mm256_loadu_si256((const void *)(b[i].qh + 32 * h));
			for (int k = 0; k < 4; k++) {
				__m256i ql = _mm256_loadu_si256(
					(const void *)(b[i].ql + 64 * h + 32 * (k % 2)));
				if (k / 2)
					ql = _mm256_srli_epi16(ql, 4);
				__m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);
				__m256i q = _mm256_or_si256(_mm256_and_si256(ql, m4),
							    _mm256_slli_epi16(hb, 4));
				int g = 8 * h + 2 * k;
				__m256i scv = _mm256_setr_m128i(_mm_set1_epi16(b[i].scales[g]),
								_mm_set1_epi16(b[i].scales[g + 1]));
				const int8_t *xp = y[i].qs + 128 * h + 32 * k;
				__m256i xq = _mm256_loadu_si256((const void *)xp);
				sumi = _mm256_add_epi32(
					sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), scv));
			}
		}
		for (int g = 0; g < 16; g++)
			off += b[i].scales[g] * y[i].bsums[g];
		acc = ksb_step(acc, hsum8i(sumi) - 32 * off, 0, _cvtsh_ss(b[i].d), 0.0f, y[i].d);
	}
	*s = _mm_cvtss_f32(acc);
}

/* Q2_K and Q3_K: element 128h + 32j + l (l < 32) is 2-bit field j of
 * qs[32h + l]; groups of 16, so the two 16-byte halves of 32 elements take
 * scales g and g+1 through vpmaddwd.  Q2_K: x = d * sc * q - dmin * m (the
 * minimums through bsums); Q3_K: the third bit (bit 4h + j of hmask[l]) set
 * adds 4 to q, and x = d * (sc - 32) * (q - 4), the -4 through bsums. */
INLINE void k23_dot(const int three, int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q8_k *y = x;
	const size_t bsz = three ? sizeof(moe_block_q3_k) : sizeof(moe_block_q2_k);
	const __m256i m2 = _mm256_set1_epi8(3);
	__m128 acc = _mm_setzero_ps();

	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		const uint8_t *b = (const uint8_t *)w + i * bsz;
		const uint8_t *qs = b + (three ? offsetof(moe_block_q3_k, qs)
					       : offsetof(moe_block_q2_k, qs));
		int16_t sc[16];
		int32_t off = 0;
		for (int g = 0; g < 16; g++) {
			if (three) {
				sc[g] = (int16_t)(moe_k3_scale(b + offsetof(moe_block_q3_k, scales), g) - 32);
				off += sc[g] * 4 * y[i].bsums[g];
			} else {
				sc[g] = (int16_t)(b[g] & 0x0F);
				off += (b[g] >> 4) * y[i].bsums[g];
			}
		}
		__m256i sumi = _mm256_setzero_si256();
		for (int h = 0; h < 2; h++) {
			__m256i q = _mm256_loadu_si256((const void *)(qs + 32 * h));
			__m256i hm = three ? _mm256_loadu_si256((const void *)(b + offsetof(
							     moe_block_q3_k, hmask)))
					   : _mm256_setzero_si256();
			for (int j = 0; j < 4; j++) {
				__m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m2);
				if (three) {
					__m256i hb = _mm256_and_si256(
						_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
					u = _mm256_add_epi8(u, _mm256_slli_epi16(hb, 2));
				}
				int g = 8 * h + 2 * j;
				__m256i scv = _mm256_setr_m128i(_mm_set1_epi16(sc[g]),
								_mm_set1_epi16(sc[g + 1]));
				__m256i xq = _mm256_loadu_si256(
					(const void *)(y[i].qs + 128 * h + 32 * j));
				sumi = _mm256_add_epi32(
					sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u, xq), scv));
			}
		}
		/* The K-quant order: exact isum (Q3_K's -4 offsets in it) and
		 * Q2_K's msum, then ksb_step. */
		float d = h2f(b + (three ? offsetof(moe_block_q3_k, d) : offsetof(moe_block_q2_k, d)));
		if (three)
			acc = ksb_step(acc, hsum8i(sumi) - off, 0, d, 0.0f, y[i].d);
		else
			acc = ksb_step(acc, hsum8i(sumi), off, d,
				       h2f(b + offsetof(moe_block_q2_k, dmin)), y[i].d);
	}
	*s = _mm_cvtss_f32(acc);
}

static void vec_dot_q2_k(int64_t n, float *s, const void *w, const void *x)
{
	k23_dot(0, n, s, w, x);
}

static void vec_dot_q3_k(int64_t n, float *s, const void *w, const void *x)
{
	k23_dot(1, n, s, w, x);
}

/* IQ4_XS: groups of 32 over the IQ4_NL code book with 6-bit scales ls - 32;
 * group g's 16 code bytes at qs[16g] hold elements 32g + l (low nibbles)
 * and 32g + 16 + l (high). */
static void vec_dot_iq4_xs(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_iq4_xs *b = w;
	const moe_block_q8_k *y = x;
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / MOE_QK_K; i++) {
		__m256i sumi = _mm256_setzero_si256();
		for (int g = 0; g < 8; g++) {
			int ls = ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) |
				 ((b[i].scales_h >> (2 * g)) & 3) << 4;
			__m256i p = dot_s8(book32(moe_kvalues_iq4nl, b[i].qs + 16 * g),
					   _mm256_loadu_si256((const void *)(y[i].qs + 32 * g)));
			sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, _mm256_set1_epi32(ls - 32)));
		}
		float d = _cvtsh_ss(b[i].d) * y[i].d;
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
}

/* ------------------------------------------------ prefill GEMM, K-quants
 *
 * For many tokens (Q2_K .. Q6_K), as in avx512.c: the codes of 16 weight
 * rows are unpacked once into bytes with the rows in the 32-bit lanes of
 * two vectors of 8, [k / 4][2][8 rows][4 bytes], and reused for every
 * token; vpmaddubsw multiplies four codes of 8 rows with four activation
 * codes of one token (broadcast) into 16-bit pair sums, which are added up
 * over as many steps as stay below 2^15 (Q4_K a whole group of 32:
 * 8 * 2 * 15 * 127; Q5_K 16 codes; Q6_K 8) before vpmaddwd applies the
 * group scale in 32 bits.  The integers are exact, and the float sequence
 * is ksb_step's, lane by lane.
 *
 * The register tile is 16 rows x 4 tokens (Q6_K on avx2: 3, see
 * kq2_gemm).  Zen 5 (what this was measured
 * on) issues two vector loads and two 8-bit multiplies (vpmaddubsw or
 * vpdpbusd, ymm) per cycle: a tile of 8 rows needs a load (the broadcast
 * activation) per multiply, so the loads bound it; with 16 rows each
 * broadcast serves two multiplies, and the loop over a group runs at the
 * multiplies' rate.  What is left per super-block (the minimums, the float
 * step) goes token by token, and the unpacking is unrolled whole (its
 * loops left to GCC went through the stack) with the Q4_K/Q5_K scales
 * unpacked in vectors. */

#define KSB2 4 /* super-blocks per unpacked chunk (the pack, 22 KiB, in L1) */
#define GT2 4  /* tokens per register tile */
#define KR2 16 /* rows per register tile: two vectors of 8 */

typedef struct {
	uint8_t q[KSB2][64][2][32]; /* [sb][k/4][row / 8][row % 8][4] codes */
	int32_t sc[KSB2][16][KR2];  /* [sb][group][row] scale in both 16-bit halves */
	int32_t mm[KSB2][8][KR2];   /* [sb][j][row]: Q4_K/Q5_K (j < 4) m_2j | m_2j+1 << 16,
				     * against the group sums of the activations;
				     * Q6_K -32 sc_2j | -32 sc_2j+1 << 16, Q2_K, Q3_K
				     * likewise, against the 16-element bsums */
	float d[KSB2][KR2], dmin[KSB2][KR2];
} kq2_pack;

enum { KQ2_Q4_K, KQ2_Q5_K, KQ2_Q6_K, KQ2_Q2_K, KQ2_Q3_K };

/* out[j] lane r = in[r] lane j, 8 x 8 32-bit lanes. */
INLINE void transpose8(__m256i v[8])
{
	__m256i t[8], u[8];
	MOE_UNROLL2 for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
	}
	MOE_UNROLL2 for (int i = 0; i < 2; i++) {
		u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
		u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
		u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
		u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
	}
	/* u[4i + c]: 128-bit half L holds column 4L + c of rows 4i..4i+3. */
	MOE_UNROLL2 for (int c = 0; c < 4; c++) {
		v[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
		v[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
	}
}

/* Codes 32c .. 32c+31 of one super-block of a row, in element order. */
INLINE __m256i kq2_codes(const int kind, const uint8_t *b, int c)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	if (kind == KQ2_Q2_K || kind == KQ2_Q3_K) {
		/* Element 128h + 32j + l: field j of qs[32h + l]; Q3_K adds 4
		 * where bit 4h + j of hmask[l] is set. */
		const int three = kind == KQ2_Q3_K, h = c / 4, j = c % 4;
		const size_t qs = three ? offsetof(moe_block_q3_k, qs) : offsetof(moe_block_q2_k, qs);
		__m256i q = _mm256_loadu_si256((const void *)(b + qs + 32 * h));
		q = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
		if (three) {
			__m256i hm = _mm256_loadu_si256((const void *)(b + offsetof(moe_block_q3_k, hmask)));
			hm = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
			q = _mm256_add_epi8(q, _mm256_slli_epi16(hm, 2));
		}
		return q;
	}
	if (kind == KQ2_Q6_K) {
		const moe_block_q6_k *q = (const void *)b;
		const int h = c / 4, k = c % 4;
		__m256i ql = _mm256_loadu_si256((const void *)(q->ql + 64 * h + 32 * (k % 2)));
		__m256i qh = _mm256_loadu_si256((const void *)(q->qh + 32 * h));
		ql = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (k / 2)), m4);
		qh = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
		return _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4));
	}
	const int five = kind == KQ2_Q5_K, p = c / 2, hi = c % 2;
	const size_t qs = five ? offsetof(moe_block_q5_k, qs) : offsetof(moe_block_q4_k, qs);
	__m256i q = _mm256_loadu_si256((const void *)(b + qs + 32 * p));
	q = _mm256_and_si256(_mm256_srli_epi16(q, 4 * hi), m4);
	if (five) {
		__m256i h = _mm256_loadu_si256((const void *)(b + offsetof(moe_block_q5_k, qh)));
		h = _mm256_and_si256(_mm256_srli_epi16(h, c), _mm256_set1_epi8(1));
		q = _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
	}
	return q;
}

/* Software prefetch of the weight rows into L2, MOE_PF_DIST2 bytes ahead of
 * where each row of a tile is being read (avx512.c's prefetch_ahead, which
 * says why: the hardware prefetchers do not follow 16 interleaved rows). */
#define MOE_PF_DIST2 16384
INLINE void prefetch_ahead2(const uint8_t *p, size_t len)
{
	for (size_t o = 0; o < len; o += 64)
		_mm_prefetch((const char *)p + MOE_PF_DIST2 + o, _MM_HINT_T1);
}

/* Q4_K/Q5_K: the first 16 bytes of a super-block (d, dmin, the 12 packed
 * scale bytes) to the scales sc[8] as 32-bit lanes (*sc), and to the
 * minimums in pairs, m_2j | m_2j+1 << 16 in lane j < 4, with d | dmin << 16
 * in lane 4 (*mdd).  The bytes as moe_k4_unpack_scales rearranges them:
 * dwords a, b, c after d, dmin. */
INLINE void k4_head(const uint8_t *p, __m256i *sc, __m256i *mdd)
{
	const __m128i v = _mm_loadu_si128((const void *)p);
	__m128i lo = _mm_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1)); /* a c b c */
	__m128i hi = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1)); /* a a b b */
	lo = _mm_and_si128(_mm_srlv_epi32(lo, _mm_setr_epi32(0, 0, 0, 4)),
			   _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
	hi = _mm_and_si128(_mm_srli_epi32(hi, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
	const __m128i u = _mm_or_si128(lo, hi); /* sc 0-7, m 0-7 */
	*sc = _mm256_cvtepu8_epi32(u);
	*mdd = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(u, 8))),
				       v, 1);
}

/* Bytes of one super-block of the type. */
INLINE size_t kq2_bsize(const int kind)
{
	return kind == KQ2_Q6_K   ? sizeof(moe_block_q6_k)
	       : kind == KQ2_Q5_K ? sizeof(moe_block_q5_k)
	       : kind == KQ2_Q2_K ? sizeof(moe_block_q2_k)
	       : kind == KQ2_Q3_K ? sizeof(moe_block_q3_k)
				  : sizeof(moe_block_q4_k);
}

/* Unpack super-blocks [i0, i0 + nsb) of `rows` (<= 16) rows; missing rows
 * get zero codes and scales. */
INLINE void kq2_unpack(const int kind, kq2_pack *pk, const uint8_t *w, size_t ldw, int rows,
		       int64_t i0, int nsb)
{
	const size_t bsz = kq2_bsize(kind);
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	for (int sb = 0; sb < nsb; sb++) {
		for (int hv = 0; hv < 2; hv++) {
			const uint8_t *wh = w + (size_t)(8 * hv) * ldw + (i0 + sb) * bsz;
			const int rh = rows - 8 * hv;
			__m256i v[8];
			MOE_UNROLL2 for (int r = 0; r < 8; r++)
				if (r < rh)
					prefetch_ahead2(wh + r * ldw, bsz);
			if (kind == KQ2_Q4_K) {
				/* Transpose the packed bytes, then split the
				 * nibbles: dword j of qs[32p ..] holds codes
				 * 64p + 4j .. +3 (low nibbles) and 32 more
				 * (high), half the shuffles of transposing
				 * the codes. */
				MOE_UNROLL2 for (int p = 0; p < 4; p++) {
					MOE_UNROLL2 for (int r = 0; r < 8; r++)
						v[r] = r < rh ? _mm256_loadu_si256((const void *)(
									wh + r * ldw +
									offsetof(moe_block_q4_k, qs) + 32 * p))
							      : _mm256_setzero_si256();
					transpose8(v);
					MOE_UNROLL2 for (int j = 0; j < 8; j++) {
						_mm256_store_si256((void *)pk->q[sb][16 * p + j][hv],
								   _mm256_and_si256(v[j], m4));
						_mm256_store_si256(
							(void *)pk->q[sb][16 * p + 8 + j][hv],
							_mm256_and_si256(_mm256_srli_epi16(v[j], 4), m4));
					}
				}
			} else {
				MOE_UNROLL2 for (int c = 0; c < 8; c++) {
					MOE_UNROLL2 for (int r = 0; r < 8; r++)
						v[r] = r < rh ? kq2_codes(kind, wh + r * ldw, c)
							      : _mm256_setzero_si256();
					transpose8(v);
					MOE_UNROLL2 for (int j = 0; j < 8; j++)
						_mm256_store_si256((void *)pk->q[sb][8 * c + j][hv], v[j]);
				}
			}
			if (kind == KQ2_Q4_K || kind == KQ2_Q5_K) {
				__m256i m[8];
				MOE_UNROLL2 for (int r = 0; r < 8; r++) {
					v[r] = m[r] = _mm256_setzero_si256();
					if (r < rh)
						k4_head(wh + r * ldw, &v[r], &m[r]);
				}
				transpose8(v);
				transpose8(m);
				MOE_UNROLL2 for (int g = 0; g < 8; g++)
					_mm256_store_si256((void *)(pk->sc[sb][g] + 8 * hv),
							   _mm256_or_si256(v[g], _mm256_slli_epi32(v[g], 16)));
				MOE_UNROLL2 for (int j = 0; j < 4; j++)
					_mm256_store_si256((void *)(pk->mm[sb][j] + 8 * hv), m[j]);
				const __m256i dl = _mm256_and_si256(m[4], _mm256_set1_epi32(0xFFFF));
				const __m256i dh = _mm256_srli_epi32(m[4], 16);
				_mm256_store_ps(pk->d[sb] + 8 * hv,
						_mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(dl),
										 _mm256_extracti128_si256(dl, 1))));
				_mm256_store_ps(pk->dmin[sb] + 8 * hv,
						_mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(dh),
										 _mm256_extracti128_si256(dh, 1))));
			}
			if (kind == KQ2_Q6_K) {
				/* The 16 signed scales as 32-bit lanes (groups 0-7,
				 * 8-15) and, times -32, as 16-bit pairs. */
				__m256i hi[8], mm[8];
				float d[8];
				MOE_UNROLL2 for (int r = 0; r < 8; r++) {
					v[r] = hi[r] = mm[r] = _mm256_setzero_si256();
					d[r] = 0.0f;
					if (r >= rh)
						continue;
					const moe_block_q6_k *q = (const void *)(wh + r * ldw);
					const __m128i sc = _mm_loadu_si128((const void *)q->scales);
					v[r] = _mm256_cvtepi8_epi32(sc);
					hi[r] = _mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8));
					mm[r] = _mm256_sub_epi16(_mm256_setzero_si256(),
								 _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5));
					d[r] = _cvtsh_ss(q->d);
				}
				transpose8(v);
				transpose8(hi);
				transpose8(mm);
				const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
				MOE_UNROLL2 for (int g = 0; g < 8; g++) {
					_mm256_store_si256((void *)(pk->sc[sb][g] + 8 * hv),
							   _mm256_or_si256(_mm256_and_si256(v[g], lo16),
									   _mm256_slli_epi32(v[g], 16)));
					_mm256_store_si256((void *)(pk->sc[sb][8 + g] + 8 * hv),
							   _mm256_or_si256(_mm256_and_si256(hi[g], lo16),
									   _mm256_slli_epi32(hi[g], 16)));
					_mm256_store_si256((void *)(pk->mm[sb][g] + 8 * hv), mm[g]);
				}
				_mm256_store_ps(pk->d[sb] + 8 * hv, _mm256_loadu_ps(d));
				_mm256_store_ps(pk->dmin[sb] + 8 * hv, _mm256_setzero_ps());
			}
		}
		for (int r = 0; (kind == KQ2_Q2_K || kind == KQ2_Q3_K) && r < KR2; r++) {
			const uint8_t *b = w + r * ldw + (i0 + sb) * bsz;
			if (r >= rows) {
				for (int g = 0; g < 16; g++)
					pk->sc[sb][g][r] = 0;
				for (int j = 0; j < 8; j++)
					pk->mm[sb][j][r] = 0;
				pk->d[sb][r] = pk->dmin[sb][r] = 0.0f;
				continue;
			}
			/* Q2_K, Q3_K: scalar (rare types). */
			const int three = kind == KQ2_Q3_K;
			int16_t sc[16], mn[16];
			for (int g = 0; g < 16; g++) {
				if (three) {
					sc[g] = (int16_t)(moe_k3_scale(b + offsetof(moe_block_q3_k, scales), g) -
							  32);
					mn[g] = (int16_t)(-4 * sc[g]);
				} else {
					sc[g] = (int16_t)(b[g] & 0x0F);
					mn[g] = (int16_t)(b[g] >> 4);
				}
				pk->sc[sb][g][r] = (int32_t)((uint32_t)(uint16_t)sc[g] * 0x10001u);
			}
			for (int j = 0; j < 8; j++)
				pk->mm[sb][j][r] = (int32_t)((uint32_t)(uint16_t)mn[2 * j] |
							     (uint32_t)(uint16_t)mn[2 * j + 1] << 16);
			pk->d[sb][r] = h2f(b + (three ? offsetof(moe_block_q3_k, d)
						      : offsetof(moe_block_q2_k, d)));
			pk->dmin[sb][r] = three ? 0.0f : h2f(b + offsetof(moe_block_q2_k, dmin));
		}
	}
}

INLINE __m256i bcast32_2(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* T tokens x 16 rows over nsb unpacked super-blocks; acc[v][t] lane r is
 * the running sum of (row 8v + r, token t). */
INLINE void kq2_tile(const int kind, const int T, const kq2_pack *pk, int nsb, int64_t i0,
		     const uint8_t *x, size_t ldx, const int32_t *gs, int64_t nb,
		     __m256 acc[2][GT2])
{
	/* Steps of 4 codes per 16-bit partial sum; groups of 32 (16 for Q6_K,
	 * Q2_K, Q3_K, whose codes are at most 7: 8 products fit 16 bits). */
	const int k16 = kind == KQ2_Q6_K || kind == KQ2_Q2_K || kind == KQ2_Q3_K;
	const int ng = k16 ? 16 : 8, gl = 64 / ng;
#ifdef MOE_AVXVNNI
	/* vpdpbusd sums a whole group in 32 bits; the scale (the high 16-bit
	 * half, sign-extended) multiplies that sum once: the same integer as
	 * the 16-bit steps. */
	const int U = gl;
#else
	const int U = kind == KQ2_Q4_K ? 8 : kind == KQ2_Q5_K ? 4 : kind == KQ2_Q6_K ? 2 : 4;
#endif
	for (int sb = 0; sb < nsb; sb++) {
		const uint8_t *y0 = x + (i0 + sb) * sizeof(moe_block_q8_k);
		__m256i is[2][GT2];
		MOE_UNROLL2 for (int v = 0; v < 2; v++)
			MOE_UNROLL2 for (int t = 0; t < T; t++)
				is[v][t] = _mm256_setzero_si256();
		for (int g = 0; g < ng; g++) {
			for (int h = 0; h < gl; h += U) {
				__m256i p[2][GT2];
				MOE_UNROLL2 for (int j = 0; j < U; j++) {
					const int k4 = gl * g + h + j;
					const __m256i w0 = _mm256_load_si256((const void *)pk->q[sb][k4][0]);
					const __m256i w1 = _mm256_load_si256((const void *)pk->q[sb][k4][1]);
					MOE_UNROLL2 for (int t = 0; t < T; t++) {
						const __m256i xv = bcast32_2(
							y0 + t * ldx + offsetof(moe_block_q8_k, qs) + 4 * k4);
#ifdef MOE_AVXVNNI
						if (j == 0) {
							p[0][t] = dot_u8s8(w0, xv);
							p[1][t] = dot_u8s8(w1, xv);
						} else {
							p[0][t] = dot_u8s8_acc(p[0][t], w0, xv);
							p[1][t] = dot_u8s8_acc(p[1][t], w1, xv);
						}
#else
						const __m256i a0 = _mm256_maddubs_epi16(w0, xv);
						const __m256i a1 = _mm256_maddubs_epi16(w1, xv);
						p[0][t] = j ? _mm256_add_epi16(p[0][t], a0) : a0;
						p[1][t] = j ? _mm256_add_epi16(p[1][t], a1) : a1;
						/* A chain per sum: left alone, GCC
						 * re-associates these adds into a tree
						 * and spills the partial sums. */
						__asm__("" : "+x"(p[0][t]), "+x"(p[1][t]));
#endif
					}
				}
				MOE_UNROLL2 for (int v = 0; v < 2; v++) {
					const __m256i sc =
						_mm256_load_si256((const void *)(pk->sc[sb][g] + 8 * v));
					MOE_UNROLL2 for (int t = 0; t < T; t++) {
#ifdef MOE_AVXVNNI
						__m256i u = _mm256_mullo_epi32(p[v][t],
									       _mm256_srai_epi32(sc, 16));
#else
						__m256i u = _mm256_madd_epi16(p[v][t], sc);
#endif
						is[v][t] = _mm256_add_epi32(is[v][t], u);
					}
				}
			}
		}
		/* The minimums and the float step, token by token (few
		 * registers: the 8 group sums are live).  Q4_K/Q5_K pair their
		 * 8 minimums with the sums of the activations' 32-element
		 * groups, 4 vpmaddwd; the others theirs with the 16 bsums, 8;
		 * Q6_K's -32 and Q3_K's -4 offsets belong to isum. */
		const int k45 = kind == KQ2_Q4_K || kind == KQ2_Q5_K;
		MOE_UNROLL2 for (int t = 0; t < T; t++) {
			const uint8_t *y = y0 + t * ldx;
			/* Q4_K/Q5_K: the token's group sums as 16-bit pairs,
			 * made once per call (kq2_group_sums); the others the
			 * bsums themselves.  Read from memory, each pair is
			 * a broadcast load, no shuffle. */
			const int32_t *bp =
				k45 ? gs + ((size_t)t * (size_t)nb + (size_t)(i0 + sb)) * 4
				    : (const int32_t *)(const void *)(y + offsetof(moe_block_q8_k, bsums));
			float dy;
			memcpy(&dy, y + offsetof(moe_block_q8_k, d), 4);
			MOE_UNROLL2 for (int v = 0; v < 2; v++) {
				/* (Unrolled, summed as a tree: exact integers.) */
				__m256i pr[8];
				MOE_UNROLL2 for (int j = 0; j < 8; j++)
					pr[j] = j < 4 || !k45
							? _mm256_madd_epi16(
								  _mm256_load_si256(
									  (const void *)(pk->mm[sb][j] + 8 * v)),
								  bcast32_2((const uint8_t *)(bp + j)))
							: _mm256_setzero_si256();
				__m256i ms = _mm256_add_epi32(_mm256_add_epi32(pr[0], pr[1]),
							      _mm256_add_epi32(pr[2], pr[3]));
				if (!k45)
					ms = _mm256_add_epi32(ms, _mm256_add_epi32(
									  _mm256_add_epi32(pr[4], pr[5]),
									  _mm256_add_epi32(pr[6], pr[7])));
				__m256i isum = is[v][t];
				if (kind == KQ2_Q6_K || kind == KQ2_Q3_K) {
					isum = _mm256_add_epi32(isum, ms);
					ms = _mm256_setzero_si256();
				}
				const __m256 d = _mm256_load_ps(pk->d[sb] + 8 * v);
				const __m256 dmin = _mm256_load_ps(pk->dmin[sb] + 8 * v);
				__m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
							   _mm256_mul_ps(d, _mm256_set1_ps(dy)), acc[v][t]);
				acc[v][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms),
							     _mm256_mul_ps(dmin, _mm256_set1_ps(dy)), a);
			}
		}
	}
}

/* Q4_K/Q5_K: every (token, super-block)'s 8 group sums of the activations
 * (bsums 2j + 2j+1, at most 4064 in magnitude) as 16-bit pairs, gs[(t * nb
 * + i) * 4 + j] = sum_2j | sum_2j+1 << 16: made once per call instead of
 * once per 16-row tile, which each tile's minimums then read. */
INLINE void kq2_group_sums(int32_t *gs, const uint8_t *x, size_t ldx, int nt, int64_t nb)
{
	for (int t = 0; t < nt; t++)
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *y = x + (size_t)t * ldx + i * sizeof(moe_block_q8_k);
			__m256i g = _mm256_madd_epi16(
				_mm256_loadu_si256((const void *)(y + offsetof(moe_block_q8_k, bsums))),
				_mm256_set1_epi16(1));
			g = _mm256_packs_epi32(g, g);
			_mm_storeu_si128((void *)(gs + ((size_t)t * (size_t)nb + (size_t)i) * 4),
					 _mm256_castsi256_si128(_mm256_permute4x64_epi64(g, 0x08)));
		}
}

/* The chunk after (r0, i0)'s (the next super-blocks of the same rows, or
 * the next rows' first) into L1, one line per 64 bytes of each row. */
INLINE void kq2_prefetch_next(const int kind, const uint8_t *w, size_t ldw, int nr, int r0,
			      int64_t i0, int64_t nb)
{
	const size_t bsz = kq2_bsize(kind);
	if (i0 + KSB2 < nb) {
		i0 += KSB2;
	} else {
		i0 = 0;
		r0 += KR2;
	}
	if (r0 >= nr)
		return;
	const int rows = nr - r0 < KR2 ? nr - r0 : KR2;
	const int nsb = nb - i0 < KSB2 ? (int)(nb - i0) : KSB2;
	const uint8_t *p = w + (size_t)r0 * ldw + (size_t)i0 * bsz;
	for (int r = 0; r < rows; r++)
		for (size_t o = 0; o < nsb * bsz; o += 64)
			_mm_prefetch((const char *)p + r * ldw + o, _MM_HINT_T0);
}

/* false (nothing done) when no work buffer could be had. */
INLINE bool kq2_gemm(const int kind, int64_t n, int nr, int nt, const void *wp, size_t ldw,
		     const void *xp, size_t ldx, float *s, size_t lds)
{
	const uint8_t *w = wp, *x = xp;
	const int64_t nb = n / MOE_QK_K;
	kq2_pack pk __attribute__((aligned(32)));
	int32_t *gs = NULL;
	if (kind == KQ2_Q4_K || kind == KQ2_Q5_K) {
		gs = moe_kernels_work_buffer((size_t)nt * (size_t)nb * 16);
		if (!gs)
			return false;
		kq2_group_sums(gs, x, ldx, nt, nb);
	}

	/* Tokens per tile.  Q6_K without VNNI takes 3: its vpmaddwd every
	 * two steps keeps 8 16-bit sums live beside the 8 group sums at 4
	 * tokens, and GCC spilled the group sums to the stack every two steps
	 * (bench-kernels q6_k, cached: 227-247 -> 259-264 GFLOP/s; 2 tokens
	 * gave 255-260).  Q5_K (a vpmaddwd every four steps) gained nothing. */
#ifdef MOE_AVXVNNI
	const int gt = GT2;
#else
	const int gt = kind == KQ2_Q6_K ? 3 : GT2;
#endif
	for (int r0 = 0; r0 < nr; r0 += KR2) {
		const int rows = nr - r0 < KR2 ? nr - r0 : KR2;
		__m256i m[2];
		for (int v = 0; v < 2; v++)
			m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows - 8 * v),
						  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
		for (int64_t i0 = 0; i0 < nb; i0 += KSB2) {
			const int nsb = nb - i0 < KSB2 ? (int)(nb - i0) : KSB2;
			kq2_unpack(kind, &pk, w + (size_t)r0 * ldw, ldw, rows, i0, nsb);
			for (int t0 = 0; t0 < nt; t0 += gt) {
				const int T = nt - t0 < gt ? nt - t0 : gt;
				/* Before the chunk's last tokens, the next chunk's
				 * rows into L1: prefetched into L2 long before,
				 * they had been pushed out of L1 by the
				 * activations, and the unpacking's loads of them
				 * stalled (perf: 5% of q4_k_gemm's samples). */
				if (t0 + gt >= nt)
					kq2_prefetch_next(kind, w, ldw, nr, r0, i0, nb);
				float *st = s + (size_t)t0 * lds + r0;
				const uint8_t *xt = x + (size_t)t0 * ldx;
				const int32_t *gst = gs ? gs + (size_t)t0 * (size_t)nb * 4 : NULL;
				__m256 acc[2][GT2];
				for (int v = 0; v < 2; v++)
					for (int t = 0; t < T; t++)
						acc[v][t] = i0 ? _mm256_maskload_ps(st + t * lds + 8 * v, m[v])
							    : _mm256_setzero_ps();
				switch (T) {
				case 1: kq2_tile(kind, 1, &pk, nsb, i0, xt, ldx, gst, nb, acc); break;
				case 2: kq2_tile(kind, 2, &pk, nsb, i0, xt, ldx, gst, nb, acc); break;
				case 3: kq2_tile(kind, 3, &pk, nsb, i0, xt, ldx, gst, nb, acc); break;
				default: kq2_tile(kind, 4, &pk, nsb, i0, xt, ldx, gst, nb, acc); break;
				}
				for (int v = 0; v < 2; v++)
					for (int t = 0; t < T; t++)
						_mm256_maskstore_ps(st + t * lds + 8 * v, m[v], acc[v][t]);
			}
		}
	}
	return true;
}

/* Below this many tokens the dot products (same bits, no unpacking).  The
 * tile is faster from 2 tokens on (a batched decoding step: an expert gets
 * a few tokens): each token's dot product decodes and reads the weights
 * again, the tile once (2048 x 1024, weights from memory, CPU time, µs
 * for 2 / 3 tokens: Q4_K 143 / 225 -> 70 / 79, Q5_K 180 / 255 -> 99 / 105,
 * Q6_K 196 / 298 -> 136 / 141).  A tile of two rows per vector for 2-3
 * tokens, as avx512.c's four-rows tile, gave the same bits but was no
 * faster than this from memory (Q4_K 78 / 79). */
#define KQ2_MIN_TOKENS 2

#define MOE_KQ2_GEMM(name, kind)                                                               \
	static void name##_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw,          \
				const void *x, size_t ldx, float *s, size_t lds)               \
	{                                                                                      \
		if (nt >= KQ2_MIN_TOKENS && kq2_gemm(kind, n, nr, nt, w, ldw, x, ldx, s, lds)) \
			return;                                                                \
		for (int t = 0; t < nt; t++)                                                   \
			for (int r = 0; r < nr; r++)                                           \
				vec_dot_##name(n, s + t * lds + r, (const uint8_t *)w + r * ldw,   \
					       (const uint8_t *)x + t * ldx);                      \
	}
MOE_KQ2_GEMM(q4_k, KQ2_Q4_K)
MOE_KQ2_GEMM(q5_k, KQ2_Q5_K)
MOE_KQ2_GEMM(q6_k, KQ2_Q6_K)
MOE_KQ2_GEMM(q2_k, KQ2_Q2_K)
MOE_KQ2_GEMM(q3_k, KQ2_Q3_K)

/* The tiled GEMM for the X_ types: 8 rows' values unpacked once,
 * [block][k / 4][8 rows][4 bytes], reused for every token.  Q8_0 and IQ4_NL
 * values (up to 127 in magnitude) go in as |w| with the sign of w moved
 * onto the broadcast activation codes (vpsignb), so vpmaddubsw's pairs stay
 * within 16 bits.  Q4_0 and Q5_0 go in as their unsigned codes q, whose
 * products are summed in 16 bits over 8 (Q4_0: 8 * 2 * 15 * 127 < 2^15) or
 * 4 (Q5_0) steps, and the offset comes off once per block and token:
 * S_b = sum q x - off * sum x, the same integer as sum (q - off) x, with
 * sum x of every (token, block) taken once per call. */
#define GT3 4

INLINE int b32x_off(const int kind)
{
	return kind == X_Q4_0 ? 8 : kind == X_Q5_0 ? 16 : 0;
}

INLINE void b32x_unpack(const int kind, uint8_t *wa, uint8_t *ws, float *wd, const uint8_t *w,
			size_t ldw, int rows, int64_t nb)
{
	const size_t bs = b32x_bsize(kind);
	const int off = b32x_off(kind);
	for (int64_t i = 0; i < nb; i++) {
		__m256i v[8];
		/* The rows come from memory once (an expert's product): the
		 * load stalled here took 7% of the Q8_0 tile's time in
		 * mixtral-s-q8_0 pp512 without a prefetch, and still 5.6% with
		 * one 16 KiB ahead into L2.  So, one line of each row per 64
		 * bytes of blocks: the next tile's rows into L2 (a whole tile's
		 * products ahead; past the last row a prefetch is harmless), and
		 * this tile's rows 256 bytes ahead into L1, as the tile's
		 * activations have pushed them out of L1 since. */
		if ((i * bs) % 64 < bs)
			for (int r = 0; r < rows; r++) {
				_mm_prefetch((const char *)w + (r + 8) * ldw + i * bs, _MM_HINT_T1);
				_mm_prefetch((const char *)w + r * ldw + i * bs + 256, _MM_HINT_T0);
			}
		for (int r = 0; r < 8; r++)
			v[r] = r < rows ? b32x_values(kind, w + r * ldw + i * bs) : _mm256_setzero_si256();
		transpose8(v);
		for (int j = 0; j < 8; j++) {
			if (off) {
				/* Rows past the last get codes 0, not off: zero
				 * sums either way, as the outputs are masked. */
				_mm256_store_si256((void *)(wa + (i * 8 + j) * 32),
						   _mm256_add_epi8(v[j], _mm256_set1_epi8((char)off)));
				continue;
			}
			_mm256_store_si256((void *)(ws + (i * 8 + j) * 32), v[j]);
			_mm256_store_si256((void *)(wa + (i * 8 + j) * 32), _mm256_sign_epi8(v[j], v[j]));
		}
		for (int r = 0; r < 8; r++)
			wd[i * 8 + r] = r < rows ? h2f(w + r * ldw + i * bs) : 0.0f;
	}
}

INLINE void b32x_tile(const int kind, const int T, const uint8_t *wa, const uint8_t *ws,
		      const float *wd, int64_t nb, const uint8_t *x, size_t ldx, const int32_t *sx,
		      const float *dx, float *s, size_t lds, __m256i m)
{
	const int off = b32x_off(kind);
	__m256 P[GT3][8];
	/* Partial j takes blocks j, j + 8, ... in order, as in the dot
	 * product; one partial at a time, so the T partials being summed stay
	 * in registers (all 8 of 4 tokens, 32 vectors, went through the stack
	 * every block). */
	for (int j = 0; j < 8; j++) {
		__m256 Pj[GT3];
		MOE_UNROLL2 for (int t = 0; t < T; t++)
			Pj[t] = _mm256_setzero_ps();
		for (int64_t i = j; i < nb; i += 8) {
			__m256i u[GT3];
			MOE_UNROLL2 for (int t = 0; t < T; t++)
				u[t] = _mm256_setzero_si256();
			if (off) {
#ifdef MOE_AVXVNNI
				MOE_UNROLL2 for (int k4 = 0; k4 < 8; k4++) {
					const __m256i a =
						_mm256_load_si256((const void *)(wa + (i * 8 + k4) * 32));
					MOE_UNROLL2 for (int t = 0; t < T; t++)
						u[t] = _mm256_dpbusd_avx_epi32(
							u[t], a,
							bcast32_2(x + t * ldx + i * 34 + 2 + 4 * k4));
				}
#else
				const int C = off == 8 ? 8 : 4; /* steps per 16-bit sum */
				MOE_UNROLL2 for (int c = 0; c < 8; c += C) {
					__m256i p[GT3];
					MOE_UNROLL2 for (int t = 0; t < T; t++)
						p[t] = _mm256_setzero_si256();
					MOE_UNROLL2 for (int k4 = c; k4 < c + C; k4++) {
						const __m256i a =
							_mm256_load_si256((const void *)(wa + (i * 8 + k4) * 32));
						MOE_UNROLL2 for (int t = 0; t < T; t++) {
							p[t] = _mm256_add_epi16(
								p[t], _mm256_maddubs_epi16(
									      a, bcast32_2(x + t * ldx + i * 34 + 2 +
											   4 * k4)));
							/* a chain (see kq2_tile) */
							__asm__("" : "+x"(p[t]));
						}
					}
					MOE_UNROLL2 for (int t = 0; t < T; t++)
						u[t] = _mm256_add_epi32(
							u[t], _mm256_madd_epi16(p[t], _mm256_set1_epi16(1)));
				}
#endif
				MOE_UNROLL2 for (int t = 0; t < T; t++)
					u[t] = _mm256_sub_epi32(u[t],
								_mm256_set1_epi32(off * sx[t * nb + i]));
			} else {
				MOE_UNROLL2 for (int k4 = 0; k4 < 8; k4++) {
					const __m256i a =
						_mm256_load_si256((const void *)(wa + (i * 8 + k4) * 32));
					const __m256i sg =
						_mm256_load_si256((const void *)(ws + (i * 8 + k4) * 32));
					MOE_UNROLL2 for (int t = 0; t < T; t++) {
						__m256i xv = bcast32_2(x + t * ldx + i * 34 + 2 + 4 * k4);
						u[t] = dot_u8s8_acc(u[t], a, _mm256_sign_epi8(xv, sg));
#ifndef MOE_AVXVNNI
						/* A chain per sum: left alone, GCC makes the
						 * adds a tree and spills its partial sums
						 * (vpdpbusd accumulates itself; the chain
						 * there cost 3%). */
						__asm__("" : "+x"(u[t]));
#endif
					}
				}
			}
			const __m256 d = _mm256_load_ps(wd + i * 8);
			MOE_UNROLL2 for (int t = 0; t < T; t++) {
				const __m256 dxv = _mm256_broadcast_ss(dx + t * nb + i);
				Pj[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[t]), _mm256_mul_ps(d, dxv),
							Pj[t]);
			}
		}
		MOE_UNROLL2 for (int t = 0; t < T; t++)
			P[t][j] = Pj[t];
	}
	/* hsum8's order across the partials. */
	for (int t = 0; t < T; t++) {
		__m256 a0 = _mm256_add_ps(P[t][0], P[t][4]), a1 = _mm256_add_ps(P[t][1], P[t][5]);
		__m256 a2 = _mm256_add_ps(P[t][2], P[t][6]), a3 = _mm256_add_ps(P[t][3], P[t][7]);
		__m256 b0 = _mm256_add_ps(a0, a2), b1 = _mm256_add_ps(a1, a3);
		_mm256_maskstore_ps(s + t * lds, m, _mm256_add_ps(b0, b1));
	}
}

/* false (nothing done) when no work buffer could be had. */
INLINE bool b32x_gemm(const int kind, int64_t n, int nr, int nt, const uint8_t *w, size_t ldw,
		      const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / MOE_QK;
	const size_t ntb = (size_t)nt * (size_t)nb, nsx = b32x_off(kind) ? ntb : 0;
	uint8_t *buf = moe_kernels_work_buffer(2 * 8 * (size_t)n + 32 * (size_t)nb + 4 * ntb +
					       4 * nsx);
	if (!buf)
		return false;
	uint8_t *wa = buf, *ws = buf + 8 * n;
	float *wd = (float *)(buf + 16 * n);
	float *dx = (float *)(buf + 16 * n + 32 * nb);
	int32_t *sx = (int32_t *)(buf + 16 * n + 32 * nb + 4 * ntb);
	/* The activations' scales as floats, converted once per call instead
	 * of once per 8-row tile (a scalar conversion and a broadcast per
	 * block and token, a tenth of the Q8_0 tile's instructions). */
	for (size_t k = 0; k < ntb; k++)
		dx[k] = h2f(x + (k / nb) * ldx + (k % nb) * 34);
	/* sum x of every (token, block), for the Q4_0/Q5_0 offsets. */
	for (size_t k = 0; k < nsx; k++) {
		const uint8_t *xb = x + (k / nb) * ldx + (k % nb) * 34 + 2;
		sx[k] = hsum8i(dot_u8s8(_mm256_set1_epi8(1), _mm256_loadu_si256((const void *)xb)));
	}
	for (int r0 = 0; r0 < nr; r0 += 8) {
		const int rows = nr - r0 < 8 ? nr - r0 : 8;
		const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows),
						     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
		b32x_unpack(kind, wa, ws, wd, w + (size_t)r0 * ldw, ldw, rows, nb);
		for (int t0 = 0; t0 < nt; t0 += GT3) {
			const int T = nt - t0 < GT3 ? nt - t0 : GT3;
			const uint8_t *xt = x + (size_t)t0 * ldx;
			const int32_t *sxt = sx + (size_t)t0 * nb;
			const float *dxt = dx + (size_t)t0 * nb;
			float *st = s + (size_t)t0 * lds + r0;
			switch (T) {
			case 1: b32x_tile(kind, 1, wa, ws, wd, nb, xt, ldx, sxt, dxt, st, lds, m); break;
			case 2: b32x_tile(kind, 2, wa, ws, wd, nb, xt, ldx, sxt, dxt, st, lds, m); break;
			case 3: b32x_tile(kind, 3, wa, ws, wd, nb, xt, ldx, sxt, dxt, st, lds, m); break;
			default: b32x_tile(kind, 4, wa, ws, wd, nb, xt, ldx, sxt, dxt, st, lds, m); break;
			}
		}
	}
	return true;
}

#define MOE_B32X_GEMM(name, kind)                                                                \
	static void name##_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw,          \
				const void *x, size_t ldx, float *s, size_t lds)               \
	{                                                                                      \
		if (nt >= 4 && b32x_gemm(kind, n, nr, nt, w, ldw, x, ldx, s, lds))             \
			return;                                                                \
		for (int t = 0; t < nt; t++)                                                   \
			for (int r = 0; r < nr; r++)                                           \
				vec_dot_##name(n, s + t * lds + r, (const uint8_t *)w + r * ldw,   \
					       (const uint8_t *)x + t * ldx);                      \
	}

MOE_B32X_GEMM(q8_0, X_Q8_0)
MOE_B32X_GEMM(q4_0, X_Q4_0)
MOE_B32X_GEMM(q5_0, X_Q5_0)
MOE_B32X_GEMM(iq4_nl, X_IQ4_NL)

/* ------------------------------------------------ prefill GEMM, float weights
 *
 * float_dot's order kept per output (four partial vectors over 32-element
 * steps, the 8-element steps into the first, the scalar tail added after
 * hsum8); for few tokens a tile is one row and up to three tokens, so each
 * weight vector is loaded and converted once for three tokens (12
 * accumulators). */
#define GTF 3

INLINE void float_tile(const int kind, const int T, int64_t n, const uint8_t *w,
		       const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int esz = kind == 0 ? 4 : 2;
	__m256 acc[GTF][4];
	int64_t i = 0;
	MOE_UNROLL2 for (int t = 0; t < T; t++)
		for (int j = 0; j < 4; j++)
			acc[t][j] = _mm256_setzero_ps();
	for (; i + 32 <= n; i += 32)
		MOE_UNROLL2 for (int j = 0; j < 4; j++) {
			const __m256 wv = load_w8(kind, w + (i + 8 * j) * esz);
			MOE_UNROLL2 for (int t = 0; t < T; t++)
				acc[t][j] = _mm256_fmadd_ps(
					wv, _mm256_loadu_ps((const float *)(x + t * ldx) + i + 8 * j),
					acc[t][j]);
		}
	for (; i + 8 <= n; i += 8) {
		const __m256 wv = load_w8(kind, w + i * esz);
		MOE_UNROLL2 for (int t = 0; t < T; t++)
			acc[t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps((const float *)(x + t * ldx) + i),
						    acc[t][0]);
	}
	for (int t = 0; t < T; t++) {
		const float *xt = (const float *)(x + t * ldx);
		float sum = hsum8(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]),
						_mm256_add_ps(acc[t][2], acc[t][3])));
		for (int64_t k = i; k < n; k++)
			sum += load_w1(kind, w + k * esz) * xt[k];
		s[t * lds] = sum;
	}
}

/* For many tokens a bigger tile: FR rows x FT tokens, float_dot's four
 * partial sums computed one at a time (pass j takes elements 32i + 8j ..
 * +7 of every 32-element step, pass 0 then the 8-element steps), so a tile
 * needs FR * FT accumulators instead of four times as many; between passes
 * they wait in memory, and the rows and tokens of the tile (at most 3 rows
 * and 4 tokens of a few KiB) stay in L1 for the four passes.  Each weight
 * vector is converted once for 4 tokens, each activation vector loaded
 * once for 3 rows: the one-row tile needed a load and a conversion per
 * 3 multiplies, and the loads bound it. */
#define FR 3
#define FT 4

/* One 8-element step of a tile: every row's 8 weights from element i, once,
 * times every token's 8 activations, into acc. */
INLINE void float_step_rt(const int kind, const int R, const int T, int64_t i, const uint8_t *w,
			  size_t ldw, const uint8_t *x, size_t ldx, __m256 acc[FR][FT])
{
	const int esz = kind == 0 ? 4 : 2;
	__m256 wv[FR];
	MOE_UNROLL2 for (int r = 0; r < R; r++)
		wv[r] = load_w8(kind, w + r * ldw + i * esz);
	MOE_UNROLL2 for (int t = 0; t < T; t++) {
		const __m256 xv = _mm256_loadu_ps((const float *)(x + t * ldx) + i);
		MOE_UNROLL2 for (int r = 0; r < R; r++)
			acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
	}
}

INLINE void float_tile_rt(const int kind, const int R, const int T, int64_t n, const uint8_t *w,
			  size_t ldw, const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int esz = kind == 0 ? 4 : 2;
	const int64_t n32 = n / 32 * 32, n8 = n / 8 * 8;
	__m256 part[4][FR][FT];
	for (int j = 0; j < 4; j++) {
		__m256 acc[FR][FT];
		MOE_UNROLL2 for (int r = 0; r < R; r++)
			MOE_UNROLL2 for (int t = 0; t < T; t++)
				acc[r][t] = _mm256_setzero_ps();
		for (int64_t i = 8 * j; i < n32; i += 32)
			float_step_rt(kind, R, T, i, w, ldw, x, ldx, acc);
		for (int64_t i = n32; j == 0 && i < n8; i += 8)
			float_step_rt(kind, R, T, i, w, ldw, x, ldx, acc);
		MOE_UNROLL2 for (int r = 0; r < R; r++)
			MOE_UNROLL2 for (int t = 0; t < T; t++)
				part[j][r][t] = acc[r][t];
	}
	for (int r = 0; r < R; r++)
		for (int t = 0; t < T; t++) {
			const float *xt = (const float *)(x + t * ldx);
			float sum = hsum8(_mm256_add_ps(_mm256_add_ps(part[0][r][t], part[1][r][t]),
							_mm256_add_ps(part[2][r][t], part[3][r][t])));
			for (int64_t k = n8; k < n; k++)
				sum += load_w1(kind, w + r * ldw + k * esz) * xt[k];
			s[t * lds + r] = sum;
		}
}

#define FLOAT_RT_CASE(RR, TT) \
	case (RR) * 8 + (TT): \
		float_tile_rt(kind, RR, TT, n, wr, ldw, xt, ldx, st, lds); \
		break;

INLINE void float_gemm(const int kind, int64_t n, int nr, int nt, const void *wp, size_t ldw,
		       const void *xp, size_t ldx, float *s, size_t lds)
{
	const uint8_t *w = wp, *x = xp;
	if (nt >= FT) {
		for (int r0 = 0; r0 < nr; r0 += FR)
			for (int t0 = 0; t0 < nt; t0 += FT) {
				const uint8_t *wr = w + (size_t)r0 * ldw, *xt = x + (size_t)t0 * ldx;
				float *st = s + (size_t)t0 * lds + r0;
				const int R = nr - r0 < FR ? nr - r0 : FR;
				const int T = nt - t0 < FT ? nt - t0 : FT;
				switch (R * 8 + T) {
					FLOAT_RT_CASE(1, 1) FLOAT_RT_CASE(1, 2) FLOAT_RT_CASE(1, 3)
					FLOAT_RT_CASE(1, 4) FLOAT_RT_CASE(2, 1) FLOAT_RT_CASE(2, 2)
					FLOAT_RT_CASE(2, 3) FLOAT_RT_CASE(2, 4) FLOAT_RT_CASE(3, 1)
					FLOAT_RT_CASE(3, 2) FLOAT_RT_CASE(3, 3)
				default:
					float_tile_rt(kind, 3, 4, n, wr, ldw, xt, ldx, st, lds);
					break;
				}
			}
		return;
	}
	for (int r = 0; r < nr; r++)
		for (int t0 = 0; t0 < nt; t0 += GTF) {
			const uint8_t *wr = w + (size_t)r * ldw, *xt = x + (size_t)t0 * ldx;
			float *st = s + (size_t)t0 * lds + r;
			switch (nt - t0 < GTF ? nt - t0 : GTF) {
			case 1: float_tile(kind, 1, n, wr, xt, ldx, st, lds); break;
			case 2: float_tile(kind, 2, n, wr, xt, ldx, st, lds); break;
			default: float_tile(kind, 3, n, wr, xt, ldx, st, lds); break;
			}
		}
}

static void f32_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
		     size_t ldx, float *s, size_t lds)
{
	float_gemm(0, n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void f16_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
		     size_t ldx, float *s, size_t lds)
{
	float_gemm(1, n, nr, nt, w, ldw, x, ldx, s, lds);
}

static void bf16_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
		      size_t ldx, float *s, size_t lds)
{
	float_gemm(2, n, nr, nt, w, ldw, x, ldx, s, lds);
}

/* ------------------------------------ prefill GEMM, the lane-order types
 *
 * MXFP4, Q4_1, Q5_1 and IQ4_XS keep their dot products' order (above):
 * every output has 8 float partials, partial l taking slice l (elements
 * 4l .. 4l+3, lane l of dot_u8s8) of each 32-element group, fma'd block
 * after block (IQ4_XS: super-block; its group integers scaled and summed
 * exactly first), then hsum8.  The GEMM unpacks 8 rows with the rows in
 * the lanes, [block][group][l][8 rows][4 bytes], once for every token, and
 * keeps a token's 8 partials as 8 vectors over the rows; slice l of a
 * token is its 4 activation bytes broadcast.  Signed values (MXFP4, the
 * IQ4 code book, up to 127 in magnitude) go in as |w| with the sign moved
 * onto the activation, as in dot_s8; Q4_1/Q5_1 codes are unsigned. */
enum { L_MXFP4, L_Q4_1, L_Q5_1, L_IQ4_XS };
#define GT4 4

INLINE size_t lo_bsize(const int kind)
{
	switch (kind) {
	case L_Q4_1: return sizeof(moe_block_q4_1);
	case L_Q5_1: return sizeof(moe_block_q5_1);
	case L_IQ4_XS: return sizeof(moe_block_iq4_xs);
	default: return sizeof(moe_block_mxfp4);
	}
}

/* The activation block: Q8_0, Q8_1, Q8_K; where its codes start. */
INLINE size_t lo_xsize(const int kind)
{
	return kind == L_MXFP4 ? sizeof(moe_block_q8_0)
	       : kind == L_IQ4_XS ? sizeof(moe_block_q8_k)
				 : sizeof(moe_block_q8_1);
}

INLINE size_t lo_xqs(const int kind)
{
	return kind == L_MXFP4 ? offsetof(moe_block_q8_0, qs)
	       : kind == L_IQ4_XS ? offsetof(moe_block_q8_k, qs)
				 : offsetof(moe_block_q8_1, qs);
}

/* Group g's 32 values of block b in element order, as the dot products
 * build them. */
INLINE __m256i lo_values(const int kind, const uint8_t *b, int g)
{
	switch (kind) {
	case L_Q4_1: return nibbles32(b + offsetof(moe_block_q4_1, qs));
	case L_Q5_1:
		return _mm256_or_si256(nibbles32(b + offsetof(moe_block_q5_1, qs)),
				       q5_high(b + offsetof(moe_block_q5_1, qh)));
	case L_IQ4_XS: return book32(moe_kvalues_iq4nl, b + offsetof(moe_block_iq4_xs, qs) + 16 * g);
	default: return book32(moe_kvalues_mxfp4, b + offsetof(moe_block_mxfp4, qs));
	}
}

typedef struct {
	uint8_t *wa, *ws; /* [block][group][l][row][4]: |w| (or the codes), w */
	int32_t *sc;      /* IQ4_XS [block][group][row]: ls - 32 in both 16-bit halves */
	float *wd, *wm;   /* [block][row]: the weight scale; Q4_1/Q5_1 m */
} lo_pack;

INLINE void lo_unpack(const int kind, const lo_pack *pk, const uint8_t *w, size_t ldw, int rows,
		      int64_t nb)
{
	const size_t bs = lo_bsize(kind);
	const int G = kind == L_IQ4_XS ? 8 : 1;
	for (int64_t i = 0; i < nb; i++) {
		for (int g = 0; g < G; g++) {
			__m256i v[8];
			for (int r = 0; r < 8; r++)
				v[r] = r < rows ? lo_values(kind, w + r * ldw + i * bs, g)
						: _mm256_setzero_si256();
			transpose8(v);
			const size_t k0 = (size_t)(i * G + g) * 8;
			for (int l = 0; l < 8; l++) {
				__m256i a = kind == L_Q4_1 || kind == L_Q5_1 ? v[l]
									       : _mm256_sign_epi8(v[l], v[l]);
				_mm256_store_si256((void *)(pk->wa + (k0 + l) * 32), a);
				_mm256_store_si256((void *)(pk->ws + (k0 + l) * 32), v[l]);
			}
		}
		for (int r = 0; r < 8; r++) {
			const uint8_t *b = w + r * ldw + i * bs;
			float d = 0.0f, m = 0.0f;
			if (r < rows) {
				if (kind == L_MXFP4) {
					d = moe_e8m0_to_f32_half(b[offsetof(moe_block_mxfp4, e)]);
				} else {
					d = h2f(b);
					if (kind != L_IQ4_XS)
						m = h2f(b + 2);
				}
			}
			pk->wd[i * 8 + r] = d;
			pk->wm[i * 8 + r] = m;
			if (kind != L_IQ4_XS)
				continue;
			const moe_block_iq4_xs *q = (const void *)b;
			for (int g = 0; g < 8; g++) {
				int ls = r < rows ? (((q->scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) |
						     ((q->scales_h >> (2 * g)) & 3) << 4) - 32
						  : 0;
				pk->sc[(i * 8 + g) * 8 + r] = (int32_t)((uint32_t)(uint16_t)ls * 0x10001u);
			}
		}
	}
}

INLINE void lo_tile(const int kind, const int T, const lo_pack *pk, int64_t nb, const uint8_t *x,
		    size_t ldx, float *s, size_t lds, __m256i m)
{
	const size_t xbs = lo_xsize(kind), xqs = lo_xqs(kind);
	const int sgn = kind == L_MXFP4 || kind == L_IQ4_XS;
	const __m256i ones = _mm256_set1_epi8(1);
	__m256 P[GT4][8];
	for (int t = 0; t < T; t++)
		for (int l = 0; l < 8; l++)
			P[t][l] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const __m256 wd = _mm256_load_ps(pk->wd + i * 8);
		__m256 dd[GT4], dm[GT4];
		MOE_UNROLL2 for (int t = 0; t < T; t++) {
			const uint8_t *y = x + t * ldx + i * xbs;
			float dy;
			if (kind == L_IQ4_XS)
				memcpy(&dy, y, 4);
			else
				dy = h2f(y);
			dd[t] = _mm256_mul_ps(wd, _mm256_set1_ps(dy));
			dm[t] = _mm256_mul_ps(_mm256_load_ps(pk->wm + i * 8), _mm256_set1_ps(dy));
		}
		if (kind == L_IQ4_XS) {
			for (int l = 0; l < 8; l++) {
				__m256i I[GT4];
				MOE_UNROLL2 for (int t = 0; t < T; t++)
					I[t] = _mm256_setzero_si256();
				MOE_UNROLL2 for (int g = 0; g < 8; g++) {
					const size_t k = (size_t)(i * 8 + g) * 8 + l;
					const __m256i a = _mm256_load_si256((const void *)(pk->wa + k * 32));
					const __m256i sg = _mm256_load_si256((const void *)(pk->ws + k * 32));
					const __m256i sc =
						_mm256_load_si256((const void *)(pk->sc + (i * 8 + g) * 8));
					MOE_UNROLL2 for (int t = 0; t < T; t++) {
						__m256i xv = bcast32_2(x + t * ldx + i * xbs + xqs +
								       32 * g + 4 * l);
						I[t] = _mm256_add_epi32(
							I[t], _mm256_madd_epi16(_mm256_maddubs_epi16(
											a, _mm256_sign_epi8(xv, sg)),
										sc));
					}
				}
				MOE_UNROLL2 for (int t = 0; t < T; t++)
					P[t][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[t]), dd[t], P[t][l]);
			}
			continue;
		}
		MOE_UNROLL2 for (int l = 0; l < 8; l++) {
			const size_t k = (size_t)i * 8 + l;
			const __m256i a = _mm256_load_si256((const void *)(pk->wa + k * 32));
			const __m256i sg = _mm256_load_si256((const void *)(pk->ws + k * 32));
			MOE_UNROLL2 for (int t = 0; t < T; t++) {
				__m256i xv = bcast32_2(x + t * ldx + i * xbs + xqs + 4 * l);
				__m256i p = dot_u8s8(a, sgn ? _mm256_sign_epi8(xv, sg) : xv);
				P[t][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dd[t], P[t][l]);
				if (!sgn)
					P[t][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(ones, xv)),
								  dm[t], P[t][l]);
			}
		}
	}
	/* hsum8's order across the partials. */
	for (int t = 0; t < T; t++) {
		__m256 a0 = _mm256_add_ps(P[t][0], P[t][4]), a1 = _mm256_add_ps(P[t][1], P[t][5]);
		__m256 a2 = _mm256_add_ps(P[t][2], P[t][6]), a3 = _mm256_add_ps(P[t][3], P[t][7]);
		__m256 b0 = _mm256_add_ps(a0, a2), b1 = _mm256_add_ps(a1, a3);
		_mm256_maskstore_ps(s + t * lds, m, _mm256_add_ps(b0, b1));
	}
}

/* false (nothing done) when no work buffer could be had. */
INLINE bool lo_gemm(const int kind, int64_t n, int nr, int nt, const uint8_t *w, size_t ldw,
		    const uint8_t *x, size_t ldx, float *s, size_t lds)
{
	const int64_t nb = n / (kind == L_IQ4_XS ? MOE_QK_K : MOE_QK);
	/* wa, ws 8n bytes each; sc n; wd, wm 32 per block. */
	uint8_t *buf = moe_kernels_work_buffer(17 * (size_t)n + 64 * (size_t)nb);
	if (!buf)
		return false;
	const lo_pack pk = {buf, buf + 8 * n, (int32_t *)(buf + 16 * n), (float *)(buf + 17 * n),
			    (float *)(buf + 17 * n + 32 * nb)};
	for (int r0 = 0; r0 < nr; r0 += 8) {
		const int rows = nr - r0 < 8 ? nr - r0 : 8;
		const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows),
						     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
		lo_unpack(kind, &pk, w + (size_t)r0 * ldw, ldw, rows, nb);
		for (int t0 = 0; t0 < nt; t0 += GT4) {
			const int T = nt - t0 < GT4 ? nt - t0 : GT4;
			const uint8_t *xt = x + (size_t)t0 * ldx;
			float *st = s + (size_t)t0 * lds + r0;
			switch (T) {
			case 1: lo_tile(kind, 1, &pk, nb, xt, ldx, st, lds, m); break;
			case 2: lo_tile(kind, 2, &pk, nb, xt, ldx, st, lds, m); break;
			case 3: lo_tile(kind, 3, &pk, nb, xt, ldx, st, lds, m); break;
			default: lo_tile(kind, 4, &pk, nb, xt, ldx, st, lds, m); break;
			}
		}
	}
	return true;
}

/* Below this many tokens the dot products (same bits, no unpacking). */
#define LO_MIN_TOKENS 3

#define MOE_LO_GEMM(name, kind)                                                                  \
	static void name##_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw,          \
				const void *x, size_t ldx, float *s, size_t lds)               \
	{                                                                                      \
		if (nt >= LO_MIN_TOKENS && lo_gemm(kind, n, nr, nt, w, ldw, x, ldx, s, lds))   \
			return;                                                                \
		for (int t = 0; t < nt; t++)                                                   \
			for (int r = 0; r < nr; r++)                                           \
				vec_dot_##name(n, s + t * lds + r, (const uint8_t *)w + r * ldw,   \
					       (const uint8_t *)x + t * ldx);                      \
	}

MOE_LO_GEMM(mxfp4, L_MXFP4)
MOE_LO_GEMM(q4_1, L_Q4_1)
MOE_LO_GEMM(q5_1, L_Q5_1)
MOE_LO_GEMM(iq4_xs, L_IQ4_XS)

/* ------------------------------------------------------------ quantisers */

INLINE __m256 abs8(__m256 v)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

INLINE float hmax8(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* roundf: half away from zero, as the reference quantiser. */
INLINE __m256 round_away8(__m256 v)
{
	__m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	__m256 big = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
	__m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
	return _mm256_add_ps(t, _mm256_and_ps(big, one));
}

/* Eight int32 in [-127, 127] to eight bytes. */
INLINE void store8_i8(uint8_t *dst, __m256i q)
{
	__m128i p = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
	p = _mm_packs_epi16(p, p);
	_mm_storel_epi64((void *)dst, p);
}

static void quantize_row_q8_0(const float *x, void *y, int64_t n)
{
	uint8_t *b = y;
	for (int64_t i = 0; i < n / MOE_QK; i++, x += MOE_QK, b += sizeof(moe_block_q8_0)) {
		__m256 v[4], am = _mm256_setzero_ps();
		for (int j = 0; j < 4; j++) {
			v[j] = _mm256_loadu_ps(x + 8 * j);
			am = _mm256_max_ps(am, abs8(v[j]));
		}
		float d = hmax8(am) / 127.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		uint16_t h = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
		memcpy(b, &h, 2);
		for (int j = 0; j < 4; j++)
			store8_i8(b + 2 + 8 * j, _mm256_cvttps_epi32(round_away8(
							 _mm256_mul_ps(v[j], _mm256_set1_ps(id)))));
	}
}

/* As moe_q8_k_from_float: the first element of largest magnitude maps to
 * -127, codes round to nearest even, bsums per 16.  Found with vector
 * compares and packed 32 codes at a time, the bsums summed in vectors (a
 * scalar search and a horizontal sum per 16 codes took half the time of
 * avx512's quantiser again, about 1% of a prompt's). */
static void quantize_row_q8_k(const float *x, void *y, int64_t n)
{
	moe_block_q8_k *b = y;
	const __m256i ones = _mm256_set1_epi16(1);
	/* packs_epi32 then packs_epi16 of q0..q3 (per 128-bit half) leave
	 * the first four codes of q_j in dword j and the last four in dword
	 * 4 + j. */
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	for (int64_t i = 0; i < n / MOE_QK_K; i++, x += MOE_QK_K, b++) {
		__m256 v[32], am = _mm256_setzero_ps();
		MOE_UNROLL2 for (int j = 0; j < 32; j++) {
			v[j] = _mm256_loadu_ps(x + 8 * j);
			am = _mm256_max_ps(am, abs8(v[j]));
		}
		float amax = hmax8(am), max = 0.0f;
		if (!(amax > 0.0f)) {
			memset(b, 0, sizeof(*b));
			continue;
		}
		const __m256 va = _mm256_set1_ps(amax);
		for (int j = 0; j < 32; j++) {
			int k = _mm256_movemask_ps(_mm256_cmp_ps(abs8(v[j]), va, _CMP_EQ_OQ));
			if (k) {
				max = x[8 * j + __builtin_ctz((unsigned)k)];
				break;
			}
		}
		float iscale = -127.0f / max;
		const __m256 vs = _mm256_set1_ps(iscale);
		__m128i bs[4];
		MOE_UNROLL2 for (int c = 0; c < 8; c++) {
			__m256i q[4];
			MOE_UNROLL2 for (int j = 0; j < 4; j++) {
				q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[4 * c + j], vs));
				q[j] = _mm256_max_epi32(_mm256_min_epi32(q[j], _mm256_set1_epi32(127)),
							_mm256_set1_epi32(-127));
			}
			const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
			const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
			_mm256_storeu_si256((void *)(b->qs + 32 * c),
					    _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
									order));
			/* Sums of codes 32c .. +15 (p01) and +16 .. +31 (p23):
			 * bsums 2c and 2c+1 in lanes 0 and 1 of s. */
			__m256i s = _mm256_hadd_epi32(_mm256_madd_epi16(p01, ones),
						      _mm256_madd_epi16(p23, ones));
			s = _mm256_hadd_epi32(s, s);
			const __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(s),
							 _mm256_extracti128_si256(s, 1));
			if (c % 2 == 0)
				bs[c / 2] = s2;
			else
				bs[c / 2] = _mm_unpacklo_epi64(bs[c / 2], s2);
		}
		/* At most 16 * 127 in magnitude: packs is exact. */
		_mm_storeu_si128((void *)b->bsums, _mm_packs_epi32(bs[0], bs[1]));
		_mm_storeu_si128((void *)(b->bsums + 8), _mm_packs_epi32(bs[2], bs[3]));
		b->d = 1.0f / iscale;
	}
}

/* ---------------------------------------------------------- row decoders */

static void f16_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, load_w8(1, p + 2 * i));
	for (; i < n; i++)
		dst[i] = moe_f16_to_f32(ld16(p + 2 * i));
}

static void bf16_to_float(const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, load_w8(2, p + 2 * i));
	for (; i < n; i++)
		dst[i] = moe_bf16_to_f32(ld16(p + 2 * i));
}

/* ------------------------------------------------------------------ table */

void MOE_FILL_FN(moe_kernels *k)
{
	k->vec_dot[MOE_F32] = vec_dot_f32;
	k->vec_dot[MOE_F16] = vec_dot_f16;
	k->vec_dot[MOE_BF16] = vec_dot_bf16;
	k->vec_dot[MOE_Q8_0] = vec_dot_q8_0;
	k->vec_dot[MOE_Q4_0] = vec_dot_q4_0;
	k->vec_dot[MOE_Q4_K] = vec_dot_q4_k;
	k->vec_dot[MOE_Q5_K] = vec_dot_q5_k;
	k->vec_dot[MOE_Q6_K] = vec_dot_q6_k;
	k->vec_dot[MOE_Q5_0] = vec_dot_q5_0;
	k->vec_dot[MOE_Q4_1] = vec_dot_q4_1;
	k->vec_dot[MOE_Q5_1] = vec_dot_q5_1;
	k->vec_dot[MOE_IQ4_NL] = vec_dot_iq4_nl;
	k->vec_dot[MOE_MXFP4] = vec_dot_mxfp4;
	k->vec_dot[MOE_Q2_K] = vec_dot_q2_k;
	k->vec_dot[MOE_Q3_K] = vec_dot_q3_k;
	k->vec_dot[MOE_IQ4_XS] = vec_dot_iq4_xs;
	k->gemm[MOE_Q4_K] = q4_k_gemm;
	k->gemm[MOE_Q5_K] = q5_k_gemm;
	k->gemm[MOE_Q6_K] = q6_k_gemm;
	k->gemm[MOE_Q2_K] = q2_k_gemm;
	k->gemm[MOE_Q3_K] = q3_k_gemm;
	k->gemm[MOE_Q8_0] = q8_0_gemm;
	k->gemm[MOE_Q4_0] = q4_0_gemm;
	k->gemm[MOE_Q5_0] = q5_0_gemm;
	k->gemm[MOE_IQ4_NL] = iq4_nl_gemm;
	k->gemm[MOE_MXFP4] = mxfp4_gemm;
	k->gemm[MOE_Q4_1] = q4_1_gemm;
	k->gemm[MOE_Q5_1] = q5_1_gemm;
	k->gemm[MOE_IQ4_XS] = iq4_xs_gemm;
	k->gemm[MOE_F32] = f32_gemm;
	k->gemm[MOE_F16] = f16_gemm;
	k->gemm[MOE_BF16] = bf16_gemm;
	k->quantize_row[MOE_Q8_0] = quantize_row_q8_0;
	k->quantize_row[MOE_Q8_K] = quantize_row_q8_k;
	k->to_float[MOE_F16] = f16_to_float;
	k->to_float[MOE_BF16] = bf16_to_float;
	k->attn = moe_attn_avx2; /* attn_avx2.c */
}
