/* t-arch.c — the one validation of hyper-parameters (lib/arch/check.c): each
 * field's range and finiteness, named as its source spells it; consistency
 * with the tensors present; and the loader's side: a UTH file whose hparams
 * contradict its tensors (written here with the UTH writer, since
 * moe-convert no longer produces one) is refused by moe_model_load. */
#include "arch.h"
#include "model.h"
#include "quant.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A tiny llama: vocab 8, embd 8, 2 heads of 4, 1 KV head, ff 16, 2 layers. */
static moe_hparams tiny(moe_hparams_source src)
{
	moe_hparams hp;
	memset(&hp, 0, sizeof hp);
	snprintf(hp.arch, sizeof hp.arch, "llama");
	hp.n_vocab = 8, hp.n_ctx_train = 64, hp.n_embd = 8, hp.n_layer = 2, hp.n_head = 2;
	hp.n_head_kv = 1, hp.head_dim = 4, hp.head_dim_v = 4, hp.n_ff = 16, hp.n_rot = 4;
	hp.rope_base = 10000, hp.rope_factor = 1, hp.norm_eps = 1e-5;
	hp.expert_weights_scale = hp.embedding_scale = hp.residual_scale = 1;
	hp.attention_scale = hp.logit_scale = 1;
	moe_hparams_set_defaults14(&hp);
	hp.source = src;
	return hp;
}

/* ------------------------------------------------------ fields alone */

static void expect_field(moe_hparams hp, const char *want, const char *what)
{
	moe_error e = {0};
	int rc = moe_hparams_check(&hp, &e);
	ok(rc == MOE_EFORMAT && strstr(e.msg, want), "%s: refused naming %s (%s)", what, want,
	   e.msg);
}

static void test_fields(void)
{
	moe_error e = {0};
	moe_hparams hp = tiny(MOE_HP_SRC_HF);
	ok(moe_hparams_check(&hp, &e) == 0, "a sane tiny llama passes (%s)", e.msg);
	hp.rope_base = INFINITY;
	expect_field(hp, "'rope_theta'", "rope_theta inf (HF)");
	hp = tiny(MOE_HP_SRC_GGUF);
	hp.rope_base = INFINITY;
	expect_field(hp, "llama.rope.freq_base", "freq_base inf (GGUF)");
	hp = tiny(MOE_HP_SRC_UTH);
	hp.rope_base = NAN;
	expect_field(hp, "hparams.rope.base", "rope base NaN (UTH)");
	hp = tiny(MOE_HP_SRC_HF);
	hp.rope_base = 3.5e38;
	expect_field(hp, "'rope_theta'", "rope_theta 3.5e38 (float overflow)");
	hp = tiny(MOE_HP_SRC_HF);
	hp.norm_eps = 1e300;
	expect_field(hp, "'rms_norm_eps'", "rms_norm_eps 1e300");
	hp = tiny(MOE_HP_SRC_HF);
	hp.norm_eps = 1e-50; /* > 0 as a double, 0 as the float UTH stores */
	expect_field(hp, "'rms_norm_eps'", "rms_norm_eps 1e-50 (0 once stored)");
	hp = tiny(MOE_HP_SRC_HF);
	hp.rope_factor = -2;
	expect_field(hp, "'rope_scaling.factor'", "rope factor -2");
	hp = tiny(MOE_HP_SRC_HF);
	hp.logit_scale = INFINITY;
	expect_field(hp, "'logits_scaling'", "logits_scaling inf");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_layer = 0;
	expect_field(hp, "'num_hidden_layers'", "0 layers");
	hp = tiny(MOE_HP_SRC_GGUF);
	hp.n_layer = 4294967295u;
	expect_field(hp, "llama.block_count", "2^32-1 layers");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_head_kv = 3, hp.n_head = 4;
	expect_field(hp, "'num_attention_heads'", "4 heads over 3 KV heads");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_rot = 0;
	expect_field(hp, "'partial_rotary_factor'", "0 rotary dimensions (RoPE silently off)");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_rot = 3;
	expect_field(hp, "'partial_rotary_factor'", "odd rotary dimensions");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_expert = 4, hp.n_expert_used = 5, hp.n_ff_exp = 16;
	expect_field(hp, "'num_experts_per_tok'", "5 experts used of 4");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_expert = 4, hp.n_expert_used = 2, hp.n_ff_exp = 0;
	expect_field(hp, "'moe_intermediate_size'", "experts of width 0");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_ff = 0;
	expect_field(hp, "'intermediate_size'", "dense FFN of width 0");
	hp = tiny(MOE_HP_SRC_HF);
	hp.head_dim_v = 8;
	expect_field(hp, "'v_head_dim'", "value heads of another size (not MLA)");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_vocab = MOE_HP_MAX_VOCAB + 1;
	expect_field(hp, "'vocab_size'", "vocabulary over the bound");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_layer_dense_lead = 3;
	expect_field(hp, "'first_k_dense_replace'", "more dense leading layers than layers");
}

