# tests/ref/arch_deepseek2.py — DeepSeek-V2 / V2-Lite / V3 / R1 (GGUF
# architecture "deepseek2"), written from DeepSeek's published model
# definition (modeling_deepseek.py of the V2 and V3 checkpoints, and
# transformers' DeepseekV2 / DeepseekV3 ports) and llama.cpp's GGUF names.
#
# Attention: Multi-head Latent Attention (DeepSeek-V2 paper, section 2.1).
#   queries   q = W_q x  (q_lora_rank 0), or W_qb RMSNorm(W_qa x)
#             per head: q_nope (nope dims) ++ q_pe (rope dims)
#   latent    W_kva x = c (kv_lora_rank) ++ k_pe (rope dims, one for all heads)
#             c = RMSNorm(c)
#   expanded  per head h: k_nope = W_kb[h] c, v = W_vb[h] c
#             key = k_nope ++ RoPE(k_pe), query = q_nope ++ RoPE(q_pe)
#   absorbed  q_lat = W_kb[h]^T q_nope: q . key = q_lat . c + RoPE(q_pe) . RoPE(k_pe)
#             out_lat = softmax(...) . c, out = W_vb[h] out_lat
#   The absorbed form caches only c and RoPE(k_pe) per token (kv_lora_rank +
#   rope dims, shared by all heads); the expanded form caches every head's
#   key and value.  Both are kept here and checked equal (selftest.py mla).
#   RoPE: interleaved pairs over the rope dims, YaRN; score scale
#   mscale^2 / sqrt(nope + rope) with mscale = 0.1 mscale_all_dim ln(factor)
#   + 1 (GGUF: 1 + rope.scaling.yarn_log_multiplier ln(factor)); the
#   rotation's magnitude is yarn_mscale(mscale) / yarn_mscale(mscale_all_dim)
#   (1 in every published checkpoint; llama.cpp always uses 1).
#
# Tensors (numpy shapes): attn_k_b (H, kv_lora, nope), attn_v_b (H, v,
# kv_lora) as llama.cpp's converter splits kv_b_proj (H * (nope + v), kv_lora).
#
# FFN: the first n_dense_lead layers dense SwiGLU; then MoE:
#   scores  softmax(logits) (V2) or sigmoid(logits) (V3)
#   choice  scores + exp_probs_b (V3's e_score_correction_bias, for the
#           choice only); with groups (n_group > 1, topk_group < n_group):
#           keep the topk_group groups with the best group score — the max
#           (V2 group_limited_greedy) or the sum of the two best (V3
#           noaux_tc) — others' scores set to 0; top-k of what remains
#   weights scores of the chosen (without the bias); / their sum (+1e-20)
#           if norm_topk_prob; x routed_scaling_factor
#   plus the shared experts (one SwiGLU of n_shared x moe width), ungated.
import math

import numpy as np

import arch_common as C
import model as M


