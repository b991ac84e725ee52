#!/usr/bin/python3
# tests/ref/selftest.py — checks of the reference itself, one per subcommand
# (tests/cli/t0400-ref-selftest.sh runs them; exit 0 = pass, a diagnostic on
# stderr otherwise):
#
#   quants             every block decoder of quants.py against (a) blocks
#                      built by hand with known values, (b) a plain
#                      per-element loop written from the format description,
#                      (c) the generator's own decoders where it has them
#   rope               rotations at hand-computed angles: both pairings,
#                      linear and YaRN scaling
#   hand               tiny models written as GGUF whose logits are worked
#                      out by hand below: attention with RoPE and a causal
#                      mask, SwiGLU, and MoE routing with / without top-k
#                      renormalisation and Qwen2-MoE's gated shared expert
#   cache MODEL        the KV-cache path equals full recomputation
#   compare A B TOL    max |A - B| <= TOL * max |B| for two .npy files (or
#                      text files of numbers, as the engine's test helper
#                      prints them)
#   emulate QMODEL FMODEL
#                      --emulate: the activation quantisers (actquant.py)
#                      on rows worked out by hand, bytes and values; the
#                      float16 rounding of kv-f16; the tape oracle takes
#                      the engine's side at ties only; on a K-quant GGUF
#                      and an F32 GGUF: which products see quantised
#                      inputs, the cache holds float16
#   family2 DIR, hand2 DIR, yarn-scale GGUF HF, mla MODEL, window MODEL
#                      the second family of architectures (deepseek2,
#                      gpt-oss, phimoe, granitemoe): see selftest2.py
#   rope-meta IN OUT TYPE FACTOR
#                      copy a gen-model GGUF + HF pair (IN.gguf, IN.hf) to
#                      OUT.gguf / OUT.hf with rope scaling TYPE (linear, yarn)
#                      declared the way each ecosystem writes it
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True     # keep the source tree clean
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import actquant as A  # noqa: E402
import load  # noqa: E402
import model as M  # noqa: E402
import quants as Q  # noqa: E402
import selftest2 as S2  # noqa: E402
from moegen import ggml as gen_ggml  # noqa: E402  (load.py put scripts/ on the path)
from moegen import gguf as gen_gguf  # noqa: E402
from moegen import reader as gen_reader  # noqa: E402


class Fail(Exception):
	pass


def expect_close(what, got, want, tol=1e-6):
	got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
	if got.shape != want.shape:
		raise Fail('%s: shape %s, expected %s' % (what, got.shape, want.shape))
	err = np.abs(got - want).max() if got.size else 0.0
	if not err <= tol * max(1.0, np.abs(want).max()):
		i = int(np.argmax(np.abs(got - want)))
		raise Fail('%s: max error %g at %d (got %r, want %r)'
			   % (what, err, i, got.reshape(-1)[i], want.reshape(-1)[i]))


def f16_bytes(x):
	return list(np.array([x], dtype='<f2').view(np.uint8))


# --- quants -----------------------------------------------------------------------

