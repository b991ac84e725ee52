# tests/ref/load.py — the reference's two model loaders.
#
#   load_gguf(path)  a GGUF file as llama.cpp reads it: hyper-parameters from
#                    {arch}.* keys, tensors dequantised by quants.py, q/k rows
#                    of llama in the converter's permuted order, so RoPE is
#                    the interleaved-pair form
#   load_hf(dir)     an HF snapshot (config.json + *.safetensors) as
#                    transformers reads it: HF tensor names, rows in their
#                    natural order, RoPE always rotate_half
#
# Both return (Config, Tensors) with the tensors under llama.cpp's GGUF names,
# so one forward pass (model.py) runs either.  Agreement of the two on the
# generator's twin files checks the reference against both conventions.
#
# The GGUF header and tensor directory are parsed by the generator's reader
# (scripts/moegen/reader.py, plain format parsing, no C code); tensor bytes
# are mapped and decoded here.
import glob
import json
import os
import sys

import numpy as np

import model as M
import quants

_SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts')
if _SCRIPTS not in sys.path:
	sys.path.insert(0, _SCRIPTS)
from moegen import reader as gguf_reader  # noqa: E402

ARCHS = ('llama', 'qwen2', 'qwen2moe', 'qwen3', 'qwen3moe', 'olmoe')
# the second family, each in its own module (arch_*.py): GGUF
# general.architecture / config.json model_type -> module name
MORE_GGUF = {'deepseek2': 'arch_deepseek2', 'gpt-oss': 'arch_gptoss', 'phimoe': 'arch_phimoe',
	     'granitemoe': 'arch_granitemoe'}
MORE_HF = {'deepseek_v2': 'arch_deepseek2', 'deepseek_v3': 'arch_deepseek2',
	   'gpt_oss': 'arch_gptoss', 'phimoe': 'arch_phimoe', 'granitemoe': 'arch_granitemoe',
	   'granitemoeshared': 'arch_granitemoe'}


def _module(name):
	import importlib
	return importlib.import_module(name)


class LoadError(Exception):
	pass


class Tensors:
	"""Weights by GGUF name, as dtype arrays in numpy (out, in) order,
	decoded on first use and kept.  Stacked expert tensors
	(ffn_*_exps, numpy shape (n_expert, out, in)) are also reachable one
	expert at a time, so experts never chosen are never decoded."""

	def __init__(self, dtype):
		self.dtype = np.dtype(dtype)
		self._cache = {}
		self.stored_type = {}

	def has(self, name):
		raise NotImplementedError

	def _load(self, name):
		raise NotImplementedError

	def _load_expert(self, name, e):
		return self.get(name)[e]

	def ggml_type(self, name):
		"""The ggml type id the tensor is stored as; 0 (F32) for a format
		of float tensors only (an HF snapshot), where it does not matter:
		only quantised weights change the engine's arithmetic.  A tensor
		an HF snapshot stores quantised (gpt-oss's MXFP4 experts) is
		marked by its loader in stored_type."""
		return self.stored_type.get(name, 0)

	def get(self, name):
		if name not in self._cache:
			if not self.has(name):
				raise LoadError('%s: no tensor %r' % (self.path, name))
			self._cache[name] = np.asarray(self._load(name), dtype=self.dtype)
		return self._cache[name]

	def expert(self, name, e):
		key = (name, int(e))
		if name in self._cache:
			return self._cache[name][e]
		if key not in self._cache:
			self._cache[key] = np.asarray(self._load_expert(name, int(e)),
							 dtype=self.dtype)
		return self._cache[key]


# --- GGUF ---------------------------------------------------------------------------

