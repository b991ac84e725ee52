# tests/ref/actquant.py — the 8-bit activation formats a quantised matrix
# product rounds its input row to, for ref.py's --emulate act-quant.
#
# An engine in the ggml tradition never multiplies a quantised weight by
# float activations: it first quantises the activation row to the weight
# type's "vec_dot type" and sums integer products per block.  The rounding
# of that step is part of the arithmetic being specified, so the reference
# can model it: quantise the row as below, decode it, and take the dot
# product of the decoded values with the decoded weights in float64.
#
#   weight type                         activation format
#   Q8_0 Q4_0 Q5_0 IQ4_NL (MXFP4)       Q8_0  d f16 | qs[32] int8
#   Q4_1 Q5_1                           Q8_1  d f16 | s f16 | qs[32] int8
#   Q2_K .. Q6_K, IQ4_XS                Q8_K  d f32 | qs[256] int8 | bsums[16] int16
#   F32 F16 BF16                        none (float activations)
#
# The quantisers follow the published reference recipe step for step in
# float32 arithmetic (numpy float32 operations round like C's float):
#
#   Q8_0, Q8_1  amax = max |x| over the 32; d = amax / 127; id = 1 / d
#               (0 if d = 0); q = round-half-away-from-zero(x * id) (C's
#               roundf); stored d = f16(d) (nearest even).  Q8_1 also
#               stores s = f16(d * sum(q)).  Value: f16(d) * q.
#   Q8_K        max = the first element of largest magnitude, with its
#               sign; iscale = -127 / max; q = nearest-even(iscale * x)
#               (lrintf), clamped to [-127, 127]; d = 1 / iscale (f32);
#               bsums[g] = sum of q over elements 16g .. 16g+15.  Value:
#               d * q.  An all-zero block is all zero (d = 0).
#
# Rounding ties.  An engine computes the row in float32 in its own order,
# so its x * id differs from the reference's by ~1e-7 .. 4e-6 of the block's
# scale; where that product lies within about that much of a rounding
# boundary (k + 1/2) the two may round to different codes.  Such a tie is rare (a few per million
# elements) but one flipped code can move the logits of a small random model
# by a per cent (and then, the activations being off by that much, many more
# codes differ downstream).  The float16 rounding of the KV cache has such
# ties too, and so has the float16 rounding of a Q8_0 / Q8_1 block's scale
# d (named 'NAME/scale', col = the block: the codes are unchanged, the
# block's values move by one float16 step of d).  A Tape records the
# roundings of a run that fall within a margin of a tie and can force
# chosen ones the other way, so a comparison can tell "the engine rounded
# one tie the other way" from a real error.
#
# Written from those definitions with numpy; shares no code with the engine.
import numpy as np

import quants

Q8_0, Q8_1, Q8_K = 8, 9, 15          # ggml type ids of the activation formats

# weight type id -> activation type id (absent: float activations)
VEC_DOT_TYPE = {
	8: Q8_0, 2: Q8_0, 6: Q8_0, 20: Q8_0, 39: Q8_0,     # Q8_0 Q4_0 Q5_0 IQ4_NL MXFP4
	3: Q8_1, 7: Q8_1,                                   # Q4_1 Q5_1
	10: Q8_K, 11: Q8_K, 12: Q8_K, 13: Q8_K, 14: Q8_K,   # Q2_K .. Q6_K
	23: Q8_K,                                           # IQ4_XS
}

BLOCK = {Q8_0: 32, Q8_1: 32, Q8_K: 256}


