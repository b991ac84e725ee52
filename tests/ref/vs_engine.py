#!/usr/bin/python3
# tests/ref/vs_engine.py — judge an engine's outputs by the reference.
#
#   vs_engine.py --model M.gguf --tokens "1 2 3" --tol TOL [--emulate LIST]
#                [--plain-tol PTOL] [--self-tol STOL] [--tapes]
#                [--eps EPS] LABEL=ENGINE_OUT[@BASE]...
#
# ENGINE_OUT is what tests/unit/engine-run prints: line 1 the logits of the
# last prompt position, line 2 the greedily generated ids.  For each, one
# TAP-style result line per check on stdout ("ok - LABEL: ..." or
# "not ok - LABEL: ..."; tests/cli/t0410-engine-ref.sh turns them into its
# own TAP lines):
#
#   logits  max |engine - ref| <= TOL * max |ref| at the last prompt
#           position, ref = model.py with --emulate LIST (ref.py's option:
#           act-quant, kv-f16)
#   greedy  every generated id is the reference's greedy choice given the
#           same prefix (the reference runs the prompt and the engine's ids
#           as one sequence), so the continuation is the reference's own;
#           where the reference's best two logits are within TOL * max
#           |logit| either is accepted (and the line says so)
#   exact   with --plain-tol: the logits within PTOL of the reference
#           without emulation (the mathematically exact model)
#   @BASE   the engine against itself: the logits within STOL (default
#           1e-4) of those of output BASE (another LABEL) and the same ids
#           (e.g. prefill in batches of different sizes)
#
# Rounding ties (actquant.py): with --tapes, each ENGINE_OUT has beside it
# ENGINE_OUT.tape, the engine's rounding decisions of that run
# (tests/unit/engine-run with ENGINE_RUN_TAPE), and the reference runs with
# an actquant.Oracle of it: where the reference's own value lies within EPS
# of a tie (relative to the block's or row's largest magnitude) and the
# engine rounded it the other way, the reference takes the engine's side;
# a disagreement anywhere else is a failure.  One more line per output:
#   tape    no disagreement away from a tie; every product row the
#           reference quantised found in the tape; the engine's floats
#           before each quantisation within EPS of the reference's
#           (relative to the block's largest magnitude: "noise", measured
#           below 2e-6; not judged when the tape has no cache rows: a
#           sliding window's rows were given back before engine-run could
#           save them); and few ties taken (MAX_TIES, MAX_TIE_RATE below):
#           an engine off by a small but systematic amount would disagree
#           near ties far more often
# Without --tapes the emulation is strict: a tie rounded the other way is
# a failure.
# Exit status: 0 all ok, 1 a check failed or an error, 2 usage.
import argparse
import hashlib
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import actquant  # noqa: E402
import load  # noqa: E402
import model as M  # noqa: E402


def parse(argv):
	p = argparse.ArgumentParser(prog='vs_engine.py')
	p.add_argument('--model', required=True)
	p.add_argument('--tokens', required=True)
	p.add_argument('--tol', type=float, required=True)
	p.add_argument('--emulate', default='')
	p.add_argument('--plain-tol', type=float, default=0.0)
	p.add_argument('--tapes', action='store_true',
		       help='ties: read ENGINE_OUT.tape, the engine\'s rounding decisions')
	p.add_argument('--eps', type=float, default=actquant.EPS,
		       help='ties: how close to a tie the reference\'s value must be '
		       '(relative to the block\'s largest magnitude)')
	p.add_argument('--self-tol', type=float, default=1e-4)
	p.add_argument('outputs', nargs='+', metavar='LABEL=ENGINE_OUT[@BASE]')
	a = p.parse_args(argv)
	a.emulate = [x for x in a.emulate.split(',') if x]
	for x in a.emulate:
		if x not in M.EMULATIONS:
			p.error('--emulate: unknown %s' % x)
	for o in a.outputs:
		if '=' not in o:
			p.error('%s: expected LABEL=FILE' % o)
	return a


