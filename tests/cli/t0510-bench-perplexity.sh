#!/bin/sh
# t0510-bench-perplexity.sh — moe-bench --perplexity against a value
# computed independently: the numpy reference's logits for each chunk
# (BOS in place of its first token) scored with llama-perplexity's method
# in Python; the KLD file (--kl-base) and --kl: a model against its own base
# gives KL 0 and 100% agreement, a different model the KL-divergence the
# reference's logits give; a damaged base is refused; expert statistics over
# a text and over a generation count every token.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
BENCH="$BIN/moe-bench"
REF="$top_srcdir/tests/ref/ref.py"
C=16

check "generate a tiny mixtral" -- $GEN --arch mixtral --format gguf --seed 5 --out "$T/a"
check "convert it" -- "$BIN/moe-convert" "$T/a.gguf" "$T/a.uth"
check "another (seed 6)" -- $GEN --arch mixtral --format gguf --seed 6 --out "$T/b"
check "convert it" -- "$BIN/moe-convert" "$T/b.gguf" "$T/b.uth"

cat > "$T/text.txt" <<'EOF'
It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of
incredulity, it was the season of Light, it was the season of Darkness.
EOF

# The text's tokens as llama-perplexity takes them (BOS/EOS as the tokenizer
# adds them, special-token text not parsed).
"$BIN/moe-run" -m "$T/a.uth" --tokenize --add-special -f "$T/text.txt" > "$T/ids.txt"
ok $? "tokenize the text"
"$BENCH" -m "$T/a.uth" --perplexity "$T/text.txt" -c $C > "$T/ppl.md"; ok $? "--perplexity -c $C"
"$BENCH" -m "$T/a.uth" --perplexity "$T/text.txt" -c $C --chunks 3 -o json > "$T/ppl3.json"
ok $? "--perplexity --chunks 3 -o json"

# The reference: every chunk through ref.py, scored in Python.
$PYTHON3 - "$T" "$REF" "$top_srcdir/scripts" $C <<'PY'
import json, math, os, re, subprocess, sys
import numpy as np
T, ref, scripts, c = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, scripts)
from moegen.reader import GGUFReader

def ref_logits(model, ids):
    out = os.path.join(T, 'l.txt')
    subprocess.run([sys.executable, ref, '--model', model, '--tokens', ' '.join(map(str, ids)),
                    '--logits-txt', out, '--all-positions'], check=True)
    v = np.loadtxt(out, dtype=np.float64)
    return v.reshape(len(ids), -1)

def log_softmax(row):
    m = row.max()
    return row - (m + math.log(np.exp(row - m).sum()))

g = GGUFReader(os.path.join(T, 'a.gguf'))
bos = g.kv['tokenizer.ggml.bos_token_id']
add_bos = bool(g.kv.get('tokenizer.ggml.add_bos_token', True))
ids = [int(x) for x in open(os.path.join(T, 'ids.txt')).read().split()]
n_chunks = len(ids) // c
assert len(ids) >= 2 * c and n_chunks >= 3, (len(ids), n_chunks)
first = c // 2
nll, nll2, count, running = 0.0, 0.0, 0, []
lp = {'a': [], 'b': []}   # per scored token: log-probs of both models
for k in range(n_chunks):
    chunk = ids[k * c:(k + 1) * c]
    inp = ([bos] if add_bos else chunk[:1]) + chunk[1:]
    for name in ('a', 'b'):
        L = ref_logits(os.path.join(T, name + '.gguf'), inp)
        for j in range(first, c - 1):
            lp[name].append((log_softmax(L[j]), chunk[j + 1]))
    for row, nxt in lp['a'][-(c - 1 - first):]:
        v = -row[nxt]
        nll += v; nll2 += v * v; count += 1
    running.append(math.exp(nll / count))
ppl = math.exp(nll / count)
var = nll2 / count - (nll / count) ** 2
err = ppl * math.sqrt(var / (count - 1))

md = open(os.path.join(T, 'ppl.md')).read()
m = re.search(r'^perplexity: ([0-9.]+) \+/- ([0-9.]+)$', md, re.M)
assert m, md
got, got_err = float(m.group(1)), float(m.group(2))
assert abs(got - ppl) <= 1e-3 * ppl, ('perplexity', got, ppl)
assert abs(got_err - err) <= 1e-2 * err, ('error', got_err, err)
vals = [float(x) for x in re.findall(r'\[\d+\]([0-9.]+),', md)]
assert len(vals) == n_chunks and all(abs(a - b) <= 1e-3 * b for a, b in zip(vals, running)), (vals, running)
j3 = json.load(open(os.path.join(T, 'ppl3.json')))[0]
assert j3['n_chunks'] == 3 and j3['n_ctx'] == c and j3['n_scored'] == 3 * (c - 1 - first)
assert abs(j3['ppl'] - running[2]) <= 1e-3 * running[2]