def _blocks(x, bs):
	"""x (..., n) -> float32 (..., n / bs, bs): the row as the engine holds it."""
	x = np.asarray(x)
	if x.shape[-1] % bs:
		raise ValueError('activation row of %d is not a multiple of the %d-element block'
				 % (x.shape[-1], bs))
	return x.astype(np.float32).reshape(x.shape[:-1] + (x.shape[-1] // bs, bs))


def _round_away(v):
	"""C's roundf: to nearest, halves away from zero.  In float64 |v| + 0.5
	is exact for any float32 v of magnitude below 2^29, so the floor is
	the true rounding (adding 0.5 in float32 would round 0.49999997 up)."""
	v = v.astype(np.float64)
	return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _q8_0_scaled(x):
	"""Q8_0 / Q8_1 blocks before rounding: (d float32 (..., nb) before its
	f16 rounding, v = x * id float32 (..., nb, 32))."""
	b = _blocks(x, 32)
	amax = np.max(np.abs(b), axis=-1)                    # float32, exact
	d = amax / np.float32(127)                           # float32 division
	with np.errstate(divide='ignore'):
		id_ = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
	return d, b * id_[..., None]                         # float32 product


def _q8_k_scaled(x):
	"""Q8_K blocks before rounding: (d float32 (..., nb), v = x * iscale
	float32 (..., nb, 256)); all-zero blocks have d = 0 and v = 0."""
	b = _blocks(x, 256)
	first = np.argmax(np.abs(b), axis=-1)                # the first of the largest
	mx = np.take_along_axis(b, first[..., None], axis=-1)[..., 0]
	zero = mx == 0
	with np.errstate(divide='ignore', invalid='ignore'):
		iscale = np.where(zero, np.float32(1), np.float32(-127) / mx).astype(np.float32)
		v = b * iscale[..., None]                    # float32 product
		d = (np.float32(1) / iscale).astype(np.float32)
	v[zero] = 0
	d = np.where(zero, np.float32(0), d).astype(np.float32)
	return d, v


def _round(v, t):
	if t == Q8_K:
		return np.clip(np.rint(v), -127, 127).astype(np.int32)   # rint: nearest even
	return _round_away(v).astype(np.int32)


def q8_0_codes(x):
	"""Codes of Q8_0 (and Q8_1) blocks: (d float32 (..., nb) before its f16
	rounding, q int32 (..., nb, 32))."""
	d, v = _q8_0_scaled(x)
	return d, _round(v, Q8_0)


def q8_k_codes(x):
	"""Codes of Q8_K blocks: (d float32 (..., nb), q int32 (..., nb, 256))."""
	d, v = _q8_k_scaled(x)
	return d, _round(v, Q8_K)


def quantize(x, t):
	"""x (n,) -> the bytes (n / block, block_bytes) uint8 of activation
	type t, laid out as the format defines them."""
	x = np.asarray(x).reshape(-1)
	if t in (Q8_0, Q8_1):
		d, q = q8_0_codes(x)
		dh = d.astype('<f2')
		cols = [dh.view(np.uint8).reshape(-1, 2)]
		if t == Q8_1:
			s = (d * q.sum(axis=-1).astype(np.float32)).astype('<f2')
			cols.append(s.view(np.uint8).reshape(-1, 2))
		cols.append(q.astype(np.int8).view(np.uint8))
		return np.concatenate(cols, axis=1)
	if t == Q8_K:
		d, q = q8_k_codes(x)
		bsums = q.reshape(-1, 16, 16).sum(axis=-1).astype('<i2')
		return np.concatenate([d.astype('<f4').view(np.uint8).reshape(-1, 4),
				       q.astype(np.int8).view(np.uint8),
				       bsums.view(np.uint8).reshape(-1, 32)], axis=1)
	raise ValueError('not an activation type: %s' % quants.type_name(t))


class Tape:
	"""The emulated roundings of a run, each element named by (where, pos,
	col): where = what was quantised ('blk.0.attn_output.weight/Q8_K': the
	input of that product, 'blk.1.ffn_down_exps.weight#3/Q8_K' for expert
	3, 'blk.0.attn_input/Q8_K' for q, k and v, 'blk.1.ffn_input/Q8_K' for
	the FFN input every expert quantises) or
	the cache ('blk.0.k_cache', 'blk.0.v_cache'), pos = the token's
	position, col = the element's index in that token's row.  Names do not
	depend on how the sequence is split into batches; a row quantised by
	several products under one name rounds the same way in all of them.

	Records the elements whose exact value lies within `margin` of the
	midpoint between the two candidates, the distance measured relative to
	the largest magnitude of the block (activation codes: |frac(|v|) - 1/2|
	/ 127) or of the row (KV: distance / max |row|), which is what the
	engine's float32 noise scales with, and whose two candidates are at
	least min_step apart on the same scale (a flip of a tiny KV element
	changes too little to matter): near[] = (distance, name, step, what).
	Every element named in `flips` is rounded to the other candidate."""

	def __init__(self, margin=0.0, flips=(), min_step=0.0):
		self.margin = margin
		self.min_step = min_step
		self.flips = {}
		for where, pos, col in flips:
			self.flips.setdefault(where, []).append((pos, col))
		self.near = []
		self._named = set()

	def _note(self, where, pos, dist, step, what):
		"""dist, step: (rows, n) arrays; pos: the rows' positions.  An
		element quantised again under the same name is recorded once."""
		if self.margin <= 0:
			return
		step = np.broadcast_to(step, dist.shape)
		for r, c in zip(*np.nonzero((dist < self.margin) & (step >= self.min_step))):
			name = (where, int(pos[r]), int(c))
			if name not in self._named:
				self._named.add(name)
				self.near.append((float(dist[r, c]), name, float(step[r, c]),
						  what(r, c)))

	def _flips(self, where, pos):
		"""(row, col) of the flips for this rounding."""
		out = []
		for p, c in self.flips.get(where, ()):
			r = np.nonzero(pos == p)[0]
			if r.size:
				out.append((int(r[0]), c))
		return out

	def codes(self, v, t, where, pos):
		"""Codes of the scaled values v (float32 (rows, blocks, block),
		largest magnitude 127 per block) in activation type t."""
		q = _round(v, t)
		rows = v.shape[0]
		v2, q2 = v.reshape(rows, -1), q.reshape(rows, -1)
		if self.margin > 0:
			a = np.abs(v2.astype(np.float64))
			self._note(where, pos, np.abs(a - np.floor(a) - 0.5) / 127,
				   np.float64(1 / 127),
				   lambda r, c: 'activation code, x/d = %.6f' % v2[r, c])
		for r, c in self._flips(where, pos):
			alt = q2[r, c] + (1 if v2[r, c] > q2[r, c] else -1)
			if t != Q8_K or -127 <= alt <= 127:
				q2[r, c] = alt
		return q

	def f16(self, x, where, pos):
		"""x (tokens, ...) rounded to float16 (nearest even), as float64."""
		x = np.asarray(x, dtype=np.float64)
		shape = x.shape
		x = x.reshape(shape[0], -1)
		r = x.astype(np.float16).astype(np.float64)
		flips = self._flips(where, pos)
		if self.margin <= 0 and not flips:
			return r.reshape(shape)
		toward = np.where(r > x, -np.inf, np.inf)
		other = np.nextafter(r.astype(np.float16), toward.astype(np.float16))
		other = other.astype(np.float64)
		if self.margin > 0:
			scale = np.max(np.abs(x), axis=1, keepdims=True)
			with np.errstate(invalid='ignore', divide='ignore'):
				dist = np.where(r == x, np.inf, np.abs(x - (r + other) / 2) / scale)
				step = np.abs(r - other) / scale
			self._note(where, pos, dist, step,
				   lambda i, c: 'float16 of %.9g' % x[i, c])
		for i, c in flips:
			r[i, c] = other[i, c]
		return r.reshape(shape)


def round_f16(x, tape=None):
	"""x rounded to float16 as the KV cache stores it (float64 result).
	tape: None or (Tape, name of the cache, positions of x's rows)."""
	if tape is None:
		return np.asarray(x).astype(np.float16).astype(np.float64)
	return tape[0].f16(x, tape[1], tape[2])


def values(x, t, tape=None):
	"""The values the engine multiplies with: x (..., n) quantised to
	activation type t and decoded, as float64 (exact: f16 or f32 scale
	times an integer).  tape: None or (Tape, name of the product,
	positions of the rows of x (tokens, n)), which sees (and may change)
	the rounding."""
	if t in (Q8_0, Q8_1):
		d, v = _q8_0_scaled(x)
		# the stored scale: its float16 rounding has ties too (the codes
		# use 1/d before it, so only the block's value moves)
		if tape is not None and np.ndim(d) == 2:
			d = tape[0].f16(d, tape[1] + '/scale', tape[2])
		else:
			d = d.astype(np.float16)
	elif t == Q8_K:
		d, v = _q8_k_scaled(x)
	else:
		raise ValueError('not an activation type: %s' % quants.type_name(t))
	q = tape[0].codes(v, t, tape[1], tape[2]) if tape is not None else _round(v, t)
	y = d.astype(np.float64)[..., None] * q
	return y.reshape(np.shape(x))


def for_weight(x, weight_type):
	"""x as the matrix product with a weight of weight_type sees it: through
	the activation format for quantised weights, unchanged for float ones."""
	t = VEC_DOT_TYPE.get(weight_type)
	return x if t is None else values(x, t).astype(np.asarray(x).dtype, copy=False)


# BF16 weights on the engine's avx512bf16 level (ref.py --emulate act-bf16):
# vdpbf16ps multiplies bf16 pairs, so the engine first rounds its float32
# activation row to bfloat16 (the 16 high bits of a float32): to nearest,
# ties to the even one, and a float32 denormal becomes a zero of its sign
# (Intel SDM, VCVTNE2PS2BF16).  The products are then exact and summed in
# float32; the reference multiplies the rounded values in float64.
BF16 = 30                            # ggml type id


def bf16_values(x):
	"""x rounded as the engine rounds it for a BF16 weight on avx512bf16:
	first to float32 (the engine's activations), then to bfloat16."""
	f = np.asarray(x, dtype=np.float32)
	u = f.view(np.uint32).astype(np.uint64)
	r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
	tiny = np.abs(f) < np.float32(2.0 ** -126)
	return np.where(tiny, np.copysign(np.float32(0), f), r).astype(np.asarray(x).dtype)
