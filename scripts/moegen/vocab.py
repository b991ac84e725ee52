# moegen/vocab.py — tokenizer vocabularies for generated models, in both
# ecosystems' forms: GGUF tokenizer.* KVs and HF tokenizer.json /
# tokenizer_config.json.
#
# Two sources:
#  - synthetic: a small BPE vocabulary trained (deterministically) on a short
#    built-in English text, SentencePiece style (<0xNN> byte fallback, '▁' for
#    spaces; GGUF model "llama") or GPT-2 byte-level style (GGUF model "gpt2");
#  - a vocab-only GGUF (e.g. ../shared/vocab/ggml-vocab-llama-spm.gguf): its
#    tokenizer KVs are copied verbatim, and the HF files are derived from them.
import re
from collections import Counter

from . import reader as gr

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = '\u2581'   # '▁'

CORPUS = """\
The quick brown fox jumps over the lazy dog while the small cat sleeps in the warm sun.
A model reads the text one token at a time, and every token is a number in a table.
Experts in a mixture share the work: the router picks two of them for each token and
the others rest. When the weights are random the answers are noise, but the numbers
still have to match between the two files. Test the reader, test the writer, and then
test them again with another seed: 1, 2, 3, 42, 100, 2024. Small models run fast; large
models need memory, and memory is slow. The river flows under the old stone bridge and
the children watch the boats go by. She said: "It is there, in the third row of the
second table." We write the header first, then the data, and we never read a byte twice.
"""

