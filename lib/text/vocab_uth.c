/* vocab_uth.c — a vocabulary in a UTH file: the "tokenizer.*" tensors
 * (written by moe-convert through moe_vocab_data_add_tensors) and the
 * "tokenizer" metadata object, read back and validated. */
#include <config.h>

#include "text_int.h"
#include "quant.h"
#include "uth.h"

#include <jansson.h>

static int add_1d(moe_uth_writer *w, const char *name, int dtype, int role, uint64_t n,
		  const void *data, moe_error *e)
{
	moe_uth_tensor d = {0};
	if (n == 0)
		return 0; /* empty tables are simply absent */
	if (n > UINT32_MAX)
		return moe_err(e, MOE_ERANGE, "tensor '%s': %" PRIu64 " elements", name, n);
	d.name = name;
	d.dtype = (uint16_t)dtype;
	d.n_dims = 1;
	d.ne[0] = (uint32_t)n;
	d.ne[1] = d.ne[2] = d.ne[3] = 1;
	d.layout = MOE_UTH_LAYOUT_PLAIN;
	d.layer = MOE_UTH_NONE;
	d.expert = MOE_UTH_NONE;
	d.role = (uint16_t)role;
	return moe_uth_writer_add_mem(w, &d, data, e);
}

int moe_vocab_data_add_tensors(const moe_vocab_data *vd, moe_uth_writer *w, moe_error *e)
{
	uint32_t n = vd->n_tokens;
	if (n == 0)
		return 0;
	if (vd->token_offsets[n] > INT32_MAX ||
	    (vd->n_merges && vd->merge_offsets[vd->n_merges] > INT32_MAX))
		return moe_err(e, MOE_ERANGE, "tokenizer tables larger than 2 GiB");
	/* Offsets are stored as I32: the values fit (checked above), the
	 * bits are the same. */
	MOE_TRY(add_1d(w, "tokenizer.tokens", MOE_I8, MOE_UTH_ROLE_TOKENIZER_TOKENS,
		       vd->token_offsets[n], vd->tokens, e));
	MOE_TRY(add_1d(w, "tokenizer.token_offsets", MOE_I32, MOE_UTH_ROLE_TOKENIZER_TOKEN_OFFSETS,
		       (uint64_t)n + 1, vd->token_offsets, e));
	if (vd->scores)
		MOE_TRY(add_1d(w, "tokenizer.scores", MOE_F32, MOE_UTH_ROLE_TOKENIZER_SCORES, n,
			       vd->scores, e));
	MOE_TRY(add_1d(w, "tokenizer.token_types", MOE_I32, MOE_UTH_ROLE_TOKENIZER_TOKEN_TYPES, n,
		       vd->types, e));
	if (vd->n_merges) {
		MOE_TRY(add_1d(w, "tokenizer.merges", MOE_I8, MOE_UTH_ROLE_TOKENIZER_MERGES,
			       vd->merge_offsets[vd->n_merges], vd->merges, e));
		MOE_TRY(add_1d(w, "tokenizer.merge_offsets", MOE_I32,
			       MOE_UTH_ROLE_TOKENIZER_MERGE_OFFSETS, (uint64_t)vd->n_merges + 1,
			       vd->merge_offsets, e));
	}
	return 0;
}

/* ------------------------------------------------------------------ read */

/* The tensor `name` as a 1-D array of `count` elements of `dtype`, or
 * NULL (absent: ok only when !required). */
static int get_1d(const moe_uth *u, const char *name, int dtype, uint64_t count, bool required,
		  const void **data, moe_error *e)
{
	const moe_uth_tensor *t = moe_uth_find(u, name);
	*data = NULL;
	if (!t) {
		if (required && count)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s' is missing", u->path, name);
		return 0;
	}
	if (t->dtype != dtype || t->n_dims != 1 || t->ne[0] != count)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': expected %s[%" PRIu64 "], "
			       "found %s with %u dims, ne[0] = %" PRIu32, u->path, name,
			       moe_type_name(dtype), count, moe_type_name(t->dtype), t->n_dims,
			       t->ne[0]);
	*data = moe_uth_data(u, t);
	return 0;
}