# KL(a || b) and friends from the reference's log-probabilities
kl = [float((np.exp(pa) * (pa - pb)).sum()) for (pa, _), (pb, _) in zip(lp['a'], lp['b'])]
same = [int(pa.argmax() == pb.argmax()) for (pa, _), (pb, _) in zip(lp['a'], lp['b'])]
ratio = math.exp(sum(-pb[n] + pa[n] for (pa, n), (pb, _) in zip(lp['a'], lp['b'])) / len(kl))
json.dump({'kld': sum(kl) / len(kl), 'same_top': sum(same) / len(same), 'ppl_ratio': ratio,
           'ppl_a': ppl, 'n': len(kl), 'n_chunks': n_chunks},
          open(os.path.join(T, 'ref-kl.json'), 'w'))
PY
ok $? "perplexity, its error and the running values equal the numpy reference's (llama-perplexity's method)"

# KLD file: save the base, compare a model with itself and with another.
"$BENCH" -m "$T/a.uth" --perplexity "$T/text.txt" -c $C --kl-base "$T/a.kld" > /dev/null
ok $? "--kl-base writes the base"
$PYTHON3 - "$T/a.kld" "$T/ref-kl.json" $C <<'PY'
import json, os, struct, sys
path, c = sys.argv[1], int(sys.argv[3])
r = json.load(open(sys.argv[2]))
h = open(path, 'rb').read(128)
magic, ver, hs, nv, n_ctx, n_chunks, first, bos, rs, nt, nr = struct.unpack('<8sIIIIIIiIQQ', h[:56])
assert magic == b'MOEKLD\0\0' and ver == 1 and hs == 128 and n_ctx == c and first == c // 2
assert n_chunks == r['n_chunks'] and nr == r['n'] and nt == n_chunks * c and rs == 16 + 2 * nv
assert os.path.getsize(path) == 128 + 4 * nt + rs * nr + 8
PY
ok $? "the KLD file's header and size follow moe-bench(1)"
"$BENCH" -m "$T/a.uth" --kl "$T/a.kld" -o json > "$T/self.json"; ok $? "--kl: a model against its own base"
$PYTHON3 - "$T/self.json" <<'PY'
import json, sys
r, = json.load(open(sys.argv[1]))
assert abs(r['kld']) < 1e-6, r['kld']
assert r['same_top'] == 1.0, r['same_top']
assert abs(r['ppl_ratio'] - 1) < 1e-5 and abs(r['ppl'] - r['ppl_base']) < 1e-4 * r['ppl']
PY
ok $? "KL 0, top-1 agreement 100%, perplexity ratio 1"
"$BENCH" -m "$T/b.uth" --kl "$T/a.kld" --perplexity "$T/text.txt" -o json > "$T/ab.json"
ok $? "--kl: another model (with the text checked against the base)"
$PYTHON3 - "$T/ab.json" "$T/ref-kl.json" <<'PY'
import json, sys
r, = json.load(open(sys.argv[1])); want = json.load(open(sys.argv[2]))
assert r['n_scored'] == want['n']
assert abs(r['kld'] - want['kld']) <= 1e-3 * want['kld'], (r['kld'], want['kld'])
assert abs(r['ppl_ratio'] - want['ppl_ratio']) <= 1e-3 * want['ppl_ratio'], (r['ppl_ratio'], want)
assert abs(r['same_top'] - want['same_top']) <= 1.01 / want['n'], (r['same_top'], want['same_top'])
PY
ok $? "KL-divergence, ratio and agreement equal the reference's"
"$BENCH" -m "$T/b.uth" --kl "$T/a.kld" > "$T/ab.md"; ok $? "--kl, text report"
grep -q "^Mean    KLD: " "$T/ab.md" && grep -q "^Same top p: " "$T/ab.md" && grep -q "^perplexity: " "$T/ab.md"
ok $? "the report has llama-perplexity's KL lines and the perplexity line"