DEFAULT_TEMPLATES = {
    # Mistral / Llama-2 [INST] style
    'inst': (
        "{{ bos_token }}{% for message in messages %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
        "{% endif %}{% endfor %}"),
    # ChatML (Qwen)
    'chatml': (
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    # Tulu (OLMo / OLMoE instruct)
    'tulu': (
        "{{ bos_token }}{% for message in messages %}"
        "{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '\\n' }}"
        "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
        "{% elif message['role'] == 'assistant' %}"
        "{{ '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}{% endif %}"
        "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
        "{% endfor %}"),
}

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


class Vocab:
    """One tokenizer. style is 'spm' (GGUF model "llama") or 'gpt2'."""

    def __init__(self):
        self.style = 'spm'
        self.pre = 'default'
        self.tokens = []
        self.types = []
        self.scores = None         # list of float (spm) or None
        self.merges = None         # list of "a b" (gpt2) or None
        self.bos = self.eos = self.unk = self.pad = None
        self.add_bos = True
        self.add_eos = False
        self.add_space_prefix = None
        self.chat_template = None
        self.source_kvs = None     # [(key, vtype, value)] copied from a vocab GGUF
        self.hf_merges = None      # merges for tokenizer.json (spm: derived)

    def __len__(self):
        return len(self.tokens)

    def token(self, i):
        return None if i is None else self.tokens[i]

    # --- GGUF side ---
    def gguf_kvs(self):
        """[(key, gguf value type, value)] of the tokenizer KVs."""
        if self.source_kvs is not None:
            kvs = list(self.source_kvs)
            if self.chat_template is not None and \
                    not any(k == 'tokenizer.chat_template' for k, _, _ in kvs):
                kvs.append(('tokenizer.chat_template', gr.STRING, self.chat_template))
            return kvs
        kvs = [
            ('tokenizer.ggml.model', gr.STRING, 'llama' if self.style == 'spm' else 'gpt2'),
            ('tokenizer.ggml.pre', gr.STRING, self.pre),
            ('tokenizer.ggml.tokens', (gr.ARRAY, gr.STRING), self.tokens),
        ]
        if self.scores is not None:
            kvs.append(('tokenizer.ggml.scores', (gr.ARRAY, gr.FLOAT32), self.scores))
        kvs.append(('tokenizer.ggml.token_type', (gr.ARRAY, gr.INT32), self.types))
        if self.merges is not None:
            kvs.append(('tokenizer.ggml.merges', (gr.ARRAY, gr.STRING), self.merges))
        for key, v in (('bos_token_id', self.bos), ('eos_token_id', self.eos),
                       ('unknown_token_id', self.unk), ('padding_token_id', self.pad)):
            if v is not None:
                kvs.append(('tokenizer.ggml.' + key, gr.UINT32, v))
        kvs.append(('tokenizer.ggml.add_bos_token', gr.BOOL, self.add_bos))
        kvs.append(('tokenizer.ggml.add_eos_token', gr.BOOL, self.add_eos))
        if self.add_space_prefix is not None:
            kvs.append(('tokenizer.ggml.add_space_prefix', gr.BOOL, self.add_space_prefix))
        if self.chat_template is not None:
            kvs.append(('tokenizer.chat_template', gr.STRING, self.chat_template))
        return kvs

    # --- HF side ---
    def _special(self, i):
        return self.types[i] in (CONTROL, UNKNOWN)

    def _added_tokens(self):
        out = []
        for i, t in enumerate(self.types):
            if t in (CONTROL, UNKNOWN, USER_DEFINED):
                out.append({'id': i, 'content': self.tokens[i], 'single_word': False,
                            'lstrip': False, 'rstrip': False,
                            'normalized': t == USER_DEFINED and self.style == 'spm',
                            'special': t != USER_DEFINED})
        return out

    def tokenizer_json(self):
        vocab = {}
        for i, t in enumerate(self.tokens):
            vocab.setdefault(t, i)
        merges = self.hf_merges if self.hf_merges is not None else (self.merges or [])
        added = self._added_tokens()
        if self.style == 'spm':
            prefix = self.add_space_prefix if self.add_space_prefix is not None else True
            norms = []
            if prefix:
                norms.append({'type': 'Prepend', 'prepend': SPACE})
            norms.append({'type': 'Replace', 'pattern': {'String': ' '}, 'content': SPACE})
            decs = [{'type': 'Replace', 'pattern': {'String': SPACE}, 'content': ' '},
                    {'type': 'ByteFallback'}, {'type': 'Fuse'}]
            if prefix:
                decs.append({'type': 'Strip', 'content': ' ', 'start': 1, 'stop': 0})
            model = {'type': 'BPE', 'dropout': None, 'unk_token': self.token(self.unk),
                     'continuing_subword_prefix': None, 'end_of_word_suffix': None,
                     'fuse_unk': True, 'byte_fallback': True, 'ignore_merges': False,
                     'vocab': vocab, 'merges': merges}
            return {'version': '1.0', 'truncation': None, 'padding': None,
                    'added_tokens': added,
                    'normalizer': {'type': 'Sequence', 'normalizers': norms},
                    'pre_tokenizer': None,
                    'post_processor': self._template_processing(),
                    'decoder': {'type': 'Sequence', 'decoders': decs},
                    'model': model}
        bl = {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': False,
              'use_regex': False}
        if self.pre == 'qwen2':
            pre = {'type': 'Sequence', 'pretokenizers': [
                {'type': 'Split', 'pattern': {'Regex': QWEN2_REGEX}, 'behavior': 'Isolated',
                 'invert': False}, bl]}
            norm = {'type': 'NFC'}
        else:
            pre = dict(bl, trim_offsets=True, use_regex=True)
            norm = None
        model = {'type': 'BPE', 'dropout': None, 'unk_token': None,
                 'continuing_subword_prefix': '', 'end_of_word_suffix': '', 'fuse_unk': False,
                 'byte_fallback': False, 'ignore_merges': False, 'vocab': vocab, 'merges': merges}
        post = self._template_processing() if self.add_bos or self.add_eos else dict(bl)
        return {'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': added,
                'normalizer': norm, 'pre_tokenizer': pre, 'post_processor': post,
                'decoder': dict(bl), 'model': model}

    def _template_processing(self):
        single, pair, special = [], [], {}
        if self.add_bos and self.bos is not None:
            b = self.tokens[self.bos]
            single.append({'SpecialToken': {'id': b, 'type_id': 0}})
            pair.append({'SpecialToken': {'id': b, 'type_id': 0}})
            special[b] = {'id': b, 'ids': [self.bos], 'tokens': [b]}
        single.append({'Sequence': {'id': 'A', 'type_id': 0}})
        pair.append({'Sequence': {'id': 'A', 'type_id': 0}})
        if self.add_eos and self.eos is not None:
            e = self.tokens[self.eos]
            single.append({'SpecialToken': {'id': e, 'type_id': 0}})
            pair.append({'SpecialToken': {'id': e, 'type_id': 0}})
            special[e] = {'id': e, 'ids': [self.eos], 'tokens': [e]}
        if self.add_bos and self.bos is not None:
            pair.append({'SpecialToken': {'id': self.tokens[self.bos], 'type_id': 1}})
        pair.append({'Sequence': {'id': 'B', 'type_id': 1}})
        return {'type': 'TemplateProcessing', 'single': single, 'pair': pair,
                'special_tokens': special}

    def tokenizer_config(self, n_ctx, tokenizer_class):
        dec = {}
        for a in self._added_tokens():
            d = dict(a)
            dec[str(d.pop('id'))] = d
        cfg = {
            'add_bos_token': self.add_bos,
            'add_eos_token': self.add_eos,
            'added_tokens_decoder': dec,
            'bos_token': self.token(self.bos),
            'eos_token': self.token(self.eos),
            'pad_token': self.token(self.pad),
            'unk_token': self.token(self.unk),
            'clean_up_tokenization_spaces': False,
            'model_max_length': n_ctx,
            'tokenizer_class': tokenizer_class,
        }
        if self.style == 'spm':
            cfg['legacy'] = True
            cfg['sp_model_kwargs'] = {}
            cfg['spaces_between_special_tokens'] = False
        if self.chat_template is not None:
            cfg['chat_template'] = self.chat_template
        return cfg


# --- byte-level alphabet (GPT-2) ----------------------------------------------

def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map, in its id order."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


# --- BPE training on the built-in text ---------------------------------------

def _train(words, n_new, vocab, fill_right):
    """Greedy BPE: merge the most frequent adjacent pair (ties: smallest pair)
    until n_new new tokens exist.  words: Counter of symbol tuples.  When the
    text has no pairs left, keep inventing merges (existing token + a base
    symbol) so any vocabulary size can be reached; those never fire on the
    built-in text but are valid merges.  Returns (merges, new_tokens)."""
    merges, new = [], []
    words = dict(words)
    while len(new) < n_new:
        pairs = Counter()
        for w, f in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += f
        if not pairs:
            break
        a, b = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        ab = a + b
        merges.append((a, b))
        if ab not in vocab:
            vocab.add(ab)
            new.append(ab)
        nw = {}
        for w, f in words.items():
            if len(w) < 2:
                continue
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(ab)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            if len(out) > 1:
                nw[tuple(out)] = nw.get(tuple(out), 0) + f
        words = nw
    k = 0
    pool = list(new)
    while len(new) < n_new:
        if not pool:
            pool = list(fill_right)
        a = pool[k % len(pool)]
        b = fill_right[(k // len(pool)) % len(fill_right)]
        k += 1
        if a + b in vocab:
            if k > 50 * (n_new + len(fill_right)) ** 2:
                raise ValueError('cannot invent enough merges')
            continue
        merges.append((a, b))
        vocab.add(a + b)
        new.append(a + b)
        pool.append(a + b)
    return merges, new


def synth_spm(n_vocab):
    """SentencePiece-style BPE vocab: <unk> <s> </s>, 256 <0xNN>, merged
    pieces in merge order, then the single characters.  Scores are -(id - 259)
    for normal pieces, as in Llama's vocabulary."""
    text = SPACE + CORPUS.replace('\n', ' ').replace(' ', SPACE)
    words = Counter(tuple(w) for w in re.findall(SPACE + '?[^' + SPACE + ']+', text))
    chars = Counter()
    for w, f in words.items():
        for c in w:
            chars[c] += f
    charlist = [c for c, _ in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))]
    base = 3 + 256
    n_new = n_vocab - base - len(charlist)
    if n_new < 0:
        raise ValueError('--n-vocab %d is too small for a synthetic spm vocab (min %d)'
                         % (n_vocab, base + len(charlist)))
    letters = [c for c in charlist if c.isalpha()]
    merges, new = _train(words, n_new, set(charlist), letters)
    v = Vocab()
    v.style, v.pre = 'spm', 'default'
    v.tokens = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)] + new + charlist
    v.types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * (len(new) + len(charlist))
    v.scores = [0.0] * base + [-float(i) for i in range(len(new) + len(charlist))]
    v.unk, v.bos, v.eos = 0, 1, 2
    v.add_bos, v.add_eos, v.add_space_prefix = True, False, True
    v.hf_merges = ['%s %s' % m for m in merges]
    return v


