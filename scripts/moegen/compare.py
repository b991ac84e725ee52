# moegen/compare.py — check that a GGUF file and an HF snapshot hold the same
# model: every GGUF tensor (dequantised) equals its HF tensor(s) after the
# llama q/k row permutation and expert stacking, and the hyper-parameters
# agree.  Used by the generator's test; the C converter's tests can use it on
# the files they start from.
#
#   python3 -m moegen.compare model.gguf model.hf [--tol 0]
import json
import os
import sys

import numpy as np

from . import arch as A
from . import moe2
from . import safetensors as st
from .reader import GGUFReader

HF_TO_ARCH = {a.hf: a for a in A.ARCHS.values()}


def hf_tensors(d):
    """{name: file} of an HF snapshot (single file or sharded with an index)."""
    idx = os.path.join(d, 'model.safetensors.index.json')
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)['weight_map']
        return {k: os.path.join(d, v) for k, v in wm.items()}
    p = os.path.join(d, 'model.safetensors')
    hdr, _ = st.read_header(p)
    return {k: p for k in hdr if k != '__metadata__'}


def hparams_from_config(cfg):
    a = HF_TO_ARCH[cfg['architectures'][0]]
    nh = cfg['num_attention_heads']
    over = dict(n_vocab=cfg['vocab_size'], n_embd=cfg['hidden_size'],
                n_layer=cfg['num_hidden_layers'], n_head=nh,
                n_head_kv=cfg.get('num_key_value_heads', nh),
                head_dim=cfg.get('head_dim') or cfg['hidden_size'] // nh,
                n_ff=cfg['intermediate_size'],
                n_expert=cfg.get('num_local_experts') or cfg.get('num_experts') or 1,
                n_expert_used=cfg.get('num_experts_per_tok') or 1,
                n_ff_exp=cfg.get('moe_intermediate_size') or cfg['intermediate_size'],
                n_ff_shexp=cfg.get('shared_expert_intermediate_size') or 1,
                rope_theta=cfg.get('rope_theta'), rms_eps=cfg.get('rms_norm_eps'),
                n_ctx=cfg.get('max_position_embeddings'), tied=cfg.get('tie_word_embeddings'))
    return A.HParams(a, 'tiny', over)


def compare(gguf_path, hf_dir, tol=0.0):
    """List of problems (empty if the two hold the same model)."""
    from .generate import unpermute
    with open(os.path.join(hf_dir, 'config.json')) as f:
        cfg = json.load(f)
    if cfg['architectures'][0] in moe2.HF_NAMES:
        return moe2.compare(gguf_path, hf_dir, tol)
    hp = hparams_from_config(cfg)
    r = GGUFReader(gguf_path)
    bad = []
    g = hp.arch.gguf
    for k, _, v in A.gguf_kvs(hp):
        got = r.kv.get(k)
        if got is None or (isinstance(v, float) and abs(got - v) > 1e-6 * abs(v)) or \
                (not isinstance(v, float) and got != v):
            bad.append('KV %s: gguf %r, config.json says %r' % (k, got, v))
    if r.kv.get('general.architecture') != g:
        bad.append('general.architecture %r, expected %r' % (r.kv.get('general.architecture'), g))
    files = hf_tensors(hf_dir)
    seen = set()
    plan = A.plan(hp)
    names = set(r.names())
    for t in plan:
        if t.name not in names:
            bad.append('GGUF lacks %s' % t.name)
            continue
        info = r.info(t.name)
        if info.ne != t.ne:
            bad.append('%s: GGUF ne %s, expected %s' % (t.name, info.ne, t.ne))
            continue
        x = r.tensor(t.name)
        parts = [x[e] for e in range(t.ne[2])] if len(t.ne) == 3 else [x]
        for hn, part in zip(t.hf, parts):
            seen.add(hn)
            if hn not in files:
                bad.append('HF lacks %s' % hn)
                continue
            y = st.read_tensor(files[hn], hn)
            if tuple(y.shape) != tuple(t.hf_shape()):
                bad.append('%s: HF shape %s, expected %s' % (hn, list(y.shape), list(t.hf_shape())))
                continue
            if t.permute is not None:
                part = unpermute(part, t.permute)
            d = np.abs(part.reshape(y.shape) - y).max() if y.size else 0.0
            if not d <= tol:
                bad.append('%s <-> %s: max difference %g' % (t.name, hn, d))
    for n in sorted(names - {t.name for t in plan}):
        bad.append('GGUF has unexpected tensor %s' % n)
    for n in sorted(set(files) - seen):
        bad.append('HF has unexpected tensor %s' % n)
    r.close()
    return bad


def main(argv):
    tol = 0.0
    if '--tol' in argv:
        i = argv.index('--tol')
        tol = float(argv[i + 1])
        del argv[i:i + 2]
    if len(argv) != 2:
        print('usage: python3 -m moegen.compare MODEL.gguf MODEL.hf [--tol T]', file=sys.stderr)
        return 2
    bad = compare(argv[0], argv[1], tol)
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
