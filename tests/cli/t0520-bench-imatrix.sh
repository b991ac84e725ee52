#!/bin/sh
# t0520-bench-imatrix.sh — moe-bench --imatrix against an importance matrix
# computed independently by the numpy reference (tests/ref/imatrix.py) over
# the same chunks of tokens: every tensor's mean squares agree within float
# tolerance, experts count only their routed tokens (their rows sum to
# tokens x experts used per layer); moe-quant --imatrix accepts the file;
# bad arguments and input give clear errors and leave no file.  A deepseek2
# model too: its per-head attn_k_b / attn_v_b get one set of columns per head
# (llama.cpp's layout), which moe-quant applies head by head.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
BENCH="$BIN/moe-bench"
IMREF="$top_srcdir/tests/ref/imatrix.py"
C=16
[ -x "$BENCH" ] || skip_all "tools/moe-bench not built"

check "generate a tiny mixtral" -- $GEN --arch mixtral --format gguf --seed 7 --out "$T/a"
check "convert it" -- "$BIN/moe-convert" "$T/a.gguf" "$T/a.uth"

cat > "$T/text.txt" <<'TXT'
It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of
incredulity, it was the season of Light, it was the season of Darkness, it was
the spring of hope, it was the winter of despair.
TXT

check "--imatrix -f -c $C" -- "$BENCH" -m "$T/a.uth" --imatrix "$T/im.dat" -f "$T/text.txt" -c $C -t 2
"$BENCH" -m "$T/a.uth" --imatrix - -f "$T/text.txt" -c $C -t 2 >"$T/im2.dat"
ok $? "--imatrix - (standard output)"
cmp -s "$T/im.dat" "$T/im2.dat"; ok $? "standard output equals the file"
"$BENCH" -m "$T/a.uth" --imatrix="$T/im3.dat" -f "$T/text.txt" -c $C --chunks 2 -v 2>"$T/err3"
ok $? "--imatrix= --chunks 2 -v"
grep -q "2 chunks of $C tokens" "$T/err3"; ok $? "-v reports the chunks: $(tail -1 "$T/err3")"

