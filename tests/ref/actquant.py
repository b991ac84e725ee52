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
# boundary (k + 1/2) the two may round to different codes.  Such a tie is
# rare (a few per million elements) but one flipped code can move the
# logits of a small random model by a per cent (and then, the activations
# being off by that much, many more codes differ downstream).  The float16
# rounding of the KV cache has such ties too, and so has the float16
# rounding of a Q8_0 / Q8_1 block's scale d (the codes are unchanged, the
# block's values move by one float16 step of d).  An Oracle (below) reads
# the engine's own decisions from a tape and, only at such ties, takes the
# engine's side, so a comparison can tell "the engine rounded a tie the
# other way" from a real error.
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


# The tape oracle.  tests/unit/engine-run (ENGINE_RUN_TAPE=FILE) writes
# every row the engine quantised for a product — its floats and the bytes
# its own kernels made of them — keyed by weight, expert (or head) and
# position, and the F16 cache rows as stored.  The reference still computes
# everything itself; at each rounding it compares its decision with the
# engine's:
#   - the same: nothing to do (almost every element);
#   - different, and the reference's own value within EPS of the values
#     that round to the engine's choice (for neighbouring candidates: of
#     the tie between them), measured relative to the block's largest
#     magnitude (activation codes, Q8_0 scales) or the row's (cache): the
#     engine's side is taken and counted (an adoption; a cache element far
#     smaller than its row may be a few float16 steps off and still that
#     close);
#   - different anywhere else: a real disagreement, reported (the check
#     fails), and the reference keeps its own value.
# Because the reference takes the engine's side as it goes, a chain of
# ties (one adoption moving a later rounding near its tie) resolves in the
# same single run.  A row the tape does not hold is rounded by the
# reference alone (it can only make a check fail, never pass).
#
# EPS: the engine's float32 row differs from the reference's float64 one by
# its accumulation error, a few float32 ulps (2^-24 = 6e-8) of the terms
# summed; vs_engine.py measures it on every quantised element of every run
# (the "noise" it prints).  EPS is set well above the measured noise (see
# tests/ref/README) and far below a code step (1/127 of the block's largest
# magnitude): a real error moves a code by a whole step or more and lands
# this close to a tie only by chance, a few times per million elements.
EPS = 1e-5

TAPE_MAGIC = b'MOETAPE1'
_F16 = 1                             # ggml type id of the cache rows the oracle reads


def read_tape(path):
	"""(products, cache) of an engine-run tape: products maps (weight name
	as the reference calls it, expert or head or -1, position) to (float32
	row, bytes of the quantised row, activation type); cache is None or
	(KV type, uint8 array (layers, positions, rows, bytes per row))."""
	with open(path, 'rb') as f:
		b = f.read()
	if b[:8] != TAPE_MAGIC:
		raise ValueError('%s: not an engine-run tape' % path)
	o, prods, cache = 8, {}, None
	try:
		while o < len(b):
			kind = int(np.frombuffer(b, '<u4', 1, o)[0])
			o += 4
			if kind == 1:
				layer, exp, part, nparts = (int(v) for v in np.frombuffer(b, '<i4', 4, o))
				t, nl, n, cols, rb = (int(v) for v in np.frombuffer(b, '<u4', 5, o + 16))
				o += 36
				name = b[o:o + nl].decode()
				o += nl
				pos = np.frombuffer(b, '<i4', n, o)
				o += 4 * n
				x = np.frombuffer(b, '<f4', n * cols, o).reshape(n, cols)
				o += 4 * n * cols
				q = np.frombuffer(b, np.uint8, n * rb, o).reshape(n, rb)
				o += n * rb
				if nparts > 1:
					e = part
				elif exp >= 0:      # UTH "blk.1.ffn_up.5.weight": expert 5 of ffn_up_exps
					f = name.split('.')
					name, e = '%s.%s.%s_exps.weight' % (f[0], f[1], f[2]), exp
				else:
					e = -1
				for r in range(n):
					prods[(name, e, int(pos[r]))] = (x[r], q[r], t)
			elif kind == 2:
				kvt, nl, npos, rows, rb = (int(v) for v in np.frombuffer(b, '<u4', 5, o))
				o += 20
				cache = (kvt, np.frombuffer(b, np.uint8, nl * npos * rows * rb, o)
					 .reshape(nl, npos, rows, rb))
				o += nl * npos * rows * rb
			else:
				raise ValueError('record kind %d' % kind)
	except (ValueError, TypeError, UnicodeDecodeError) as err:
		raise ValueError('%s: a broken tape at byte %d (%s)' % (path, o, err))
	return prods, cache


