#!/usr/bin/env python3
"""old-deepseek2-gguf.py NEW.gguf OLD.gguf SCRIPTS_DIR — rewrite a deepseek2
GGUF in the layout llama.cpp wrote before its MLA split: attn_kv_b
(H(N+V) rows of L: per head the k_b rows transposed, then the v_b rows)
instead of attn_k_b / attn_v_b, key_length = N + R and value_length = V,
no *_mla keys.  Built in numpy from the split tensors, so moe-convert's
split of attn_kv_b is checked against an independent construction."""
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from moegen import reader, gguf
r = reader.GGUFReader(sys.argv[1])
w = gguf.GGUFWriter(sys.argv[2])
N = r.kv['deepseek2.attention.key_length_mla'] - r.kv['deepseek2.rope.dimension_count']
R = r.kv['deepseek2.rope.dimension_count']
V = r.kv['deepseek2.attention.value_length_mla']
for k, v in r.kv.items():
    if k in ('deepseek2.attention.key_length_mla', 'deepseek2.attention.value_length_mla'):
        continue
    if k == 'deepseek2.attention.key_length':
        v = N + R
    if k == 'deepseek2.attention.value_length':
        v = V
    w.add(k, r.kv_type[k], v)
plan = []
for t in r.tensors:
    if t.name.endswith('attn_v_b.weight'):
        continue
    if t.name.endswith('attn_k_b.weight'):
        p = t.name[:-len('attn_k_b.weight')]
        kb = r.tensor(p + 'attn_k_b.weight')          # (H, L, N)
        vb = r.tensor(p + 'attn_v_b.weight')          # (H, V, L)
        H, L = kb.shape[0], kb.shape[1]
        kv = np.concatenate([kb.transpose(0, 2, 1), vb], axis=1).reshape(H * (N + V), L)
        kv = np.ascontiguousarray(kv, dtype=np.float32)
        w.add_tensor(p + 'attn_kv_b.weight', [L, H * (N + V)], 0)
        plan.append((p + 'attn_kv_b.weight', kv))
        continue
    w.add_tensor(t.name, list(reversed(t.shape)), t.type)
    plan.append((t.name, r.raw(t.name)))
w.begin()
for name, data in plan:
    w.write(name, data)
w.finish()