class GGUFTensors(Tensors):
	def __init__(self, path, r, dtype):
		super().__init__(dtype)
		self.path = path
		self.r = r
		self.size = os.path.getsize(path)
		self.names = set(r.names())

	def has(self, name):
		return name in self.names

	def info(self, name):
		return self.r.info(name)

	def ggml_type(self, name):
		return self.info(name).type

	def _bytes(self, t, first_elem, n_elem):
		"""Bytes of elements [first_elem, first_elem + n_elem) of tensor t."""
		if t.type not in quants.TYPES:
			raise LoadError("%s: tensor '%s': cannot decode type %s"
					% (self.path, t.name, quants.type_name(t.type)))
		try:
			start = quants.nbytes(t.type, first_elem, t.ne[0])
			n = quants.nbytes(t.type, n_elem, t.ne[0])
		except ValueError as e:
			raise LoadError("%s: tensor '%s': %s" % (self.path, t.name, e))
		off = t.data_offset + start
		if off + n > self.size:
			raise LoadError("%s: tensor '%s': data [%d, %d) past end of file (size %d)"
					% (self.path, t.name, off, off + n, self.size))
		return np.memmap(self.path, dtype=np.uint8, mode='r', offset=off, shape=(n,))

	def _load(self, name):
		t = self.info(name)
		n = 1
		for d in t.ne:
			n *= d
		return quants.decode(self._bytes(t, 0, n), t.type, n).reshape(t.shape)

	def _load_expert(self, name, e):
		t = self.info(name)
		if len(t.ne) != 3 or not 0 <= e < t.ne[2]:
			raise LoadError("%s: tensor '%s' %s has no expert %d"
					% (self.path, name, t.ne, e))
		per = t.ne[0] * t.ne[1]
		v = quants.decode(self._bytes(t, e * per, per), t.type, per)
		return v.reshape(t.ne[1], t.ne[0])


def _kv(r, key, default=None, required=False):
	if key in r.kv:
		v = r.kv[key]
		if isinstance(v, np.ndarray):     # per-layer arrays: only uniform ones here
			if v.size == 0 or (v != v[0]).any():
				raise LoadError('%s: %s: per-layer values %s are not supported'
						% (r.path, key, v.tolist()))
			v = v[0].item()
		return v
	if required:
		raise LoadError('%s: missing key %s' % (r.path, key))
	return default


