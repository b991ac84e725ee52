/* t-quant.c — the dtype traits table, the half/bfloat16 conversions and the
 * reference codecs of every type.
 *
 * Golden values are derived from the format definitions, never from the
 * decoder: blocks are assembled byte by byte at the offsets GGUF/ggml
 * define (not through lib/quant/blocks.h), either with literal values
 * worked out by hand in the comments, or by packing chosen codes in the
 * encoder direction and computing each element's value from its code and
 * scale.  Half conversions are also checked against the compiler's
 * _Float16 where available.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "tap.h"

/* ----------------------------------------------------------- helpers */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void putf(uint8_t *p, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	put32(p, u);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
	rng = rng * 1664525u + 1013904223u;
	return rng >> 8;
}
static int rndi(int n) /* [0, n) */
{
	return (int)(rnd() % (uint32_t)n);
}
static float rndf(float lo, float hi)
{
	return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / (float)0x1000000;
}

/* Half values used below, decoded by hand: sign | 5-bit exponent (bias
 * 15) | 10-bit mantissa. */
#define H_0_125 0x3000 /* 2^-3 */
#define H_0_25 0x3400  /* 2^-2 */
#define H_0_5 0x3800   /* 2^-1 */
#define H_1 0x3C00
#define H_2 0x4000
#define H_M1 0xBC00 /* -1 */

/* Decode n elements of `type` from src (through the traits table) and
 * compare with want: |got - want| <= tol (+ rel * |want|). */
static void check_decode(int type, const void *src, const float *want, int n, double tol,
			 const char *what)
{
	const moe_type_traits *t = moe_type_get(type);
	float got[1024];
	int bad = -1;

	if (!t || n > 1024) {
		ok(0, "%s: no traits", what);
		return;
	}
	for (int i = 0; i < n; i++)
		got[i] = NAN;
	t->to_float(src, got, n);
	for (int i = 0; i < n && bad < 0; i++) {
		double lim = tol * (1.0 + fabs(want[i]));
		if (!(fabs((double)got[i] - want[i]) <= lim) &&
		    !(isinf(got[i]) && isinf(want[i]) && signbit(got[i]) == signbit(want[i])))
			bad = i;
	}
	if (!ok(bad < 0, "%s", what))
		printf("#   element %d: got %.9g, want %.9g\n", bad, got[bad], want[bad]);
}

/* ------------------------------------------------------ traits table */

static void test_table(void)
{
	static const struct {
		int id;
		const char *name;
		unsigned bs, ts;
		bool quant;
		int dot;
	} want[] = {
		{ MOE_F32, "f32", 1, 4, false, MOE_F32 },
		{ MOE_F16, "f16", 1, 2, false, MOE_F32 },
		{ MOE_BF16, "bf16", 1, 2, false, MOE_F32 },
		{ MOE_F64, "f64", 1, 8, false, MOE_F32 },
		{ MOE_I8, "i8", 1, 1, false, MOE_F32 },
		{ MOE_I16, "i16", 1, 2, false, MOE_F32 },
		{ MOE_I32, "i32", 1, 4, false, MOE_F32 },
		{ MOE_I64, "i64", 1, 8, false, MOE_F32 },
		/* 2 + 16 */
		{ MOE_Q4_0, "q4_0", 32, 18, true, MOE_Q8_0 },
		/* 2 + 2 + 16 */
		{ MOE_Q4_1, "q4_1", 32, 20, true, MOE_Q8_1 },
		/* 2 + 4 + 16 */
		{ MOE_Q5_0, "q5_0", 32, 22, true, MOE_Q8_0 },
		/* 2 + 2 + 4 + 16 */
		{ MOE_Q5_1, "q5_1", 32, 24, true, MOE_Q8_1 },
		/* 2 + 32 */
		{ MOE_Q8_0, "q8_0", 32, 34, true, MOE_Q8_0 },
		/* 2 + 2 + 32 */
		{ MOE_Q8_1, "q8_1", 32, 36, true, MOE_Q8_1 },
		/* 16 + 64 + 2 + 2 */
		{ MOE_Q2_K, "q2_k", 256, 84, true, MOE_Q8_K },
		/* 32 + 64 + 12 + 2 */
		{ MOE_Q3_K, "q3_k", 256, 110, true, MOE_Q8_K },
		/* 2 + 2 + 12 + 128 */
		{ MOE_Q4_K, "q4_k", 256, 144, true, MOE_Q8_K },
		/* 2 + 2 + 12 + 32 + 128 */
		{ MOE_Q5_K, "q5_k", 256, 176, true, MOE_Q8_K },
		/* 128 + 64 + 16 + 2 */
		{ MOE_Q6_K, "q6_k", 256, 210, true, MOE_Q8_K },
		/* 4 + 256 + 32 */
		{ MOE_Q8_K, "q8_k", 256, 292, true, MOE_Q8_K },
		{ MOE_IQ4_NL, "iq4_nl", 32, 18, true, MOE_Q8_0 },
		/* 2 + 2 + 4 + 128 */
		{ MOE_IQ4_XS, "iq4_xs", 256, 136, true, MOE_Q8_K },
		/* 1 + 16 */
		{ MOE_MXFP4, "mxfp4", 32, 17, true, MOE_Q8_0 },
	};
	int n = (int)(sizeof(want) / sizeof(want[0]));
	int known = 0, bad = 0;

	for (int id = -3; id < MOE_DTYPE_MAX + 3; id++)
		known += moe_type_get(id) != NULL;
	is_int(known, n, "exactly %d dtypes are known", n);

	for (int i = 0; i < n; i++) {
		const moe_type_traits *t = moe_type_get(want[i].id);
		if (!t || strcmp(t->name, want[i].name) || t->block_size != want[i].bs ||
		    t->type_size != want[i].ts || t->is_quantized != want[i].quant ||
		    (int)t->vec_dot_type != want[i].dot || !t->to_float) {
			printf("# traits of %s (id %d) are wrong\n", want[i].name, want[i].id);
			bad++;
		}
	}
	is_int(bad, 0, "name, block size, type size, vec_dot_type of every dtype");

	/* Reference quantisers the rest of the toolchain relies on. */
	static const int need_q[] = { MOE_F32, MOE_F16, MOE_BF16, MOE_Q8_0, MOE_Q4_0, MOE_Q8_K,
				      MOE_Q4_1, MOE_Q5_0, MOE_Q5_1, MOE_Q4_K, MOE_Q5_K, MOE_Q6_K };
	bad = 0;
	for (size_t i = 0; i < sizeof(need_q) / sizeof(need_q[0]); i++)
		bad += moe_type_get(need_q[i])->from_float == NULL;
	is_int(bad, 0, "from_float exists for f32 f16 bf16 q8_0 q4_0 q8_k q4_1 q5_0 q5_1 q4_k "
		       "q5_k q6_k");

	ok(moe_type_get(4) == NULL && moe_type_get(5) == NULL, "removed ids 4, 5 are unknown");
	ok(moe_type_get(-1) == NULL && moe_type_get(MOE_DTYPE_MAX) == NULL &&
		   moe_type_get(1000) == NULL,
	   "out-of-range ids are unknown");
}

static void test_names(void)
{
	is_int(moe_type_from_name("q4_k"), 12, "q4_k -> 12");
	is_int(moe_type_from_name("Q4_K"), 12, "Q4_K -> 12 (case-insensitive)");
	is_int(moe_type_from_name("BF16"), 30, "BF16 -> 30");
	is_int(moe_type_from_name("MxFp4"), 39, "MxFp4 -> 39");
	is_int(moe_type_from_name("iq4_xs"), 23, "iq4_xs -> 23");
	is_int(moe_type_from_name("f32"), 0, "f32 -> 0");
	is_int(moe_type_from_name("q4_2"), -1, "q4_2 is unknown");
	is_int(moe_type_from_name("q4_k "), -1, "trailing space is not ignored");
	is_int(moe_type_from_name(""), -1, "empty name is unknown");
	is_int(moe_type_from_name(NULL), -1, "NULL name is unknown");
	is_str(moe_type_name(MOE_MXFP4), "mxfp4", "name of 39");
	is_str(moe_type_name(MOE_Q6_K), "q6_k", "name of 14");
	is_str(moe_type_name(4), "?", "name of an unknown id");
	is_str(moe_type_name(-7), "?", "name of a negative id");

	int bad = 0;
	for (int id = 0; id < MOE_DTYPE_MAX; id++)
		if (moe_type_get(id) && moe_type_from_name(moe_type_name(id)) != id)
			bad++;
	is_int(bad, 0, "name -> id -> name round trip for every dtype");
}

