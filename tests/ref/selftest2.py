# tests/ref/selftest2.py — checks of the reference's second family
# (arch_*.py), run through selftest.py's subcommands:
#
#   hand2 DIR        each architecture-specific piece against values worked
#                    out by hand below: DeepSeek's routers (V2 greedy, V2
#                    group-limited, V3 with the correction bias and groups,
#                    normalisation, scaling), an MLA layer (absorbed and
#                    expanded), gpt-oss's clamped SwiGLU, sinks, sliding
#                    window and MXFP4 blocks in both layouts, Phi-3.5-MoE's
#                    sparsemixer, LayerNorm and LongRoPE, and a whole Granite
#                    MoE model with its four multipliers (with and without
#                    the shared expert); DIR gets the hand-built GGUF files
#   yarn-scale GGUF HF   DeepSeek's attention scale mscale^2 / sqrt(key
#                    length) and rotation magnitude 1, from both files
#   mla MODEL        absorbed MLA = expanded MLA (every position, whole and
#                    token by token, greedy continuation); what each caches
#   window MODEL     gpt-oss: the sliding window leaves positions before the
#                    window length as full attention computes them and
#                    changes the later ones
import math

import numpy as np

import arch_common as C
import arch_deepseek2 as DS
import arch_gptoss as GO
import arch_phimoe as PH
import load
import model as M
import quants as Q


class Fail(Exception):
	pass


def close(what, got, want, tol=1e-12):
	got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
	if got.shape != want.shape:
		raise Fail('%s: shape %s, expected %s' % (what, got.shape, want.shape))
	err = np.abs(got - want).max() if got.size else 0.0
	if not err <= tol * max(1.0, np.abs(want).max()):
		if got.size <= 8:
			raise Fail('%s: got %s, expected %s' % (what, got.tolist(), want.tolist()))
		i = int(np.argmax(np.abs(got - want)))
		raise Fail('%s: max error %g at %d (got %r, want %r)'
			   % (what, err, i, got.reshape(-1)[i], want.reshape(-1)[i]))


def same(what, got, want):
	if list(np.asarray(got).reshape(-1)) != list(np.asarray(want).reshape(-1)):
		raise Fail('%s: got %s, expected %s' % (what, np.asarray(got).tolist(), want))


class Dict(load.Tensors):
	"""Weights given as numpy arrays (for hand-built layers)."""

	def __init__(self, d):
		super().__init__(np.float64)
		self.path = 'hand'
		self.d = d

	def has(self, name):
		return name in self.d

	def _load(self, name):
		return self.d[name]


# --- DeepSeek -------------------------------------------------------------------------

def hand_deepseek_route():
	ln = np.log
	# V2 greedy: softmax(ln 0.1, ln 0.2, ln 0.3, ln 0.4) = 0.1 .. 0.4; top-2 =
	# experts 3, 2; not normalised; x 16
	top, w = DS.route(ln(np.array([[0.1, 0.2, 0.3, 0.4]])), 'softmax', 2, scale=16.0)
	same('V2 greedy ids', top, [3, 2])
	close('V2 greedy weights', w, [[6.4, 4.8]])
	# eight experts in four groups of two, scores p; best expert per group
	# 0.25, 0.17, 0.20, 0.10: group-limited (max) with one group keeps group
	# 0 -> experts 1 (0.25) and 0 (0.05), where plain top-2 takes 1 and 5
	p = np.array([[0.05, 0.25, 0.17, 0.17, 0.02, 0.20, 0.10, 0.04]])
	top, w = DS.route(ln(p), 'softmax', 2, None, 4, 1, 'max')
	same('V2 group-limited ids', top, [1, 0])
	close('V2 group-limited weights', w, [[0.25, 0.05]])
	top, _ = DS.route(ln(p), 'softmax', 2)
	same('V2 without groups', top, [1, 5])
	# the same scores as sigmoids, V3's group score (sum of the best two):
	# 0.30, 0.34, 0.22, 0.14 -> group 1, experts 2 and 3 (equal: lower first)
	top, w = DS.route(ln(p / (1 - p)), 'sigmoid', 2, None, 4, 1, 'top2sum')
	same('V3 group (top-2 sum) ids', top, [2, 3])
	close('V3 group weights', w, [[0.17, 0.17]])
	# V3 bias: scores 0.7 0.5 0.4 0.3, bias +0.35 on expert 2: chosen 2 (0.75)
	# and 0 (0.7); weights from the scores without the bias, 0.4 and 0.7,
	# normalised (/ 1.1) and x 2.5
	s = np.array([[0.7, 0.5, 0.4, 0.3]])
	top, w = DS.route(ln(s / (1 - s)), 'sigmoid', 2, np.array([0, 0, 0.35, 0]), norm=True,
			  scale=2.5)
	same('V3 bias ids', top, [2, 0])
	close('V3 bias weights', w, [[0.4 / 1.1 * 2.5, 0.7 / 1.1 * 2.5]])


