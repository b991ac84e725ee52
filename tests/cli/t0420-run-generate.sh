#!/bin/sh
# t0420-run-generate.sh — moe-run text generation end to end: the greedy
# continuation of a text prompt equals the numpy reference's (through the
# tokenizer and detokenizer), stop strings, -n, seeds, --jsonl, --chat,
# and the error paths.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
RUN="$BIN/moe-run"
REF="$PYTHON3 $top_srcdir/tests/ref/ref.py"

check "generate a tiny mixtral" -- $GEN --arch mixtral --format gguf --seed 11 --out "$T/m"
check "convert it" -- "$BIN/moe-convert" "$T/m.gguf" "$T/m.uth"
PROMPT="The quick brown fox"

# Reference: the same ids (BOS added as the tokenizer says, as moe-run does).
ids=$("$RUN" -m "$T/m.uth" --tokenize --add-special --parse-special -p "$PROMPT")
ok $? "prompt tokenized: $ids"
$REF --model "$T/m.gguf" --tokens "$ids" --greedy 24 > "$T/ref.ids"; ok $? "reference greedy run"
"$RUN" -m "$T/m.uth" --detokenize -f "$T/ref.ids" > "$T/ref.txt"
"$RUN" -m "$T/m.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos > "$T/out.txt"; ok $? "moe-run greedy"
cmp -s "$T/out.txt" "$T/ref.txt"; ok $? "greedy text equals the reference's continuation"
"$RUN" -m "$T/m.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos -b 1 > "$T/out-b1.txt"
cmp -s "$T/out-b1.txt" "$T/out.txt"; ok $? "token-by-token prefill gives the same text"
"$RUN" -m "$T/m.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos -t 1 > "$T/out-t1.txt"
cmp -s "$T/out-t1.txt" "$T/out.txt"; ok $? "one thread: same text"
# A q8_0 cache holds each head's key in whole 32-element blocks: the demo
# model (head size 32) can use one, the tiny model (head size 16) cannot.
DEMO="$top_srcdir/share/moe-demo.uth"
a=$("$RUN" -m "$DEMO" -p "In the beginning" -n 8 --temp 0 | od -An -c)
b=$("$RUN" -m "$DEMO" -p "In the beginning" -n 8 --temp 0 --kv-type q8_0 | od -An -c)
[ -n "$b" ] && [ "$a" = "$b" ]; ok $? "q8_0 KV cache: the demo model's first 8 greedy tokens are unchanged"
"$RUN" -m "$T/m.uth" -p x -n 1 --kv-type q8_0 2> "$T/err"; is $? 1 "q8_0 KV cache with head size 16: failure"
grep -q "multiple of 32" "$T/err"; ok $? "... saying why: $(cat "$T/err")"
"$RUN" -m "$T/m.uth" -p x --kv-type f32 2>/dev/null; is $? 2 "--kv-type f32: usage error"
MOE_ISA=generic "$RUN" -m "$T/m.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos > "$T/out-gen.txt"
cmp -s "$T/out-gen.txt" "$T/out.txt"; ok $? "MOE_ISA=generic: same text"

# -n 0 writes nothing; prompt from stdin and -f.
out=$("$RUN" -m "$T/m.uth" -p "$PROMPT" -n 0); is "$out" "" "-n 0 generates nothing"
printf '%s' "$PROMPT" | "$RUN" -m "$T/m.uth" -n 24 --temp 0 --ignore-eos > "$T/stdin.txt"
cmp -s "$T/stdin.txt" "$T/out.txt"; ok $? "prompt from standard input"
printf '%s' "$PROMPT" > "$T/p.txt"
"$RUN" -m "$T/m.uth" -f "$T/p.txt" -n 24 --temp 0 --ignore-eos > "$T/file.txt"
cmp -s "$T/file.txt" "$T/out.txt"; ok $? "prompt from -f FILE"

# A stop string cuts the text before it (pick one from the greedy text).
stop=$($PYTHON3 -c "import sys; t=open(sys.argv[1],encoding='utf-8',errors='replace').read(); print(t[len(t)//2:len(t)//2+2])" "$T/out.txt")
"$RUN" -m "$T/m.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos --stop "$stop" > "$T/stop.txt"
$PYTHON3 - "$T/out.txt" "$T/stop.txt" "$stop" <<'PY'
import sys
full = open(sys.argv[1], 'rb').read(); cut = open(sys.argv[2], 'rb').read(); stop = sys.argv[3].encode()
assert full.startswith(cut), 'not a prefix'
assert cut == full[:full.index(stop)], 'not cut at the first stop string'
PY
ok $? "--stop '$stop' ends the text just before it"

