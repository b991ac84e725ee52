#!/bin/sh
# t0600-demo-model.sh — the trained demo model moe ships (share/moe-demo.uth,
# made by scripts/train-demo-model):
#   - it is intact (checksums), a Mixtral-style MoE in Q8_0, at most 25 MB;
#   - moe's tokenizer encodes fixed texts as SentencePiece did at training
#     time (ids in tests/golden/demo-model.json);
#   - moe-run's greedy continuation of a fixed prompt is the numpy
#     reference's (tests/ref) on the same Q8_0 weights, emulating the
#     engine's arithmetic; the golden ids were computed by the training
#     script on a GGUF holding byte for byte the tensors of the UTH;
#   - moe-run without -m uses it; $MOE_MODEL overrides it;
#   - its routing over held-out text (Bible chapters it never trained on)
#     is measurably skewed: moe-bench --expert-stats counts the experts each
#     layer chooses; every layer's counts must be far from equal use (a
#     chi-square statistic above 243, ten times the p = 0.001 value for 7
#     degrees of freedom, since consecutive tokens' choices are correlated
#     and the 2 x N choices are not independent draws), and the per-layer
#     entropy is reported against the uniform maximum log2(8) = 3 bits.
#     Measured when it was trained: 2.97 2.93 2.78 2.37 bits (layer 0-3).
. "$top_srcdir/tests/cli/lib.sh"
MODEL="$top_srcdir/share/moe-demo.uth"
GOLD="$top_srcdir/tests/golden/demo-model.json"
HELD="$top_srcdir/tests/golden/demo-model-heldout.txt"
RUN="$BIN/moe-run"
[ -f "$MODEL" ] || skip_all "share/moe-demo.uth not found"

check "moe-convert --verify: every checksum" -- "$BIN/moe-convert" --verify "$MODEL"
size=$(wc -c < "$MODEL" | tr -d ' ')
[ "$size" -le 25000000 ]; ok $? "at most 25 MB ($size bytes)"
"$BIN/moe-convert" --info --json "$MODEL" > "$T/info.json"; ok $? "moe-convert --info --json"
$PYTHON3 - "$T/info.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
hp = d['hparams']
assert d['architecture'] == 'llama', d['architecture']
assert (hp['n_expert'], hp['n_expert_used'], hp['n_layer']) == (8, 2, 4), hp
assert d['experts_per_layer'] == [8, 8, 8, 8], d['experts_per_layer']
assert 'q8_0' in d['dtypes'], d['dtypes']
assert d['chat_template'], 'no chat template'
PY
ok $? "Mixtral-style: 4 layers, top-2 of 8 experts, Q8_0, chat template"

# The tokenizer: each text in a file (moe-run -f takes it byte for byte).
$PYTHON3 - "$GOLD" "$T" <<'PY'
import json, sys
g = json.load(open(sys.argv[1], encoding='utf-8'))
for i, (text, ids) in enumerate(g['tokenize']):
    open('%s/tok%d.txt' % (sys.argv[2], i), 'w', encoding='utf-8', newline='').write(text)
    open('%s/tok%d.ids' % (sys.argv[2], i), 'w').write(' '.join(map(str, ids)))
open(sys.argv[2] + '/prompt.txt', 'w', encoding='utf-8').write(g['prompt'])
open(sys.argv[2] + '/prompt.ids', 'w').write(' '.join(map(str, g['prompt_ids'])))
# the prompt (without BOS) and the continuation, detokenized as one text:
# alone, the continuation's first word would lose its leading space
body = g['prompt_ids'][1:]
open(sys.argv[2] + '/ref.ids', 'w').write(
    ' '.join(map(str, body + g['greedy']['act-quant,kv-f16'])))
exact = g['greedy'].get('exact')
open(sys.argv[2] + '/exact.ids', 'w').write(' '.join(map(str, body + exact)) if exact else '')
open(sys.argv[2] + '/n', 'w').write(str(g['n_greedy']))
PY
ok $? "golden values read"
i=0
while [ -f "$T/tok$i.txt" ]; do
	got=$("$RUN" -m "$MODEL" --tokenize -f "$T/tok$i.txt")
	is "$got" "$(cat "$T/tok$i.ids")" "tokenize text $i as SentencePiece does"
	i=$((i + 1))
done
[ "$i" -ge 5 ]; ok $? "$i tokenizer cases"

