#!/usr/bin/python3
# tests/ref/ref.py — the independent numpy reference: run a model on token ids.
#
#   ref.py --model M.gguf|SNAPSHOT_DIR (--tokens "1 2 3" | --prompt-ids-file F)
#          [--logits OUT.npy] [--logits-txt OUT] [--all-positions]
#          [--greedy N] [--stop-at-eos] [--dtype float64|float32] [--recompute]
#          [--emulate act-quant,kv-f16] [--mla absorbed|expanded] [-v]
#
# Architectures: llama, mixtral, qwen2, qwen2moe, qwen3, qwen3moe, olmoe
# (model.py) and deepseek2, gpt-oss, phimoe, granitemoe (arch_*.py), from
# GGUF or an HF snapshot.
#
# Loads every tensor decoded to --dtype (float64 by default), runs the prompt
# through the forward pass of model.py and writes the last position's logits
# (every position's with --all-positions: rows in order) as .npy or as text,
# one value per line (%.9g).  --greedy N prints the N greedily chosen next
# token ids on stdout, space-separated, on one line; --stop-at-eos stops
# before the model's EOS/EOT token (as an engine would, without printing it).
# Token ids are used as given: no BOS is added.
#
# --emulate LIST (comma separated) models the engine's specified numeric
# recipe on top of the exact forward pass: act-quant rounds the input row of
# every product with a quantised weight to the weight type's 8-bit activation
# format (Q8_0 / Q8_1 / Q8_K, actquant.py) first; kv-f16 rounds the keys and
# values to float16 as they enter the KV cache.  Default: neither (the
# mathematically exact model with the stored weights).  See tests/ref/README.
#
# --logits-txt of several positions writes them row after row.  Shares no code
# with the C engine (model.py holds the forward pass, load.py the loaders,
# quants.py the block decoders).  Exit status: 0 ok, 1 model or input error,
# 2 usage.
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True     # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import load  # noqa: E402
import model as M  # noqa: E402


def parse(argv):
	p = argparse.ArgumentParser(
		prog='ref.py',
		description='Independent numpy reference forward pass '
			    '(llama, mixtral, qwen2, qwen2moe, qwen3, qwen3moe, olmoe, deepseek2, '
			    'gpt-oss, phimoe, granitemoe).')
	p.add_argument('--model', required=True, help='GGUF file or HF snapshot directory')
	g = p.add_mutually_exclusive_group(required=True)
	g.add_argument('--tokens', help='prompt token ids, whitespace or comma separated')
	g.add_argument('--prompt-ids-file', help='file of prompt token ids')
	p.add_argument('--logits', help='write logits as .npy')
	p.add_argument('--logits-txt', help='write logits as text, one per line')
	p.add_argument('--all-positions', action='store_true',
		       help='logits of every prompt position (rows), not just the last')
	p.add_argument('--greedy', type=int, default=0, metavar='N',
		       help='print N greedily generated token ids')
	p.add_argument('--stop-at-eos', action='store_true',
		       help='stop generating at the EOS/EOT token (not printed)')
	p.add_argument('--dtype', default='float64', choices=['float64', 'float32'])
	p.add_argument('--recompute', action='store_true',
		       help='no KV cache: rerun the whole sequence for every generated token')
	p.add_argument('--mla', choices=['absorbed', 'expanded'], default=None,
		       help='deepseek2: attention through the latent (absorbed, default) or '
		       'with expanded keys and values (the same numbers)')
	p.add_argument('--emulate', default='', metavar='LIST',
		       help='engine arithmetic to model: act-quant, kv-f16 (comma separated)')
	p.add_argument('-v', '--verbose', action='store_true',
		       help='model summary and timing on stderr')
	a = p.parse_args(argv)
	if a.greedy < 0:
		p.error('--greedy must be >= 0')
	a.emulate = [x for x in a.emulate.replace(' ', ',').split(',') if x]
	bad = [x for x in a.emulate if x not in M.EMULATIONS]
	if bad:
		p.error('--emulate: unknown %s (known: %s)'
			% (', '.join(bad), ', '.join(M.EMULATIONS)))
	return a


def read_ids(a):
	if a.tokens is not None:
		text = a.tokens
	else:
		with open(a.prompt_ids_file, encoding='utf-8') as f:
			text = f.read()
	try:
		ids = [int(x) for x in text.replace(',', ' ').split()]
	except ValueError:
		raise load.LoadError('token ids must be integers: %r' % text[:80])
	if not ids:
		raise load.LoadError('empty prompt')
	return ids


def main(argv=None):
	a = parse(sys.argv[1:] if argv is None else argv)
	try:
		ids = read_ids(a)
		t0 = time.time()
		cfg, W = load.load(a.model, np.dtype(a.dtype))
		if a.verbose:
			print('ref: %s' % cfg.describe(), file=sys.stderr)
		kw = {}
		if a.mla:
			if cfg.arch != 'deepseek2':
				raise load.LoadError('--mla: %s has no latent attention' % cfg.arch)
			kw['mla'] = a.mla
		m = getattr(cfg, 'model_class', M.Model)(cfg, W, a.emulate, **kw)
		out = []
		if a.all_positions or not a.greedy:
			logits = m.forward(ids)
			if not a.all_positions:
				logits = logits[-1]
		if a.greedy:
			stop = set(cfg.eos) if a.stop_at_eos else set()
			first, out, _ = M.greedy(m, ids, a.greedy, stop, a.recompute)
			if not a.all_positions:
				logits = first
		t1 = time.time()
	except (load.LoadError, ValueError, OSError) as e:
		print('ref.py: %s' % e, file=sys.stderr)
		return 1
	if a.logits:
		np.save(a.logits, logits)
	if a.logits_txt:
		np.savetxt(a.logits_txt, np.atleast_1d(logits).reshape(-1), fmt='%.9g')
	if a.greedy:
		print(' '.join(str(t) for t in out))
	if a.verbose:
		print('ref: %d prompt + %d generated tokens, %.2f s (weights are decoded on '
		      'first use)' % (len(ids), len(out), t1 - t0), file=sys.stderr)
	return 0


if __name__ == '__main__':
	sys.exit(main())
