# moegen/moe2.py — the generator's second family of architectures, the MoE
# models with more than a router and SwiGLU experts:
#
#   deepseek2      DeepSeek-V2-Lite form: MLA with direct queries (q_lora_rank
#                  0), softmax router, greedy top-k, two shared experts, a
#                  leading dense layer, YaRN with mscale = mscale_all_dim
#   deepseek2-v2   DeepSeek-V2 form: queries through the low-rank path with its
#                  norm, group-limited greedy top-k (max of each group)
#   deepseek3      DeepSeek-V3 / R1 form: sigmoid scores, the score-correction
#                  bias for selection only, groups ranked by the sum of their
#                  two best scores, weight normalisation, routed_scaling_factor
#   gpt-oss        MXFP4 experts (--expert-type mxfp4) with biases, clamped
#                  SwiGLU, attention sinks, sliding-window / full layers, YaRN
#   phimoe         Phi-3.5-MoE: LayerNorm with biases, attention and output
#                  biases, LongRoPE short/long factors, sparsemixer top-2 router
#   granitemoe     Granite MoE: embedding/residual/attention/logit multipliers,
#   granitemoeshared  ... with a shared expert (GraniteMoeSharedForCausalLM)
#
# The whole model is built in memory (these are test shapes): every GGUF
# tensor is drawn from its own seeded stream (seed, crc32(GGUF name), expert),
# stored in its GGUF type, and the HF snapshot holds the values the GGUF
# decodes to, rearranged the way each HF checkpoint stores them (DeepSeek's
# kv_b_proj = attn_k_b + attn_v_b, gpt-oss's interleaved gate_up_proj and
# MXFP4 blocks, Granite's input_linear = gate ++ up, q/k rows of Granite in
# rotate-half order).  GGUF keys and tensor names are those llama.cpp's
# convert_hf_to_gguf.py writes for the config.json written next to it.
import json
import math
import os
import zlib

import numpy as np

from . import arch as A
from . import ggml
from . import gguf
from . import reader as gr
from . import safetensors as st

U, F, S, B = gr.UINT32, gr.FLOAT32, gr.STRING, gr.BOOL

# per arch: GGUF architecture, HF class, model_type, vocabulary family
ARCHS = {
    'deepseek2': ('deepseek2', 'DeepseekV2ForCausalLM', 'deepseek_v2', 'qwen'),
    'deepseek2-v2': ('deepseek2', 'DeepseekV2ForCausalLM', 'deepseek_v2', 'qwen'),
    'deepseek3': ('deepseek2', 'DeepseekV3ForCausalLM', 'deepseek_v3', 'qwen'),
    'gpt-oss': ('gpt-oss', 'GptOssForCausalLM', 'gpt_oss', 'qwen'),
    'phimoe': ('phimoe', 'PhimoeForCausalLM', 'phimoe', 'llama'),
    'granitemoe': ('granitemoe', 'GraniteMoeForCausalLM', 'granitemoe', 'olmoe'),
    'granitemoeshared': ('granitemoe', 'GraniteMoeSharedForCausalLM', 'granitemoeshared',
                         'olmoe'),
}
HF_NAMES = {v[1] for v in ARCHS.values()}

# Extra hyper-parameters (command-line --q-lora-rank etc.)
EXTRA = ('q_lora_rank', 'kv_lora_rank', 'rope_dim', 'v_head_dim', 'n_dense_lead', 'n_group',
         'topk_group', 'sliding_window', 'n_shared')

_DS = {'tiny': dict(n_vocab=512, n_embd=64, n_layer=3, n_head=4, n_head_kv=4, head_dim=16,
                    n_ff=128, n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff_shexp=0,
                    kv_lora_rank=32, rope_dim=8, v_head_dim=16, n_dense_lead=1),
       # rows of 256 wherever the format allows (attn_k_b's rows are the
       # no-rope head size: Q8_0 / F16 fallback, as llama.cpp does)
       'small': dict(n_vocab=512, n_embd=256, n_layer=3, n_head=4, n_head_kv=4, head_dim=64,
                     n_ff=512, n_expert=8, n_expert_used=2, n_ff_exp=256, n_ff_shexp=0,
                     kv_lora_rank=256, rope_dim=32, v_head_dim=64, n_dense_lead=1)}
_STD = {'tiny': dict(n_vocab=512, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16,
                     n_ff=32, n_expert=4, n_expert_used=2, n_ff_exp=32, n_ff_shexp=64),
        'small': dict(n_vocab=512, n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                      n_ff=256, n_expert=4, n_expert_used=2, n_ff_exp=256, n_ff_shexp=512)}
VARIANT = {
    # q_lora_rank (per shape), n_shared, n_group, topk_group, scoring, method,
    # norm_topk_prob, routed_scaling_factor, mscale(_all_dim)
    'deepseek2': dict(q_lora=0, n_shared=2, n_group=1, topk_group=1, scoring='softmax',
                      method='greedy', norm=False, scale=1.0, mscale=0.5),
    'deepseek2-v2': dict(q_lora=1, n_shared=2, n_group=4, topk_group=2, scoring='softmax',
                         method='group_limited_greedy', norm=False, scale=2.0, mscale=0.5),
    'deepseek3': dict(q_lora=1, n_shared=1, n_group=4, topk_group=2, scoring='sigmoid',
                      method='noaux_tc', norm=True, scale=2.5, mscale=1.0),
}
YARN = dict(factor=4.0, orig=1024)          # n_ctx 4096 = 4 x the original context

