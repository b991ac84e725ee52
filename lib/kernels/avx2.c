/* kernels/avx2.c — the AVX2 level's kernels (AVX2 + FMA + F16C): the body in
 * avx2_body.h with the vpmaddubsw + vpmaddwd dot product step. */
#include "kernels/avx2_body.h"