/* config.json values as real files write them. */
static void test_config_json(void)
{
	moe_error e = {0};
	moe_hparams hp;
	const char *base = "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":8,"
			   "\"hidden_size\":8,\"num_hidden_layers\":2,\"num_attention_heads\":2,"
			   "\"num_key_value_heads\":1,\"intermediate_size\":16";
	char buf[512];
	snprintf(buf, sizeof buf, "%s,\"max_position_embeddings\":4096.0,\"rope_theta\":500000}",
		 base);
	ok(moe_hparams_from_hf(&hp, buf, true, &e) == 0 && hp.n_ctx_train == 4096,
	   "a count written as 4096.0 is read as 4096 (%s)", e.msg);
	snprintf(buf, sizeof buf, "%s,\"max_position_embeddings\":4096.5}", base);
	ok(moe_hparams_from_hf(&hp, buf, true, &e) == MOE_EFORMAT &&
	   strstr(e.msg, "max_position_embeddings"), "4096.5 is not a count: %s", e.msg);
	snprintf(buf, sizeof buf, "%s,\"max_position_embeddings\":1e30}", base);
	ok(moe_hparams_from_hf(&hp, buf, true, &e) == MOE_EFORMAT &&
	   strstr(e.msg, "max_position_embeddings"), "1e30 as a count refused: %s", e.msg);
	snprintf(buf, sizeof buf, "%s,\"num_key_value_heads\":-1}", base);
	ok(moe_hparams_from_hf(&hp, buf, true, &e) == MOE_EFORMAT, "-1 KV heads refused: %s",
	   e.msg);
	static const char *const prf[] = {"1e30", "268435456", "-0.5", "0", "1.5"};
	for (size_t i = 0; i < sizeof prf / sizeof prf[0]; i++) {
		snprintf(buf, sizeof buf, "%s,\"partial_rotary_factor\":%s}", base, prf[i]);
		int rc = moe_hparams_from_hf(&hp, buf, true, &e);
		ok(rc == MOE_EFORMAT && strstr(e.msg, "partial_rotary_factor"),
		   "partial_rotary_factor %s refused before any conversion: %s", prf[i], e.msg);
	}
	snprintf(buf, sizeof buf, "%s,\"partial_rotary_factor\":0.5}", base);
	ok(moe_hparams_from_hf(&hp, buf, true, &e) == 0 && hp.n_rot == 2,
	   "partial_rotary_factor 0.5 of head size 4: 2 rotary dimensions");
	snprintf(buf, sizeof buf, "%s,\"rope_theta\":\"10000\"}", base);
	ok(moe_hparams_from_hf(&hp, buf, true, &e) == MOE_EFORMAT && strstr(e.msg, "rope_theta"),
	   "rope_theta as a string refused: %s", e.msg);
}

