# tests/ref/arch_gptoss.py — gpt-oss (GGUF architecture "gpt-oss"), written
# from transformers' modeling_gpt_oss.py and its MXFP4 checkpoint format,
# and llama.cpp's GGUF names.
#
#   norms      RMSNorm: attn_norm before attention, post_attention_norm
#              (HF post_attention_layernorm) before the MoE
#   attention  q/k/v/o with biases, RoPE rotate-half pairs with YaRN, scale
#              1/sqrt(head_dim), a learned sink logit per head in the softmax
#              denominator (attends to nothing); layers alternate sliding-
#              window (even layers: the current token and window - 1 before
#              it) and full attention
#   router     logits = W x + b; top-k logits, softmax over those k
#   experts    g = Wg x + bg, u = Wu x + bu (HF: one gate_up_proj with gate
#              and up interleaved, row 2j gate, 2j + 1 up); g = min(g, limit),
#              u = clamp(u, -limit, limit); out = Wd ((u + 1) g sigmoid(alpha
#              g)) + bd, alpha 1.702, limit swiglu_limit (7)
#   MXFP4      experts stored as E2M1 codes with an E8M0 exponent per 32:
#              GGUF type 39 (quants.py), HF *_blocks (codes 2m, 2m + 1 in the
#              low, high nibble of byte m) and *_scales (exponent + 127)
#   YaRN       HF's truncate = false: the ramp's ends are not rounded to
#              whole pair indices (GGUF has no key for it: taken as the
#              published model defines it; llama.cpp rounds them)
import numpy as np

import arch_common as C
import model as M
import quants

ALPHA = 1.702


class Model(C.Base):
	def forward(self, tokens):
		c = self.cfg
		tokens, pos = self.start(tokens)
		x = self.w('token_embd.weight')[tokens]
		for il in range(c.n_layer):
			p = 'blk.%d.' % il
			h = M.rms_norm(x, self.w(p + 'attn_norm.weight'), c.rms_eps)
			x = x + self.attention(il, h, pos)
			h = M.rms_norm(x, self.w(p + 'post_attention_norm.weight'), c.rms_eps)
			x = x + self.moe(il, h)
		self.n_past += tokens.size
		return self.logits(M.rms_norm(x, self.w('output_norm.weight'), c.rms_eps))

	def attention(self, il, h, pos):
		c = self.cfg
		return super().attention(il, h, pos, sinks=self.w('blk.%d.attn_sinks.weight' % il),
					 window=c.sliding_window if c.sliding[il] else 0)

	def moe(self, il, h):
		c = self.cfg
		p = 'blk.%d.' % il
		top, weight = C.top_k_softmax(self.linear(h, p + 'ffn_gate_inp'), c.n_expert_used)
		bg, bu, bd = (self.w(p + 'ffn_%s_exps.bias' % n) for n in ('gate', 'up', 'down'))

		def expert(x, e, rows):
			g = self.matmul(x, p + 'ffn_gate_exps.weight', e, rows, p + 'ffn_input') + bg[e]
			u = self.matmul(x, p + 'ffn_up_exps.weight', e, rows, p + 'ffn_input') + bu[e]
			a = clamped_swiglu(g, u, c.swiglu_limit)
			return self.matmul(a, p + 'ffn_down_exps.weight', e, rows) + bd[e]
		return self.experts(il, h, top, weight, expert)


def clamped_swiglu(g, u, limit, alpha=ALPHA):
	"""gpt-oss's gated unit: (clamp(u, -limit, limit) + 1) * g' sigmoid(alpha g'),
	g' = min(g, limit)."""
	g = np.minimum(g, limit)
	u = np.clip(u, -limit, limit)
	return (u + 1) * g * M.sigmoid(alpha * g)


def mxfp4_hf(blocks, scales):
	"""HF MXFP4 tensors -> values: blocks (..., G, 16) uint8, scales (..., G)
	uint8 -> (..., G * 32); byte m of a block holds elements 2m (low
	nibble) and 2m + 1 (high nibble), the block's scale is 2^(scale - 127)."""
	b = np.asarray(blocks, dtype=np.uint8)
	codes = np.stack([b & 0xF, b >> 4], axis=-1).reshape(b.shape[:-1] + (32,))
	v = quants.FP4_E2M1[codes] * np.ldexp(1.0, np.asarray(scales, dtype=np.int32) - 127)[..., None]
	return v.reshape(b.shape[:-2] + (b.shape[-2] * 32,))


