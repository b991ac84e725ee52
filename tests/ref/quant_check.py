#!/usr/bin/env python3
"""quant_check.py -- independent checks of moe-quant's output (numpy).

  quant_check.py regguf ORIG.gguf QUANT.uth OUT.gguf
      Write OUT.gguf: ORIG.gguf's metadata with the tensors (types and bytes)
      of the quantised UTH file, per-expert tensors stacked back into GGUF's
      ffn_*_exps, so the numpy reference (vs_engine.py) runs the exact weights
      the engine runs.

  quant_check.py errors F32.uth QUANT.uth TYPE [TENSOR...]
      Decode the quantised tensors with tests/ref/quants.py (not the C
      decoders) and compare them with the F32 originals:
        - scale-only 32-element types (q4_0 q5_0 q8_0 iq4_nl): a brute-force
          search over 400 scales per block (nearest codes, least-squares
          refit) gives a near-optimal error E*; moe-quant must be within 2%
          of it and below round-to-nearest (ggml's reference rule, written
          here from its definition);
        - every type: the relative squared error below the bound of a
          uniform grid with the type's levels over each block's range.
      Prints one TAP-style line per check; exit 1 if any fails.

Shares no code with the C library: the UTH directory is parsed from
man/uth.5's field table, blocks are decoded by quants.py.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quants  # noqa: E402


def read_uth(path):
	"""{name: (dtype, ne list, bytes)} in directory order."""
	b = open(path, 'rb').read()
	if b[:8] != b'UTH\0v1\0\0':
		raise SystemExit('%s: not a UTH file' % path)
	n, = struct.unpack_from('<Q', b, 24)
	names_off, = struct.unpack_from('<Q', b, 48)
	out = {}
	for i in range(n):
		r = 4096 + 64 * i
		dt, nd = struct.unpack_from('<HB', b, r)
		noff, = struct.unpack_from('<I', b, r + 4)
		ne = list(struct.unpack_from('<4I', b, r + 8))[:nd]
		off, size = struct.unpack_from('<QQ', b, r + 24)
		nlen, = struct.unpack_from('<H', b, r + 50)
		name = b[names_off + noff:names_off + noff + nlen].decode()
		out[name] = (dt, ne, b[off:off + size])
	return out


# --- regguf -------------------------------------------------------------------------

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(b, p, vt):
	if vt == 8:  # string
		n, = struct.unpack_from('<Q', b, p)
		return p + 8 + n
	if vt == 9:  # array
		et, n = struct.unpack_from('<IQ', b, p)
		p += 12
		for _ in range(n):
			p = _skip_value(b, p, et)
		return p
	return p + _SCALAR[vt]


def regguf(orig, quant, out):
	b = open(orig, 'rb').read()
	magic, ver, nt, nkv = struct.unpack_from('<4sIQQ', b, 0)
	assert magic == b'GGUF'
	p = 24
	align = 32
	for _ in range(nkv):
		kl, = struct.unpack_from('<Q', b, p)
		key = b[p + 8:p + 8 + kl].decode()
		p += 8 + kl
		vt, = struct.unpack_from('<I', b, p)
		p += 4
		if key == 'general.alignment':
			align, = struct.unpack_from('<I', b, p)
		p = _skip_value(b, p, vt)
	kv_bytes = b[24:p]
	infos = []
	for _ in range(nt):
		nl, = struct.unpack_from('<Q', b, p)
		name = b[p + 8:p + 8 + nl].decode()
		p += 8 + nl
		nd, = struct.unpack_from('<I', b, p)
		ne = list(struct.unpack_from('<%dQ' % nd, b, p + 4))
		p += 4 + 8 * nd + 4 + 8
		infos.append((name, ne))
	U = read_uth(quant)
	tensors = []
	for name, ne in infos:
		if name in U:
			dt, _, data = U[name]
		elif '_exps.' in name:
			# blk.L.ffn_up_exps.weight <- blk.L.ffn_up.E.weight, E = 0..
			stem, rest = name.split('_exps.', 1)
			parts, dts = [], set()
			for e in range(ne[2]):
				dt, _, data = U['%s.%d.%s' % (stem, e, rest)]
				parts.append(data)
				dts.add(dt)
			if len(dts) != 1:
				raise SystemExit('%s: experts of %s have different types %s'
						 % (quant, name, sorted(dts)))
			dt, data = dts.pop(), b''.join(parts)
		else:
			raise SystemExit('%s: no tensor for %s' % (quant, name))
		tensors.append((name, ne, dt, data))
	with open(out + '.tmp', 'wb') as f:
		f.write(struct.pack('<4sIQQ', b'GGUF', 3, len(tensors), nkv))
		f.write(kv_bytes)
		off = 0
		offs = []
		for name, ne, dt, data in tensors:
			off = (off + align - 1) // align * align
			offs.append(off)
			nb = name.encode()
			f.write(struct.pack('<Q', len(nb)) + nb + struct.pack('<I', len(ne)))
			f.write(struct.pack('<%dQ' % len(ne), *ne) + struct.pack('<IQ', dt, off))
			off += len(data)
		f.write(b'\0' * ((-f.tell()) % align))
		start = f.tell()
		for (name, ne, dt, data), o in zip(tensors, offs):
			f.write(b'\0' * (start + o - f.tell()))
			f.write(data)
		f.write(b'\0' * ((-f.tell()) % align))
	os.replace(out + '.tmp', out)


# --- errors -------------------------------------------------------------------------

# scale-only 32-element types: code range (or code book), decoder's rule
KV_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
		     1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)
SCALE_ONLY = {
	'q4_0': ('grid', -8, 7), 'q5_0': ('grid', -16, 15), 'q8_0': ('grid', -127, 127),
	'iq4_nl': ('book', None, None),
}
# levels of each type's grid for the analytic bound
LEVELS = {'q2_k': 4, 'q3_k': 8, 'q4_0': 16, 'q4_1': 16, 'q4_k': 16, 'iq4_nl': 16,
	  'iq4_xs': 16, 'mxfp4': 16, 'q5_0': 32, 'q5_1': 32, 'q5_k': 32, 'q6_k': 64,
	  'q8_0': 255}


def f16(v):
	return np.asarray(v, dtype=np.float16).astype(np.float64)


def codes(x, d, kind, lo, hi):
	"""Nearest codes for blocks x (B, 32) at scales d (B, 1): decoded values."""
	with np.errstate(divide='ignore', invalid='ignore'):
		v = np.where(d != 0, x / d, 0.0)
	if kind == 'grid':
		return np.clip(np.rint(v), lo, hi) * d
	idx = np.abs(v[..., None] - KV_IQ4NL).argmin(-1)
	return KV_IQ4NL[idx] * d


def brute(x, kind, lo, hi, n=400):
	"""Per block the least error over n scales around the extreme's, each
	refitted by least squares and rounded to f16 as stored."""
	ext = x[np.arange(len(x)), np.abs(x).argmax(1)][:, None]
	ends = [lo, hi] if kind == 'grid' else [-127.0, 113.0]
	best = np.full(len(x), np.inf)
	for end in ends:
		for s in np.linspace(0.6, 1.4, n // 2):
			d0 = ext / (end * s)
			y = codes(x, d0, kind, lo, hi)
			q = np.where(d0 != 0, y / np.where(d0 != 0, d0, 1), 0)
			num, den = (x * q).sum(1, keepdims=True), (q * q).sum(1, keepdims=True)
			d = f16(np.where(den > 0, num / np.where(den > 0, den, 1), 0))
			y = codes(x, d, kind, lo, hi)
			best = np.minimum(best, ((x - y) ** 2).sum(1))
	return best.sum()


def rtn(x, kind, lo, hi):
	"""ggml's round-to-nearest rule: the extreme maps to the negative end."""
	ext = x[np.arange(len(x)), np.abs(x).argmax(1)][:, None]
	end = lo if kind == 'grid' else -127.0
	if kind == 'grid' and lo == -127:
		d = f16(np.abs(ext) / 127.0)
	else:
		d = f16(ext / end)
	return ((x - codes(x, d, kind, lo, hi)) ** 2).sum()