/* Copy a blob + I32 offsets pair, checking the offsets. */
static int get_strings(const moe_uth *u, const char *blob_name, const char *off_name,
		       uint32_t n, moe_arena *a, const char **blob_out, const uint32_t **off_out,
		       moe_error *e)
{
	const void *od, *bd;
	uint32_t *off = moe_arena_alloc(a, ((size_t)n + 1) * sizeof *off, sizeof *off);
	if (!off)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
	if (n == 0) {
		off[0] = 0;
		*blob_out = "";
		*off_out = off;
		return 0;
	}
	MOE_TRY(get_1d(u, off_name, MOE_I32, (uint64_t)n + 1, true, &od, e));
	memcpy(off, od, ((size_t)n + 1) * sizeof *off);
	if (off[0] != 0)
		return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': first offset is %" PRIu32
			       ", not 0", u->path, off_name, off[0]);
	for (uint32_t i = 0; i < n; i++)
		if (off[i + 1] < off[i] || off[i + 1] > INT32_MAX)
			return moe_err(e, MOE_EFORMAT, "%s: tensor '%s': offset %" PRIu32
				       " (%" PRId32 ") is below the previous one or negative",
				       u->path, off_name, i + 1, (int32_t)off[i + 1]);
	const moe_uth_tensor *t = moe_uth_find(u, blob_name);
	if (!t && off[n] == 0) {
		*blob_out = "";
		*off_out = off;
		return 0;
	}
	MOE_TRY(get_1d(u, blob_name, MOE_I8, off[n], true, &bd, e));
	char *blob = moe_arena_alloc(a, (size_t)off[n] + 1, 1);
	if (!blob)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
	memcpy(blob, bd, off[n]);
	blob[off[n]] = '\0';
	*blob_out = blob;
	*off_out = off;
	return 0;
}

static int json_id(const moe_uth *u, json_t *o, const char *k, uint32_t n, int32_t *out,
		   moe_error *e)
{
	json_t *v = json_object_get(o, k);
	*out = -1;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) >= n)
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.%s: not a token id "
			       "(%" PRIu32 " tokens)", u->path, k, n);
	*out = (int32_t)json_integer_value(v);
	return 0;
}

static int json_flag(const moe_uth *u, json_t *o, const char *k, bool *out, moe_error *e)
{
	json_t *v = json_object_get(o, k);
	*out = false;
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.%s: not a boolean", u->path,
			       k);
	*out = json_is_true(v);
	return 0;
}

static int json_count(const moe_uth *u, json_t *o, const char *k, uint32_t *out, moe_error *e)
{
	json_t *v = json_object_get(o, k);
	*out = 0;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > INT32_MAX - 1)
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.%s: bad count", u->path, k);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

