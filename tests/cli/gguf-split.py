#!/usr/bin/env python3
"""gguf-split.py IN.gguf OUTPREFIX N — split a GGUF file the way llama.cpp's
gguf-split does (for moe-pull's tests; independent of the C code under test).

Writes OUTPREFIX-00001-of-0000N.gguf ... : the first shard keeps every
metadata key, each shard gets split.no (u16), split.count (u16) and
split.tensors.count (i32), and the tensors are dealt out in order."""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, off, t):
    if t in SIZES:
        return off + SIZES[t]
    if t == 8:
        n, = struct.unpack_from("<Q", b, off)
        return off + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, off)
        off += 12
        for _ in range(n):
            off = skip_value(b, off, et)
        return off
    raise ValueError("bad type %d" % t)


def read_str(b, off):
    n, = struct.unpack_from("<Q", b, off)
    return b[off + 8:off + 8 + n].decode(), off + 8 + n


def main():
    src, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    b = open(src, "rb").read()
    assert b[:4] == b"GGUF"
    ver, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    off = 24
    kvs = []
    align = 32
    for _ in range(nkv):
        start = off
        key, off = read_str(b, off)
        t, = struct.unpack_from("<I", b, off)
        vstart = off + 4
        off = skip_value(b, vstart, t)
        if key == "general.alignment":
            align, = struct.unpack_from("<I", b, vstart)
        kvs.append(b[start:off])
    tensors = []
    for _ in range(nt):
        name, off = read_str(b, off)
        nd, = struct.unpack_from("<I", b, off)
        dims = struct.unpack_from("<%dQ" % nd, b, off + 4)
        off += 4 + 8 * nd
        typ, toff = struct.unpack_from("<IQ", b, off)
        off += 12
        tensors.append([name, dims, typ, toff])
    data0 = (off + align - 1) // align * align
    # sizes from the next tensor's offset (the data is packed in order)
    order = sorted(range(nt), key=lambda i: tensors[i][3])
    for j, i in enumerate(order):
        end = tensors[order[j + 1]][3] if j + 1 < nt else len(b) - data0
        tensors[i].append(end - tensors[i][3])

    def kv(key, fmt, t, v):
        k = key.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + struct.pack(fmt, v)

    per = (nt + n - 1) // n
    for s in range(n):
        part = tensors[s * per:(s + 1) * per]
        meta = [kv("split.no", "<H", 2, s), kv("split.count", "<H", 2, n),
                kv("split.tensors.count", "<i", 5, nt)]
        if s == 0:
            meta = kvs + meta
        elif align != 32:
            meta.append(kv("general.alignment", "<I", 4, align))
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(part), len(meta)))
        for m in meta:
            out += m
        rel = 0
        offs = []
        for name, dims, typ, toff, size in part:
            rel = (rel + align - 1) // align * align
            offs.append(rel)
            nb = name.encode()
            out += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(dims))
            out += struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", typ, rel)
            rel += size
        out += b"\0" * ((len(out) + align - 1) // align * align - len(out))
        base = len(out)
        for (name, dims, typ, toff, size), r in zip(part, offs):
            out += b"\0" * (base + r - len(out))
            out += b[data0 + toff:data0 + toff + size]
        with open("%s-%05d-of-%05d.gguf" % (prefix, s + 1, n), "wb") as fh:
            fh.write(out)


if __name__ == "__main__":
    main()