def errors(f32_path, q_path, tname, names):
	F, Q = read_uth(f32_path), read_uth(q_path)
	fails = 0
	tid = quants.BY_NAME.get(tname.upper())
	for name in names:
		dt0, ne, raw = F[name]
		assert dt0 == 0, '%s: %s is not f32' % (f32_path, name)
		x = np.frombuffer(raw, dtype='<f4').astype(np.float64)
		dt, _, qraw = Q[name]
		if dt != tid:
			print('not ok - %s: %s is type %d, not %s' % (tname, name, dt, tname))
			fails += 1
			continue
		y = quants.decode(np.frombuffer(qraw, dtype=np.uint8), dt, x.size).astype(np.float64)
		err = ((x - y) ** 2).sum()
		rel = err / (x ** 2).sum()
		# uniform grid of L levels over each block's range: step^2 / 12 per
		# element; x1.5 for f16 scales, clipping and sub-scale grids
		bs = 32 if tname in SCALE_ONLY or tname in ('q4_1', 'q5_1', 'mxfp4') else 256
		blk = x.reshape(-1, bs)
		step = (blk.max(1) - blk.min(1)) / (LEVELS[tname] - 1)
		bound = 1.5 * (step ** 2 / 12.0).sum() * bs
		mxfp = tname == 'mxfp4'
		if mxfp:  # FP4: relative steps, the top binade is 2 units wide
			bound = 1.5 * ((np.abs(blk).max(1) / 3.0) ** 2 / 12.0).sum() * bs
		ok = err <= bound
		fails += not ok
		print('%s - %s %s: squared error %.4g <= uniform-grid bound %.4g (relative %.3g)'
		      % ('ok' if ok else 'not ok', tname, name, err, bound, rel))
		if tname in SCALE_ONLY:
			kind, lo, hi = SCALE_ONLY[tname]
			blk = x.reshape(-1, 32)
			b, r = brute(blk, kind, lo, hi), rtn(blk, kind, lo, hi)
			ok = err <= 1.02 * b
			fails += not ok
			print('%s - %s %s: error %.5g within 2%% of brute force %.5g'
			      % ('ok' if ok else 'not ok', tname, name, err, b))
			ok = err < r
			fails += not ok
			print('%s - %s %s: error %.5g below round-to-nearest %.5g (%.1f%% lower)'
			      % ('ok' if ok else 'not ok', tname, name, err, r, 100 * (1 - err / r)))
	return fails