static void test_nbytes(void)
{
	moe_error e = { 0 };
	uint64_t out = 0;

	ok(moe_type_nbytes(MOE_F32, 10, &out, &e) == 0 && out == 40, "10 f32 = 40 bytes");
	ok(moe_type_nbytes(MOE_Q4_0, 64, &out, &e) == 0 && out == 36, "64 q4_0 = 2 blocks = 36");
	ok(moe_type_nbytes(MOE_Q4_K, 512, &out, &e) == 0 && out == 288, "512 q4_k = 288");
	ok(moe_type_nbytes(MOE_MXFP4, 4096, &out, &e) == 0 && out == 128 * 17,
	   "4096 mxfp4 = 128 * 17");
	ok(moe_type_nbytes(MOE_Q8_0, 0, &out, &e) == 0 && out == 0, "0 elements = 0 bytes");

	memset(&e, 0, sizeof(e));
	is_int(moe_type_nbytes(MOE_Q4_0, 33, &out, &e), MOE_EFORMAT,
	       "33 q4_0 elements: not a multiple of the block");
	ok(strstr(e.msg, "q4_0") && strstr(e.msg, "33") && strstr(e.msg, "32"),
	   "message names type, count and block size: %s", e.msg);
	is_int(moe_type_nbytes(MOE_Q6_K, 300, &out, &e), MOE_EFORMAT, "300 q6_k elements");

	memset(&e, 0, sizeof(e));
	is_int(moe_type_nbytes(MOE_F32, (uint64_t)1 << 63, &out, &e), MOE_ERANGE,
	       "2^63 f32 elements overflow");
	ok(strstr(e.msg, "f32") != NULL, "overflow message names the type: %s", e.msg);
	is_int(moe_type_nbytes(MOE_Q8_K, UINT64_MAX - 255, &out, &e), MOE_ERANGE,
	       "2^64-256 q8_k elements overflow");
	ok(moe_type_nbytes(MOE_F32, (uint64_t)1 << 61, &out, &e) == 0 &&
		   out == (uint64_t)1 << 63,
	   "2^61 f32 elements = 2^63 bytes (no false overflow)");
	ok(moe_type_nbytes(MOE_I8, UINT64_MAX, &out, &e) == 0 && out == UINT64_MAX,
	   "UINT64_MAX i8 elements fit exactly");

	memset(&e, 0, sizeof(e));
	is_int(moe_type_nbytes(4, 32, &out, &e), MOE_EFORMAT, "unknown dtype 4");
	ok(strstr(e.msg, "4") != NULL, "message names the id: %s", e.msg);
	is_int(moe_type_nbytes(-1, 32, &out, NULL), MOE_EFORMAT, "dtype -1, NULL error");
	is_int(moe_type_nbytes(MOE_DTYPE_MAX, 32, &out, NULL), MOE_EFORMAT, "dtype 40");
}

/* ------------------------------------------------------- f16 / bf16 */

static void test_f16(void)
{
	/* f32 -> f16, values worked out from the format. */
	is_int(moe_f32_to_f16(0.0f), 0x0000, "f16(0)");
	is_int(moe_f32_to_f16(-0.0f), 0x8000, "f16(-0)");
	is_int(moe_f32_to_f16(1.0f), 0x3C00, "f16(1)");
	is_int(moe_f32_to_f16(-2.0f), 0xC000, "f16(-2)");
	is_int(moe_f32_to_f16(65504.0f), 0x7BFF, "f16(65504) = max");
	is_int(moe_f32_to_f16(65519.0f), 0x7BFF, "f16(65519) rounds down to max");
	is_int(moe_f32_to_f16(65520.0f), 0x7C00, "f16(65520): tie, even is inf");
	is_int(moe_f32_to_f16(1e6f), 0x7C00, "f16(1e6) = inf");
	is_int(moe_f32_to_f16(-INFINITY), 0xFC00, "f16(-inf)");
	is_int(moe_f32_to_f16(INFINITY), 0x7C00, "f16(inf)");
	uint16_t hn = moe_f32_to_f16(NAN);
	ok((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF), "f16(nan) is nan (0x%04x)", hn);
	hn = moe_f32_to_f16(u2f(0x7F800001)); /* payload only in low bits */
	ok((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF), "f16(nan with low payload) is nan");
	is_int(moe_f32_to_f16(0.33325195f), 0x3555, "f16(0.333251953125) exact");
	is_int(moe_f32_to_f16(ldexpf(1, -14)), 0x0400, "f16(2^-14) smallest normal");
	is_int(moe_f32_to_f16(ldexpf(1, -24)), 0x0001, "f16(2^-24) smallest subnormal");
	is_int(moe_f32_to_f16(ldexpf(1, -25)), 0x0000, "f16(2^-25): tie, even is 0");
	is_int(moe_f32_to_f16(-ldexpf(1, -25)), 0x8000, "f16(-2^-25) = -0");
	is_int(moe_f32_to_f16(ldexpf(1.5f, -25)), 0x0001, "f16(1.5 * 2^-25) rounds up");
	is_int(moe_f32_to_f16(ldexpf(3, -25)), 0x0002, "f16(1.5 * 2^-24): tie, even is 2");
	is_int(moe_f32_to_f16(ldexpf(5, -25)), 0x0002, "f16(2.5 * 2^-24): tie, even is 2");
	is_int(moe_f32_to_f16(ldexpf(1, -30)), 0x0000, "f16(2^-30) underflows to 0");
	is_int(moe_f32_to_f16(ldexpf(2047, -25)), 0x0400,
	       "f16(1023.5 * 2^-24): tie rounds up into the smallest normal");
	is_int(moe_f32_to_f16(ldexpf(1023, -24)), 0x03FF, "f16(largest subnormal)");
	is_int(moe_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3C00, "f16(1 + 2^-11): tie to even");
	is_int(moe_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3C02, "f16(1 + 3*2^-11): tie to even");
	is_int(moe_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3C01,
	       "f16(just above a tie) rounds up");
	is_int(moe_f32_to_f16(2.0f - ldexpf(1, -12)), 0x4000,
	       "f16(2 - 2^-12): rounding carries into the exponent");

	/* f16 -> f32 */
	ok(moe_f16_to_f32(0x0000) == 0.0f && !signbit(moe_f16_to_f32(0x0000)), "f32(+0)");
	ok(moe_f16_to_f32(0x8000) == 0.0f && signbit(moe_f16_to_f32(0x8000)), "f32(-0)");
	ok(moe_f16_to_f32(0x3C00) == 1.0f, "f32(0x3c00) = 1");
	ok(moe_f16_to_f32(0xC000) == -2.0f, "f32(0xc000) = -2");
	ok(moe_f16_to_f32(0x7BFF) == 65504.0f, "f32(0x7bff) = 65504");
	ok(moe_f16_to_f32(0x3555) == 0.333251953125f, "f32(0x3555) = 1365/4096");
	ok(moe_f16_to_f32(0x0001) == ldexpf(1, -24), "f32(0x0001) = 2^-24");
	ok(moe_f16_to_f32(0x03FF) == ldexpf(1023, -24), "f32(0x03ff) = 1023 * 2^-24");
	ok(moe_f16_to_f32(0x8200) == -ldexpf(1, -15), "f32(0x8200) = -2^-15");
	ok(moe_f16_to_f32(0x0400) == ldexpf(1, -14), "f32(0x0400) = 2^-14");
	ok(isinf(moe_f16_to_f32(0x7C00)) && moe_f16_to_f32(0x7C00) > 0, "f32(0x7c00) = inf");
	ok(isinf(moe_f16_to_f32(0xFC00)) && moe_f16_to_f32(0xFC00) < 0, "f32(0xfc00) = -inf");
	ok(isnan(moe_f16_to_f32(0x7E00)) && isnan(moe_f16_to_f32(0x7C01)) &&
		   isnan(moe_f16_to_f32(0xFFFF)),
	   "f32 of half NaNs is NaN");

	/* Every half survives half -> float -> half (NaNs stay NaN). */
	int bad = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = moe_f16_to_f32((uint16_t)h);
		uint16_t back = moe_f32_to_f16(f);
		bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
		if (nan ? !(isnan(f) && (back & 0x7C00) == 0x7C00 && (back & 0x3FF)) : back != h)
			bad++;
	}
	is_int(bad, 0, "all 65536 halves round-trip through float");