# The reference over the same chunks: moe-bench puts BOS in place of each
# chunk's first token (when the tokenizer adds BOS), imatrix.py prepends it
# to windows of --ctx tokens, so it gets each chunk without its first token.
"$BIN/moe-run" -m "$T/a.uth" --tokenize --add-special -f "$T/text.txt" >"$T/a.ids"
ok $? "tokenize the text"
# against_ref MODEL CHUNKS OURS: the reference's importance matrix of
# MODEL.uth (from MODEL.gguf if it exists: the reference reads the second
# family of architectures from GGUF) over the same chunks, compared with OURS
against_ref() {
	$PYTHON3 - "$T" "$IMREF" $C $2 "$3" "$1" <<'PY'
import json, os, struct, subprocess, sys
import numpy as np
T, imref, C, chunks, ours_path, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
	sys.argv[4], sys.argv[5], sys.argv[6]
b = open('%s/%s.uth' % (T, name), 'rb').read()
off, size = struct.unpack_from('<QQ', b, 64)
tk = json.loads(b[off:off + size]).get('tokenizer', {})
bos = tk.get('bos_id') if tk.get('add_bos') else None
ids = [int(t) for t in open('%s/%s.ids' % (T, name)).read().split()]
n = len(ids) // C if chunks == 'all' else int(chunks)
assert n >= 2, 'the text must give 2 chunks at least (%d tokens)' % len(ids)
toks = []
for c in range(n):
	ch = ids[c * C:(c + 1) * C]
	toks += ch[1:] if bos is not None else ch
open(T + '/toks.txt', 'w').write(' '.join(map(str, toks)))
ctx = C - 1 if bos is not None else C
model = '%s/%s.gguf' % (T, name)
if not os.path.exists(model):
	model = '%s/%s.uth' % (T, name)
subprocess.run([sys.executable, imref, model, T + '/toks.txt', T + '/ref.dat', '--ctx',
		str(ctx), '--bos', 'none' if bos is None else str(bos)], check=True,
	       stdout=subprocess.DEVNULL)

def ours(path):
	d = open(path, 'rb').read()
	assert d[:8] == b'MOEIMTX1', 'magic'
	ver, ne = struct.unpack_from('<II', d, 8)
	assert ver == 1
	p, out = 16, {}
	for _ in range(ne):
		(nl,) = struct.unpack_from('<I', d, p); p += 4
		name = d[p:p + nl].decode(); p += nl
		nc, rows = struct.unpack_from('<IQ', d, p); p += 12
		s = np.frombuffer(d, '<f8', nc, p); p += 8 * nc
		out[name] = (rows, s / rows)
	assert p + 8 == len(d), 'trailer'
	return out

def legacy(path):
	d = open(path, 'rb').read()
	(ne,) = struct.unpack_from('<i', d, 0)
	p, out = 4, {}
	for _ in range(ne):
		(nl,) = struct.unpack_from('<i', d, p); p += 4
		name = d[p:p + nl].decode(); p += nl
		ncall, nv = struct.unpack_from('<ii', d, p); p += 8
		out[name] = np.frombuffer(d, '<f4', nv, p) / ncall; p += 4 * nv
	return out

O, R = ours(ours_path), legacy(T + '/ref.dat')
fail = 0
def check(cond, msg):
	global fail
	if not cond:
		fail += 1
		print('#   ' + msg)
missing = sorted(set(R) - set(O))
check(not missing, 'missing from ours: %s' % missing[:5])
extra = sorted(k for k in set(O) - set(R) if not k.endswith('ffn_gate_inp.weight'))
check(not extra, 'not in the reference: %s' % extra[:5])
worst = 0.0
for k in sorted(set(R) & set(O)):
	r, o = R[k], O[k][1]
	if r.shape != o.shape:
		check(False, '%s: %d columns, reference %d' % (k, o.size, r.size))
		continue
	err = float(np.max(np.abs(o - r)) / max(float(np.max(np.abs(r))), 1e-30))
	worst = max(worst, err)
	check(err < 2e-3, '%s: relative error %.3g' % (k, err))
# experts: only their tokens; per layer the rows of one role sum to tokens x k
hp = json.loads(b[off:off + size])['hparams']
tokens = n * C
for L in range(hp['n_layer']):
	for role in ('ffn_gate', 'ffn_up', 'ffn_down'):
		rows = [O[k][0] for k in O if k.startswith('blk.%d.%s.' % (L, role))
			and k.split('.')[3].isdigit()]
		if not rows and 'blk.%d.%s.weight' % (L, role) in O:
			continue                                # a dense layer
		check(sum(rows) == tokens * hp['n_expert_used'],
		      'blk.%d.%s: %d expert rows, want %d' % (L, role, sum(rows),
							  tokens * hp['n_expert_used']))
		check(all(0 < r < tokens for r in rows), 'blk.%d.%s: rows %s' % (L, role, rows))
q = 'blk.0.attn_q.weight' if 'blk.0.attn_q.weight' in O else 'blk.0.attn_kv_a_mqa.weight'
check(O[q][0] == tokens, '%s rows %d, want %d' % (q, O[q][0], tokens))
# per-head products: one set of columns per head, every head all tokens
for k in sorted(k for k in O if k.endswith(('attn_k_b.weight', 'attn_v_b.weight'))):
	check(O[k][0] == tokens, '%s rows %d, want %d' % (k, O[k][0], tokens))
	check(O[k][1].size % hp['n_head'] == 0 and O[k][1].size > hp['n_head'],
	      '%s: %d columns for %d heads' % (k, O[k][1].size, hp['n_head']))
heads = sum(k.endswith(('attn_k_b.weight', 'attn_v_b.weight')) for k in O)
print('# %d tensors (%d per-head), %d tokens, worst relative error %.3g'
      % (len(O), heads, tokens, worst))
sys.exit(1 if fail else 0)
PY
}
for chunks in all 2; do
	out="$T/im.dat"; [ $chunks = 2 ] && out="$T/im3.dat"
	against_ref a $chunks "$out"
	ok $? "$chunks chunks: equal to tests/ref/imatrix.py's (mean squares, expert rows)"
done

# moe-quant takes it, and it changes the result
check "moe-quant --imatrix accepts it" -- "$BIN/moe-quant" -q -t q4_k_m --imatrix "$T/im.dat" "$T/a.uth" "$T/qi.uth"
check "moe-quant without it" -- "$BIN/moe-quant" -q -t q4_k_m "$T/a.uth" "$T/q.uth"
! cmp -s "$T/q.uth" "$T/qi.uth"; ok $? "the importance matrix changes the quantised model"

