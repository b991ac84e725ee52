#!/bin/sh
# tests/cli/t0435-engine-window.sh — gpt-oss's sliding-window layers keep
# their window only (lib/engine/kv.c): a generation that passes the window
# many times over (window 8, blocks of 4 and 8 positions, 8 prompt + 120
# generated positions, so the window's rows are given back and their slots
# reused about 15 times) against
#   - the same engine keeping every position (engine-run all-keep,
#     moe_engine_params.kv_keep_all): every step's logits and every id
#     identical, on every kernel set;
#   - the independent numpy reference (tests/ref): the last prompt
#     position's logits and every step's logits within the t0410 F32
#     tolerance (KV cache rounded to F16), every id the reference's greedy
#     choice;
#   - memory: the peak KV bytes (engine-run's "kv:" line, moe_kv_stats) with
#     the window slots bounded by window + slack, less than keeping all;
# prefix sharing and rewinds past the window (tests/unit/engine-window, on
# every kernel set); and moe-run --prompt-cache: a save after the window
# passed the prompt is refused with a warning (the answer stands), and a
# load still works.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/engine-lib.sh"

N=120
W=8

for type in f32 mxfp4; do
	name=gpt-oss-$type
	if ! make_model $name gpt-oss $type tiny 435 --sliding-window $W; then
		ok 1 "$name: generate and convert"; sed 's/^/#   /' "$T/$name.gen.err"
		continue
	fi
	for bt in 4 8; do
		for isa in "" generic avx2; do
			tag=$name.b$bt${isa:+.$isa}
			MOE_ISA=$isa "$RUN" "$T/$name.uth" "$PROMPT" $N 0 $bt all >"$T/$tag.win" \
				2>"$T/$tag.win.err"
			MOE_ISA=$isa "$RUN" "$T/$name.uth" "$PROMPT" $N 0 $bt all-keep >"$T/$tag.all" \
				2>"$T/$tag.all.err"
			cmp -s "$T/$tag.win" "$T/$tag.all" && [ -s "$T/$tag.win" ]
			ok $? "$tag: window-only cache = every position kept (all $N steps' logits, ids)"
		done
		# memory: window slots <= (window + one block of slack) / block + 2
		# (the block being written and one taken before the step's release)
		set -- $(sed -n 's/.*peak \([0-9]*\) blocks x \([0-9]*\) bytes + \([0-9]*\) window slots x \([0-9]*\) bytes (\([0-9]*\) sliding.* = \([0-9]*\) bytes/\1 \2 \3 \4 \5 \6/p' \
			"$T/$name.b$bt.win.err")
		win_bytes=$6 win_slots=$3 apart=$5
		all_bytes=$(sed -n 's/.* = \([0-9]*\) bytes$/\1/p' "$T/$name.b$bt.all.err")
		bound=$(( (W + bt) / bt + 2 ))
		[ "${apart:-0}" -gt 0 ] && [ "${win_slots:-99}" -le $bound ] &&
			[ "${win_bytes:-0}" -lt "${all_bytes:-0}" ]
		ok $? "$name.b$bt: window slots at most $bound ($win_slots), KV $win_bytes < $all_bytes bytes"
		pos=$(sed -n 's/^kv: \([0-9]*\) positions.*/\1/p' "$T/$name.b$bt.win.err")
		[ -n "$pos" ] && diag "$name blocks of $bt: KV $win_bytes bytes for $pos positions" \
			"($((win_bytes / pos)) B/token) vs $all_bytes keeping all ($((all_bytes / pos)) B/token)"
	done
	# the reference: greedy ids and last prompt logits (vs_engine.py, two
	# lines), then every step's logits
	# (with the tape of the engine's rounding decisions, which vs_engine.py
	# --tapes follows only at ties: a float32 tie may fall either way)
	ENGINE_RUN_TAPE="$T/$name.vs.tape" "$RUN" "$T/$name.uth" "$PROMPT" $N 0 4 all \
		>"$T/$name.vs.full" 2>"$T/$name.vs.err"
	head -n 2 "$T/$name.vs.full" >"$T/$name.vs"
	set -- kv-f16 2e-4
	[ $type = mxfp4 ] && set -- act-quant,kv-f16 1e-5
	"$PYTHON3" "$VS" --model "$T/$name.gguf" --tokens "$PROMPT" --emulate "$1" --tol "$2" \
		--tapes "$name=$T/$name.vs" >"$T/$name.vs.out" 2>&1
	st=$?
	grep -q '^not ok' "$T/$name.vs.out" && st=1
	ok $st "$name: the reference's greedy continuation and last prompt logits"
	[ $st -eq 0 ] || sed 's/^/#   /' "$T/$name.vs.out"
	"$PYTHON3" - "$top_srcdir/tests/ref" "$T/$name.gguf" "$PROMPT" "$T/$name.b4.win" "$1" "$2" \
		>"$T/$name.steps" 2>&1 <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import load, model as M