#ifdef __FLT16_MAX__
	/* Independent reference: the compiler's _Float16 conversions (round to
	 * nearest even) on every half and on a million random floats spread
	 * over the half range and beyond. */
	bad = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		_Float16 x;
		memcpy(&x, &h, 2);
		float want = (float)x, got = moe_f16_to_f32((uint16_t)h);
		if (!(isnan(want) ? isnan(got) : f2u(want) == f2u(got)))
			bad++;
	}
	is_int(bad, 0, "f16 -> f32 agrees with _Float16 on every half");
	bad = 0;
	for (int i = 0; i < 1000000; i++) {
		float f;
		if (i % 2)
			f = u2f(rnd() << 8 | (uint32_t)i); /* any bit pattern */
		else /* exponents around the half range */
			f = ldexpf(rndf(1, 2), rndi(50) - 30) * (rnd() & 1 ? 1 : -1);
		_Float16 x = (_Float16)f;
		uint16_t want;
		memcpy(&want, &x, 2);
		uint16_t got = moe_f32_to_f16(f);
		if (isnan(f) ? !((got & 0x7C00) == 0x7C00 && (got & 0x3FF)) : got != want)
			bad++;
	}
	is_int(bad, 0, "f32 -> f16 agrees with _Float16 on 10^6 values");
#endif
}

static void test_bf16(void)
{
	is_int(moe_f32_to_bf16(0.0f), 0x0000, "bf16(0)");
	is_int(moe_f32_to_bf16(-0.0f), 0x8000, "bf16(-0)");
	is_int(moe_f32_to_bf16(1.0f), 0x3F80, "bf16(1)");
	is_int(moe_f32_to_bf16(-3.0f), 0xC040, "bf16(-3)");
	is_int(moe_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3F80, "bf16(1 + 2^-8): tie to even");
	is_int(moe_f32_to_bf16(1.0f + ldexpf(3, -8)), 0x3F82, "bf16(1 + 3*2^-8): tie to even");
	is_int(moe_f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 0x3F81,
	       "bf16(just above a tie) rounds up");
	is_int(moe_f32_to_bf16(INFINITY), 0x7F80, "bf16(inf)");
	is_int(moe_f32_to_bf16(-INFINITY), 0xFF80, "bf16(-inf)");
	is_int(moe_f32_to_bf16(FLT_MAX), 0x7F80, "bf16(FLT_MAX) rounds to inf");
	is_int(moe_f32_to_bf16(u2f(0x00000001)), 0x0000, "bf16(f32 denorm min) = 0");
	is_int(moe_f32_to_bf16(u2f(0x00008000)), 0x0000, "bf16 subnormal tie to even 0");
	is_int(moe_f32_to_bf16(u2f(0x00018000)), 0x0002, "bf16 subnormal tie to even 2");
	is_int(moe_f32_to_bf16(u2f(0x00010000)), 0x0001, "bf16 subnormal exact");
	uint16_t h = moe_f32_to_bf16(NAN);
	ok((h & 0x7F80) == 0x7F80 && (h & 0x7F), "bf16(nan) is nan");
	h = moe_f32_to_bf16(u2f(0x7F800001)); /* would truncate to inf */
	ok((h & 0x7F80) == 0x7F80 && (h & 0x7F), "bf16(nan, payload in low half) stays nan");
	h = moe_f32_to_bf16(u2f(0xFFFFFFFF));
	ok((h & 0x7F80) == 0x7F80 && (h & 0x7F) && (h & 0x8000), "bf16(-nan) stays -nan");

	ok(moe_bf16_to_f32(0x3F80) == 1.0f, "f32(bf16 0x3f80) = 1");
	ok(moe_bf16_to_f32(0x4049) == 3.140625f, "f32(bf16 0x4049) = 3.140625");
	ok(moe_bf16_to_f32(0x0001) == ldexpf(1, -133), "f32(bf16 0x0001) = 2^-133");
	ok(signbit(moe_bf16_to_f32(0x8000)) && moe_bf16_to_f32(0x8000) == 0.0f, "f32(bf16 -0)");
	ok(isnan(moe_bf16_to_f32(0x7FC1)) && isinf(moe_bf16_to_f32(0xFF80)),
	   "f32(bf16 nan / -inf)");

	int bad = 0;
	for (uint32_t x = 0; x < 0x10000; x++) {
		float f = moe_bf16_to_f32((uint16_t)x);
		uint16_t back = moe_f32_to_bf16(f);
		if (isnan(f) ? !((back & 0x7F80) == 0x7F80 && (back & 0x7F)) : back != x)
			bad++;
	}
	is_int(bad, 0, "all 65536 bfloat16 values round-trip through float");
}

/* ------------------------------------------------------ plain types */

static void test_plain(void)
{
	uint8_t buf[64 + 1];
	float want[8];

	/* f32 from an odd address */
	want[0] = 1.5f, want[1] = -0.0f, want[2] = 3e38f;
	memcpy(buf + 1, want, 12);
	check_decode(MOE_F32, buf + 1, want, 3, 0, "f32 decode (unaligned)");
	moe_type_get(MOE_F32)->from_float(want, buf + 1, 3);
	ok(memcmp(buf + 1, want, 12) == 0, "f32 encode");

	/* f16: 1, -2, 65504, 2^-24, inf, 0x3555 = 1365/4096 */
	static const uint16_t hv[] = { 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3555 };
	float hw[] = { 1, -2, 65504, ldexpf(1, -24), INFINITY, 0.333251953125f };
	for (int i = 0; i < 6; i++)
		put16(buf + 1 + 2 * i, hv[i]);
	check_decode(MOE_F16, buf + 1, hw, 6, 0, "f16 decode");
	memset(buf, 0, sizeof(buf));
	moe_type_get(MOE_F16)->from_float(hw, buf + 1, 6);
	int bad = 0;
	for (int i = 0; i < 6; i++)
		bad += get16(buf + 1 + 2 * i) != hv[i];
	is_int(bad, 0, "f16 encode");

	/* bf16: 1, -3, 3.140625, inf */
	static const uint16_t bv[] = { 0x3F80, 0xC040, 0x4049, 0x7F80 };
	float bw[] = { 1, -3, 3.140625f, INFINITY };
	for (int i = 0; i < 4; i++)
		put16(buf + 1 + 2 * i, bv[i]);
	check_decode(MOE_BF16, buf + 1, bw, 4, 0, "bf16 decode");
	moe_type_get(MOE_BF16)->from_float(bw, buf + 1, 4);
	bad = 0;
	for (int i = 0; i < 4; i++)
		bad += get16(buf + 1 + 2 * i) != bv[i];
	is_int(bad, 0, "bf16 encode");

	/* f64 */
	double dv[] = { 2.5, -1e-3, 1e10 };
	float dw[] = { 2.5f, -1e-3f, 1e10f };
	memcpy(buf + 3, dv, sizeof(dv));
	check_decode(MOE_F64, buf + 3, dw, 3, 0, "f64 decode");
	moe_type_get(MOE_F64)->from_float(dw, buf + 3, 3);
	double dback[3];
	memcpy(dback, buf + 3, sizeof(dback));
	ok(dback[0] == 2.5 && dback[1] == (double)-1e-3f && dback[2] == 1e10, "f64 encode");

	/* integers */
	int8_t i8[] = { -128, 127, 0, -1 };
	float i8w[] = { -128, 127, 0, -1 };
	check_decode(MOE_I8, i8, i8w, 4, 0, "i8 decode");
	int16_t i16[] = { -32768, 1234, 32767 };
	float i16w[] = { -32768, 1234, 32767 };
	memcpy(buf + 1, i16, sizeof(i16));
	check_decode(MOE_I16, buf + 1, i16w, 3, 0, "i16 decode");
	int32_t i32[] = { -5, 16777217, INT32_MIN };
	float i32w[] = { -5, 16777216.0f, -2147483648.0f }; /* 2^24+1 -> nearest float */
	memcpy(buf + 1, i32, sizeof(i32));
	check_decode(MOE_I32, buf + 1, i32w, 3, 0, "i32 decode");
	int64_t i64[] = { -((int64_t)1 << 40), 3, INT64_MAX };
	float i64w[] = { -1099511627776.0f, 3, 9223372036854775808.0f };
	memcpy(buf + 1, i64, sizeof(i64));
	check_decode(MOE_I64, buf + 1, i64w, 3, 0, "i64 decode");
}

/* ------------------------------------------- 32-element block types */