# Sampling: a seed reproduces, another seed differs.
a=$("$RUN" -m "$T/m.uth" -p "$PROMPT" -n 16 --seed 1 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 | od -An -tx1)
b=$("$RUN" -m "$T/m.uth" -p "$PROMPT" -n 16 --seed 1 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 | od -An -tx1)
c=$("$RUN" -m "$T/m.uth" -p "$PROMPT" -n 16 --seed 2 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 | od -An -tx1)
is "$a" "$b" "same seed, same text"
[ "$a" != "$c" ]; ok $? "another seed, other text"

# JSONL: one output line per input line; bad lines give errors and the batch goes on.
printf '%s\n' \
	"{\"id\": 1, \"prompt\": \"$PROMPT\", \"n_predict\": 24, \"temperature\": 0}" \
	'not json' \
	'{"id": 3, "prompt": 5}' \
	"{\"id\": \"x\", \"prompt\": \"$PROMPT\", \"n_predict\": 3, \"temperature\": 0}" \
	'{"messages": [{"role": "user", "content": "hi"}], "n_predict": 2}' \
	| "$RUN" -m "$T/m.uth" --jsonl --ignore-eos > "$T/out.jsonl"; ok $? "--jsonl batch"
$PYTHON3 - "$T/out.jsonl" "$T/out.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]
want = open(sys.argv[2], 'rb').read().decode('utf-8', 'replace')
assert len(rows) == 5, rows
assert rows[0]['id'] == 1 and rows[0]['text'] == want and rows[0]['tokens'] == 24, rows[0]
assert rows[0]['finish_reason'] == 'length'
assert 'error' in rows[1] and rows[1]['line'] == 2 and 'JSON' in rows[1]['error']
assert 'error' in rows[2] and 'prompt' in rows[2]['error'] and rows[2]['id'] == 3, rows[2]
assert rows[3]['id'] == 'x' and rows[3]['tokens'] == 3 and want.startswith(rows[3]['text'])
assert rows[4]['tokens'] == 2 and 'text' in rows[4]
PY
ok $? "--jsonl results: same text as the CLI, ids echoed (also on an error line), errors per line"

# Chat: two turns from standard input, the cache kept across turns.
printf 'hello\nand again\n' | "$RUN" -m "$T/m.uth" --chat -n 4 --temp 0 --verbose > "$T/chat.out" 2> "$T/chat.err"
ok $? "--chat with two turns"
is "$(wc -l < "$T/chat.out" | tr -d ' ')" 2 "one reply line per turn"
grep -q "evaluated" "$T/chat.err" && $PYTHON3 - "$T/chat.err" <<'PY'
import re, sys
turns = re.findall(r'prompt (\d+) tokens \((\d+) evaluated\)', open(sys.argv[1]).read())
assert len(turns) == 2, turns
n2, ev2 = map(int, turns[1])
assert ev2 < n2, 'second turn re-evaluated the whole conversation'
PY
ok $? "second turn reuses the cached conversation"

# Errors.
"$RUN" -m "$T/m.uth" -p x --temp -1 2>/dev/null; is $? 2 "--temp -1: usage error"
"$RUN" -m "$T/m.uth" --chat -p x 2>/dev/null; is $? 2 "--chat with -p: usage error"
"$RUN" -m "$T/m.uth" --tokenize -n 3 -p x 2>/dev/null; is $? 2 "-n with --tokenize: usage error"
"$RUN" -m "$T/m.gguf" -p x 2> "$T/err"; is $? 1 "a GGUF model: failure"
grep -q "convert it first" "$T/err"; ok $? "a GGUF model gets a hint to convert it"
"$RUN" -m "$T/m.uth" -c 4 -p "$PROMPT and a much longer prompt than four tokens" 2> "$T/err"; is $? 1 "prompt longer than the context: failure"
grep -q "context full" "$T/err"; ok $? "the message says the context is full"
"$RUN" -m "$T/m.uth" -c 12 -p "$PROMPT" --temp 0 --ignore-eos > /dev/null; ok $? "generation stops at a full context"
# A model whose embedding has more rows than its tokenizer has tokens (as
# Qwen pads its vocabulary): logits cover every row, padding is never chosen.
check "padded vocabulary: generate an HF snapshot" -- $GEN --arch olmoe --format hf --seed 3 --out "$T/pad"
$PYTHON3 - "$T/pad.hf" <<'PY'
import json, os, sys
d = sys.argv[1]
t = json.load(open(os.path.join(d, 'tokenizer.json')))
keep = len(t['model']['vocab']) - 8        # drop the trailing special tokens
t['model']['vocab'] = {k: i for k, i in t['model']['vocab'].items() if i < keep}
t['added_tokens'] = [a for a in t.get('added_tokens', []) if a['id'] < keep]
json.dump(t, open(os.path.join(d, 'tokenizer.json'), 'w'))
PY
check "padded vocabulary: convert" -- "$BIN/moe-convert" "$T/pad.hf" "$T/pad.uth"
n=$("$BIN/moe-convert" --info --json "$T/pad.uth" | $PYTHON3 -c "import json,sys; d=json.load(sys.stdin); print(d['hparams']['n_vocab'] - d['tokenizer']['n_tokens'])")
is "$n" 8 "the embedding has 8 rows more than the tokenizer"
"$RUN" -m "$T/pad.uth" -p "$PROMPT" -n 48 --temp 2 --top-k 0 --top-p 1 --min-p 0 --seed 5 --ignore-eos > "$T/pad.txt"
ok $? "sampling over a padded vocabulary works"

