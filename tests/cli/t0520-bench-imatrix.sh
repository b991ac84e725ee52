#!/bin/sh
# t0520-bench-imatrix.sh — moe-bench --imatrix against an importance matrix
# computed independently by the numpy reference (tests/ref/imatrix.py) over
# the same chunks of tokens: every tensor's mean squares agree within float
# tolerance, experts count only their routed tokens (their rows sum to
# tokens x experts used per layer); moe-quant --imatrix accepts the file;
# bad arguments and input give clear errors and leave no file.
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
"$BIN/moe-run" -m "$T/a.uth" --tokenize --add-special -f "$T/text.txt" >"$T/ids.txt"
ok $? "tokenize the text"
for chunks in all 2; do
	out="$T/im.dat"; [ $chunks = 2 ] && out="$T/im3.dat"
	$PYTHON3 - "$T" "$IMREF" $C $chunks "$out" <<'PY'
import json, os, struct, subprocess, sys
import numpy as np
T, imref, C, chunks, ours_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
b = open(T + '/a.uth', 'rb').read()
off, size = struct.unpack_from('<QQ', b, 64)
tk = json.loads(b[off:off + size]).get('tokenizer', {})
bos = tk.get('bos_id') if tk.get('add_bos') else None
ids = [int(t) for t in open(T + '/ids.txt').read().split()]
n = len(ids) // C if chunks == 'all' else int(chunks)
assert n >= 2, 'the text must give 2 chunks at least (%d tokens)' % len(ids)
toks = []
for c in range(n):
	ch = ids[c * C:(c + 1) * C]
	toks += ch[1:] if bos is not None else ch
open(T + '/toks.txt', 'w').write(' '.join(map(str, toks)))
ctx = C - 1 if bos is not None else C
subprocess.run([sys.executable, imref, T + '/a.uth', T + '/toks.txt', T + '/ref.dat',
		'--ctx', str(ctx)], check=True, stdout=subprocess.DEVNULL)

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
		check(sum(rows) == tokens * hp['n_expert_used'],
		      'blk.%d.%s: %d expert rows, want %d' % (L, role, sum(rows),
							  tokens * hp['n_expert_used']))
		check(all(0 < r < tokens for r in rows), 'blk.%d.%s: rows %s' % (L, role, rows))
check(O['blk.0.attn_q.weight'][0] == tokens, 'attn_q rows %d, want %d' % (O['blk.0.attn_q.weight'][0], tokens))
print('# %d tensors, %d tokens, worst relative error %.3g' % (len(O), tokens, worst))
sys.exit(1 if fail else 0)
PY
	ok $? "$chunks chunks: equal to tests/ref/imatrix.py's (mean squares, expert rows)"
done

# moe-quant takes it, and it changes the result
check "moe-quant --imatrix accepts it" -- "$BIN/moe-quant" -q -t q4_k_m --imatrix "$T/im.dat" "$T/a.uth" "$T/qi.uth"
check "moe-quant without it" -- "$BIN/moe-quant" -q -t q4_k_m "$T/a.uth" "$T/q.uth"
! cmp -s "$T/q.uth" "$T/qi.uth"; ok $? "the importance matrix changes the quantised model"

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
