/* engine.c — the engine's life: parameters, the one thread pool, every
 * scratch buffer carved from one arena, the KV pool; and the step, which
 * checks a batch of tokens, reserves their KV blocks and runs the forward
 * pass n_batch tokens at a time. */
#include "engine/engine_int.h"

#include <stdlib.h>
#include <string.h>

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* forward.c's ffn_q_dtype of layer il: a gate type whose activation type
 * every expert's gate and up (n_embd columns) share, not float; or -1. */
static int ffn_q_dtype(const moe_model *m, uint32_t il)
{
	const moe_layer *L = &m->layers[il];
	if (!L->is_moe || !m->hp.n_expert)
		return -1;
	int t = moe_type_get(L->exp_gate[0].dtype)->vec_dot_type;
	if (t == MOE_F32)
		return -1;
	for (uint32_t x = 0; x < m->hp.n_expert; x++)
		if (moe_type_get(L->exp_gate[x].dtype)->vec_dot_type != t ||
		    moe_type_get(L->exp_up[x].dtype)->vec_dot_type != t ||
		    L->exp_gate[x].cols != m->hp.n_embd || L->exp_up[x].cols != m->hp.n_embd)
			return -1;
	return (int)L->exp_gate[0].dtype;
}

/* Scratch for quantised activations of n rows of every product the model
 * has (the largest wins). */
static size_t product_scratch(const moe_model *m, int64_t n)
{
	const moe_hparams *hp = &m->hp;
	size_t s = moe_matmul_scratch(m->output.dtype, hp->n_embd, n);
	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const moe_layer *L = &m->layers[il];
		const moe_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
					 &L->ffn_down, &L->router, &L->sh_gate, &L->sh_up, &L->sh_down,
					 &L->sh_router, &L->wq_a, &L->wq_b, &L->wkv_a};
		for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
			if (w[i]->data)
				s = max_sz(s, moe_matmul_scratch(w[i]->dtype, w[i]->cols, n));
		if (L->is_moe)
			for (uint32_t x = 0; x < hp->n_expert; x++) {
				s = max_sz(s, moe_matmul_scratch(L->exp_gate[x].dtype, L->exp_gate[x].cols, n));
				s = max_sz(s, moe_matmul_scratch(L->exp_up[x].dtype, L->exp_up[x].cols, n));
				s = max_sz(s, moe_matmul_scratch(L->exp_down[x].dtype, L->exp_down[x].cols, n));
			}
	}
	return s;
}