static int read_meta(moe_vocab_data *vd, const moe_uth *u, json_t *root, moe_arena *a,
		     uint8_t *flags, moe_error *e)
{
	json_t *o = json_object_get(root, "tokenizer");
	if (!o)
		return moe_err(e, MOE_ENOTFOUND, "%s: no tokenizer in the metadata", u->path);
	if (!json_is_object(o))
		return moe_err(e, MOE_EFORMAT, "%s: metadata 'tokenizer' is not an object",
			       u->path);
	const char *model = json_string_value(json_object_get(o, "model"));
	int m = moe_vocab_model_from_name(model);
	if (m < 0)
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.model: '%s' is not llama, "
			       "gpt2, t5, bert or none", u->path, model ? model : "(missing)");
	vd->model = (moe_vocab_model)m;
	const char *pre = json_string_value(json_object_get(o, "pre"));
	if (!pre)
		pre = "default";
	if (vd->model == MOE_VOCAB_BPE && !moe_pre_find(pre))
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.pre: unknown "
			       "pre-tokenizer '%s'", u->path, pre);
	if (!(vd->pre = moe_arena_strndup(a, pre, strlen(pre))))
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
	MOE_TRY(json_count(u, o, "n_tokens", &vd->n_tokens, e));
	MOE_TRY(json_count(u, o, "n_merges", &vd->n_merges, e));
	uint32_t n = vd->n_tokens;
	MOE_TRY(json_id(u, o, "bos_id", n, &vd->bos_id, e));
	MOE_TRY(json_id(u, o, "eos_id", n, &vd->eos_id, e));
	MOE_TRY(json_id(u, o, "eot_id", n, &vd->eot_id, e));
	MOE_TRY(json_id(u, o, "eom_id", n, &vd->eom_id, e));
	MOE_TRY(json_id(u, o, "unk_id", n, &vd->unk_id, e));
	MOE_TRY(json_id(u, o, "pad_id", n, &vd->pad_id, e));
	MOE_TRY(json_id(u, o, "sep_id", n, &vd->sep_id, e));
	MOE_TRY(json_flag(u, o, "add_bos", &vd->add_bos, e));
	MOE_TRY(json_flag(u, o, "add_eos", &vd->add_eos, e));
	MOE_TRY(json_flag(u, o, "add_space_prefix", &vd->add_space_prefix, e));
	MOE_TRY(json_flag(u, o, "remove_extra_whitespaces", &vd->remove_extra_whitespaces, e));
	static const char *const fk[2] = {"lstrip", "rstrip"};
	for (int k = 0; k < 2; k++) {
		json_t *arr = json_object_get(o, fk[k]);
		size_t i;
		json_t *v;
		if (!arr)
			continue;
		if (!json_is_array(arr))
			return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.%s: not an array",
				       u->path, fk[k]);
		json_array_foreach(arr, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) >= n)
				return moe_err(e, MOE_EFORMAT,
					       "%s: metadata tokenizer.%s[%zu]: not a "
					       "token id",
					       u->path, fk[k], i);
			flags[json_integer_value(v)] |= k ? MOE_TOKEN_RSTRIP : MOE_TOKEN_LSTRIP;
		}
	}
	/* Text pipeline from tokenizer.json (objects, kept as JSON text). */
	static const char *const pk[2] = {"normalizer", "pre_tokenizer"};
	for (int k = 0; k < 2; k++) {
		json_t *v = json_object_get(o, pk[k]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_object(v))
			return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.%s: not an object",
				       u->path, pk[k]);
		char *txt = json_dumps(v, JSON_COMPACT);
		char *copy = txt ? moe_arena_strndup(a, txt, strlen(txt)) : NULL;
		free(txt);
		if (!copy)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
		if (k)
			vd->pre_tokenizer = copy;
		else
			vd->normalizer = copy;
	}
	json_t *im = json_object_get(o, "ignore_merges");
	if (im) {
		if (!json_is_boolean(im))
			return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.ignore_merges: not a "
				       "boolean", u->path);
		vd->ignore_merges_set = true;
		vd->ignore_merges = json_is_true(im);
	}
	json_t *named = json_object_get(o, "chat_templates");
	if (named && !json_is_object(named))
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.chat_templates: not an "
			       "object", u->path);
	if (named && json_object_size(named)) {
		size_t nn = json_object_size(named), k = 0;
		const char **names = moe_arena_alloc(a, nn * sizeof *names, sizeof(void *));
		const char **texts = moe_arena_alloc(a, nn * sizeof *texts, sizeof(void *));
		const char *key;
		json_t *v;
		if (!names || !texts)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
		json_object_foreach(named, key, v) {
			if (!json_is_string(v))
				return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.chat_templates."
					       "%s: not a string", u->path, key);
			names[k] = moe_arena_strndup(a, key, strlen(key));
			texts[k] = moe_arena_strndup(a, json_string_value(v),
						     json_string_length(v));
			if (!names[k] || !texts[k])
				return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
			k++;
		}
		vd->n_chat_templates = (uint32_t)nn;
		vd->chat_template_names = names;
		vd->chat_template_texts = texts;
	}
	json_t *ct = json_object_get(root, "chat_template");
	if (ct && json_is_string(ct)) {
		const char *s = json_string_value(ct);
		if (!(vd->chat_template = moe_arena_strndup(a, s, strlen(s))))
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
	} else if (ct && !json_is_null(ct)) {
		return moe_err(e, MOE_EFORMAT, "%s: metadata chat_template: not a string", u->path);
	}
	return 0;
}

