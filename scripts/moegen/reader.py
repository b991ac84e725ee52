# moegen/reader.py — a small, strict GGUF (v2/v3) reader in numpy.
#
# Independent of the C code on purpose: the numpy reference forward pass and
# the generator's tests use it to check what the C tools read and write.
# Reads every KV type (arrays too) and dequantises tensors of the types in
# moegen.ggml (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) to float32.
#
#   r = GGUFReader('m.gguf')
#   r.kv['llama.block_count'], r.kv_type['llama.block_count']
#   for t in r.tensors: t.name, t.ne, t.type, t.offset, t.nbytes
#   w = r.tensor('blk.0.attn_q.weight')   # float32, numpy shape = ne reversed
import mmap
import struct

import numpy as np

from . import ggml

MAGIC = b'GGUF'

# GGUF value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, \
    FLOAT64 = range(13)

_SCALAR = {
    UINT8: '<u1', INT8: '<i1', UINT16: '<u2', INT16: '<i2', UINT32: '<u4', INT32: '<i4',
    FLOAT32: '<f4', BOOL: '<u1', UINT64: '<u8', INT64: '<i8', FLOAT64: '<f8',
}
TYPE_NAMES = {
    UINT8: 'u8', INT8: 'i8', UINT16: 'u16', INT16: 'i16', UINT32: 'u32', INT32: 'i32',
    FLOAT32: 'f32', BOOL: 'bool', STRING: 'str', ARRAY: 'arr', UINT64: 'u64', INT64: 'i64',
    FLOAT64: 'f64',
}


class GGUFError(Exception):
    pass


