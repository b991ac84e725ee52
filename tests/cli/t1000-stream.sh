#!/bin/sh
# t1000-stream.sh — moe-run --mem-budget: experts streamed from the file give
# the same greedy tokens as the resident model for every MoE architecture
# (F32 tiny and Q4_K_M small shapes), at the smallest budget (one layer of
# experts), half the model and all of it, with --parallel requests and one or
# two threads, and with reads handed over in reverse order
# (MOE_TEST_IO_TRICKLE, so experts are computed in arrival order); the error
# paths: a dense model, a budget below the minimum, an I/O error and a short
# read on the Nth read (MOE_TEST_IO_FAULT), --verify-reads without --mem-budget.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
RUN="$BIN/moe-run"
PROMPT="The quick brown fox jumps over"

for spec in "mixtral f32 tiny" "olmoe f32 tiny" "qwen2moe f32 tiny" "qwen3moe f32 tiny" \
	    "mixtral q4_k_m small" "olmoe q4_k_m small"; do
	set -- $spec
	name="$1-$2"
	if ! $GEN --arch "$1" --type "$2" --shape "$3" --format gguf --seed 7 --out "$T/$name" \
		>"$T/gen.err" 2>&1 || ! "$BIN/moe-convert" "$T/$name.gguf" "$T/$name.uth" >>"$T/gen.err" 2>&1; then
		ok 1 "$name: generate and convert"; sed 's/^/#   /' "$T/gen.err"; continue
	fi
	rm -f "$T/$name.gguf"
	"$RUN" -m "$T/$name.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos > "$T/ref.txt" 2>"$T/err"
	ok $? "$name: resident run"
	for b in min 90% 100%; do
		for t in 1 2; do
			"$RUN" -m "$T/$name.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos -t $t \
				--mem-budget $b > "$T/out.txt" 2>"$T/err"
			st=$?
			[ $st -eq 0 ] && cmp -s "$T/out.txt" "$T/ref.txt"
			ok $? "$name: --mem-budget $b -t $t: same text"
			[ $st -eq 0 ] || sed 's/^/#   /' "$T/err"
		done
	done
	# reads handed over one at a time, last requested first: experts are
	# computed in arrival order, not id order, and the text must not change
	MOE_TEST_IO_TRICKLE=200 "$RUN" -m "$T/$name.uth" -p "$PROMPT" -n 24 --temp 0 --ignore-eos \
		--mem-budget min > "$T/out.txt" 2>"$T/err"
	[ $? -eq 0 ] && cmp -s "$T/out.txt" "$T/ref.txt"
	ok $? "$name: --mem-budget min, reads trickling in (MOE_TEST_IO_TRICKLE): same text"
	# several requests decoded together: each expert read serves all of them
	printf '{"prompt": "%s", "n_predict": 12, "temperature": 0}\n' "a b" "c d e" "f" "g h i j" \
		> "$T/in.jsonl"
	"$RUN" -m "$T/$name.uth" --jsonl -np 4 < "$T/in.jsonl" > "$T/ref.jsonl" 2>/dev/null
	"$RUN" -m "$T/$name.uth" --jsonl -np 4 --mem-budget min --verify-reads < "$T/in.jsonl" \
		> "$T/out.jsonl" 2>"$T/err"
	[ $? -eq 0 ] && [ -s "$T/ref.jsonl" ] && cmp -s "$T/out.jsonl" "$T/ref.jsonl"
	ok $? "$name: --jsonl -np 4 --mem-budget min --verify-reads: same results"
done

M="$T/olmoe-f32.uth"
$GEN --arch llama --format gguf --seed 3 --out "$T/dense" >/dev/null 2>&1 &&
	"$BIN/moe-convert" "$T/dense.gguf" "$T/dense.uth" >/dev/null 2>&1
