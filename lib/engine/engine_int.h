/* engine_int.h — what the engine's files share: the engine, the KV block
 * pool and the sequence. */
#ifndef MOE_ENGINE_INT_H
#define MOE_ENGINE_INT_H

#include "engine.h"
#include "kernels.h"
#include "quant.h"

/* One KV block: block_tokens positions of every layer.  Per layer, K holds
 * one row per position (kv_row_bytes, kv_type), V the same, except for an
 * F16 cache where K is transposed — [kv dims][block_tokens] — so that the
 * attention kernel reads a dimension's keys contiguously, as it wants them
 * (kernels.h, moe_attn_tile).
 * Multi-head latent attention (deepseek2) keeps one row per position and
 * layer instead (kv_rows 1): the latent and the rope key, which serve as
 * every head's key and value (arch_deepseek2.c). */
typedef struct kv_block {
	int32_t ref;       /* sequences holding it */
	bool cached;       /* full, its tokens known: reusable by a new sequence */
	int32_t parent;    /* the block before it in its sequence (-1: first) */
	uint32_t parent_gen;
	uint32_t gen;      /* bumped when the block is recycled */
	uint64_t stamp;    /* last release, for LRU recycling of cached blocks */
	int32_t win;       /* its window slot (sliding layers' rows), -1: none or given back */
} kv_block;

/* A window slot: one block's positions of the sliding-window layers only.
 * It belongs to one block while that block's rows are in it; sequences
 * hold it (ref) while the block is within their window (kv.c). */
typedef struct kv_wslot {
	int32_t block;     /* the block it belongs to, -1: never used */
	int32_t ref;       /* sequences that still need these rows */
	uint64_t stamp;    /* last release */
} kv_wslot;

typedef struct kv_pool {
	int n_blocks, block_tokens;
	size_t block_bytes, layer_bytes; /* whole block; one layer of it (K + V) */
	uint8_t *data;                   /* [n_blocks][block_bytes] */
	kv_block *blocks;
	int32_t *tokens;                 /* [n_blocks][block_tokens] ids a block holds */
	int n_used, peak_used;
	uint64_t clock, shared_tokens;
	/* Sliding-window layers (gpt-oss) whose window plus a block is shorter
	 * than the pool keep their rows in window slots, given back once they
	 * fall `keep` positions behind a sequence; the blocks hold the other
	 * layers.  n_win_layers 0: no window slots, every layer in the blocks. */
	int n_win_layers, keep, window;
	int32_t *layer_at;               /* [n_layer] index among its kind's layers */
	bool *layer_win;                 /* [n_layer] rows in window slots */
	size_t wslot_bytes;              /* one slot: block_tokens x window layers (K + V) */
	uint8_t *wdata;                  /* [n_blocks][wslot_bytes] */
	kv_wslot *wslots;                /* [n_blocks] */
	int n_wused, peak_wused;
} kv_pool;

struct moe_seq {
	moe_engine *eng;
	int n_pos;
	int32_t *tokens;      /* [cap] */
	int32_t *blocks;      /* [max_blocks] block ids, position p in blocks[p / block_tokens] */
	int n_blocks;
	int win_lo, win_hi;   /* it holds the window slots of blocks[win_lo..win_hi);
			       * blocks from win_hi on (reserved for a step's later
			       * chunks) get theirs as their chunk comes */
	int cap;
	uint64_t mark;        /* the step that last saw it (moe_engine_step) */
	int step_next;        /* its next position within that step */
};