def hand_mla():
	"""One MLA layer, 1 head, no-rope dim 1, rope dims 2, latent 2, value 1,
	inputs h0 = (1, 0), h1 = (0, 1) at positions 0, 1; RMSNorm eps 0.

	q rows (1, 1) | (0, 1), (1, 0): q0 = 1 | (0, 1), q1 = 1 | (1, 0)
	kv_a rows (1, 0), (0, 1) | (1, 0), (0, 1): latent c0 = (1, 0) -> normed
	  (sqrt2, 0); c1 = (0, 1) -> (0, sqrt2); k_pe0 = (1, 0), k_pe1 = (0, 1)
	k_b = (1, 2): k_nope0 = sqrt2, k_nope1 = 2 sqrt2; v_b = (1, -1): v0 =
	  sqrt2, v1 = -sqrt2
	RoPE (interleaved, pair 0 turns 1 radian per position): q1_pe -> (cos 1,
	  sin 1), k_pe1 -> (-sin 1, cos 1); position 0 unrotated
	token 0 sees itself: out0 = v0 = sqrt2
	token 1: s0 = 1 * sqrt2 + cos 1, s1 = 2 sqrt2 + (-cos 1 sin 1 + sin 1 cos 1)
	  = 2 sqrt2, both / sqrt(3); out1 = sqrt2 (a0 - a1)
	attn_output (1, 0)^T: outputs (out, 0)."""
	s2 = math.sqrt(2)
	W = {'blk.0.attn_q.weight': np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]]),
	     'blk.0.attn_kv_a_mqa.weight': np.array([[1.0, 0], [0, 1], [1, 0], [0, 1]]),
	     'blk.0.attn_kv_a_norm.weight': np.ones(2),
	     'blk.0.attn_k_b.weight': np.array([[[1.0], [2.0]]]),
	     'blk.0.attn_v_b.weight': np.array([[[1.0, -1.0]]]),
	     'blk.0.attn_output.weight': np.array([[1.0], [0.0]])}
	cfg = DS.config(arch='deepseek2', n_vocab=4, n_embd=2, n_layer=1, n_head=1, n_head_kv=1,
			head_dim=3, rms_eps=0.0, rope=M.Rope(2, base=10000.0, style='interleaved'),
			q_lora_rank=0, kv_lora_rank=2, nope=1, rope_dim=2, v_head_dim=1,
			n_dense_lead=1, gating='softmax', n_group=1, topk_group=1, group_score='max',
			norm_topk=False, routed_scale=1.0)
	a = M.softmax(np.array([s2 + math.cos(1), 2 * s2]) / math.sqrt(3))
	want = [[s2, 0], [s2 * (a[0] - a[1]), 0]]
	h = np.eye(2)
	for form in ('absorbed', 'expanded'):
		m = DS.Model(cfg, Dict(W), mla=form)
		close('MLA %s, whole' % form, m.attention(0, h, np.arange(2)), want)
		m.reset()
		steps = np.concatenate([m.attention(0, h[:1], np.arange(1)),
					m.attention(0, h[1:], np.arange(1, 2))])
		close('MLA %s, token by token' % form, steps, want)