/* Huge integers from Python, rewritten as reals. */
#include "hf.h"
static void test_relax(void)
{
	moe_error e = {0};
	struct { const char *in, *out; } c[] = {
		{"{\"model_max_length\": 1000000000000000019884624838656}",
		 "{\"model_max_length\": 1000000000000000019884624838656.0}"},
		{"[9223372036854775807, 9223372036854775808, -9223372036854775808, "
		 "-9223372036854775809]",
		 "[9223372036854775807, 9223372036854775808.0, -9223372036854775808, "
		 "-9223372036854775809.0]"},
		{"{\"s\": \"123456789012345678901234567890\", \"e\": 1e400, \"r\": "
		 "123456789012345678901234567890.5}",
		 "{\"s\": \"123456789012345678901234567890\", \"e\": 1e400, \"r\": "
		 "123456789012345678901234567890.5}"},
		{"{\"q\": \"a\\\"b 99999999999999999999\", \"n\": 00000000000000000000001}",
		 "{\"q\": \"a\\\"b 99999999999999999999\", \"n\": 00000000000000000000001}"},
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		char *t = strdup(c[i].in);
		int rc = moe_hf_json_relax(&t, &e);
		ok(rc == 0 && !strcmp(t, c[i].out), "relax case %zu: %s", i, t);
		free(t);
	}
	char *t = strdup("{\"model_max_length\": 1000000000000000019884624838656, \"x\": 1}");
	moe_hf_json_relax(&t, &e);
	json_t *j = json_loads(t, 0, NULL);
	ok(j && json_is_real(json_object_get(j, "model_max_length")) &&
	   json_real_value(json_object_get(j, "model_max_length")) == 1e30 &&
	   json_integer_value(json_object_get(j, "x")) == 1,
	   "int(1e30) parses as the real 1e30, small integers stay integers");
	json_decref(j);
	free(t);
}

/* ------------------------------------------------------ against tensors */

typedef struct tset {
	moe_uth_tensor t[64];
	char names[64][64];
	size_t n;
} tset;

static void add(tset *s, int layer, int expert, uint32_t ne0, uint32_t ne1, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static void add(tset *s, int layer, int expert, uint32_t ne0, uint32_t ne1, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->names[s->n], sizeof s->names[0], fmt, ap);
	va_end(ap);
	moe_uth_tensor *t = &s->t[s->n];
	memset(t, 0, sizeof *t);
	t->name = s->names[s->n];
	t->dtype = MOE_F32;
	t->layer = layer < 0 ? MOE_UTH_NONE : (uint16_t)layer;
	t->expert = expert < 0 ? MOE_UTH_NONE : (uint16_t)expert;
	t->n_dims = ne1 > 1 ? 2 : 1;
	t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = t->ne[3] = 1;
	s->n++;
}

static const moe_uth_tensor *ts_at(const void *ctx, size_t i)
{
	return &((const tset *)ctx)->t[i];
}

static const moe_uth_tensor *ts_find(const void *ctx, const char *name)
{
	const tset *s = ctx;
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->t[i].name, name))
			return &s->t[i];
	return NULL;
}

/* The tensors of tiny(): layers l < n_layer, optionally with q/k/v biases. */
static void tiny_tensors(tset *s, int n_layer, bool bias)
{
	s->n = 0;
	add(s, -1, -1, 8, 8, "token_embd.weight");
	add(s, -1, -1, 8, 1, "output_norm.weight");
	add(s, -1, -1, 8, 8, "output.weight");
	for (int l = 0; l < n_layer; l++) {
		add(s, l, -1, 8, 1, "blk.%d.attn_norm.weight", l);
		add(s, l, -1, 8, 8, "blk.%d.attn_q.weight", l);
		add(s, l, -1, 8, 4, "blk.%d.attn_k.weight", l);
		add(s, l, -1, 8, 4, "blk.%d.attn_v.weight", l);
		add(s, l, -1, 8, 8, "blk.%d.attn_output.weight", l);
		if (bias) {
			add(s, l, -1, 8, 1, "blk.%d.attn_q.bias", l);
			add(s, l, -1, 4, 1, "blk.%d.attn_k.bias", l);
			add(s, l, -1, 4, 1, "blk.%d.attn_v.bias", l);
		}
		add(s, l, -1, 8, 1, "blk.%d.ffn_norm.weight", l);
		add(s, l, -1, 8, 16, "blk.%d.ffn_gate.weight", l);
		add(s, l, -1, 8, 16, "blk.%d.ffn_up.weight", l);
		add(s, l, -1, 16, 8, "blk.%d.ffn_down.weight", l);
	}
}

