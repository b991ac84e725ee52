#!/usr/bin/python3
# vocab-to-hf.py GGUF OUTDIR — write OUTDIR/tokenizer.json and
# OUTDIR/tokenizer_config.json for the vocabulary of a vocab-only GGUF, with
# scripts/gen-model's own converter (moegen.vocab), which shares no code with
# the C tokenizer: t-tokenizer checks that moe_vocab_data_from_hf on these
# files equals moe_vocab_data_from_gguf on the GGUF.
import json
import os
import sys

top = os.environ.get('top_srcdir') or os.path.join(os.path.dirname(__file__), '..', '..')
sys.path.insert(0, os.path.join(top, 'scripts'))
from moegen import vocab  # noqa: E402

v = vocab.from_gguf(sys.argv[1])
os.makedirs(sys.argv[2], exist_ok=True)
with open(os.path.join(sys.argv[2], 'tokenizer.json'), 'w', encoding='utf-8') as f:
	json.dump(v.tokenizer_json(), f, ensure_ascii=False)
with open(os.path.join(sys.argv[2], 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
	json.dump(v.tokenizer_config(4096, 'PreTrainedTokenizerFast'), f, ensure_ascii=False)
