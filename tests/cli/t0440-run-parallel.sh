#!/bin/sh
# t0440-run-parallel.sh — moe-run --jsonl on the scheduler: 32 mixed
# requests (prompts, conversations, stop strings, lengths, some invalid)
# with --parallel 8 give, line for line, what 32 separate runs give at
# temperature 0 (batch invariance end to end); small -b (prompts in chunks
# mixed with other requests' decoding) and --unordered too; request
# parameters are checked the same way on the command line and in JSON.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
RUN="$BIN/moe-run"

check "generate a tiny mixtral" -- $GEN --arch mixtral --format gguf --seed 12 --out "$T/m"
check "convert it" -- "$BIN/moe-convert" "$T/m.gguf" "$T/m.uth"

$PYTHON3 - "$T/req.jsonl" <<'PY'
import json, random, sys
random.seed(7)
words = "the quick brown fox jumps over a lazy dog and then runs far away home".split()
lines = []
for i in range(32):
    r = {"id": i, "temperature": 0, "n_predict": random.choice([1, 5, 12, 20])}
    k = i % 8
    text = " ".join(random.choice(words) for _ in range(random.randint(1, 40)))
    if k == 3:
        r["messages"] = [{"role": "user", "content": text}]
    else:
        r["prompt"] = text
    if k == 5:
        r["stop"] = ["e"]
    if k == 6:
        r["seed"] = i
    line = json.dumps(r)
    if i == 9:
        line = '{"prompt": "unterminated'
    if i == 17:
        r["top_p"] = 2; line = json.dumps(r)
    if i == 25:
        del r["prompt"]; line = json.dumps(r)
    lines.append(line)
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
ok $? "32 requests written"

# 32 separate runs, one request each
: > "$T/single.jsonl"
fail=0
while IFS= read -r line; do
	printf '%s\n' "$line" | "$RUN" -m "$T/m.uth" --jsonl >> "$T/single.jsonl" 2>>"$T/single.err" || fail=1
done < "$T/req.jsonl"
ok $fail "32 single runs"

"$RUN" -m "$T/m.uth" --jsonl --parallel 8 < "$T/req.jsonl" > "$T/par.jsonl" 2> "$T/par.err"
ok $? "--jsonl --parallel 8"
"$RUN" -m "$T/m.uth" --jsonl -np 8 -b 5 < "$T/req.jsonl" > "$T/par-b5.jsonl" 2> "$T/par-b5.err"
ok $? "--jsonl -np 8 -b 5"
"$RUN" -m "$T/m.uth" --jsonl --parallel 8 --unordered -t 1 < "$T/req.jsonl" > "$T/unord.jsonl"
ok $? "--jsonl --parallel 8 --unordered -t 1"

# compare: error objects carry the input line number (always 1 in a single run)
$PYTHON3 - "$T/single.jsonl" "$T/par.jsonl" "$T/par-b5.jsonl" "$T/unord.jsonl" <<'PY'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    for r in rows:
        r.pop("line", None)
    return rows
single, par, par5, unord = (load(p) for p in sys.argv[1:])
assert len(single) == 32, len(single)
errors = [i for i, r in enumerate(single) if "error" in r]
assert errors == [9, 17, 25], errors
assert "top_p" in single[17]["error"], single[17]
assert par == single, [(i, a, b) for i, (a, b) in enumerate(zip(single, par)) if a != b][:2]
assert par5 == single, [(i, a, b) for i, (a, b) in enumerate(zip(single, par5)) if a != b][:2]
key = lambda r: json.dumps(r, sort_keys=True)
assert sorted(map(key, unord)) == sorted(map(key, single)), "unordered: other results"
assert sum(r.get("tokens", 0) for r in single) > 100
PY
ok $? "--parallel 8 (also -b 5, --unordered): line for line the single runs' results"
grep -q . "$T/par.err"; is $? 1 "no messages on standard error"

# error lines name the line number in the batch
$PYTHON3 -c "
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
assert rows[9]['line'] == 10 and rows[17]['line'] == 18, rows[9]
" "$T/par.jsonl"
ok $? "error results carry their input line"

# one range check for the command line and JSON
"$RUN" -m "$T/m.uth" -p x --top-p 2 2> "$T/err"; is $? 2 "--top-p 2: usage error"
grep -q "top_p must be in (0, 1]" "$T/err"; ok $? "... naming the field: $(cat "$T/err")"
"$RUN" -m "$T/m.uth" -p x --temp nan 2> "$T/err"; is $? 2 "--temp nan: usage error"
echo '{"prompt": "x", "repeat_last_n": -5}' | "$RUN" -m "$T/m.uth" --jsonl > "$T/out"
grep -q '"error": *"repeat_last_n must be in' "$T/out"; ok $? "JSON repeat_last_n -5: $(cat "$T/out")"
echo '{"prompt": "x", "n_predict": 1.5}' | "$RUN" -m "$T/m.uth" --jsonl > "$T/out"
grep -q 'n_predict must be an integer' "$T/out"; ok $? "JSON n_predict 1.5: $(cat "$T/out")"
echo '{"prompt": "x", "temperature": "hot"}' | "$RUN" -m "$T/m.uth" --jsonl > "$T/out"
grep -q 'temperature must be a number' "$T/out"; ok $? "JSON temperature \"hot\": $(cat "$T/out")"
# Every out-of-range value the command line refuses is refused in JSON too,
# with an error line naming the field (issue 16's list of cases).
for case in 'top_k:-5' 'top_p:2' 'temperature:1e39' 'presence_penalty:1e39' \
	'frequency_penalty:-1e39' 'repeat_last_n:-7' 'repeat_last_n:2147483647' 'top_k:1e30' \
	'repeat_last_n:1e30'; do
	f=${case%%:*} v=${case#*:}
	echo "{\"prompt\": \"x\", \"$f\": $v}" | "$RUN" -m "$T/m.uth" --jsonl > "$T/out"
	grep -q "\"error\": *\"$f " "$T/out"; ok $? "JSON $f $v: $(cat "$T/out")"
done
echo '{"messages": []}' | "$RUN" -m "$T/m.uth" --jsonl > "$T/out"
grep -q '"error": *"messages must not be empty' "$T/out"; ok $? "JSON messages []: $(cat "$T/out")"
"$RUN" -m "$T/m.uth" -p x --parallel 2 2>/dev/null; is $? 2 "--parallel without --jsonl: usage error"
done_testing
