# moegen/arch.py — the architectures the generator knows: hyper-parameter
# shapes, the tensor list (llama.cpp GGUF names and shapes, and the HF names
# each maps to), and the metadata each ecosystem writes (GGUF KVs as
# llama.cpp's convert_hf_to_gguf.py emits them, HF config.json fields).
#
# GGUF dims are fastest first (ne[0] = row length = input dim); numpy / HF
# shapes are the reverse.  Expert tensors are stacked in GGUF:
#   ffn_gate_exps / ffn_up_exps  ne = [n_embd, n_ff_exp, n_expert]
#   ffn_down_exps                ne = [n_ff_exp, n_embd, n_expert]
# and one [out, in] matrix per expert in HF.
from . import reader as gr

TRANSFORMERS_VERSION = '4.46.0'


class Arch:
    def __init__(self, name, gguf, hf, model_type, family, moe=False, permute=False,
                 qkv_bias=False, qk_norm=None, shexp=False, norm_topk=False, head_dim_cfg=False,
                 rms_eps=1e-5):
        self.name = name
        self.gguf = gguf                # general.architecture
        self.hf = hf                    # config.json "architectures"
        self.model_type = model_type
        self.family = family            # default vocab / chat template: llama, qwen, olmoe
        self.moe = moe
        self.permute = permute          # q/k rows: HF rotate-half order vs GGUF interleaved
        self.qkv_bias = qkv_bias
        self.qk_norm = qk_norm          # None, 'head' (per head_dim) or 'full' (whole projection)
        self.shexp = shexp
        self.norm_topk = norm_topk
        self.head_dim_cfg = head_dim_cfg  # config.json carries head_dim
        self.rms_eps = rms_eps


ARCHS = {a.name: a for a in [
    Arch('llama', 'llama', 'LlamaForCausalLM', 'llama', 'llama', permute=True),
    Arch('mixtral', 'llama', 'MixtralForCausalLM', 'mixtral', 'llama', moe=True, permute=True,
         norm_topk=True),
    Arch('qwen2', 'qwen2', 'Qwen2ForCausalLM', 'qwen2', 'qwen', qkv_bias=True, rms_eps=1e-6),
    Arch('qwen2moe', 'qwen2moe', 'Qwen2MoeForCausalLM', 'qwen2_moe', 'qwen', moe=True,
         qkv_bias=True, shexp=True, rms_eps=1e-6),
    Arch('qwen3', 'qwen3', 'Qwen3ForCausalLM', 'qwen3', 'qwen', qk_norm='head',
         head_dim_cfg=True, rms_eps=1e-6),
    Arch('qwen3moe', 'qwen3moe', 'Qwen3MoeForCausalLM', 'qwen3_moe', 'qwen', moe=True,
         qk_norm='head', norm_topk=True, head_dim_cfg=True, rms_eps=1e-6),
    # convert_hf_to_gguf.py writes a fixed 1e-5 for olmoe whatever the config says
    Arch('olmoe', 'olmoe', 'OlmoeForCausalLM', 'olmoe', 'olmoe', moe=True, qk_norm='full'),
]}

# Shapes.  n_head_kv None = same as n_head.  'vocab' names the shared vocab
# file the shape is measured with (../shared/vocab), by vocab style.
SHAPES = {
    'tiny': dict(n_vocab=512, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16,
                 n_ff=128, n_expert=4, n_expert_used=2, n_ff_exp=32, n_ff_shexp=64),
    # every row a multiple of 256, for the K-quants
    'small': dict(n_vocab=512, n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                  n_ff=512, n_expert=4, n_expert_used=2, n_ff_exp=256, n_ff_shexp=512),
    'mixtral-s': dict(n_vocab=32000, n_embd=1024, n_layer=8, n_head=16, n_head_kv=4,
                      head_dim=64, n_ff=2048, n_expert=8, n_expert_used=2, n_ff_exp=2048,
                      n_ff_shexp=2048, vocab=True),
    'olmoe-s': dict(n_vocab=50257, n_embd=1024, n_layer=8, n_head=16, n_head_kv=16,
                    head_dim=64, n_ff=512, n_expert=64, n_expert_used=8, n_ff_exp=512,
                    n_ff_shexp=512, vocab=True),
    'olmoe-m': dict(n_vocab=50257, n_embd=2048, n_layer=16, n_head=16, n_head_kv=16,
                    head_dim=128, n_ff=1024, n_expert=64, n_expert_used=8, n_ff_exp=1024,
                    n_ff_shexp=1024, vocab=True),
}