# Benchmark shapes (GGUF only, streamed to disk; the ~50k gpt-2 vocabulary
# of ../shared/vocab): DeepSeek-V2-Lite and gpt-oss-20b scaled down to about
# 0.9 G parameters (0.9 GB in Q8_0, 0.5 GB with MXFP4 experts).
#   ds2lite-s  V2-Lite's layout (MLA with direct queries, 64 experts of
#              which 6 used, 2 shared, 1 dense layer first) at embedding
#              1024, 8 layers, 8 heads of 128 + 64 rope dims, latent 256
#   gptoss-s   gpt-oss-20b's layout (32 experts, 4 used, heads of 64, 4 KV
#              heads, window 128) at embedding 1024, 8 layers, 16 heads
BENCH = {
    'ds2lite-s': ('deepseek', dict(n_vocab=0, n_embd=1024, n_layer=8, n_head=8, n_head_kv=8,
                                   head_dim=128, n_ff=2816, n_expert=64, n_expert_used=6,
                                   n_ff_exp=512, n_ff_shexp=0, kv_lora_rank=256, rope_dim=64,
                                   v_head_dim=128, n_dense_lead=1)),
    'gptoss-s': ('gpt-oss', dict(n_vocab=0, n_embd=1024, n_layer=8, n_head=16, n_head_kv=4,
                                 head_dim=64, n_ff=1024, n_expert=32, n_expert_used=4,
                                 n_ff_exp=1024, n_ff_shexp=0, sliding_window=128)),
}
SHAPE_NAMES = ('tiny', 'small') + tuple(BENCH)


class HP:
    """Hyper-parameters of one generated model (attributes by name)."""

    def __init__(self, arch, shape, over):
        ds = arch.startswith('deepseek')
        if shape in BENCH and BENCH[shape][0] == ('deepseek' if ds else arch):
            s = dict(BENCH[shape][1])
        elif shape in ('tiny', 'small'):
            s = dict((_DS if ds else _STD)[shape])
        else:
            raise ValueError('--shape %s: %s has the shapes tiny and small%s' % (
                shape, arch, ''.join(' and ' + k for k, v in BENCH.items()
                                     if v[0] == ('deepseek' if ds else arch))))
        self.arch = arch
        self.shape = shape
        self.gguf_arch, self.hf_arch, self.model_type, self.family = ARCHS[arch]
        if ds:
            v = VARIANT[arch]
            s['q_lora_rank'] = s['n_embd'] // 2 if v['q_lora'] else 0
            if shape != 'tiny' and v['q_lora']:
                s['q_lora_rank'] = 256 if shape == 'small' else 512
            s.update(n_shared=v['n_shared'], n_group=v['n_group'], topk_group=v['topk_group'])
            self.variant = v
        for k, val in over.items():
            if val is not None and (k in s or k in EXTRA):
                s[k] = val
        if arch == 'gpt-oss':
            s.setdefault('sliding_window', 4 if shape == 'tiny' else 16)
            s['n_ff'] = s['n_ff_exp']           # one FFN size: the expert's
        if arch in ('phimoe', 'granitemoe', 'granitemoeshared'):
            s['n_ff'] = s['n_ff_exp']
            s['head_dim'] = s['n_embd'] // s['n_head']
        if ds:
            s['n_head_kv'] = s['n_head']
            s['n_ff_shexp'] = s['n_shared'] * s['n_ff_exp']
        for k, val in s.items():
            setattr(self, k, int(val))
        self.rms_eps = float(over.get('rms_eps') or (1e-6 if ds else 1e-5))
        self.rope_theta = float(over.get('rope_theta') or
                                {'gpt-oss': 150000.0, 'phimoe': 10000.0}.get(arch, 10000.0))
        self.n_ctx = int(over.get('n_ctx') or 4096)
        self.tied = bool(over.get('tied'))
        self.check()

    def check(self):
        for k in ('n_vocab', 'n_embd', 'n_layer', 'n_head', 'head_dim', 'n_expert',
                  'n_expert_used', 'n_ff_exp'):
            if getattr(self, k) <= 0:
                raise ValueError('--%s must be positive' % k.replace('_', '-'))
        if self.n_expert_used > self.n_expert:
            raise ValueError('--n-expert-used %d > --n-expert %d'
                             % (self.n_expert_used, self.n_expert))
        if self.n_head % self.n_head_kv:
            raise ValueError('--n-head %d is not a multiple of --n-head-kv %d'
                             % (self.n_head, self.n_head_kv))
        if self.arch.startswith('deepseek'):
            if self.n_expert % self.n_group or self.topk_group > self.n_group:
                raise ValueError('%d experts in %d groups, %d used' %
                                 (self.n_expert, self.n_group, self.topk_group))
            if self.n_dense_lead >= self.n_layer:
                raise ValueError('--n-dense-lead must leave MoE layers')
            if self.rope_dim % 2:
                raise ValueError('--rope-dim must be even')
        if self.arch == 'phimoe' and self.n_expert_used != 2:
            raise ValueError('phimoe: the sparsemixer router picks exactly 2 experts')

    def describe(self):
        return ' '.join('%s=%s' % (k, v) for k, v in sorted(vars(self).items())
                        if isinstance(v, int) and not isinstance(v, bool))


# --- the tensor plan ---------------------------------------------------------------
#
# (GGUF name, numpy shape (out, in) / (expert, out, in) / (n,), kind, storage)
# kind: how values are drawn; storage: 'f32' (kept F32), 'w' (--type), 'x'
# (--expert-type).