static void expect_tensors(const moe_hparams *hp, tset *s, const char *want, const char *what)
{
	moe_error e = {0};
	moe_tensor_set ts = {.count = s->n, .at = ts_at, .find = ts_find, .ctx = s};
	int rc = moe_hparams_validate(hp, &ts, false, &e);
	if (!want)
		ok(rc == 0, "%s: accepted (%s)", what, e.msg);
	else
		ok(rc == MOE_EFORMAT && strstr(e.msg, want), "%s: refused naming %s (%s)", what, want,
		   e.msg);
}

static void test_tensors(void)
{
	static tset s;
	moe_hparams hp = tiny(MOE_HP_SRC_HF);
	tiny_tensors(&s, 2, false);
	expect_tensors(&hp, &s, NULL, "tiny llama with its tensors");
	hp.n_vocab = 1;
	expect_tensors(&hp, &s, "'vocab_size'", "vocab_size 1 on 8 embedding rows");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_embd = 4096;
	expect_tensors(&hp, &s, "'hidden_size'", "hidden_size 4096 on 8-wide tensors");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_head_kv = 2;
	expect_tensors(&hp, &s, "attn_k.weight", "num_key_value_heads 2 on 1-head K");
	hp = tiny(MOE_HP_SRC_HF);
	hp.qkv_bias = true;
	expect_tensors(&hp, &s, "'attention_bias'", "attention_bias true without biases");
	hp = tiny(MOE_HP_SRC_HF);
	tiny_tensors(&s, 2, true);
	expect_tensors(&hp, &s, "'attention_bias'", "biases present, attention_bias false");
	hp.qkv_bias = true;
	expect_tensors(&hp, &s, NULL, "biases present, attention_bias true");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_layer = 1;
	tiny_tensors(&s, 2, false);
	expect_tensors(&hp, &s, "'num_hidden_layers'", "num_hidden_layers 1 with 2 layers' tensors");
	hp = tiny(MOE_HP_SRC_HF);
	hp.n_layer = 3;
	expect_tensors(&hp, &s, "'num_hidden_layers'", "num_hidden_layers 3 with 2 layers' tensors");
	hp = tiny(MOE_HP_SRC_HF);
	tiny_tensors(&s, 2, false);
	add(&s, 0, 0, 8, 16, "blk.0.ffn_up.0.weight");
	expect_tensors(&hp, &s, "'num_local_experts'", "expert tensors with num_local_experts 0");
	hp = tiny(MOE_HP_SRC_HF);
	hp.tied_embeddings = false;
	tiny_tensors(&s, 2, false);
	s.n = 0;
	tiny_tensors(&s, 2, false);
	/* drop output.weight (index 2) */
	memmove(&s.t[2], &s.t[3], (s.n - 3) * sizeof s.t[0]);
	memmove(&s.names[2], &s.names[3], (s.n - 3) * sizeof s.names[0]);
	s.n--;
	for (size_t i = 0; i < s.n; i++)
		s.t[i].name = s.names[i];
	expect_tensors(&hp, &s, "output.weight", "untied output without output.weight");
	hp.tied_embeddings = true;
	expect_tensors(&hp, &s, NULL, "tied output without output.weight");
	/* every architecture in the table runs now (deepseek2 was the last) */
	hp = tiny(MOE_HP_SRC_GGUF);
	snprintf(hp.arch, sizeof hp.arch, "deepseek2");
	moe_error e = {0};
	ok(moe_hparams_check_runnable(&hp, &e) == 0, "deepseek2 is runnable (%s)", e.msg);
	hp = tiny(MOE_HP_SRC_HF);
	hp.rope_scaling = MOE_ROPE_SCALING_LLAMA3;
	ok(moe_hparams_check_runnable(&hp, &e) == MOE_EUNSUPPORTED && strstr(e.msg, "llama3"),
	   "llama3 RoPE scaling converts but does not run yet: %s", e.msg);
}

