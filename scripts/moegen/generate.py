# moegen/generate.py — gen-model's command line and the generation loop.
#
# One seeded model, written as GGUF, as an HF snapshot, or both, holding the
# same numbers: every tensor is generated in chunks from its own seeded
# stream (seed, crc32(GGUF name), chunk), stored in its GGUF type, and the HF
# copy holds the values the GGUF decodes to (dequantised, q/k rows put back
# in HF's rotate-half order for llama/mixtral).  Nothing is built whole in
# memory, so large shapes stream to disk.
import argparse
import glob
import json
import os
import sys
import time
import zlib

import numpy as np

from . import arch as A
from . import ggml
from . import gguf
from . import moe2
from . import reader as gr
from . import safetensors as st
from . import vocab as V

CHUNK_ELEMS = 1 << 22     # 2-D tensors larger than this are generated in row groups

FILE_TYPE = {'f32': 0, 'f16': 1, 'q4_0': 2, 'q8_0': 7, 'q4_k': 14, 'q4_k_m': 15, 'q5_k': 16,
             'q6_k': 18, 'bf16': 32}
HF_DTYPE = {'f32': ('F32', 'float32', ggml.F32), 'f16': ('F16', 'float16', ggml.F16),
            'bf16': ('BF16', 'bfloat16', ggml.BF16)}


class UsageError(Exception):
    pass


# --- tensor values ---------------------------------------------------------------

