/* experts.c — expert routing statistics: per MoE layer how often each
 * expert is chosen (and its summed gate weight), and for consecutive MoE
 * layers how often expert i in one is followed by expert j in the next for
 * the same token.  The input for mixed precision and cache prefetch. */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct moe_expert_stats {
	int n_layer, n_expert, k, cap;
	int *prev;         /* [n_layer] previous MoE layer or -1 */
	bool *is_moe;      /* [n_layer] */
	uint64_t *calls;   /* [n_layer] tokens routed */
	uint64_t *counts;  /* [n_layer][n_expert] */
	double *wsum;      /* [n_layer][n_expert] gate weights */
	int32_t *ring;     /* [n_layer][cap][k] the last cap tokens' choices */
	uint64_t *trans;   /* [n_layer][n_expert][n_expert]: prev layer -> this */
	uint64_t *pairs;   /* [n_layer] tokens paired with the previous layer */
	uint64_t unpaired; /* tokens whose previous choices were not available */
	uint64_t ignored;  /* calls with a layer or k the model does not have */
};

int moe_expert_stats_new(moe_expert_stats **out, const moe_model *m, int max_batch, moe_error *e)
{
	*out = NULL;
	const moe_hparams *hp = &m->hp;
	if (hp->n_expert == 0 || hp->n_expert_used == 0)
		return moe_err(e, MOE_EINVAL, "the model has no experts");
	moe_expert_stats *s = calloc(1, sizeof *s);
	if (!s)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	s->n_layer = (int)hp->n_layer;
	s->n_expert = (int)hp->n_expert;
	s->k = (int)hp->n_expert_used;
	s->cap = max_batch > 0 ? max_batch : 1;
	size_t L = (size_t)s->n_layer, X = (size_t)s->n_expert;
	s->prev = calloc(L, sizeof *s->prev);
	s->is_moe = calloc(L, sizeof *s->is_moe);
	s->calls = calloc(L, sizeof *s->calls);
	s->pairs = calloc(L, sizeof *s->pairs);
	s->counts = calloc(L * X, sizeof *s->counts);
	s->wsum = calloc(L * X, sizeof *s->wsum);
	s->ring = calloc(L * (size_t)s->cap * (size_t)s->k, sizeof *s->ring);
	s->trans = calloc(L * X * X, sizeof *s->trans);
	if (!s->prev || !s->is_moe || !s->calls || !s->pairs || !s->counts || !s->wsum ||
	    !s->ring || !s->trans) {
		moe_expert_stats_free(s);
		return moe_err(e, MOE_ENOMEM, "out of memory for expert statistics");
	}
	int last = -1;
	for (int l = 0; l < s->n_layer; l++) {
		s->is_moe[l] = m->layers[l].is_moe;
		s->prev[l] = s->is_moe[l] ? last : -1;
		if (s->is_moe[l])
			last = l;
	}
	*out = s;
	return 0;
}

void moe_expert_stats_route(void *user, int layer, const int32_t *experts, const float *weights,
			    int k)
{
	moe_expert_stats *s = user;
	if (layer < 0 || layer >= s->n_layer || k != s->k || !s->is_moe[layer]) {
		s->ignored++;
		return;
	}
	size_t X = (size_t)s->n_expert;
	for (int j = 0; j < k; j++)
		if (experts[j] < 0 || experts[j] >= s->n_expert) {
			s->ignored++;
			return;
		}
	/* the engine routes a batch's tokens layer by layer, in token order:
	 * the t-th call for a layer is token t of the stream */
	uint64_t t = s->calls[layer]++;
	for (int j = 0; j < k; j++) {
		s->counts[(size_t)layer * X + (size_t)experts[j]]++;
		s->wsum[(size_t)layer * X + (size_t)experts[j]] += weights ? weights[j] : 0;
	}
	int32_t *slot = s->ring + ((size_t)layer * (size_t)s->cap + t % (size_t)s->cap) * (size_t)k;
	memcpy(slot, experts, (size_t)k * sizeof *slot);
	int p = s->prev[layer];
	if (p < 0)
		return;
	/* token t's choices in the previous layer: made already, not yet
	 * overwritten */
	if (s->calls[p] <= t || s->calls[p] - t > (uint64_t)s->cap) {
		s->unpaired++;
		return;
	}
	const int32_t *pc = s->ring + ((size_t)p * (size_t)s->cap + t % (size_t)s->cap) * (size_t)k;
	uint64_t *tr = s->trans + (size_t)layer * X * X;
	for (int a = 0; a < k; a++)
		for (int b = 0; b < k; b++)
			tr[(size_t)pc[a] * X + (size_t)experts[b]]++;
	s->pairs[layer]++;
}

uint64_t moe_expert_stats_tokens(const moe_expert_stats *s, int layer)
{
	if (layer < 0 || layer >= s->n_layer)
		return (uint64_t)-1;
	return s->calls[layer];
}