# hparams that disagree with the tensors are refused at load, naming the file.
check "bad expert width: generate" -- $GEN --arch olmoe --format hf --seed 3 --out "$T/badff"
$PYTHON3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['intermediate_size']=0; json.dump(c,open(p,'w'))" "$T/badff.hf/config.json"
# (the converter runs the loader's validation: it refuses the file; the
# loader's side is tests/unit/t-arch)
"$BIN/moe-convert" "$T/badff.hf" "$T/badff.uth" 2> "$T/err"; is $? 1 "expert FFN width 0: failure"
grep -q "badff.hf" "$T/err" && grep -qi "intermediate_size" "$T/err" && [ ! -e "$T/badff.uth" ]
ok $? "... naming the file and the FFN width, no output: $(cat "$T/err")"
# Broken weights: a NaN in output_norm makes every logit NaN; moe-run stops
# with an error instead of printing tokens chosen from NaN.
cp "$T/m.uth" "$T/nan.uth"
$PYTHON3 - "$T/nan.uth" <<'PY'
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
n, d, names = struct.unpack_from('<Q', b, 24)[0], struct.unpack_from('<Q', b, 32)[0], struct.unpack_from('<Q', b, 48)[0]
for i in range(n):
    rec = d + 64 * i
    name_off = struct.unpack_from('<I', b, rec + 4)[0]
    name = bytes(b[names + name_off:b.index(0, names + name_off)]).decode()
    if name == 'output_norm.weight':
        struct.pack_into('<f', b, struct.unpack_from('<Q', b, rec + 24)[0], float('nan'))
open(p, 'wb').write(b)
PY
"$RUN" -m "$T/nan.uth" -p "$PROMPT" -n 4 --temp 0 > "$T/nan.out" 2> "$T/nan.err"
is $? 1 "NaN logits: failure"
grep -q "NaN logit" "$T/nan.err" && [ ! -s "$T/nan.out" ]; ok $? "... saying so, no text: $(cat "$T/nan.err")"
echo '{"prompt": "x", "n_predict": 2}' | "$RUN" -m "$T/nan.uth" --jsonl > "$T/nan.jsonl"
grep -q '"error": *"the model computed a NaN logit' "$T/nan.jsonl"; ok $? "--jsonl: an error line: $(cat "$T/nan.jsonl")"

# Output errors are failures: a full disk.
if [ -w /dev/full ]; then
	"$RUN" -m "$T/m.uth" -p "$PROMPT" -n 4 --temp 0 > /dev/full 2> "$T/full.err"
	is $? 1 "writing to a full device: failure"
	grep -q "write error" "$T/full.err"; ok $? "... a write error: $(cat "$T/full.err")"
	echo '{"prompt": "x", "n_predict": 1}' | "$RUN" -m "$T/m.uth" --jsonl > /dev/full 2>/dev/null
	is $? 1 "--jsonl to a full device: failure"
fi

# Lines are bounded (16 MiB): a longer request is refused, the batch goes on.
$PYTHON3 -c "
import sys
sys.stdout.write('{\"prompt\": \"' + 'a' * (17 << 20) + '\"}\n{\"prompt\": \"x\", \"n_predict\": 1, \"id\": 2}\n')" |
	"$RUN" -m "$T/m.uth" --jsonl > "$T/long.jsonl"
ok $? "--jsonl with a 17 MiB line"
$PYTHON3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2 and 'longer than' in rows[0]['error'] and rows[0]['line'] == 1, rows
assert rows[1]['id'] == 2 and rows[1]['tokens'] == 1
" "$T/long.jsonl"
ok $? "... an error line for it, the next request runs"
done_testing
