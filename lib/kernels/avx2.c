/* kernels/avx2.c — AVX2 + FMA + F16C dot products for every weight type
 * (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, MXFP4, Q2_K .. Q6_K,
 * IQ4_XS), the Q8_0 and Q8_K activation quantisers and the F16/BF16 row
 * decoders.
 *
 * Compiled with $(AVX2_CFLAGS); kernels.c calls moe_kernels_fill_avx2 only
 * on a CPU that has these instructions.  These are single-row dot products
 * (matmul loops over them); the register-tiled products are in avx512.c.
 *
 * Without VNNI the 8-bit products use vpmaddubsw (u8 x s8 -> pairs summed to
 * s16, saturating) then vpmaddwd (s16 x s16 -> pairs summed to s32).  The
 * first operand must be unsigned and the pair sums must stay below 2^15:
 * 4/5/6-bit codes are unsigned (pair sums at most 2 * 63 * 127), and Q8_0
 * weights go in as |w| with the sign moved onto the activation (at most
 * 2 * 128 * 127).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_int.h"

#define INLINE static inline __attribute__((always_inline))

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

INLINE float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INLINE int hsum8i(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(s);
}

/* Sum of u8 x s8 products, four per 32-bit lane. */
INLINE __m256i dot_u8s8(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
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

static void vec_dot_q8_0(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q8_0 *b = w;
	const moe_block_q8_0 *y = x;
	__m256 acc = _mm256_setzero_ps();

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		__m256i qw = _mm256_loadu_si256((const void *)b[i].qs);
		__m256i qx = _mm256_loadu_si256((const void *)y[i].qs);
		__m256i p = dot_u8s8(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
		float d = _cvtsh_ss(b[i].d) * _cvtsh_ss(y[i].d);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
}

/* Nibbles of a Q4_0/IQ4_NL-style block in element order: lo 0-15, hi 16-31. */
INLINE __m256i nibbles32(const uint8_t *qs)
{
	__m128i v = _mm_loadu_si128((const void *)qs);
	__m256i z = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
	return _mm256_and_si256(z, _mm256_set1_epi8(0x0F));
}

/* sum((q - 8) * y) = sum(q * y) - 8 * sum(y). */
static void vec_dot_q4_0(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q4_0 *b = w;
	const moe_block_q8_0 *y = x;
	__m256 acc = _mm256_setzero_ps();

	for (int64_t i = 0; i < n / MOE_QK; i++) {
		__m256i q = nibbles32(b[i].qs);
		__m256i qx = _mm256_loadu_si256((const void *)y[i].qs);
		__m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, qx),
					     _mm256_maddubs_epi16(_mm256_set1_epi8(8), qx));
		p = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
		float d = _cvtsh_ss(b[i].d) * _cvtsh_ss(y[i].d);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
}

/* ------------------------------------- the other 32-element block types */

/* sum w_j x_j per 32-bit lane for signed w (|w| <= 127): |w| unsigned and
 * the sign moved onto x keep the pairs within 16 bits. */
INLINE __m256i dot_s8(__m256i w, __m256i x)
{
	return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
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

/* Q5_0 (x = d * (q - 16)), IQ4_NL and MXFP4 (code books): signed values. */
static void vec_dot_q5_0(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q5_0 *b = w;
	const moe_block_q8_0 *y = x;
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / MOE_QK; i++) {
		__m256i q = _mm256_or_si256(nibbles32(b[i].qs), q5_high(b[i].qh));
		q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
		__m256i p = dot_s8(q, _mm256_loadu_si256((const void *)y[i].qs));
		float d = _cvtsh_ss(b[i].d) * _cvtsh_ss(y[i].d);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
}

static void vec_dot_iq4_nl(int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_iq4_nl *b = w;
	const moe_block_q8_0 *y = x;
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / MOE_QK; i++) {
		__m256i p = dot_s8(book32(moe_kvalues_iq4nl, b[i].qs),
				   _mm256_loadu_si256((const void *)y[i].qs));
		float d = _cvtsh_ss(b[i].d) * _cvtsh_ss(y[i].d);
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
}

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

/* Q4_K / Q5_K: per 64 elements j, the low nibbles of qs[32j .. 32j+31] are
 * group 2j and the high nibbles group 2j+1; the integer scales multiply
 * through vpmaddwd and the minimums use the bsums. */
INLINE void k45_dot(const int five, int64_t n, float *s, const void *w, const void *x)
{
	const moe_block_q8_k *y = x;
	const size_t bsz = five ? sizeof(moe_block_q5_k) : sizeof(moe_block_q4_k);
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	float sum = 0.0f;
	__m256 acc = _mm256_setzero_ps();

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
		float d = _cvtsh_ss(ld16(b)) * y[i].d;
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
		sum -= _cvtsh_ss(ld16(b + 2)) * y[i].d * (float)summ;
	}
	*s = hsum8(acc) + sum;
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
	__m256 acc = _mm256_setzero_ps();

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
		sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(32 * off, 0, 0, 0, 0, 0, 0, 0));
		float d = _cvtsh_ss(b[i].d) * y[i].d;
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
	}
	*s = hsum8(acc);
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
	__m256 acc = _mm256_setzero_ps();
	float sum = 0.0f;

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
		float d = h2f(b + (three ? offsetof(moe_block_q3_k, d) : offsetof(moe_block_q2_k, d)));
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d * y[i].d), acc);
		if (three)
			sum -= d * y[i].d * (float)off;
		else
			sum -= h2f(b + offsetof(moe_block_q2_k, dmin)) * y[i].d * (float)off;
	}
	*s = hsum8(acc) + sum;
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

static void quantize_row_q8_k(const float *x, void *y, int64_t n)
{
	moe_block_q8_k *b = y;
	for (int64_t i = 0; i < n / MOE_QK_K; i++, x += MOE_QK_K, b++) {
		__m256 am = _mm256_setzero_ps();
		for (int j = 0; j < 32; j++)
			am = _mm256_max_ps(am, abs8(_mm256_loadu_ps(x + 8 * j)));
		float amax = hmax8(am), max = 0.0f;
		if (!(amax > 0.0f)) {
			memset(b, 0, sizeof(*b));
			continue;
		}
		for (int j = 0; j < MOE_QK_K; j++) {
			if (__builtin_fabsf(x[j]) == amax) {
				max = x[j];
				break;
			}
		}
		float iscale = -127.0f / max;
		__m256 vs = _mm256_set1_ps(iscale);
		for (int g = 0; g < 16; g++) {
			__m256i s = _mm256_setzero_si256();
			for (int j = 0; j < 2; j++) {
				__m256i q = _mm256_cvtps_epi32(
					_mm256_mul_ps(_mm256_loadu_ps(x + 16 * g + 8 * j), vs));
				q = _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)),
						     _mm256_set1_epi32(-127));
				store8_i8((uint8_t *)b->qs + 16 * g + 8 * j, q);
				s = _mm256_add_epi32(s, q);
			}
			b->bsums[g] = (int16_t)hsum8i(s);
		}
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

void moe_kernels_fill_avx2(moe_kernels *k)
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
	k->quantize_row[MOE_Q8_0] = quantize_row_q8_0;
	k->quantize_row[MOE_Q8_K] = quantize_row_q8_k;
	k->to_float[MOE_F16] = f16_to_float;
	k->to_float[MOE_BF16] = bf16_to_float;
}