int moe_engine_new(moe_engine **out, const moe_model *m, const moe_engine_params *p,
		   moe_error *e)
{
	*out = NULL;
	const moe_hparams *hp = &m->hp;
	moe_engine *eng = calloc(1, sizeof *eng);
	if (!eng)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	moe_arena_init(&eng->arena, 1 << 20);
	eng->m = m;
	eng->k = moe_kernels_get();
	eng->experts = p->experts ? p->experts : moe_model_resident_experts(m);
	eng->n_threads = p->n_threads > 0 ? p->n_threads : moe_default_threads();
	eng->n_batch = p->n_batch > 0 ? p->n_batch : 256;
	eng->kv_type = p->kv_type ? p->kv_type : MOE_F16;
	int kv_size = p->kv_size;
	if (kv_size <= 0)
		kv_size = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? (int)hp->n_ctx_train : 4096;
	int block = p->kv_block > 0 ? p->kv_block : 64;
	int rc = 0;
	if (p->n_batch < 0 || p->kv_size < 0 || p->kv_block < 0 || p->n_threads < 0 ||
	    kv_size > (1 << 24) || block > 4096 || eng->n_batch > (1 << 16)) {
		rc = moe_err(e, MOE_EINVAL, "engine: n_batch (%d), kv_size (%d) or kv_block (%d) out "
					    "of range", p->n_batch, p->kv_size, p->kv_block);
		goto fail;
	}
	/* a sequence never holds more than the pool */
	eng->n_ctx = kv_size;
	if (eng->kv_type != MOE_F16 && eng->kv_type != MOE_Q8_0) {
		rc = moe_err(e, MOE_EINVAL, "KV cache type must be f16 or q8_0, not %s",
			     moe_type_name(eng->kv_type));
		goto fail;
	}
	const moe_type_traits *kt = moe_type_get(eng->kv_type);
	int64_t hd = hp->head_dim, kvd = (int64_t)hp->n_head_kv * hd;
	/* Multi-head latent attention caches one row per position: the latent
	 * and the rope key (kv_lora + rope values), every head's key and value
	 * (arch_deepseek2.c). */
	bool mla = hp->attention == MOE_ATTN_MLA;
	int64_t row = mla ? (int64_t)hp->kv_lora_rank + hp->rope_head_dim : kvd;
	int64_t head = mla ? row : hd;
	/* A head's key must be whole blocks of the cache type, so that its
	 * slice of a cache row can be handed to the dot kernel. */
	if (head % kt->block_size) {
		if (mla)
			rc = moe_err(e, MOE_EUNSUPPORTED, "a %s KV cache needs latent + rope dimensions "
							  "(kv_lora_rank + rope_head_dim) that are a "
							  "multiple of %u (this model's are %lld); use "
							  "--kv-type f16",
				     kt->name, kt->block_size, (long long)row);
		else
			rc = moe_err(e, MOE_EUNSUPPORTED, "a %s KV cache needs a head size that is a "
							  "multiple of %u (this model's is %lld); use "
							  "--kv-type f16",
				     kt->name, kt->block_size, (long long)hd);
		goto fail;
	}
	uint64_t rowb, headb;
	if ((rc = moe_type_nbytes(eng->kv_type, (uint64_t)row, &rowb, e)) < 0 ||
	    (rc = moe_type_nbytes(eng->kv_type, (uint64_t)head, &headb, e)) < 0)
		goto fail;
	eng->kv_row_bytes = (size_t)rowb;
	eng->kv_head_bytes = (size_t)headb;
	eng->kv_rows = mla ? 1 : 2;
	eng->k_trans = !mla && eng->kv_type == MOE_F16;
	if ((rc = moe_kv_init(eng, kv_size, block, p->kv_keep_all, e)) < 0)
		goto fail;
	if ((rc = moe_pool_create(&eng->pool, eng->n_threads, e)) < 0)
		goto fail;
	eng->n_threads = moe_pool_threads(eng->pool);

	/* buffers for a step of B tokens */
	size_t B = (size_t)eng->n_batch, E = hp->n_embd, nth = (size_t)eng->n_threads;
	size_t nq = (size_t)hp->n_head * hd, nqv = (size_t)hp->n_head * hp->head_dim_v;
	size_t ff = max_sz(max_sz(hp->n_ff, hp->n_ff_exp), hp->n_ff_shexp);
	size_t nx = hp->n_expert ? hp->n_expert : 1, k = hp->n_expert_used ? hp->n_expert_used : 1;
	size_t half = hp->n_rot / 2 ? hp->n_rot / 2 : 1;
	int group = (int)(hp->n_head / hp->n_head_kv);
	eng->attn_tile_tokens = group < ATTN_TILE_ROWS ? ATTN_TILE_ROWS / group : 1;
	eng->attn_work_bytes = (moe_attn_work_bytes((int)hd, (int)hp->head_dim_v, block,
						    eng->attn_tile_tokens * group) + 63) & ~(size_t)63;
	eng->par_stride = (3 * EXP_PAR_MAX) * E + 2 * EXP_PAR_MAX * (size_t)hp->n_ff_exp;
	eng->par_scratch_bytes = 64;
	if (hp->n_expert) {
		const moe_layer *L = NULL;
		for (uint32_t il = 0; il < hp->n_layer && !L; il++)
			if (m->layers[il].is_moe)
				L = &m->layers[il];
		for (uint32_t x = 0; L && x < hp->n_expert; x++) {
			eng->par_scratch_bytes = max_sz(eng->par_scratch_bytes,
				moe_matmul_scratch(L->exp_gate[x].dtype, E, EXP_PAR_MAX));
			eng->par_scratch_bytes = max_sz(eng->par_scratch_bytes,
				moe_matmul_scratch(L->exp_down[x].dtype, hp->n_ff_exp, EXP_PAR_MAX));
		}
		/* other layers may use other types */
		eng->par_scratch_bytes = max_sz(eng->par_scratch_bytes, product_scratch(m, EXP_PAR_MAX));
	}
	eng->ffn_q_bytes = 64;
	for (uint32_t il = 0; il < hp->n_layer; il++)
		if (ffn_q_dtype(m, il) >= 0)
			eng->ffn_q_bytes = max_sz(eng->ffn_q_bytes,
				moe_matmul_scratch(ffn_q_dtype(m, il), E, 1));
	size_t scratch = product_scratch(m, (int64_t)B);
	if (scratch == SIZE_MAX || eng->par_scratch_bytes == SIZE_MAX) {
		rc = moe_err(e, MOE_ERANGE, "engine: scratch size overflows");
		goto fail;
	}
	eng->scratch_bytes = (scratch + 127) & ~(size_t)63;
	moe_arena *a = &eng->arena;
#define FLOATS(n) moe_arena_alloc(a, (n) * sizeof(float), 64)
#define INTS(n) moe_arena_alloc(a, (n) * sizeof(int32_t), 64)
	if (!(eng->x = FLOATS(B * E)) || !(eng->xn = FLOATS(B * E)) || !(eng->q = FLOATS(B * nq)) ||
	    !(eng->kb = FLOATS(mla ? 1 : B * (size_t)kvd)) ||
	    !(eng->vb = FLOATS(mla ? 1 : B * (size_t)kvd)) ||
	    !(eng->att = FLOATS(B * nqv)) || !(eng->tmp = FLOATS(B * E)) ||
	    !(eng->gate = FLOATS(B * ff)) || !(eng->up = FLOATS(B * ff)) ||
	    !(eng->router = FLOATS(B * nx)) || !(eng->expert_out = FLOATS(B * k * E)) ||
	    !(eng->shared_out = FLOATS(B * E)) || !(eng->expert_in = FLOATS(B * E)) ||
	    !(eng->down_out = FLOATS(B * E)) || !(eng->rope_cos = FLOATS(B * half)) ||
	    !(eng->rope_sin = FLOATS(B * half)) || !(eng->chosen = INTS(B * k)) ||
	    !(eng->chosen_weight = FLOATS(B * k)) || !(eng->order = INTS(B * k)) ||
	    !(eng->active = INTS(nx)) || !(eng->first_of = INTS(nx)) ||
	    !(eng->count_of = INTS(nx)) ||
	    !(eng->active_w = moe_arena_alloc(a, nx * sizeof(moe_expert), 64)) ||
	    !(eng->arrived = moe_arena_alloc(a, nx * sizeof(int), 64)) ||
	    !(eng->scratch = moe_arena_alloc(a, 3 * eng->scratch_bytes, 64)) ||
	    !(eng->attn_first = INTS(B + 1)) ||
	    !(eng->attn_work = moe_arena_alloc(a, nth * eng->attn_work_bytes, 64)) ||
	    !(eng->attn_blocks = moe_arena_alloc(a, nth * 2 * (size_t)eng->kv.n_blocks *
							 sizeof *eng->attn_blocks, 64)) ||
	    !(eng->par_buf = FLOATS(nth * eng->par_stride)) ||
	    !(eng->par_scratch = moe_arena_alloc(a, nth * eng->par_scratch_bytes, 64)) ||
	    !(eng->ffn_q_dtype = INTS(hp->n_layer ? hp->n_layer : 1)) ||
	    !(eng->ffn_q = moe_arena_alloc(a, EXP_PAR_MAX * eng->ffn_q_bytes, 64)) ||
	    !(eng->out_rows = FLOATS(B * hp->n_vocab)) || !(eng->want = INTS(B))) {
		rc = moe_err(e, MOE_ENOMEM, "out of memory for the engine's buffers");
		goto fail;
	}
#undef FLOATS
#undef INTS
	for (uint32_t il = 0; il < hp->n_layer; il++)
		eng->ffn_q_dtype[il] = ffn_q_dtype(m, il);
	if ((rc = moe_deepseek2_init(eng, e)) < 0)
		goto fail;
	*out = eng;
	return 0;
fail:
	moe_engine_free(eng);
	return rc;
}