# --- gpt-oss --------------------------------------------------------------------------

def hand_gptoss():
	# clamped SwiGLU, limit 7: g' = (1, 7, -3), u' = (0.5, 7, -7)
	sig = lambda z: 1 / (1 + math.exp(-z))          # noqa: E731
	want = [1.5 * 1 * sig(1.702), 8 * 7 * sig(1.702 * 7), -6 * -3 * sig(-1.702 * 3)]
	close('clamped SwiGLU', GO.clamped_swiglu(np.array([1.0, 10, -3]),
						  np.array([0.5, 9, -8]), 7.0), want)
	# a sink: scores 1, 2 and sink 0.5 share one denominator
	e = math.e
	q = np.ones((1, 1, 1))
	K, V = np.array([[[1.0]], [[2.0]]]), np.array([[[10.0]], [[20.0]]])
	got = C.attend(q, K, V, np.array([1]), np.arange(2), 1.0, sinks=np.array([0.5]))
	close('attention sink', got, [[[(10 * e + 20 * e * e) / (e + e * e + math.exp(0.5))]]])
	# window 2 at position 3 sees positions 2 and 3 only
	K = np.arange(1.0, 5.0).reshape(4, 1, 1)
	V = np.array([1.0, 2.0, 4.0, 8.0]).reshape(4, 1, 1)
	got = C.attend(q, K, V, np.array([3]), np.arange(4), 1.0, window=2)
	close('sliding window', got, [[[(4 * e ** 3 + 8 * e ** 4) / (e ** 3 + e ** 4)]]])
	# MXFP4 by hand.  GGUF block: e = 128 (scale 2); qs[0] = 0x21 -> element
	# 0 code 1 (0.5 * 2), element 16 code 2 (1 * 2); qs[1] = 0xF7 -> element
	# 1 code 7 (6 * 2), element 17 code 15 (-6 * 2); qs[2] = 0x08 -> element
	# 2 code 8 (-0); e = 125: scale 1/4
	blk = np.zeros(17, dtype=np.uint8)
	blk[0], blk[1], blk[2], blk[3] = 128, 0x21, 0xF7, 0x08
	want = np.zeros(32)
	want[0], want[16], want[1], want[17] = 1, 2, 12, -12
	got = Q.decode(blk, 39, 32)
	close('MXFP4 GGUF block', got, want, 0)
	if not np.signbit(got[2]):
		raise Fail('MXFP4 code 8 is -0')
	blk[0] = 125
	close('MXFP4 GGUF scale 2^-2', Q.decode(blk, 39, 32), want / 8, 0)
	# HF: byte m holds elements 2m (low nibble), 2m + 1 (high); scales byte
	hf = np.zeros((1, 16), dtype=np.uint8)
	hf[0, 0], hf[0, 1] = 0x21, 0xF7
	want = np.zeros(32)
	want[0], want[1], want[2], want[3] = 1, 2, 12, -12
	close('MXFP4 HF block', GO.mxfp4_hf(hf, np.array([128])), want, 0)
	# the generator's GGUF -> HF repacking agrees with both decoders
	from moegen import ggml, moe2
	x = np.random.default_rng(3).standard_normal((2, 3, 64)).astype(np.float32)
	raw = ggml.encode(x, ggml.MXFP4)
	b, s = moe2.mxfp4_hf_blocks(raw, x.shape)
	close('MXFP4 both layouts', GO.mxfp4_hf(b, s),
	      Q.decode(raw, 39, x.size).reshape(x.shape), 0)
	close('MXFP4 quantiser error', Q.decode(raw, 39, x.size).reshape(x.shape), x, 0.5)


# --- Phi-3.5-MoE ----------------------------------------------------------------------