# --- loaders ------------------------------------------------------------------------

def config(**kw):
	return C.config(Model, ('sliding_window', 'sliding', 'swiglu_limit'), kw)


def expected(cfg):
	D, E = cfg.n_embd, cfg.n_expert
	s = {'token_embd.weight': (cfg.n_vocab, D), 'output_norm.weight': (D,)}
	for i in range(cfg.n_layer):
		b = 'blk.%d.' % i
		s.update(C.attn_shapes(cfg, b, bias=True))
		s.update({b + 'attn_norm.weight': (D,), b + 'post_attention_norm.weight': (D,),
			  b + 'attn_sinks.weight': (cfg.n_head,), b + 'ffn_gate_inp.weight': (E, D),
			  b + 'ffn_gate_inp.bias': (E,), b + 'ffn_down_exps.bias': (E, D)})
	return s


def load_gguf(r, path, dtype):
	k, W, n_embd, n_head = C.gguf_open(r, path, dtype, 'gpt-oss')
	hd = k('attention.key_length', n_embd // n_head)
	n_layer = k('block_count', required=True)
	scaling = k('rope.scaling.type', 'none')
	factor = k('rope.scaling.factor', 1.0) or 1.0
	if scaling not in ('none', 'yarn'):
		raise C.LoadError('%s: rope scaling %s is not supported for gpt-oss' % (path, scaling))
	rope = M.Rope(hd, base=k('rope.freq_base', 10000.0), style='neox',
		      scaling=scaling if factor != 1.0 else 'none', factor=factor,
		      n_ctx_orig=k('rope.scaling.original_context_length', k('context_length', 0)),
		      beta_fast=k('rope.scaling.yarn_beta_fast', 32.0),
		      beta_slow=k('rope.scaling.yarn_beta_slow', 1.0))
	rope.truncate = False
	sw = k('attention.sliding_window', 0) or 0
	try:
		cfg = config(
			arch='gpt-oss', n_vocab=W.info('token_embd.weight').ne[1], n_embd=n_embd,
			n_layer=n_layer, n_head=n_head, n_head_kv=k('attention.head_count_kv', n_head),
			head_dim=hd, rms_eps=k('attention.layer_norm_rms_epsilon', required=True),
			rope=rope, n_expert=k('expert_count', required=True),
			n_expert_used=k('expert_used_count', required=True),
			bos=r.kv.get('tokenizer.ggml.bos_token_id'), eos=C.eos_ids(r=r),
			# llama.cpp's pattern for gpt-oss: even layers slide
			sliding_window=sw, sliding=[sw > 0 and i % 2 == 0 for i in range(n_layer)],
			swiglu_limit=7.0)
	except ValueError as e:
		raise C.LoadError('%s: %s' % (path, e))
	C.check(W, path, expected(cfg))
	return cfg, W


def load_hf(c, d, dtype):
	import load
	W = load.HFTensors(d, dtype)
	try:
		n_layer, n_embd, n_head = c['num_hidden_layers'], c['hidden_size'], \
			c['num_attention_heads']
		hd = c.get('head_dim') or n_embd // n_head
		rs = c.get('rope_scaling') or {}
		kind = rs.get('rope_type', rs.get('type', 'default'))
		kw = dict(n_dims=hd, base=c.get('rope_theta', 10000.0), style='neox')
		if kind == 'yarn':
			f = rs['factor']
			att = rs.get('attention_factor')
			rope = M.Rope(scaling='yarn', factor=f,
				      n_ctx_orig=rs.get('original_max_position_embeddings') or
				      c['max_position_embeddings'],
				      beta_fast=rs.get('beta_fast') or 32.0,
				      beta_slow=rs.get('beta_slow') or 1.0,
				      attn_factor=1.0 if att is None else att / C.yarn_mscale(f), **kw)
			rope.truncate = rs.get('truncate', True)
		elif kind == 'default':
			rope = M.Rope(**kw)
		else:
			raise C.LoadError('%s: rope_scaling %s is not supported for gpt-oss' % (d, kind))
		types = c.get('layer_types') or ['sliding_attention' if i % 2 == 0 else
						 'full_attention' for i in range(n_layer)]
		sw = c.get('sliding_window') or 0
		cfg = config(
			arch='gpt-oss', n_vocab=c['vocab_size'], n_embd=n_embd, n_layer=n_layer,
			n_head=n_head, n_head_kv=c.get('num_key_value_heads') or n_head, head_dim=hd,
			rms_eps=c['rms_norm_eps'], rope=rope, n_expert=c['num_local_experts'],
			n_expert_used=c['num_experts_per_tok'], bos=c.get('bos_token_id'),
			eos=C.eos_ids(c=c), sliding_window=sw,
			sliding=[sw > 0 and t == 'sliding_attention' for t in types],
			swiglu_limit=c.get('swiglu_limit', 7.0))
	except (KeyError, ValueError) as e:
		raise C.LoadError('%s: config.json: %s' % (d, e))
	m = {'token_embd.weight': ('model.embed_tokens.weight', 0),
	     'output_norm.weight': ('model.norm.weight', 0), 'output.weight': ('lm_head.weight', 0)}
	F = None
	for i in range(n_layer):
		b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
		m[b + 'attn_norm.weight'] = (h + 'input_layernorm.weight', 0)
		m[b + 'post_attention_norm.weight'] = (h + 'post_attention_layernorm.weight', 0)
		for g, n in (('q', 'q'), ('k', 'k'), ('v', 'v'), ('output', 'o')):
			for s in ('weight', 'bias'):
				m[b + 'attn_%s.%s' % (g, s)] = (h + 'self_attn.%s_proj.%s' % (n, s), 0)
		m[b + 'attn_sinks.weight'] = (h + 'self_attn.sinks', 0)
		m[b + 'ffn_gate_inp.weight'] = (h + 'mlp.router.weight', 0)
		m[b + 'ffn_gate_inp.bias'] = (h + 'mlp.router.bias', 0)
	C.hf_map(W, m)
	for i in range(n_layer):
		b, x = 'blk.%d.' % i, 'model.layers.%d.mlp.experts.' % i
		try:
			if W.hf_has(x + 'gate_up_proj_blocks'):
				gu = mxfp4_hf(W.read(x + 'gate_up_proj_blocks'),
					      W.read(x + 'gate_up_proj_scales'))          # (E, 2F, D)
				down = mxfp4_hf(W.read(x + 'down_proj_blocks'),
						W.read(x + 'down_proj_scales'))           # (E, D, F)
				gate, up = gu[:, 0::2, :], gu[:, 1::2, :]
				# stored MXFP4: products pair with 8-bit activations (act-quant)
				for n in ('gate', 'up', 'down'):
					W.stored_type[b + 'ffn_%s_exps.weight' % n] = 39   # MXFP4 (quants.TYPES)
			else:
				gu = W.read(x + 'gate_up_proj')                            # (E, D, 2F)
				gate = gu[:, :, 0::2].transpose(0, 2, 1)
				up = gu[:, :, 1::2].transpose(0, 2, 1)
				down = W.read(x + 'down_proj').transpose(0, 2, 1)       # (E, F, D) -> (E, D, F)
			gub = W.read(x + 'gate_up_proj_bias')
			downb = W.read(x + 'down_proj_bias')
		except KeyError as e:
			raise C.LoadError('%s: missing tensor %s' % (d, e))
		E, F = gate.shape[0], gate.shape[1]
		if gate.shape != (cfg.n_expert, F, n_embd) or down.shape != (E, n_embd, F) or \
				gub.shape != (E, 2 * F):
			raise C.LoadError('%s: layer %d experts: shapes %s %s %s do not fit %d experts '
					  'for hidden_size %d' % (d, i, gate.shape, down.shape, gub.shape,
								  cfg.n_expert, n_embd))
		C.derive(W, b + 'ffn_gate_exps.weight', gate)
		C.derive(W, b + 'ffn_up_exps.weight', up)
		C.derive(W, b + 'ffn_down_exps.weight', down)
		C.derive(W, b + 'ffn_gate_exps.bias', gub[:, 0::2])
		C.derive(W, b + 'ffn_up_exps.bias', gub[:, 1::2])
		C.derive(W, b + 'ffn_down_exps.bias', downb)
	if not W.has('output.weight') and not c.get('tie_word_embeddings', False):
		raise C.LoadError('%s: no lm_head.weight and tie_word_embeddings is false' % d)
	C.check(W, d, expected(cfg))
	return cfg, W