# --- recipes ----------------------------------------------------------------------
# The table of man/moe-quant.1, restated: recipe -> (base, high, rules);
# a rule maps a role to a function of (layer i, n_layer n) -> type.

def _more(i, n):
	return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


RECIPES = {
	'q2_k': ('q2_k', 'q4_k', {'attn_v': lambda i, n: 'q3_k', 'ffn_down': lambda i, n: 'q3_k',
				  'attn_output': lambda i, n: 'q3_k'}),
	'q3_k_s': ('q3_k', 'q4_k', {}),
	'q3_k_m': ('q3_k', 'q5_k', {
		'attn_v': lambda i, n: 'q5_k' if i < 2 else 'q4_k',
		'ffn_down': lambda i, n: 'q5_k' if i < n // 16 else ('q4_k' if _more(i, n) else 'q3_k'),
		'attn_output': lambda i, n: 'q4_k'}),
	'q3_k_l': ('q3_k', 'q5_k', {'attn_v': lambda i, n: 'q5_k', 'ffn_down': lambda i, n: 'q5_k',
				    'attn_output': lambda i, n: 'q5_k'}),
	'q4_k_s': ('q4_k', 'q5_k', {'attn_v': lambda i, n: 'q5_k' if i < 4 else 'q4_k',
				    'ffn_down': lambda i, n: 'q5_k' if i < n // 8 else 'q4_k'}),
	'q4_k_m': ('q4_k', 'q6_k', {'attn_v': lambda i, n: 'q6_k' if _more(i, n) else 'q4_k',
				    'ffn_down': lambda i, n: 'q6_k' if _more(i, n) else 'q4_k'}),
	'q5_k_s': ('q5_k', 'q6_k', {}),
	'q5_k_m': ('q5_k', 'q6_k', {'attn_v': lambda i, n: 'q6_k' if _more(i, n) else 'q5_k',
				    'ffn_down': lambda i, n: 'q6_k' if _more(i, n) else 'q5_k'}),
	'q6_k': ('q6_k', 'q6_k', {}),
	'q8_0': ('q8_0', 'q8_0', {'output': lambda i, n: 'q8_0'}),
	'iq4_xs': ('iq4_xs', 'q5_k', {'attn_v': lambda i, n: 'q4_k'}),
}
MATRIX = {'token_embd', 'output', 'attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_qkv',
	  'ffn_gate', 'ffn_up', 'ffn_down', 'ffn_gate_shexp', 'ffn_up_shexp', 'ffn_down_shexp'}
BPW = {'q2_k': 2.625, 'q3_k': 3.4375, 'q4_k': 4.5, 'q5_k': 5.5, 'q6_k': 6.5625, 'q8_0': 8.5,
       'iq4_xs': 4.25}
BLOCK = {'q2_k': 256, 'q3_k': 256, 'q4_k': 256, 'q5_k': 256, 'q6_k': 256, 'iq4_xs': 256,
	 'q8_0': 32, 'q4_0': 32, 'q5_0': 32, 'q5_1': 32, 'iq4_nl': 32}
FALLBACK = {'q2_k': 'iq4_nl', 'q3_k': 'iq4_nl', 'iq4_xs': 'iq4_nl', 'q4_k': 'q5_0',
	    'q5_k': 'q5_1', 'q6_k': 'q8_0'}


def expected(recipe, name, src, ne0, n_layer, n_expert=0):
	parts = name.split('.')
	if parts[0] == 'blk':
		i, role = int(parts[1]), parts[2]
	else:
		i, role = 0, parts[0]
	if role not in MATRIX or len(ne0) < 2:
		return src
	base, high, rules = RECIPES[recipe]
	ty = base
	if role == 'output':
		ty = 'q6_k'
	r = 'attn_v' if role == 'attn_qkv' else 'ffn_down' if role == 'ffn_down_shexp' else role
	if r in rules:
		ty = rules[r](i, n_layer)
	if n_expert >= 8 and role in ('attn_k', 'attn_v', 'attn_qkv'):
		ty = 'q8_0'
	if n_expert >= 8 and role == 'attn_output' and BPW.get(ty, 0) < BPW['q5_k']:
		ty = 'q5_k'
	if role.endswith('_shexp') and BPW[high] > BPW[ty]:
		ty = high
	if ne0[0] % BLOCK[ty]:
		ty = FALLBACK.get(ty, ty)
		if ne0[0] % BLOCK[ty]:
			ty = 'f16'
	return ty


def recipes(recipe, dry_out):
	rows = []
	for line in open(dry_out):
		if ' -> ' not in line or '[' not in line:
			continue
		f = line.split()
		shape = [int(v) for v in line[line.index('[') + 1:line.index(']')].split(',')]
		rows.append((f[0], f[1], f[3], shape))
	n_layer = 1 + max([int(r[0].split('.')[1]) for r in rows if r[0].startswith('blk.')] + [-1])
	# routed experts: blk.L.ffn_gate.E.weight
	n_expert = 1 + max([int(r[0].split('.')[3]) for r in rows
			    if r[0].startswith('blk.') and r[0].split('.')[3].isdigit()] + [-1])
	bad = [(n, got, expected(recipe, n, src, sh, n_layer, n_expert))
	       for n, src, got, sh in rows if got != expected(recipe, n, src, sh, n_layer, n_expert)]
	for n, got, want in bad[:10]:
		print('# %s: %s, the table says %s' % (n, got, want))
	print('%s - %s: %d tensors as the table says (%d differ)'
	      % ('not ok' if bad else 'ok', recipe, len(rows) - len(bad), len(bad)))
	return 1 if bad else 0


def main(argv):
	if len(argv) == 3 and argv[0] == 'recipes':
		return recipes(argv[1], argv[2])
	if len(argv) == 4 and argv[0] == 'regguf':
		regguf(*argv[1:])
		return 0
	if len(argv) >= 4 and argv[0] == 'errors':
		return 1 if errors(argv[1], argv[2], argv[3], argv[4:]) else 0
	sys.stderr.write(__doc__)
	return 2


if __name__ == '__main__':
	sys.exit(main(sys.argv[1:]))