def hand_phimoe():
	e = math.exp
	# scores 2, 1.99, 0.5, -1, eps 0.01: first = 0; (2 - s) / max(|s|, 2) =
	# 0, 0.005, 0.75, 1.5 -> experts 0, 1 stay; w1 = e^2 / (e^2 + e^1.99).
	# second = 1 (1.99): (1.99 - s) / max(|s|, 1.99) = -0.005, 0, 0.746, 1.51:
	# 0 and 1 stay but 0 is out already: w2 = 1
	top, w = PH.sparsemixer(np.array([[2.0, 1.99, 0.5, -1.0]]), 0.01)
	same('sparsemixer ids', top, [0, 1])
	close('sparsemixer weights', w, [[e(2) / (e(2) + e(1.99)), 1.0]])
	# scores 1, 3, 2.97, 2.95, -4: first = 1, kept 1, 2, 3 (0.01, 0.0167 <=
	# 0.02); second = 2 (2.97), kept 2, 3 (3 is 0.0067 away; 1 is out)
	top, w = PH.sparsemixer(np.array([[1.0, 3.0, 2.97, 2.95, -4.0]]), 0.01)
	same('sparsemixer ids (2)', top, [1, 2])
	close('sparsemixer weights (2)', w, [[e(3) / (e(3) + e(2.97) + e(2.95)),
					       e(2.97) / (e(2.97) + e(2.95))]])
	# LayerNorm: x = 1 2 3 6, mean 3, centred -2 -1 0 3, variance 3.5
	c = np.array([-2.0, -1, 0, 3]) / math.sqrt(3.5)
	close('LayerNorm', C.layer_norm(np.array([1.0, 2, 3, 6]), np.array([1.0, 1, 2, 1]),
					np.array([0.0, 1, 0, 0]), 0.0), c * [1, 1, 2, 1] + [0, 1, 0, 0])
	# LongRoPE, 4 dims, base 100, short factors 1 2, long 4 8, original
	# context 8, mscales 1.5 / 2: at position 3 of a 4-token sequence the
	# angles are 3 and 0.3 / 2; of a 9-token one 3 / 4 and 0.3 / 8
	r = PH.LongRope(4, 100.0, [1, 2], [4, 8], 8, 1.5, 2.0)
	x = np.array([[[1.0, 1.0, 0.0, 0.0]]])
	close('LongRoPE short', r.apply(x, [3], 4)[0, 0],
	      1.5 * np.array([math.cos(3), math.cos(0.15), math.sin(3), math.sin(0.15)]))
	close('LongRoPE long', r.apply(x, [3], 9)[0, 0],
	      2.0 * np.array([math.cos(0.75), math.cos(0.0375), math.sin(0.75),
			      math.sin(0.0375)]))


# --- Granite MoE ----------------------------------------------------------------------

def granite_model(d, shared):
	"""One layer, n_embd 2, one head of 2, two experts of width 1 (one used),
	multipliers: embedding 2, residual 0.5, attention 0.125, logits 4."""
	from selftest import write_gguf
	b = 'blk.0.'
	T = [('token_embd.weight', np.array([[1.0, 0], [0, 1], [1, 1]])),
	     (b + 'attn_norm.weight', np.ones(2)), (b + 'attn_q.weight', np.eye(2)),
	     (b + 'attn_k.weight', np.eye(2)), (b + 'attn_v.weight', np.eye(2)),
	     (b + 'attn_output.weight', np.eye(2)), (b + 'ffn_norm.weight', np.ones(2)),
	     (b + 'ffn_gate_inp.weight', np.eye(2)),
	     (b + 'ffn_gate_exps.weight', np.array([[[1.0, 0]], [[0, 1.0]]])),
	     (b + 'ffn_up_exps.weight', np.array([[[1.0, 0]], [[0, 1.0]]])),
	     (b + 'ffn_down_exps.weight', np.array([[[1.0], [0]], [[0], [1.0]]]))]
	if shared:
		T += [(b + 'ffn_gate_shexp.weight', np.array([[1.0, 0]])),
		      (b + 'ffn_up_shexp.weight', np.array([[1.0, 0]])),
		      (b + 'ffn_down_shexp.weight', np.array([[1.0], [-1.0]]))]
	T += [('output_norm.weight', np.ones(2)),
	      ('output.weight', np.array([[1.0, 0], [0, 1], [1, -1]]))]
	kv = {'embedding_length': 2, 'block_count': 1, 'attention.head_count': 1,
	      'attention.head_count_kv': 1, 'context_length': 64, 'rope.freq_base': 10000.0,
	      'attention.layer_norm_rms_epsilon': 0.0, 'expert_count': 2, 'expert_used_count': 1,
	      'attention.scale': 0.125, 'embedding_scale': 2.0, 'residual_scale': 0.5,
	      'logit_scale': 4.0}
	path = '%s/granite-hand%s.gguf' % (d, '-shared' if shared else '')
	write_gguf(path, 'granitemoe', kv, T)
	return path


