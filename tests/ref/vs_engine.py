#!/usr/bin/python3
# tests/ref/vs_engine.py — judge an engine's outputs by the reference.
#
#   vs_engine.py --model M.gguf --tokens "1 2 3" --tol TOL [--emulate LIST]
#                [--plain-tol PTOL] [--margin M] [--min-step S] [--max-tries K]
#                [--self-tol STOL] LABEL=ENGINE_OUT[@BASE]...
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
# Rounding ties (see actquant.py): when a check fails under emulation, the
# emulated roundings that lay within M (relative to the row's scale) of a
# tie and whose two candidates are at least S apart (both relative to the
# row's scale) are tried the other way, nearest the tie first, at most K per
# round, in up to three rounds (a flip that brings the first failure later
# or shrinks the logit error is kept; where no single flip does, pairs of
# the --pairs nearest ties whose flip shrank the error are tried: two ties the
# engine both rounded the other way, neither enough alone — deepseek2's
# rope-key cache and a Q8_0 scale, t0412 — then chains: for each of the
# --pairs nearest flips, the --pairs nearest ties that are new in its run,
# a later rounding the first flip moved near its tie).  If some such set of flips passes
# every check, the result is ok and names the flips: the engine follows the
# emulated arithmetic except for roundings that float32 noise decided.
# Exit status: 0 all ok, 1 a check failed or an error, 2 usage.
import argparse
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
	p.add_argument('--margin', type=float, default=1e-5,
		       help='ties: roundings this close to the midpoint (relative to the row)')
	p.add_argument('--min-step', type=float, default=1e-4,
		       help='ties: only roundings whose two candidates are this far apart')
	p.add_argument('--max-tries', type=int, default=400)
	p.add_argument('--pairs', type=int, default=8,
		       help='ties: when no single flip makes progress, pairs of this many')
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

	def better_than(self, o):
		"""Progress for the search: the first failure later, or at the
		same place (the prompt) a clearly smaller logit error."""
		if self.ok() or o.fail is None:
			return self.ok()
		if self.fail != o.fail:
			return self.fail > o.fail
		return self.err < 0.7 * o.err


class Judge:
	def __init__(self, a, cfg, W, prompt):
		self.a, self.cfg, self.prompt = a, cfg, prompt
		self.m = getattr(cfg, 'model_class', M.Model)(cfg, W, a.emulate)
		self.runs = {}

	def run(self, seq, flips=(), margin=0.0):
		"""(logits of every position of seq, ties of the run or None) with
		the given roundings flipped; with margin, the ties are recorded."""
		key = (tuple(seq), tuple(flips), margin)
		if key not in self.runs:
			self.m.reset()
			self.m.tape = actquant.Tape(margin, flips, self.a.min_step) \
				if self.m.emulate else None
			L = self.m.forward(seq)
			near = sorted(self.m.tape.near) if margin else None
			self.runs[key] = (L, near)
		return self.runs[key]

	def verdict(self, logits, ids, flips, upto=None):
		"""Verdict of the run with these flips over positions <= upto
		(all if None): only those need computing."""
		P = len(self.prompt)
		n = len(ids) if upto is None else upto - P + 2
		L = self.run(self.prompt + ids[:n - 1], flips)[0]
		return Verdict(logits, ids[:n], L, P, self.a.tol)

	def judge(self, logits, ids):
		"""(Verdict, the flips that made it pass or [])."""
		a = self.a
		seq = self.prompt + ids[:-1]
		L = self.run(seq)[0]
		v = Verdict(logits, ids, L, len(self.prompt), a.tol)
		if v.ok() or not self.m.emulate:
			return v, []
		base, flips, used = v, [], []
		for _ in range(3):
			# the ties of the run as it stands (a flip moves later ones),
			# up to the first failure (later ones cannot cause it)
			near = self.run(seq[:v.fail + 1], flips, a.margin)[1]
			cands = [c for c in near if c[1] not in flips][:a.max_tries]
			best, some = None, []
			for c in cands:
				f = flips + [c[1]]
				w = self.verdict(logits, ids, f, v.fail)
				if w.fail is None:              # fixed up to the old failure
					w = self.verdict(logits, ids, f)
					if w.ok():
						return w, used + [c]
				if w.better_than(v) and (best is None or w.better_than(best[0])):
					best = (w, [c])
				if w.fail == v.fail and w.err < v.err:
					some.append((w.err, len(some), c))
			if best is None:
				# two independent ties the engine both rounded the other
				# way, neither enough alone: pairs of the singles that
				# shrank the error, nearest their ties first (float32
				# noise decides the nearest), at most --pairs of them
				some = [c for _, _, c in some[:a.pairs]]
				for i, c in enumerate(some):
					for d in some[i + 1:]:
						f = flips + [c[1], d[1]]
						w = self.verdict(logits, ids, f, v.fail)
						if w.fail is None:
							w = self.verdict(logits, ids, f)
							if w.ok():
								return w, used + [c, d]
						if w.better_than(v) and (best is None or
									 w.better_than(best[0])):
							best = (w, [c, d])
			if best is None:
				# a chain: a flip moves a later rounding near its tie
				# (the engine rounded both differently); the ties new
				# in the run of each of the --pairs nearest flips
				known = {c[1] for c in near}
				for c in cands[:a.pairs]:
					f = flips + [c[1]]
					after = self.run(seq[:v.fail + 1], f, a.margin)[1]
					new = [d for d in after if d[1] not in known][:a.pairs]
					for d in new:
						w = self.verdict(logits, ids, f + [d[1]], v.fail)
						if w.fail is None:
							w = self.verdict(logits, ids, f + [d[1]])
							if w.ok():
								return w, used + [c, d]
						if w.better_than(v) and (best is None or
									 w.better_than(best[0])):
							best = (w, [c, d])
			if best is None:
				break
			v, cs = best
			flips += [c[1] for c in cs]
			used += cs
		return base, []


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
	seen, got = {}, {}

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
		key = (logits.tobytes(), tuple(ids))
		if key not in seen:
			seen[key] = judge.judge(logits, ids)
		v, flips = seen[key]
		note = ''
		if flips:
			note = ' (after rounding %d tie%s the other way, as float32 noise ' \
				'may: %s)' % (len(flips), 's' if len(flips) > 1 else '',
				'; '.join('%s position %d element %d, %s, %.2g from the tie'
					  % (c[1] + (c[3], c[0])) for c in flips))
		say(v.fail != len(prompt) - 1 or v.err <= a.tol,
		    '%s: logits within %g of max |logit| of the reference with %s emulation '
		    '(%.3g)%s' % (label, a.tol, em, v.err, note))
		if v.mismatch is None:
			ties = ''
			if v.near_ties:
				ties = ' (steps %s: a near-tie of the reference)' % \
					','.join(str(s) for s in v.near_ties)
			say(True, '%s: each of the %d generated ids is the reference\'s greedy '
			    'choice%s%s' % (label, len(ids), ties, note))
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