HPARAMS = ('n_vocab', 'n_embd', 'n_layer', 'n_head', 'n_head_kv', 'head_dim', 'n_ff',
           'n_expert', 'n_expert_used', 'n_ff_exp', 'n_ff_shexp')


class HParams:
    def __init__(self, arch, shape, over):
        self.arch = arch
        self.shape = shape
        s = dict(SHAPES[shape])
        for k in HPARAMS:
            if over.get(k) is not None:
                s[k] = over[k]
        if arch.name == 'olmoe' and over.get('n_head_kv') is None:
            s['n_head_kv'] = s['n_head']          # OLMoE has no GQA
        if over.get('head_dim') is None and (over.get('n_embd') is not None or
                                             over.get('n_head') is not None):
            s['head_dim'] = s['n_embd'] // s['n_head']
        for k in HPARAMS:
            setattr(self, k, int(s[k]))
        if arch.name in ('mixtral', 'olmoe'):
            # their configs have one FFN size: intermediate_size is the expert's
            self.n_ff = self.n_ff_exp
        self.rope_theta = float(over.get('rope_theta') or 10000.0)
        self.rms_eps = float(over.get('rms_eps') or arch.rms_eps)
        if arch.name == 'olmoe':
            self.rms_eps = 1e-5
        self.n_ctx = int(over.get('n_ctx') or 4096)
        self.tied = bool(over.get('tied'))
        self.check()

    def check(self):
        a = self.arch
        for k in HPARAMS:
            if getattr(self, k) <= 0:
                raise ValueError('--%s must be positive' % k.replace('_', '-'))
        if self.n_head % self.n_head_kv:
            raise ValueError('--n-head %d is not a multiple of --n-head-kv %d'
                             % (self.n_head, self.n_head_kv))
        if a.permute and self.head_dim % 2:
            raise ValueError('head_dim must be even for rope')
        if a.moe and self.n_expert_used > self.n_expert:
            raise ValueError('--n-expert-used %d > --n-expert %d'
                             % (self.n_expert_used, self.n_expert))

    @property
    def head_dim_default(self):
        return self.n_embd // self.n_head == self.head_dim and self.n_embd % self.n_head == 0

    @property
    def q_dim(self):
        return self.n_head * self.head_dim

    @property
    def kv_dim(self):
        return self.n_head_kv * self.head_dim

    def describe(self):
        return ' '.join('%s=%d' % (k, getattr(self, k)) for k in HPARAMS)


class Tensor:
    """One GGUF tensor and where its values go in the HF checkpoint.

    kind: 'embd', 'matrix', 'norm', 'bias', 'router', 'shexp_gate'.
    hf: list of HF names; one per expert for 3-D tensors, else one.
    permute: None, or the head count whose rows are reordered for HF."""

    def __init__(self, name, ne, kind, hf, role, layer=None, permute=None):
        self.name = name
        self.ne = list(ne)
        self.kind = kind
        self.hf = hf
        self.role = role          # the GGUF name without blk.N. and .weight/.bias
        self.layer = layer
        self.permute = permute

    @property
    def shape(self):
        return tuple(reversed(self.ne))

    def hf_shape(self):
        if self.kind == 'shexp_gate':
            return (1, self.ne[0])
        return self.shape[1:] if len(self.ne) == 3 else self.shape

    def __repr__(self):
        return 'Tensor(%s %s)' % (self.name, self.ne)