def synth_gpt2(n_vocab, specials, pre):
    """Byte-level BPE vocab: the 256 byte characters (GPT-2 order), merged
    tokens in merge order, then the special tokens."""
    b2u = dict(bytes_to_unicode())
    pieces = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+",
                        CORPUS)
    words = Counter(tuple(b2u[b] for b in p.encode('utf-8')) for p in pieces)
    alphabet = [c for _, c in bytes_to_unicode()]
    n_new = n_vocab - 256 - len(specials)
    if n_new < 0:
        raise ValueError('--n-vocab %d is too small for a synthetic byte-level vocab (min %d)'
                         % (n_vocab, 256 + len(specials)))
    letters = [c for c in alphabet if c.isalpha() and c.isascii()]
    merges, new = _train(words, n_new, set(alphabet), letters)
    v = Vocab()
    v.style, v.pre = 'gpt2', pre
    v.tokens = alphabet + new + list(specials)
    v.types = [NORMAL] * (256 + len(new)) + [CONTROL] * len(specials)
    v.merges = ['%s %s' % m for m in merges]
    v.add_bos, v.add_eos = False, False
    return v


def synthetic(family, n_vocab):
    """Default vocabulary for a model family: 'llama' (spm), 'qwen', 'olmoe'."""
    if family == 'llama':
        v = synth_spm(n_vocab)
        v.chat_template = DEFAULT_TEMPLATES['inst']
        return v
    if family == 'qwen':
        v = synth_gpt2(n_vocab, ['<|endoftext|>', '<|im_start|>', '<|im_end|>'], 'qwen2')
        n = len(v.tokens)
        v.bos, v.eos, v.pad = n - 3, n - 1, n - 3
        v.chat_template = DEFAULT_TEMPLATES['chatml']
        return v
    v = synth_gpt2(n_vocab, ['<|endoftext|>', '<|padding|>'], 'olmo')
    n = len(v.tokens)
    v.bos, v.eos, v.pad = n - 2, n - 2, n - 1
    v.chat_template = DEFAULT_TEMPLATES['tulu']
    return v


