#!/usr/bin/python3
"""serve_embed_ref.py — moe-serve's embeddings against the independent numpy
reference (tests/ref): for a generated F32 model, the mean over the prompt's
positions of the last hidden state after the output norm, L2-normalised,
computed by tests/ref/model.py (with the engine's F16 KV cache emulated).

usage: serve_embed_ref.py MODEL.gguf IDS_JSON EMBEDDING_JSON
Prints TAP lines (no plan); exit 1 on a failure.
"""
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import numpy as np  # noqa: E402

import load  # noqa: E402
import model as M  # noqa: E402

gguf, ids_file, emb_file = sys.argv[1:4]
ids = json.load(open(ids_file))["tokens"]
got = np.array(json.load(open(emb_file))["data"][0]["embedding"], dtype=np.float64)
cfg, W = load.load(gguf)
m = M.Model(cfg, W, emulate=("kv-f16",))
seen = {}
orig = m.matmul


def capture(x, name, e=None, rows=None, src=None):
    if name in ("output.weight", "token_embd.weight"):
        seen["h"] = np.array(x, dtype=np.float64)
    return orig(x, name, e, rows, src)


m.matmul = capture
m.forward(ids)
h = seen["h"]                      # (T, n_embd): RMSNorm(x) * out_norm per position
want = h.mean(axis=0)
want /= np.linalg.norm(want)
err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
ok = err <= 1e-4
print("%s - /v1/embeddings equals the reference's pooled hidden state (max |diff| %.2e, "
      "%d positions, %d dims)" % ("ok" if ok else "not ok", err, len(ids), want.size))
sys.exit(0 if ok else 1)