def plan(hp):
    """The model's tensors in file order."""
    a = hp.arch
    E, D, F = hp.n_expert, hp.n_embd, hp.n_ff
    T = []
    T.append(Tensor('token_embd.weight', [D, hp.n_vocab], 'embd', ['model.embed_tokens.weight'],
                    'token_embd'))
    for i in range(hp.n_layer):
        b, h = 'blk.%d.' % i, 'model.layers.%d.' % i

        def add(role, ne, kind, hf, suffix='.weight', permute=None):
            T.append(Tensor(b + role + suffix, ne, kind, hf, role, i, permute))
        add('attn_norm', [D], 'norm', [h + 'input_layernorm.weight'])
        add('attn_q', [D, hp.q_dim], 'matrix', [h + 'self_attn.q_proj.weight'],
            permute=hp.n_head if a.permute else None)
        add('attn_k', [D, hp.kv_dim], 'matrix', [h + 'self_attn.k_proj.weight'],
            permute=hp.n_head_kv if a.permute else None)
        add('attn_v', [D, hp.kv_dim], 'matrix', [h + 'self_attn.v_proj.weight'])
        if a.qkv_bias:
            add('attn_q', [hp.q_dim], 'bias', [h + 'self_attn.q_proj.bias'], '.bias')
            add('attn_k', [hp.kv_dim], 'bias', [h + 'self_attn.k_proj.bias'], '.bias')
            add('attn_v', [hp.kv_dim], 'bias', [h + 'self_attn.v_proj.bias'], '.bias')
        if a.qk_norm == 'head':
            add('attn_q_norm', [hp.head_dim], 'norm', [h + 'self_attn.q_norm.weight'])
            add('attn_k_norm', [hp.head_dim], 'norm', [h + 'self_attn.k_norm.weight'])
        elif a.qk_norm == 'full':
            add('attn_q_norm', [hp.q_dim], 'norm', [h + 'self_attn.q_norm.weight'])
            add('attn_k_norm', [hp.kv_dim], 'norm', [h + 'self_attn.k_norm.weight'])
        add('attn_output', [hp.q_dim, D], 'matrix', [h + 'self_attn.o_proj.weight'])
        add('ffn_norm', [D], 'norm', [h + 'post_attention_layernorm.weight'])
        if not a.moe:
            add('ffn_gate', [D, F], 'matrix', [h + 'mlp.gate_proj.weight'])
            add('ffn_up', [D, F], 'matrix', [h + 'mlp.up_proj.weight'])
            add('ffn_down', [F, D], 'matrix', [h + 'mlp.down_proj.weight'])
            continue
        X = hp.n_ff_exp
        if a.name == 'mixtral':
            m = h + 'block_sparse_moe.'
            names = {'gate': 'w1', 'up': 'w3', 'down': 'w2'}
            ex = lambda w: [m + 'experts.%d.%s.weight' % (e, names[w]) for e in range(E)]
        else:
            m = h + 'mlp.'
            ex = lambda w: [m + 'experts.%d.%s_proj.weight' % (e, w) for e in range(E)]
        add('ffn_gate_inp', [D, E], 'router', [m + 'gate.weight'])
        add('ffn_gate_exps', [D, X, E], 'matrix', ex('gate'))
        add('ffn_up_exps', [D, X, E], 'matrix', ex('up'))
        add('ffn_down_exps', [X, D, E], 'matrix', ex('down'))
        if a.shexp:
            S = hp.n_ff_shexp
            # HF Linear(n_embd, 1) = [1, n_embd]; GGUF holds it 1-D (llama.cpp
            # creates it as {n_embd}), F32 like every 1-D tensor
            add('ffn_gate_inp_shexp', [D], 'shexp_gate', [m + 'shared_expert_gate.weight'])
            add('ffn_gate_shexp', [D, S], 'matrix', [m + 'shared_expert.gate_proj.weight'])
            add('ffn_up_shexp', [D, S], 'matrix', [m + 'shared_expert.up_proj.weight'])
            add('ffn_down_shexp', [S, D], 'matrix', [m + 'shared_expert.down_proj.weight'])
    T.append(Tensor('output_norm.weight', [D], 'norm', ['model.norm.weight'], 'output_norm'))
    if not hp.tied:
        T.append(Tensor('output.weight', [D, hp.n_vocab], 'matrix', ['lm_head.weight'], 'output'))
    return T


def n_params(tensors):
    n = 0
    for t in tensors:
        k = 1
        for d in t.ne:
            k *= d
        n += k
    return n


# --- GGUF hyper-parameter KVs ---------------------------------------------------