uint64_t moe_expert_stats_count(const moe_expert_stats *s, int layer, int expert)
{
	if (layer < 0 || layer >= s->n_layer || expert < 0 || expert >= s->n_expert)
		return 0;
	return s->counts[(size_t)layer * (size_t)s->n_expert + (size_t)expert];
}

json_t *moe_expert_stats_json(const moe_expert_stats *s, const json_t *info)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	size_t X = (size_t)s->n_expert;
	json_object_set_new(o, "format", json_string("moe-expert-stats"));
	json_object_set_new(o, "version", json_integer(1));
	if (info)
		json_object_update((json_t *)o, (json_t *)info);
	json_object_set_new(o, "n_layer", json_integer(s->n_layer));
	json_object_set_new(o, "n_expert", json_integer(s->n_expert));
	json_object_set_new(o, "n_expert_used", json_integer(s->k));
	uint64_t tokens = 0;
	for (int l = 0; l < s->n_layer; l++)
		if (s->is_moe[l]) {
			tokens = s->calls[l];
			break;
		}
	json_object_set_new(o, "n_tokens", json_integer((json_int_t)tokens));
	json_t *layers = json_array(), *trans = json_array();
	for (int l = 0; l < s->n_layer; l++) {
		if (!s->is_moe[l])
			continue;
		json_t *lo = json_object(), *c = json_array(), *w = json_array();
		for (size_t x = 0; x < X; x++) {
			json_array_append_new(
				c, json_integer((json_int_t)s->counts[(size_t)l * X + x]));
			json_array_append_new(w, json_real(s->wsum[(size_t)l * X + x]));
		}
		json_object_set_new(lo, "layer", json_integer(l));
		json_object_set_new(lo, "tokens", json_integer((json_int_t)s->calls[l]));
		json_object_set_new(lo, "counts", c);
		json_object_set_new(lo, "weight_sums", w);
		json_array_append_new(layers, lo);
		if (s->prev[l] < 0)
			continue;
		json_t *to = json_object(), *rows = json_array();
		const uint64_t *tr = s->trans + (size_t)l * X * X;
		for (size_t a = 0; a < X; a++) {
			json_t *row = json_array();
			for (size_t b = 0; b < X; b++)
				json_array_append_new(row, json_integer((json_int_t)tr[a * X + b]));
			json_array_append_new(rows, row);
		}
		json_object_set_new(to, "from", json_integer(s->prev[l]));
		json_object_set_new(to, "to", json_integer(l));
		json_object_set_new(to, "tokens", json_integer((json_int_t)s->pairs[l]));
		json_object_set_new(to, "counts", rows);
		json_array_append_new(trans, to);
	}
	json_object_set_new(o, "layers", layers);
	json_object_set_new(o, "transitions", trans);
	json_object_set_new(o, "unpaired_tokens", json_integer((json_int_t)s->unpaired));
	return o;
}

int moe_expert_stats_write(const moe_expert_stats *s, const json_t *info, const char *path,
			   moe_error *e)
{
	json_t *o = moe_expert_stats_json(s, info);
	if (!o)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	char *txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!txt)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	moe_out out;
	int rc = moe_out_open(&out, path, e);
	if (rc == 0) {
		size_t n = strlen(txt);
		txt[n] = '\n'; /* replaces the NUL: the file ends with a newline */
		rc = moe_out_write(&out, txt, n + 1, e);
		if (rc == 0)
			rc = moe_out_commit(&out, e);
		else
			moe_out_abort(&out);
	}
	free(txt);
	return rc;
}

void moe_expert_stats_free(moe_expert_stats *s)
{
	if (!s)
		return;
	free(s->prev);
	free(s->is_moe);
	free(s->calls);
	free(s->pairs);
	free(s->counts);
	free(s->wsum);
	free(s->ring);
	free(s->trans);
	free(s);
}

int moe_bench_greedy(const moe_model *m, moe_seq *seq, const int32_t *prompt, size_t n_prompt,
		     int n_gen, moe_error *e)
{
	if (n_prompt == 0)
		return moe_err(e, MOE_EINVAL, "an empty prompt");
	uint32_t nv = m->hp.n_vocab;
	float *logits = malloc((size_t)nv * sizeof *logits);
	if (!logits)
		return moe_err(e, MOE_ENOMEM, "out of memory");
	int rc = moe_seq_eval(seq, prompt, n_prompt, logits, false, e);
	for (int i = 0; rc == 0 && i < n_gen; i++) {
		int32_t best = 0;
		for (uint32_t v = 1; v < nv; v++)
			if (logits[v] > logits[best])
				best = (int32_t)v;
		rc = moe_seq_eval(seq, &best, 1, logits, false, e);
	}
	free(logits);
	return rc;
}
