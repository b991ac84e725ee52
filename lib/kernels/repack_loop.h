/* kernels/repack_loop.h — the loop every repacked-layout product shares:
 * four-row groups of W (nr is a multiple of four, see repack_generic.c) by
 * the nt tokens of X, each pair handed to a level's tile, which writes the
 * group's four outputs for that token.  Only the tile differs from level to
 * level (and type to type): it runs that level's plain float sequence, so
 * the loop around it has no bearing on the results.
 *
 * MOE_REPACK_R4_GEMM(name, wtype, xtype, qk, tile) defines
 *   static void name(n, nr, nt, w, ldw, x, ldx, s, lds)
 * in moe_kernels' gemm form, where wtype is the group's block (four rows of
 * one block column), xtype the activation block, qk the elements a block
 * holds, and tile(const wtype *g, const xtype *y, int64_t nb, float out[4])
 * gets the group's nb block columns and the token's nb blocks.  Give the
 * tile always_inline so that each gemm compiles as if written out by hand.
 */
#ifndef MOE_REPACK_LOOP_H
#define MOE_REPACK_LOOP_H

#include <stddef.h>
#include <stdint.h>

#define MOE_REPACK_R4_GEMM(name, wtype, xtype, qk, tile)                                         \
	static void name(int64_t n, int nr, int nt, const void *w, size_t ldw, const void *x,    \
			 size_t ldx, float *s, size_t lds)                                         \
	{                                                                                        \
		const int64_t nb = n / (qk);                                                     \
		for (int r = 0; r + 4 <= nr; r += 4) {                                           \
			const wtype *g = (const void *)((const uint8_t *)w + (size_t)r * ldw);   \
			for (int t = 0; t < nt; t++) {                                           \
				const xtype *y =                                                 \
					(const void *)((const uint8_t *)x + (size_t)t * ldx);    \
				float out[4];                                                    \
				tile(g, y, nb, out);                                             \
				for (int i = 0; i < 4; i++)                                      \
					s[(size_t)t * lds + (size_t)r + i] = out[i];             \
			}                                                                        \
		}                                                                                \
	}

#endif