class Model(C.Base):
	"""mla: 'absorbed' (default; the cache holds the latent) or 'expanded'."""

	def __init__(self, cfg, W, emulate=(), tape=None, mla='absorbed'):
		if mla not in ('absorbed', 'expanded'):
			raise ValueError('mla: absorbed or expanded')
		self.mla = mla
		super().__init__(cfg, W, emulate, tape)

	def forward(self, tokens):
		c = self.cfg
		tokens, pos = self.start(tokens)
		x = self.w('token_embd.weight')[tokens]
		for il in range(c.n_layer):
			p = 'blk.%d.' % il
			h = M.rms_norm(x, self.w(p + 'attn_norm.weight'), c.rms_eps)
			x = x + self.attention(il, h, pos)
			h = M.rms_norm(x, self.w(p + 'ffn_norm.weight'), c.rms_eps)
			x = x + (self.dense_ffn(il, h) if il < c.n_dense_lead else self.moe(il, h))
		self.n_past += tokens.size
		return self.logits(M.rms_norm(x, self.w('output_norm.weight'), c.rms_eps))

	def attention(self, il, h, pos):
		c = self.cfg
		p = 'blk.%d.' % il
		T, H, N, R, L = h.shape[0], c.n_head, c.nope, c.rope_dim, c.kv_lora_rank
		src = p + 'attn_input'
		if c.q_lora_rank:
			qa = self.matmul(h, p + 'attn_q_a.weight', src=src)
			qa = M.rms_norm(qa, self.w(p + 'attn_q_a_norm.weight'), c.rms_eps)
			q = self.matmul(qa, p + 'attn_q_b.weight')
		else:
			q = self.matmul(h, p + 'attn_q.weight', src=src)
		q = q.reshape(T, H, N + R)
		q_nope, q_pe = q[:, :, :N], c.rope.apply(q[:, :, N:], pos)
		kva = self.matmul(h, p + 'attn_kv_a_mqa.weight', src=src)     # (T, L + R)
		lat = M.rms_norm(kva[:, :L], self.w(p + 'attn_kv_a_norm.weight'), c.rms_eps)
		k_pe = c.rope.apply(kva[:, None, L:], pos)[:, 0, :]             # (T, R)
		if self.mla == 'absorbed':
			S = self.remember(il, pos, latent=lat, k_pe=k_pe)
			lat_s, kpe_s = S['latent'], S['k_pe']                     # (S, L), (S, R)
			out = np.empty((T, H, c.v_head_dim), dtype=h.dtype)
			hidden = S['pos'][None, :] > pos[:, None]
			for j in range(H):
				# W_kb[h]^T q_nope: attn_k_b[h] is (L, N), a product
				# with input N and output L
				q_lat = self.matmul(q_nope[:, j, :], p + 'attn_k_b.weight', e=j)
				s = (q_lat @ lat_s.T + q_pe[:, j, :] @ kpe_s.T) * c.attn_scale
				a = M.softmax(np.where(hidden, -np.inf, s)) @ lat_s      # (T, L)
				out[:, j, :] = self.matmul(a, p + 'attn_v_b.weight', e=j)
		else:
			kb = self.w(p + 'attn_k_b.weight')                           # (H, L, N)
			vb = self.w(p + 'attn_v_b.weight')                           # (H, V, L)
			k_nope = np.einsum('tl,hln->thn', lat, kb)
			v = np.einsum('tl,hvl->thv', lat, vb)
			k = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :], (T, H, R))],
					   axis=2)
			S = self.remember(il, pos, k=k, v=v)
			qf = np.concatenate([q_nope, q_pe], axis=2)
			out = C.attend(qf, S['k'], S['v'], pos, S['pos'], c.attn_scale)
		return self.matmul(out.reshape(T, H * c.v_head_dim), p + 'attn_output.weight')

	def route(self, il, h):
		c = self.cfg
		p = 'blk.%d.' % il
		logits = self.matmul(h, p + 'ffn_gate_inp.weight')
		bias = self.w(p + 'exp_probs_b.bias') if C.has(self.W, p + 'exp_probs_b.bias') \
			else None
		return route(logits, c.gating, c.n_expert_used, bias, c.n_group, c.topk_group,
			     c.group_score, c.norm_topk, c.routed_scale)

	def moe(self, il, h):
		top, weight = self.route(il, h)
		return self.with_shared_expert(il, h, self.experts(il, h, top, weight))


