/* testrand.h — the unit tests' random numbers: Marsaglia's xorshift64 with
 * a fixed seed, so every run of a test sees the same data and a failure
 * can be replayed.  Each test program has its own state (static); define
 * TEST_RNG_SEED before including this to draw another sequence.
 */
#ifndef MOE_TESTRAND_H
#define MOE_TESTRAND_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng = TEST_RNG_SEED;

/* 32 bits from the middle of the state (its low bits are the weakest). */
static inline uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Uniform in [-1, 1). */
static inline float frand(void)
{
	return (float)((int32_t)rnd32() / 2147483648.0);
}

#endif