# Refusals: another text, a damaged or truncated base, a short text.
printf 'Another text entirely, with other words in it, long enough for a chunk or two of tokens.\n' > "$T/other.txt"
"$BENCH" -m "$T/b.uth" --kl "$T/a.kld" --perplexity "$T/other.txt" 2> "$T/err"; is $? 1 "a base of another text: failure"
grep -q "does not tokenize to the base" "$T/err"; ok $? "the message says so"
cp "$T/a.kld" "$T/bad.kld"
size=$(wc -c < "$T/bad.kld")
printf 'X' | dd of="$T/bad.kld" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
"$BENCH" -m "$T/a.uth" --kl "$T/bad.kld" > /dev/null 2> "$T/err"; is $? 1 "a damaged base: failure"
grep -q "checksum" "$T/err"; ok $? "checksum mismatch named"
head -c $((size - 1)) "$T/a.kld" > "$T/short.kld"
"$BENCH" -m "$T/a.uth" --kl "$T/short.kld" 2> "$T/err"; is $? 1 "a truncated base: failure"
grep -q "short.kld: file size" "$T/err"; ok $? "the message names the file and the size"
"$BENCH" -m "$T/a.uth" --perplexity "$T/text.txt" -c 512 2> "$T/err"; is $? 1 "too short a text: failure"
grep -q "needs at least 1024" "$T/err"; ok $? "the message gives the tokens needed"
"$BENCH" -m "$T/a.uth" --kl-base "$T/x.kld" 2>/dev/null; is $? 2 "--kl-base without a text: usage error"
"$BENCH" -m "$T/a.uth" --kl "$T/a.kld" --kl-base "$T/x.kld" --perplexity "$T/text.txt" 2>/dev/null
is $? 2 "--kl with --kl-base: usage error"
"$BENCH" -m "$T/a.uth" -c 16 2>/dev/null; is $? 2 "-c without --perplexity: usage error"

# Expert statistics: over the text (every token of every chunk) and over a
# generation (prompt + generated tokens).
"$BENCH" -m "$T/a.uth" --perplexity "$T/text.txt" -c $C --expert-stats "$T/es.json" > /dev/null
ok $? "--expert-stats over the text"
printf 'Once upon a time' > "$T/prompt.txt"
"$BENCH" -m "$T/a.uth" --expert-stats "$T/eg.json" -f "$T/prompt.txt" -n 5; ok $? "--expert-stats over a generation"
"$BIN/moe-run" -m "$T/a.uth" --tokenize --add-special --parse-special -f "$T/prompt.txt" > "$T/pids.txt"
$PYTHON3 - "$T/es.json" "$T/eg.json" "$T/ref-kl.json" "$T/pids.txt" "$T/a.gguf" "$top_srcdir/scripts" $C <<'PY'
import json, sys
sys.path.insert(0, sys.argv[6])
from moegen.reader import GGUFReader
g = GGUFReader(sys.argv[5])
L, nx, k = g.kv['llama.block_count'], g.kv['llama.expert_count'], g.kv['llama.expert_used_count']
c = int(sys.argv[7])
n_chunks = json.load(open(sys.argv[3]))['n_chunks']
n_prompt = len(open(sys.argv[4]).read().split())
for path, tokens, source in ((sys.argv[1], n_chunks * c, 'perplexity'),
                             (sys.argv[2], n_prompt + 5, 'generation')):
    s = json.load(open(path))
    assert s['format'] == 'moe-expert-stats' and s['source'] == source
    assert s['n_layer'] == L and s['n_expert'] == nx and s['n_expert_used'] == k
    assert s['n_tokens'] == tokens, (s['n_tokens'], tokens)
    assert len(s['layers']) == L
    for l in s['layers']:
        assert l['tokens'] == tokens and len(l['counts']) == nx
        assert sum(l['counts']) == tokens * k, (sum(l['counts']), tokens * k)
        assert abs(sum(l['weight_sums']) - tokens) < 1e-3 * tokens  # renormalised top-k weights
    assert len(s['transitions']) == L - 1
    for t in s['transitions']:
        assert t['to'] == t['from'] + 1 and t['tokens'] == tokens
        assert sum(map(sum, t['counts'])) == tokens * k * k
        # row sums: how often expert i was chosen in the layer before, times k
        prev = s['layers'][t['from']]['counts']
        assert [sum(r) for r in t['counts']] == [x * k for x in prev]
    assert s['unpaired_tokens'] == 0
PY
ok $? "expert counts sum to tokens x experts used per layer; co-occurrences consistent"
done_testing