# Greedy continuation against the reference.
PROMPT=$(cat "$T/prompt.txt")
N=$(cat "$T/n")
ids=$("$RUN" -m "$MODEL" --tokenize --add-special -f "$T/prompt.txt")
is "$ids" "$(cat "$T/prompt.ids")" "prompt ids (BOS added) as at training time"
"$RUN" -m "$MODEL" --detokenize -f "$T/ref.ids" > "$T/ref.txt"
"$RUN" -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos > "$T/out.txt"
ok $? "moe-run greedy, $N tokens"
{ printf '%s' "$PROMPT"; cat "$T/out.txt"; } > "$T/full.txt"
cmp -s "$T/full.txt" "$T/ref.txt"
ok $? "prompt + greedy text equals the reference's (act-quant, kv-f16)"
diag "reference: $(tr '\n' '|' < "$T/ref.txt")"
diag "moe-run:   $(tr '\n' '|' < "$T/full.txt")"
if [ -s "$T/exact.ids" ] && ! cmp -s "$T/exact.ids" "$T/ref.ids"; then
	diag "the exact (non-emulated) reference continues differently: a near tie"
fi
MOE_ISA=generic "$RUN" -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t 1 > "$T/gen.txt"
cmp -s "$T/gen.txt" "$T/out.txt"; ok $? "MOE_ISA=generic, one thread: same text"
"$RUN" -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -b 1 > "$T/b1.txt"
cmp -s "$T/b1.txt" "$T/out.txt"; ok $? "token-by-token prefill: same text"

# Without -m: the demo model (installed, or this source tree's).
(unset MOE_MODEL; "$RUN" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos) > "$T/default.txt"
ok $? "moe-run without -m"
cmp -s "$T/default.txt" "$T/out.txt"; ok $? "without -m: the demo model's text"
# $MOE_MODEL: another model (a generated one, with its own vocabulary)
"$PYTHON3" "$top_srcdir/scripts/gen-model" --arch mixtral --format gguf --seed 3 --out "$T/g" &&
	"$BIN/moe-convert" "$T/g.gguf" "$T/g.uth"; ok $? "another model"
want=$("$RUN" -m "$T/g.uth" --tokenize -f "$T/prompt.txt")
MOE_MODEL="$T/g.uth" "$RUN" --tokenize -f "$T/prompt.txt" > "$T/env.ids"
is "$(cat "$T/env.ids")" "$want" "\$MOE_MODEL names the model used without -m"
[ "$want" != "$(cut -d' ' -f2- < "$T/prompt.ids")" ]; ok $? "... (its ids differ from the demo's)"
MOE_MODEL="$T/missing.uth" "$RUN" -p x -n 1 2> "$T/err"
is $? 1 "\$MOE_MODEL naming no file: failure"
grep -q "missing.uth" "$T/err"; ok $? "the message names the file"

# Routing over held-out text (Bible chapters the model never trained on).
if [ -x "$BIN/moe-bench" ]; then
	"$BIN/moe-bench" -m "$MODEL" -c 256 --perplexity "$HELD" --expert-stats "$T/es.json" \
		> "$T/ppl.out" 2> "$T/ppl.err"
	ok $? "moe-bench --perplexity --expert-stats on held-out text"
	$PYTHON3 - "$T/es.json" <<'PY' > "$T/entropy"
import json, math, sys
d = json.load(open(sys.argv[1]))
E = d['n_expert']
for li, layer in enumerate(d['layers']):
    c = layer['counts']
    n = float(sum(c))
    h = -sum(x / n * math.log2(x / n) for x in c if x)
    # chi-square against equal use (7 degrees of freedom: 24.3 is p = 0.001)
    chi2 = sum((x - n / E) ** 2 / (n / E) for x in c)
    print('%d %.4f %.1f %d %s' % (li, h, chi2, n, ' '.join('%.3f' % (x / n) for x in c)))
PY
	ok $? "expert statistics read"
	while read -r li h chi2 n shares; do
		diag "layer $li: entropy $h bits of 3 (uniform), chi2 $chi2 over $n choices; shares $shares"
		$PYTHON3 -c "import sys; sys.exit(not (float('$h') < 3 and float('$chi2') > 243))"
		ok $? "layer $li: expert use far from uniform (chi2 $chi2 > 243)"
	done < "$T/entropy"
	diag "$(grep -i perplexity "$T/ppl.out" | head -1)"
else
	diag "moe-bench not built: routing skew not measured here (see the training log)"
fi
done_testing
