/* kernels/avx2.c — AVX2 + FMA + F16C dot products for F32, F16, BF16, Q8_0,
 * Q4_0, Q4_K, Q5_K, Q6_K, the Q8_0 and Q8_K activation quantisers and the
 * F16/BF16 row decoders.
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
	k->quantize_row[MOE_Q8_0] = quantize_row_q8_0;
	k->quantize_row[MOE_Q8_K] = quantize_row_q8_k;
	k->to_float[MOE_F16] = f16_to_float;
	k->to_float[MOE_BF16] = bf16_to_float;
}