struct moe_engine {
	const moe_model *m;
	const moe_kernels *k;
	moe_expert_store *experts;
	moe_pool *pool;
	int n_threads, n_batch, kv_type, n_ctx;
	size_t kv_row_bytes;     /* one position's K (or V) in one layer */
	size_t kv_head_bytes;    /* one head's slice of that row */
	int kv_rows;             /* rows per position and layer: K and V (2), or the latent (1) */
	bool k_trans;            /* F16: K transposed per block (not for the latent) */
	kv_pool kv;
	int n_seqs;
	moe_arena arena;         /* every buffer below */
	/* per step of B <= n_batch tokens (shapes for B = n_batch) */
	float *x, *xn;           /* [B, n_embd] residual stream, its normalised copy */
	float *q, *kb, *vb;      /* [B, H*hd], [B, Hkv*hd] x2 */
	float *att, *tmp;        /* [B, H*hd], [B, n_embd] */
	float *gate, *up;        /* [B, max ffn width] */
	float *router;           /* [B, n_expert] */
	float *expert_out;       /* [B, k, n_embd] each chosen expert's weighted output */
	float *shared_out;       /* [B, n_embd] */
	float *expert_in, *down_out; /* [B, n_embd] gathered rows of one expert */
	float *rope_cos, *rope_sin;  /* [B, n_rot/2] */
	int32_t *chosen;         /* [B, k] experts per token */
	float *chosen_weight;    /* [B, k] */
	int32_t *slot_of;        /* [B*k] (token*k + choice) of each gathered row */
	int32_t *active;         /* [n_expert] experts with tokens this layer */
	moe_expert *active_w;    /* [n_expert] their weights (expert store) */
	int *arrived;            /* [n_expert] indices into active that the store handed over */
	int32_t *first_of, *count_of; /* [n_expert] where an expert's rows start in order, how many */
	int32_t *order;          /* [B*k] slots sorted by expert */
	void *scratch;           /* quantised activations: 3 products' worth */
	size_t scratch_bytes;    /* for one product */
	/* attention: tiles of up to attn_tile_tokens tokens of one sequence,
	 * tile i = tokens [attn_first[i], attn_first[i + 1]); per thread work
	 * for the kernel (a block's keys and values as floats, the rows' sums) */
	int attn_tile_tokens;
	int32_t *attn_first;     /* [B + 1] */
	uint8_t *attn_work;
	size_t attn_work_bytes;
	const uint8_t **attn_blocks; /* [thread][K, V][kv.n_blocks] a tile's block addresses */
	/* experts run whole per thread (small steps): per thread input, gate,
	 * up, output rows for up to EXP_PAR_MAX tokens, and product scratch */
	float *par_buf;
	size_t par_stride;       /* floats per thread */
	uint8_t *par_scratch;
	size_t par_scratch_bytes;
	/* a small step's FFN input rows quantised once per token for the
	 * layer's expert gate/up products, instead of once per chosen expert:
	 * ffn_q_dtype[layer] is a gate type of the layer whose activation type
	 * every expert's gate and up share, or -1 (dense layer, float or mixed
	 * activation types); ffn_q holds the rows of a step
	 * [EXP_PAR_MAX][ffn_q_bytes] while ffn_q_on */
	int32_t *ffn_q_dtype;
	uint8_t *ffn_q;
	size_t ffn_q_bytes;
	bool ffn_q_on;
	/* logits rows gathered for the output product */
	float *out_rows;         /* [B, n_vocab] */
	int32_t *want;           /* [B] tokens that want logits */
	/* the step being run */
	const moe_step_token *st;
	uint64_t step_mark;
	moe_route_fn route_fn;
	void *route_user;
	moe_hidden_fn hidden_fn;  /* moe_engine_set_hidden_callback */
	void *hidden_user;
	moe_observe_fn observe_fn;
	void *observe_user;
	/* arch_deepseek2.c: latent attention (shapes for B = n_batch; NULL
	 * unless the model has it) and the grouped router */
	struct {
		float *qa;             /* [B, q_lora] low-rank queries */
		float *kva;            /* [B, kv_lora + rope] latent ++ rope key */
		float *qcat;           /* [B, H, kv_lora + rope] absorbed queries ++ rope parts */
		float *olat;           /* [B, H, kv_lora] attention output in the latent space */
		float *scores;         /* per thread: [MLA_HEADS][n_ctx] scores + a row */
		size_t score_stride;   /* floats per thread */
		uint8_t *scratch;      /* per thread: one head's product */
		size_t scratch_bytes;
		uint8_t *qx;           /* per thread: a query quantised for the cache type */
		size_t qx_bytes;
		float *choice;         /* [2 n_expert] the router's choice values, group scores */
		int32_t *groups;       /* [n_expert] the groups kept */
	} ds;
};

/* Steps of at most this many tokens run each expert whole on one thread
 * (decode of a few sequences); larger ones split each expert's rows over
 * the threads instead. */