/* ------------------------------------------------------ the loader */

static const float zeros[256];

/* Write tiny()'s tensors (all zeros) with the hparams `hp` as metadata. */
static int write_uth(const char *path, const moe_hparams *hp, tset *s, moe_error *e)
{
	moe_uth_writer *w;
	MOE_TRY(moe_uth_writer_new(&w, e));
	int rc = 0;
	for (size_t i = 0; i < s->n && rc == 0; i++) {
		moe_uth_tensor d = s->t[i];
		const char *nm = d.name;
		/* role from the base name, as the converter does */
		moe_tensor_place pl;
		if (moe_arch_place_canonical(nm, &pl, e) < 0) {
			rc = -1;
			break;
		}
		d.role = (uint16_t)pl.role;
		rc = moe_uth_writer_add_mem(w, &d, zeros, e);
	}
	json_t *m = json_object();
	json_object_set_new(m, "uth_metadata_version", json_integer(1));
	json_object_set_new(m, "architecture", json_string(hp->arch));
	json_object_set_new(m, "hparams", moe_hparams_to_json(hp));
	char *meta = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	if (rc == 0)
		rc = moe_uth_writer_set_meta(w, meta, strlen(meta), e);
	free(meta);
	moe_out out;
	if (rc == 0 && (rc = moe_out_open(&out, path, e)) == 0) {
		rc = moe_uth_writer_write(w, &out, e);
		if (rc == 0)
			rc = moe_out_commit(&out, e);
		else
			moe_out_abort(&out);
	}
	moe_uth_writer_free(w);
	return rc;
}

static void expect_load(const char *path, const moe_hparams *hp, tset *s, const char *want,
			const char *what)
{
	moe_error e = {0};
	if (write_uth(path, hp, s, &e) < 0) {
		ok(0, "%s: write the file (%s)", what, e.msg);
		return;
	}
	moe_model *m = NULL;
	int rc = moe_model_load(&m, path, &e);
	if (!want)
		ok(rc == 0, "%s: the loader accepts it (%s)", what, e.msg);
	else
		ok(rc < 0 && strstr(e.msg, want) && strstr(e.msg, path),
		   "%s: the loader refuses it naming the file and %s (%s)", what, want, e.msg);
	moe_model_free(m);
	unlink(path);
}

static void test_loader(void)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/t-arch-%d.uth", (int)getpid());
	static tset s;
	tiny_tensors(&s, 2, false);
	moe_hparams hp = tiny(MOE_HP_SRC_UTH);
	expect_load(path, &hp, &s, NULL, "tiny llama");
	hp.n_layer = 1;
	expect_load(path, &hp, &s, "hparams.n_layer", "n_layer 1 with 2 layers' tensors");
	hp = tiny(MOE_HP_SRC_UTH);
	hp.qkv_bias = true;
	expect_load(path, &hp, &s, "hparams.qkv_bias", "qkv_bias without biases");
	hp = tiny(MOE_HP_SRC_UTH);
	hp.n_vocab = 4;
	expect_load(path, &hp, &s, "hparams.n_vocab", "n_vocab 4 on 8 rows");
	hp = tiny(MOE_HP_SRC_UTH);
	hp.n_ff = 0;
	expect_load(path, &hp, &s, "hparams.n_ff", "FFN width 0");
	hp = tiny(MOE_HP_SRC_UTH);
	hp.head_dim_v = 8;
	expect_load(path, &hp, &s, "hparams.head_dim_v", "value head size differs");
	hp = tiny(MOE_HP_SRC_UTH);
	hp.rope_scaling = MOE_ROPE_SCALING_LLAMA3;
	expect_load(path, &hp, &s, "llama3", "llama3 RoPE scaling");
	/* latent attention declared, the file holds ordinary attention */
	hp = tiny(MOE_HP_SRC_UTH);
	snprintf(hp.arch, sizeof hp.arch, "deepseek2");
	hp.attention = MOE_ATTN_MLA;
	hp.kv_lora_rank = 8;
	hp.rope_head_dim = hp.n_rot = 2;
	expect_load(path, &hp, &s, "attn_kv_a_norm", "deepseek2 without its latent attention tensors");
}