def route(logits, gating, k, bias=None, n_group=1, topk_group=1, group_score='max',
	  norm=False, scale=1.0):
	"""DeepSeek's router (see the head of this file).  logits (T, E) ->
	expert ids (T, k), weights (T, k)."""
	T, E = logits.shape
	scores = M.softmax(logits) if gating == 'softmax' else M.sigmoid(logits)
	choice = scores if bias is None else scores + bias[None, :]
	if n_group > 1 and topk_group < n_group:
		g = choice.reshape(T, n_group, E // n_group)
		if group_score == 'max':
			gs = g.max(axis=2)
		else:
			gs = np.sort(g, axis=2)[:, :, -2:].sum(axis=2)
		keep = np.zeros((T, n_group), dtype=bool)
		np.put_along_axis(keep, C.top_k(gs, topk_group), True, axis=1)
		choice = np.where(np.repeat(keep, E // n_group, axis=1), choice, 0.0)
	top = C.top_k(choice, k)
	w = np.take_along_axis(scores, top, axis=1)
	if norm:
		w = w / (np.sum(w, axis=1, keepdims=True) + 1e-20)
	return top, w * scale


# --- loaders ------------------------------------------------------------------------

def config(**kw):
	"""M.Config plus the deepseek2 fields."""
	return C.config(Model, (
		'q_lora_rank', 'kv_lora_rank', 'nope', 'rope_dim', 'v_head_dim', 'n_dense_lead',
		'gating', 'n_group', 'topk_group', 'group_score', 'norm_topk', 'routed_scale'), kw)


def expected(cfg, W):
	D, H, L, R, N, V = cfg.n_embd, cfg.n_head, cfg.kv_lora_rank, cfg.rope_dim, cfg.nope, \
		cfg.v_head_dim
	s = {'token_embd.weight': (cfg.n_vocab, D), 'output_norm.weight': (D,)}
	for i in range(cfg.n_layer):
		b = 'blk.%d.' % i
		if cfg.q_lora_rank:
			s[b + 'attn_q_a.weight'] = (cfg.q_lora_rank, D)
			s[b + 'attn_q_a_norm.weight'] = (cfg.q_lora_rank,)
			s[b + 'attn_q_b.weight'] = (H * (N + R), cfg.q_lora_rank)
		else:
			s[b + 'attn_q.weight'] = (H * (N + R), D)
		s.update({b + 'attn_kv_a_mqa.weight': (L + R, D), b + 'attn_kv_a_norm.weight': (L,),
			  b + 'attn_k_b.weight': (H, L, N), b + 'attn_v_b.weight': (H, V, L),
			  b + 'attn_output.weight': (D, H * V), b + 'attn_norm.weight': (D,),
			  b + 'ffn_norm.weight': (D,)})
		if i >= cfg.n_dense_lead:
			s[b + 'ffn_gate_inp.weight'] = (cfg.n_expert, D)
	return s


def load_gguf(r, path, dtype):
	import load
	k = C.kv(r, 'deepseek2')
	W = load.GGUFTensors(path, r, dtype)
	n_head = k('attention.head_count', required=True)
	R = k('rope.dimension_count', required=True)
	L = k('attention.kv_lora_rank', required=True)
	if W.has('blk.0.attn_kv_b.weight') and not W.has('blk.0.attn_k_b.weight'):
		raise C.LoadError('%s: attn_kv_b without attn_k_b / attn_v_b (a GGUF from before '
				  "llama.cpp's MLA split): not supported" % path)
	kl = k('attention.key_length_mla')
	if kl is None:
		raise C.LoadError('%s: missing key deepseek2.attention.key_length_mla' % path)
	if k('attention.key_length') not in (None, L + R):
		raise C.LoadError('%s: attention.key_length %s, expected kv_lora_rank + rope dims %d'
				  % (path, k('attention.key_length'), L + R))
	N, V = kl - R, k('attention.value_length_mla', required=True)
	scaling = k('rope.scaling.type', 'none')
	factor = k('rope.scaling.factor', 1.0) or 1.0
	if scaling not in ('none', 'yarn') or (scaling == 'none' and factor != 1.0):
		raise C.LoadError('%s: rope scaling %s is not supported for deepseek2' % (path, scaling))
	# llama.cpp: kq_scale = mscale^2 / sqrt(key_length_mla), mscale = 1 +
	# yarn_log_multiplier ln(factor); the rotation keeps magnitude 1
	mscale = 1.0
	if scaling == 'yarn' and factor > 1:
		mscale = 1.0 + k('rope.scaling.yarn_log_multiplier', 0.0) * math.log(factor)
	n_ctx = k('context_length', 0)
	rope = M.Rope(R, base=k('rope.freq_base', 10000.0), style='interleaved',
		      scaling=scaling, factor=factor,
		      n_ctx_orig=k('rope.scaling.original_context_length', n_ctx),
		      beta_fast=k('rope.scaling.yarn_beta_fast', 32.0),
		      beta_slow=k('rope.scaling.yarn_beta_slow', 1.0),
		      attn_factor=1.0 / C.yarn_mscale(factor) if scaling == 'yarn' else 1.0)
	gating = 'sigmoid' if k('expert_gating_func', 1) == 2 else 'softmax'
	n_group = k('expert_group_count', 1) or 1
	try:
		cfg = config(
			arch='deepseek2', n_vocab=W.info('token_embd.weight').ne[1],
			n_embd=k('embedding_length', required=True), n_layer=k('block_count', required=True),
			n_head=n_head, n_head_kv=n_head, head_dim=N + R,
			rms_eps=k('attention.layer_norm_rms_epsilon', required=True), rope=rope,
			n_expert=k('expert_count', required=True),
			n_expert_used=k('expert_used_count', required=True),
			attn_scale=mscale * mscale / math.sqrt(N + R),
			bos=r.kv.get('tokenizer.ggml.bos_token_id'), eos=C.eos_ids(r=r),
			q_lora_rank=k('attention.q_lora_rank', 0) or 0, kv_lora_rank=L, nope=N,
			rope_dim=R, v_head_dim=V, n_dense_lead=k('leading_dense_block_count', 0),
			gating=gating, n_group=n_group, topk_group=k('expert_group_used_count', n_group),
			# the group score GGUF cannot say: DeepSeek-V2 (softmax) ranks groups
			# by their best expert, V3 (sigmoid) by the sum of the best two
			group_score='max' if gating == 'softmax' else 'top2sum',
			norm_topk=bool(k('expert_weights_norm', False)),
			routed_scale=k('expert_weights_scale', 1.0) or 1.0)
	except ValueError as e:
		raise C.LoadError('%s: %s' % (path, e))
	C.check(W, path, expected(cfg, W))
	return cfg, W


def load_hf(c, d, dtype):
	import load
	W = load.HFTensors(d, dtype)
	try:
		n_head, L, R = c['num_attention_heads'], c['kv_lora_rank'], c['qk_rope_head_dim']
		N, V = c['qk_nope_head_dim'], c['v_head_dim']
		v3 = c['model_type'] == 'deepseek_v3'
		method = c.get('topk_method', 'noaux_tc' if v3 else 'greedy')
		rs = c.get('rope_scaling') or {}
		kind = rs.get('rope_type', rs.get('type', 'default'))
		scale = 1.0 / math.sqrt(N + R)
		kw = dict(n_dims=R, base=c.get('rope_theta', 10000.0), style='interleaved')
		if kind == 'yarn':
			f = rs['factor']
			ms, msa = rs.get('mscale', 1.0), rs.get('mscale_all_dim', 0.0)
			if msa:
				scale *= C.yarn_mscale(f, msa) ** 2
			rope = M.Rope(scaling='yarn', factor=f,
				      n_ctx_orig=rs.get('original_max_position_embeddings') or
				      c['max_position_embeddings'],
				      beta_fast=rs.get('beta_fast') or 32.0,
				      beta_slow=rs.get('beta_slow') or 1.0,
				      attn_factor=C.yarn_mscale(f, ms) / C.yarn_mscale(f, msa) /
				      C.yarn_mscale(f), **kw)
		elif kind == 'default':
			rope = M.Rope(**kw)
		else:
			raise C.LoadError('%s: rope_scaling %s is not supported for deepseek' % (d, kind))
		gating = c.get('scoring_func', 'sigmoid' if v3 else 'softmax')
		if method not in ('greedy', 'group_limited_greedy', 'noaux_tc'):
			raise C.LoadError('%s: topk_method %r is not supported' % (d, method))
		n_group = c.get('n_group') or 1
		if method == 'greedy':
			n_group = 1
		if c.get('moe_layer_freq', 1) != 1:
			raise C.LoadError('%s: moe_layer_freq %s is not supported' % (d, c['moe_layer_freq']))
		cfg = config(
			arch='deepseek2', n_vocab=c['vocab_size'], n_embd=c['hidden_size'],
			n_layer=c['num_hidden_layers'], n_head=n_head, n_head_kv=n_head, head_dim=N + R,
			rms_eps=c['rms_norm_eps'], rope=rope, n_expert=c['n_routed_experts'],
			n_expert_used=c['num_experts_per_tok'], attn_scale=scale,
			bos=c.get('bos_token_id'), eos=C.eos_ids(c=c),
			q_lora_rank=c.get('q_lora_rank') or 0, kv_lora_rank=L, nope=N, rope_dim=R,
			v_head_dim=V, n_dense_lead=c.get('first_k_dense_replace', 0), gating=gating,
			n_group=n_group, topk_group=c.get('topk_group') or n_group,
			group_score='top2sum' if method == 'noaux_tc' else 'max',
			norm_topk=bool(c.get('norm_topk_prob', False)),
			routed_scale=c.get('routed_scaling_factor', 1.0))
	except (KeyError, ValueError) as e:
		raise C.LoadError('%s: config.json: %s' % (d, e))
	E = cfg.n_expert
	m = {'token_embd.weight': ('model.embed_tokens.weight', 0),
	     'output_norm.weight': ('model.norm.weight', 0), 'output.weight': ('lm_head.weight', 0)}
	for i in range(cfg.n_layer):
		b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
		sa = h + 'self_attn.'
		for g, n in (('attn_norm', 'input_layernorm'), ('ffn_norm', 'post_attention_layernorm'),
			     ('attn_q', sa + 'q_proj'), ('attn_q_a', sa + 'q_a_proj'),
			     ('attn_q_a_norm', sa + 'q_a_layernorm'), ('attn_q_b', sa + 'q_b_proj'),
			     ('attn_kv_a_mqa', sa + 'kv_a_proj_with_mqa'),
			     ('attn_kv_a_norm', sa + 'kv_a_layernorm'), ('attn_output', sa + 'o_proj'),
			     ('ffn_gate', h + 'mlp.gate_proj'), ('ffn_up', h + 'mlp.up_proj'),
			     ('ffn_down', h + 'mlp.down_proj'), ('ffn_gate_inp', h + 'mlp.gate')):
			m[b + g + '.weight'] = ((n if n.startswith('model.') else h + n) + '.weight', 0)
		m[b + 'exp_probs_b.bias'] = (h + 'mlp.gate.e_score_correction_bias', 0)
		for g in ('gate', 'up', 'down'):
			m[b + 'ffn_%s_exps.weight' % g] = (h + 'mlp.experts.{e}.%s_proj.weight' % g, E)
			m[b + 'ffn_%s_shexp.weight' % g] = (h + 'mlp.shared_experts.%s_proj.weight' % g, 0)
	C.hf_map(W, m)
	for i in range(cfg.n_layer):
		kvb = 'model.layers.%d.self_attn.kv_b_proj.weight' % i
		if not W.hf_has(kvb):
			raise C.LoadError('%s: missing tensor %s' % (d, kvb))
		x = W.read(kvb)
		if x.shape != (n_head * (N + V), L):
			raise C.LoadError('%s: %s has shape %s, expected %s'
					  % (d, kvb, x.shape, (n_head * (N + V), L)))
		x = x.reshape(n_head, N + V, L)
		C.derive(W, 'blk.%d.attn_k_b.weight' % i, x[:, :N, :].transpose(0, 2, 1))
		C.derive(W, 'blk.%d.attn_v_b.weight' % i, x[:, N:, :])
	if not W.has('output.weight') and not c.get('tie_word_embeddings', False):
		raise C.LoadError('%s: no lm_head.weight and tie_word_embeddings is false' % d)
	C.check(W, d, expected(cfg, W))
	return cfg, W