def hand_blocks():
	"""(type, block bytes, expected values) built by hand from the format
	descriptions; the comments give the values each field encodes."""
	cases = []
	j = np.arange(16)
	# Q4_1: d = 0.5, m = -1; byte j holds q = j (low) and 15 - j (high)
	qs = j | ((15 - j) << 4)
	want = np.concatenate([0.5 * j - 1, 0.5 * (15 - j) - 1])
	cases.append((3, f16_bytes(0.5) + f16_bytes(-1.0) + list(qs), want))
	# Q5_0: d = 0.25, low nibbles as in Q4_1, 5th bits set for odd elements:
	# qh = 0xAAAAAAAA; value = d * (q - 16)
	lo = np.concatenate([j, 15 - j])
	hi = np.arange(32) % 2
	want = 0.25 * ((lo | (hi << 4)) - 16)
	qh = [0xAA] * 4
	cases.append((6, f16_bytes(0.25) + qh + list(qs), want))
	# Q5_1: d = 2, m = 0.5, 5th bit set for elements 0-7 only (qh = 0x000000FF)
	hi = (np.arange(32) < 8).astype(int)
	want = 2.0 * (lo | (hi << 4)) + 0.5
	cases.append((7, f16_bytes(2.0) + f16_bytes(0.5) + [0xFF, 0, 0, 0] + list(qs), want))
	# IQ4_NL: d = 1, indices j / 15 - j pick the code book levels
	levels = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
	want = np.array([levels[i] for i in lo], dtype=np.float64)
	cases.append((20, f16_bytes(1.0) + list(qs), want))
	# Q2_K: every qs byte 0xE4 = 0b11_10_01_00, so the element 32*j + l of
	# each 128-half has q = j; scale byte s (for elements 16s..16s+15) =
	# (s % 16) | ((s % 4) << 4); d = 0.5, dmin = 0.25:
	# value = 0.5 * (s % 16) * q - 0.25 * (s % 4)
	e = np.arange(256)
	s, q = e // 16, (e // 32) % 4
	want = 0.5 * (s % 16) * q - 0.25 * (s % 4)
	sc = [(i % 16) | ((i % 4) << 4) for i in range(16)]
	cases.append((10, sc + [0xE4] * 64 + f16_bytes(0.5) + f16_bytes(0.25), want))
	# Q3_K: qs bytes 0xE4 again (low 2 bits = j as above); hmask bytes 0x0F:
	# the high bit (bit 4n + j of hmask[l]) is set in the first 128-half
	# only, so q = j there and j - 4 in the second half; all 16 scales 6-bit
	# value 33 (scale 1) except scale 5 = 63 (31) and scale 12 = 0 (-32).
	# Packing: low nibbles of scales 0-7 in bytes 0-7 low, 8-15 high;
	# 2 high bits of scale j in bits 2*(j // 4) of byte 8 + j % 4.
	six = [33] * 16
	six[5], six[12] = 63, 0
	sb = [0] * 12
	for k in range(16):
		sb[k % 8] |= (six[k] & 0xF) << (0 if k < 8 else 4)
		sb[8 + k % 4] |= (six[k] >> 4) << (2 * (k // 4))
	n = e // 128
	q = (e // 32) % 4 - 4 * n
	want = 0.5 * (np.array(six)[e // 16] - 32) * q
	cases.append((11, [0x0F] * 32 + [0xE4] * 64 + sb + f16_bytes(0.5), want))
	# IQ4_XS: d = 0.5; sub-block ib has 6-bit scale 32 + ib + 1 (so ib + 1
	# after the -32): low nibbles in scales_l, the 2 high bits (all 2 = 0b10)
	# in scales_h; qs of every sub-block as in IQ4_NL.
	six = [32 + ib + 1 for ib in range(8)]
	sl = [(six[2 * i] & 0xF) | ((six[2 * i + 1] & 0xF) << 4) for i in range(4)]
	shv = sum((x >> 4) << (2 * ib) for ib, x in enumerate(six))
	want = np.concatenate([0.5 * (ib + 1) * np.array([levels[i] for i in lo])
			       for ib in range(8)])
	cases.append((23, f16_bytes(0.5) + [shv & 0xFF, shv >> 8] + sl + list(qs) * 8, want))
	return cases


def loop_decode(t, blk):
	"""One block decoded element by element, following the loops of the
	format description literally (slow, obvious)."""
	b = [int(x) for x in blk]

	def f16(o):
		return float(np.frombuffer(bytes(b[o:o + 2]), dtype='<f2')[0])

	def i8(x):
		return x - 256 if x > 127 else x
	y = [0.0] * Q.TYPES[t][1]
	if t in (2, 3, 6, 7, 20):                       # 32-element nibble formats
		d = f16(0)
		m = f16(2) if t in (3, 7) else 0.0
		qo = {2: 2, 3: 4, 6: 6, 7: 8, 20: 2}[t]
		qh = 0
		if t in (6, 7):
			qh = b[qo - 4] | b[qo - 3] << 8 | b[qo - 2] << 16 | b[qo - 1] << 24
		for k in range(16):
			x0, x1 = b[qo + k] & 0xF, b[qo + k] >> 4
			x0 |= ((qh >> k) & 1) << 4
			x1 |= ((qh >> (k + 16)) & 1) << 4
			if t == 20:
				y[k], y[k + 16] = d * Q.IQ4_LEVELS[x0], d * Q.IQ4_LEVELS[x1]
			else:
				off = {2: 8, 6: 16}.get(t, 0)
				y[k], y[k + 16] = d * (x0 - off) + m, d * (x1 - off) + m
	elif t == 8:
		d = f16(0)
		y = [d * i8(b[2 + k]) for k in range(32)]
	elif t == 10:                                   # Q2_K
		d, dmin = f16(80), f16(82)
		k = 0
		for n in range(2):
			for j in range(4):
				for half in range(2):
					sc = b[8 * n + 2 * j + half]
					for l in range(16):
						q = (b[16 + 32 * n + 16 * half + l] >> (2 * j)) & 3
						y[k] = d * (sc & 0xF) * q - dmin * (sc >> 4)
						k += 1
	elif t == 11:                                   # Q3_K
		d = f16(108)
		sc = []
		for j in range(16):
			lo = b[96 + j] & 0xF if j < 8 else b[96 + j - 8] >> 4
			hi = (b[96 + 8 + j % 4] >> (2 * (j // 4))) & 3
			sc.append((lo | hi << 4) - 32)
		k = 0
		for n in range(2):
			for j in range(4):
				for l in range(32):
					q = (b[32 + 32 * n + l] >> (2 * j)) & 3
					if not (b[l] >> (4 * n + j)) & 1:
						q -= 4
					y[k] = d * sc[8 * n + 2 * j + l // 16] * q
					k += 1
	elif t in (12, 13):                             # Q4_K, Q5_K
		d, dmin = f16(0), f16(2)
		s = b[4:16]

		def scale_min(j):
			if j < 4:
				return s[j] & 63, s[j + 4] & 63
			return ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
				(s[j + 4] >> 4) | ((s[j] >> 6) << 4))
		qo = 16 if t == 12 else 48
		k = 0
		for c in range(4):
			for half in range(2):
				sc, mn = scale_min(2 * c + half)
				for l in range(32):
					q = (b[qo + 32 * c + l] >> (4 * half)) & 0xF
					if t == 13:
						q += 16 * ((b[16 + l] >> (2 * c + half)) & 1)
					y[k] = d * sc * q - dmin * mn
					k += 1
	elif t == 14:                                   # Q6_K
		d = f16(208)
		for n in range(2):
			for l in range(32):
				ql, qh = b[64 * n:64 * n + 64], b[128 + 32 * n + l]
				qv = [(ql[l] & 0xF) | ((qh >> 0) & 3) << 4,
				      (ql[l + 32] & 0xF) | ((qh >> 2) & 3) << 4,
				      (ql[l] >> 4) | ((qh >> 4) & 3) << 4,
				      (ql[l + 32] >> 4) | ((qh >> 6) & 3) << 4]
				for kk in range(4):
					e = 128 * n + 32 * kk + l
					y[e] = d * i8(b[192 + e // 16]) * (qv[kk] - 32)
	elif t == 23:                                   # IQ4_XS
		d = f16(0)
		sh = b[2] | b[3] << 8
		for ib in range(8):
			ls = (b[4 + ib // 2] >> (4 * (ib % 2))) & 0xF
			ls |= ((sh >> (2 * ib)) & 3) << 4
			for j in range(16):
				x = b[8 + 16 * ib + j]
				y[32 * ib + j] = d * (ls - 32) * Q.IQ4_LEVELS[x & 0xF]
				y[32 * ib + j + 16] = d * (ls - 32) * Q.IQ4_LEVELS[x >> 4]
	else:
		raise Fail('loop_decode: type %d' % t)
	return np.array(y, dtype=np.float64)


# byte offsets of each block's f16 fields (kept finite in random blocks)
F16_FIELDS = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108],
	      12: [0, 2], 13: [0, 2], 14: [208], 20: [0], 23: [0]}


def random_blocks(t, n, rng):
	bb = Q.TYPES[t][2]
	b = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
	for o in F16_FIELDS[t]:
		v = np.asarray(rng.uniform(-2, 2, n), dtype='<f2')
		b[:, o:o + 2] = v.view(np.uint8).reshape(n, 2)
	return b


def test_quants():
	for t, blk, want in hand_blocks():
		got = Q.decode(np.array(blk, dtype=np.uint8), t, Q.TYPES[t][1])
		expect_close('%s hand-built block' % Q.type_name(t), got, want, 0)
		expect_close('%s hand-built block, loop decoder' % Q.type_name(t),
			     loop_decode(t, blk), want, 0)
	rng = np.random.default_rng(4)
	for t in F16_FIELDS:
		b = random_blocks(t, 6, rng)
		got = Q.decode(b.reshape(-1), t, 6 * Q.TYPES[t][1]).reshape(6, -1)
		for i in range(6):
			expect_close('%s random block %d vs loop decoder' % (Q.type_name(t), i),
				     got[i], loop_decode(t, b[i]), 1e-6)
		if t in gen_ggml.DEQUANT:
			other = gen_ggml.decode(b.reshape(-1), t)
			expect_close('%s vs the generator\'s decoder' % Q.type_name(t),
				     got.reshape(-1), other, 0)
	# the float types, with round numbers
	x = np.array([1.5, -2.25, 0.0, 65504.0], dtype=np.float32)
	expect_close('F32', Q.decode(x.view(np.uint8), 0, 4), x, 0)
	expect_close('F16', Q.decode(x.astype('<f2').view(np.uint8), 1, 4), x, 0)
	bf = np.array([0x3FC0, 0xC010, 0x0000, 0x4780], dtype='<u2')   # 1.5 -2.25 0 65536
	expect_close('BF16', Q.decode(bf.view(np.uint8), 30, 4), [1.5, -2.25, 0, 65536], 0)
	for t, (name, bs, bb, _) in Q.TYPES.items():
		if t in gen_ggml.TRAITS and gen_ggml.TRAITS[t][1:] != (bs, bb):
			raise Fail('%s: block %d/%d bytes here, %s in the generator'
				   % (name, bs, bb, gen_ggml.TRAITS[t][1:]))


# --- rope -------------------------------------------------------------------------

def test_rope():
	p = 3.0
	x = np.array([[[1.0, 0.0, 1.0, 0.0]]])          # (1 token, 1 head, 4)
	# interleaved: pairs (0,1) at angle p, (2,3) at p * 100^(-2/4) = p / 10
	r = M.Rope(4, base=100.0, style='interleaved')
	expect_close('interleaved', r.apply(x, [p])[0, 0],
		     [math.cos(p), math.sin(p), math.cos(p / 10), math.sin(p / 10)], 1e-12)
	# neox: pairs (0,2) and (1,3); x = (1, 1, 0, 0) puts a 1 in each pair's first
	r = M.Rope(4, base=100.0, style='neox')
	expect_close('neox', r.apply(np.array([[[1.0, 1.0, 0.0, 0.0]]]), [p])[0, 0],
		     [math.cos(p), math.cos(p / 10), math.sin(p), math.sin(p / 10)], 1e-12)
	# direction: (0, 1) at angle p goes to (-sin p, cos p)
	r = M.Rope(2, base=100.0, style='interleaved')
	expect_close('direction', r.apply(np.array([[[0.0, 1.0]]]), [p])[0, 0],
		     [-math.sin(p), math.cos(p)], 1e-12)
	# dimensions past n_dims are left alone
	r = M.Rope(2, base=100.0, style='neox')
	expect_close('partial', r.apply(x, [p])[0, 0], [math.cos(p), math.sin(p), 1, 0], 1e-12)
	# linear x4: every angle divided by 4
	r = M.Rope(4, base=100.0, style='interleaved', scaling='linear', factor=4)
	expect_close('linear', r.apply(x, [p])[0, 0],
		     [math.cos(p / 4), math.sin(p / 4), math.cos(p / 40), math.sin(p / 40)], 1e-12)
	# YaRN x4, d = 4, base 10000, original context 4096, betas 32 / 1:
	#   corr_dim(32) = 4 ln(4096 / (64 pi)) / (2 ln 10000) = 0.654 -> low 0
	#   corr_dim(1)  = 4 ln(4096 / (2 pi)) / (2 ln 10000) = 1.407  -> high 2
	# pair 0: ramp 0 -> original angle p; pair 1: ramp 1/2 -> half the
	# original angle p / 100 and half the interpolated p / 400: 0.625 p / 100;
	# both scaled by 1 + 0.1 ln 4.
	r = M.Rope(4, base=10000.0, style='interleaved', scaling='yarn', factor=4, n_ctx_orig=4096)
	ms = 1 + 0.1 * math.log(4)
	a1 = 0.625 * p / 100
	expect_close('yarn', r.apply(x, [p])[0, 0],
		     ms * np.array([math.cos(p), math.sin(p), math.cos(a1), math.sin(a1)]), 1e-12)


# --- hand-computed models -----------------------------------------------------------

def write_gguf(path, arch, kv, tensors):
	"""tensors: [(name, numpy array (out, in) or 1-D)], stored F32."""
	w = gen_gguf.GGUFWriter(path)
	w.add('general.architecture', gen_reader.STRING, arch)
	for k, v in kv.items():
		vt = gen_reader.FLOAT32 if isinstance(v, float) else gen_reader.UINT32
		w.add(arch + '.' + k, vt, v)
	for name, a in tensors:
		w.add_tensor(name, list(reversed(np.shape(a))), gen_ggml.F32)
	w.begin()
	for name, a in tensors:
		w.write(name, np.ascontiguousarray(a, dtype='<f4').view(np.uint8).reshape(-1))
	w.finish()


def run(path, tokens):
	cfg, W = load.load_gguf(path)
	return M.Model(cfg, W).forward(tokens)


def hand_dense(d):
	"""llama, n_embd 2, one head of 2, one layer, vocabulary 3, prompt [0, 1].

	embeddings e0 = (1, 0), e1 = (0, 1), e2 = (1, 1); all norm weights 1,
	eps 0; Wq = Wk = Wv = Wo = I; FFN gate = up = down = I; output rows
	(1, 0), (0, 1), (1, -1); RoPE base 10000 over 2 dims: angle = position.

	Position 0: x = (1, 0), n = x / rms(x) = (sqrt2, 0).  It sees only
	itself: attn = v0 = (sqrt2, 0); h = (1 + sqrt2, 0); ffn input n = (sqrt2, 0),
	ffn = silu(sqrt2) * sqrt2 in dimension 0; final norm again (sqrt2, 0):
	logits (sqrt2, 0, sqrt2).

	Position 1: x = (0, 1), n = (0, sqrt2).  q1 = k1 = (0, sqrt2) rotated by
	1 radian = sqrt2 (-sin 1, cos 1); q0 = k0 = (sqrt2, 0) (angle 0).
	scores / sqrt(2): s0 = q1.k0 / sqrt2 = -sqrt2 sin 1, s1 = 2 / sqrt2 = sqrt2;
	a = softmax(s0, s1); attn = a0 v0 + a1 v1 = sqrt2 (a0, a1);
	h = (sqrt2 a0, 1 + sqrt2 a1); FFN of n = h / rms(h): silu(n) * n per
	dimension; out = h + ffn; logits = rows . (out / rms(out))."""
	path = os.path.join(d, 'dense.gguf')
	I = np.eye(2)
	T = [('token_embd.weight', np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float64)),
	     ('blk.0.attn_norm.weight', np.ones(2)), ('blk.0.attn_q.weight', I),
	     ('blk.0.attn_k.weight', I), ('blk.0.attn_v.weight', I),
	     ('blk.0.attn_output.weight', I), ('blk.0.ffn_norm.weight', np.ones(2)),
	     ('blk.0.ffn_gate.weight', I), ('blk.0.ffn_up.weight', I), ('blk.0.ffn_down.weight', I),
	     ('output_norm.weight', np.ones(2)),
	     ('output.weight', np.array([[1, 0], [0, 1], [1, -1]], dtype=np.float64))]
	kv = {'embedding_length': 2, 'block_count': 1, 'attention.head_count': 1,
	      'attention.head_count_kv': 1, 'feed_forward_length': 2, 'context_length': 64,
	      'rope.freq_base': 10000.0, 'attention.layer_norm_rms_epsilon': 0.0}
	write_gguf(path, 'llama', kv, T)
	s2 = math.sqrt(2)

	def silu(v):
		return v / (1 + math.exp(-v))

	def unit(v):                 # v / rms(v) for a 2-vector
		r = math.sqrt((v[0] ** 2 + v[1] ** 2) / 2)
		return (v[0] / r, v[1] / r)

	def logits(o):
		n = unit(o)
		return [n[0], n[1], n[0] - n[1]]
	# position 0
	h0 = (1 + s2, 0.0)
	n0 = unit(h0)
	out0 = (h0[0] + silu(n0[0]) * n0[0], h0[1] + silu(n0[1]) * n0[1])
	# position 1
	s0, s1 = -s2 * math.sin(1.0), s2
	z = math.exp(s0) + math.exp(s1)
	a0, a1 = math.exp(s0) / z, math.exp(s1) / z
	h1 = (s2 * a0, 1 + s2 * a1)
	n1 = unit(h1)
	out1 = (h1[0] + silu(n1[0]) * n1[0], h1[1] + silu(n1[1]) * n1[1])
	want = np.array([logits(out0), logits(out1)])
	expect_close('dense llama, by hand', run(path, [0, 1]), want, 1e-12)
	# the same one token at a time through the cache
	cfg, W = load.load_gguf(path)
	m = M.Model(cfg, W)
	got = np.concatenate([m.forward([0]), m.forward([1])])
	expect_close('dense llama, by hand, token by token', got, want, 1e-12)


def moe_model(d, arch, shexp=False):
	"""One layer, n_embd 2, 3 experts, 2 used, attention switched off
	(Wo = 0).  Prompt [0]: x = (1, 0), n = x / rms(x) = (sqrt2, 0).

	Router rows (0, 0), (1/2, 0), (1, 0) (exact in F32): logits 0,
	sqrt2 / 2, sqrt2; softmax p_e = exp(logit_e) / Z; the top 2 are experts
	2 and 1, renormalised p2 / (p1 + p2) and p1 / (p1 + p2).
	Every expert has n_ff 1 with gate and up rows
	(1, 0): its hidden value is silu(sqrt2) * sqrt2 = u; down columns differ:
	expert 0 (5, 5), expert 1 (0, 1), expert 2 (1, 1).

	Shared expert (qwen2moe): gate/up rows (1, 0), down (1, -1), its own
	gate weight (0.5, 0): scaled by sigmoid(0.5 sqrt2)."""
	path = os.path.join(d, '%s-moe.gguf' % arch)
	D, E = 2, 3
	b = 'blk.0.'
	T = [('token_embd.weight', np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float64)),
	     (b + 'attn_norm.weight', np.ones(D)), (b + 'attn_q.weight', np.eye(D)),
	     (b + 'attn_k.weight', np.eye(D)), (b + 'attn_v.weight', np.eye(D))]
	if arch == 'qwen2moe':
		T += [(b + 'attn_q.bias', np.zeros(D)), (b + 'attn_k.bias', np.zeros(D)),
		      (b + 'attn_v.bias', np.zeros(D))]
	T += [(b + 'attn_output.weight', np.zeros((D, D))), (b + 'ffn_norm.weight', np.ones(D)),
	      (b + 'ffn_gate_inp.weight', np.array([[0.0, 0.0], [0.5, 0.0], [1.0, 0.0]])),
	      (b + 'ffn_gate_exps.weight', np.tile([[[1.0, 0.0]]], (E, 1, 1))),
	      (b + 'ffn_up_exps.weight', np.tile([[[1.0, 0.0]]], (E, 1, 1))),
	      (b + 'ffn_down_exps.weight',
	       np.array([[[5.0], [5.0]], [[0.0], [1.0]], [[1.0], [1.0]]]))]
	if shexp:
		T += [(b + 'ffn_gate_inp_shexp.weight', np.array([0.5, 0.0])),
		      (b + 'ffn_gate_shexp.weight', np.array([[1.0, 0.0]])),
		      (b + 'ffn_up_shexp.weight', np.array([[1.0, 0.0]])),
		      (b + 'ffn_down_shexp.weight', np.array([[1.0], [-1.0]]))]
	T += [('output_norm.weight', np.ones(D)),
	      ('output.weight', np.array([[1, 0], [0, 1], [1, -1]], dtype=np.float64))]
	kv = {'embedding_length': D, 'block_count': 1, 'attention.head_count': 1,
	      'attention.head_count_kv': 1, 'feed_forward_length': 1, 'context_length': 64,
	      'rope.freq_base': 10000.0, 'attention.layer_norm_rms_epsilon': 0.0,
	      'expert_count': E, 'expert_used_count': 2}
	write_gguf(path, arch, kv, T)
	return path


def hand_moe(d):
	s2 = math.sqrt(2)
	u = s2 / (1 + math.exp(-s2)) * s2          # silu(sqrt2) * sqrt2

	def logits(v):
		r = math.sqrt((v[0] ** 2 + v[1] ** 2) / 2)
		return [v[0] / r, v[1] / r, (v[0] - v[1]) / r]
	z = 1 + math.exp(s2 / 2) + math.exp(s2)
	p1, p2 = math.exp(s2 / 2) / z, math.exp(s2) / z
	# mixtral (GGUF llama with experts): expert 2 (down (1, 1)) and expert 1
	# (down (0, 1)) with the renormalised weights
	w2, w1 = p2 / (p1 + p2), p1 / (p1 + p2)
	y = (w2 * u, w2 * u + w1 * u)
	want = logits((1 + y[0], y[1]))
	expect_close('mixtral routing, by hand', run(moe_model(d, 'llama'), [0])[0], want, 1e-12)
	# qwen2moe: weights p2, p1 as they come; plus the shared expert
	# (down (1, -1)) gated by sigmoid(0.5 sqrt2)
	g = 1 / (1 + math.exp(-0.5 * s2))
	y = (p2 * u + g * u, p2 * u + p1 * u - g * u)
	want = logits((1 + y[0], y[1]))
	expect_close('qwen2moe routing + shared expert, by hand',
		     run(moe_model(d, 'qwen2moe', shexp=True), [0])[0], want, 1e-12)


def test_hand(d):
	hand_dense(d)
	hand_moe(d)


# --- emulation of the engine's arithmetic (actquant.py) ------------------------------

def block(head, n):
	"""A row of n floats starting with `head`, zeros after."""
	x = np.zeros(n, dtype=np.float32)
	x[:len(head)] = head
	return x


def test_emulate_quantisers():
	# Q8_0: d = amax / 127, codes roundf(x / d) (halves away from zero),
	# d stored as f16.  Block 1: amax 127 -> d = 1.  Block 2: amax 254 ->
	# d = 2, x / d = 2.5, -1.5, 127, 0.5, -0.5, 3.5.  Block 3: amax 1 ->
	# d = 1/127, f16(1/127) = 1032 * 2^-17 = 0.00787353515625 (1/127 =
	# 2^-7 * 1.0078740..., 1.0078740 * 1024 = 1032.06); x / d = 127,
	# 31.75, -12.7.  Block 4: zeros -> d = 0.
	b1 = [127, -63.5, 0.5, -0.5, 2.5, -2.5, 1.49, 100.4]
	q1 = [127, -64, 1, -1, 3, -3, 1, 100]
	b2 = [5, -3, 254, 1, -1, 7]
	q2 = [3, -2, 127, 1, -1, 4]
	b3 = [1.0, 0.25, -0.1]
	q3 = [127, 32, -13]
	x = np.concatenate([block(b1, 32), block(b2, 32), block(b3, 32), block([], 32)])
	d3 = 1032 * 2.0 ** -17
	want_q = [q1, q2, q3, []]
	want_d = [1.0, 2.0, d3, 0.0]
	raw = A.quantize(x, A.Q8_0)
	for i in range(4):
		blk = list(raw[i])
		want = f16_bytes(want_d[i]) + \
			list(block(want_q[i], 32).astype(np.int8).view(np.uint8))
		if blk != want:
			raise Fail('Q8_0 block %d: bytes %s, expected %s' % (i, blk, want))
	want_v = np.concatenate([want_d[i] * block(want_q[i], 32).astype(np.float64)
				 for i in range(4)])
	expect_close('Q8_0 values', A.values(x, A.Q8_0), want_v, 0)
	expect_close('Q8_0 bytes decoded by quants.py', Q.decode(raw, 8, 128), want_v, 0)
	# Q8_1: the same codes and d, plus s = f16(d * sum(q)): block 1
	# sums to 164, block 2 to 132
	raw = A.quantize(x, A.Q8_1)
	for i, sq in enumerate([164, 2 * 132]):
		if list(raw[i, :4]) != f16_bytes(want_d[i]) + f16_bytes(sq):
			raise Fail('Q8_1 block %d: d, s bytes %s' % (i, list(raw[i, :4])))
	expect_close('Q8_1 bytes decoded by quants.py', Q.decode(raw, 9, 128), want_v, 0)
	expect_close('Q8_1 values', A.values(x, A.Q8_1), want_v, 0)

	# Q8_K: max = the first element of largest magnitude, with its sign;
	# iscale = -127 / max; codes rint(iscale * x) (halves to even); d =
	# 1 / iscale.  Block 1: max -127 (x[3] = 127 comes later) -> iscale 1,
	# codes = x rounded half-even: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0,
	# 1.5 -> 2, 126.7 -> 127; d = 1; bsums[0] = 133.  Block 2: the same
	# with max = +127 first: iscale -1, codes negated, d = -1, the same
	# values, bsums[0] = -133.  Block 3: zeros.  Block 4: max 2 -> iscale
	# -63.5: x = 1 -> -63.5 -> -64 (even), -0.5 -> 31.75 -> 32, 0.25 ->
	# -15.875 -> -16, 2 -> -127; d = f32(-2/127).
	h1 = [-127, 2.5, 3.5, 127, -2.5, 0.5, 1.5, 126.7, -0.49]
	c1 = [-127, 2, 4, 127, -2, 0, 2, 127, 0]
	h2 = [127, 2.5, 3.5, -127, -2.5, 0.5, 1.5, 126.7, -0.49]
	c2 = [-127, -2, -4, 127, 2, 0, -2, -127, 0]
	h4 = [2.0, 1.0, -0.5, 0.25]
	c4 = [-127, -64, 32, -16]
	d4 = float(np.float32(-2.0 / 127.0))
	x = np.concatenate([block(h1, 256), block(h2, 256), block([], 256), block(h4, 256)])
	raw = A.quantize(x, A.Q8_K)
	for i, (c, d, bs) in enumerate([(c1, 1.0, 133), (c2, -1.0, -133), ([], 0.0, 0),
					(c4, d4, -127 - 64 + 32 - 16)]):
		want = list(np.array([d], dtype='<f4').view(np.uint8)) + \
			list(block(c, 256).astype(np.int8).view(np.uint8)) + \
			list(np.array([bs] + [0] * 15, dtype='<i2').view(np.uint8))
		if list(raw[i]) != want:
			raise Fail('Q8_K block %d: bytes differ from the hand-built block' % i)
	want_v = np.concatenate([d * block(c, 256).astype(np.float64) for c, d in
				 [(c1, 1.0), (c2, -1.0), ([], 0.0), (c4, d4)]])
	expect_close('Q8_K values', A.values(x, A.Q8_K), want_v, 0)
	# (quants.py decodes to float32: d * q rounded)
	expect_close('Q8_K bytes decoded by quants.py', Q.decode(raw, 15, 1024), want_v, 1e-7)

	# random rows: quantise, decode with quants.py = values(); values near x
	rng = np.random.default_rng(5)
	x = (rng.standard_normal((3, 512)) * np.array([[0.05], [1.0], [300.0]])).astype(np.float32)
	for t, bs in [(A.Q8_0, 32), (A.Q8_1, 32), (A.Q8_K, 256)]:
		v = A.values(x, t)
		expect_close('%s random rows: decode(quantize) = values' % Q.type_name(t),
			     Q.decode(A.quantize(x, t), t, x.size).reshape(x.shape), v,
			     0 if t != A.Q8_K else 1e-7)
		# half a step, plus for Q8_0/Q8_1 the f16 rounding of d (at most
		# 2^-11 relative, times |q| <= 127 steps)
		amax = np.abs(x.reshape(3, -1, bs)).max(axis=2, keepdims=True)
		err = np.abs(v - x).reshape(3, -1, bs) / amax
		if err.max() > (0.5 / 127 + (2 ** -11 if bs == 32 else 0)) * 1.001:
			raise Fail('%s: error %g of the block maximum'
				   % (Q.type_name(t), err.max()))
	# the weight types and their activation formats
	for w, t in [(8, A.Q8_0), (2, A.Q8_0), (3, A.Q8_1), (12, A.Q8_K), (14, A.Q8_K),
		     (23, A.Q8_K), (0, None), (1, None), (30, None)]:
		if A.VEC_DOT_TYPE.get(w) != t:
			raise Fail('weight type %s: activation type %s' % (Q.type_name(w), t))


def test_emulate_f16_and_oracle():
	# f16 has 10 mantissa bits: 1 + 2^-11 is the midpoint of 1 and 1 + 2^-10
	# (to even: 1), 1 + 3 * 2^-11 that of 1 + 2^-10 and 1 + 2^-9 (to even:
	# 1 + 2^-9); 65504 is the largest f16; 1e-8 is under half the smallest
	# subnormal (2^-24)
	x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 65504, 1e-8, 0.1])
	want = [1.0, 1 + 2 ** -9, -1.0, 65504, 0.0, 1638 * 2.0 ** -14]
	expect_close('kv-f16 rounding', A.round_f16(x), want, 0)
	# the oracle takes the engine's side at a tie only: Q8_0 block with d =
	# 1, x = 2.5 at column 4 (code 3, the engine's 2 taken) and 1.0 at
	# column 5 (code 1, the engine's 2 refused); Q8_K block with iscale 1,
	# x = 2.5 at column 1 (code 2, the engine's 3 taken) and 1.0 at column 2
	for t, xs, col, code, other in [(A.Q8_0, block([127, 0, 0, 0, 2.5, 1.0], 32), 4, 3, 2),
					(A.Q8_K, block([-127, 2.5, 1.0], 256), 1, 2, 3)]:
		hb = 2 if t == A.Q8_0 else 4              # the block's scale, then its codes
		eng = A.quantize(xs, t)[0].copy()
		eng[hb + col] = other & 0xff
		eng[hb + col + 1] += 1                    # the non-tie: 1 -> 2
		o = A.Oracle({('w', -1, 7): (xs.astype(np.float32), eng, t)})
		got = A.values(xs[None, :], t, (o, ('w', -1), np.array([7])))
		plain = A.values(xs[None, :], t)
		if plain[0, col] != code or got[0, col] != other or \
		   np.count_nonzero(got != plain) != 1:
			raise Fail('%s: oracle gave %s, expected %d -> %d only'
				   % (Q.type_name(t), got[0, :col + 2], code, other))
		if [(w, c) for w, _, _, c, _ in o.adopted] != [('code', col)] or \
		   [(w, c) for w, _, _, c, _ in o.wrong] != [('code', col + 1)] or o.noise != 0:
			raise Fail('%s: oracle adopted %s, refused %s' % (Q.type_name(t), o.adopted,
									   o.wrong))
		# a row the tape lacks: the reference's own rounding, noted
		o = A.Oracle({})
		if (A.values(xs[None, :], t, (o, ('w', -1), np.array([7]))) != plain).any() or \
		   o.missing != {('w', -1, 7)}:
			raise Fail('%s: a missing row: %s' % (Q.type_name(t), o.missing))
	# a Q8_0 block's scale at a float16 midpoint: amax 127 (1 + 2^-11)
	# gives d = 1 + 2^-11 (stored 1, to even); the engine's 1 + 2^-10 is
	# taken for the whole block, the codes unchanged
	xs = block([127 * (1 + 2 ** -11), 5], 32)
	eng = A.quantize(xs, A.Q8_0)[0].copy()
	eng[:2] = np.array([1 + 2 ** -10], dtype='<f2').view(np.uint8)
	o = A.Oracle({('w', -1, 7): (xs.astype(np.float32), eng, A.Q8_0)})
	got = A.values(xs[None, :], A.Q8_0, (o, ('w', -1), np.array([7])))
	plain = A.values(xs[None, :], A.Q8_0)
	expect_close('Q8_0 scale taken', got, plain * (1 + 2 ** -10), 0)
	if plain[0, 0] != 127 or plain[0, 1] != 5 or len(o.adopted) != 1:
		raise Fail('Q8_0 scale tie: values %s, expected 127, 5; %s' % (plain[0, :2],
									       o.adopted))
	# the F16 cache (one K row of layer 0, position 3): the tie 1 + 2^-11
	# taken the engine's way (1 + 2^-10); 0.75 stored as 0.7505 refused
	row = np.array([[1 + 2 ** -11, 0.75, 1.0]])
	k = np.array([1 + 2 ** -10, 0.7505, 1.0], dtype='<f2').view(np.uint8)
	cache = np.zeros((1, 4, 2, 6), dtype=np.uint8)
	cache[0, 3, 0] = k
	o = A.Oracle({}, (1, cache))
	got = A.round_f16(row, (o, (0, 'k'), np.array([3])))
	expect_close('f16 tie taken', got, [[1 + 2 ** -10, 0.75, 1.0]], 0)
	if [c for _, _, _, c, _ in o.adopted] != [0] or [c for _, _, _, c, _ in o.wrong] != [1]:
		raise Fail('f16 oracle: adopted %s, refused %s' % (o.adopted, o.wrong))
	# act-bf16: bfloat16 steps by 2^-7 above 1; 1 + 2^-8 is a tie (to the
	# even 1), 1 + 3 * 2^-8 a tie up to the even 1 + 2^-6, 1 + 2^-8 + 2^-20
	# past the tie (up), a float32 denormal to a zero of its sign, and a
	# value already bf16 unchanged
	row = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8 + 2 ** -20), -2.0 ** -130,
			0.75])
	got = A.bf16_values(row)
	expect_close('bf16 rounding', got, [1.0, 1 + 2 ** -6, -(1 + 2 ** -7), 0.0, 0.75], 0)
	if not np.signbit(got[3]):
		raise Fail('bf16 rounding: -denormal should give -0, got %r' % got[3])


def test_emulate_models(qpath, fpath):
	ids = [1, 7, 3, 9, 4, 200, 11, 5]
	# F32 weights: act-quant changes nothing; kv-f16 stores float16 values
	cfg, W = load.load(fpath)
	plain = M.Model(cfg, W).forward(ids)
	expect_close('F32 model: act-quant changes nothing',
		     M.Model(cfg, W, ['act-quant']).forward(ids), plain, 0)
	m = M.Model(cfg, W, ['kv-f16'])
	kv = m.forward(ids)
	for c in m.k_cache + m.v_cache:
		if not (c.astype(np.float16).astype(np.float64) == c).all():
			raise Fail('kv-f16: cache holds values that are not float16')
	expect_close('kv-f16 close to exact', kv, plain, 1e-2)
	if (kv == plain).all():
		raise Fail('kv-f16 changed nothing')
	# K-quant weights: every product with a quantised weight sees
	# values(x, Q8_K); the router (F32) sees x
	cfg, W = load.load(qpath)
	m = M.Model(cfg, W, ['act-quant'])
	m._pos = np.arange(3)
	x = np.random.default_rng(6).standard_normal((3, cfg.n_embd))
	for name in ['blk.0.attn_q.weight', 'blk.0.ffn_gate_inp.weight', 'output.weight']:
		m.reset()
		want = x if W.ggml_type(name) == 0 else A.values(x, A.Q8_K)
		expect_close('act-quant input of %s' % name, m.x_for(x, name), want, 0)
	if W.ggml_type('blk.0.attn_q.weight') == 0 or W.ggml_type('blk.0.ffn_gate_inp.weight'):
		raise Fail('%s: expected a quantised attn_q and an F32 router' % qpath)


# --- the rest ---------------------------------------------------------------------------

def test_cache(path):
	cfg, W = load.load(path)
	m = getattr(cfg, 'model_class', M.Model)(cfg, W)
	prompt = [1, 7, 3, 9, 4]
	whole = m.forward(prompt)
	m.reset()
	steps = np.concatenate([m.forward(prompt[:2]), m.forward(prompt[2:3]),
				m.forward(prompt[3:])])
	expect_close('prompt whole vs in pieces', steps, whole, 1e-9)
	first, a, la = M.greedy(m, prompt, 12)
	_, b, lb = M.greedy(m, prompt, 12, recompute=True)
	expect_close('prompt logits', first, whole[-1], 1e-9)
	if a != b:
		raise Fail('greedy with cache %s != recomputed %s' % (a, b))
	expect_close('final logits with cache vs recomputed', la, lb, 1e-9)


def load_vec(path):
	return np.load(path) if path.endswith('.npy') else np.loadtxt(path, ndmin=1)


def compare(a, b, tol):
	A, B = load_vec(a), load_vec(b)
	if A.shape != B.shape:
		raise Fail('%s %s vs %s %s: shapes differ' % (a, A.shape, b, B.shape))
	err, scale = np.abs(A - B).max(), np.abs(B).max()
	if not err <= tol * scale:
		raise Fail('%s vs %s: max |diff| %g > %g * max |logit| %g'
			   % (a, b, err, tol, scale))
	print('max |diff| %.3g, max |logit| %.3g, ratio %.3g' % (err, scale, err / scale))


def rope_meta(src, dst, kind, factor):
	"""Copy SRC.gguf / SRC.hf to DST.* declaring rope scaling: GGUF keys as
	convert_hf_to_gguf.py writes them, config.json rope_scaling as HF does.
	For YaRN the original context is 1/factor of the model's context, so HF
	versions that derive the factor from the two lengths agree."""
	r = gen_reader.GGUFReader(src + '.gguf')
	arch = r.kv['general.architecture']
	n_ctx = r.kv[arch + '.context_length']
	orig = int(n_ctx / factor)
	extra = [(arch + '.rope.scaling.type', gen_reader.STRING, kind),
		 (arch + '.rope.scaling.factor', gen_reader.FLOAT32, float(factor))]
	if kind == 'yarn':
		extra.append((arch + '.rope.scaling.original_context_length',
			      gen_reader.UINT32, orig))
	w = gen_gguf.GGUFWriter(dst + '.gguf')
	for k, v in r.kv.items():
		w.add(k, r.kv_type[k], v)
	for k, vt, v in extra:
		w.add(k, vt, v)
	for t in r.tensors:
		w.add_tensor(t.name, t.ne, t.type)
	w.begin()
	for t in r.tensors:
		w.write(t.name, r.raw(t.name))
	w.finish()
	shutil.rmtree(dst + '.hf', ignore_errors=True)
	shutil.copytree(src + '.hf', dst + '.hf')
	cp = os.path.join(dst + '.hf', 'config.json')
	with open(cp, encoding='utf-8') as f:
		c = json.load(f)
	c['rope_scaling'] = {'rope_type': kind, 'factor': float(factor)}
	if kind == 'yarn':
		c['rope_scaling']['original_max_position_embeddings'] = orig
	with open(cp, 'w', encoding='utf-8') as f:
		json.dump(c, f, indent=2)


def main(argv):
	if not argv:
		print(__doc__ if __doc__ else 'usage: selftest.py CHECK [ARGS]', file=sys.stderr)
		return 2
	cmd, args = argv[0], argv[1:]
	try:
		if cmd == 'quants':
			test_quants()
		elif cmd == 'rope':
			test_rope()
		elif cmd == 'hand':
			test_hand(args[0])
		elif cmd == 'cache':
			test_cache(args[0])
		elif cmd == 'compare':
			compare(args[0], args[1], float(args[2]))
		elif cmd == 'emulate':
			test_emulate_quantisers()
			test_emulate_f16_and_oracle()
			test_emulate_models(args[0], args[1])
		elif cmd == 'family2':
			return 1 if S2.test_family2(args[0]) else 0
		elif cmd == 'hand2':
			S2.test_hand2(args[0])
		elif cmd == 'yarn-scale':
			S2.test_yarn_scale(args[0], args[1])
		elif cmd == 'mla':
			S2.test_mla(args[0])
		elif cmd == 'window':
			S2.test_window(args[0])
		elif cmd == 'rope-meta':
			rope_meta(args[0], args[1], args[2], float(args[3]))
		else:
			print('selftest.py: unknown check %r' % cmd, file=sys.stderr)
			return 2
	except (Fail, S2.Fail, load.LoadError) as e:
		print('selftest.py %s: %s' % (cmd, e), file=sys.stderr)
		return 1
	return 0


if __name__ == '__main__':
	sys.exit(main(sys.argv[1:]))