void moe_engine_free(moe_engine *eng)
{
	if (!eng)
		return;
	moe_pool_free(eng->pool);
	moe_kv_free(eng);
	moe_arena_free(&eng->arena);
	free(eng);
}

const moe_model *moe_engine_model(const moe_engine *eng)
{
	return eng->m;
}

uint32_t moe_engine_n_vocab(const moe_engine *eng)
{
	return eng->m->hp.n_vocab;
}

int moe_engine_n_batch(const moe_engine *eng)
{
	return eng->n_batch;
}

int moe_engine_n_ctx(const moe_engine *eng)
{
	return eng->n_ctx;
}

void moe_engine_set_route_callback(moe_engine *eng, moe_route_fn fn, void *user)
{
	eng->route_fn = fn;
	eng->route_user = user;
}

void moe_engine_set_hidden_callback(moe_engine *eng, moe_hidden_fn fn, void *user)
{
	eng->hidden_fn = fn;
	eng->hidden_user = user;
}

void moe_engine_set_observer(moe_engine *eng, moe_observe_fn fn, void *user)
{
	eng->observe_fn = fn;
	eng->observe_user = user;
}

/* ------------------------------------------------------------------ step */

int moe_engine_step(moe_engine *eng, const moe_step_token *t, int n, moe_error *e)
{
	if (n <= 0)
		return 0;
	uint64_t mark = ++eng->step_mark;
	uint32_t nv = eng->m->hp.n_vocab;
	/* check ids and positions: each sequence's tokens continue it in order */
	for (int i = 0; i < n; i++) {
		moe_seq *s = t[i].seq;
		if (!s || s->eng != eng)
			return moe_err(e, MOE_EINVAL, "step token %d: no sequence of this engine", i);
		if (t[i].id < 0 || (uint32_t)t[i].id >= nv)
			return moe_err(e, MOE_EINVAL, "token id %d out of range (vocabulary %u)", t[i].id,
				       nv);
		if (s->mark != mark) {
			s->mark = mark;
			s->step_next = s->n_pos;
		}
		if (t[i].pos != s->step_next)
			return moe_err(e, MOE_EINVAL, "step token %d: position %d, the sequence is at %d",
				       i, t[i].pos, s->step_next);
		s->step_next++;
	}
	/* blocks for every sequence's new positions (copies of shared ones) */
	mark = ++eng->step_mark;
	for (int i = 0; i < n; i++) {
		moe_seq *s = t[i].seq;
		if (s->mark == mark)
			continue;
		s->mark = mark;
		int upto = t[i].pos;
		for (int j = i; j < n; j++)
			if (t[j].seq == s)
				upto = t[j].pos + 1;
		MOE_TRY(moe_kv_reserve(s, upto, e));
	}
	for (int i = 0; i < n; i++)
		t[i].seq->tokens[t[i].pos] = t[i].id;
	for (int done = 0; done < n;) {
		int B = n - done < eng->n_batch ? n - done : eng->n_batch;
		/* window slots for the chunk's positions (sliding layers) */
		for (int i = done; i < done + B; i++)
			moe_kv_window_ready(t[i].seq, t[i].pos + 1);
		/* a failed chunk leaves its sequences where they were (earlier
		 * chunks of this step stay evaluated) */
		MOE_TRY(moe_forward(eng, t + done, B, e));
		for (int i = done; i < done + B; i++)
			if (t[i].pos + 1 > t[i].seq->n_pos)
				t[i].seq->n_pos = t[i].pos + 1;
		done += B;
	}
	for (int i = 0; i < n; i++)
		moe_kv_seal(t[i].seq);
	return 0;
}

