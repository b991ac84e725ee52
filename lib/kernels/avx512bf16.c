/* kernels/avx512bf16.c — AVX512-BF16 kernels: BF16 weights times
 * activations rounded to bf16, with vdpbf16ps (32 products per instruction,
 * twice the multiply-adds of a float fma, and no widening of the weights).
 *
 * Compiled with $(AVX512BF16_CFLAGS); kernels.c calls
 * moe_kernels_fill_avx512bf16 only on a CPU that has every one of those
 * features.  The level starts as a copy of the AVX-512 table, so every other
 * weight type keeps its AVX-512 kernel.  F16 weights stay there too: turned
 * into bf16 they would lose three mantissa bits of the weights themselves
 * (README, "Numerics of the avx512bf16 level").
 *
 * The arithmetic, one output = dot(w, x) of n elements (batch invariance:
 * the vec_dot and every tile shape of the gemm do exactly this):
 *  1. each activation is rounded to bf16 as vcvtne2ps2bf16 does it: round
 *     to nearest even, float denormals to signed zero;
 *  2. the row goes in 32-element chunks, the last one padded with zeros;
 *     16 float lanes start at +0 and lane j takes element 2j+1 of a chunk,
 *     then element 2j (Intel SDM, VDPBF16PS: each step a fused multiply-add
 *     — a bf16 product is exact in float — rounded to nearest even, input
 *     denormals read as zero, denormal results flushed to zero);
 *  3. the lanes are summed in a fixed tree with ordinary float adds:
 *     lane j += lane j+8, then j += j+4, j += j+2, and lane 0 + lane 1.
 * tests/unit/t-kernels checks every kernel here against a C emulation of
 * these three steps, bit for bit.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/hsum_x86.h"
#include "kernels/kernels_int.h"

#define INLINE static inline __attribute__((always_inline))
/* The R x T loops must unroll for the accumulators to live in registers. */
#define MOE_UNROLL _Pragma("GCC unroll 8")

/* Tile shape: 4 rows x 6 tokens = 24 accumulators, 4 weight vectors and
 * one activation vector in flight (of 32 registers). */
#define TILE_R 4
#define TILE_T 6
/* Tokens whose activations are rounded to bf16 at once into the thread's
 * work buffer, then multiplied with every row the gemm was given. */
#define CHUNK_T 48

/* Weight prefetch distance into L2, as in avx512.c (decode streams the
 * rows from memory; see the measurements there). */
#ifndef MOE_PF_DIST
#define MOE_PF_DIST 16384
#endif

/* Elements of a row once padded to whole 32-element chunks. */
INLINE int64_t padded(int64_t n)
{
	return (n + 31) & ~(int64_t)31;
}

INLINE __mmask16 mask16(int64_t left)
{
	return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* Elements i .. i+31 of a float row of n as 32 bf16, zeros past n. */
INLINE __m512i bf16_from_floats(const float *x, int64_t i, int64_t n)
{
	__m512 lo = _mm512_maskz_loadu_ps(mask16(n - i), x + i);
	__m512 hi = _mm512_maskz_loadu_ps(mask16(n - i - 16), x + i + 16);
	/* The second operand gives the low 16 words. */
	return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* The activation row x (n floats) as padded(n) bf16 at y. */
static void round_row(const float *x, int64_t n, uint16_t *y)
{
	for (int64_t i = 0; i < n; i += 32)
		_mm512_storeu_si512(y + i, bf16_from_floats(x, i, n));
}

/* s[t * lds + r] = dot(row r, token t) for R rows of BF16 weights (ldw
 * bytes apart) and T tokens.  Activations: from_floats 0, T bf16 rows of
 * padded(n) (round_row's form, ldx elements apart); 1, one float row,
 * rounded here (the vec_dot, or a gemm without a work buffer).  Both give
 * the same bf16 values, so the same bits. */
INLINE void bf16_tile(const int from_floats, const int R, const int T, int64_t n,
		      const uint8_t *w, size_t ldw, const void *x, size_t ldx, float *s,
		      size_t lds)
{
	__m512 acc[TILE_R][TILE_T];

	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 32) {
		__mmask32 m = n - i >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
		__m512i wv[TILE_R];
		MOE_UNROLL for (int r = 0; r < R; r++) {
			_mm_prefetch((const char *)w + r * ldw + i * 2 + MOE_PF_DIST, _MM_HINT_T1);
			wv[r] = _mm512_maskz_loadu_epi16(m, w + r * ldw + i * 2);
		}
		MOE_UNROLL for (int t = 0; t < T; t++) {
			__m512i xv = from_floats
					     ? bf16_from_floats((const float *)x, i, n)
					     : _mm512_loadu_si512((const uint16_t *)x + t * ldx + i);
			MOE_UNROLL for (int r = 0; r < R; r++)
				acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)wv[r],
							     (__m512bh)xv);
		}
	}
	MOE_UNROLL for (int r = 0; r < R; r++)
		MOE_UNROLL for (int t = 0; t < T; t++)
			s[t * lds + r] = hsum16(acc[r][t]); /* step 3 of the file comment */
}