# --- vocab-only GGUF ------------------------------------------------------------

def spm_merges(tokens, scores, types):
    """Merges for an HF BPE tokenizer equivalent to a SentencePiece BPE vocab:
    every split of a normal piece into two pieces of the vocab, ordered by the
    merged piece's score (best first), then by the ids of the parts."""
    ids = {}
    for i, t in enumerate(tokens):
        ids.setdefault(t, i)
    found = []
    for i, t in enumerate(tokens):
        if types[i] != NORMAL or len(t) < 2:
            continue
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            ia, ib = ids.get(a), ids.get(b)
            if ia is not None and ib is not None and types[ia] == NORMAL and \
                    types[ib] == NORMAL:
                found.append((-scores[i], i, ia, ib, a, b))
    found.sort()
    return ['%s %s' % (f[4], f[5]) for f in found]


def from_gguf(path):
    r = gr.GGUFReader(path)
    kv = r.kv
    if 'tokenizer.ggml.tokens' not in kv:
        raise ValueError('%s: no tokenizer.ggml.tokens' % path)
    v = Vocab()
    model = kv.get('tokenizer.ggml.model', 'llama')
    if model not in ('llama', 'gpt2'):
        raise ValueError('%s: tokenizer model %r not supported (llama or gpt2)' % (path, model))
    v.style = 'spm' if model == 'llama' else 'gpt2'
    v.pre = kv.get('tokenizer.ggml.pre', 'default')
    v.tokens = list(kv['tokenizer.ggml.tokens'])
    n = len(v.tokens)
    tt = kv.get('tokenizer.ggml.token_type')
    v.types = [int(x) for x in tt] if tt is not None else [NORMAL] * n
    sc = kv.get('tokenizer.ggml.scores')
    v.scores = [float(x) for x in sc] if sc is not None else None
    v.merges = list(kv['tokenizer.ggml.merges']) if 'tokenizer.ggml.merges' in kv else None
    v.bos = kv.get('tokenizer.ggml.bos_token_id')
    v.eos = kv.get('tokenizer.ggml.eos_token_id')
    v.unk = kv.get('tokenizer.ggml.unknown_token_id')
    v.pad = kv.get('tokenizer.ggml.padding_token_id')
    for name in ('bos', 'eos', 'unk', 'pad'):
        i = getattr(v, name)
        if i is not None and not 0 <= i < n:
            raise ValueError('%s: %s token id %d out of range' % (path, name, i))
    v.add_bos = kv.get('tokenizer.ggml.add_bos_token', v.style == 'spm')
    v.add_eos = kv.get('tokenizer.ggml.add_eos_token', False)
    v.add_space_prefix = kv.get('tokenizer.ggml.add_space_prefix',
                                True if v.style == 'spm' else None)
    v.chat_template = kv.get('tokenizer.chat_template')
    v.source_kvs = [(k, r.kv_type[k], kv[k]) for k in kv if k.startswith('tokenizer.')]
    if v.style == 'spm':
        scores = v.scores if v.scores is not None else [-float(i) for i in range(n)]
        v.hf_merges = spm_merges(v.tokens, scores, v.types)
    r.close()
    return v
