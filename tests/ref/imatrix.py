#!/usr/bin/env python3
"""imatrix.py -- an importance matrix computed by the numpy reference.

  imatrix.py MODEL.uth|MODEL.gguf TOKENS.txt OUT.dat [--ctx N] [--bos ID|none]

Runs the reference forward pass (model.py) over the token ids in TOKENS.txt
(white-space separated, e.g. from `moe-run --tokenize`) in windows of N
tokens (default 128), records the input rows of every weight product (for
an expert only the tokens routed to it) and writes, per UTH tensor name,
the mean square of each input column in llama.cpp's legacy imatrix.dat
layout (ncall 1, values = the mean squares), which moe-quant --imatrix
reads.  The model is read from the UTH file directly (blocks decoded by
quants.py); a GGUF model is read by load.py, which also knows the second
family of architectures (deepseek2 ...; their UTH metadata is not parsed
here).  --bos: the token each window starts with (default: the model's BOS
if its tokenizer adds one).  A stack of matrices used one at a time
(deepseek2's attn_k_b / attn_v_b, one matrix per head) gets one set of
columns per matrix, head-major, as llama.cpp stores it; its rows count the
tokens once.  t0520 checks moe-bench --imatrix against it.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402
import model as M  # noqa: E402
import quants  # noqa: E402
from quant_check import read_uth  # noqa: E402


class UTHTensors(load.Tensors):
	"""UTH tensors under their GGUF names; ffn_*_exps stack the experts."""

	def __init__(self, path, dtype=np.float64):
		super().__init__(dtype)
		self.path = path
		self.U = read_uth(path)

	def _expert_name(self, name, e):
		stem, rest = name.split('_exps.', 1)
		return '%s.%d.%s' % (stem, e, rest)

	def has(self, name):
		if name in self.U:
			return True
		return '_exps.' in name and self._expert_name(name, 0) in self.U

	def ggml_type(self, name):
		if name in self.U:
			return self.U[name][0]
		return self.U[self._expert_name(name, 0)][0]

	def _dec(self, uname):
		dt, ne, raw = self.U[uname]
		n = int(np.prod(ne))
		v = quants.decode(np.frombuffer(raw, dtype=np.uint8), dt, n)
		return v.reshape(list(reversed(ne)))

	def _load(self, name):
		if name in self.U:
			return self._dec(name)
		e, out = 0, []
		while self._expert_name(name, e) in self.U:
			out.append(self._dec(self._expert_name(name, e)))
			e += 1
		return np.stack(out)

	def _load_expert(self, name, e):
		return self._dec(self._expert_name(name, e))


def config(path, W):
	b = open(path, 'rb').read(1 << 20)
	off, size = struct.unpack_from('<QQ', b, 64)
	if off + size > len(b):
		b = open(path, 'rb').read(off + size)
	meta = json.loads(b[off:off + size])
	hp = meta['hparams']
	arch = meta['architecture']
	rope = M.Rope(n_dims=hp['rope']['n_rot'], base=hp['rope']['base'],
		      style='neox' if hp['rope']['kind'] == 'neox' else 'interleaved')
	tk = meta.get('tokenizer', {})
	bos = tk.get('bos_id') if tk.get('add_bos') else None
	return M.Config(bos=bos, arch=arch, n_vocab=hp['n_vocab'], n_embd=hp['n_embd'],
			n_layer=hp['n_layer'], n_head=hp['n_head'], n_head_kv=hp['n_head_kv'],
			head_dim=hp['head_dim'], rms_eps=hp['norm_eps'], rope=rope,
			n_expert=hp['n_expert'], n_expert_used=hp['n_expert_used'],
			norm_topk=hp.get('topk_renorm', False),
			qk_norm={'head': 'head', 'full': 'full'}.get(hp.get('qk_norm')))


class Recorder:
	"""Mixed into a model class: records every product's input rows."""

	def __init__(self, cfg, W):
		super().__init__(cfg, W)
		self.sums, self.rows = {}, {}

	def matmul(self, x, name, e=None, rows=None, src=None):
		x2 = (np.asarray(x, dtype=np.float64) ** 2).sum(0)
		if e is not None and '_exps.' not in name:      # matrix e of a stack
			parts = self.sums.setdefault(name, {})
			parts[e] = parts.get(e, 0) + x2
			if e == 0:
				self.rows[name] = self.rows.get(name, 0) + x.shape[0]
			return super().matmul(x, name, e, rows, src)
		key = name if e is None else '%s.%d.%s' % (name.split('_exps.')[0], e,
							   name.split('_exps.')[1])
		self.sums[key] = self.sums.get(key, 0) + x2
		self.rows[key] = self.rows.get(key, 0) + x.shape[0]
		return super().matmul(x, name, e, rows, src)

	def mean_square(self, key):
		s = self.sums[key]
		if isinstance(s, dict):
			s = np.concatenate([s[e] for e in range(len(s))])
		return s / self.rows[key]

	def swiglu(self, h, gate, up, down, e=None, rows=None, src=None):
		# every product through matmul (the base class shortcuts it
		# without activation emulation)
		a = M.silu(self.matmul(h, gate, e, rows, src)) * self.matmul(h, up, e, rows, src)
		return self.matmul(a, down, e, rows)


def main(argv):
	ctx = 128
	if '--ctx' in argv:
		i = argv.index('--ctx')
		ctx = int(argv[i + 1])
		del argv[i:i + 2]
	bos = 'model'
	if '--bos' in argv:
		i = argv.index('--bos')
		bos = argv[i + 1]
		del argv[i:i + 2]
	if len(argv) != 3:
		sys.stderr.write(__doc__)
		return 2
	path, tok_path, out = argv
	if path.endswith('.gguf'):
		cfg, W = load.load(path, np.float64)
		base = getattr(cfg, 'model_class', M.Model)
	else:
		W = UTHTensors(path)
		cfg = config(path, W)
		base = M.Model
	if bos != 'model':
		cfg.bos = None if bos == 'none' else int(bos)
	toks = [int(t) for t in open(tok_path).read().split()]
	m = type('Recording', (Recorder, base), {})(cfg, W)
	for i in range(0, len(toks) - 1, ctx):
		m.reset()
		m.forward(([cfg.bos] if cfg.bos is not None else []) + toks[i:i + ctx])
	with open(out + '.tmp', 'wb') as f:
		keys = [k for k in m.sums if not k.endswith('ffn_gate_inp.weight')]
		f.write(struct.pack('<i', len(keys)))
		for k in keys:
			v = m.mean_square(k).astype('<f4')
			kb = k.encode()
			f.write(struct.pack('<i', len(kb)) + kb + struct.pack('<ii', 1, v.size))
			f.write(v.tobytes())
	os.replace(out + '.tmp', out)
	print('%d tensors, %d tokens' % (len(keys), len(toks)))
	return 0


if __name__ == '__main__':
	sys.exit(main(sys.argv[1:]))
