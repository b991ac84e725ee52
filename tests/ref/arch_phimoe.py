# tests/ref/arch_phimoe.py — Phi-3.5-MoE (GGUF architecture "phimoe"),
# written from transformers' modeling_phimoe.py (the published model
# definition) and llama.cpp's GGUF names.
#
#   norms      LayerNorm with weight and bias (nn.LayerNorm, eps =
#              config rms_norm_eps) before attention, before the MoE and at
#              the end — not RMSNorm, whatever some GGUF runners do
#   attention  q/k/v/o with biases; RoPE rotate-half pairs scaled by LongRoPE:
#              pair i turns at base^(-2i/d) / factor_i, with the short
#              factors while the sequence is within the original context
#              (HF: seq_len = last position + 1 <= original_max_position_
#              embeddings, decided for every forward call), the long ones
#              beyond; cos and sin times mscale (config short_mscale /
#              long_mscale; GGUF rope.scaling.attn_factor for both)
#   router     sparsemixer at inference (modeling_phimoe.py's sparsemixer
#              with training off), exactly top-2:
#                first  = argmax(s); keep the experts with
#                         (s_first - s_i) / max(|s_i|, s_first) <= 2 eps,
#                         w1 = softmax over the kept ones, at first
#                second = argmax of s without first; keep with the same rule
#                         around s_second (first stays out), w2 = softmax
#                         over the kept ones, at second
#              eps = router_jitter_noise (0.01 in the published config; GGUF
#              does not carry it: 0.01)
#   experts    Mixtral-style SwiGLU w1 (gate), w3 (up), w2 (down)
#   output     lm_head with a bias
import math

import numpy as np

import arch_common as C
import model as M