int moe_seq_eval(moe_seq *s, const int32_t *ids, size_t n, float *logits, bool all_logits,
		 moe_error *e)
{
	moe_engine *eng = s->eng;
	uint32_t nv = eng->m->hp.n_vocab;
	if (n > (size_t)(eng->n_ctx - s->n_pos))
		return moe_err(e, MOE_ERANGE, "context full: %zu tokens do not fit (%d of %d used)", n,
			       s->n_pos, eng->n_ctx);
	moe_step_token *t = malloc((size_t)(n < (size_t)eng->n_batch ? n : (size_t)eng->n_batch) *
				   sizeof *t + 1);
	if (!t)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	int rc = 0;
	for (size_t done = 0; done < n && rc == 0;) {
		int B = (int)(n - done < (size_t)eng->n_batch ? n - done : (size_t)eng->n_batch);
		for (int i = 0; i < B; i++) {
			size_t g = done + (size_t)i;
			float *l = NULL;
			if (logits && all_logits)
				l = logits + g * nv;
			else if (logits && g == n - 1)
				l = logits;
			t[i] = (moe_step_token){s, ids[g], s->n_pos + i, l};
		}
		rc = moe_engine_step(eng, t, B, e);
		done += (size_t)B;
	}
	free(t);
	return rc;
}