cfg, Wt = load.load(sys.argv[2], np.float64)
prompt = [int(x) for x in sys.argv[3].split()]
lines = open(sys.argv[4]).read().split('\n')
ids = [int(x) for x in lines[1].split()]
steps = [np.array([float(x) for x in l.split()]) for l in lines[2:2 + len(ids)]]
m = getattr(cfg, 'model_class', M.Model)(cfg, Wt, sys.argv[5].split(','))
L = m.forward(prompt + ids)
worst = max(float(np.abs(s - L[len(prompt) + i]).max() / np.abs(L[len(prompt) + i]).max())
	    for i, s in enumerate(steps))
print('%d steps, worst %.3g' % (len(steps), worst))
sys.exit(0 if len(steps) == len(ids) and worst <= float(sys.argv[6]) else 1)
EOF
	ok $? "$name: every step's logits within $2 of the reference ($(tail -n 1 "$T/$name.steps"))"
done

# sharing and rewinds: the helper's TAP lines as ours
HELPER="$top_builddir/tests/unit/engine-window"
for type in f32 mxfp4; do
	name=gpt-oss-$type
	[ -s "$T/$name.uth" ] && [ -x "$HELPER" ] || continue
	for isa in "" generic; do
		MOE_ISA=$isa "$HELPER" "$T/$name.uth" "$name${isa:+ ($isa)}" >"$T/helper.out" 2>&1
		while IFS= read -r line; do
			case $line in
			"ok "*) ok 0 "${line#ok * - }" ;;
			"not ok "*) ok 1 "${line#not ok * - }" ;;
			"#"*) echo "$line" ;;
			esac
		done <"$T/helper.out"
	done
done

# moe-run: a prompt cache save once the window has passed the prompt is
# refused with a warning (the sliding layers gave its rows back); the
# generation itself succeeds; a save before that works and loads again.
name=gpt-oss-f32
if [ -s "$T/$name.uth" ]; then
	"$BIN/moe-run" -m "$T/$name.uth" -p "hello there" -n 200 --temp 0 --ignore-eos \
		--prompt-cache "$T/pc1" >"$T/run1.out" 2>"$T/run1.err"
	st=$?
	[ $st -eq 0 ] && [ ! -e "$T/pc1" ] && grep -q 'warning: --prompt-cache:.*sliding-window' "$T/run1.err"
	ok $? "moe-run: prompt cache save after the window passed is refused with a warning"
	[ $st -eq 0 ] || sed 's/^/#   /' "$T/run1.err"
	"$BIN/moe-run" -m "$T/$name.uth" -p "hello there" -n 2 --temp 0 \
		--prompt-cache "$T/pc2" >"$T/run2.out" 2>"$T/run2.err" && [ -s "$T/pc2" ] &&
	"$BIN/moe-run" -m "$T/$name.uth" -p "hello there" -n 2 --temp 0 \
		--prompt-cache "$T/pc2" >"$T/run3.out" 2>"$T/run3.err" && cmp -s "$T/run2.out" "$T/run3.out"
	ok $? "moe-run: a save within the window is written and loads to the same output"
fi
done_testing