def hand_granite(d):
	"""Tokens 0, 1: x0 = 2 (1, 0), x1 = 2 (0, 1).  Normed (sqrt2, 0), (0, sqrt2);
	q = k = v = those; at position 1 the query turns by 1 radian: sqrt2 (-sin 1,
	cos 1).  Scores x 0.125: s0 = -2 sin 1 / 8, s1 = 2 / 8; attention out =
	sqrt2 (a0, a1); x1 += 0.5 out.  MoE input n = x1 / rms(x1); the router
	(identity) picks the larger coordinate: expert 1 (n1 > n0), weight 1,
	output silu(n1) n1 (0, 1); shared expert silu(n0) n0 (1, -1); x1 += 0.5 y.
	Logits = rows (1, 0), (0, 1), (1, -1) . x1 / rms(x1) / 4."""
	s2 = math.sqrt(2)
	silu = lambda z: z / (1 + math.exp(-z))        # noqa: E731
	a = M.softmax(np.array([-2 * math.sin(1), 2.0]) / 8)
	x = np.array([0.5 * s2 * a[0], 2 + 0.5 * s2 * a[1]])
	n = x / math.sqrt(np.mean(x * x))
	for shared in (False, True):
		y = np.array([0.0, silu(n[1]) * n[1]])
		if shared:
			y += silu(n[0]) * n[0] * np.array([1.0, -1.0])
		z = x + 0.5 * y
		o = z / math.sqrt(np.mean(z * z))
		want = np.array([o[0], o[1], o[0] - o[1]]) / 4
		cfg, W = load.load_gguf(granite_model(d, shared))
		got = cfg.model_class(cfg, W).forward([0, 1])[1]
		close('Granite MoE by hand%s' % (' (shared expert)' if shared else ''), got, want)


def test_hand2(d):
	hand_deepseek_route()
	hand_mla()
	hand_gptoss()
	hand_phimoe()
	hand_granite(d)


# --- whole models ---------------------------------------------------------------------

def test_yarn_scale(gguf, hf):
	"""The generator's DeepSeek models: YaRN x4, mscale = mscale_all_dim
	(GGUF yarn_log_multiplier = 0.1 mscale_all_dim)."""
	for path in (gguf, hf):
		cfg, _ = load.load(path)
		import json
		import os
		c = json.load(open(os.path.join(hf, 'config.json')))
		rs = c['rope_scaling']
		m = 1 + 0.1 * rs['mscale_all_dim'] * math.log(rs['factor'])
		close('%s: attention scale' % path, cfg.attn_scale,
		      m * m / math.sqrt(c['qk_nope_head_dim'] + c['qk_rope_head_dim']), 1e-7)
		_, mag = cfg.rope.angles(np.zeros(1))
		close('%s: rotation magnitude' % path, mag, 1.0, 1e-7)