def gguf_kvs(hp):
    """[(key, type, value)] as convert_hf_to_gguf.py writes them for the
    config.json hf_config() produces (minus general.*, tokenizer.*)."""
    a, g = hp.arch, hp.arch.gguf
    U, F = gr.UINT32, gr.FLOAT32
    kv = [
        (g + '.block_count', U, hp.n_layer),
        (g + '.context_length', U, hp.n_ctx),
        (g + '.embedding_length', U, hp.n_embd),
        (g + '.feed_forward_length', U, hp.n_ff),
        (g + '.attention.head_count', U, hp.n_head),
        (g + '.attention.head_count_kv', U, hp.n_head_kv),
        (g + '.rope.freq_base', F, hp.rope_theta),
        (g + '.attention.layer_norm_rms_epsilon', F, hp.rms_eps),
    ]
    if a.name == 'mixtral':        # num_local_experts / num_experts_per_tok
        kv.append((g + '.expert_count', U, hp.n_expert))
    if a.moe:
        kv.append((g + '.expert_used_count', U, hp.n_expert_used))
    if head_dim_in_config(hp):
        kv.append((g + '.attention.key_length', U, hp.head_dim))
        kv.append((g + '.attention.value_length', U, hp.head_dim))
    if g == 'llama':
        kv.append((g + '.vocab_size', U, hp.n_vocab))
        kv.append((g + '.rope.dimension_count', U, hp.head_dim))
    if a.name in ('qwen2moe', 'qwen3moe', 'olmoe'):
        kv.append((g + '.expert_count', U, hp.n_expert))
    if a.name in ('qwen2moe', 'qwen3moe'):
        kv.append((g + '.expert_feed_forward_length', U, hp.n_ff_exp))
    if a.shexp:
        kv.append((g + '.expert_shared_feed_forward_length', U, hp.n_ff_shexp))
    return kv


def head_dim_in_config(hp):
    return hp.arch.head_dim_cfg or not hp.head_dim_default


# --- HF config.json ---------------------------------------------------------------

def hf_config(hp, vocab, torch_dtype):
    a = hp.arch
    c = {
        'architectures': [a.hf],
        'model_type': a.model_type,
        'vocab_size': hp.n_vocab,
        'hidden_size': hp.n_embd,
        'intermediate_size': hp.n_ff,
        'num_hidden_layers': hp.n_layer,
        'num_attention_heads': hp.n_head,
        'num_key_value_heads': hp.n_head_kv,
    }
    if head_dim_in_config(hp):
        c['head_dim'] = hp.head_dim
    c.update({
        'hidden_act': 'silu',
        'max_position_embeddings': hp.n_ctx,
        'initializer_range': 0.02,
        'rms_norm_eps': hp.rms_eps,
        'rope_theta': hp.rope_theta,
        'rope_scaling': None,
        'attention_dropout': 0.0,
        'use_cache': True,
        'tie_word_embeddings': hp.tied,
        'bos_token_id': vocab.bos,
        'eos_token_id': vocab.eos,
    })
    if vocab.pad is not None and a.name == 'olmoe':
        c['pad_token_id'] = vocab.pad
    if a.name == 'llama':
        c.update({'attention_bias': False, 'mlp_bias': False, 'pretraining_tp': 1})
    elif a.name == 'mixtral':
        c.update({'num_local_experts': hp.n_expert, 'num_experts_per_tok': hp.n_expert_used,
                  'output_router_logits': False, 'router_aux_loss_coef': 0.02,
                  'router_jitter_noise': 0.0, 'sliding_window': None})
    elif a.name in ('qwen2', 'qwen2moe', 'qwen3', 'qwen3moe'):
        c.update({'use_sliding_window': False, 'sliding_window': None,
                  'max_window_layers': hp.n_layer})
        if a.name in ('qwen3', 'qwen3moe'):
            c['attention_bias'] = False
        if a.moe:
            c.update({'num_experts': hp.n_expert, 'num_experts_per_tok': hp.n_expert_used,
                      'moe_intermediate_size': hp.n_ff_exp, 'norm_topk_prob': a.norm_topk,
                      'decoder_sparse_step': 1, 'mlp_only_layers': [],
                      'output_router_logits': False, 'router_aux_loss_coef': 0.001})
        if a.shexp:
            c['shared_expert_intermediate_size'] = hp.n_ff_shexp
    elif a.name == 'olmoe':
        c.update({'num_experts': hp.n_expert, 'num_experts_per_tok': hp.n_expert_used,
                  'norm_topk_prob': False, 'clip_qkv': None, 'attention_bias': False,
                  'output_router_logits': False, 'router_aux_loss_coef': 0.01})
    c['torch_dtype'] = torch_dtype
    c['transformers_version'] = TRANSFORMERS_VERSION
    return c


TOKENIZER_CLASS = {'llama': 'LlamaTokenizer', 'qwen': 'Qwen2Tokenizer',
                   'olmoe': 'GPTNeoXTokenizer'}