static void test_q4_0(void)
{
	/* d = 0.5; qs[j] = j | (15 - j) << 4: element j = (j - 8) * 0.5,
	 * element 16 + j = (15 - j - 8) * 0.5.  Two blocks, the second
	 * with d = -1 and all nibbles 0 (value 8). */
	uint8_t b[1 + 2 * 18];
	float want[64];
	put16(b + 1, H_0_5);
	for (int j = 0; j < 16; j++)
		b[1 + 2 + j] = (uint8_t)(j | (15 - j) << 4);
	put16(b + 1 + 18, H_M1);
	memset(b + 1 + 20, 0, 16);
	for (int j = 0; j < 16; j++) {
		want[j] = (j - 8) * 0.5f;
		want[16 + j] = (7 - j) * 0.5f;
	}
	for (int j = 32; j < 64; j++)
		want[j] = 8.0f; /* (0 - 8) * -1 */
	ok(want[0] == -4.0f && want[15] == 3.5f && want[16] == 3.5f && want[31] == -4.0f,
	   "q4_0 golden spot values");
	check_decode(MOE_Q4_0, b + 1, want, 64, 0, "q4_0 decode, 2 blocks, unaligned");
}

static void test_q4_1(void)
{
	/* d = 0.25, m = -1: element j = j * 0.25 - 1, element 16 + j =
	 * (15 - j) * 0.25 - 1; so y[0] = -1, y[15] = 2.75. */
	uint8_t b[20];
	float want[32];
	put16(b, H_0_25);
	put16(b + 2, H_M1);
	for (int j = 0; j < 16; j++) {
		b[4 + j] = (uint8_t)(j | (15 - j) << 4);
		want[j] = j * 0.25f - 1;
		want[16 + j] = (15 - j) * 0.25f - 1;
	}
	ok(want[15] == 2.75f && want[31] == -1.0f, "q4_1 golden spot values");
	check_decode(MOE_Q4_1, b, want, 32, 0, "q4_1 decode");
}

static void test_q5_0(void)
{
	/* d = 2; qh bytes 01 00 01 80 = u32 0x80010001: the fifth bit is set
	 * for elements 0, 16 and 31.  qs[j] = j | (15 - j) << 4.
	 * y[0] = (16 - 16) * 2 = 0, y[1] = (1 - 16) * 2 = -30,
	 * y[16] = (15 + 16 - 16) * 2 = 30, y[17] = (14 - 16) * 2 = -4,
	 * y[31] = (0 + 16 - 16) * 2 = 0. */
	uint8_t b[22];
	float want[32];
	put16(b, H_2);
	b[2] = 0x01, b[3] = 0x00, b[4] = 0x01, b[5] = 0x80;
	for (int j = 0; j < 16; j++) {
		b[6 + j] = (uint8_t)(j | (15 - j) << 4);
		want[j] = (float)((j + (j == 0 ? 16 : 0) - 16) * 2);
		want[16 + j] = (float)((15 - j + (j == 0 || j == 15 ? 16 : 0) - 16) * 2);
	}
	ok(want[0] == 0 && want[1] == -30 && want[16] == 30 && want[17] == -4 && want[31] == 0,
	   "q5_0 golden spot values");
	check_decode(MOE_Q5_0, b, want, 32, 0, "q5_0 decode");
}

static void test_q5_1(void)
{
	/* d = 0.5, m = 1, qh = 0x000000FF (elements 0-7 get +16), every
	 * qs = 0x5A (low 10, high 5): y[0..7] = 26 * 0.5 + 1 = 14,
	 * y[8..15] = 10 * 0.5 + 1 = 6, y[16..31] = 5 * 0.5 + 1 = 3.5. */
	uint8_t b[24];
	float want[32];
	put16(b, H_0_5);
	put16(b + 2, H_1);
	put32(b + 4, 0xFF);
	memset(b + 8, 0x5A, 16);
	for (int j = 0; j < 32; j++)
		want[j] = j < 8 ? 14.0f : j < 16 ? 6.0f : 3.5f;
	check_decode(MOE_Q5_1, b, want, 32, 0, "q5_1 decode");
}

static void test_q8(void)
{
	/* q8_0: d = 0.125, qs[j] = 8j - 128 -> y = j - 16. */
	uint8_t b[36];
	float want[32];
	put16(b, H_0_125);
	for (int j = 0; j < 32; j++) {
		b[2 + j] = (uint8_t)(int8_t)(8 * j - 128);
		want[j] = (float)(j - 16);
	}
	check_decode(MOE_Q8_0, b, want, 32, 0, "q8_0 decode");

	/* q8_1: d = 0.5, s = anything (not used to decode), qs[j] = j - 16. */
	put16(b, H_0_5);
	put16(b + 2, 0x7C00);
	for (int j = 0; j < 32; j++) {
		b[4 + j] = (uint8_t)(int8_t)(j - 16);
		want[j] = (j - 16) * 0.5f;
	}
	check_decode(MOE_Q8_1, b, want, 32, 0, "q8_1 decode");
}

static const int kv_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
				  1,    13,   25,  38,  53,  69,  89,  113 };

static void test_iq4_nl(void)
{
	/* d = 0.5, qs[j] = j | (15 - j) << 4: y[j] = kv[j] / 2,
	 * y[16 + j] = kv[15 - j] / 2; y[0] = -63.5, y[8] = 0.5, y[16] = 56.5. */
	uint8_t b[18];
	float want[32];
	put16(b, H_0_5);
	for (int j = 0; j < 16; j++) {
		b[2 + j] = (uint8_t)(j | (15 - j) << 4);
		want[j] = kv_iq4nl[j] * 0.5f;
		want[16 + j] = kv_iq4nl[15 - j] * 0.5f;
	}
	ok(want[0] == -63.5f && want[8] == 0.5f && want[16] == 56.5f, "iq4_nl golden spots");
	check_decode(MOE_IQ4_NL, b, want, 32, 0, "iq4_nl decode");
}

/* FP4 E2M1 from the OCP MX spec: sign bit 3, exponent bits 2-1 (bias 1),
 * mantissa bit 0; exponent 0 is subnormal (0 or 0.5). */
static double e2m1(int q)
{
	int s = q >> 3 & 1, e = q >> 1 & 3, m = q & 1;
	double v = e == 0 ? m * 0.5 : ldexp(1.0 + m * 0.5, e - 1);
	return s ? -v : v;
}

static void test_mxfp4(void)
{
	/* The 16 E2M1 values by hand: 0 .5 1 1.5 2 3 4 6 and negatives. */
	static const double fp4[16] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6,
					-0.0, -0.5, -1, -1.5, -2, -3, -4, -6 };
	int bad = 0;
	for (int q = 0; q < 16; q++)
		bad += e2m1(q) != fp4[q];
	is_int(bad, 0, "E2M1 spec helper matches the hand table");

	/* Scale 2^(e - 127) (E8M0), value = E2M1(q) * scale. */
	static const int exps[] = { 127, 130, 120, 1, 0, 250 };
	for (size_t k = 0; k < sizeof(exps) / sizeof(exps[0]); k++) {
		uint8_t b[17];
		float want[32];
		b[0] = (uint8_t)exps[k];
		for (int j = 0; j < 16; j++) {
			b[1 + j] = (uint8_t)(j | (15 - j) << 4);
			want[j] = (float)(fp4[j] * ldexp(1.0, exps[k] - 127));
			want[16 + j] = (float)(fp4[15 - j] * ldexp(1.0, exps[k] - 127));
		}
		char what[64];
		snprintf(what, sizeof(what), "mxfp4 decode, e = %d", exps[k]);
		check_decode(MOE_MXFP4, b, want, 32, 0, what);
	}
	/* e = 127 is scale 1: code 7 is 6.0, code 15 is -6.0. */
	uint8_t b[17] = { 127 };
	memset(b + 1, 0xF7, 16);
	float y[32];
	moe_type_get(MOE_MXFP4)->to_float(b, y, 32);
	ok(y[0] == 6.0f && y[16] == -6.0f, "mxfp4 e=127 code 7 = 6, code 15 = -6");
	/* The top of the E8M0 range: e = 254 is 2^127, so code 1 (0.5) is
	 * 2^126 and code 2 (1.0) is 2^127. */
	b[0] = 254;
	memset(b + 1, 0x21, 16);
	moe_type_get(MOE_MXFP4)->to_float(b, y, 32);
	ok(y[0] == ldexpf(1, 126) && y[16] == ldexpf(1, 127), "mxfp4 e=254 scale is 2^127");
}

/* ------------------------------------------------------ K-quants */

/* Q2_K (84 bytes): scales[16] @0 (low nibble scale, high nibble min),
 * qs[64] @16, d @80, dmin @82.  Element e = 128n + 32j + 16h + l sits in
 * bits 2j..2j+1 of qs[32n + 16h + l]; x = d*sc*q - dmin*m, group e/16. */