static void bf16_dot(int64_t n, float *s, const void *w, const void *x)
{
	bf16_tile(1, 1, 1, n, w, 0, x, 0, s, 0);
}

/* nr rows x T tokens (T <= TILE_T, a constant) of rounded activations xb:
 * 4-row tiles, then the rows left one at a time. */
INLINE void rows_x_tokens(const int T, int64_t n, int nr, const uint8_t *w, size_t ldw,
			  const uint16_t *xb, size_t ldxb, float *s, size_t lds)
{
	int r = 0;
	for (; r + TILE_R <= nr; r += TILE_R)
		bf16_tile(0, TILE_R, T, n, w + r * ldw, ldw, xb, ldxb, s + r, lds);
	for (; r < nr; r++)
		bf16_tile(0, 1, T, n, w + r * ldw, ldw, xb, ldxb, s + r, lds);
}

/* The gemm (moe_gemm_fn): tokens in chunks of CHUNK_T, each rounded to
 * bf16 once into the thread's work buffer; within a chunk, tiles of TILE_T
 * tokens sweep every row (the rows the caller blocked for L2), and the last
 * 1-5 tokens go in a tile of their own width. */
static void bf16_gemm(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,
		      size_t ldx, float *s, size_t lds)
{
	const int64_t np = padded(n);
	const uint8_t *pw = w, *px = x;
	uint16_t *xb = nt > 0 ? moe_kernels_work_buffer((size_t)np * 2 *
							(nt < CHUNK_T ? nt : CHUNK_T))
			       : NULL;

	if (!xb) { /* no buffer: the vec_dot, which gives the same bits */
		for (int t = 0; t < nt; t++)
			for (int r = 0; r < nr; r++)
				bf16_dot(n, s + t * lds + r, pw + r * ldw, px + t * ldx);
		return;
	}
	for (int c = 0; c < nt; c += CHUNK_T) {
		int ct = nt - c < CHUNK_T ? nt - c : CHUNK_T, t = 0;
		for (int i = 0; i < ct; i++)
			round_row((const float *)(px + (size_t)(c + i) * ldx), n, xb + i * np);
		for (; t + TILE_T <= ct; t += TILE_T)
			rows_x_tokens(TILE_T, n, nr, pw, ldw, xb + t * np, np,
				      s + (size_t)(c + t) * lds, lds);
		float *st = s + (size_t)(c + t) * lds;
		const uint16_t *xt = xb + t * np;
		switch (ct - t) {
		case 5: rows_x_tokens(5, n, nr, pw, ldw, xt, np, st, lds); break;
		case 4: rows_x_tokens(4, n, nr, pw, ldw, xt, np, st, lds); break;
		case 3: rows_x_tokens(3, n, nr, pw, ldw, xt, np, st, lds); break;
		case 2: rows_x_tokens(2, n, nr, pw, ldw, xt, np, st, lds); break;
		case 1: rows_x_tokens(1, n, nr, pw, ldw, xt, np, st, lds); break;
		default: break;
		}
	}
}

void moe_kernels_fill_avx512bf16(moe_kernels *k)
{
	k->vec_dot[MOE_BF16] = bf16_dot;
	k->gemm[MOE_BF16] = bf16_gemm;
}