def _decode(q, t, cols):
	"""The engine's quantised row -> (d float64 (nb,), codes int32 (nb, block))."""
	bs = BLOCK[t]
	nb = cols // bs
	if t == Q8_K:
		blk = q.reshape(nb, 4 + bs + 32)
		d = blk[:, :4].copy().view('<f4')[:, 0].astype(np.float64)
		return d, blk[:, 4:4 + bs].copy().view(np.int8).astype(np.int32)
	head = 4 if t == Q8_1 else 2
	blk = q.reshape(nb, head + bs)
	d = blk[:, :2].copy().view('<f2')[:, 0].astype(np.float64)
	return d, blk[:, head:].copy().view(np.int8).astype(np.int32)


def _f16_gap(x, h):
	"""How far x lies outside the values float16 rounds to h: 0 if it
	rounds there, else the distance to the nearer end of that interval
	(its ends are the midpoints to h's neighbours)."""
	h16 = np.float16(h)
	lo = (float(h16) + float(np.nextafter(h16, np.float16(-np.inf)))) / 2
	hi = (float(h16) + float(np.nextafter(h16, np.float16(np.inf)))) / 2
	return max(lo - x, x - hi, 0.0)


class Oracle:
	"""The engine's rounding decisions (read_tape) for a reference run.
	values() and f16() are actquant.values / round_f16 with the oracle's
	rule (above).  After a run: adopted = [(what, where, position, column,
	distance from the tie)], wrong = the same for disagreements away from
	a tie, missing = rows the tape lacked, noise = max |engine's float -
	reference's| over the block's largest magnitude, over every quantised
	element."""

	def __init__(self, prods, cache=None, eps=EPS):
		"""prods, cache: as read_tape returns them."""
		self.prods, self.cache, self.eps = prods, cache, eps
		self.reset()

	@classmethod
	def read(cls, path, eps=EPS):
		return cls(*read_tape(path), eps=eps)

	def reset(self):
		self.adopted, self.wrong, self.missing, self.noise = [], [], set(), 0.0
		self.compared = {}               # kind -> elements compared with the tape

	def _count(self, what, n):
		self.compared[what] = self.compared.get(what, 0) + n

	def _judge(self, what, where, p, c, dist):
		"""A disagreement at element c whose engine choice rounds from
		values `dist` away from the reference's: adopt (True) or report."""
		ok = dist <= self.eps
		(self.adopted if ok else self.wrong).append((what, where, int(p), int(c), float(dist)))
		return ok

	def values(self, x, t, key, pos):
		"""actquant.values(x, t) for the rows of x at positions pos of
		the product key = (weight name, expert or head or -1)."""
		x = np.asarray(x)
		rows, cols = x.shape[0], x.shape[-1]
		if t == Q8_K:
			d, v = _q8_k_scaled(x)
			d = d.astype(np.float64)
		else:
			d32, v = _q8_0_scaled(x)
			d = d32.astype(np.float16).astype(np.float64)
		q = _round(v, t)
		bs = BLOCK[t]
		xr = _blocks(x, bs).astype(np.float64)
		amax = np.max(np.abs(xr), axis=-1)
		for r in range(rows):
			name = (key[0], key[1], int(pos[r]))
			rec = self.prods.get(name)
			if rec is None or rec[2] != t or rec[0].size != cols:
				self.missing.add(name)
				continue
			xe, qb, _ = rec
			gap = np.abs(xe.astype(np.float64).reshape(-1, bs) - xr[r]).max(axis=1)
			some = amax[r] > 0
			if some.any():
				self.noise = max(self.noise, float((gap[some] / amax[r][some]).max()))
			de, qe = _decode(qb, t, cols)
			self._count('code', cols)
			if t != Q8_K:
				self._count('scale', cols // bs)
			if t == Q8_K:
				# the block's extreme element chosen with the other sign
				# (two of nearly equal magnitude): every code and d
				# negated, the same values
				flip = np.sign(de) * np.sign(d[r]) < 0
				qe[flip] = -qe[flip]
			else:
				# the float16 scale: a tie of d = amax / 127
				for blk in np.nonzero(de != d[r])[0]:
					dist = _f16_gap(float(d32[r, blk]), de[blk]) / float(d32[r, blk])
					if self._judge('scale', key, pos[r], blk, dist):
						d[r, blk] = de[blk]
			qr = q[r].reshape(-1)
			vr = v[r].reshape(-1).astype(np.float64)
			qe = qe.reshape(-1)
			for c in np.nonzero(qe != qr)[0]:
				# outside [q - 1/2, q + 1/2], in units of the largest
				# magnitude (127)
				dist = max(abs(vr[c] - qe[c]) - 0.5, 0.0) / 127
				if self._judge('code', key, pos[r], c, dist):
					qr[c] = qe[c]
		return (d[..., None] * q).reshape(x.shape)

	def f16(self, x, where, pos):
		"""x (tokens, ...) rounded to float16 as the cache stores it, as
		float64; where = (layer, name of the cached array: k, v, latent,
		k_pe)."""
		x = np.asarray(x, dtype=np.float64)
		shape = x.shape
		x = x.reshape(shape[0], -1)
		r = x.astype(np.float16).astype(np.float64)
		il, name = where
		if self.cache is None or self.cache[0] != _F16:
			self.missing.add(('cache', il, name))
			return r.reshape(shape)
		rows = self.cache[1][il]                 # (positions, rows, bytes)
		n = x.shape[1]
		half = rows.shape[2] // 2
		for i in range(shape[0]):
			p = int(pos[i])
			row = rows[p].copy().view('<f2').astype(np.float64) if p < rows.shape[0] \
				else None
			if row is None:
				got = None
			elif rows.shape[1] == 2:             # K and V
				got = row[0 if name == 'k' else 1]
			elif name == 'k_pe':                 # the latent row's tail
				got = row[0, half - n:]
			else:
				got = row[0, :n]
			if got is None or got.size != n:
				self.missing.add(('cache', il, name, p))
				continue
			scale = np.max(np.abs(x[i]))
			self._count('cache', n)
			for c in np.nonzero(got != r[i])[0]:
				dist = _f16_gap(x[i, c], got[c]) / scale if scale else np.inf
				if self._judge('cache', 'blk.%d.%s' % (il, name), p, c, dist):
					r[i, c] = got[c]
		return r.reshape(shape)


def round_f16(x, tape=None):
	"""x rounded to float16 as the KV cache stores it (float64 result).
	tape: None or (Oracle, (layer, name of the cached array), positions of
	x's rows)."""
	if tape is None:
		return np.asarray(x).astype(np.float16).astype(np.float64)
	return tape[0].f16(x, tape[1], tape[2])

def values(x, t, tape=None):
	"""The values the engine multiplies with: x (..., n) quantised to
	activation type t and decoded, as float64 (exact: f16 or f32 scale
	times an integer).  tape: None or (Oracle, (weight name, expert or
	-1), positions of the rows of x (tokens, n)), which decides the ties."""
	if t not in (Q8_0, Q8_1, Q8_K):
		raise ValueError('not an activation type: %s' % quants.type_name(t))
	if tape is not None:
		return tape[0].values(x, t, tape[1], tape[2])
	if t == Q8_K:
		d, v = _q8_k_scaled(x)
	else:
		d, v = _q8_0_scaled(x)
		d = d.astype(np.float16)
	y = d.astype(np.float64)[..., None] * _round(v, t)
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