def test_mla(path):
	cfg, W = load.load(path)
	ids = [1, 7, 3, 9, 4, 200, 11, 5]
	out = {}
	for form in ('absorbed', 'expanded'):
		m = DS.Model(cfg, W, mla=form)
		whole = m.forward(ids)
		m.reset()
		steps = np.concatenate([m.forward(ids[:3]), m.forward(ids[3:4]), m.forward(ids[4:])])
		close('%s: whole vs in pieces' % form, steps, whole, 1e-10)
		first, gen, _ = M.greedy(m, ids, 16)
		out[form] = (whole, gen, m)
	close('absorbed = expanded (every position)', out['absorbed'][0], out['expanded'][0], 1e-10)
	if out['absorbed'][1] != out['expanded'][1]:
		raise Fail('greedy: absorbed %s, expanded %s' % (out['absorbed'][1], out['expanded'][1]))
	ca, ce = out['absorbed'][2].cache[-1], out['expanded'][2].cache[-1]
	n = len(ids) + 16
	if set(ca) != {'latent', 'k_pe', 'pos'} or ca['latent'].shape != (n, cfg.kv_lora_rank) or \
			ca['k_pe'].shape != (n, cfg.rope_dim):
		raise Fail('absorbed cache holds %s' % {k: v.shape for k, v in ca.items()})
	per_a = cfg.kv_lora_rank + cfg.rope_dim
	per_e = ce['k'][0].size + ce['v'][0].size
	print('cached values per token and layer: absorbed %d, expanded %d (%.1fx)'
	      % (per_a, per_e, per_e / per_a))


def test_window(path):
	cfg, W = load.load(path)
	win = cfg.sliding_window
	if not win or not any(cfg.sliding):
		raise Fail('%s: no sliding-window layers' % path)
	ids = [1, 7, 3, 9, 4, 200, 11, 5, 42, 17, 99, 3][:max(8, 3 * win)]
	if len(ids) <= win:
		raise Fail('window %d too long for the test prompt' % win)
	slid = GO.Model(cfg, W).forward(ids)
	saved = cfg.sliding
	cfg.sliding = [False] * cfg.n_layer
	try:
		full = GO.Model(cfg, W).forward(ids)
	finally:
		cfg.sliding = saved
	close('positions 0 .. %d (within the window)' % (win - 1), slid[:win], full[:win], 0)
	for p in range(win, len(ids)):
		if np.abs(slid[p] - full[p]).max() < 1e-6 * np.abs(full[p]).max():
			raise Fail('position %d (beyond the window %d) unchanged by it' % (p, win))
	m = GO.Model(cfg, W)
	m.forward(ids[:win + 1])
	steps = m.forward(ids[win + 1:])
	close('windowed, in two pieces', steps, slid[win + 1:], 1e-10)


# --- everything above in one process (t0400-ref-selftest.sh) -----------------------

PROMPT = [1, 7, 3, 9, 4, 200, 11, 5]

TWINS = [  # name, gen-model arguments
	('deepseek2', ['--arch', 'deepseek2', '--seed', '1']),
	('deepseek2-v2', ['--arch', 'deepseek2-v2', '--seed', '1']),
	('deepseek3', ['--arch', 'deepseek3', '--seed', '1']),
	('gpt-oss', ['--arch', 'gpt-oss', '--seed', '1']),
	('phimoe', ['--arch', 'phimoe', '--seed', '1']),
	('granitemoe', ['--arch', 'granitemoe', '--seed', '1']),
	('granitemoeshared', ['--arch', 'granitemoeshared', '--seed', '1']),
	('deepseek3-f16', ['--arch', 'deepseek3', '--type', 'f16', '--seed', '2']),
	('deepseek2-q8_0', ['--arch', 'deepseek2', '--type', 'q8_0', '--seed', '3']),
	('deepseek2-v2-q4_k', ['--arch', 'deepseek2-v2', '--shape', 'small', '--type', 'q4_k',
			       '--seed', '4']),
	('gpt-oss-mxfp4', ['--arch', 'gpt-oss', '--type', 'mxfp4', '--seed', '5']),
	('gpt-oss-q4_k-mxfp4', ['--arch', 'gpt-oss', '--shape', 'small', '--type', 'q4_k',
				'--expert-type', 'mxfp4', '--seed', '6']),
	('gpt-oss-q8_0', ['--arch', 'gpt-oss', '--type', 'q8_0', '--seed', '7']),
	('phimoe-f16', ['--arch', 'phimoe', '--type', 'f16', '--seed', '8']),
	('phimoe-q4_k', ['--arch', 'phimoe', '--shape', 'small', '--type', 'q4_k', '--seed', '9']),
	('granitemoeshared-q8_0', ['--arch', 'granitemoeshared', '--type', 'q8_0', '--seed', '10']),
	('granitemoe-q4_k', ['--arch', 'granitemoe', '--shape', 'small', '--type', 'q4_k',
			     '--seed', '11']),
]