class LongRope:
	"""LongRoPE (Ding et al. 2024) as Phi-3 uses it: per-pair divisors of
	the frequencies, short or long set, cos/sin times mscale."""

	def __init__(self, n_dims, base, short, long, orig_ctx, short_mscale, long_mscale):
		self.n_dims = n_dims
		self.base = float(base)
		self.short = np.asarray(short, dtype=np.float64)
		self.long = np.asarray(long, dtype=np.float64)
		self.orig_ctx = int(orig_ctx)
		self.mscale = (float(short_mscale), float(long_mscale))
		if self.short.shape != (n_dims // 2,) or self.long.shape != (n_dims // 2,):
			raise ValueError('LongRoPE factors: %d and %d values, expected %d'
					 % (self.short.size, self.long.size, n_dims // 2))

	def apply(self, x, pos, seq_len):
		use_long = seq_len > self.orig_ctx
		f = self.long if use_long else self.short
		m = self.mscale[1 if use_long else 0]
		i = np.arange(self.n_dims // 2, dtype=np.float64)
		theta = np.asarray(pos, dtype=np.float64)[:, None] * \
			(self.base ** (-2.0 * i / self.n_dims) / f)[None, :]
		cos = (np.cos(theta) * m)[:, None, :].astype(x.dtype)
		sin = (np.sin(theta) * m)[:, None, :].astype(x.dtype)
		n = self.n_dims
		y = x.copy()
		a, b = x[..., :n // 2], x[..., n // 2:n]
		y[..., :n // 2] = a * cos - b * sin
		y[..., n // 2:n] = a * sin + b * cos
		return y


def sparsemixer(scores, eps):
	"""Phi-3.5-MoE's top-2 router at inference.  scores (T, E) -> expert
	ids (T, 2), weights (T, 2)."""
	T = scores.shape[0]
	rows = np.arange(T)
	top, w = np.empty((T, 2), dtype=np.int64), np.empty((T, 2), dtype=scores.dtype)
	masked = scores.copy()
	for k in range(2):
		best = np.argmax(masked, axis=1)                   # first of equal maxima
		thr = masked[rows, best][:, None]
		factor = np.maximum(np.abs(scores), thr)
		out = (thr - scores) / factor > 2 * eps
		g = M.softmax(np.where(out, -np.inf, masked))
		top[:, k], w[:, k] = best, g[rows, best]
		masked[rows, best] = -np.inf
	return top, w


class Model(C.Base):
	def forward(self, tokens):
		c = self.cfg
		tokens, pos = self.start(tokens)
		x = self.w('token_embd.weight')[tokens]
		for il in range(c.n_layer):
			p = 'blk.%d.' % il
			h = self.norm(x, p + 'attn_norm')
			x = x + self.attention(il, h, pos)
			h = self.norm(x, p + 'ffn_norm')
			x = x + self.moe(il, h)
		self.n_past += tokens.size
		h = self.norm(x, 'output_norm')
		return self.logits(h) + self.w('output.bias')

	def norm(self, x, name):
		return C.layer_norm(x, self.w(name + '.weight'), self.w(name + '.bias'), self.cfg.rms_eps)

	def attention(self, il, h, pos):
		c = self.cfg
		seq_len = int(pos[-1]) + 1        # LongRope picks its factors by it
		return super().attention(il, h, pos, rope=lambda x: c.rope.apply(x, pos, seq_len),
					 window=c.sliding_window)

	def moe(self, il, h):
		c = self.cfg
		p = 'blk.%d.' % il
		top, weight = sparsemixer(self.matmul(h, p + 'ffn_gate_inp.weight'), c.jitter_eps)
		return self.experts(il, h, top, weight)


def config(**kw):
	return C.config(Model, ('jitter_eps', 'sliding_window'), kw)


def expected(cfg):
	D, E = cfg.n_embd, cfg.n_expert
	s = {'token_embd.weight': (cfg.n_vocab, D), 'output_norm.weight': (D,),
	     'output_norm.bias': (D,), 'output.bias': (cfg.n_vocab,)}
	for i in range(cfg.n_layer):
		b = 'blk.%d.' % i
		for n in ('attn_norm', 'ffn_norm'):
			s[b + n + '.weight'] = s[b + n + '.bias'] = (D,)
		s.update(C.attn_shapes(cfg, b, bias=True))
		s[b + 'ffn_gate_inp.weight'] = (E, D)
	return s


def load_gguf(r, path, dtype):
	k, W, n_embd, n_head = C.gguf_open(r, path, dtype, 'phimoe')
	hd = n_embd // n_head
	n_dims = k('rope.dimension_count', hd)
	if n_dims != hd:
		raise C.LoadError('%s: partial rotary dims are not supported for phimoe' % path)
	base = k('rope.freq_base', 10000.0)
	ms = k('rope.scaling.attn_factor', 1.0)
	if W.has('rope_factors_short.weight'):
		short = W.get('rope_factors_short.weight')
		long = W.get('rope_factors_long.weight') if W.has('rope_factors_long.weight') \
			else short
	else:
		short = long = np.ones(hd // 2)
	try:
		rope = LongRope(hd, base, short, long,
				k('rope.scaling.original_context_length', k('context_length', 0)), ms, ms)
		cfg = config(
			arch='phimoe', n_vocab=W.info('token_embd.weight').ne[1], n_embd=n_embd,
			n_layer=k('block_count', required=True), n_head=n_head,
			n_head_kv=k('attention.head_count_kv', n_head), head_dim=hd,
			rms_eps=k('attention.layer_norm_rms_epsilon',
				  k('attention.layer_norm_epsilon', 1e-5)),
			rope=rope, n_expert=k('expert_count', required=True),
			n_expert_used=k('expert_used_count', required=True),
			bos=r.kv.get('tokenizer.ggml.bos_token_id'), eos=C.eos_ids(r=r),
			jitter_eps=0.01, sliding_window=k('attention.sliding_window', 0) or 0)
	except ValueError as e:
		raise C.LoadError('%s: %s' % (path, e))
	if cfg.n_expert_used != 2:
		raise C.LoadError('%s: phimoe routes to exactly 2 experts, not %d'
				  % (path, cfg.n_expert_used))
	C.check(W, path, expected(cfg))
	return cfg, W


def load_hf(c, d, dtype):
	import load
	W = load.HFTensors(d, dtype)
	try:
		n_embd, n_head = c['hidden_size'], c['num_attention_heads']
		hd = n_embd // n_head
		rs = c.get('rope_scaling')
		base = c.get('rope_theta', 10000.0)
		if rs:
			kind = rs.get('rope_type', rs.get('type'))
			if kind not in ('longrope', 'su'):
				raise C.LoadError('%s: rope_scaling %s is not supported for phimoe' % (d, kind))
			orig = rs.get('original_max_position_embeddings') or \
				c['original_max_position_embeddings']
			# modeling_rope_utils' longrope attention factor, used when the
			# config has no short/long mscale
			att = rs.get('attention_factor')
			if att is None:
				f = c['max_position_embeddings'] / orig
				att = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))
			rope = LongRope(hd, base, rs['short_factor'], rs['long_factor'], orig,
					rs.get('short_mscale') or att, rs.get('long_mscale') or att)
		else:
			one = np.ones(hd // 2)
			rope = LongRope(hd, base, one, one, c['max_position_embeddings'], 1.0, 1.0)
		cfg = config(
			arch='phimoe', n_vocab=c['vocab_size'], n_embd=n_embd,
			n_layer=c['num_hidden_layers'], n_head=n_head,
			n_head_kv=c.get('num_key_value_heads') or n_head, head_dim=hd,
			rms_eps=c['rms_norm_eps'], rope=rope, n_expert=c['num_local_experts'],
			n_expert_used=c['num_experts_per_tok'], bos=c.get('bos_token_id'),
			eos=C.eos_ids(c=c), jitter_eps=c.get('router_jitter_noise', 0.01),
			sliding_window=c.get('sliding_window') or 0)
	except (KeyError, ValueError) as e:
		raise C.LoadError('%s: config.json: %s' % (d, e))
	if cfg.n_expert_used != 2:
		raise C.LoadError('%s: phimoe routes to exactly 2 experts, not %d' % (d, cfg.n_expert_used))
	E = cfg.n_expert
	m = {'token_embd.weight': ('model.embed_tokens.weight', 0)}
	for s in ('weight', 'bias'):
		m['output_norm.' + s] = ('model.norm.' + s, 0)
		m['output.' + s] = ('lm_head.' + s, 0)
	for i in range(cfg.n_layer):
		b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
		for s in ('weight', 'bias'):
			m[b + 'attn_norm.' + s] = (h + 'input_layernorm.' + s, 0)
			m[b + 'ffn_norm.' + s] = (h + 'post_attention_layernorm.' + s, 0)
			for g, n in (('q', 'q'), ('k', 'k'), ('v', 'v'), ('output', 'o')):
				m[b + 'attn_%s.%s' % (g, s)] = (h + 'self_attn.%s_proj.%s' % (n, s), 0)
		x = h + 'block_sparse_moe.'
		m[b + 'ffn_gate_inp.weight'] = (x + 'gate.weight', 0)
		for g, n in (('gate', 'w1'), ('up', 'w3'), ('down', 'w2')):
			m[b + 'ffn_%s_exps.weight' % g] = (x + 'experts.{e}.%s.weight' % n, E)
	C.hf_map(W, m)
	if not W.has('output.weight') and not c.get('tie_word_embeddings', False):
		raise C.LoadError('%s: no lm_head.weight and tie_word_embeddings is false' % d)
	C.check(W, d, expected(cfg))
	return cfg, W