def load_gguf(path, dtype=np.float64):
	try:
		r = gguf_reader.GGUFReader(path)
	except (OSError, gguf_reader.GGUFError) as e:
		raise LoadError(str(e))
	arch = _kv(r, 'general.architecture', required=True)
	if arch in MORE_GGUF:
		return _module(MORE_GGUF[arch]).load_gguf(r, path, dtype)
	if arch not in ARCHS:
		raise LoadError('%s: architecture %r is not one the reference knows (%s)'
				% (path, arch, ', '.join(ARCHS + tuple(MORE_GGUF))))
	W = GGUFTensors(path, r, dtype)
	a = arch + '.'
	k = lambda key, d=None, req=False: _kv(r, a + key, d, req)   # noqa: E731
	n_embd = k('embedding_length', req=True)
	n_head = k('attention.head_count', req=True)
	head_dim = k('attention.key_length', n_embd // n_head)
	if k('attention.value_length', head_dim) != head_dim:
		raise LoadError('%s: key_length %d != value_length %d'
				% (path, head_dim, k('attention.value_length')))
	n_ctx = k('context_length', 0)
	# rope scaling as llama.cpp reads it: type defaults to "linear", the
	# factor (or the old rope.scale_linear) to 1
	scaling = k('rope.scaling.type', 'linear')
	factor = k('rope.scaling.factor') or k('rope.scale_linear') or 1.0
	if scaling == 'linear' and factor == 1.0:
		scaling = 'none'
	rope = M.Rope(
		n_dims=k('rope.dimension_count', head_dim),
		base=k('rope.freq_base', 10000.0),
		# llama.cpp's rope type per architecture (llama_model_rope_type)
		style='interleaved' if arch == 'llama' else 'neox',
		scaling=scaling, factor=factor,
		n_ctx_orig=k('rope.scaling.original_context_length', n_ctx),
		beta_fast=k('rope.scaling.yarn_beta_fast', 32.0),
		beta_slow=k('rope.scaling.yarn_beta_slow', 1.0))
	moe = W.has('blk.0.ffn_gate_inp.weight')
	eos = [x for x in (_kv(r, 'tokenizer.ggml.eos_token_id'),
			   _kv(r, 'tokenizer.ggml.eot_token_id')) if x is not None]
	try:
		cfg = M.Config(
			arch=arch,
			n_vocab=W.info('token_embd.weight').ne[1],
			n_embd=n_embd,
			n_layer=k('block_count', req=True),
			n_head=n_head,
			n_head_kv=k('attention.head_count_kv', n_head),
			head_dim=head_dim,
			rms_eps=k('attention.layer_norm_rms_epsilon', req=True),
			rope=rope,
			n_expert=k('expert_count', 0) if moe else 0,
			n_expert_used=k('expert_used_count', 0) if moe else 0,
			# build_moe_ffn's norm_w as each llama.cpp builder passes it
			norm_topk=arch in ('llama', 'qwen3moe'),
			expert_weights_scale=k('expert_weights_scale', 0.0),
			qk_norm={'qwen3': 'head', 'qwen3moe': 'head', 'olmoe': 'full'}.get(arch),
			attn_scale=k('attention.scale'),
			bos=_kv(r, 'tokenizer.ggml.bos_token_id'),
			eos=eos)
	except (ValueError, gguf_reader.GGUFError) as e:
		raise LoadError('%s: %s' % (path, e))
	check_shapes(cfg, W, path)
	return cfg, W


# --- HF snapshot ------------------------------------------------------------------------

ST_DTYPES = {'F32': '<f4', 'F16': '<f2', 'BF16': '<u2', 'F64': '<f8', 'U8': '<u1'}


class HFTensors(Tensors):
	"""safetensors files of an HF snapshot under GGUF names.

	hf_name maps a GGUF name to its HF name; stacked expert tensors map to
	one HF tensor per expert (with '{e}' in the name)."""

	def __init__(self, d, dtype):
		super().__init__(dtype)
		self.path = d
		self.where = {}       # HF name -> (file, dtype, shape, begin, end)
		files = sorted(glob.glob(os.path.join(d, '*.safetensors')))
		if not files:
			raise LoadError('%s: no *.safetensors files' % d)
		for f in files:
			size = os.path.getsize(f)
			with open(f, 'rb') as fh:
				raw = fh.read(8)
				if len(raw) != 8:
					raise LoadError('%s: too short for a header' % f)
				n = int.from_bytes(raw, 'little')
				if n > size - 8:
					raise LoadError('%s: header length %d past end of file'
							% (f, n))
				try:
					hdr = json.loads(fh.read(n))
				except ValueError as e:
					raise LoadError('%s: header: %s' % (f, e))
			for name, v in hdr.items():
				if name == '__metadata__':
					continue
				b, e = v['data_offsets']
				if v['dtype'] not in ST_DTYPES:
					raise LoadError('%s: %s: dtype %s' % (f, name, v['dtype']))
				if not 0 <= b <= e <= size - 8 - n:
					raise LoadError('%s: %s: data [%d, %d) out of range'
							% (f, name, b, e))
				self.where[name] = (f, v['dtype'], tuple(v['shape']),
						    8 + n + b, 8 + n + e)
		self.map = {}         # GGUF name -> HF name (with {e} for experts)

	def hf_has(self, hf):
		return hf in self.where

	def read(self, hf):
		f, dt, shape, b, e = self.where[hf]
		raw = np.memmap(f, dtype=np.uint8, mode='r', offset=b, shape=(e - b,)) if e > b \
			else np.zeros(0, dtype=np.uint8)
		a = np.frombuffer(raw, dtype=ST_DTYPES[dt])
		if dt == 'BF16':
			a = (a.astype(np.uint32) << 16).view(np.float32)
		n = 1
		for s in shape:
			n *= s
		if a.size != n:
			raise LoadError('%s: %s: %d values for shape %s' % (f, hf, a.size, shape))
		return a.reshape(shape)

	def has(self, name):
		return name in self.map

	def _load(self, name):
		hf, n_expert = self.map[name]
		if n_expert:
			return np.stack([self.read(hf.format(e=e)) for e in range(n_expert)])
		a = self.read(hf)
		if name.endswith('ffn_gate_inp_shexp.weight'):
			a = a.reshape(-1)            # HF Linear(n_embd, 1): (1, n_embd)
		return a

	def _load_expert(self, name, e):
		hf, n_expert = self.map[name]
		return self.read(hf.format(e=e))


def _hf_names(cfg, model_type):
	"""GGUF name -> (HF name, number of experts or 0)."""
	m = {'token_embd.weight': ('model.embed_tokens.weight', 0),
	     'output_norm.weight': ('model.norm.weight', 0),
	     'output.weight': ('lm_head.weight', 0)}
	for i in range(cfg.n_layer):
		b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
		m[b + 'attn_norm.weight'] = (h + 'input_layernorm.weight', 0)
		m[b + 'ffn_norm.weight'] = (h + 'post_attention_layernorm.weight', 0)
		for g, n in (('q', 'q'), ('k', 'k'), ('v', 'v'), ('output', 'o')):
			for s in ('weight', 'bias'):
				m[b + 'attn_%s.%s' % (g, s)] = (h + 'self_attn.%s_proj.%s' % (n, s),
								 0)
		m[b + 'attn_q_norm.weight'] = (h + 'self_attn.q_norm.weight', 0)
		m[b + 'attn_k_norm.weight'] = (h + 'self_attn.k_norm.weight', 0)
		for g in ('gate', 'up', 'down'):
			m[b + 'ffn_%s.weight' % g] = (h + 'mlp.%s_proj.weight' % g, 0)
		E = cfg.n_expert
		if not E:
			continue
		if model_type == 'mixtral':
			x = h + 'block_sparse_moe.'
			m[b + 'ffn_gate_inp.weight'] = (x + 'gate.weight', 0)
			for g, w in (('gate', 'w1'), ('up', 'w3'), ('down', 'w2')):
				m[b + 'ffn_%s_exps.weight' % g] = (x + 'experts.{e}.%s.weight' % w,
									 E)
		else:
			x = h + 'mlp.'
			m[b + 'ffn_gate_inp.weight'] = (x + 'gate.weight', 0)
			for g in ('gate', 'up', 'down'):
				m[b + 'ffn_%s_exps.weight' % g] = \
					(x + 'experts.{e}.%s_proj.weight' % g, E)
			m[b + 'ffn_gate_inp_shexp.weight'] = (x + 'shared_expert_gate.weight', 0)
			for g in ('gate', 'up', 'down'):
				m[b + 'ffn_%s_shexp.weight' % g] = \
					(x + 'shared_expert.%s_proj.weight' % g, 0)
	return m


# config.json model_type -> (GGUF-style arch, q/k norm, default norm_topk_prob)
HF_TYPES = {
	'llama': ('llama', None, False),
	'mistral': ('llama', None, False),
	'mixtral': ('llama', None, True),       # HF Mixtral always renormalises
	'qwen2': ('qwen2', None, False),
	'qwen2_moe': ('qwen2moe', None, False),
	'qwen3': ('qwen3', 'head', False),
	'qwen3_moe': ('qwen3moe', 'head', False),
	'olmoe': ('olmoe', 'full', False),
}


def _hf_rope(c, head_dim):
	rs = c.get('rope_scaling') or {}
	kind = rs.get('rope_type', rs.get('type', 'default'))
	kw = dict(n_dims=int(head_dim * c.get('partial_rotary_factor', 1.0)),
		  base=c.get('rope_theta', 10000.0), style='neox')
	if kind == 'default':
		return M.Rope(**kw)
	if kind == 'linear':
		return M.Rope(scaling='linear', factor=rs['factor'], **kw)
	if kind == 'yarn':
		factor = rs['factor']
		# HF: attention_factor defaults to 0.1 ln(factor) + 1 (Rope's mscale)
		att = rs.get('attention_factor')
		return M.Rope(scaling='yarn', factor=factor,
			      n_ctx_orig=rs.get('original_max_position_embeddings') or
			      c['max_position_embeddings'],
			      beta_fast=rs.get('beta_fast') or 32.0,
			      beta_slow=rs.get('beta_slow') or 1.0,
			      attn_factor=1.0 if att is None else
			      att / (1.0 + 0.1 * np.log(factor)),
			      **kw)
	raise LoadError('rope_scaling type %r is not supported' % kind)


def load_hf(d, dtype=np.float64):
	try:
		with open(os.path.join(d, 'config.json'), encoding='utf-8') as f:
			c = json.load(f)
	except (OSError, ValueError) as e:
		raise LoadError('%s: config.json: %s' % (d, e))
	mt = c.get('model_type')
	if mt in MORE_HF:
		return _module(MORE_HF[mt]).load_hf(c, d, dtype)
	if mt not in HF_TYPES:
		raise LoadError('%s: model_type %r is not one the reference knows' % (d, mt))
	arch, qk_norm, norm_default = HF_TYPES[mt]
	if c.get('clip_qkv') is not None:
		raise LoadError('%s: clip_qkv is not supported' % d)
	n_embd, n_head = c['hidden_size'], c['num_attention_heads']
	head_dim = c.get('head_dim') or n_embd // n_head
	n_expert = c.get('num_local_experts') or c.get('num_experts') or 0
	eos = c.get('eos_token_id')
	try:
		cfg = M.Config(
			arch=arch,
			n_vocab=c['vocab_size'],
			n_embd=n_embd,
			n_layer=c['num_hidden_layers'],
			n_head=n_head,
			n_head_kv=c.get('num_key_value_heads') or n_head,
			head_dim=head_dim,
			rms_eps=c['rms_norm_eps'],
			rope=_hf_rope(c, head_dim),
			n_expert=n_expert,
			n_expert_used=c.get('num_experts_per_tok', 0) if n_expert else 0,
			norm_topk=True if mt == 'mixtral' else
			c.get('norm_topk_prob', norm_default),
			qk_norm=qk_norm,
			bos=c.get('bos_token_id'),
			eos=eos if isinstance(eos, list) else [] if eos is None else [eos])
	except (KeyError, ValueError) as e:
		raise LoadError('%s: config.json: %s' % (d, e))
	W = HFTensors(d, dtype)
	for g, (hf, n) in _hf_names(cfg, mt).items():
		if W.hf_has(hf.format(e=0)):
			W.map[g] = (hf, n)
	if not W.has('output.weight') and not c.get('tie_word_embeddings', False):
		raise LoadError('%s: no lm_head.weight and tie_word_embeddings is false' % d)
	check_shapes(cfg, W, d)
	return cfg, W


# --- both -------------------------------------------------------------------------------

def expected_shapes(cfg, W):
	"""GGUF name -> numpy shape of every tensor the forward pass reads."""
	D, V, hd = cfg.n_embd, cfg.n_vocab, cfg.head_dim
	Q, KV = cfg.n_head * hd, cfg.n_head_kv * hd
	s = {'token_embd.weight': (V, D), 'output_norm.weight': (D,)}
	if W.has('output.weight'):
		s['output.weight'] = (V, D)
	for i in range(cfg.n_layer):
		b = 'blk.%d.' % i
		s.update({b + 'attn_norm.weight': (D,), b + 'attn_q.weight': (Q, D),
			  b + 'attn_k.weight': (KV, D), b + 'attn_v.weight': (KV, D),
			  b + 'attn_output.weight': (D, Q), b + 'ffn_norm.weight': (D,)})
		for n, o in (('q', Q), ('k', KV), ('v', KV)):
			if W.has(b + 'attn_%s.bias' % n):
				s[b + 'attn_%s.bias' % n] = (o,)
		if cfg.qk_norm == 'head':
			s[b + 'attn_q_norm.weight'] = s[b + 'attn_k_norm.weight'] = (hd,)
		elif cfg.qk_norm == 'full':
			s[b + 'attn_q_norm.weight'], s[b + 'attn_k_norm.weight'] = (Q,), (KV,)
		if not cfg.n_expert:
			for n in ('gate', 'up', 'down'):
				s[b + 'ffn_%s.weight' % n] = None         # n_ff is free
			continue
		s[b + 'ffn_gate_inp.weight'] = (cfg.n_expert, D)
		for n in ('gate', 'up', 'down'):
			s[b + 'ffn_%s_exps.weight' % n] = None
		if W.has(b + 'ffn_gate_inp_shexp.weight'):
			s[b + 'ffn_gate_inp_shexp.weight'] = (D,)
			for n in ('gate', 'up', 'down'):
				s[b + 'ffn_%s_shexp.weight' % n] = None
	return s


def _shape_of(W, name):
	if isinstance(W, GGUFTensors):
		return W.info(name).shape
	hf, n = W.map[name]
	shape = W.where[hf.format(e=0)][2]
	if name.endswith('ffn_gate_inp_shexp.weight'):
		return (int(np.prod(shape)),)
	return (n,) + shape if n else shape


def check_shapes(cfg, W, path):
	"""Every tensor present with the shape the hyper-parameters imply
	(FFN widths only checked against each other)."""
	D = cfg.n_embd
	for name, want in expected_shapes(cfg, W).items():
		if not W.has(name):
			raise LoadError('%s: missing tensor %s' % (path, name))
		got = tuple(_shape_of(W, name))
		if want is None:
			role = name.split('.')[2]
			ok = len(got) == (3 if role.endswith('_exps') else 2)
			if ok and role.endswith('_exps'):
				ok = got[0] == cfg.n_expert
			if ok:
				ok = got[-2] == D if role.startswith('ffn_down') else got[-1] == D
			want = 'a matrix with n_embd %d on the right side' % D
		else:
			ok = got == want
		if not ok:
			raise LoadError('%s: tensor %s has shape %s, expected %s'
					% (path, name, got, want))


def load(path, dtype=np.float64):
	"""A GGUF file or an HF snapshot directory."""
	if os.path.isdir(path):
		return load_hf(path, dtype)
	return load_gguf(path, dtype)
