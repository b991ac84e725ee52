/* kernels/avxvnni.c — the avxvnni level's kernels (AVX2 + FMA + F16C +
 * AVX-VNNI, the VEX-encoded vpdpbusd on ymm): avx2_body.h compiled again with
 * the 8-bit dot product step as one vpdpbusd.  Same results as the avx2
 * level, bit for bit (avx2_body.h says why). */
#define MOE_AVXVNNI 1
#include "kernels/avx2_body.h"