"$RUN" -m "$T/dense.uth" -p x -n 2 --mem-budget 1G 2>"$T/err"; is $? 1 "dense model: failure"
grep -q "no experts to stream" "$T/err"; ok $? "... saying why: $(cat "$T/err")"
"$RUN" -m "$M" -p x -n 2 --mem-budget 4K 2>"$T/err"; is $? 1 "budget below the minimum: failure"
grep -q "below the minimum" "$T/err"; ok $? "... naming it: $(cat "$T/err")"
"$RUN" -m "$M" -p x -n 2 --mem-budget 12Q 2>"$T/err"; is $? 2 "bad size: usage error"
grep -q -- "--mem-budget: bad size '12Q'" "$T/err"; ok $? "... naming it and the option"
"$RUN" -m "$M" -p x -n 2 --verify-reads 2>"$T/err"; is $? 1 "--verify-reads alone: failure"
for f in eio:3 short:3; do
	MOE_TEST_IO_FAULT=$f "$RUN" -m "$M" -p "$PROMPT" -n 8 --mem-budget min >/dev/null 2>"$T/err"
	is $? 1 "read 3 fails ($f): exit 1"
	grep -Eq "(Input/output error|short read).*expert|expert.*(Input/output error|short read)" \
		"$T/err"; ok $? "... with a clear message: $(cat "$T/err")"
done
# moe-bench --mem-budget: one JSON object per budget with the figures
"$BIN/moe-bench" -m "$M" --mem-budget 90%,resident -n 8 -o json > "$T/b.json" 2>"$T/err"
ok $? "moe-bench --mem-budget 90%,resident -o json"
$PYTHON3 - "$T/b.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 2, rows
s, r = rows
for k in ("tok_s", "hit_rate", "prediction_accuracy", "bytes_read_per_token", "io_wait_s",
          "pct_of_io_bound", "disk_bw_bytes_s", "read_bytes_s", "overlap", "slots"):
    assert k in s, k
assert s["tok_s"] > 0 and 0 <= s["hit_rate"] <= 1 and 0 <= s["prediction_accuracy"] <= 1
assert s["disk_bw_bytes_s"] > 0 and s["slots"] > 0 and r["slots"] == 0 and r["hit_rate"] == 1
PY
ok $? "... with tokens/s, hit rate, prediction accuracy, bytes/token, % of the I/O bound"
# the disk measured as the store reads: expert-sized reads, QD1 and the store's depth
# (the generator's tiny olmoe chooses K experts a layer: K + 2 prefetch reads in flight)
K=$($PYTHON3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from moegen.arch import SHAPES
print(SHAPES["tiny"]["n_expert_used"])' "$top_srcdir/scripts")
$PYTHON3 - "$T/b.json" "$K" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))[0]
assert s["disk_queue_depth"] in (1, int(sys.argv[2]) + 2), s["disk_queue_depth"]
assert s["disk_bw_qd1_bytes_s"] > 0 and 0 < s["disk_read_bytes"] < 1 << 20, s
assert abs(s["io_bound_qd1_tok_s"] * s["bytes_read_per_token"] - s["disk_bw_qd1_bytes_s"]) \
    <= 1e-6 * s["disk_bw_qd1_bytes_s"], s
assert abs(s["pct_of_io_bound_qd1"] - 100 * s["tok_s"] / s["io_bound_qd1_tok_s"]) < 1e-6, s
PY
ok $? "... and the disk at QD1 and at the store's queue depth (K + 2), expert-sized reads"
# --lookahead 2: the prediction accuracy one and two layers ahead (the demo
# model: 4 layers; the generated ones have 2); the cache's population timed apart
"$BIN/moe-bench" -m "$top_srcdir/share/moe-demo.uth" --mem-budget 50% --lookahead 2 -n 8 -o json \
	> "$T/b.json" 2>"$T/err"
