# moegen/gguf.py — a streaming GGUF v3 writer.
#
# All tensor infos are declared before any data is written, so the header,
# KVs and tensor directory go out first and tensor data can then be streamed
# in declaration order, chunk by chunk, without holding the model in memory.
#
#   w = GGUFWriter('m.gguf')
#   w.add('general.architecture', STRING, 'llama')
#   w.add_tensor('token_embd.weight', [n_embd, n_vocab], ggml.F16)
#   w.begin()
#   w.write('token_embd.weight', bytes_chunk) ...   # in order, any chunking
#   w.finish()                                     # checks sizes, renames tmp -> path
import os
import struct

import numpy as np

from . import ggml
from .reader import (BOOL, FLOAT32, FLOAT64, INT8, INT16, INT32, INT64, STRING,
                     UINT8, UINT16, UINT32, UINT64)

_PACK = {UINT8: '<B', INT8: '<b', UINT16: '<H', INT16: '<h', UINT32: '<I', INT32: '<i',
         FLOAT32: '<f', BOOL: '<?', UINT64: '<Q', INT64: '<q', FLOAT64: '<d'}
_NP = {UINT8: '<u1', INT8: '<i1', UINT16: '<u2', INT16: '<i2', UINT32: '<u4', INT32: '<i4',
       FLOAT32: '<f4', BOOL: '<u1', UINT64: '<u8', INT64: '<i8', FLOAT64: '<f8'}


def _str(s):
    b = s.encode('utf-8')
    return struct.pack('<Q', len(b)) + b


def _value(vt, v):
    if isinstance(vt, tuple):
        _, et = vt
        if et == STRING:
            return struct.pack('<IQ', STRING, len(v)) + b''.join(_str(x) for x in v)
        a = np.asarray(v).astype(_NP[et])
        return struct.pack('<IQ', et, a.size) + a.tobytes()
    if vt == STRING:
        return _str(v)
    return struct.pack(_PACK[vt], v)


class GGUFWriter:
    def __init__(self, path, alignment=32):
        self.path = str(path)
        self.alignment = alignment
        self.kvs = []
        self._keys = set()
        self.tensors = []         # [name, ne, type, offset, nbytes]
        self._by_name = {}
        self._data_size = 0
        self._f = None

    def add(self, key, vt, value):
        """vt: a GGUF value type, or (ARRAY, element type)."""
        if key in self._keys:
            raise ValueError('duplicate KV %r' % key)
        self._keys.add(key)
        self.kvs.append((key, vt, value))

    def add_tensor(self, name, ne, t):
        if name in self._by_name:
            raise ValueError('duplicate tensor %r' % name)
        n = ggml.nbytes(t, ne)
        a = self.alignment
        off = (self._data_size + a - 1) // a * a
        rec = [name, [int(d) for d in ne], t, off, n, 0]
        self.tensors.append(rec)
        self._by_name[name] = rec
        self._data_size = off + n

    def begin(self):
        self._tmp = self.path + '.tmp'
        self._f = open(self._tmp, 'wb')
        f = self._f
        f.write(b'GGUF' + struct.pack('<IQQ', 3, len(self.tensors), len(self.kvs)))
        for key, vt, v in self.kvs:
            f.write(_str(key))
            f.write(struct.pack('<I', vt[0] if isinstance(vt, tuple) else vt))
            f.write(_value(vt, v))
        for name, ne, t, off, _, _ in self.tensors:
            f.write(_str(name) + struct.pack('<I', len(ne)))
            f.write(struct.pack('<%dQ' % len(ne), *ne))
            f.write(struct.pack('<IQ', t, off))
        self._pad()
        self._data_start = f.tell()
        self._next = 0          # index of the tensor being written

    def _pad(self):
        a = self.alignment
        n = (-self._f.tell()) % a
        if n:
            self._f.write(b'\0' * n)

    def write(self, name, data):
        """Append bytes of tensor `name` (tensors in declaration order)."""
        data = memoryview(np.ascontiguousarray(data)).cast('B')
        rec = self.tensors[self._next] if self._next < len(self.tensors) else None
        if rec is None or rec[0] != name:
            raise ValueError('tensor %r written out of order (expected %r)'
                             % (name, rec[0] if rec else None))
        if rec[5] == 0:
            pos = self._f.tell() - self._data_start
            if pos > rec[3]:
                raise AssertionError('layout overrun before %r' % name)
            self._f.write(b'\0' * (rec[3] - pos))
        rec[5] += len(data)
        if rec[5] > rec[4]:
            raise ValueError('tensor %r: %d bytes written, %d expected' % (name, rec[5], rec[4]))
        self._f.write(data)
        if rec[5] == rec[4]:
            self._next += 1

    def finish(self):
        if self._next != len(self.tensors):
            rec = self.tensors[self._next]
            raise ValueError('tensor %r incomplete: %d of %d bytes' % (rec[0], rec[5], rec[4]))
        self._pad()
        self._f.close()
        self._f = None
        os.replace(self._tmp, self.path)

    def abort(self):
        if self._f is not None:
            self._f.close()
            self._f = None
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