static void pack_q2k(uint8_t *b, const int *L, const int *sc, const int *m, uint16_t d,
		     uint16_t dmin)
{
	memset(b, 0, 84);
	for (int g = 0; g < 16; g++)
		b[g] = (uint8_t)(sc[g] | m[g] << 4);
	for (int e = 0; e < 256; e++) {
		int n = e / 128, j = (e % 128) / 32, r = e % 32;
		b[16 + 32 * n + r] |= (uint8_t)(L[e] << (2 * j));
	}
	put16(b + 80, d);
	put16(b + 82, dmin);
}

static void test_q2_k(void)
{
	uint8_t b[84];
	int L[256], sc[16], m[16];
	float want[256];

	/* Hand values: d = 0.5, dmin = 0.25, group g has scale g, min 15 - g;
	 * qs byte k = k (k < 64).  e = 0: byte 0 -> q 0, g 0: 0 - 0.25*15 =
	 * -3.75.  e = 37 (j 1, r 5): byte 5 = 0b101, bits 2-3 = 1, g 2:
	 * 0.5*2*1 - 0.25*13 = -2.25.  e = 200 (n 1, j 2, r 8): byte 40 =
	 * 0b101000, bits 4-5 = 2, g 12: 0.5*12*2 - 0.25*3 = 11.25.
	 * e = 127 (j 3, r 31): byte 31, bits 6-7 = 0, g 7: -0.25*8 = -2. */
	for (int g = 0; g < 16; g++)
		b[g] = (uint8_t)(g | (15 - g) << 4);
	for (int k = 0; k < 64; k++)
		b[16 + k] = (uint8_t)k;
	put16(b + 80, H_0_5);
	put16(b + 82, H_0_25);
	float y[256];
	moe_type_get(MOE_Q2_K)->to_float(b, y, 256);
	ok(y[0] == -3.75f && y[37] == -2.25f && y[200] == 11.25f && y[127] == -2.0f,
	   "q2_k hand-computed elements (%g %g %g %g)", y[0], y[37], y[200], y[127]);

	/* Random codes packed in the encoder direction. */
	for (int g = 0; g < 16; g++)
		sc[g] = rndi(16), m[g] = rndi(16);
	for (int e = 0; e < 256; e++)
		L[e] = rndi(4);
	uint16_t d = moe_f32_to_f16(0.0371f), dmin = moe_f32_to_f16(0.0113f);
	pack_q2k(b, L, sc, m, d, dmin);
	for (int e = 0; e < 256; e++)
		want[e] = moe_f16_to_f32(d) * sc[e / 16] * L[e] - moe_f16_to_f32(dmin) * m[e / 16];
	check_decode(MOE_Q2_K, b, want, 256, 1e-6, "q2_k decode, random codes");
}

/* Q3_K (110 bytes): hmask[32] @0, qs[64] @32, scales[12] @96, d @108.
 * Code L in [0, 8): low 2 bits as Q2_K, bit 2 in hmask[e % 32] at bit
 * 4n + j; value d * (s - 32) * (L - 4).  6-bit group scale s: low nibble
 * in byte g (g < 8) or the high nibble of byte g - 8, top 2 bits in byte
 * 8 + g % 4 at bit 2 * (g / 4). */
static void pack_q3k(uint8_t *b, const int *L, const int *s, uint16_t d)
{
	memset(b, 0, 110);
	for (int e = 0; e < 256; e++) {
		int n = e / 128, j = (e % 128) / 32, r = e % 32;
		b[32 + 32 * n + r] |= (uint8_t)((L[e] & 3) << (2 * j));
		if (L[e] & 4)
			b[r] |= (uint8_t)(1 << (4 * n + j));
	}
	for (int g = 0; g < 16; g++) {
		if (g < 8)
			b[96 + g] |= (uint8_t)(s[g] & 15);
		else
			b[96 + g - 8] |= (uint8_t)((s[g] & 15) << 4);
		b[96 + 8 + g % 4] |= (uint8_t)((s[g] >> 4) << (2 * (g / 4)));
	}
	put16(b + 108, d);
}

static void test_q3_k(void)
{
	uint8_t b[110];
	int L[256], s[16];
	float want[256];

	/* Hand values: d = 1; every stored scale 33 (= +1) except group 15
	 * with stored 0 (= -32) and group 9 with stored 63 (= +31); all
	 * hmask bits set (no -4) and all low bits 3 -> q = 3 - 0 = 3 ...
	 * element 0: 1 * 1 * 3 = 3; element 150 (group 9): 31 * 3 = 93;
	 * element 255 (group 15): -32 * 3 = -96.  Then clear hmask bit 0 of
	 * byte 0 (element 0): 3 - 4 = -1 -> -1. */
	for (int g = 0; g < 16; g++)
		s[g] = g == 15 ? 0 : g == 9 ? 63 : 33;
	for (int e = 0; e < 256; e++)
		L[e] = 7;
	L[0] = 3;
	pack_q3k(b, L, s, H_1);
	ok(b[0] == 0xFE && b[1] == 0xFF && b[32] == 0xFF, "q3_k hand packing of hmask/qs");
	float y[256];
	moe_type_get(MOE_Q3_K)->to_float(b, y, 256);
	ok(y[0] == -1.0f && y[1] == 3.0f && y[150] == 93.0f && y[255] == -96.0f,
	   "q3_k hand-computed elements (%g %g %g %g)", y[0], y[1], y[150], y[255]);

	for (int g = 0; g < 16; g++)
		s[g] = rndi(64);
	for (int e = 0; e < 256; e++)
		L[e] = rndi(8);
	uint16_t d = moe_f32_to_f16(-0.0123f);
	pack_q3k(b, L, s, d);
	for (int e = 0; e < 256; e++)
		want[e] = moe_f16_to_f32(d) * (s[e / 16] - 32) * (L[e] - 4);
	check_decode(MOE_Q3_K, b, want, 256, 1e-6, "q3_k decode, random codes");
}

/* The 12 scale bytes of Q4_K/Q5_K: groups 0-3 keep scale and min in the
 * low 6 bits of bytes g and g + 4; groups 4-7 keep their low nibbles in
 * byte g + 4 (scale low, min high) and their top 2 bits in the top bits of
 * bytes g - 4 (scale) and g (min). */
static void pack_k4_scales(uint8_t *p, const int *sc, const int *m)
{
	memset(p, 0, 12);
	for (int g = 0; g < 4; g++) {
		p[g] = (uint8_t)(sc[g] | (sc[g + 4] >> 4) << 6);
		p[g + 4] = (uint8_t)(m[g] | (m[g + 4] >> 4) << 6);
		p[g + 8] = (uint8_t)((sc[g + 4] & 15) | (m[g + 4] & 15) << 4);
	}
}

/* Q4_K (144): d @0, dmin @2, scales @4, qs[128] @16; element e = 64p + 32h
 * + l is nibble h of qs[32p + l]; x = d*sc*q - dmin*m with group e/32. */
static void pack_q4k(uint8_t *b, const int *L, const int *sc, const int *m, uint16_t d,
		     uint16_t dmin)
{
	memset(b, 0, 144);
	put16(b, d);
	put16(b + 2, dmin);
	pack_k4_scales(b + 4, sc, m);
	for (int e = 0; e < 256; e++)
		b[16 + 32 * (e / 64) + e % 32] |= (uint8_t)(L[e] << (4 * ((e / 32) % 2)));
}

/* Q5_K (176): as Q4_K with qh[32] @16 (bit g of qh[e % 32] is bit 4 of
 * element e of group g) and qs @48. */
static void pack_q5k(uint8_t *b, const int *L, const int *sc, const int *m, uint16_t d,
		     uint16_t dmin)
{
	memset(b, 0, 176);
	put16(b, d);
	put16(b + 2, dmin);
	pack_k4_scales(b + 4, sc, m);
	for (int e = 0; e < 256; e++) {
		b[48 + 32 * (e / 64) + e % 32] |= (uint8_t)((L[e] & 15) << (4 * ((e / 32) % 2)));
		b[16 + e % 32] |= (uint8_t)((L[e] >> 4) << (e / 32));
	}
}

