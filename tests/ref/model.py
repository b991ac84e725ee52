# tests/ref/model.py — the reference forward pass: a decoder-only transformer
# written to be read next to the papers, not to be fast.
#
# One code path serves every architecture the engine supports; the
# differences are a handful of switches in Config:
#
#   llama     RMSNorm, RoPE, grouped-query attention, SwiGLU FFN
#   mixtral   llama with a mixture of experts: softmax over all router
#             logits, top-k, the k weights renormalised to sum to 1
#   qwen2     llama + biases on the q/k/v projections, NeoX RoPE
#   qwen2moe  qwen2 + MoE without renormalisation + a shared expert whose
#             output is scaled by sigmoid(w . x)
#   qwen3     RMSNorm of every q and k head before RoPE, no biases
#   qwen3moe  qwen3 + MoE with renormalisation
#   olmoe     RMSNorm of the whole q and k projections, MoE without
#             renormalisation
#
# as llama.cpp builds them (src/models/*.cpp) and HF transformers defines
# them.  Weights are numpy arrays in (out, in) orientation, so a projection
# is x @ W.T.  Activations are (tokens, features).
#
# The model keeps a plain KV cache (the keys after RoPE and the values of
# every position seen so far) so greedy decoding is linear; forward() of a
# whole sequence at once and token by token give the same numbers, which the
# self-test checks.
#
# Emulation (Model's `emulate`, ref.py --emulate; off by default): the
# engine's specified numeric recipe, which a quantised-weight engine follows
# as llama.cpp's matrix products do, can be modelled on top of the exact
# arithmetic:
#   act-quant  the input row of every product with a quantised weight is
#              first rounded to the weight type's 8-bit activation format
#              (actquant.py), then multiplied in float64 as before
#   kv-f16     keys (after RoPE) and values are rounded to float16 as they
#              enter the cache; attention reads the rounded values
#   act-bf16   the input row of every product with a BF16 weight is first
#              rounded to bfloat16 (actquant.bf16_values), as the engine's
#              avx512bf16 level does for vdpbf16ps
# See tests/ref/README for why.
import math

import numpy as np

import actquant
import quants

EMULATIONS = ('act-quant', 'kv-f16', 'act-bf16')


