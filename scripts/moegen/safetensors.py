# moegen/safetensors.py — streaming safetensors writer (one file or shards
# with model.safetensors.index.json) and a header reader for tests.
#
# Format: u64 little-endian header length N, N bytes of JSON (padded with
# spaces to a multiple of 8), then the tensor bytes; every JSON entry is
# {"dtype", "shape" (slowest first), "data_offsets": [begin, end)} relative
# to the end of the header, and the entries tile the data without holes.
#
#   w = SafetensorsSet(dir, [(name, 'F32', shape), ...], shards=1)
#   w.write(name, array) ...   # in the declared order, any chunking
#   w.finish()
import json
import os
import struct

import numpy as np

DTYPES = {'F32': ('<f4', 4), 'F16': ('<f2', 2), 'BF16': ('<u2', 2), 'U8': ('<u1', 1)}


class _File:
    def __init__(self, path, entries, metadata):
        self.path = path
        self.entries = entries
        hdr = {'__metadata__': dict(metadata)}
        off = 0
        for name, dt, shape in entries:
            n = DTYPES[dt][1]
            for d in shape:
                n *= int(d)
            hdr[name] = {'dtype': dt, 'shape': [int(d) for d in shape],
                         'data_offsets': [off, off + n]}
            off += n
        self.size = off
        raw = json.dumps(hdr, separators=(',', ':'), ensure_ascii=True).encode()
        raw += b' ' * ((-len(raw)) % 8)
        self.header = raw
        self.f = None

    def open(self):
        self.tmp = self.path + '.tmp'
        self.f = open(self.tmp, 'wb')
        self.f.write(struct.pack('<Q', len(self.header)) + self.header)
        self.start = self.f.tell()

    def close(self):
        if self.f.tell() - self.start != self.size:
            raise ValueError('%s: %d data bytes written, %d declared'
                             % (self.path, self.f.tell() - self.start, self.size))
        self.f.close()
        self.f = None
        os.replace(self.tmp, self.path)


class SafetensorsSet:
    """Tensors split over `shards` files in declaration order (balanced by size)."""

    def __init__(self, dirpath, entries, shards=1, metadata=None):
        metadata = metadata or {'format': 'pt'}
        sizes = []
        for _, dt, shape in entries:
            n = DTYPES[dt][1]
            for d in shape:
                n *= int(d)
            sizes.append(n)
        total = sum(sizes)
        shards = max(1, min(shards, len(entries)))
        groups, cur, acc = [], [], 0
        for i, (e, n) in enumerate(zip(entries, sizes)):
            # start a new shard once this one holds its share of the bytes, or
            # when each remaining tensor must open a shard of its own
            need = shards - 1 - len(groups)
            if cur and need > 0 and (acc >= total * (len(groups) + 1) / shards or
                                     len(entries) - i <= need):
                groups.append(cur)
                cur = []
            cur.append(e)
            acc += n
        groups.append(cur)
        n = len(groups)
        self.files = []
        self.where = {}
        for i, g in enumerate(groups):
            name = 'model.safetensors' if n == 1 else \
                'model-%05d-of-%05d.safetensors' % (i + 1, n)
            f = _File(os.path.join(dirpath, name), g, metadata)
            self.files.append(f)
            for e in g:
                self.where[e[0]] = i
        self.total = total
        self.dir = dirpath
        self.order = [e[0] for e in entries]
        self.dtype = {e[0]: e[1] for e in entries}
        self.nbytes = dict(zip(self.order, sizes))
        self._i = 0
        self._done = 0
        self._cur = -1

    def write(self, name, arr):
        if self._i >= len(self.order) or self.order[self._i] != name:
            raise ValueError('tensor %r written out of order (expected %r)'
                             % (name, self.order[self._i] if self._i < len(self.order) else None))
        fi = self.where[name]
        if fi != self._cur:
            if self._cur >= 0:
                self.files[self._cur].close()
            self.files[fi].open()
            self._cur = fi
        dt = self.dtype[name]
        a = np.asarray(arr)
        if dt == 'BF16':
            from .ggml import f32_to_bf16_bits
            data = f32_to_bf16_bits(a.astype(np.float32).reshape(-1)).astype('<u2')
        else:
            data = np.ascontiguousarray(a, dtype=DTYPES[dt][0])
        b = memoryview(data).cast('B')
        self.files[fi].f.write(b)
        self._done += len(b)
        if self._done > self.nbytes[name]:
            raise ValueError('tensor %r: too many bytes' % name)
        if self._done == self.nbytes[name]:
            self._i += 1
            self._done = 0

    def finish(self):
        if self._i != len(self.order):
            raise ValueError('tensor %r not written' % self.order[self._i])
        if self._cur >= 0:
            self.files[self._cur].close()
        if len(self.files) > 1:
            idx = {'metadata': {'total_size': self.total},
                   'weight_map': {k: os.path.basename(self.files[v].path)
                                  for k, v in sorted(self.where.items())}}
            with open(os.path.join(self.dir, 'model.safetensors.index.json'), 'w') as f:
                json.dump(idx, f, indent=2)
                f.write('\n')

    def abort(self):
        for f in self.files:
            if f.f is not None:
                f.f.close()
                try:
                    os.unlink(f.tmp)
                except OSError:
                    pass


def read_header(path):
    """(header dict, data start offset) of a safetensors file, validated:
    offsets in range, tiling the data exactly."""
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError('%s: too short' % path)
        n = struct.unpack('<Q', raw)[0]
        if n > size - 8:
            raise ValueError('%s: header length %d past end of file' % (path, n))
        hdr = json.loads(f.read(n).decode('utf-8'))
    start = 8 + n
    spans = []
    for k, v in hdr.items():
        if k == '__metadata__':
            continue
        if v['dtype'] not in DTYPES:
            raise ValueError('%s: %s: dtype %s' % (path, k, v['dtype']))
        b, e = v['data_offsets']
        want = DTYPES[v['dtype']][1]
        for d in v['shape']:
            want *= d
        if e - b != want:
            raise ValueError('%s: %s: %d bytes for shape %s' % (path, k, e - b, v['shape']))
        spans.append((b, e, k))
    spans.sort()
    pos = 0
    for b, e, k in spans:
        if b != pos:
            raise ValueError('%s: %s: data does not tile (at %d, expected %d)' % (path, k, b, pos))
        pos = e
    if start + pos != size:
        raise ValueError('%s: data ends at %d, file size %d' % (path, start + pos, size))
    return hdr, start


def read_tensor(path, name):
    """float32 values of one tensor (for tests)."""
    hdr, start = read_header(path)
    v = hdr[name]
    b, e = v['data_offsets']
    with open(path, 'rb') as f:
        f.seek(start + b)
        raw = f.read(e - b)
    if v['dtype'] == 'BF16':
        from .ggml import bf16_bits_to_f32
        a = bf16_bits_to_f32(np.frombuffer(raw, dtype='<u2'))
    else:
        a = np.frombuffer(raw, dtype=DTYPES[v['dtype']][0]).astype(np.float32)
    return a.reshape(v['shape'])