# ---- deepseek2 (V2 form: low-rank queries): attn_k_b / attn_v_b per head
check "generate a tiny deepseek2-v2" -- $GEN --arch deepseek2-v2 --format gguf --seed 9 --out "$T/d"
check "convert it" -- "$BIN/moe-convert" "$T/d.gguf" "$T/d.uth"
check "deepseek2: --imatrix -f -c $C" -- "$BENCH" -m "$T/d.uth" --imatrix "$T/dim.dat" -f "$T/text.txt" -c $C -t 2
"$BIN/moe-run" -m "$T/d.uth" --tokenize --add-special -f "$T/text.txt" >"$T/d.ids"
ok $? "deepseek2: tokenize the text"
against_ref d all "$T/dim.dat"
ok $? "deepseek2: equal to tests/ref/imatrix.py's, attn_k_b / attn_v_b per head"
# moe-quant applies each head's importances to that head's rows: with a
# type that uses them (iq4_nl, blocks of 32: the tiny model's attn_v_b
# rows are 32 long; attn_k_b's, 16, are not quantised)
tt="--tensor-type attn_[kv]_b=iq4_nl"
check "deepseek2: moe-quant --imatrix" -- "$BIN/moe-quant" -q -t q4_k_m $tt --imatrix "$T/dim.dat" "$T/d.uth" "$T/dqi.uth"
check "deepseek2: moe-quant without it" -- "$BIN/moe-quant" -q -t q4_k_m $tt "$T/d.uth" "$T/dq.uth"
$PYTHON3 - "$T" "$top_srcdir/tests/ref" <<'PY'
import struct, sys
import numpy as np
T = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import quants
from quant_check import read_uth
A, Q, QI = (read_uth('%s/%s.uth' % (T, n)) for n in ('d', 'dq', 'dqi'))
d = open(T + '/dim.dat', 'rb').read()
im, p = {}, 16
for _ in range(struct.unpack_from('<II', d, 8)[1]):
	(nl,) = struct.unpack_from('<I', d, p); p += 4
	name = d[p:p + nl].decode(); p += nl
	nc, rows = struct.unpack_from('<IQ', d, p); p += 12
	im[name] = np.frombuffer(d, '<f8', nc, p) / rows; p += 8 * nc
def dec(U, k):
	dt, ne, raw = U[k]
	return quants.decode(np.frombuffer(raw, np.uint8), dt, int(np.prod(ne))).reshape(
		list(reversed(ne)))
fail, n = 0, 0
for k in sorted(k for k in A if k.endswith(('attn_k_b.weight', 'attn_v_b.weight'))):
	if A[k][1][0] % 32:
		continue                  # rows of 16: not iq4_nl (kept at a float type)
	w, q, qi = dec(A, k), dec(Q, k), dec(QI, k)
	imp = im[k].reshape(w.shape[0], 1, w.shape[2])        # one set per head
	changed = (Q[k][2] != QI[k][2])
	# weighted by each head's own importances, the imatrix result is at
	# least as close (summed over the tensor) as the unweighted one
	e, ei = (float((imp * (x - w) ** 2).sum()) for x in (q, qi))
	n += 1
	if not changed or ei > e:
		fail += 1
		print('#   %s: changed %s, weighted error %.4g with, %.4g without' % (k, changed, ei, e))
print('# %d per-head tensors quantised with their heads\' importances' % n)
sys.exit(1 if fail or not n else 0)
PY
ok $? "deepseek2: moe-quant uses the per-head importances (weighted error not worse)"

# ---- bad arguments and input: clear errors, no file left
mkdir -p "$T/out"
bad() { # STATUS PATTERN NAME -- ARGS...
	local st=$1 pat=$2 name=$3; shift 4
	"$BENCH" "$@" >"$T/bout" 2>"$T/berr"
	is "$?" "$st" "$name: exit $st"
	grep -q -- "$pat" "$T/berr"; ok $? "$name: message: $(head -1 "$T/berr")"
}
bad 2 "calibration text" "no -f" -- -m "$T/a.uth" --imatrix "$T/out/x.dat"
bad 2 "no model" "no -m" -- --imatrix "$T/out/x.dat" -f "$T/text.txt"
bad 2 "does not go with --imatrix" "--perplexity with it" -- -m "$T/a.uth" --imatrix "$T/out/x.dat" -f "$T/text.txt" --perplexity "$T/text.txt"
bad 2 "needs a value" "--imatrix without a value" -- -m "$T/a.uth" -f "$T/text.txt" --imatrix
bad 2 "-c" "-c 1" -- -m "$T/a.uth" --imatrix "$T/out/x.dat" -f "$T/text.txt" -c 1
bad 1 "less than one chunk" "text shorter than a chunk" -- -m "$T/a.uth" --imatrix "$T/out/x.dat" -f "$T/text.txt" -c 4096
bad 1 "nope.txt" "missing text file" -- -m "$T/a.uth" --imatrix "$T/out/x.dat" -f "$T/nope.txt"
bad 1 "nodir" "output in a missing directory" -- -m "$T/a.uth" --imatrix "$T/nodir/x.dat" -f "$T/text.txt" -c $C
[ -z "$(ls -A "$T/out")" ]; ok $? "no file left behind: $(ls -A "$T/out")"
check "--help lists --imatrix" -- sh -c '"$1" --help | grep -q -- "--imatrix=OUT"' sh "$BENCH"

done_testing