class TensorInfo:
    __slots__ = ('name', 'ne', 'type', 'offset', 'nbytes', 'data_offset')

    def __repr__(self):
        return 'TensorInfo(%r, ne=%r, %s, off=%d, %d bytes)' % (
            self.name, self.ne, ggml.type_name(self.type), self.offset, self.nbytes)

    @property
    def shape(self):
        """numpy shape (slowest first) of the tensor's values."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n


class GGUFReader:
    def __init__(self, path):
        self.path = str(path)
        with open(self.path, 'rb') as f:
            try:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:                    # empty file
                raise GGUFError('%s: empty file' % self.path)
        self.size = len(self._mm)
        self._pos = 0
        self.kv = {}
        self.kv_type = {}     # key -> type, or (ARRAY, element type)
        self.tensors = []
        self._by_name = {}
        self._parse()

    # --- primitive reads with bounds checks ---
    def _fail(self, what):
        raise GGUFError('%s: %s' % (self.path, what))

    def _take(self, n, what):
        if n < 0 or self._pos + n > self.size:
            self._fail('%s at offset %d runs past end of file (size %d)'
                       % (what, self._pos, self.size))
        b = self._mm[self._pos:self._pos + n]
        self._pos += n
        return b

    def _u32(self, what):
        return struct.unpack('<I', self._take(4, what))[0]

    def _u64(self, what):
        return struct.unpack('<Q', self._take(8, what))[0]

    def _str(self, what):
        n = self._u64(what + ' length')
        raw = self._take(n, what)
        try:
            return raw.decode('utf-8')
        except UnicodeDecodeError:
            self._fail('%s is not valid UTF-8' % what)

    def _value(self, vt, what):
        if vt in _SCALAR:
            dt = np.dtype(_SCALAR[vt])
            v = np.frombuffer(self._take(dt.itemsize, what), dtype=dt)[0]
            if vt == BOOL:
                if v > 1:
                    self._fail('%s: bool value %d' % (what, v))
                return bool(v)
            return v.item()
        if vt == STRING:
            return self._str(what)
        if vt == ARRAY:
            et = self._u32(what + ' element type')
            n = self._u64(what + ' element count')
            if et in _SCALAR:
                dt = np.dtype(_SCALAR[et])
                if n > self.size:
                    self._fail('%s: %d elements cannot fit the file' % (what, n))
                arr = np.frombuffer(self._take(n * dt.itemsize, what), dtype=dt).copy()
                if et == BOOL:
                    arr = arr.astype(bool)
                return et, arr
            if et == STRING:
                if n > self.size // 8:
                    self._fail('%s: %d strings cannot fit the file' % (what, n))
                return et, [self._str('%s[%d]' % (what, i)) for i in range(n)]
            if et == ARRAY:
                if n > self.size // 12:
                    self._fail('%s: %d arrays cannot fit the file' % (what, n))
                return et, [self._value(ARRAY, '%s[%d]' % (what, i)) for i in range(n)]
            self._fail('%s: unknown array element type %d' % (what, et))
        self._fail('%s: unknown value type %d' % (what, vt))

    def _parse(self):
        if self._take(4, 'magic') != MAGIC:
            self._fail('not a GGUF file (bad magic)')
        self.version = self._u32('version')
        if self.version not in (2, 3):
            self._fail('unsupported GGUF version %d' % self.version)
        n_tensors = self._u64('tensor count')
        n_kv = self._u64('KV count')
        if n_tensors > self.size // 24 or n_kv > self.size // 12:
            self._fail('tensor count %d / KV count %d cannot fit the file' % (n_tensors, n_kv))
        for i in range(n_kv):
            key = self._str('KV %d key' % i)
            vt = self._u32("KV '%s' type" % key)
            if key in self.kv:
                self._fail("duplicate KV '%s'" % key)
            v = self._value(vt, "KV '%s'" % key)
            if vt == ARRAY:
                et, v = v
                self.kv_type[key] = (ARRAY, et)
            else:
                self.kv_type[key] = vt
            self.kv[key] = v
        self.alignment = self.kv.get('general.alignment', 32)
        if not isinstance(self.alignment, int) or self.alignment <= 0 or \
                self.alignment & (self.alignment - 1):
            self._fail('general.alignment %r is not a power of two' % (self.alignment,))
        for i in range(n_tensors):
            t = TensorInfo()
            t.name = self._str('tensor %d name' % i)
            what = "tensor '%s'" % t.name
            nd = self._u32(what + ' n_dims')
            if not 1 <= nd <= 4:
                self._fail('%s: n_dims %d' % (what, nd))
            t.ne = [self._u64(what + ' dim') for _ in range(nd)]
            t.type = self._u32(what + ' type')
            t.offset = self._u64(what + ' offset')
            if t.name in self._by_name:
                self._fail('duplicate tensor name %r' % t.name)
            if t.type not in ggml.TRAITS:
                t.nbytes = None
            else:
                try:
                    t.nbytes = ggml.nbytes(t.type, t.ne)
                except ValueError as e:
                    self._fail('%s: %s' % (what, e))
            self.tensors.append(t)
            self._by_name[t.name] = t
        a = self.alignment
        self.data_start = (self._pos + a - 1) // a * a
        for t in self.tensors:
            what = "tensor '%s'" % t.name
            if t.offset % a:
                self._fail('%s: offset %d not aligned to %d' % (what, t.offset, a))
            t.data_offset = self.data_start + t.offset
            if t.nbytes is not None and t.data_offset + t.nbytes > self.size:
                self._fail('%s: data [%d, %d) past end of file (size %d)'
                           % (what, t.data_offset, t.data_offset + t.nbytes, self.size))

    # --- public API ---
    def names(self):
        return [t.name for t in self.tensors]

    def info(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise GGUFError('%s: no tensor %r' % (self.path, name)) from None

    def raw(self, name):
        """The tensor's bytes as a read-only uint8 numpy view."""
        t = self.info(name)
        if t.nbytes is None:
            self._fail("tensor '%s': type %s has no known size" % (name, ggml.type_name(t.type)))
        return np.frombuffer(self._mm, dtype=np.uint8, count=t.nbytes, offset=t.data_offset)

    def tensor(self, name):
        """Dequantised float32 values, numpy shape = ne reversed."""
        t = self.info(name)
        if t.type not in ggml.TRAITS:
            self._fail("tensor '%s': cannot decode type %s" % (name, ggml.type_name(t.type)))
        v = ggml.decode(self.raw(name), t.type, t.n_elements)
        return v.reshape(t.shape)

    def close(self):
        self._mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def _fmt(v, n=6):
    if isinstance(v, np.ndarray):
        s = ', '.join(repr(x) for x in v[:n].tolist())
        return '[%s%s] (%d)' % (s, ', ...' if v.size > n else '', v.size)
    if isinstance(v, list):
        s = ', '.join(repr(x) for x in v[:n])
        return '[%s%s] (%d)' % (s, ', ...' if len(v) > n else '', len(v))
    if isinstance(v, str) and len(v) > 60:
        return repr(v[:60]) + '...'
    return repr(v)


def dump(path, out):
    """Human-readable listing of a GGUF file (python3 -m moegen.reader FILE)."""
    r = GGUFReader(path)
    out.write('GGUF v%d, %d KV, %d tensors, alignment %d\n'
              % (r.version, len(r.kv), len(r.tensors), r.alignment))
    for k, v in r.kv.items():
        vt = r.kv_type[k]
        tn = ('arr[%s]' % TYPE_NAMES.get(vt[1], vt[1])) if isinstance(vt, tuple) \
            else TYPE_NAMES.get(vt, vt)
        out.write('  %-48s %-9s %s\n' % (k, tn, _fmt(v)))
    for t in r.tensors:
        out.write('  %-40s %-6s %s\n' % (t.name, ggml.type_name(t.type), t.ne))


if __name__ == '__main__':
    import sys
    try:
        for p in sys.argv[1:]:
            dump(p, sys.stdout)
    except BrokenPipeError:
        sys.stderr.close()
    except GGUFError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