static void test_q4_k_q5_k(void)
{
	static const int hsc[8] = { 1, 2, 3, 4, 17, 33, 49, 63 };
	static const int hm[8] = { 0, 1, 2, 3, 16, 32, 48, 63 };
	int L[256], sc[8], m[8];
	uint8_t b[176];
	float want[256], y[256];

	/* Hand values, d = 1, dmin = 0.5, code = e % 16:
	 * e = 5 (g 0): 1*5 - 0 = 5;  e = 130 (g 4: sc 17, m 16, q 2):
	 * 34 - 8 = 26;  e = 200 (g 6: sc 49, m 48, q 8): 392 - 24 = 368;
	 * e = 255 (g 7: sc 63, m 63, q 15): 945 - 31.5 = 913.5. */
	for (int e = 0; e < 256; e++)
		L[e] = e % 16;
	pack_q4k(b, L, hsc, hm, H_1, H_0_5);
	/* Byte 0 = scale 1 | (scale of group 4 = 17 >> 4 = 1) << 6 = 0x41;
	 * byte 8 = (17 & 15) | (16 & 15) << 4 = 0x01. */
	ok(b[4] == 0x41 && b[12] == 0x01, "q4_k hand packing of the scale bytes");
	moe_type_get(MOE_Q4_K)->to_float(b, y, 256);
	ok(y[5] == 5.0f && y[130] == 26.0f && y[200] == 368.0f && y[255] == 913.5f,
	   "q4_k hand-computed elements (%g %g %g %g)", y[5], y[130], y[200], y[255]);

	/* Q5_K: code = e % 32 (bit 4 set for half of them), same scales:
	 * e = 31 (g 0, q 31): 31;  e = 223 (g 6, q 31): 49*31 - 24 = 1495;
	 * e = 240 (g 7, q 16): 63*16 - 31.5 = 976.5. */
	for (int e = 0; e < 256; e++)
		L[e] = e % 32;
	pack_q5k(b, L, hsc, hm, H_1, H_0_5);
	moe_type_get(MOE_Q5_K)->to_float(b, y, 256);
	ok(y[31] == 31.0f && y[223] == 1495.0f && y[240] == 976.5f,
	   "q5_k hand-computed elements (%g %g %g)", y[31], y[223], y[240]);

	for (int round = 0; round < 3; round++) {
		for (int g = 0; g < 8; g++)
			sc[g] = rndi(64), m[g] = rndi(64);
		uint16_t d = moe_f32_to_f16(rndf(0.001f, 0.1f));
		uint16_t dmin = moe_f32_to_f16(rndf(0.001f, 0.1f));
		for (int e = 0; e < 256; e++)
			L[e] = rndi(16);
		pack_q4k(b, L, sc, m, d, dmin);
		for (int e = 0; e < 256; e++)
			want[e] = moe_f16_to_f32(d) * sc[e / 32] * L[e] -
				  moe_f16_to_f32(dmin) * m[e / 32];
		check_decode(MOE_Q4_K, b, want, 256, 1e-6, "q4_k decode, random codes");
		for (int e = 0; e < 256; e++)
			L[e] = rndi(32);
		pack_q5k(b, L, sc, m, d, dmin);
		for (int e = 0; e < 256; e++)
			want[e] = moe_f16_to_f32(d) * sc[e / 32] * L[e] -
				  moe_f16_to_f32(dmin) * m[e / 32];
		check_decode(MOE_Q5_K, b, want, 256, 1e-6, "q5_k decode, random codes");
	}
}

/* Q6_K (210): ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208.
 * Element e = 128n + 32k + l: low nibble in nibble k/2 of
 * ql[64n + 32(k%2) + l], top 2 bits in bits 2k of qh[32n + l];
 * x = d * scale[e/16] * (L - 32). */
static void pack_q6k(uint8_t *b, const int *L, const int *sc, uint16_t d)
{
	memset(b, 0, 210);
	for (int e = 0; e < 256; e++) {
		int n = e / 128, k = (e % 128) / 32, l = e % 32;
		b[64 * n + 32 * (k % 2) + l] |= (uint8_t)((L[e] & 15) << (4 * (k / 2)));
		b[128 + 32 * n + l] |= (uint8_t)((L[e] >> 4) << (2 * k));
	}
	for (int g = 0; g < 16; g++)
		b[192 + g] = (uint8_t)(int8_t)sc[g];
	put16(b + 208, d);
}

static void test_q6_k(void)
{
	uint8_t b[210];
	int L[256], sc[16];
	float want[256], y[256];

	/* Hand values, d = 0.5, scale[g] = g - 8 (so -8 .. 7), code
	 * L = 63 for e < 128 and 0 above:  e = 0 (g 0): 0.5*-8*31 = -124;
	 * e = 127 (g 7): 0.5*-1*31 = -15.5;  e = 128 (g 8): 0;
	 * e = 255 (g 15): 0.5*7*-32 = -112. */
	for (int g = 0; g < 16; g++)
		sc[g] = g - 8;
	for (int e = 0; e < 256; e++)
		L[e] = e < 128 ? 63 : 0;
	pack_q6k(b, L, sc, H_0_5);
	ok(b[0] == 0xFF && b[127] == 0x00 && b[128] == 0xFF && b[192] == 0xF8,
	   "q6_k hand packing");
	moe_type_get(MOE_Q6_K)->to_float(b, y, 256);
	ok(y[0] == -124.0f && y[127] == -15.5f && y[128] == 0.0f && y[255] == -112.0f,
	   "q6_k hand-computed elements (%g %g %g %g)", y[0], y[127], y[128], y[255]);

	for (int round = 0; round < 3; round++) {
		for (int g = 0; g < 16; g++)
			sc[g] = rndi(256) - 128;
		for (int e = 0; e < 256; e++)
			L[e] = rndi(64);
		uint16_t d = moe_f32_to_f16(rndf(-0.01f, 0.01f));
		pack_q6k(b, L, sc, d);
		for (int e = 0; e < 256; e++)
			want[e] = moe_f16_to_f32(d) * sc[e / 16] * (L[e] - 32);
		check_decode(MOE_Q6_K, b, want, 256, 1e-6, "q6_k decode, random codes");
	}
}

static void test_q8_k(void)
{
	/* Q8_K (292): f32 d @0, int8 qs[256] @4, int16 bsums[16] @260.
	 * d = 0.25, qs[e] = (e % 256) - 128 -> y = (e - 128) / 4. */
	uint8_t b[1 + 292];
	float want[256];
	putf(b + 1, 0.25f);
	for (int e = 0; e < 256; e++) {
		b[1 + 4 + e] = (uint8_t)(int8_t)(e - 128);
		want[e] = (e - 128) * 0.25f;
	}
	memset(b + 1 + 260, 0, 32);
	check_decode(MOE_Q8_K, b + 1, want, 256, 0, "q8_k decode (unaligned)");
}

/* IQ4_XS (136): d @0, u16 scales_h @2, scales_l[4] @4, qs[128] @8.  Group
 * g of 32: 6-bit ls = nibble g%2 of scales_l[g/2] | bits 2g of scales_h
 * << 4; element 32g + l (l < 16) = low nibble of qs[16g + l], 32g + 16 +
 * l the high nibble; x = d * (ls - 32) * kv[q]. */
static void test_iq4_xs(void)
{
	uint8_t b[136];
	int ls[8], L[256];
	float want[256], y[256];

	/* Hand values, d = 1: ls = {33, 31, 0, 63, 32, 48, 16, 40}:
	 * scales_l = 0xF1 0xF0 0x00 0x80 (low nibbles 1 F 0 F 0 0 0 8),
	 * top bits 2 1 0 3 2 3 1 2 -> scales_h = 0b10_01_11_10_11_00_01_10
	 * = 0x9EC6.  Codes: qs all 0x8F (low 15 -> 113, high 8 -> 1):
	 * e = 0 (g 0, +1): 113; e = 16: 1; e = 32 (g 1, -1): -113;
	 * e = 64 (g 2, -32): -3616; e = 127 (g 3, +31): 31;
	 * e = 255 (g 7, +8): 8. */
	put16(b, H_1);
	put16(b + 2, 0x9EC6);
	b[4] = 0xF1, b[5] = 0xF0, b[6] = 0x00, b[7] = 0x80;
	memset(b + 8, 0x8F, 128);
	moe_type_get(MOE_IQ4_XS)->to_float(b, y, 256);
	ok(y[0] == 113.0f && y[16] == 1.0f && y[32] == -113.0f && y[64] == -3616.0f &&
		   y[127] == 31.0f && y[255] == 8.0f,
	   "iq4_xs hand-computed elements (%g %g %g %g %g %g)", y[0], y[16], y[32], y[64],
	   y[127], y[255]);

	for (int g = 0; g < 8; g++)
		ls[g] = rndi(64);
	for (int e = 0; e < 256; e++)
		L[e] = rndi(16);
	uint16_t d = moe_f32_to_f16(0.0071f), sh = 0;
	memset(b, 0, sizeof(b));
	put16(b, d);
	for (int g = 0; g < 8; g++) {
		b[4 + g / 2] |= (uint8_t)((ls[g] & 15) << (4 * (g % 2)));
		sh |= (uint16_t)((ls[g] >> 4) << (2 * g));
	}
	put16(b + 2, sh);
	for (int g = 0; g < 8; g++)
		for (int l = 0; l < 16; l++)
			b[8 + 16 * g + l] = (uint8_t)(L[32 * g + l] | L[32 * g + 16 + l] << 4);
	for (int e = 0; e < 256; e++)
		want[e] = moe_f16_to_f32(d) * (ls[e / 32] - 32) * kv_iq4nl[L[e]];
	check_decode(MOE_IQ4_XS, b, want, 256, 1e-6, "iq4_xs decode, random codes");
}

