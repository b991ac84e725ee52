#!/usr/bin/env python3
"""hparams-vs-ref.py UTH_INFO_JSON SOURCE — the normalised metadata moe-convert
wrote (moe-convert --info --json of the UTH) against what the independent
numpy reference (tests/ref/load.py) reads from the same GGUF file or HF
snapshot, for issue 14's architectures.  Exit 0 when every field agrees,
1 naming the fields that do not."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ref'))
import load  # noqa: E402


def main():
	info = json.load(open(sys.argv[1]))
	h = info['hparams']
	r = load.load(sys.argv[2])
	c = r[0] if isinstance(r, tuple) else r
	bad = []

	def same(name, got, want, rel=1e-6):
		if isinstance(want, float) or isinstance(got, float):
			ok = math.isclose(float(got), float(want), rel_tol=rel, abs_tol=1e-12)
		else:
			ok = got == want
		if not ok:
			bad.append('%s: UTH %r, reference %r' % (name, got, want))

	same('architecture', info['architecture'], c.arch)
	for k in ('n_vocab', 'n_embd', 'n_layer', 'n_head', 'n_head_kv', 'head_dim', 'n_expert',
		  'n_expert_used'):
		same(k, h[k], getattr(c, k))
	same('kq_scale', h['kq_scale'], c.attn_scale)
	ro, rr = h['rope'], c.rope
	same('rope.n_rot', ro['n_rot'], rr.n_dims)
	if getattr(rr, 'scaling', None) == 'yarn':
		same('rope.scaling', ro['scaling'], 'yarn')
		same('rope.factor', ro['factor'], rr.factor)
		same('rope.orig_ctx', ro['orig_ctx'], rr.n_ctx_orig)
		same('rope.beta_fast', ro['beta_fast'], rr.beta_fast)
		same('rope.beta_slow', ro['beta_slow'], rr.beta_slow)
		same('rope.yarn_truncate', ro['yarn_truncate'], rr.truncate)
		# the reference's rotation magnitude: attn_factor x (1 + 0.1 ln factor)
		same('rope.mscale', ro['mscale'], rr.attn_factor * (1 + 0.1 * math.log(rr.factor)))
	if c.arch == 'deepseek2':
		same('attention', h['attention'], 'mla')
		for k, ck in (('q_lora_rank', 'q_lora_rank'), ('kv_lora_rank', 'kv_lora_rank'),
			      ('rope_head_dim', 'rope_dim'), ('head_dim_v', 'v_head_dim'),
			      ('n_layer_dense_lead', 'n_dense_lead'), ('expert_gating', 'gating'),
			      ('expert_group_score', 'group_score'), ('topk_renorm', 'norm_topk'),
			      ('expert_weights_scale', 'routed_scale')):
			same(k, h[k], getattr(c, ck))
		same('expert_groups', h['expert_groups'], c.n_group if c.topk_group < c.n_group else 1)
		same('expert_groups_used', h['expert_groups_used'],
		     c.topk_group if c.topk_group < c.n_group else 1)
	else:
		same('attention', h['attention'], 'mha')
	if c.arch == 'gpt-oss':
		same('sliding_window', h['sliding_window'], c.sliding_window)
		same('sliding_layers', h['sliding_layers'], [i for i, s in enumerate(c.sliding) if s])
		same('swiglu_limit', h['swiglu_limit'], c.swiglu_limit)
		same('ffn_act', h['ffn_act'], 'swiglu_oai')
		same('attn_sinks', h['attn_sinks'], True)
		same('expert_bias', h['expert_bias'], True)
		same('qkv_bias', h['qkv_bias'], True)
	if c.arch == 'phimoe':
		same('norm', h['norm'], 'layer')
		same('expert_router', h['expert_router'], 'sparsemixer')
		same('router_jitter_eps', h['router_jitter_eps'], c.jitter_eps)
		same('sliding_window', h['sliding_window'], c.sliding_window)
		same('rope.scaling', ro['scaling'], 'longrope')
		same('rope.orig_ctx', ro['orig_ctx'], rr.orig_ctx)
		same('rope.mscale', ro['mscale'], rr.mscale[0])
		same('rope.mscale_long', ro['mscale_long'], rr.mscale[1])
		same('qkv_bias', h['qkv_bias'], True)
	if c.arch == 'granitemoe':
		for k in ('embedding_scale', 'residual_scale', 'logit_scale'):
			same(k, h[k], getattr(c, k))
		same('attention_scale', h['attention_scale'], c.attn_scale)
	for b in bad:
		print(b)
	return 1 if bad else 0


if __name__ == '__main__':
	sys.exit(main())
