#!/usr/bin/python3
"""bad-inputs.py DIR — write malformed model inputs into DIR, one per case.

Each file is a small, hand-assembled GGUF / safetensors snapshot / archive that
is broken in exactly one way. Prints one line per case: NAME<TAB>PATH<TAB>
EXPECTED-SUBSTRING-OF-THE-ERROR (case-insensitive)."""
import io, json, os, struct, sys, tarfile, zipfile

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
cases = []

def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack('<Q', len(b)) + b

def kv_u32(k, v):
    return gstr(k) + struct.pack('<I', 4) + struct.pack('<I', v)

def kv_str(k, v):
    return gstr(k) + struct.pack('<I', 8) + gstr(v)

def tinfo(name, dims, dtype, offset):
    return gstr(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims) \
        + struct.pack('<I', dtype) + struct.pack('<Q', offset)

def gguf(tensors, kvs=None, version=3, magic=b'GGUF', n_tensors=None, n_kv=None, align=32,
         data=None):
    kvs = kvs if kvs is not None else [kv_str('general.architecture', 'llama')]
    head = magic + struct.pack('<I', version)
    head += struct.pack('<Q', len(tensors) if n_tensors is None else n_tensors)
    head += struct.pack('<Q', len(kvs) if n_kv is None else n_kv)
    body = head + b''.join(kvs) + b''.join(tensors)
    pad = (-len(body)) % align if align else 0
    return body + b'\0' * pad + (data if data is not None else b'\0' * 256)

def write(name, blob, expect):
    p = os.path.join(out, name)
    with open(p, 'wb') as f:
        f.write(blob)
    cases.append((name, p, expect))

F32 = 0
good_t = tinfo('token_embd.weight', [4, 4], F32, 0)
valid = gguf([good_t])
write('truncated.gguf', valid[:40], 'left in the file')
write('bad-magic.gguf', gguf([good_t], magic=b'GGUX'), 'magic')
write('version0.gguf', gguf([good_t], version=0), 'version')
write('version99.gguf', gguf([good_t], version=99), 'version')
write('ntensors-max.gguf', gguf([good_t], n_tensors=2**64 - 1), 'tensor')
write('nkv-max.gguf', gguf([good_t], n_kv=2**64 - 1), 'KV count')
write('five-dims.gguf', gguf([tinfo('token_embd.weight', [1, 1, 1, 1, 4], F32, 0)]), 'dim')
write('zero-dim.gguf', gguf([tinfo('token_embd.weight', [4, 0], F32, 0)]), 'dim')
write('elem-overflow.gguf', gguf([tinfo('token_embd.weight', [2**32, 2**32, 2], F32, 0)]), 'overflow')
write('bytes-overflow.gguf', gguf([tinfo('token_embd.weight', [2**62, 2], F32, 0)]), 'overflow')
write('offset-past-end.gguf', gguf([tinfo('token_embd.weight', [4, 4], F32, 1 << 20)]), 'end')
write('overlap.gguf', gguf([tinfo('token_embd.weight', [4, 4], F32, 0),
                            tinfo('output.weight', [4, 4], F32, 32)]), 'overlap')
write('unknown-dtype.gguf', gguf([tinfo('token_embd.weight', [4, 4], 77, 0)]), 'type')
write('duplicate-name.gguf', gguf([tinfo('token_embd.weight', [4, 4], F32, 0),
                                   tinfo('token_embd.weight', [4, 4], F32, 64)]), 'duplicate')
write('huge-string.gguf', gguf([good_t], kvs=[gstr('general.architecture') + struct.pack('<I', 8)
                                             + struct.pack('<Q', 1 << 30) + b'llama']), 'string')
write('align0.gguf', gguf([good_t], kvs=[kv_str('general.architecture', 'llama'),
                                         kv_u32('general.alignment', 0)], align=32), 'alignment')
write('align3.gguf', gguf([good_t], kvs=[kv_str('general.architecture', 'llama'),
                                         kv_u32('general.alignment', 3)], align=32), 'alignment')
write('unknown-arch.gguf', gguf([good_t], kvs=[kv_str('general.architecture', 'gpt9')]),
      'not supported')

# Safetensors snapshots.
def snapshot(name, st_bytes, extra=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "vocab_size": 4, "hidden_size": 4,
           "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 8}
    with open(os.path.join(d, 'config.json'), 'w') as f:
        json.dump(cfg, f)
    with open(os.path.join(d, 'tokenizer.json'), 'w') as f:
        json.dump({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3},
                             "merges": []}}, f)
    with open(os.path.join(d, 'model.safetensors'), 'wb') as f:
        f.write(st_bytes)
    return d

def st(header, data, hlen=None):
    h = json.dumps(header).encode()
    return struct.pack('<Q', len(h) if hlen is None else hlen) + h + data

d = snapshot('st-header-too-long', st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
                                       b'\0' * 4, hlen=1 << 40))
cases.append(('st-header-too-long', d, 'longer than the file'))
d = snapshot('st-gap', st({"model.embed_tokens.weight": {"dtype": "F32", "shape": [4, 4],
                                                         "data_offsets": [0, 64]},
                           "model.norm.weight": {"dtype": "F32", "shape": [4],
                                                 "data_offsets": [80, 96]}}, b'\0' * 96))
cases.append(('st-non-contiguous', d, 'contiguous'))

# A tar whose member escapes the archive.
p = os.path.join(out, 'escape.tar')
with tarfile.open(p, 'w') as tf:
    data = b'{}'
    ti = tarfile.TarInfo('../config.json')
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))
cases.append(('tar-dotdot', p, '..'))

for name, path, expect in cases:
    print(f'{name}\t{path}\t{expect}')