/* ------------------------------------------------------ round trips */

#define NB 8 /* blocks of 256 per round-trip test: 2048 values */

/* Test data: blocks of different magnitudes and shapes, including an all
 * zero block, an all-positive block and a constant block. */
static void make_data(float *x, int n)
{
	for (int i = 0; i < n; i++) {
		int blk = i / 256;
		switch (blk % 8) {
		case 0:
			x[i] = rndf(-1, 1);
			break;
		case 1:
			x[i] = rndf(-1, 1) * 1e-3f;
			break;
		case 2:
			x[i] = 0.0f;
			break;
		case 3:
			x[i] = rndf(0.5f, 2.0f);
			break;
		case 4: /* groups of very different size */
			x[i] = rndf(-1, 1) * ldexpf(1, (i / 16) % 8 - 4);
			break;
		case 5:
			x[i] = -0.75f;
			break;
		case 6:
			x[i] = rndf(-3.0f, -0.1f);
			break;
		default: /* heavy tailed */
			x[i] = rndf(-1, 1) * rndf(-1, 1) * rndf(-1, 1) * 8;
			break;
		}
	}
}

static float absmax(const float *x, int n, float *signed_max)
{
	float a = 0, s = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > a)
			a = fabsf(x[i]), s = x[i];
	if (signed_max)
		*signed_max = s;
	return a;
}

/* Quantise and decode x through the traits table. */
static void roundtrip(int type, const float *x, float *y, int n)
{
	const moe_type_traits *t = moe_type_get(type);
	static uint8_t q[NB * 512];
	memset(q, 0xA5, sizeof(q));
	t->from_float(x, q, n);
	t->to_float(q, y, n);
}

/* f16 relative rounding error bound. */
#define F16_EPS (1.0 / 2048)

/* Largest error of rounding a positive v to a half: half an ulp, which is
 * 2^-25 absolute in the subnormal range (tiny blocks have tiny scales). */
static double f16err(double v)
{
	return fmax(fabs(v) * F16_EPS, 0x1p-25);
}

