# tests/ref/quants.py — ggml tensor types decoded to float with numpy.
#
# Part of the independent reference (tests/ref): shares no code with the C
# engine nor with the generator's own dequantisers (scripts/moegen/ggml.py),
# so the self-test can check the two Python decoders against each other.
# Block layouts are ggml's published formats; each decoder below states the
# layout it reads.  Every decoder maps (n_blocks, block_bytes) uint8 to
# (n_blocks, block_elems) float32, computing as ggml does (float32 scales
# from f16, integer quants times scale).
#
#   values = decode(raw_uint8, ggml_type, n_elements)    # flat float32
import numpy as np

QK = 32       # elements per block of the 32-element ("legacy") formats
QK_K = 256    # elements per super-block of the K-quants and IQ4_XS

# IQ4_NL / IQ4_XS code book: the 16 non-uniform levels a 4-bit index selects.
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
		       1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def _f16(b, off):
	"""The little-endian f16 at byte offset `off` of every block, as float32."""
	return np.ascontiguousarray(b[:, off:off + 2]).view('<f2').astype(np.float32)[:, 0]


def _nibbles(qs):
	"""(nb, 16) bytes -> (nb, 32) 4-bit values: the 16 low nibbles, then
	the 16 high nibbles (the order of every 32-element 4-bit block)."""
	return np.concatenate([qs & 0xF, qs >> 4], axis=1)