#define EXP_PAR_MAX 16

/* Query rows (tokens x query heads of one KV head) per attention tile: the
 * keys and values a tile decodes serve this many rows; smaller tiles would
 * decode them more often, larger ones leave threads fewer tiles. */
#define ATTN_TILE_ROWS 64

/* kv.c */
int moe_kv_init(moe_engine *eng, int n_tokens, int block_tokens, bool keep_all, moe_error *e);
void moe_kv_free(moe_engine *eng);
/* Make sure positions [s->n_pos, upto) have private, writable blocks.
 * MOE_ERANGE when the pool is out of blocks. */
int moe_kv_reserve(moe_seq *s, int upto, moe_error *e);
/* Window slots (sliding layers, kv.c) for positions [s->n_pos, upto) of
 * blocks moe_kv_reserve reserved, after giving back those behind n_pos:
 * before each forward chunk, so a long prompt holds its window only. */
void moe_kv_window_ready(moe_seq *s, int upto);
/* Mark blocks filled up to n_pos as cached (called after a step) and give
 * back the window slots that fell behind. */
void moe_kv_seal(moe_seq *s);
/* Whether every sliding-window row of positions [0, n) is still held. */
bool moe_kv_window_whole(const moe_seq *s, int n);
/* Addresses in the pool */
static inline uint8_t *moe_kv_k(const moe_engine *eng, int block, int layer)
{
	const kv_pool *kv = &eng->kv;
	if (kv->layer_win[layer])
		return kv->wdata + (size_t)kv->blocks[block].win * kv->wslot_bytes +
		       (size_t)kv->layer_at[layer] * kv->layer_bytes;
	return kv->data + (size_t)block * kv->block_bytes + (size_t)kv->layer_at[layer] * kv->layer_bytes;
}
static inline uint8_t *moe_kv_v(const moe_engine *eng, int block, int layer)
{
	return moe_kv_k(eng, block, layer) + eng->kv.layer_bytes / 2; /* kv_rows 2 only */
}

/* forward.c */
int moe_forward(moe_engine *eng, const moe_step_token *t, int B, moe_error *e);

/* forward.c's pieces the architecture files use */
void moe_fwd_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps);
/* RoPE of one head vector of step token t (the first n_rot dims). */
void moe_fwd_rope(const moe_engine *eng, float *v, int t);
/* Y_i[n x w_i->rows] = X W_i^T for n_w <= 3 weights in one pool job. */
void moe_fwd_products(moe_engine *eng, int layer, const float *X, int64_t n, int n_w,
		      const moe_weight *const *w, float *const *Y);
/* Y[n x w->rows] (row stride ldy) = X W^T over the pool. */
void moe_fwd_matmul(moe_engine *eng, const moe_weight *w, int layer, const float *X, int64_t n,
		    float *Y, int64_t ldy);
/* The k largest of v[0..n) in decreasing order (equal ones: lower index first). */
void moe_fwd_top_k(const float *v, int n, int k, int32_t *idx);

/* arch_deepseek2.c — DeepSeek-V2/V3's pieces. */
/* The buffers below (engine arena), after the KV pool and thread count are set. */
int moe_deepseek2_init(moe_engine *eng, moe_error *e);
/* One layer's multi-head latent attention for the step's B tokens:
 * x += attention(RMSNorm(x)), the cache rows of the tokens written. */
void moe_mla_attention(moe_engine *eng, int il, int B);
/* DeepSeek's choice of k experts from the gating scores[n_expert]: plus the
 * score-correction bias (may be NULL), limited to the best groups. */
void moe_route_deepseek(moe_engine *eng, const float *bias, const float *scores, int k,
			int32_t *sel);

/* arch_phimoe.c — Phi-3.5-MoE's pieces. */
/* y = (x - mean) / sqrt(var + eps) * w + b over n values (LayerNorm). */
void moe_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n,
		   double eps);
/* The sparsemixer router at inference: scores s[n] (router logits) ->
 * two experts sel[0..1] and their weights w[0..1]. */
void moe_sparsemixer(const float *s, int n, double eps, int32_t sel[2], float w[2]);

#endif