ok $? "moe-bench --mem-budget 50% --lookahead 2 (demo model)"
$PYTHON3 -c 'import json, sys; r = json.load(open(sys.argv[1]))[0]
a, c = r["prediction_accuracy_at"], r["candidate_accuracy_at"]
assert r["lookahead"] == 2 and len(a) == 2 and len(c) == 2, r
assert a[0] == r["prediction_accuracy"] and all(0 <= x <= 1 for x in a + c), r
assert r["open_s"] > 0 and r["populate_s"] > 0 and r["prefetch_reads_per_token"] >= 0, r' "$T/b.json"
ok $? "... gives the accuracy at both distances, open and population times"
"$BIN/moe-bench" -m "$M" --mem-budget 90% --lookahead 5 -n 8 >/dev/null 2>"$T/err"
is $? 2 "--lookahead 5: usage error"
"$BIN/moe-bench" -m "$M" --lookahead 2 -n 8 >/dev/null 2>"$T/err"
is $? 2 "--lookahead without --mem-budget: usage error"
# --no-overlap: every expert of a layer before any math, so none overlaps I/O
"$BIN/moe-bench" -m "$M" --mem-budget 90% --no-overlap -n 8 -o json > "$T/b.json" 2>"$T/err"
ok $? "moe-bench --mem-budget 90% --no-overlap"
$PYTHON3 -c 'import json, sys; r = json.load(open(sys.argv[1]))[0]
assert r["overlap"] == 0 and r["bytes_read_per_token"] > 0, r' "$T/b.json"
ok $? "... reads experts and computes none of them under I/O (overlap 0)"
# min: the smallest cache, one slot per expert of a layer (as moe-run's min)
"$BIN/moe-bench" -m "$M" --mem-budget min -n 4 -o json > "$T/b.json" 2>"$T/err"
ok $? "moe-bench --mem-budget min"
NX=$($PYTHON3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from moegen.arch import SHAPES
print(SHAPES["tiny"]["n_expert"])' "$top_srcdir/scripts")  # the generator's shape of $M
$PYTHON3 -c 'import json, sys; r = json.load(open(sys.argv[1]))[0]
assert r["slots"] == int(sys.argv[2]) and r["tok_s"] > 0, (r["slots"], sys.argv[2])' "$T/b.json" "$NX"
ok $? "... runs with one slot per expert of a layer ($NX)"
"$BIN/moe-bench" -m "$M" --mem-budget 1K -n 4 2>"$T/err" >/dev/null; is $? 1 "moe-bench: budget too small: failure"
"$BIN/moe-bench" -m "$M" --mem-budget 90% --policy mru 2>/dev/null >/dev/null; is $? 2 "--policy mru: usage error"
# --pin is a number from 0 to 1: text or trailing junk is refused, not read as 0
"$BIN/moe-bench" -m "$M" --mem-budget 90% --pin abc -n 4 2>"$T/err" >/dev/null; is $? 2 "--pin abc: usage error"
grep -q -- "--pin" "$T/err"; ok $? "... naming --pin: $(head -1 "$T/err")"
"$BIN/moe-bench" -m "$M" --mem-budget 90% --pin 0.5x -n 4 2>/dev/null >/dev/null; is $? 2 "--pin 0.5x: usage error"
"$BIN/moe-bench" -m "$M" --mem-budget 90% --pin 0.5 -n 4 2>"$T/err" >/dev/null; is $? 2 "--pin without --expert-profile: usage error"
# a bad --mem-budget is a usage error naming the option, found before any
# budget of a list is run
"$BIN/moe-bench" -m "$M" --mem-budget 90%,xyz -n 4 >"$T/out" 2>"$T/err"; is $? 2 "moe-bench --mem-budget 90%,xyz: usage error"
grep -q -- "--mem-budget: bad size 'xyz'" "$T/err" && [ ! -s "$T/out" ]; ok $? "... before the 90% run: $(head -1 "$T/err")"
# moe-bench --plan: predictions for a few budgets and a recommendation
"$BIN/moe-bench" -m "$M" --plan > "$T/plan.txt" 2>"$T/err"; ok $? "moe-bench --plan"
grep -q "^recommended: --mem-budget [0-9]*M" "$T/plan.txt" && grep -q "largest that fits" "$T/plan.txt"
ok $? "... recommends a budget"
grep -Eq "disk [0-9.]+ GB/s at [0-9]+ reads in flight, [0-9.]+ GB/s one at a time" "$T/plan.txt"
ok $? "... with the disk at the store's queue depth and one read at a time"
"$BIN/moe-bench" -m "$T/dense.uth" --plan >/dev/null 2>"$T/err"; is $? 1 "--plan on a dense model: failure"
# the profile's counts are counts: a negative one made a hit rate above 1
D="$top_srcdir/share/moe-demo.uth"
"$PYTHON3" - "$T/neg-prof.json" <<'EOF'
import json, sys
L = lambda l, c: {'layer': l, 'tokens': 800, 'counts': c}
json.dump({'format': 'moe-expert-stats', 'n_layer': 4, 'n_expert': 8,
	   'layers': [L(0, [100] * 8), L(1, [-50] * 8), L(2, [0] * 8), L(3, [0] * 8)]},
	  open(sys.argv[1], 'w'))
EOF
"$BIN/moe-bench" -m "$D" --plan --expert-profile "$T/neg-prof.json" >/dev/null 2>"$T/err"
is $? 1 "--plan with a negative count in the profile: failure"
grep -q "neg-prof.json: layers\\[1\\].counts\\[0\\] is not a count" "$T/err"
ok $? "... names the file and the field: $(cat "$T/err")"
done_testing