def read_engine(path, n_vocab):
	with open(path, encoding='utf-8') as f:
		lines = f.read().split('\n')
	if len(lines) < 2:
		raise ValueError('%s: expected two lines (logits, greedy ids)' % path)
	logits = np.array([float(x) for x in lines[0].split()])
	ids = [int(x) for x in lines[1].split()]
	if logits.shape != (n_vocab,):
		raise ValueError('%s: %d logits, expected %d' % (path, logits.size, n_vocab))
	if any(not 0 <= t < n_vocab for t in ids):
		raise ValueError('%s: generated id out of range' % path)
	return logits, ids


class Verdict:
	"""How one reference run judges one engine output."""

	def __init__(self, logits, ids, L, P, tol):
		ref = L[P - 1]
		self.err = float(np.abs(logits - ref).max() / np.abs(ref).max())
		self.fail = None if self.err <= tol else P - 1    # first failing position
		self.mismatch = None                              # (step, engine id, ref id)
		self.near_ties = []                               # steps decided by a near-tie
		for s, t in enumerate(ids):
			row = L[P - 1 + s]
			best = int(np.argmax(row))
			if t == best:
				continue
			if row[best] - row[t] <= tol * np.abs(row).max():
				self.near_ties.append(s)
				continue
			self.mismatch = (s, t, best)
			if self.fail is None:
				self.fail = P - 1 + s
			break

	def ok(self):
		return self.fail is None


class Judge:
	def __init__(self, a, cfg, W, prompt):
		self.a, self.cfg, self.prompt = a, cfg, prompt
		self.m = getattr(cfg, 'model_class', M.Model)(cfg, W, a.emulate)
		self.runs = {}

	def judge(self, logits, ids, tape=None):
		"""(Verdict, Oracle or None) of the engine's output; the reference
		runs the prompt and the engine's ids as one sequence, with the
		tape's oracle if given (runs with the same tape bytes are shared)."""
		seq = tuple(self.prompt + ids[:-1])
		key = (seq, None)
		if tape is not None:
			with open(tape, 'rb') as f:
				key = (seq, hashlib.sha256(f.read()).hexdigest())
		if key not in self.runs:
			self.m.reset()
			self.m.tape = actquant.Oracle.read(tape, self.a.eps) \
				if tape is not None and self.m.emulate else None
			L = self.m.forward(list(seq))
			self.runs[key] = (L, self.m.tape)
		L, oracle = self.runs[key]
		return Verdict(logits, ids, L, len(self.prompt), self.a.tol), oracle


# Ties taken, at most: MAX_TIES + MAX_TIE_RATE x the elements (or Q8_0
# blocks) compared, per kind.  A flip needs the engine's float32 error to
# reach across the tie, so the rate is about that error over the rounding
# step.  Measured on t0410/t0412's models, every ISA: codes 3.7e-5 (a step
# is 1/127 of the block's largest magnitude), Q8_0 scales 1 of 844, F16
# cache 4.7e-3 (the tiny models' rows of 32 + 8 values, whose smallest
# elements have float16 steps below float32's error relative to the row).
# An engine off by 1e-6 of the row in every cache element would flip about
# 5% of them.
MAX_TIES = 4
MAX_TIE_RATE = {'code': 1e-3, 'scale': 2e-2, 'cache': 2e-2}


def tape_note(o):
	"""(the largest count of ties taken over the kinds, as a fraction of
	the most allowed, and a note of them): distinct elements; a row
	several products quantise counts once per product it was compared
	for."""
	kinds = {}
	for what, p, c, dist in {(w, p, c, d) for w, _, p, c, d in o.adopted}:
		kinds[what] = kinds.get(what, 0) + 1
	most = max([n / (MAX_TIES + MAX_TIE_RATE[k] * o.compared[k]) for k, n in kinds.items()] or
		   [0.0])
	n = sum(kinds.values())
	return most, '%d tie%s taken from the engine%s' % (
		n, '' if n == 1 else 's', ' (%s)' % ', '.join(
			'%s %d of %d' % (k, kinds[k], o.compared[k]) for k in sorted(kinds))
		if n else '')