def chunks(t):
    """[(chunk index, row slice or expert index)] of a tensor, in file order."""
    if len(t.ne) == 3:
        return [(e, e) for e in range(t.ne[2])]
    if len(t.ne) == 1 or t.permute is not None or t.ne[0] * t.ne[1] <= CHUNK_ELEMS:
        return [(0, None)]
    rows = max(1, CHUNK_ELEMS // t.ne[0])
    return [(i, slice(r, min(r + rows, t.ne[1]))) for i, r in enumerate(range(0, t.ne[1], rows))]


def chunk_shape(t, sel):
    if len(t.ne) == 3:
        return (t.ne[1], t.ne[0])
    if len(t.ne) == 1:
        return (t.ne[0],)
    if sel is None:
        return (t.ne[1], t.ne[0])
    return (sel.stop - sel.start, t.ne[0])


def values(t, ci, sel, seed):
    """float32 values of one chunk: matrices N(0, 1/fan_in), norms 1 + N(0, 0.1^2),
    biases N(0, 0.1^2), router N(0, 4/n_embd) so top-k picks are well separated."""
    rng = np.random.default_rng([seed, zlib.crc32(t.name.encode()), ci])
    x = rng.standard_normal(chunk_shape(t, sel), dtype=np.float32)
    fan_in = np.float32(t.ne[0])
    if t.kind in ('embd', 'matrix', 'shexp_gate'):
        x *= np.float32(1) / np.sqrt(fan_in)
    elif t.kind == 'router':
        x *= np.float32(2) / np.sqrt(fan_in)
    elif t.kind == 'norm':
        x = np.float32(1) + np.float32(0.1) * x
    elif t.kind == 'bias':
        x *= np.float32(0.1)
    return x


def unpermute(x, n_head):
    """GGUF llama q/k rows (interleaved pairs) -> HF rows (rotate-half halves).
    Inverse of llama.cpp's convert permute:
      reshape(n_head, 2, hd/2, in).swapaxes(1, 2)."""
    rows, cols = x.shape
    hd = rows // n_head
    return x.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


# --- storage types --------------------------------------------------------------

def _more_bits(layer, n):
    return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2


def recipe_q4_k_m(t, hp):
    """llama.cpp's Q4_K_M choices for the tensors we make (see BENCHMARKS.md)."""
    r, n = t.role, hp.n_layer
    n_expert = hp.n_expert if hp.arch.moe else 0
    more = t.layer is not None and _more_bits(t.layer, n)
    if r == 'output':
        return ggml.Q6_K
    if r == 'attn_k':
        return ggml.Q8_0 if n_expert == 8 else ggml.Q4_K
    if r == 'attn_v':
        return ggml.Q8_0 if n_expert == 8 else (ggml.Q6_K if more else ggml.Q4_K)
    if r == 'attn_output':
        return ggml.Q5_K if n_expert == 8 else ggml.Q4_K
    if r.startswith('ffn_down'):
        return ggml.Q6_K if more else ggml.Q4_K
    return ggml.Q4_K


def storage_type(t, hp, qtype):
    if t.kind in ('norm', 'bias', 'router', 'shexp_gate'):
        return ggml.F32                  # llama.cpp keeps these F32
    if qtype == 'q4_k_m':
        ty = recipe_q4_k_m(t, hp)
        if t.ne[0] % ggml.TRAITS[ty][1]:
            # llama.cpp falls back to a 32-block type; we have Q8_0
            ty = ggml.Q8_0 if t.ne[0] % ggml.QK == 0 else ggml.F16
        return ty
    ty = ggml.BY_NAME[qtype]
    bs = ggml.TRAITS[ty][1]
    if t.ne[0] % bs:
        raise UsageError('%s: rows of %d are not a multiple of the %s block (%d); '
                         'use --shape small or other sizes' % (t.name, t.ne[0], qtype, bs))
    return ty


# --- vocabulary ------------------------------------------------------------------

def shared_vocab_dir():
    env = os.environ.get('MOE_SHARED')
    here = os.path.dirname(os.path.abspath(__file__))
    for d in ([env] if env else []) + [os.path.join(here, '..', '..', '..', 'shared')]:
        p = os.path.join(d, 'vocab')
        if os.path.isdir(p):
            return p
    return None


def load_vocab(args, a, shape, n_vocab):
    path = args.vocab
    if path is None and A.SHAPES[shape].get('vocab') and args.n_vocab is None:
        d = shared_vocab_dir()
        name = 'ggml-vocab-llama-spm.gguf' if a.family == 'llama' else 'ggml-vocab-gpt-2.gguf'
        if d and os.path.exists(os.path.join(d, name)):
            path = os.path.normpath(os.path.join(d, name))
            if args.verbose:
                print('gen-model: using vocabulary %s' % path, file=sys.stderr)
    if path in (None, 'synthetic'):
        try:
            v = V.synthetic(a.family, n_vocab)
        except ValueError as e:
            raise UsageError(str(e))
    else:
        try:
            v = V.from_gguf(path)
        except (OSError, ValueError, gr.GGUFError) as e:
            raise UsageError('--vocab: %s' % e)
        if args.n_vocab is not None and args.n_vocab != len(v):
            raise UsageError('--n-vocab %d differs from the %d tokens of %s'
                             % (args.n_vocab, len(v), path))
    if v.chat_template is None:
        v.chat_template = V.DEFAULT_TEMPLATES[{'llama': 'inst', 'qwen': 'chatml',
                                               'olmoe': 'tulu'}[a.family]]
    return v


# --- the run ---------------------------------------------------------------------

def parse(argv):
    p = argparse.ArgumentParser(
        prog='gen-model',
        description='Write a seeded random-weight transformer as GGUF and/or an HF '
        'snapshot holding the same numbers.  deepseek2 (V2-Lite form), deepseek2-v2, '
        'deepseek3, gpt-oss, phimoe, granitemoe and granitemoeshared come in the shapes '
        'tiny and small (moegen/moe2.py; extra sizes: --q-lora-rank, --kv-lora-rank, '
        '--rope-dim, --v-head-dim, --n-dense-lead, --n-group, --topk-group, --n-shared, '
        '--sliding-window), and the benchmark shapes ds2lite-s (deepseek2 forms) and '
        'gptoss-s (gpt-oss), GGUF only.')
    p.add_argument('--arch', required=True, choices=sorted(A.ARCHS) + sorted(moe2.ARCHS))
    p.add_argument('--format', default='gguf', choices=['gguf', 'hf', 'both'])
    p.add_argument('--out', required=True,
                   help='output prefix: writes OUT.gguf and/or the snapshot directory OUT.hf/ '
                   '(a suffix already given is not repeated)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--shape', default='tiny',
                   choices=list(A.SHAPES) + [k for k in moe2.BENCH if k not in A.SHAPES])
    for k in A.HPARAMS:
        p.add_argument('--' + k.replace('_', '-'), type=int, default=None)
    p.add_argument('--rope-theta', type=float, default=None)
    p.add_argument('--rms-eps', type=float, default=None)
    p.add_argument('--n-ctx', type=int, default=None)
    for k in moe2.EXTRA:
        p.add_argument('--' + k.replace('_', '-'), type=int, default=None,
                       help='(second family) ' + k)
    p.add_argument('--type', default='f32', choices=sorted(FILE_TYPE) + ['mxfp4'],
                   help='GGUF storage type of the weight matrices (norms, biases, router: F32); '
                   'mxfp4: gpt-oss experts in MXFP4, other matrices F32')
    p.add_argument('--expert-type', default=None, choices=sorted(FILE_TYPE) + ['mxfp4'],
                   help='storage type of the routed experts (default --type); mxfp4 for gpt-oss')
    p.add_argument('--hf-type', default=None, choices=sorted(HF_DTYPE),
                   help='HF dtype (default: --type if it is a float type, else f32)')
    p.add_argument('--vocab', default=None,
                   help="vocab-only GGUF to copy the tokenizer from, or 'synthetic'")
    p.add_argument('--tied', action='store_true', help='tie the output matrix to the embedding')
    p.add_argument('--shards', type=int, default=1, help='HF safetensors shards')
    p.add_argument('--name', default=None, help='general.name (default moegen-ARCH-SHAPE)')
    p.add_argument('-j', '--jobs', type=int, default=None,
                   help='worker processes (default: all CPUs for models over 20M parameters)')
    p.add_argument('-v', '--verbose', action='store_true')
    args = p.parse_args(argv)
    if args.seed < 0 or args.seed >= 1 << 63:
        p.error('--seed must be in [0, 2^63)')
    if args.shards < 1:
        p.error('--shards must be >= 1')
    return args


def out_paths(out):
    """--out is a prefix: PREFIX.gguf and PREFIX.hf/ (a name already ending
    in .gguf or .hf is used as is for that format)."""
    out = out.rstrip('/') or out
    base = out
    for suf in ('.gguf', '.hf'):
        if out.endswith(suf):
            base = out[:-len(suf)]
    g = out if out.endswith('.gguf') else base + '.gguf'
    h = out if out.endswith('.hf') else base + '.hf'
    return g, h


def run(args):
    t0 = time.time()
    if args.arch in moe2.ARCHS:
        return run_moe2(args, t0)
    if args.type == 'mxfp4' or args.expert_type not in (None, args.type):
        raise UsageError('--type mxfp4 / --expert-type: only for %s' % ', '.join(sorted(moe2.ARCHS)))
    a = A.ARCHS[args.arch]
    over = {k: getattr(args, k) for k in A.HPARAMS}
    over.update(rope_theta=args.rope_theta, rms_eps=args.rms_eps, n_ctx=args.n_ctx,
                tied=args.tied)
    shape_nv = over['n_vocab'] or A.SHAPES[args.shape]['n_vocab']
    voc = load_vocab(args, a, args.shape, shape_nv)
    over['n_vocab'] = len(voc)
    try:
        hp = A.HParams(a, args.shape, over)
    except ValueError as e:
        raise UsageError(str(e))
    tensors = A.plan(hp)
    types = {t.name: storage_type(t, hp, args.type) for t in tensors}
    hf_type = args.hf_type or (args.type if args.type in HF_DTYPE else 'f32')
    hf_st, torch_dtype, hf_ggml = HF_DTYPE[hf_type]
    name = args.name or 'moegen-%s-%s' % (a.name, args.shape)

    want_gguf = args.format in ('gguf', 'both')
    want_hf = args.format in ('hf', 'both')
    gguf_path, hf_dir = out_paths(args.out)

    gw = sw = None
    try:
        if want_gguf:
            gw = gguf.GGUFWriter(gguf_path)
            gw.add('general.architecture', gr.STRING, a.gguf)
            gw.add('general.name', gr.STRING, name)
            gw.add('general.alignment', gr.UINT32, 32)
            for k, vt, v in A.gguf_kvs(hp):
                gw.add(k, vt, v)
            gw.add('general.file_type', gr.UINT32, FILE_TYPE[args.type])
            gw.add('general.quantization_version', gr.UINT32, 2)
            for k, vt, v in voc.gguf_kvs():
                gw.add(k, vt, v)
            for t in tensors:
                gw.add_tensor(t.name, t.ne, types[t.name])
        if want_hf:
            os.makedirs(hf_dir, exist_ok=True)
            for old in glob.glob(os.path.join(hf_dir, 'model*.safetensors*')):
                os.unlink(old)
            write_hf_meta(hf_dir, hp, voc, torch_dtype)
            entries = []
            for t in tensors:
                for hn in t.hf:
                    entries.append((hn, hf_st, t.hf_shape()))
            sw = st.SafetensorsSet(hf_dir, entries, args.shards)
        if gw:
            gw.begin()
        work = [(i, ci, sel) for i, t in enumerate(tensors) for ci, sel in chunks(t)]
        ctx = dict(tensors=tensors, types=types, seed=args.seed, hf_ggml=hf_ggml,
                   gguf=gw is not None, hf=sw is not None)
        jobs = args.jobs or (os.cpu_count() or 1 if A.n_params(tensors) > 20e6 else 1)
        for (i, ci, sel), (enc, y) in compute_all(work, ctx, jobs):
            t = tensors[i]
            if gw:
                gw.write(t.name, enc)
            if sw:
                sw.write(t.hf[sel] if len(t.ne) == 3 else t.hf[0], y)
        if gw:
            gw.finish()
            gw = None
        if sw:
            sw.finish()
            sw = None
    finally:
        if gw:
            gw.abort()
        if sw:
            sw.abort()
    if args.verbose:
        print('gen-model: %s %s %s: %.3g M parameters, %s, %.2f s'
              % (a.name, args.shape, hp.describe(), A.n_params(tensors) / 1e6, args.type,
                 time.time() - t0), file=sys.stderr)


def run_moe2(args, t0):
    """deepseek2 / gpt-oss / phimoe / granitemoe (moegen/moe2.py)."""
    fam = moe2.ARCHS[args.arch][3]
    big = args.shape in moe2.BENCH
    voc = load_vocab(args, argparse.Namespace(family=fam), 'olmoe-s' if big else 'tiny',
                     args.n_vocab or (50257 if big else 512))
    if args.type in HF_DTYPE:
        hf_type = args.hf_type or args.type
    else:
        hf_type = args.hf_type or 'f32'
    name = args.name or 'moegen-%s-%s' % (args.arch, args.shape)
    gguf_path, hf_dir = out_paths(args.out)
    hp, T = moe2.run(args, voc, name, gguf_path, hf_dir, args.format in ('gguf', 'both'),
                     args.format in ('hf', 'both'), hf_type)
    if args.verbose:
        n = sum(int(np.prod(t[1])) for t in T)
        print('gen-model: %s %s %s: %.3g M parameters, %s, %.2f s'
              % (args.arch, args.shape, hp.describe(), n / 1e6, args.type, time.time() - t0),
              file=sys.stderr)


_CTX = None


def _init(ctx):
    global _CTX
    _CTX = ctx


def compute(item):
    """One chunk: (GGUF bytes or None, HF values or None)."""
    i, ci, sel = item
    c = _CTX
    t = c['tensors'][i]
    ty = c['types'][t.name]
    x = values(t, ci, sel, c['seed'])
    if c['hf_ggml'] != ggml.F32:
        x = ggml.round_to(x, c['hf_ggml'])      # both files hold the same numbers
    enc = ggml.encode(x, ty) if (c['gguf'] or ty != ggml.F32) else None
    y = None
    if c['hf']:
        y = x if ty == ggml.F32 else ggml.decode(enc, ty).reshape(x.shape)
        if t.permute is not None:
            y = unpermute(y, t.permute)
    return enc if c['gguf'] else None, y


def compute_all(work, ctx, jobs):
    """(item, compute(item)) in order; with jobs > 1 in worker processes, at
    most 2 * jobs chunks in flight so memory stays bounded."""
    if jobs <= 1 or len(work) < 2:
        _init(ctx)
        for w in work:
            yield w, compute(w)
        return
    import collections
    import multiprocessing as mp
    with mp.get_context('fork').Pool(jobs, _init, (ctx,)) as pool:
        q = collections.deque()
        it = iter(work)
        for w in it:
            q.append((w, pool.apply_async(compute, (w,))))
            if len(q) >= 2 * jobs:
                w0, r = q.popleft()
                yield w0, r.get()
        while q:
            w0, r = q.popleft()
            yield w0, r.get()


def _dump(path, obj):
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write('\n')
    os.replace(tmp, path)


def write_hf_meta(d, hp, voc, torch_dtype):
    _dump(os.path.join(d, 'config.json'), A.hf_config(hp, voc, torch_dtype))
    gen = {'_from_model_config': True, 'bos_token_id': voc.bos, 'eos_token_id': voc.eos}
    if voc.pad is not None:
        gen['pad_token_id'] = voc.pad
    gen['transformers_version'] = A.TRANSFORMERS_VERSION
    _dump(os.path.join(d, 'generation_config.json'), gen)
    _dump(os.path.join(d, 'tokenizer.json'), voc.tokenizer_json())
    cls = 'LlamaTokenizer' if voc.style == 'spm' else \
        {'qwen': 'Qwen2Tokenizer', 'olmoe': 'GPTNeoXTokenizer'}.get(hp.arch.family,
                                                                    'PreTrainedTokenizerFast')
    _dump(os.path.join(d, 'tokenizer_config.json'), voc.tokenizer_config(hp.n_ctx, cls))
    sp = {}
    for k, i in (('bos_token', voc.bos), ('eos_token', voc.eos), ('unk_token', voc.unk),
                 ('pad_token', voc.pad)):
        if i is not None:
            sp[k] = {'content': voc.tokens[i], 'lstrip': False, 'normalized': False,
                     'rstrip': False, 'single_word': False}
    _dump(os.path.join(d, 'special_tokens_map.json'), sp)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except UsageError as e:
        print('gen-model: %s' % e, file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print('gen-model: %s' % e, file=sys.stderr)
        return 1
    return 0