REFUSED = [  # name, model, config.json edit, words the message must contain
	('phimoe with 3 experts per token', 'phimoe', ('num_experts_per_tok', 3), 'exactly 2 experts'),
	('deepseek topk_method unknown', 'deepseek3', ('topk_method', 'bogus'), "topk_method 'bogus'"),
	('deepseek moe_layer_freq 2', 'deepseek2', ('moe_layer_freq', 2), 'moe_layer_freq 2'),
	('gpt-oss rope type unknown', 'gpt-oss', ('rope_scaling', {'rope_type': 'ntk', 'factor': 2.0}),
	 'ntk'),
	('deepseek v_head_dim not kv_b_proj\'s', 'deepseek2', ('v_head_dim', 8),
	 'kv_b_proj.weight has shape'),
	('gpt-oss experts not num_local_experts', 'gpt-oss', ('num_local_experts', 8), 'do not fit'),
	('granitemoe experts not num_local_experts', 'granitemoe', ('num_local_experts', 8),
	 'do not fit'),
	('phimoe LongRoPE factors of the wrong length', 'phimoe',
	 ('rope_scaling', {'type': 'longrope', 'short_factor': [1.0] * 3, 'long_factor': [1.0] * 8,
			   'original_max_position_embeddings': 1024}), 'LongRoPE factors: 3 and 8'),
]

REFUSED_GGUF = [  # name, model, (renamed tensors, dropped tensors, dropped keys), words
	('deepseek2 GGUF with attn_kv_b (before the MLA split)', 'deepseek2',
	 ({'attn_k_b': 'attn_kv_b'}, ('attn_v_b',), ()), 'attn_kv_b without attn_k_b'),
	('deepseek2 GGUF without key_length_mla', 'deepseek2',
	 ({}, (), ('deepseek2.attention.key_length_mla',)), 'key_length_mla'),
	('gpt-oss GGUF without sinks', 'gpt-oss', ({}, ('attn_sinks',), ()),
	 'missing tensor blk.0.attn_sinks.weight'),
]


def refused_gguf(d, src, edit, words):
	"""A copy of SRC.gguf with tensors renamed / dropped and keys dropped
	must fail to load with a message containing `words`."""
	from moegen import gguf as gw
	from moegen import reader as gr
	rename, drop, keys = edit
	r = gr.GGUFReader('%s/%s.gguf' % (d, src))
	dst = '%s/refused.gguf' % d

	def new(name):
		role = name.split('.')[2] if name.startswith('blk.') else None
		if role in drop:
			return None
		return name.replace('.%s.' % role, '.%s.' % rename[role]) if role in rename else name
	w = gw.GGUFWriter(dst)
	for k, v in r.kv.items():
		if k not in keys:
			w.add(k, r.kv_type[k], v)
	kept = [(t, new(t.name)) for t in r.tensors if new(t.name)]
	for t, n in kept:
		w.add_tensor(n, t.ne, t.type)
	w.begin()
	for t, n in kept:
		w.write(n, r.raw(t.name))
	w.finish()
	try:
		load.load(dst)
	except load.LoadError as e:
		if words not in str(e):
			raise Fail('message %r does not say %r' % (str(e), words))
		return str(e)
	raise Fail('loaded')