class Rope:
	"""Rotary position embedding (Su et al., "RoFormer", 2021).

	Pair i of a head's first n_dims dimensions is rotated by the angle
	pos * base^(-2i / n_dims).  Which dimensions form pair i depends on how
	the checkpoint orders its q/k rows:

	  'interleaved'  (x[2i], x[2i+1])         llama.cpp's "normal" mode, used
	                                          on GGUF llama, whose q/k rows the
	                                          converter permuted into this order
	  'neox'         (x[i], x[i + n_dims/2])  HF's rotate_half; llama.cpp's
	                                          NEOX mode (qwen*, olmoe)

	Scaling (llama.cpp's ggml_rope_ext / HF's modeling_rope_utils):
	  'linear'  positions divided by factor
	  'yarn'    YaRN (Peng et al. 2023): per pair, a ramp between the
	            interpolated angle (pos / factor) and the original one,
	            by how many turns the pair makes over the original context;
	            cos and sin scaled by mscale = 1 + 0.1 ln(factor).  The
	            ramp's ends are whole pair indices (floor / ceil) unless
	            truncate is false (HF's rope_scaling.truncate, gpt-oss)."""

	def __init__(self, n_dims, base=10000.0, style='neox', scaling='none', factor=1.0,
		     n_ctx_orig=0, beta_fast=32.0, beta_slow=1.0, attn_factor=1.0):
		if n_dims % 2:
			raise ValueError('rope: odd dimension count %d' % n_dims)
		if style not in ('interleaved', 'neox'):
			raise ValueError('rope: unknown style %r' % style)
		if scaling not in ('none', 'linear', 'yarn'):
			raise ValueError('rope: unsupported scaling %r' % scaling)
		self.n_dims = n_dims
		self.base = float(base)
		self.style = style
		self.scaling = scaling
		self.factor = float(factor) if factor else 1.0
		self.n_ctx_orig = int(n_ctx_orig)
		self.beta_fast = float(beta_fast)
		self.beta_slow = float(beta_slow)
		self.attn_factor = float(attn_factor)
		self.truncate = True

	def __repr__(self):
		return 'Rope(%d, base=%g, %s, %s x%g)' % (self.n_dims, self.base, self.style,
							self.scaling, self.factor)

	def _yarn_corr_dim(self, n_rot):
		# the pair index whose wavelength fits n_rot turns into n_ctx_orig
		return self.n_dims * math.log(self.n_ctx_orig / (n_rot * 2 * math.pi)) / \
			(2 * math.log(self.base))

	def angles(self, pos):
		"""theta (len(pos), n_dims/2) and the cos/sin magnitude mscale."""
		pos = np.asarray(pos, dtype=np.float64)
		i = np.arange(self.n_dims // 2, dtype=np.float64)
		freq = self.base ** (-2.0 * i / self.n_dims)            # theta_i
		theta = pos[:, None] * freq[None, :]                    # original ("extrapolated")
		mscale = self.attn_factor
		if self.scaling == 'linear':
			theta = theta / self.factor
		elif self.scaling == 'yarn':
			low = self._yarn_corr_dim(self.beta_fast)
			high = self._yarn_corr_dim(self.beta_slow)
			if self.truncate:
				low, high = math.floor(low), math.ceil(high)
			low, high = max(0.0, low), min(self.n_dims - 1.0, high)
			ramp = np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
			extrap = 1.0 - ramp        # 1: keep the original angle, 0: interpolate
			theta = theta / self.factor * (1.0 - extrap) + theta * extrap
			mscale *= 1.0 + 0.1 * math.log(self.factor)
		return theta, mscale

	def apply(self, x, pos):
		"""Rotate x (tokens, heads, head_dim) at positions pos (tokens,)."""
		theta, mscale = self.angles(pos)
		cos = (np.cos(theta) * mscale)[:, None, :].astype(x.dtype)
		sin = (np.sin(theta) * mscale)[:, None, :].astype(x.dtype)
		n = self.n_dims
		y = x.copy()
		if self.style == 'interleaved':
			a, b = x[..., 0:n:2], x[..., 1:n:2]
			y[..., 0:n:2] = a * cos - b * sin
			y[..., 1:n:2] = a * sin + b * cos
		else:
			a, b = x[..., :n // 2], x[..., n // 2:n]
			y[..., :n // 2] = a * cos - b * sin
			y[..., n // 2:n] = a * sin + b * cos
		return y          # dimensions past n_dims pass through unrotated


class Config:
	"""Hyper-parameters of one model (see load.py for where each comes from)."""

	def __init__(self, **kw):
		self.arch = kw['arch']                 # llama qwen2 qwen2moe qwen3 qwen3moe olmoe
		self.n_vocab = kw['n_vocab']
		self.n_embd = kw['n_embd']
		self.n_layer = kw['n_layer']
		self.n_head = kw['n_head']
		self.n_head_kv = kw['n_head_kv']
		self.head_dim = kw['head_dim']
		self.rms_eps = kw['rms_eps']
		self.rope = kw['rope']
		self.n_expert = kw.get('n_expert', 0)            # 0: dense FFN
		self.n_expert_used = kw.get('n_expert_used', 0)
		self.norm_topk = kw.get('norm_topk', False)       # renormalise the top-k weights
		self.expert_weights_scale = kw.get('expert_weights_scale', 0.0)  # 0: none
		self.qk_norm = kw.get('qk_norm')                  # None, 'head' or 'full'
		self.attn_scale = kw.get('attn_scale') or 1.0 / math.sqrt(self.head_dim)
		self.bos = kw.get('bos')
		self.eos = kw.get('eos', [])                      # ids that end generation
		if self.n_head % self.n_head_kv:
			raise ValueError('n_head %d is not a multiple of n_head_kv %d'
					 % (self.n_head, self.n_head_kv))
		if self.n_expert and not 0 < self.n_expert_used <= self.n_expert:
			raise ValueError('expert_used_count %d out of range (%d experts)'
					 % (self.n_expert_used, self.n_expert))

	def describe(self):
		s = '%s: vocab %d, embd %d, %d layers, %d/%d heads of %d, eps %g, %r' % (
			self.arch, self.n_vocab, self.n_embd, self.n_layer, self.n_head,
			self.n_head_kv, self.head_dim, self.rms_eps, self.rope)
		if self.n_expert:
			s += ', %d experts (%d used%s)' % (
				self.n_expert, self.n_expert_used,
				', renormalised' if self.norm_topk else '')
		if self.qk_norm == 'head':
			s += ', q/k RMSNorm per head'
		elif self.qk_norm == 'full':
			s += ', q/k RMSNorm over the whole projection'
		return s


# --- the building blocks ----------------------------------------------------------

def rms_norm(x, w, eps):
	"""RMSNorm (Zhang & Sennrich 2019) over the last axis: x / rms(x) * w."""
	return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def softmax(x, axis=-1):
	e = np.exp(x - np.max(x, axis=axis, keepdims=True))
	return e / np.sum(e, axis=axis, keepdims=True)


def silu(x):
	return x / (1.0 + np.exp(-x))


def sigmoid(x):
	return 1.0 / (1.0 + np.exp(-x))


def swiglu(x, w_gate, w_up, w_down):
	"""SwiGLU FFN (Shazeer 2020): down(silu(gate x) * up x)."""
	return (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


class Model:
	"""The forward pass over weights W (a load.Tensors) with a KV cache.
	Activations take the weights' dtype (load.load's dtype argument)."""

	def __init__(self, cfg, W, emulate=(), tape=None):
		self.cfg = cfg
		self.W = W
		self.emulate = frozenset(emulate)
		bad = self.emulate - set(EMULATIONS)
		if bad:
			raise ValueError('unknown emulation %s (known: %s)'
					 % (', '.join(sorted(bad)), ', '.join(EMULATIONS)))
		self.act_quant = 'act-quant' in self.emulate
		self.kv_f16 = 'kv-f16' in self.emulate
		self.act_bf16 = 'act-bf16' in self.emulate
		self.tape = tape            # an actquant.Oracle deciding the emulated roundings' ties
		self.reset()

	def reset(self):
		"""Forget every position (empty KV cache)."""
		self.n_past = 0
		self.k_cache = [None] * self.cfg.n_layer    # (positions, n_head_kv, head_dim)
		self.v_cache = [None] * self.cfg.n_layer
		self._last_quant = None

	def w(self, name):
		return self.W.get(name)

	def x_for(self, x, name, e=None, rows=None, src=None):
		"""The activations x as the product with weight `name` (expert e,
		or head e of deepseek2's per-head matrices) sees them: unchanged,
		or with act-quant rounded through the activation format of the
		weight's type.  rows = which of the batch's tokens the rows of x
		are (all if None), for an Oracle's positions.  src (what x is: the
		FFN input every expert quantises) is for subclasses that collect
		inputs (imatrix.py).  With act-bf16, rounded to bfloat16 for a BF16
		weight."""
		if self.act_bf16 and self.W.ggml_type(name) == actquant.BF16:
			return actquant.bf16_values(x)
		if not self.act_quant:
			return x
		t = actquant.VEC_DOT_TYPE.get(self.W.ggml_type(name))
		if t is None:
			return x
		# q/k/v (and gate/up) quantise the same row to the same bytes: one
		# rounding (the oracle asks the tape of the first of them)
		last = self._last_quant
		if last is not None and last[0] is x and last[1] == t:
			return last[2]
		tape = None
		if self.tape is not None:
			pos = self._pos if rows is None else self._pos[rows]
			tape = (self.tape, (name, -1 if e is None else e), pos)
		y = actquant.values(x, t, tape).astype(x.dtype, copy=False)
		self._last_quant = (x, t, y)
		return y

	def matmul(self, x, name, e=None, rows=None, src=None):
		"""x @ W.T for weight `name` (expert e of a stacked tensor)."""
		w = self.w(name) if e is None else self.W.expert(name, e)
		return self.x_for(x, name, e, rows, src) @ w.T

	def start(self, tokens):
		"""The checked token ids of a forward() and their positions n_past,
		n_past + 1, ... (every architecture's forward() begins here)."""
		c = self.cfg
		tokens = np.asarray(tokens, dtype=np.int64)
		if tokens.ndim != 1 or tokens.size == 0:
			raise ValueError('forward: need a non-empty list of token ids')
		bad = tokens[(tokens < 0) | (tokens >= c.n_vocab)]
		if bad.size:
			raise ValueError('token id %d out of range (vocabulary %d)'
					 % (bad[0], c.n_vocab))
		pos = np.arange(self.n_past, self.n_past + tokens.size)
		self._pos = pos
		return tokens, pos

	def logits(self, h):
		"""The output matrix's product with the final hidden states h."""
		out = 'output.weight' if self.W.has('output.weight') else \
			'token_embd.weight'                                 # tied embeddings
		return self.matmul(h, out)

	def forward(self, tokens):
		"""Logits (len(tokens), n_vocab) of the tokens appended at positions
		n_past, n_past + 1, ...; they join the cache."""
		c = self.cfg
		tokens, pos = self.start(tokens)
		x = self.w('token_embd.weight')[tokens]                 # (T, n_embd)
		for il in range(c.n_layer):
			p = 'blk.%d.' % il
			# attention block, pre-norm with a residual connection
			h = rms_norm(x, self.w(p + 'attn_norm.weight'), c.rms_eps)
			x = x + self.attention(il, h, pos)
			# feed-forward block, likewise
			h = rms_norm(x, self.w(p + 'ffn_norm.weight'), c.rms_eps)
			x = x + (self.moe(il, h) if c.n_expert else self.dense_ffn(il, h))
		self.n_past += tokens.size
		return self.logits(rms_norm(x, self.w('output_norm.weight'), c.rms_eps))

	def project(self, il, name, h):
		p = 'blk.%d.%s' % (il, name)
		y = self.matmul(h, p + '.weight', src='blk.%d.attn_input' % il)
		if self.W.has(p + '.bias'):
			y = y + self.w(p + '.bias')
		return y

	def attention(self, il, h, pos):
		"""Causal multi-head attention (Vaswani et al. 2017) with grouped
		KV heads (Ainslie et al. 2023): query head j reads KV head
		j // (n_head / n_head_kv)."""
		c = self.cfg
		p = 'blk.%d.' % il
		T, hd = h.shape[0], c.head_dim
		q = self.project(il, 'attn_q', h)                       # (T, n_head * hd)
		k = self.project(il, 'attn_k', h)                       # (T, n_head_kv * hd)
		v = self.project(il, 'attn_v', h)
		if c.qk_norm == 'full':            # OLMoE: over the whole projection
			q = rms_norm(q, self.w(p + 'attn_q_norm.weight'), c.rms_eps)
			k = rms_norm(k, self.w(p + 'attn_k_norm.weight'), c.rms_eps)
		q = q.reshape(T, c.n_head, hd)
		k = k.reshape(T, c.n_head_kv, hd)
		v = v.reshape(T, c.n_head_kv, hd)
		if c.qk_norm == 'head':            # Qwen3: every head on its own
			q = rms_norm(q, self.w(p + 'attn_q_norm.weight'), c.rms_eps)
			k = rms_norm(k, self.w(p + 'attn_k_norm.weight'), c.rms_eps)
		q = c.rope.apply(q, pos)
		k = c.rope.apply(k, pos)
		if self.kv_f16:                    # the cache holds float16
			tk = tv = None
			if self.tape is not None:
				tk = (self.tape, (il, 'k'), pos)
				tv = (self.tape, (il, 'v'), pos)
			k = actquant.round_f16(k, tk).astype(h.dtype)
			v = actquant.round_f16(v, tv).astype(h.dtype)
		if self.k_cache[il] is None:
			self.k_cache[il], self.v_cache[il] = k, v
		else:
			self.k_cache[il] = np.concatenate([self.k_cache[il], k])
			self.v_cache[il] = np.concatenate([self.v_cache[il], v])
		K, V = self.k_cache[il], self.v_cache[il]               # (S, n_head_kv, hd)
		S = K.shape[0]
		# query at position pos[t] sees keys at positions 0 .. pos[t]
		future = np.arange(S)[None, :] > pos[:, None]           # (T, S)
		group = c.n_head // c.n_head_kv
		out = np.empty((T, c.n_head, hd), dtype=h.dtype)
		for j in range(c.n_head):
			kv = j // group
			scores = (q[:, j, :] @ K[:, kv, :].T) * c.attn_scale    # (T, S)
			scores = np.where(future, -np.inf, scores)
			out[:, j, :] = softmax(scores) @ V[:, kv, :]
		return self.matmul(out.reshape(T, c.n_head * hd), p + 'attn_output.weight')

	def swiglu(self, h, gate, up, down, e=None, rows=None, src=None):
		"""swiglu() with weights by name (expert e of stacked tensors, for
		the batch's tokens `rows`), each product seeing its input through
		x_for (src: what h is, for imatrix.py)."""
		if not (self.act_quant or self.act_bf16):
			get = self.w if e is None else (lambda n: self.W.expert(n, e))
			return swiglu(h, get(gate), get(up), get(down))
		a = silu(self.matmul(h, gate, e, rows, src)) * self.matmul(h, up, e, rows, src)
		return self.matmul(a, down, e, rows)

	def dense_ffn(self, il, h):
		p = 'blk.%d.' % il
		return self.swiglu(h, p + 'ffn_gate.weight', p + 'ffn_up.weight',
				   p + 'ffn_down.weight')

	def route(self, il, h):
		"""Router: softmax over every expert's logit, keep the k largest
		(Shazeer et al. 2017, Fedus et al. 2021).  Returns expert ids and
		weights, both (T, k)."""
		c = self.cfg
		probs = softmax(self.matmul(h, 'blk.%d.ffn_gate_inp.weight' % il))   # (T, n_expert)
		# stable sort: of equal probabilities the lower expert id wins
		top = np.argsort(-probs, axis=1, kind='stable')[:, :c.n_expert_used]
		weight = np.take_along_axis(probs, top, axis=1)
		if c.norm_topk:                    # = softmax over the k chosen logits
			# (llama.cpp keeps the sum >= f16's smallest normal; only
			# matters for degenerate routers)
			weight = weight / np.maximum(np.sum(weight, axis=1, keepdims=True),
						     6.103515625e-5)
		if c.expert_weights_scale:
			weight = weight * c.expert_weights_scale
		return top, weight

	def moe(self, il, h):
		"""Mixture-of-experts FFN: sum over the chosen experts of
		weight * SwiGLU_e(h), plus Qwen2-MoE's gated shared expert."""
		p = 'blk.%d.' % il
		top, weight = self.route(il, h)
		y = np.zeros_like(h)
		for e in np.unique(top):
			rows, slot = np.nonzero(top == e)          # tokens routed to expert e
			ye = self.swiglu(h[rows], p + 'ffn_gate_exps.weight',
					 p + 'ffn_up_exps.weight', p + 'ffn_down_exps.weight',
					 e, rows, p + 'ffn_input')
			y[rows] += weight[rows, slot][:, None] * ye
		if self.W.has(p + 'ffn_gate_inp_shexp.weight'):
			g = p + 'ffn_gate_inp_shexp.weight'
			gate = sigmoid(self.x_for(h, g) @ self.w(g))                    # (T,)
			y = y + gate[:, None] * self.swiglu(h, p + 'ffn_gate_shexp.weight',
							    p + 'ffn_up_shexp.weight',
							    p + 'ffn_down_shexp.weight',
							    src=p + 'ffn_input')
		return y


def greedy(model, prompt, n, stop=(), recompute=False):
	"""Prompt logits (last position) and up to n greedily chosen tokens.
	Stops before a token in `stop` (which is not returned).  With
	recompute, every step runs the whole sequence again from an empty cache
	(slow; the self-test's check of the cache)."""
	model.reset()
	seq = list(prompt)
	logits = model.forward(seq)[-1]
	first = logits
	out = []
	for _ in range(n):
		t = int(np.argmax(logits))         # first index of the maximum
		if t in stop:
			break
		out.append(t)
		seq.append(t)
		if recompute:
			model.reset()
			logits = model.forward(seq)[-1]
		else:
			logits = model.forward([t])[-1]
	return first, out, logits
