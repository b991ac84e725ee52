# tests/ref/arch_common.py — what the reference's second family of
# architectures (arch_deepseek2.py, arch_gptoss.py, arch_phimoe.py,
# arch_granitemoe.py) shares: LayerNorm, attention with a window and sinks,
# a model base class with a per-layer cache, the q/k/v projections and the
# routed and shared experts, and loader helpers.
#
# Each architecture module provides
#   load_gguf(r, path, dtype) -> (Config, Tensors)   r: a moegen GGUFReader
#   load_hf(c, d, dtype)      -> (Config, Tensors)   c: config.json as a dict
# and a Model subclass named by cfg.model_class; load.py dispatches to them.
import math

import numpy as np

import actquant
import load
import model as M

LoadError = load.LoadError


def layer_norm(x, w, b, eps):
	"""LayerNorm (Ba et al. 2016) over the last axis, with weight and bias."""
	c = x - np.mean(x, axis=-1, keepdims=True)
	return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps) * w + b


def attend(q, K, V, qpos, kpos, scale, sinks=None, window=0):
	"""Causal attention of queries q (T, H, d) at positions qpos over keys K
	(S, Hk, d) and values V (S, Hk, dv) at positions kpos; query head j
	reads KV head j // (H / Hk).  window > 0: a query at p sees keys at
	p - window < k <= p only (the current token and window - 1 before it).
	sinks (H,): a learned logit per head that joins the softmax's
	denominator and attends to nothing (gpt-oss)."""
	T, H, _ = q.shape
	group = H // K.shape[1]
	hidden = kpos[None, :] > qpos[:, None]
	if window:
		hidden |= kpos[None, :] <= qpos[:, None] - window
	out = np.empty((T, H, V.shape[2]), dtype=q.dtype)
	for j in range(H):
		s = (q[:, j, :] @ K[:, j // group, :].T) * scale
		s = np.where(hidden, -np.inf, s)
		if sinks is None:
			p = M.softmax(s)
		else:
			m = np.maximum(np.max(s, axis=1, keepdims=True), sinks[j])
			e = np.exp(s - m)
			p = e / (np.sum(e, axis=1, keepdims=True) + np.exp(sinks[j] - m))
		out[:, j, :] = p @ V[:, j // group, :]
	return out


def top_k(scores, k):
	"""Indices (T, k) of the k largest scores per row, largest first; of
	equal scores the lower index first."""
	return np.argsort(-scores, axis=1, kind='stable')[:, :k]


def top_k_softmax(logits, k):
	"""A router that keeps each token's k largest logits (T, n_expert) and
	weighs them by a softmax over those k: (expert ids, weights), (T, k)."""
	top = top_k(logits, k)
	return top, M.softmax(np.take_along_axis(logits, top, axis=1))


class Base(M.Model):
	"""M.Model with a per-layer cache of named arrays (what each
	architecture keeps per token) and the bookkeeping of forward()."""

	def reset(self):
		super().reset()
		self.cache = [dict() for _ in range(self.cfg.n_layer)]

	def remember(self, il, pos, **arrays):
		"""Append per-token arrays (first axis = tokens) to layer il's cache
		and return the whole cached arrays.  With kv-f16 they are rounded
		to float16 as they enter, as a float16 cache would hold them."""
		c = self.cache[il]
		out = {}
		for name, a in arrays.items():
			if self.kv_f16:
				tape = None if self.tape is None else (self.tape, (il, name), pos)
				a = actquant.round_f16(a, tape).astype(a.dtype)
			c[name] = a if name not in c else np.concatenate([c[name], a])
			out[name] = c[name]
		if 'pos' not in c:
			c['pos'] = pos.copy()
		else:
			c['pos'] = np.concatenate([c['pos'], pos])
		out['pos'] = c['pos']
		return out

	def linear(self, x, name, src=None):
		"""x @ W.T (+ bias if the model has one) for weight `name` (without
		the .weight suffix)."""
		y = self.matmul(x, name + '.weight', src=src)
		if self.W.has(name + '.bias') or name + '.bias' in self.W._cache:
			y = y + self.w(name + '.bias')
		return y

	def qkv(self, il, h):
		"""Layer il's q (T, n_head, head_dim), k and v (T, n_head_kv,
		head_dim) from h (T, n_embd), with biases where the model has
		them; RoPE not applied yet."""
		c = self.cfg
		p = 'blk.%d.' % il
		T, hd = h.shape[0], c.head_dim
		src = p + 'attn_input'
		q = self.linear(h, p + 'attn_q', src).reshape(T, c.n_head, hd)
		k = self.linear(h, p + 'attn_k', src).reshape(T, c.n_head_kv, hd)
		v = self.linear(h, p + 'attn_v', src).reshape(T, c.n_head_kv, hd)
		return q, k, v

	def attention(self, il, h, pos, rope=None, **attend_kw):
		"""Layer il's attention over the cache: q/k/v (qkv()), RoPE (rope(x)
		for x (T, heads, head_dim), the model's rope at pos unless given),
		attend() with attend_kw (sinks, window), the output projection."""
		c = self.cfg
		q, k, v = self.qkv(il, h)
		rope = rope or (lambda x: c.rope.apply(x, pos))
		q, k = rope(q), rope(k)
		S = self.remember(il, pos, k=k, v=v)
		out = attend(q, S['k'], S['v'], pos, S['pos'], c.attn_scale, **attend_kw)
		return self.linear(out.reshape(h.shape[0], c.n_head * c.head_dim),
				   'blk.%d.attn_output' % il)

	def experts(self, il, h, top, weight, expert=None):
		"""The routed experts of layer il: the sum over each token's chosen
		experts top (T, k) of weight (T, k) x expert(h's rows routed to e,
		e, those rows).  expert: the SwiGLU of ffn_{gate,up,down}_exps
		unless given."""
		p = 'blk.%d.' % il
		if expert is None:
			def expert(x, e, rows):
				return self.swiglu(x, p + 'ffn_gate_exps.weight', p + 'ffn_up_exps.weight',
						   p + 'ffn_down_exps.weight', e, rows, p + 'ffn_input')
		y = np.zeros_like(h)
		for e in np.unique(top):
			rows, slot = np.nonzero(top == e)
			y[rows] += weight[rows, slot][:, None] * expert(h[rows], e, rows)
		return y

	def with_shared_expert(self, il, h, y):
		"""y plus layer il's shared expert (SwiGLU of ffn_*_shexp, every
		token) where the model has one (deepseek2, granitemoeshared)."""
		p = 'blk.%d.' % il
		if not has(self.W, p + 'ffn_up_shexp.weight'):
			return y
		return y + self.swiglu(h, p + 'ffn_gate_shexp.weight', p + 'ffn_up_shexp.weight',
				       p + 'ffn_down_shexp.weight', src=p + 'ffn_input')


def config(model_class, fields, kw):
	"""M.Config of the keyword arguments kw plus an architecture's own
	`fields` (those of kw named there), for model_class."""
	extra = {k: kw.pop(k) for k in list(kw) if k in fields}
	cfg = M.Config(**kw)
	for k, v in extra.items():
		setattr(cfg, k, v)
	cfg.model_class = model_class
	return cfg


def attn_shapes(cfg, b, bias):
	"""name -> shape of layer prefix b's attention projections (q, k, v,
	output) and, with bias, their biases."""
	D, hd = cfg.n_embd, cfg.head_dim
	Q, KV = cfg.n_head * hd, cfg.n_head_kv * hd
	s = {b + 'attn_q.weight': (Q, D), b + 'attn_k.weight': (KV, D),
	     b + 'attn_v.weight': (KV, D), b + 'attn_output.weight': (D, Q)}
	if bias:
		s.update({b + 'attn_q.bias': (Q,), b + 'attn_k.bias': (KV,),
			  b + 'attn_v.bias': (KV,), b + 'attn_output.bias': (D,)})
	return s


def gguf_open(r, path, dtype, arch):
	"""What every architecture's load_gguf starts from: the {arch}.* key
	getter (kv()), the tensors, n_embd and n_head."""
	k = kv(r, arch)
	return (k, load.GGUFTensors(path, r, dtype), k('embedding_length', required=True),
		k('attention.head_count', required=True))


def kv(r, arch):
	"""key -> value of the {arch}.* GGUF keys, uniform per-layer arrays
	reduced to one value; a getter with default / required."""
	def get(key, default=None, required=False):
		full = arch + '.' + key
		if full in r.kv:
			v = r.kv[full]
			if isinstance(v, np.ndarray):
				if v.size == 0 or (v != v[0]).any():
					raise LoadError('%s: %s: per-layer values are not supported'
							% (r.path, full))
				v = v[0].item()
			return v
		if required:
			raise LoadError('%s: missing key %s' % (r.path, full))
		return default
	return get


def yarn_mscale(factor, m=1.0):
	"""YaRN's magnitude correction 0.1 m ln(factor) + 1 (1 for factor <= 1)."""
	return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def shape_of(W, name):
	if name in W._cache:
		return tuple(W._cache[name].shape)
	if hasattr(W, 'info'):
		return tuple(W.info(name).shape)
	hf, n = W.map[name]
	shape = tuple(W.where[hf.format(e=0)][2])
	return (n,) + shape if n else shape


def has(W, name):
	return name in W._cache or W.has(name)


def check(W, path, want):
	"""Every tensor of `want` (name -> numpy shape) present with that shape."""
	for name, s in want.items():
		if not has(W, name):
			raise LoadError('%s: missing tensor %s' % (path, name))
		got = shape_of(W, name)
		if got != tuple(s):
			raise LoadError('%s: tensor %s has shape %s, expected %s'
					% (path, name, got, tuple(s)))


def hf_map(W, names):
	"""Map GGUF names to HF names (name -> (hf, n_expert)) for those the
	snapshot has."""
	for g, (hf, n) in names.items():
		if W.hf_has(hf.format(e=0)):
			W.map[g] = (hf, n)


def derive(W, name, array):
	"""A tensor the snapshot stores differently (split, fused, packed):
	computed once here and kept under its GGUF name."""
	W._cache[name] = np.asarray(array, dtype=W.dtype)


def eos_ids(r=None, c=None):
	if r is not None:
		return [x for x in (r.kv.get('tokenizer.ggml.eos_token_id'),
				    r.kv.get('tokenizer.ggml.eot_token_id')) if x is not None]
	e = c.get('eos_token_id')
	return e if isinstance(e, list) else [] if e is None else [e]