static void test_roundtrip_32(void)
{
	float x[NB * 256], y[NB * 256];
	int n = NB * 256;
	make_data(x, n);

	/* Q8_0: d = amax / 127, codes round(x / d); the stored scale is
	 * rounded to half, so |err| <= d/2 + 127 * f16err(d). */
	roundtrip(MOE_Q8_0, x, y, n);
	double worst = 0;
	for (int b = 0; b < n / 32; b++) {
		double d = absmax(x + 32 * b, 32, NULL) / 127.0;
		for (int j = 0; j < 32; j++) {
			double err = fabs(x[32 * b + j] - y[32 * b + j]);
			worst = fmax(worst, err / (d * 0.5 + 127 * f16err(d)));
		}
	}
	ok(worst <= 1.0, "q8_0 round trip within d/2 (+ f16 scale rounding): %.3f", worst);

	/* Q8_1: same codes; s = d * sum(q). */
	roundtrip(MOE_Q8_1, x, y, n);
	worst = 0;
	for (int b = 0; b < n / 32; b++) {
		double d = absmax(x + 32 * b, 32, NULL) / 127.0;
		for (int j = 0; j < 32; j++)
			worst = fmax(worst, fabs(x[32 * b + j] - y[32 * b + j]) /
						    (d * 0.5 + 127 * f16err(d)));
	}
	ok(worst <= 1.0, "q8_1 round trip within d/2: %.3f", worst);
	{
		uint8_t q[36];
		moe_type_get(MOE_Q8_1)->from_float(x, q, 32);
		double d = moe_f16_to_f32(get16(q)), s = moe_f16_to_f32(get16(q + 2));
		int sum = 0;
		for (int j = 0; j < 32; j++)
			sum += (int8_t)q[4 + j];
		ok(fabs(s - d * sum) <= fabs(d * sum) * 3 * F16_EPS + 1e-6,
		   "q8_1 s = d * sum(q) (%g vs %g)", s, d * sum);
	}

	/* Q4_0 / Q5_0: d = max / -nmax (signed extreme to code 0); error at
	 * most d/2, except elements beyond +(nmax - 0.5)|d| on the far side
	 * which clip to the last code (error <= |d|). */
	static const struct {
		int type, nmax;
	} sym[] = { { MOE_Q4_0, 8 }, { MOE_Q5_0, 16 } };
	for (int k = 0; k < 2; k++) {
		roundtrip(sym[k].type, x, y, n);
		worst = 0;
		for (int b = 0; b < n / 32; b++) {
			float smax;
			double ad = absmax(x + 32 * b, 32, &smax) / sym[k].nmax;
			for (int j = 0; j < 32; j++) {
				double v = x[32 * b + j], err = fabs(v - y[32 * b + j]);
				double code = v / (smax / -(double)sym[k].nmax);
				bool far = ad > 0 && code > sym[k].nmax - 0.5;
				double lim = ad * (far ? 1.0 : 0.5) + 2 * sym[k].nmax * f16err(ad);
				worst = fmax(worst, err / (lim + 1e-30));
			}
		}
		ok(worst <= 1.0, "%s round trip within |d|/2 (|d| at the clipped end): %.3f",
		   moe_type_name(sym[k].type), worst);
	}

	/* Q4_1 / Q5_1: d = (max - min) / nmax, m = min; error <= d/2 plus
	 * the half rounding of d and m. */
	static const struct {
		int type, nmax;
	} asym[] = { { MOE_Q4_1, 15 }, { MOE_Q5_1, 31 } };
	for (int k = 0; k < 2; k++) {
		roundtrip(asym[k].type, x, y, n);
		worst = 0;
		for (int b = 0; b < n / 32; b++) {
			float mn = x[32 * b], mx = x[32 * b];
			for (int j = 0; j < 32; j++)
				mn = fminf(mn, x[32 * b + j]), mx = fmaxf(mx, x[32 * b + j]);
			double d = (mx - mn) / (double)asym[k].nmax;
			double lim = d * 0.5 + asym[k].nmax * f16err(d) + f16err(mn);
			for (int j = 0; j < 32; j++)
				worst = fmax(worst,
					     fabs(x[32 * b + j] - y[32 * b + j]) / (lim + 1e-30));
		}
		ok(worst <= 1.0, "%s round trip within d/2: %.3f", moe_type_name(asym[k].type),
		   worst);
	}

	/* IQ4_NL: d = max / -127; the widest table gap is 24 (89 .. 113) and
	 * the far end clips at 113, so |err| <= 14 |d| (+ f16 rounding). */
	roundtrip(MOE_IQ4_NL, x, y, n);
	worst = 0;
	for (int b = 0; b < n / 32; b++) {
		double ad = absmax(x + 32 * b, 32, NULL) / 127.0;
		for (int j = 0; j < 32; j++)
			worst = fmax(worst, fabs(x[32 * b + j] - y[32 * b + j]) /
						    (ad * 14 + 127 * f16err(ad)));
	}
	ok(worst <= 1.0, "iq4_nl round trip within 14|d|: %.3f", worst);

	/* MXFP4: scale 2^(floor(log2 amax) - 2) (as ggml), values E2M1 times
	 * the scale; amax < 16 * half-scale, the widest gap 8 -> 12 half
	 * units: |err| <= 4 half units = 2^(floor(log2 amax) - 1)... */
	roundtrip(MOE_MXFP4, x, y, n);
	worst = 0;
	for (int b = 0; b < n / 32; b++) {
		double amax = absmax(x + 32 * b, 32, NULL);
		if (amax == 0) {
			for (int j = 0; j < 32; j++)
				worst = fmax(worst, fabs(y[32 * b + j]) * 1e30);
			continue;
		}
		double half = ldexp(1.0, (int)floor(log2(amax)) - 3);
		for (int j = 0; j < 32; j++)
			worst = fmax(worst, fabs(x[32 * b + j] - y[32 * b + j]) / (4 * half));
	}
	ok(worst <= 1.0, "mxfp4 round trip within 4 half-units: %.3f", worst);

	/* ... and E2M1 values at scale 1 come back exactly: 6 = 1.5 * 2^2 so
	 * the exponent byte is 2 - 2 + 127 = 127. */
	{
		static const float v[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
					     0, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
		float in[32], out[32];
		uint8_t q[17];
		for (int j = 0; j < 32; j++)
			in[j] = v[(j * 7) % 16];
		moe_type_get(MOE_MXFP4)->from_float(in, q, 32);
		moe_type_get(MOE_MXFP4)->to_float(q, out, 32);
		ok(q[0] == 127 && memcmp(in, out, sizeof(in)) == 0,
		   "mxfp4: exact E2M1 values round-trip exactly (e = %d)", q[0]);
	}

	/* Exactly representable Q4_0 data comes back exactly: d = -0.5 from
	 * max = 4, codes k - 8 for values (k - 8) * -0.5. */
	{
		float in[32], out[32];
		uint8_t q[18];
		for (int j = 0; j < 32; j++)
			in[j] = ((j % 16) - 8) * -0.5f;
		moe_type_get(MOE_Q4_0)->from_float(in, q, 32);
		moe_type_get(MOE_Q4_0)->to_float(q, out, 32);
		ok(get16(q) == 0xB800 && memcmp(in, out, sizeof(in)) == 0,
		   "q4_0: representable block round-trips exactly (d = 0x%04x)", get16(q));
	}

	/* Exactly representable Q8_0 data: max 127 -> d = 1. */
	{
		float in[32], out[32];
		uint8_t q[34];
		for (int j = 0; j < 32; j++)
			in[j] = (float)(j * 8 - 127);
		in[0] = 127;
		moe_type_get(MOE_Q8_0)->from_float(in, q, 32);
		moe_type_get(MOE_Q8_0)->to_float(q, out, 32);
		ok(get16(q) == H_1 && memcmp(in, out, sizeof(in)) == 0,
		   "q8_0: integer block round-trips exactly");
	}
}

static void test_roundtrip_k(void)
{
	float x[NB * 256], y[NB * 256];
	int n = NB * 256;
	make_data(x, n);

	/* Q8_K: d = amax / 127 in f32. */
	roundtrip(MOE_Q8_K, x, y, n);
	double worst = 0;
	for (int b = 0; b < n / 256; b++) {
		double d = absmax(x + 256 * b, 256, NULL) / 127.0;
		for (int j = 0; j < 256; j++)
			worst = fmax(worst, fabs(x[256 * b + j] - y[256 * b + j]) /
						    (d * (0.5 + 1e-5) + 1e-30));
	}
	ok(worst <= 1.0, "q8_k round trip within d/2: %.3f", worst);
	{
		static uint8_t q[292];
		moe_type_get(MOE_Q8_K)->from_float(x, q, 256);
		int bad = 0, lo = 0;
		for (int g = 0; g < 16; g++) {
			int s = 0;
			for (int l = 0; l < 16; l++) {
				s += (int8_t)q[4 + 16 * g + l];
				lo += (int8_t)q[4 + 16 * g + l] == -128;
			}
			bad += (int16_t)get16(q + 260 + 2 * g) != s;
		}
		ok(bad == 0 && lo == 0, "q8_k bsums are the group sums; no code -128");
	}

	/* Q4_K / Q5_K (simple reference): per group the error is at most half
	 * a step, step <= (range_g + dmin)/nmax + d with range_g = max -
	 * min(0, min), dmin ~ max(-min)/63 and d ~ max(need)/63 where need
	 * <= (range + dmin)/nmax; "big" bounds both range and -min. */
	static const struct {
		int type, nmax;
	} kq[] = { { MOE_Q4_K, 15 }, { MOE_Q5_K, 31 } };
	for (int k = 0; k < 2; k++) {
		roundtrip(kq[k].type, x, y, n);
		worst = 0;
		double sq = 0, sx = 0;
		for (int b = 0; b < n / 256; b++) {
			double range[8], maxrange = 0;
			for (int g = 0; g < 8; g++) {
				float mn = 0, mx = x[256 * b + 32 * g];
				for (int l = 0; l < 32; l++) {
					mn = fminf(mn, x[256 * b + 32 * g + l]);
					mx = fmaxf(mx, x[256 * b + 32 * g + l]);
				}
				range[g] = mx - mn;
				maxrange = fmax(maxrange, fmax(range[g], -mn));
			}
			for (int e = 0; e < 256; e++) {
				double lim = 0.5 * range[e / 32] / kq[k].nmax +
					     1.05 * maxrange / (63.0 * kq[k].nmax) +
					     1e-6 * maxrange + 1e-7; /* half subnormal steps */
				double err = fabs(x[256 * b + e] - y[256 * b + e]);
				worst = fmax(worst, err / (lim + 1e-30));
				sq += err * err;
				sx += (double)x[256 * b + e] * x[256 * b + e];
			}
		}
		ok(worst <= 1.0, "%s round trip within half a group step: %.3f",
		   moe_type_name(kq[k].type), worst);
		tap_diag("%s relative rms error %.4f", moe_type_name(kq[k].type), sqrt(sq / sx));
	}

	/* Q6_K: group scale s = amax_g/32; codes [-32, 31] so the far end
	 * clips by up to one step; the int8 group scales (step d = amax/4096
	 * rounded up to a half) are off by <= d/2, or by up to d when a scale
	 * of the opposite sign clamps at +127, which adds at most 32 d
	 * = amax/128 (+ half subnormal steps). */
	roundtrip(MOE_Q6_K, x, y, n);
	worst = 0;
	for (int b = 0; b < n / 256; b++) {
		double amax = absmax(x + 256 * b, 256, NULL);
		for (int g = 0; g < 16; g++) {
			double ag = absmax(x + 256 * b + 16 * g, 16, NULL);
			for (int l = 0; l < 16; l++) {
				double lim = ag / 32 + amax / 120 + 33 * 0x1p-24;
				int e = 256 * b + 16 * g + l;
				worst = fmax(worst, fabs(x[e] - y[e]) / lim);
			}
		}
	}
	ok(worst <= 1.0, "q6_k round trip within one group step: %.3f", worst);

	/* all-zero blocks decode to exact zeros for every quantiser */
	int bad = 0;
	static const int all[] = { MOE_Q4_0, MOE_Q4_1, MOE_Q5_0, MOE_Q5_1, MOE_Q8_0,
				   MOE_Q8_1, MOE_IQ4_NL, MOE_MXFP4, MOE_Q4_K, MOE_Q5_K,
				   MOE_Q6_K, MOE_Q8_K, MOE_F16, MOE_BF16 };
	float z[256] = { 0 }, out[256];
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		roundtrip(all[i], z, out, 256);
		for (int e = 0; e < 256; e++)
			bad += out[e] != 0.0f;
	}
	is_int(bad, 0, "zeros quantise to exact zeros in every type");

	/* f16 / bf16 encoders: relative error within half an ulp. */
	roundtrip(MOE_F16, x, y, n);
	worst = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) >= ldexpf(1, -14))
			worst = fmax(worst, fabs(x[i] - y[i]) / (fabs(x[i]) * F16_EPS));
	ok(worst <= 1.0, "f16 round trip relative error <= 2^-11: %.3f", worst);
	roundtrip(MOE_BF16, x, y, n);
	worst = 0;
	for (int i = 0; i < n; i++)
		if (x[i] != 0)
			worst = fmax(worst, fabs(x[i] - y[i]) / (fabs(x[i]) / 256));
	ok(worst <= 1.0, "bf16 round trip relative error <= 2^-8: %.3f", worst);
}

int main(void)
{
	/* A different data seed for soak runs: T_QUANT_SEED=n. */
	if (getenv("T_QUANT_SEED"))
		rng = (uint32_t)strtoul(getenv("T_QUANT_SEED"), NULL, 10);
	test_table();
	test_names();
	test_nbytes();
	test_f16();
	test_bf16();
	test_plain();
	test_q4_0();
	test_q4_1();
	test_q5_0();
	test_q5_1();
	test_q8();
	test_iq4_nl();
	test_mxfp4();
	test_q2_k();
	test_q3_k();
	test_q4_k_q5_k();
	test_q6_k();
	test_q8_k();
	test_iq4_xs();
	test_roundtrip_32();
	test_roundtrip_k();
	return tap_done();
}