def _bits32(qh):
	"""(nb, 4) bytes of a little-endian u32 -> (nb, 32) bits, bit e for element e."""
	u = np.ascontiguousarray(qh).view('<u4')            # (nb, 1)
	return ((u >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


# --- 32-element blocks ------------------------------------------------------------

def dec_q4_0(b):
	# d f16 | qs[16]: x = d * (q - 8)
	d = _f16(b, 0)
	return d[:, None] * (_nibbles(b[:, 2:18]).astype(np.float32) - 8)


def dec_q4_1(b):
	# d f16 | m f16 | qs[16]: x = d * q + m
	d, m = _f16(b, 0), _f16(b, 2)
	return d[:, None] * _nibbles(b[:, 4:20]).astype(np.float32) + m[:, None]


def dec_q5_0(b):
	# d f16 | qh u32 (bit e = 5th bit of element e) | qs[16]: x = d * (q - 16)
	d = _f16(b, 0)
	q = _nibbles(b[:, 6:22]) | (_bits32(b[:, 2:6]) << 4)
	return d[:, None] * (q.astype(np.float32) - 16)


def dec_q5_1(b):
	# d f16 | m f16 | qh u32 | qs[16]: x = d * q + m
	d, m = _f16(b, 0), _f16(b, 2)
	q = _nibbles(b[:, 8:24]) | (_bits32(b[:, 4:8]) << 4)
	return d[:, None] * q.astype(np.float32) + m[:, None]


def dec_q8_0(b):
	# d f16 | qs[32] int8: x = d * q
	d = _f16(b, 0)
	q = np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(np.float32)
	return d[:, None] * q


def dec_q8_1(b):
	# d f16 | s f16 (= d * sum q, not needed to decode) | qs[32] int8: x = d * q
	d = _f16(b, 0)
	q = np.ascontiguousarray(b[:, 4:36]).view(np.int8).astype(np.float32)
	return d[:, None] * q


def dec_iq4_nl(b):
	# d f16 | qs[16]: x = d * LEVELS[q]
	d = _f16(b, 0)
	return d[:, None] * IQ4_LEVELS[_nibbles(b[:, 2:18])]


# --- 256-element super-blocks ---------------------------------------------------------

def _crumbs(qs):
	"""(nb, 64) bytes of 2-bit quants -> (nb, 256) in element order.
	Element e = 128*n + 32*j + l (n < 2, j < 4, l < 32) is bits 2j..2j+1 of
	byte 32*n + l: each byte holds four elements 32 apart."""
	q = qs.reshape(-1, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
	return (q & 3).reshape(-1, 256)


def dec_q2_k(b):
	# scales[16] (low nibble: scale, high nibble: min, per 16 elements) |
	# qs[64] | d f16 | dmin f16: x = d * sc * q - dmin * m
	sc = b[:, 0:16]
	q = _crumbs(b[:, 16:80]).reshape(-1, 16, 16).astype(np.float32)
	d, dmin = _f16(b, 80), _f16(b, 82)
	dl = d[:, None] * (sc & 0xF).astype(np.float32)
	ml = dmin[:, None] * (sc >> 4).astype(np.float32)
	return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1, 256)


def _q3_k_scales(s):
	"""12 bytes -> 16 signed 6-bit scales (minus 32).  Scale j: low 4 bits
	in the low (j < 8) or high (j >= 8) nibble of byte j % 8, high 2 bits in
	bits 2*(j // 4) of byte 8 + j % 4."""
	j = np.arange(16)
	lo = np.where(j < 8, s[:, j % 8] & 0xF, s[:, j % 8] >> 4)
	hi = (s[:, 8 + j % 4] >> (2 * (j // 4)).astype(np.uint8)) & 3
	return (lo | (hi << 4)).astype(np.int16) - 32


def dec_q3_k(b):
	# hmask[32] | qs[64] | scales[12] | d f16: x = d * sc * (q - 4 * !hbit)
	# The high bit of element e = 128*n + 32*j + l is bit 4*n + j of hmask[l].
	hm = b[:, 0:32]
	low = _crumbs(b[:, 32:96]).astype(np.int16)
	bit = (4 * np.arange(2).reshape(2, 1) + np.arange(4).reshape(1, 4)).astype(np.uint8)
	h = ((hm.reshape(-1, 1, 1, 32) >> bit.reshape(1, 2, 4, 1)) & 1).reshape(-1, 256)
	q = (low - 4 * (1 - h.astype(np.int16))).reshape(-1, 16, 16).astype(np.float32)
	sc = _q3_k_scales(b[:, 96:108]).astype(np.float32)
	d = _f16(b, 108)
	return ((d[:, None] * sc)[:, :, None] * q).reshape(-1, 256)


def _k4_scales(s):
	"""12 bytes -> 8 six-bit scales and 8 six-bit mins (Q4_K, Q5_K).
	Sub-blocks 0-3: low 6 bits of bytes 0-3 (scales) and 4-7 (mins).
	Sub-blocks 4-7: nibbles of bytes 8-11 plus the top 2 bits of bytes 0-7."""
	sc = np.empty((s.shape[0], 8), dtype=np.uint8)
	mn = np.empty((s.shape[0], 8), dtype=np.uint8)
	sc[:, :4] = s[:, 0:4] & 63
	mn[:, :4] = s[:, 4:8] & 63
	sc[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
	mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
	return sc.astype(np.float32), mn.astype(np.float32)


def _k4_nibbles(qs):
	"""(nb, 128) bytes -> (nb, 8, 32): each 32 bytes hold two sub-blocks of
	32 elements, the low nibbles first, then the high nibbles."""
	q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
	return (q & 0xF).reshape(-1, 8, 32)


def dec_q4_k(b):
	# d f16 | dmin f16 | scales[12] | qs[128]: x = d * sc * q - dmin * m
	d, dmin = _f16(b, 0), _f16(b, 2)
	sc, mn = _k4_scales(b[:, 4:16])
	q = _k4_nibbles(b[:, 16:144]).astype(np.float32)
	dl = d[:, None] * sc
	ml = dmin[:, None] * mn
	return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1, 256)


def dec_q5_k(b):
	# d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; the 5th bit of
	# element l of sub-block s is bit s of qh[l].
	d, dmin = _f16(b, 0), _f16(b, 2)
	sc, mn = _k4_scales(b[:, 4:16])
	qh = b[:, 16:48]
	hi = (qh.reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
	q = (_k4_nibbles(b[:, 48:176]) | (hi << 4)).astype(np.float32)
	dl = d[:, None] * sc
	ml = dmin[:, None] * mn
	return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1, 256)


def dec_q6_k(b):
	# ql[128] | qh[64] | scales[16] int8 | d f16: x = d * sc * (q - 32).
	# Per half n (128 elements): element 32*k + l takes its low 4 bits from
	# ql[64n + l + 32*(k & 1)] (low nibble for k < 2, high for k >= 2) and
	# its high 2 bits from bits 2k..2k+1 of qh[32n + l].
	ql = b[:, 0:128].reshape(-1, 2, 2, 32)           # (nb, n, k & 1, l)
	qh = b[:, 128:192].reshape(-1, 2, 1, 32)         # (nb, n, -, l)
	sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
	d = _f16(b, 208)
	low = np.concatenate([ql & 0xF, ql >> 4], axis=2)                  # k = 0..3
	high = (qh >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3
	q = (low | (high << 4)).astype(np.float32) - 32
	return ((d[:, None] * sc)[:, :, None] * q.reshape(-1, 16, 16)).reshape(-1, 256)


def dec_q8_k(b):
	# d f32 | qs[256] int8 | bsums[16] int16 (sums of 16 codes, not needed
	# to decode): x = d * q.  The activation format of the K-quants.
	d = np.ascontiguousarray(b[:, 0:4]).view('<f4')[:, 0]
	q = np.ascontiguousarray(b[:, 4:260]).view(np.int8).astype(np.float32)
	return d[:, None] * q


def dec_iq4_xs(b):
	# d f16 | scales_h u16 | scales_l[4] | qs[128]: eight sub-blocks of 32,
	# each a 6-bit scale (low 4 bits: nibble ib % 2 of scales_l[ib / 2],
	# high 2 bits: bits 2ib of scales_h) minus 32 and 16 bytes of nibbles.
	d = _f16(b, 0)
	sh = np.ascontiguousarray(b[:, 2:4]).view('<u2')[:, 0].astype(np.uint32)
	ib = np.arange(8)
	lo = (b[:, 4 + ib // 2] >> (4 * (ib % 2)).astype(np.uint8)) & 0xF
	hi = (sh[:, None] >> (2 * ib).astype(np.uint32)) & 3
	ls = (lo.astype(np.int32) | (hi.astype(np.int32) << 4)) - 32
	qs = b[:, 8:136].reshape(-1, 8, 16)
	q = IQ4_LEVELS[np.concatenate([qs & 0xF, qs >> 4], axis=2)]       # (nb, 8, 32)
	return ((d[:, None] * ls.astype(np.float32))[:, :, None] * q).reshape(-1, 256)


def dec_mxfp4(b):
	# e u8 (E8M0: the scale 2^(e - 127)) | qs[16]: element j in the low
	# nibble of qs[j], element j + 16 in the high nibble; a nibble is an
	# E2M1 float (sign, 2 exponent bits with bias 1, 1 mantissa bit):
	# x = FP4[q] * 2^(e - 127)  (OCP Microscaling Formats spec, v1.0)
	scale = np.ldexp(np.float32(1), b[:, 0].astype(np.int32) - 127).astype(np.float32)
	q = _nibbles(b[:, 1:17])
	return scale[:, None] * FP4_E2M1[q]


# E2M1 values by code: 0 000 = 0, 0 001 = 0.5 (subnormal), then
# 2^(exp - 1) * (1 + mantissa / 2); bit 3 is the sign
FP4_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
		    dtype=np.float32)


# --- the type table ---------------------------------------------------------------

def _f32(b):
	return np.ascontiguousarray(b).view('<f4').astype(np.float32)


def _f16_all(b):
	return np.ascontiguousarray(b).view('<f2').astype(np.float32)


def _bf16(b):
	u = np.ascontiguousarray(b).view('<u2').astype(np.uint32) << 16
	return u.view(np.float32)


# ggml type id -> (name, elements per block, bytes per block, decoder)
TYPES = {
	0: ('F32', 1, 4, _f32),
	1: ('F16', 1, 2, _f16_all),
	2: ('Q4_0', QK, 18, dec_q4_0),
	3: ('Q4_1', QK, 20, dec_q4_1),
	6: ('Q5_0', QK, 22, dec_q5_0),
	7: ('Q5_1', QK, 24, dec_q5_1),
	8: ('Q8_0', QK, 34, dec_q8_0),
	9: ('Q8_1', QK, 36, dec_q8_1),
	10: ('Q2_K', QK_K, 84, dec_q2_k),
	11: ('Q3_K', QK_K, 110, dec_q3_k),
	12: ('Q4_K', QK_K, 144, dec_q4_k),
	13: ('Q5_K', QK_K, 176, dec_q5_k),
	14: ('Q6_K', QK_K, 210, dec_q6_k),
	15: ('Q8_K', QK_K, 292, dec_q8_k),
	20: ('IQ4_NL', QK, 18, dec_iq4_nl),
	23: ('IQ4_XS', QK_K, 136, dec_iq4_xs),
	30: ('BF16', 1, 2, _bf16),
	39: ('MXFP4', QK, 17, dec_mxfp4),
}
BY_NAME = {v[0]: k for k, v in TYPES.items()}


def type_name(t):
	return TYPES[t][0] if t in TYPES else 'type%d' % t


def nbytes(t, n_elements, row_len):
	"""Bytes of a tensor of type t; rows of row_len elements must be whole blocks."""
	_, bs, bb, _ = TYPES[t]
	if row_len % bs:
		raise ValueError('row of %d elements is not a multiple of the %s block (%d)'
				 % (row_len, TYPES[t][0], bs))
	return n_elements // bs * bb


def decode(raw, t, n_elements):
	"""uint8 bytes of n_elements values of type t -> flat float32 array."""
	if t not in TYPES:
		raise ValueError('cannot decode ggml type %s' % type_name(t))
	name, bs, bb, fn = TYPES[t]
	raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
	if n_elements % bs or raw.size != n_elements // bs * bb:
		raise ValueError('%s: %d bytes do not hold %d elements'
				 % (name, raw.size, n_elements))
	out = fn(raw.reshape(-1, bb) if bs > 1 else raw).reshape(-1)
	return out.astype(np.float32, copy=False)