/* Issue 14's fields: config.json -> hparams -> UTH JSON -> hparams keeps
 * every one; a UTH object without them (written before) reads as the
 * neutral defaults. */
static void test_json14(void)
{
	moe_error e = {0};
	moe_hparams a, b;
	const char *cfg =
		"{\"architectures\":[\"GptOssForCausalLM\"],\"vocab_size\":8,\"hidden_size\":8,"
		"\"num_hidden_layers\":3,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
		"\"head_dim\":4,\"intermediate_size\":16,\"num_local_experts\":4,"
		"\"num_experts_per_tok\":2,\"sliding_window\":5,\"swiglu_limit\":6.5,"
		"\"layer_types\":[\"full_attention\",\"sliding_attention\",\"sliding_attention\"],"
		"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8.0,\"beta_fast\":16,"
		"\"beta_slow\":2,\"truncate\":false,\"original_max_position_embeddings\":64}}";
	int rc = moe_hparams_from_hf(&a, cfg, true, &e);
	ok(rc == 0 && moe_hparams_check(&a, &e) == 0, "gpt-oss config.json read (%s)", e.msg);
	ok(!moe_hparams_layer_slides(&a, 0) && moe_hparams_layer_slides(&a, 1) &&
	   moe_hparams_layer_slides(&a, 2) && a.sliding_window == 5, "layer_types -> sliding layers 1, 2");
	ok(a.ffn_act == MOE_ACT_SWIGLU_OAI && a.swiglu_limit == 6.5 && a.attn_sinks && a.expert_bias,
	   "clamped SwiGLU, sinks, expert biases");
	ok(fabs(a.rope_mscale - (0.1 * log(8.0) + 1)) < 1e-6 && a.rope_beta_fast == 16 &&
	   a.rope_beta_slow == 2 && !a.rope_yarn_truncate, "YaRN: mscale 0.1 ln 8 + 1, betas, truncate");
	json_t *j = moe_hparams_to_json(&a);
	rc = moe_hparams_from_json(&b, j, &e);
	ok(rc == 0, "read back (%s)", e.msg);
	ok(b.sliding_window == 5 && !memcmp(a.sliding_layers, b.sliding_layers, sizeof a.sliding_layers) &&
	   b.ffn_act == a.ffn_act && b.swiglu_limit == 6.5 && b.attn_sinks && b.expert_bias &&
	   fabs(b.rope_mscale - a.rope_mscale) < 1e-6 && b.rope_beta_fast == 16 &&
	   !b.rope_yarn_truncate && fabs(b.kq_scale - 0.5) < 1e-7 && b.expert_router == MOE_ROUTER_TOPK,
	   "the issue-14 fields survive the UTH JSON");
	json_array_append_new(json_object_get(j, "sliding_layers"), json_integer(3));
	ok(moe_hparams_from_json(&b, j, &e) == MOE_EFORMAT && strstr(e.msg, "sliding_layers"),
	   "a sliding layer beyond n_layer refused: %s", e.msg);
	static const char *const k14[] = {"attention", "kq_scale", "expert_groups", "expert_groups_used",
		"expert_group_score", "expert_router", "router_jitter_eps", "sliding_window",
		"sliding_layers", "attn_sinks", "expert_bias", "ffn_act", "swiglu_alpha", "swiglu_limit"};
	for (size_t i = 0; i < sizeof k14 / sizeof k14[0]; i++)
		json_object_del(j, k14[i]);
	json_t *rope = json_object_get(j, "rope");
	json_object_del(rope, "mscale");
	json_object_del(rope, "mscale_long");
	rc = moe_hparams_from_json(&b, j, &e);
	ok(rc == 0 && b.attention == MOE_ATTN_MHA && fabs(b.kq_scale - 0.5) < 1e-7 &&
	   b.sliding_window == 0 && !b.attn_sinks && b.ffn_act == MOE_ACT_SILU &&
	   fabs(b.rope_mscale - (0.1 * log(8.0) + 1)) < 1e-6,
	   "without them (an older file): the neutral defaults, YaRN's mscale as the engine "
	   "applied it (%s)", e.msg);
	json_decref(j);
	const char *ds = "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"vocab_size\":8,"
			 "\"hidden_size\":8,\"num_hidden_layers\":2,\"num_attention_heads\":2,"
			 "\"intermediate_size\":16,\"moe_intermediate_size\":8,\"n_routed_experts\":8,"
			 "\"num_experts_per_tok\":2,\"first_k_dense_replace\":1,\"kv_lora_rank\":8,"
			 "\"qk_rope_head_dim\":4,\"qk_nope_head_dim\":8,\"v_head_dim\":6,\"n_group\":4,"
			 "\"topk_group\":4,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,"
			 "\"mscale_all_dim\":0.707,\"original_max_position_embeddings\":4}}";
	rc = moe_hparams_from_hf(&a, ds, true, &e);
	ok(rc == 0 && moe_hparams_check(&a, &e) == 0, "DeepSeek-V3 config.json read (%s)", e.msg);
	double m = 1 + (double)(float)0.0707 * log(40.0);
	ok(a.attention == MOE_ATTN_MLA && a.head_dim == 12 && a.head_dim_v == 6 && a.n_head_kv == 2 &&
	   a.gating == MOE_GATING_SIGMOID && fabs(a.kq_scale - m * m / sqrt(12.0)) < 1e-9,
	   "MLA: head 8 + 4, values 6, sigmoid, kq_scale = mscale^2 / sqrt(12) (%g)", a.kq_scale);
	ok(a.expert_groups == 1 && a.expert_groups_used == 1 && a.expert_group_score == MOE_GROUP_SCORE_TOP2SUM,
	   "topk_group = n_group: no group limit");
	/* the engine runs latent attention and group-limited routing (deepseek2) */
	moe_hparams g = tiny(MOE_HP_SRC_UTH);
	snprintf(g.arch, sizeof g.arch, "granitemoe");
	ok(moe_hparams_check_runnable(&g, &e) == 0, "granitemoe runs (%s)", e.msg);
	snprintf(g.arch, sizeof g.arch, "deepseek2");
	g.attention = MOE_ATTN_MLA;
	ok(moe_hparams_check_runnable(&g, &e) == 0, "deepseek2 with latent attention runs (%s)",
	   e.msg);
	g = tiny(MOE_HP_SRC_UTH);
	g.rope_scaling = MOE_ROPE_SCALING_YARN, g.rope_factor = 4, g.rope_orig_ctx = 16;
	g.rope_mscale = 0.1 * log(4.0) + 1;
	ok(moe_hparams_check_runnable(&g, &e) == 0, "YaRN runs (%s)", e.msg);
	g.expert_groups = 2;
	ok(moe_hparams_check_runnable(&g, &e) == 0, "group-limited routing runs (%s)", e.msg);
}

int main(void)
{
	test_fields();
	test_config_json();
	test_relax();
	test_tensors();
	test_loader();
	test_json14();
	return tap_done();
}
