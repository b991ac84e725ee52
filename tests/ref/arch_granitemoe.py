# tests/ref/arch_granitemoe.py — IBM Granite MoE (GGUF architecture
# "granitemoe"; HF GraniteMoeForCausalLM and GraniteMoeSharedForCausalLM),
# written from transformers' modeling_granitemoe.py / modeling_granitemoeshared.py
# and llama.cpp's GGUF names.
#
# Llama-shaped (RMSNorm, RoPE, GQA, SwiGLU experts) with four multipliers:
#   embedding  x0 = embed(tokens) * embedding_multiplier   (GGUF embedding_scale)
#   attention  scores = q . k * attention_multiplier       (attention.scale),
#              instead of 1/sqrt(head_dim)
#   residual   x = x + residual_multiplier * block(x)      (residual_scale), for
#              the attention and the MoE block
#   logits     logits = lm_head(h) / logits_scaling         (logit_scale)
# router: top-k of the router logits, softmax over those k.  HF stacks the
# experts: input_linear (E, 2F, D) = gate rows then up rows, output_linear
# (E, D, F).  The shared variant adds an ungated SwiGLU (shared_mlp, its
# input_linear likewise gate ++ up) to the MoE output before the residual
# multiplier.  GGUF q/k rows are in llama.cpp's permuted order (interleaved
# RoPE pairs), HF's in rotate-half order, as for llama.

import arch_common as C
import model as M


class Model(C.Base):
	def forward(self, tokens):
		c = self.cfg
		tokens, pos = self.start(tokens)
		x = self.w('token_embd.weight')[tokens] * c.embedding_scale
		for il in range(c.n_layer):
			p = 'blk.%d.' % il
			h = M.rms_norm(x, self.w(p + 'attn_norm.weight'), c.rms_eps)
			x = x + c.residual_scale * self.attention(il, h, pos)
			h = M.rms_norm(x, self.w(p + 'ffn_norm.weight'), c.rms_eps)
			x = x + c.residual_scale * self.ffn(il, h)
		self.n_past += tokens.size
		h = M.rms_norm(x, self.w('output_norm.weight'), c.rms_eps)
		return self.logits(h) / c.logit_scale

	def ffn(self, il, h):
		c = self.cfg
		p = 'blk.%d.' % il
		top, weight = C.top_k_softmax(self.matmul(h, p + 'ffn_gate_inp.weight'), c.n_expert_used)
		return self.with_shared_expert(il, h, self.experts(il, h, top, weight))


def config(**kw):
	return C.config(Model, ('embedding_scale', 'residual_scale', 'logit_scale'), kw)


def expected(cfg, shared):
	D, E = cfg.n_embd, cfg.n_expert
	s = {'token_embd.weight': (cfg.n_vocab, D), 'output_norm.weight': (D,)}
	for i in range(cfg.n_layer):
		b = 'blk.%d.' % i
		s.update(C.attn_shapes(cfg, b, bias=False))
		s.update({b + 'attn_norm.weight': (D,), b + 'ffn_norm.weight': (D,),
			  b + 'ffn_gate_inp.weight': (E, D)})
		if shared:
			s[b + 'ffn_up_shexp.weight'] = (shared, D)
			s[b + 'ffn_gate_shexp.weight'] = (shared, D)
			s[b + 'ffn_down_shexp.weight'] = (D, shared)
	return s


def load_gguf(r, path, dtype):
	k, W, n_embd, n_head = C.gguf_open(r, path, dtype, 'granitemoe')
	hd = n_embd // n_head
	scaling = k('rope.scaling.type', 'none')
	if scaling not in ('none', 'linear') or (k('rope.scaling.factor', 1.0) or 1.0) != 1.0:
		raise C.LoadError('%s: rope scaling is not supported for granitemoe' % path)
	try:
		cfg = config(
			arch='granitemoe', n_vocab=W.info('token_embd.weight').ne[1], n_embd=n_embd,
			n_layer=k('block_count', required=True), n_head=n_head,
			n_head_kv=k('attention.head_count_kv', n_head), head_dim=hd,
			rms_eps=k('attention.layer_norm_rms_epsilon', required=True),
			rope=M.Rope(k('rope.dimension_count', hd), base=k('rope.freq_base', 10000.0),
				    style='interleaved'),
			n_expert=k('expert_count', required=True),
			n_expert_used=k('expert_used_count', required=True),
			attn_scale=k('attention.scale', 0.0) or None,
			bos=r.kv.get('tokenizer.ggml.bos_token_id'), eos=C.eos_ids(r=r),
			embedding_scale=k('embedding_scale', 1.0), residual_scale=k('residual_scale', 1.0),
			logit_scale=k('logit_scale', 1.0))
	except ValueError as e:
		raise C.LoadError('%s: %s' % (path, e))
	shared = W.info('blk.0.ffn_up_shexp.weight').ne[1] if W.has('blk.0.ffn_up_shexp.weight') \
		else 0
	C.check(W, path, expected(cfg, shared))
	return cfg, W