def plan(hp):
    a, D, E, V = hp.arch, hp.n_embd, hp.n_expert, hp.n_vocab
    T = [('token_embd.weight', (V, D), 'embd', 'w')]
    if a == 'phimoe':
        T += [('rope_factors_long.weight', (hp.head_dim // 2,), 'rope_long', 'f32'),
              ('rope_factors_short.weight', (hp.head_dim // 2,), 'rope_short', 'f32')]
    for i in range(hp.n_layer):
        b = 'blk.%d.' % i

        def add(name, shape, kind, storage='w'):
            T.append((b + name, shape, kind, storage))
        add('attn_norm.weight', (D,), 'norm', 'f32')
        if a == 'phimoe':
            add('attn_norm.bias', (D,), 'bias', 'f32')
        if a.startswith('deepseek'):
            H, dk = hp.n_head, hp.head_dim + hp.rope_dim
            if hp.q_lora_rank:
                add('attn_q_a.weight', (hp.q_lora_rank, D), 'matrix')
                add('attn_q_a_norm.weight', (hp.q_lora_rank,), 'norm', 'f32')
                add('attn_q_b.weight', (H * dk, hp.q_lora_rank), 'matrix')
            else:
                add('attn_q.weight', (H * dk, D), 'matrix')
            add('attn_kv_a_mqa.weight', (hp.kv_lora_rank + hp.rope_dim, D), 'matrix')
            add('attn_kv_a_norm.weight', (hp.kv_lora_rank,), 'norm', 'f32')
            # kv_b_proj split per head as llama.cpp's converter does (k_b
            # transposed so the absorbed product multiplies the query)
            add('attn_k_b.weight', (H, hp.kv_lora_rank, hp.head_dim), 'kb')
            add('attn_v_b.weight', (H, hp.v_head_dim, hp.kv_lora_rank), 'matrix')
            add('attn_output.weight', (D, H * hp.v_head_dim), 'matrix')
        else:
            Q, KV = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
            add('attn_q.weight', (Q, D), 'matrix')
            add('attn_k.weight', (KV, D), 'matrix')
            add('attn_v.weight', (KV, D), 'matrix')
            if a in ('gpt-oss', 'phimoe'):
                add('attn_q.bias', (Q,), 'bias', 'f32')
                add('attn_k.bias', (KV,), 'bias', 'f32')
                add('attn_v.bias', (KV,), 'bias', 'f32')
            add('attn_output.weight', (D, Q), 'matrix')
            if a in ('gpt-oss', 'phimoe'):
                add('attn_output.bias', (D,), 'bias', 'f32')
            if a == 'gpt-oss':
                add('attn_sinks.weight', (hp.n_head,), 'sink', 'f32')
        if a == 'gpt-oss':
            add('post_attention_norm.weight', (D,), 'norm', 'f32')
        else:
            add('ffn_norm.weight', (D,), 'norm', 'f32')
        if a == 'phimoe':
            add('ffn_norm.bias', (D,), 'bias', 'f32')
        if a.startswith('deepseek') and i < hp.n_dense_lead:
            add('ffn_gate.weight', (hp.n_ff, D), 'matrix')
            add('ffn_up.weight', (hp.n_ff, D), 'matrix')
            add('ffn_down.weight', (D, hp.n_ff), 'matrix')
            continue
        X = hp.n_ff_exp
        add('ffn_gate_inp.weight', (E, D), 'router', 'f32')
        if a == 'gpt-oss':
            add('ffn_gate_inp.bias', (E,), 'bias', 'f32')
        if a == 'deepseek3':
            add('exp_probs_b.bias', (E,), 'probs_b', 'f32')
        add('ffn_gate_exps.weight', (E, X, D), 'matrix', 'x')
        add('ffn_up_exps.weight', (E, X, D), 'matrix', 'x')
        add('ffn_down_exps.weight', (E, D, X), 'matrix', 'x')
        if a == 'gpt-oss':
            add('ffn_gate_exps.bias', (E, X), 'bias', 'f32')
            add('ffn_up_exps.bias', (E, X), 'bias', 'f32')
            add('ffn_down_exps.bias', (E, D), 'bias', 'f32')
        if a.startswith('deepseek') or a == 'granitemoeshared':
            Sh = hp.n_ff_shexp
            add('ffn_gate_shexp.weight', (Sh, D), 'matrix')
            add('ffn_up_shexp.weight', (Sh, D), 'matrix')
            add('ffn_down_shexp.weight', (D, Sh), 'matrix')
    T.append(('output_norm.weight', (D,), 'norm', 'f32'))
    if a == 'phimoe':
        T.append(('output_norm.bias', (D,), 'bias', 'f32'))
    if not hp.tied:
        T.append(('output.weight', (V, D), 'matrix', 'w'))
    if a == 'phimoe':
        T.append(('output.bias', (V,), 'bias', 'f32'))
    return T


def draw(name, shape, kind, seed):
    """float32 values of one tensor: matrices N(0, 1/fan_in), norms 1 + N(0,
    0.1^2), biases N(0, 0.1^2), routers N(0, 4/n_embd), sinks N(0, 1), the
    V3 score-correction bias N(0, 0.05^2); LongRoPE factors fixed ramps of
    values exact in float32.  Stacked tensors: one stream per expert."""
    if kind == 'rope_short':
        return (1 + np.arange(shape[0]) / 64).astype(np.float32)
    if kind == 'rope_long':
        return (1 + np.arange(shape[0]) / 4).astype(np.float32)
    parts = list(draw_parts(name, shape, kind, seed))
    return np.stack(parts) if len(shape) == 3 else parts[0]


def draw_parts(name, shape, kind, seed):
    """draw() one expert at a time (the whole tensor if it is not stacked)."""
    if kind.startswith('rope_'):
        yield draw(name, shape, kind, seed)
        return
    n_part = shape[0] if len(shape) == 3 else 1
    for e in range(n_part):
        rng = np.random.default_rng([seed, zlib.crc32(name.encode()), e])
        sh = shape[1:] if len(shape) == 3 else shape
        x = rng.standard_normal(sh, dtype=np.float32)
        fan_in = np.float32(sh[-1])
        if kind in ('embd', 'matrix', 'kb'):
            x *= np.float32(1) / np.sqrt(fan_in)
        elif kind == 'router':
            x *= np.float32(2) / np.sqrt(fan_in)
        elif kind == 'norm':
            x = np.float32(1) + np.float32(0.1) * x
        elif kind == 'bias':
            x *= np.float32(0.1)
        elif kind == 'probs_b':
            x *= np.float32(0.05)
        yield x


def storage_type(name, shape, storage, qtype, etype):
    """ggml type of a tensor: F32 for 1-D and routers; matrices in --type,
    experts in --expert-type; a row that is not whole blocks of the type
    falls back to Q8_0 (or F16), as llama.cpp's quantiser does."""
    if storage == 'f32' or len(shape) == 1:
        return ggml.F32
    ty = ggml.BY_NAME[etype if storage == 'x' else qtype]
    if ty == ggml.MXFP4 and storage != 'x':
        ty = ggml.F32
    if shape[-1] % ggml.TRAITS[ty][1]:
        ty = ggml.Q8_0 if shape[-1] % ggml.QK == 0 and ty != ggml.Q8_0 else ggml.F16
    return ty


# --- HF tensors from the GGUF values -----------------------------------------------

def mxfp4_hf_blocks(raw, shape):
    """GGUF MXFP4 bytes of an (E, out, in) tensor -> HF's (blocks (E, out,
    in/32, 16), scales (E, out, in/32)) uint8.  GGUF block: e, then qs[j]
    holding element j (low nibble) and j + 16 (high); HF: byte m holds
    elements 2m (low) and 2m + 1 (high) of the block."""
    b = np.asarray(raw, dtype=np.uint8).reshape(-1, 17)
    codes = np.concatenate([b[:, 1:] & 0xF, b[:, 1:] >> 4], axis=1)    # element order
    hf = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    E, O, I = shape
    return hf.reshape(E, O, I // 32, 16), b[:, 0].reshape(E, O, I // 32).copy()


def _unpermute(x, n_head):
    from .generate import unpermute
    return unpermute(x, n_head)


def hf_tensors(hp, held, types, raw):
    """[(HF name, safetensors dtype or None for the float dtype, array)] in
    file order, from the values the GGUF holds (held) and its bytes (raw)."""
    a, out = hp.arch, []

    def put(name, x, dt=None):
        out.append((name, dt, x))
    put('model.embed_tokens.weight', held['token_embd.weight'])
    for i in range(hp.n_layer):
        b, h = 'blk.%d.' % i, 'model.layers.%d.' % i
        g = lambda n: held[b + n]           # noqa: E731
        put(h + 'input_layernorm.weight', g('attn_norm.weight'))
        if a == 'phimoe':
            put(h + 'input_layernorm.bias', g('attn_norm.bias'))
        sa = h + 'self_attn.'
        if a.startswith('deepseek'):
            if hp.q_lora_rank:
                put(sa + 'q_a_proj.weight', g('attn_q_a.weight'))
                put(sa + 'q_a_layernorm.weight', g('attn_q_a_norm.weight'))
                put(sa + 'q_b_proj.weight', g('attn_q_b.weight'))
            else:
                put(sa + 'q_proj.weight', g('attn_q.weight'))
            put(sa + 'kv_a_proj_with_mqa.weight', g('attn_kv_a_mqa.weight'))
            put(sa + 'kv_a_layernorm.weight', g('attn_kv_a_norm.weight'))
            # kv_b_proj rows, head by head: the no-rope key part (k_b[h]^T),
            # then the value part (v_b[h])
            kb, vb = g('attn_k_b.weight'), g('attn_v_b.weight')
            put(sa + 'kv_b_proj.weight', np.concatenate(
                [np.concatenate([kb[j].T, vb[j]]) for j in range(hp.n_head)]))
            put(sa + 'o_proj.weight', g('attn_output.weight'))
        else:
            perm = a.startswith('granite')        # llama-style q/k rows in GGUF
            for gn, hn, nh in (('q', 'q', hp.n_head), ('k', 'k', hp.n_head_kv),
                               ('v', 'v', 0), ('output', 'o', 0)):
                x = g('attn_%s.weight' % gn)
                put(sa + '%s_proj.weight' % hn, _unpermute(x, nh) if perm and nh else x)
                if b + 'attn_%s.bias' % gn in held:
                    put(sa + '%s_proj.bias' % hn, g('attn_%s.bias' % gn))
            if a == 'gpt-oss':
                put(sa + 'sinks', g('attn_sinks.weight'))
        norm2 = 'post_attention_norm.weight' if a == 'gpt-oss' else 'ffn_norm.weight'
        put(h + 'post_attention_layernorm.weight', g(norm2))
        if a == 'phimoe':
            put(h + 'post_attention_layernorm.bias', g('ffn_norm.bias'))
        if b + 'ffn_gate.weight' in held:
            for n in ('gate', 'up', 'down'):
                put(h + 'mlp.%s_proj.weight' % n, g('ffn_%s.weight' % n))
            continue
        E = hp.n_expert
        gate, up, down = g('ffn_gate_exps.weight'), g('ffn_up_exps.weight'), \
            g('ffn_down_exps.weight')
        if a.startswith('deepseek'):
            m = h + 'mlp.'
            put(m + 'gate.weight', g('ffn_gate_inp.weight'))
            if a == 'deepseek3':
                put(m + 'gate.e_score_correction_bias', g('exp_probs_b.bias'), 'F32')
            for e in range(E):
                for n, x in (('gate', gate), ('up', up), ('down', down)):
                    put(m + 'experts.%d.%s_proj.weight' % (e, n), x[e])
            for n in ('gate', 'up', 'down'):
                put(m + 'shared_experts.%s_proj.weight' % n, g('ffn_%s_shexp.weight' % n))
        elif a == 'gpt-oss':
            m = h + 'mlp.'
            put(m + 'router.weight', g('ffn_gate_inp.weight'))
            put(m + 'router.bias', g('ffn_gate_inp.bias'))
            # gate and up interleaved: row 2j is gate row j, row 2j+1 up row j
            gub = np.empty((E, 2 * hp.n_ff_exp), dtype=np.float32)
            gub[:, 0::2], gub[:, 1::2] = g('ffn_gate_exps.bias'), g('ffn_up_exps.bias')
            if types[b + 'ffn_gate_exps.weight'] == ggml.MXFP4:
                # the published checkpoints' form: MXFP4 blocks and exponents
                gb, gs = mxfp4_hf_blocks(raw[b + 'ffn_gate_exps.weight'], gate.shape)
                ub, us = mxfp4_hf_blocks(raw[b + 'ffn_up_exps.weight'], up.shape)
                blocks = np.empty((E, 2 * hp.n_ff_exp) + gb.shape[2:], dtype=np.uint8)
                scales = np.empty((E, 2 * hp.n_ff_exp) + gs.shape[2:], dtype=np.uint8)
                blocks[:, 0::2], blocks[:, 1::2] = gb, ub
                scales[:, 0::2], scales[:, 1::2] = gs, us
                put(m + 'experts.gate_up_proj_blocks', blocks, 'U8')
                put(m + 'experts.gate_up_proj_scales', scales, 'U8')
                put(m + 'experts.gate_up_proj_bias', gub)
                db, ds = mxfp4_hf_blocks(raw[b + 'ffn_down_exps.weight'], down.shape)
                put(m + 'experts.down_proj_blocks', db, 'U8')
                put(m + 'experts.down_proj_scales', ds, 'U8')
                put(m + 'experts.down_proj_bias', g('ffn_down_exps.bias'))
            else:
                # transformers' own parameter form: (E, in, out)
                gu = np.empty((E, 2 * hp.n_ff_exp, hp.n_embd), dtype=np.float32)
                gu[:, 0::2], gu[:, 1::2] = gate, up
                put(m + 'experts.gate_up_proj', gu.transpose(0, 2, 1))
                put(m + 'experts.gate_up_proj_bias', gub)
                put(m + 'experts.down_proj', down.transpose(0, 2, 1))
                put(m + 'experts.down_proj_bias', g('ffn_down_exps.bias'))
        elif a == 'phimoe':
            m = h + 'block_sparse_moe.'
            put(m + 'gate.weight', g('ffn_gate_inp.weight'))
            for e in range(E):
                for n, x in (('w1', gate), ('w2', down), ('w3', up)):
                    put(m + 'experts.%d.%s.weight' % (e, n), x[e])
        else:                                  # granite: experts stacked, gate ++ up
            m = h + 'block_sparse_moe.'
            put(m + 'router.layer.weight', g('ffn_gate_inp.weight'))
            put(m + 'input_linear.weight', np.concatenate([gate, up], axis=1))
            put(m + 'output_linear.weight', down)
            if a == 'granitemoeshared':
                put(h + 'shared_mlp.input_linear.weight',
                    np.concatenate([g('ffn_gate_shexp.weight'), g('ffn_up_shexp.weight')]))
                put(h + 'shared_mlp.output_linear.weight', g('ffn_down_shexp.weight'))
    put('model.norm.weight', held['output_norm.weight'])
    if a == 'phimoe':
        put('model.norm.bias', held['output_norm.bias'])
    if 'output.weight' in held:
        put('lm_head.weight', held['output.weight'])
    if a == 'phimoe':
        put('lm_head.bias', held['output.bias'])
    return out


# --- metadata ------------------------------------------------------------------------

def longrope_attn_factor(hp):
    """convert_hf_to_gguf.py's attn_factor for LongRoPE: sqrt(1 + ln(s) /
    ln(orig)), s = max_position_embeddings / original; rounded to float32
    so the config.json mscales equal the GGUF key exactly."""
    s = hp.n_ctx / YARN['orig']
    return float(np.float32(math.sqrt(1 + math.log(s) / math.log(YARN['orig']))))


def gguf_kvs(hp):
    g, a = hp.gguf_arch + '.', hp.arch
    kv = [(g + 'block_count', U, hp.n_layer), (g + 'context_length', U, hp.n_ctx),
          (g + 'embedding_length', U, hp.n_embd), (g + 'feed_forward_length', U, hp.n_ff),
          (g + 'attention.head_count', U, hp.n_head)]
    if a.startswith('deepseek'):
        v = hp.variant
        kv += [(g + 'attention.head_count_kv', U, 1),
               (g + 'rope.freq_base', F, hp.rope_theta),
               (g + 'attention.layer_norm_rms_epsilon', F, hp.rms_eps),
               (g + 'expert_used_count', U, hp.n_expert_used),
               (g + 'expert_group_count', U, hp.n_group),
               (g + 'expert_group_used_count', U, hp.topk_group),
               (g + 'expert_gating_func', U, 2 if v['scoring'] == 'sigmoid' else 1),
               (g + 'rope.scaling.type', S, 'yarn'),
               (g + 'rope.scaling.factor', F, YARN['factor']),
               (g + 'rope.scaling.original_context_length', U, YARN['orig']),
               (g + 'rope.scaling.yarn_beta_fast', F, 32.0),
               (g + 'rope.scaling.yarn_beta_slow', F, 1.0),
               (g + 'leading_dense_block_count', U, hp.n_dense_lead),
               (g + 'vocab_size', U, hp.n_vocab)]
        if hp.q_lora_rank:
            kv.append((g + 'attention.q_lora_rank', U, hp.q_lora_rank))
        kv += [(g + 'attention.kv_lora_rank', U, hp.kv_lora_rank),
               (g + 'attention.key_length', U, hp.kv_lora_rank + hp.rope_dim),
               (g + 'attention.value_length', U, hp.kv_lora_rank),
               (g + 'attention.key_length_mla', U, hp.head_dim + hp.rope_dim),
               (g + 'attention.value_length_mla', U, hp.v_head_dim),
               (g + 'expert_feed_forward_length', U, hp.n_ff_exp),
               (g + 'expert_count', U, hp.n_expert),
               (g + 'expert_shared_count', U, hp.n_shared),
               (g + 'expert_weights_scale', F, v['scale'])]
        if v['norm']:
            kv.append((g + 'expert_weights_norm', B, True))
        kv += [(g + 'rope.dimension_count', U, hp.rope_dim),
               (g + 'rope.scaling.yarn_log_multiplier', F, 0.1 * v['mscale'])]
        return kv
    kv += [(g + 'attention.head_count_kv', U, hp.n_head_kv)]
    if a == 'gpt-oss':
        kv += [(g + 'rope.freq_base', F, hp.rope_theta),
               (g + 'attention.layer_norm_rms_epsilon', F, hp.rms_eps),
               (g + 'expert_count', U, hp.n_expert),
               (g + 'expert_used_count', U, hp.n_expert_used),
               (g + 'attention.key_length', U, hp.head_dim),
               (g + 'attention.value_length', U, hp.head_dim),
               (g + 'rope.scaling.type', S, 'yarn'),
               (g + 'rope.scaling.factor', F, YARN['factor']),
               (g + 'rope.scaling.original_context_length', U, YARN['orig']),
               (g + 'rope.scaling.yarn_beta_fast', F, 32.0),
               (g + 'rope.scaling.yarn_beta_slow', F, 1.0),
               (g + 'attention.sliding_window', U, hp.sliding_window),
               (g + 'expert_feed_forward_length', U, hp.n_ff_exp)]
    elif a == 'phimoe':
        kv += [(g + 'rope.scaling.original_context_length', U, YARN['orig']),
               (g + 'attention.layer_norm_rms_epsilon', F, hp.rms_eps),
               (g + 'rope.dimension_count', U, hp.head_dim),
               (g + 'rope.freq_base', F, hp.rope_theta),
               (g + 'attention.sliding_window', U, 0),
               (g + 'rope.scaling.attn_factor', F, longrope_attn_factor(hp)),
               (g + 'expert_used_count', U, hp.n_expert_used),
               (g + 'expert_count', U, hp.n_expert)]
    else:
        kv += [(g + 'rope.freq_base', F, hp.rope_theta),
               (g + 'attention.layer_norm_rms_epsilon', F, hp.rms_eps),
               (g + 'expert_count', U, hp.n_expert),
               (g + 'expert_used_count', U, hp.n_expert_used),
               (g + 'vocab_size', U, hp.n_vocab),
               (g + 'rope.dimension_count', U, hp.head_dim),
               (g + 'attention.scale', F, GRANITE['attention_multiplier']),
               (g + 'embedding_scale', F, GRANITE['embedding_multiplier']),
               (g + 'residual_scale', F, GRANITE['residual_multiplier']),
               (g + 'logit_scale', F, GRANITE['logits_scaling'])]
        if a == 'granitemoeshared':
            kv.append((g + 'expert_shared_feed_forward_length', U, hp.n_ff_shexp))
    return kv


# Granite's multipliers, values exact in float32, none of them 1 and none
# so large that one part of the model drowns the rest on random weights (the
# published 3.0 models use 12, 0.22, 0.015625, 6 or 8, with tied embeddings)
GRANITE = dict(embedding_multiplier=2.0, residual_multiplier=0.5,
               attention_multiplier=0.125, logits_scaling=4.0)


def hf_config(hp, voc, torch_dtype, mxfp4):
    a = hp.arch
    c = {'architectures': [hp.hf_arch], 'model_type': hp.model_type,
         'vocab_size': hp.n_vocab, 'hidden_size': hp.n_embd,
         'intermediate_size': hp.n_ff, 'num_hidden_layers': hp.n_layer,
         'num_attention_heads': hp.n_head, 'num_key_value_heads': hp.n_head_kv,
         'hidden_act': 'silu', 'max_position_embeddings': hp.n_ctx,
         'initializer_range': 0.02, 'rms_norm_eps': hp.rms_eps, 'rope_theta': hp.rope_theta,
         'attention_dropout': 0.0, 'use_cache': True, 'tie_word_embeddings': hp.tied,
         'bos_token_id': voc.bos, 'eos_token_id': voc.eos}
    if a.startswith('deepseek'):
        v = hp.variant
        c.update({'moe_intermediate_size': hp.n_ff_exp, 'n_shared_experts': hp.n_shared,
                  'n_routed_experts': hp.n_expert, 'num_experts_per_tok': hp.n_expert_used,
                  'routed_scaling_factor': v['scale'], 'kv_lora_rank': hp.kv_lora_rank,
                  'q_lora_rank': hp.q_lora_rank or None, 'qk_rope_head_dim': hp.rope_dim,
                  'qk_nope_head_dim': hp.head_dim, 'v_head_dim': hp.v_head_dim,
                  'topk_method': v['method'], 'n_group': hp.n_group,
                  'topk_group': hp.topk_group, 'moe_layer_freq': 1,
                  'first_k_dense_replace': hp.n_dense_lead, 'norm_topk_prob': v['norm'],
                  'scoring_func': v['scoring'], 'aux_loss_alpha': 0.001, 'seq_aux': True,
                  'attention_bias': False,
                  'rope_scaling': {'type': 'yarn', 'factor': YARN['factor'],
                                   'original_max_position_embeddings': YARN['orig'],
                                   'beta_fast': 32, 'beta_slow': 1, 'mscale': v['mscale'],
                                   'mscale_all_dim': v['mscale']}})
        if a == 'deepseek3':
            c.update({'ep_size': 1, 'num_nextn_predict_layers': 0})
    elif a == 'gpt-oss':
        c.update({'head_dim': hp.head_dim, 'num_local_experts': hp.n_expert,
                  'num_experts_per_tok': hp.n_expert_used,
                  'experts_per_token': hp.n_expert_used, 'attention_bias': True,
                  'sliding_window': hp.sliding_window, 'swiglu_limit': 7.0,
                  'initial_context_length': YARN['orig'],
                  'layer_types': ['sliding_attention' if i % 2 == 0 else 'full_attention'
                                  for i in range(hp.n_layer)],
                  'output_router_logits': False, 'router_aux_loss_coef': 0.9,
                  'rope_scaling': {'rope_type': 'yarn', 'factor': YARN['factor'],
                                   'original_max_position_embeddings': YARN['orig'],
                                   'beta_fast': 32.0, 'beta_slow': 1.0, 'truncate': False}})
        if mxfp4:
            c['quantization_config'] = {
                'quant_method': 'mxfp4',
                'modules_to_not_convert': ['model.layers.*.self_attn',
                                           'model.layers.*.mlp.router',
                                           'model.embed_tokens', 'lm_head']}
    elif a == 'phimoe':
        m = longrope_attn_factor(hp)
        n = hp.head_dim // 2
        c.update({'num_local_experts': hp.n_expert, 'num_experts_per_tok': hp.n_expert_used,
                  'attention_bias': True, 'lm_head_bias': True, 'sliding_window': None,
                  'router_jitter_noise': 0.01, 'input_jitter_noise': 0.01,
                  'original_max_position_embeddings': YARN['orig'],
                  'output_router_logits': False, 'router_aux_loss_coef': 0.0,
                  'rope_scaling': {'type': 'longrope',
                                   'short_factor': [1 + i / 64 for i in range(n)],
                                   'long_factor': [1 + i / 4 for i in range(n)],
                                   'short_mscale': m, 'long_mscale': m,
                                   'original_max_position_embeddings': YARN['orig']}})
    else:
        c.update({'num_local_experts': hp.n_expert, 'num_experts_per_tok': hp.n_expert_used,
                  'attention_bias': False, 'rope_scaling': None,
                  'output_router_logits': False, 'router_aux_loss_coef': 0.001})
        c.update(GRANITE)
        if a == 'granitemoeshared':
            c['shared_intermediate_size'] = hp.n_ff_shexp
    c['torch_dtype'] = torch_dtype
    c['transformers_version'] = A.TRANSFORMERS_VERSION
    return c


FILE_TYPE_MXFP4_MOE = 38


# --- the run -------------------------------------------------------------------------

def build(hp, qtype, etype, seed, hf_ggml):
    """(plan, types, held values, GGUF bytes)."""
    T = plan(hp)
    types, held, raw = {}, {}, {}
    for name, shape, kind, storage in T:
        ty = storage_type(name, shape, storage, qtype, etype)
        x = draw(name, shape, kind, seed)
        if hf_ggml != ggml.F32:
            x = ggml.round_to(x, hf_ggml)       # both files hold the same numbers
        enc = ggml.encode(x, ty)
        types[name], raw[name] = ty, enc
        held[name] = ggml.decode(enc, ty).reshape(shape)
    return T, types, held, raw


def run(args, voc, name, gguf_path, hf_dir, want_gguf, want_hf, hf_type):
    """Write the model; arguments as generate.run prepares them."""
    from . import generate as G
    over = {k: getattr(args, k, None) for k in A.HPARAMS + EXTRA}
    over.update(rope_theta=args.rope_theta, rms_eps=args.rms_eps, n_ctx=args.n_ctx,
                tied=args.tied, n_vocab=len(voc))
    try:
        hp = HP(args.arch, args.shape, over)
    except ValueError as e:
        raise G.UsageError(str(e))
    etype = args.expert_type or args.type
    if etype == 'mxfp4' and args.arch != 'gpt-oss':
        raise G.UsageError('--expert-type mxfp4: only gpt-oss has MXFP4 experts')
    qtype = args.type
    if qtype == 'mxfp4':
        qtype = 'f32'                         # MXFP4 is an expert type
    for t in (qtype, etype):
        if t not in ggml.BY_NAME:
            raise G.UsageError('--type %s is not available for %s' % (t, args.arch))
    hf_st, torch_dtype, hf_ggml = G.HF_DTYPE[hf_type]
    if hp.shape in BENCH and want_hf:
        raise G.UsageError('--shape %s: GGUF only (--format gguf)' % hp.shape)
    if want_hf:
        T, types, held, raw = build(hp, qtype, etype, args.seed, hf_ggml)
        chunks = lambda n, shape, kind: [raw[n]]          # noqa: E731
    else:
        # streamed: one expert (or tensor) in memory at a time; the same
        # bytes as the in-memory path (rows are quantised independently)
        T = plan(hp)
        types = {n: storage_type(n, shape, storage, qtype, etype)
                 for n, shape, _, storage in T}

        def chunks(n, shape, kind):
            for x in draw_parts(n, shape, kind, args.seed):
                if hf_ggml != ggml.F32:
                    x = ggml.round_to(x, hf_ggml)
                yield ggml.encode(x, types[n])
    mxfp4 = any(t == ggml.MXFP4 for t in types.values())
    if want_gguf:
        w = gguf.GGUFWriter(gguf_path)
        try:
            w.add('general.architecture', gr.STRING, hp.gguf_arch)
            w.add('general.name', gr.STRING, name)
            w.add('general.alignment', gr.UINT32, 32)
            for k, vt, v in gguf_kvs(hp):
                w.add(k, vt, v)
            ft = FILE_TYPE_MXFP4_MOE if mxfp4 else G.FILE_TYPE.get(args.type, 0)
            w.add('general.file_type', gr.UINT32, ft)
            w.add('general.quantization_version', gr.UINT32, 2)
            for k, vt, v in voc.gguf_kvs():
                w.add(k, vt, v)
            for n, shape, _, _ in T:
                w.add_tensor(n, list(reversed(shape)), types[n])
            w.begin()
            for n, shape, kind, _ in T:
                for c in chunks(n, shape, kind):
                    w.write(n, c)
            w.finish()
            w = None
        finally:
            if w is not None:
                w.abort()
    if want_hf:
        os.makedirs(hf_dir, exist_ok=True)
        for old in os.listdir(hf_dir):
            if old.startswith('model') and '.safetensors' in old:
                os.unlink(os.path.join(hf_dir, old))
        write_meta(hf_dir, hp, voc, torch_dtype, mxfp4)
        items = hf_tensors(hp, held, types, raw)
        entries = [(n, dt or hf_st, x.shape) for n, dt, x in items]
        sw = st.SafetensorsSet(hf_dir, entries, args.shards)
        try:
            for n, dt, x in items:
                sw.write(n, x)
            sw.finish()
            sw = None
        finally:
            if sw is not None:
                sw.abort()
    return hp, T


def write_meta(d, hp, voc, torch_dtype, mxfp4):
    from . import generate as G
    G._dump(os.path.join(d, 'config.json'), hf_config(hp, voc, torch_dtype, mxfp4))
    gen = {'_from_model_config': True, 'bos_token_id': voc.bos, 'eos_token_id': voc.eos,
           'transformers_version': A.TRANSFORMERS_VERSION}
    G._dump(os.path.join(d, 'generation_config.json'), gen)
    G._dump(os.path.join(d, 'tokenizer.json'), voc.tokenizer_json())
    cls = 'LlamaTokenizer' if voc.style == 'spm' else 'PreTrainedTokenizerFast'
    G._dump(os.path.join(d, 'tokenizer_config.json'), voc.tokenizer_config(hp.n_ctx, cls))
    sp = {}
    for k, i in (('bos_token', voc.bos), ('eos_token', voc.eos), ('unk_token', voc.unk),
                 ('pad_token', voc.pad)):
        if i is not None:
            sp[k] = {'content': voc.tokens[i], 'lstrip': False, 'normalized': False,
                     'rstrip': False, 'single_word': False}
    G._dump(os.path.join(d, 'special_tokens_map.json'), sp)


# --- compare (moegen.compare for these architectures) --------------------------------

def hp_from_config(cfg):
    arch = [k for k, v in ARCHS.items() if v[1] == cfg['architectures'][0] and
            (v[2] == cfg['model_type'])]
    if cfg['architectures'][0] == 'DeepseekV2ForCausalLM':
        arch = ['deepseek2-v2' if cfg.get('q_lora_rank') else 'deepseek2']
    a = arch[0]
    over = dict(n_vocab=cfg['vocab_size'], n_embd=cfg['hidden_size'],
                n_layer=cfg['num_hidden_layers'], n_head=cfg['num_attention_heads'],
                n_head_kv=cfg['num_key_value_heads'], n_ctx=cfg['max_position_embeddings'],
                rms_eps=cfg['rms_norm_eps'], rope_theta=cfg['rope_theta'],
                tied=cfg['tie_word_embeddings'])
    if a.startswith('deepseek'):
        over.update(n_ff=cfg['intermediate_size'], n_expert=cfg['n_routed_experts'],
                    n_expert_used=cfg['num_experts_per_tok'],
                    n_ff_exp=cfg['moe_intermediate_size'], head_dim=cfg['qk_nope_head_dim'],
                    q_lora_rank=cfg['q_lora_rank'] or 0, kv_lora_rank=cfg['kv_lora_rank'],
                    rope_dim=cfg['qk_rope_head_dim'], v_head_dim=cfg['v_head_dim'],
                    n_dense_lead=cfg['first_k_dense_replace'], n_group=cfg['n_group'],
                    topk_group=cfg['topk_group'], n_shared=cfg['n_shared_experts'])
        shape = 'small' if cfg['hidden_size'] >= 256 else 'tiny'
    else:
        over.update(n_expert=cfg['num_local_experts'], n_expert_used=cfg['num_experts_per_tok'],
                    n_ff_exp=cfg['intermediate_size'], head_dim=cfg.get('head_dim'),
                    sliding_window=cfg.get('sliding_window'),
                    n_ff_shexp=cfg.get('shared_intermediate_size'))
        shape = 'small' if cfg['hidden_size'] >= 256 else 'tiny'
    return HP(a, shape, over)


def compare(gguf_path, hf_dir, tol=0.0):
    """Problems (empty list if the GGUF file and the snapshot hold the same
    model): KVs, tensor set and shapes, every HF tensor against the one the
    GGUF values map to."""
    from .compare import hf_tensors as hf_files
    with open(os.path.join(hf_dir, 'config.json')) as f:
        cfg = json.load(f)
    hp = hp_from_config(cfg)
    r = gr.GGUFReader(gguf_path)
    bad = []
    for k, _, v in gguf_kvs(hp):
        got = r.kv.get(k)
        if got is None or (isinstance(v, float) and abs(got - v) > 1e-6 * abs(v)) or \
                (not isinstance(v, float) and got != v):
            bad.append('KV %s: gguf %r, config.json says %r' % (k, got, v))
    T = plan(hp)
    names = set(r.names())
    held, types, raw = {}, {}, {}
    for n, shape, _, _ in T:
        if n not in names:
            bad.append('GGUF lacks %s' % n)
            continue
        info = r.info(n)
        if info.ne != list(reversed(shape)):
            bad.append('%s: GGUF ne %s, expected %s' % (n, info.ne, list(reversed(shape))))
            continue
        types[n], raw[n] = info.type, r.raw(n)
        held[n] = ggml.decode(raw[n], info.type).reshape(shape)
    for n in sorted(names - {t[0] for t in T}):
        bad.append('GGUF has unexpected tensor %s' % n)
    if bad:
        return bad
    files = hf_files(hf_dir)
    want = hf_tensors(hp, held, types, raw)
    for n, _, x in want:
        if n not in files:
            bad.append('HF lacks %s' % n)
            continue
        y = st.read_tensor(files[n], n)
        if tuple(y.shape) != tuple(x.shape):
            bad.append('%s: HF shape %s, expected %s' % (n, list(y.shape), list(x.shape)))
            continue
        d = np.abs(np.asarray(x, dtype=np.float64) - y).max() if y.size else 0.0
        if not d <= tol:
            bad.append('%s: max difference %g' % (n, d))
    for n in sorted(set(files) - {w[0] for w in want}):
        bad.append('HF has unexpected tensor %s' % n)
    return bad