def main(argv):
	a = parse(argv)
	try:
		prompt = [int(x) for x in a.tokens.replace(',', ' ').split()]
		cfg, W = load.load(a.model, np.float64)
		judge = Judge(a, cfg, W, prompt)
		plain = getattr(cfg, 'model_class', M.Model)(cfg, W).forward(prompt)[-1] \
			if a.plain_tol else None
	except (load.LoadError, ValueError, OSError) as e:
		print('vs_engine.py: %s' % e, file=sys.stderr)
		return 1
	em = '+'.join(a.emulate) or 'no'
	bad = 0
	got = {}

	def say(ok, msg):
		nonlocal bad
		print('%s - %s' % ('ok' if ok else 'not ok', msg))
		bad += not ok

	for o in a.outputs:
		label, path = o.split('=', 1)
		path, _, base = path.partition('@')
		try:
			logits, ids = read_engine(path, cfg.n_vocab)
		except (OSError, ValueError) as e:
			say(False, '%s: %s' % (label, e))
			continue
		got[label] = (logits, ids)
		if base:
			if base not in got:
				say(False, '%s: no output %s to compare with' % (label, base))
			else:
				bl, bi = got[base]
				serr = float(np.abs(logits - bl).max() / np.abs(bl).max())
				say(serr <= a.self_tol, '%s: logits within %g of max |logit| of %s '
				    '(%.3g)' % (label, a.self_tol, base, serr))
				say(ids == bi, '%s: same generated ids as %s' % (label, base))
		tape = None
		if a.tapes:
			tape = path + '.tape'
		try:
			v, oracle = judge.judge(logits, ids, tape)
		except (OSError, ValueError) as e:
			say(False, '%s: %s' % (label, e))
			continue
		note = ''
		if oracle is not None:
			rate, note = tape_note(oracle)
			wrong = sorted(set(oracle.wrong), key=lambda w: (w[2], str(w[1])))
			# the output matrix's rows before the last prompt position:
			# the engine computes no logits there, nothing reads them
			miss = sorted(m for m in oracle.missing if m[0] != 'cache' and not (
				m[0] in ('output.weight', 'token_embd.weight') and m[2] < len(prompt) - 1))
			# without the cache's rows (a sliding window's were given
			# back) its ties stay unresolved and move later floats more
			nocache = any(m[0] == 'cache' for m in oracle.missing)
			say(not wrong and not miss and rate <= 1 and (nocache or oracle.noise <= a.eps),
			    '%s: the engine\'s roundings are the reference\'s but for %s, each within '
			    '%g of the reference\'s value (%.2g of the most ties allowed); its '
			    'quantised floats within %.2g of the reference\'s (at most %g)%s%s%s' % (
				    label, note, a.eps, rate, oracle.noise, a.eps,
				    '; %d away from a tie, first: %s %s position %d element %d, '
				    '%.2g away' % ((len(wrong),) + wrong[0]) if wrong else '',
				    '; %d rows not in the tape, first %s' % (len(miss), miss[0])
				    if miss else '',
				    '; no cache rows in the tape (the reference rounds the cache '
				    'alone; the floats not judged)' if nocache else ''))
			note = ' (%s)' % note if oracle.adopted else ''
		say(v.fail != len(prompt) - 1 or v.err <= a.tol,
		    '%s: logits within %g of max |logit| of the reference with %s emulation '
		    '(%.3g)%s' % (label, a.tol, em, v.err, note))
		if v.mismatch is None:
			ties = ''
			if v.near_ties:
				ties = ' (steps %s: a near-tie of the reference)' % \
					','.join(str(s) for s in v.near_ties)
			say(True, '%s: each of the %d generated ids is the reference\'s greedy '
			    'choice%s' % (label, len(ids), ties))
		else:
			s, t, r = v.mismatch
			say(False, '%s: generated id %d is %d, the reference chooses %d'
			    % (label, s, t, r))
		if a.plain_tol:
			perr = float(np.abs(logits - plain).max() / np.abs(plain).max())
			say(perr <= a.plain_tol, '%s: logits within %g of max |logit| of the exact '
			    'reference (%.3g)' % (label, a.plain_tol, perr))
	return 1 if bad else 0


if __name__ == '__main__':
	sys.exit(main(sys.argv[1:]))