def load_hf(c, d, dtype):
	import load
	W = load.HFTensors(d, dtype)
	try:
		n_embd, n_head = c['hidden_size'], c['num_attention_heads']
		hd = n_embd // n_head
		if c.get('rope_scaling'):
			raise C.LoadError('%s: rope_scaling is not supported for granitemoe' % d)
		cfg = config(
			arch='granitemoe', n_vocab=c['vocab_size'], n_embd=n_embd,
			n_layer=c['num_hidden_layers'], n_head=n_head,
			n_head_kv=c.get('num_key_value_heads') or n_head, head_dim=hd,
			rms_eps=c['rms_norm_eps'],
			rope=M.Rope(hd, base=c.get('rope_theta', 10000.0), style='neox'),
			n_expert=c['num_local_experts'], n_expert_used=c['num_experts_per_tok'],
			attn_scale=c.get('attention_multiplier', 1.0),
			bos=c.get('bos_token_id'), eos=C.eos_ids(c=c),
			embedding_scale=c.get('embedding_multiplier', 1.0),
			residual_scale=c.get('residual_multiplier', 1.0),
			logit_scale=c.get('logits_scaling', 1.0))
	except (KeyError, ValueError) as e:
		raise C.LoadError('%s: config.json: %s' % (d, e))
	m = {'token_embd.weight': ('model.embed_tokens.weight', 0),
	     'output_norm.weight': ('model.norm.weight', 0), 'output.weight': ('lm_head.weight', 0)}
	for i in range(cfg.n_layer):
		b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
		m[b + 'attn_norm.weight'] = (h + 'input_layernorm.weight', 0)
		m[b + 'ffn_norm.weight'] = (h + 'post_attention_layernorm.weight', 0)
		for g, n in (('q', 'q'), ('k', 'k'), ('v', 'v'), ('output', 'o')):
			m[b + 'attn_%s.weight' % g] = (h + 'self_attn.%s_proj.weight' % n, 0)
		m[b + 'ffn_gate_inp.weight'] = (h + 'block_sparse_moe.router.layer.weight', 0)
	C.hf_map(W, m)
	shared = c.get('shared_intermediate_size') or 0
	for i in range(cfg.n_layer):
		b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
		try:
			gu = W.read(h + 'block_sparse_moe.input_linear.weight')         # (E, 2F, D)
			down = W.read(h + 'block_sparse_moe.output_linear.weight')      # (E, D, F)
		except KeyError as e:
			raise C.LoadError('%s: missing tensor %s' % (d, e))
		F = gu.shape[1] // 2
		if gu.shape != (cfg.n_expert, 2 * F, n_embd) or down.shape != (cfg.n_expert, n_embd, F):
			raise C.LoadError('%s: layer %d experts: shapes %s and %s do not fit'
					  % (d, i, gu.shape, down.shape))
		C.derive(W, b + 'ffn_gate_exps.weight', gu[:, :F])
		C.derive(W, b + 'ffn_up_exps.weight', gu[:, F:])
		C.derive(W, b + 'ffn_down_exps.weight', down)
		if shared:
			try:
				s = W.read(h + 'shared_mlp.input_linear.weight')           # (2S, D)
				C.derive(W, b + 'ffn_gate_shexp.weight', s[:shared])
				C.derive(W, b + 'ffn_up_shexp.weight', s[shared:])
				C.derive(W, b + 'ffn_down_shexp.weight',
					 W.read(h + 'shared_mlp.output_linear.weight'))
			except KeyError as e:
				raise C.LoadError('%s: missing tensor %s' % (d, e))
	if not W.has('output.weight') and not c.get('tie_word_embeddings', False):
		raise C.LoadError('%s: no lm_head.weight and tie_word_embeddings is false' % d)
	C.check(W, d, expected(cfg, shared))
	return cfg, W