def twin(d, name, argv, tol=1e-6):
	from moegen import generate
	prefix = '%s/%s' % (d, name)
	if generate.main(['--format', 'both', '--out', prefix] + argv) != 0:
		raise Fail('gen-model %s failed' % ' '.join(argv))
	res = []
	for path in (prefix + '.gguf', prefix + '.hf'):
		cfg, W = load.load(path)
		m = cfg.model_class(cfg, W)
		res.append(M.greedy(m, PROMPT, 32)[:2])
	(lg, ig), (lh, ih) = res
	err = np.abs(lg - lh).max() / np.abs(lh).max()
	if not err <= tol:
		raise Fail('GGUF and HF logits differ by %.3g of max |logit|' % err)
	if ig != ih:
		raise Fail('greedy: GGUF %s, HF %s' % (ig, ih))
	if len(set(ig)) < 2:
		raise Fail('degenerate continuation %s' % ig)
	return 'max |GGUF - HF| %.2g of max |logit|' % err


def refused(d, src, edit, words):
	import json
	import shutil
	dst = '%s/refused.hf' % d
	shutil.rmtree(dst, ignore_errors=True)
	shutil.copytree('%s/%s.hf' % (d, src), dst)
	p = dst + '/config.json'
	with open(p) as f:
		c = json.load(f)
	c[edit[0]] = edit[1]
	with open(p, 'w') as f:
		json.dump(c, f)
	try:
		load.load(dst)
	except load.LoadError as e:
		if words not in str(e):
			raise Fail('message %r does not say %r' % (str(e), words))
		return str(e)
	raise Fail('loaded')


def test_family2(d):
	"""Every check of the second family; one line per check on stdout:
	'ok NAME' or 'not ok NAME: why'.  Exit status 1 if any failed."""
	import selftest
	checks = [('%s: GGUF and HF agree (logits, 32 greedy tokens)' % n,
		   lambda n=n, a=a: twin(d, n, a)) for n, a in TWINS]
	checks += [
		('hand-computed: DeepSeek routers', hand_deepseek_route),
		('hand-computed: an MLA layer, absorbed and expanded, whole and token by token',
		 hand_mla),
		('hand-computed: clamped SwiGLU, sinks, sliding window, MXFP4 blocks', hand_gptoss),
		('hand-computed: sparsemixer, LayerNorm, LongRoPE', hand_phimoe),
		('hand-computed: Granite MoE multipliers (and shared expert)', lambda: hand_granite(d)),
		('deepseek2: YaRN attention scale mscale^2/sqrt(key length), rotation magnitude 1',
		 lambda: test_yarn_scale('%s/deepseek3.gguf' % d, '%s/deepseek3.hf' % d))]
	for m in ('deepseek2.gguf', 'deepseek2-v2.hf', 'deepseek3.gguf', 'deepseek2-v2-q4_k.gguf'):
		checks.append(('MLA absorbed = expanded, cache = latent + rope key (%s)' % m,
			       lambda m=m: test_mla('%s/%s' % (d, m))))
	for m in ('gpt-oss.gguf', 'gpt-oss.hf', 'gpt-oss-mxfp4.gguf'):
		checks.append(('sliding window: same within, different beyond (%s)' % m,
			       lambda m=m: test_window('%s/%s' % (d, m))))
	for m in ('deepseek3.hf', 'gpt-oss.gguf', 'phimoe.hf', 'granitemoeshared.gguf'):
		checks.append(('KV cache = recomputation (%s)' % m,
			       lambda m=m: selftest.test_cache('%s/%s' % (d, m))))
	for name, src, edit, words in REFUSED:
		checks.append(('config.json refused with a message: %s' % name,
			       lambda src=src, edit=edit, words=words: refused(d, src, edit, words)))
	for name, src, edit, words in REFUSED_GGUF:
		checks.append(('refused with a message: %s' % name,
			       lambda src=src, edit=edit, words=words: refused_gguf(d, src, edit, words)))
	failed = 0
	import contextlib
	import io
	for name, fn in checks:
		try:
			with contextlib.redirect_stdout(io.StringIO()) as out:
				note = fn()
			print('ok %s' % name)
			for line in ([note] if note else []) + out.getvalue().splitlines():
				print('# %s' % line)
		except (Fail, selftest.Fail, load.LoadError, ValueError) as e:
			failed += 1
			print('not ok %s: %s' % (name, e))
	return failed