int moe_vocab_data_from_uth(moe_vocab_data *vd, const moe_uth *u, moe_arena *a, moe_error *e)
{
	json_error_t je;
	json_t *root;
	const void *d;
	int rc;

	memset(vd, 0, sizeof *vd);
	root = json_loadb(u->meta, u->meta_len, 0, &je);
	if (!root)
		return moe_err(e, MOE_EFORMAT, "%s: metadata: %s (line %d)", u->path, je.text,
			       je.line);
	/* n_tokens is only known after the metadata; flags are filled there,
	 * so read the count first. */
	json_t *o = json_object_get(root, "tokenizer");
	json_t *jn = o ? json_object_get(o, "n_tokens") : NULL;
	json_int_t n0 = jn && json_is_integer(jn) ? json_integer_value(jn) : 0;
	if (n0 < 0 || n0 > INT32_MAX - 1)
		n0 = 0;
	uint8_t *flags = moe_arena_alloc(a, (size_t)n0 + 1, 1);
	if (!flags) {
		json_decref(root);
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
	}
	rc = read_meta(vd, u, root, a, flags, e);
	json_decref(root);
	if (rc < 0)
		return rc;
	vd->flags = flags;
	uint32_t n = vd->n_tokens;
	if (vd->model != MOE_VOCAB_NONE && n == 0)
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.n_tokens is 0", u->path);
	MOE_TRY(get_strings(u, "tokenizer.tokens", "tokenizer.token_offsets", n, a, &vd->tokens,
			    &vd->token_offsets, e));
	MOE_TRY(get_1d(u, "tokenizer.scores", MOE_F32, n, false, &d, e));
	if (d) {
		float *sc = moe_arena_alloc(a, (size_t)n * sizeof *sc + 1, sizeof *sc);
		if (!sc)
			return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
		memcpy(sc, d, (size_t)n * sizeof *sc);
		vd->scores = sc;
	}
	MOE_TRY(get_1d(u, "tokenizer.token_types", MOE_I32, n, true, &d, e));
	int32_t *ty = moe_arena_alloc(a, (size_t)n * sizeof *ty + 1, sizeof *ty);
	if (!ty)
		return moe_err(e, MOE_ENOMEM, "%s: out of memory", u->path);
	if (n)
		memcpy(ty, d, (size_t)n * sizeof *ty);
	for (uint32_t i = 0; i < n; i++)
		if (ty[i] < 0 || ty[i] > MOE_TOKEN_BYTE)
			return moe_err(e, MOE_EFORMAT, "%s: tensor 'tokenizer.token_types': token %"
				       PRIu32 " has unknown type %" PRId32, u->path, i, ty[i]);
	vd->types = ty;
	if (vd->model == MOE_VOCAB_BPE && vd->n_merges == 0)
		return moe_err(e, MOE_EFORMAT, "%s: metadata tokenizer.n_merges: a gpt2 tokenizer "
			       "needs merges", u->path);
	MOE_TRY(get_strings(u, "tokenizer.merges", "tokenizer.merge_offsets", vd->n_merges, a,
			    &vd->merges, &vd->merge_offsets, e));
	return 0;
}
