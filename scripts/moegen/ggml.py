# moegen/ggml.py — ggml tensor types: the traits table, half-precision
# conversions, and numpy quantisers / dequantisers for the block formats the
# generator writes (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4).
#
# Block layouts follow ggml's public format description; the code is ours.
# Q8_0 and Q4_0 reproduce ggml's reference round-to-nearest quantisation
# bit for bit (float32 arithmetic, roundf / truncating casts as in C).
# The K-quant quantisers are simpler than ggml's (no iterative search for
# scales) but produce valid blocks whose decoded values track the input.
import numpy as np

QK = 32      # block size of Q4_0 / Q8_0
QK_K = 256   # super-block size of the K-quants

# ggml type ids (stable on-disk numbers in GGUF).
F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 8, 12, 13, 14, 30
MXFP4 = 39

# id -> (name, elements per block, bytes per block)
TRAITS = {
    F32: ('F32', 1, 4),
    F16: ('F16', 1, 2),
    BF16: ('BF16', 1, 2),
    Q4_0: ('Q4_0', QK, 2 + QK // 2),
    Q8_0: ('Q8_0', QK, 2 + QK),
    Q4_K: ('Q4_K', QK_K, 2 + 2 + 12 + QK_K // 2),
    Q5_K: ('Q5_K', QK_K, 2 + 2 + 12 + QK_K // 8 + QK_K // 2),
    Q6_K: ('Q6_K', QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),
    MXFP4: ('MXFP4', QK, 1 + QK // 2),
}

# Names the other ggml types have, so a reader can say what it cannot decode.
OTHER_NAMES = {
    3: 'Q4_1', 6: 'Q5_0', 7: 'Q5_1', 9: 'Q8_1', 10: 'Q2_K', 11: 'Q3_K', 15: 'Q8_K',
    16: 'IQ2_XXS', 17: 'IQ2_XS', 18: 'IQ3_XXS', 19: 'IQ1_S', 20: 'IQ4_NL', 21: 'IQ3_S',
    22: 'IQ2_S', 23: 'IQ4_XS', 24: 'I8', 25: 'I16', 26: 'I32', 27: 'I64', 28: 'F64',
    29: 'IQ1_M', 34: 'TQ1_0', 35: 'TQ2_0',
}

BY_NAME = {v[0].lower(): k for k, v in TRAITS.items()}


def type_name(t):
    if t in TRAITS:
        return TRAITS[t][0]
    return OTHER_NAMES.get(t, 'type%d' % t)


def row_bytes(t, n):
    """Bytes of one row of n elements of type t (n must be a multiple of the block)."""
    _, bs, nb = TRAITS[t]
    if n % bs:
        raise ValueError('row of %d elements is not a multiple of the %s block (%d)'
                         % (n, TRAITS[t][0], bs))
    return n // bs * nb


def nbytes(t, ne):
    """Bytes of a tensor with ggml dims ne (fastest first)."""
    rows = 1
    for d in ne[1:]:
        rows *= int(d)
    return row_bytes(t, int(ne[0])) * rows


# --- half precision ---------------------------------------------------------

def f32_to_bf16_bits(x):
    """Round float32 to bfloat16 (nearest even), as uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + np.uint32(0x7FFF)
    out = ((u + r) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 64).astype(np.uint16)
    return out


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(x, t):
    """Values of x as type t would hold them (F32/F16/BF16), as float32."""
    if t == F32:
        return np.asarray(x, dtype=np.float32)
    if t == F16:
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if t == BF16:
        return bf16_bits_to_f32(f32_to_bf16_bits(x))
    raise ValueError('round_to: not a float type')


# --- quantisers: 2-D float32 (rows, n) -> uint8 (rows, row_bytes) ------------

def _blocks(x, bs):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % bs:
        raise ValueError('row length %d is not a multiple of %d' % (x.shape[-1], bs))
    return x.reshape(-1, bs)


def _f16_bytes(v):
    return np.asarray(v, dtype=np.float32).astype('<f2').view(np.uint8).reshape(-1, 2)


def _roundf(v):
    """C roundf (half away from zero) of float32 values; exact via float64."""
    v = v.astype(np.float64)
    return np.trunc(v + np.copysign(0.5, v))


def quant_q8_0(x):
    b = _blocks(x, QK)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide='ignore'):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _roundf(b * idv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = _f16_bytes(d)
    out[:, 2:] = q.view(np.uint8)
    return out


def quant_q4_0(x):
    b = _blocks(x, QK)
    i = np.abs(b).argmax(axis=1)          # first element of largest magnitude
    mx = np.take_along_axis(b, i[:, None], axis=1)[:, 0]
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide='ignore'):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    s = (b * idv[:, None]).astype(np.float32) + np.float32(8.5)
    q = np.minimum(np.trunc(s), 15).astype(np.uint8)
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = _f16_bytes(d)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out


def _safe_div(a, b):
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.where(b != 0, a / np.where(b != 0, b, 1), 0).astype(np.float32)


def _kq_scales(b, nmax):
    """Sub-block scales/mins for Q4_K/Q5_K: b is (nsb, 8, 32).
    Returns d, dmin (f16-rounded float32, per super-block), ls, lm (uint8
    6-bit, per sub-block) and the integer quants q (nsb, 8, 32)."""
    mn = np.minimum(b.min(axis=2), 0)
    mx = b.max(axis=2)
    scale = (mx - mn) / np.float32(nmax)
    d = round_to(scale.max(axis=1) / np.float32(63), F16)
    dmin = round_to((-mn).max(axis=1) / np.float32(63), F16)
    ls = np.clip(np.rint(_safe_div(scale, d[:, None])), 0, 63).astype(np.uint8)
    lm = np.clip(np.rint(_safe_div(-mn, dmin[:, None])), 0, 63).astype(np.uint8)
    d1 = d[:, None] * ls
    m1 = dmin[:, None] * lm
    q = np.rint(_safe_div(b + m1[:, :, None], np.broadcast_to(d1[:, :, None], b.shape)))
    q = np.clip(q, 0, nmax).astype(np.uint8)
    return d, dmin, ls, lm, q


def _pack_scales_k4(ls, lm):
    s = np.empty((ls.shape[0], 12), dtype=np.uint8)
    s[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    s[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return s


def quant_q4_k(x):
    b = _blocks(x, QK_K).reshape(-1, 8, 32)
    d, dmin, ls, lm, q = _kq_scales(b, 15)
    q = q.reshape(-1, 4, 2, 32)         # (nsb, chunk of 64, half, 32)
    out = np.empty((b.shape[0], 144), dtype=np.uint8)
    out[:, 0:2] = _f16_bytes(d)
    out[:, 2:4] = _f16_bytes(dmin)
    out[:, 4:16] = _pack_scales_k4(ls, lm)
    out[:, 16:] = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)
    return out


def quant_q5_k(x):
    b = _blocks(x, QK_K).reshape(-1, 8, 32)
    d, dmin, ls, lm, q = _kq_scales(b, 31)
    out = np.empty((b.shape[0], 176), dtype=np.uint8)
    out[:, 0:2] = _f16_bytes(d)
    out[:, 2:4] = _f16_bytes(dmin)
    out[:, 4:16] = _pack_scales_k4(ls, lm)
    hi = (q >> 4).astype(np.uint8)      # (nsb, 8, 32): bit k of qh[l] = sub-block k
    qh = np.zeros((b.shape[0], 32), dtype=np.uint8)
    for k in range(8):
        qh |= hi[:, k, :] << k
    out[:, 16:48] = qh
    lo = (q & 0xF).reshape(-1, 4, 2, 32)
    out[:, 48:] = (lo[:, :, 0, :] | (lo[:, :, 1, :] << 4)).reshape(-1, 128)
    return out


def quant_q6_k(x):
    b = _blocks(x, QK_K).reshape(-1, 16, 16)
    scale = np.abs(b).max(axis=2) / np.float32(31)
    d = round_to(scale.max(axis=1) / np.float32(127), F16)
    sc = np.clip(np.rint(_safe_div(scale, d[:, None])), -128, 127).astype(np.int8)
    eff = d[:, None] * sc.astype(np.float32)
    q = np.rint(_safe_div(b, np.broadcast_to(eff[:, :, None], b.shape)))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # (nsb, half, k, l)
    out = np.empty((b.shape[0], 210), dtype=np.uint8)
    ql = np.empty((b.shape[0], 2, 64), dtype=np.uint8)
    ql[:, :, 0:32] = (q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4)
    ql[:, :, 32:64] = (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
          | ((q[:, :, 3] >> 4) << 6))
    out[:, 0:128] = ql.reshape(-1, 128)
    out[:, 128:192] = qh.reshape(-1, 64)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = _f16_bytes(d)
    return out


# --- dequantisers: flat uint8 bytes -> flat float32 ---------------------------

def _as_blocks(raw, t):
    nb = TRAITS[t][2]
    a = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw
    a = a.reshape(-1)
    if a.size % nb:
        raise ValueError('%s data of %d bytes is not a whole number of blocks'
                         % (TRAITS[t][0], a.size))
    return a.reshape(-1, nb)


def _f16_at(b, off):
    return np.ascontiguousarray(b[:, off:off + 2]).view('<f2').astype(np.float32)[:, 0]


def deq_q8_0(raw):
    b = _as_blocks(raw, Q8_0)
    d = _f16_at(b, 0)
    q = np.ascontiguousarray(b[:, 2:]).view(np.int8).astype(np.float32)
    return (d[:, None] * q).reshape(-1)


def deq_q4_0(raw):
    b = _as_blocks(raw, Q4_0)
    d = _f16_at(b, 0)
    qs = b[:, 2:]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float32) - 8
    return (d[:, None] * q).reshape(-1)


def _unpack_scales_k4(s):
    ls = np.empty((s.shape[0], 8), dtype=np.uint8)
    lm = np.empty((s.shape[0], 8), dtype=np.uint8)
    ls[:, 0:4] = s[:, 0:4] & 63
    lm[:, 0:4] = s[:, 4:8] & 63
    ls[:, 4:8] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    lm[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return ls, lm


def deq_q4_k(raw):
    b = _as_blocks(raw, Q4_K)
    d, dmin = _f16_at(b, 0), _f16_at(b, 2)
    ls, lm = _unpack_scales_k4(b[:, 4:16])
    qs = b[:, 16:].reshape(-1, 4, 32)
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)
    d1 = (d[:, None] * ls).astype(np.float32)
    m1 = (dmin[:, None] * lm).astype(np.float32)
    return (d1[:, :, None] * q - m1[:, :, None]).reshape(-1)


def deq_q5_k(raw):
    b = _as_blocks(raw, Q5_K)
    d, dmin = _f16_at(b, 0), _f16_at(b, 2)
    ls, lm = _unpack_scales_k4(b[:, 4:16])
    qh = b[:, 16:48]
    qs = b[:, 48:].reshape(-1, 4, 32)
    lo = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)
    hi = np.stack([(qh >> k) & 1 for k in range(8)], axis=1)
    q = (lo | (hi << 4)).astype(np.float32)
    d1 = (d[:, None] * ls).astype(np.float32)
    m1 = (dmin[:, None] * lm).astype(np.float32)
    return (d1[:, :, None] * q - m1[:, :, None]).reshape(-1)


def deq_q6_k(raw):
    b = _as_blocks(raw, Q6_K)
    ql = b[:, 0:128].reshape(-1, 2, 64)
    qh = b[:, 128:192].reshape(-1, 2, 32)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    d = _f16_at(b, 208)
    q = np.empty((b.shape[0], 2, 4, 32), dtype=np.int16)
    q[:, :, 0] = (ql[:, :, 0:32] & 0xF) | (((qh >> 0) & 3) << 4)
    q[:, :, 1] = (ql[:, :, 32:64] & 0xF) | (((qh >> 2) & 3) << 4)
    q[:, :, 2] = (ql[:, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4)
    q[:, :, 3] = (ql[:, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4)
    q = (q - 32).astype(np.float32).reshape(-1, 16, 16)
    eff = (d[:, None] * sc).astype(np.float32)
    return (eff[:, :, None] * q).reshape(-1)


# --- MXFP4 (OCP microscaling FP4): block = e (E8M0 exponent byte) | qs[16];
# element j in the low nibble of qs[j], element j + 16 in the high nibble;
# a nibble is an E2M1 code (sign, 2 exponent bits, 1 mantissa bit), value
# FP4[code] * 2^(e - 127).

FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
               dtype=np.float32)


_FP4_MID = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def quant_mxfp4(x):
    """The exponent as ggml's reference quantiser chooses it (floor(log2
    amax) - 2, so the largest code 6 covers 1.5 * 2^floor(log2 amax) and
    larger elements saturate); each element the nearest code (the first
    of equal ones)."""
    b = _blocks(x, QK).astype(np.float64)
    amax = np.abs(b).max(axis=1)
    with np.errstate(divide='ignore'):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2 + 127, 0)
    e = np.clip(e, 0, 254).astype(np.int64)
    d = np.ldexp(1.0, e - 127)
    # nearest magnitude by the midpoints of 0 0.5 1 1.5 2 3 4 6 (a value on
    # a midpoint takes the smaller magnitude: the first of equally near
    # codes); the sign bit only when the magnitude is not 0 (+0 comes first).
    # d is a power of two, so |x| / d is exact.
    mag = np.searchsorted(_FP4_MID, np.abs(b) / d[:, None], side='left')
    q = (mag + 8 * ((b < 0) & (mag > 0))).astype(np.uint8)
    out = np.empty((b.shape[0], 17), dtype=np.uint8)
    out[:, 0] = e
    out[:, 1:] = q[:, :16] | (q[:, 16:] << 4)
    return out


def deq_mxfp4(raw):
    b = _as_blocks(raw, MXFP4)
    d = np.ldexp(np.float32(1), b[:, 0].astype(np.int32) - 127).astype(np.float32)
    q = np.concatenate([b[:, 1:] & 0xF, b[:, 1:] >> 4], axis=1)
    return (FP4[q] * d[:, None]).reshape(-1)


QUANT = {Q8_0: quant_q8_0, Q4_0: quant_q4_0, Q4_K: quant_q4_k, Q5_K: quant_q5_k,
         Q6_K: quant_q6_k, MXFP4: quant_mxfp4}
DEQUANT = {Q8_0: deq_q8_0, Q4_0: deq_q4_0, Q4_K: deq_q4_k, Q5_K: deq_q5_k, Q6_K: deq_q6_k,
           MXFP4: deq_mxfp4}


def encode(x, t):
    """float32 array (..., n) -> bytes-like uint8 array holding type t."""
    x = np.asarray(x, dtype=np.float32)
    if t == F32:
        return np.ascontiguousarray(x, dtype='<f4').reshape(-1).view(np.uint8)
    if t == F16:
        return np.ascontiguousarray(x.astype('<f2')).reshape(-1).view(np.uint8)
    if t == BF16:
        return f32_to_bf16_bits(x.reshape(-1)).astype('<u2').view(np.uint8)
    if t in QUANT:
        return QUANT[t](x.reshape(-1, x.shape[-1])).reshape(-1)
    raise ValueError('cannot encode type %s' % type_name(t))


def decode(raw, t, count=None):
    """Bytes of type t -> flat float32 array."""
    if t == F32:
        out = np.frombuffer(raw, dtype='<f4').astype(np.float32)
    elif t == F16:
        out = np.frombuffer(raw, dtype='<f2').astype(np.float32)
    elif t == BF16:
        out = bf16_bits_to_f32(np.frombuffer(raw, dtype='<u2'))
    elif t in DEQUANT:
        out = DEQUANT[t](np.frombuffer(raw, dtype=np.uint8))
    else:
        raise ValueError('cannot decode ggml type %s' % type_name(t))
    if count is not None and out.size != count:
        raise ValueError('decoded %d values, expected %d' % (out.size, count))
    return out
