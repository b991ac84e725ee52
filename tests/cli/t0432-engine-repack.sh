#!/bin/sh
# tests/cli/t0432-engine-repack.sh — repacked models (UTH layout 1, r4: Q8_0
# and Q4_K matrices four rows per block column) written by moe-convert
# --repack and moe-quant --repack:
#   - moe-convert --info shows the layouts;
#   - on every kernel set (default, MOE_ISA=avxvnni, avx2, generic) the
#     logits of the prompt (one prefill batch, and token by token) and after
#     each of 8 greedy steps are the plain model's, byte for byte
#     (tests/unit/engine-run prints %.9g, which round-trips a float);
#   - the numpy reference (tests/ref/vs_engine.py, Q8_0 tolerance) accepts
#     the repacked model's logits and greedy ids;
#   - the expert store (--mem-budget min) streams a repacked model's experts
#     and gives the resident plain model's text;
#   - moe-quant --repack to a file and to a pipe give the same bytes, and the
#     plain model's logits; moe-quant refuses a repacked input, naming it.
# (Malformed layout values in a record: tests/unit/t-uth.)
. "$top_srcdir/tests/cli/lib.sh"

RUN="$top_builddir/tests/unit/engine-run"
CONV="$BIN/moe-convert"
QUANT="$BIN/moe-quant"
GEN="$top_srcdir/scripts/gen-model"
VS="$top_srcdir/tests/ref/vs_engine.py"
[ -x "$RUN" ] || skip_all "tests/unit/engine-run not built (make check builds it)"
PROMPT="1 7 3 9 4 200 11 5"

# same NAME: plain and repacked NAME give the same engine-run output on
# every kernel set, batched and token by token
same() {
	for isa in default avxvnni avx2 generic; do
		for batch in 256 1; do
			for v in plain r4; do
				if [ $isa = default ]; then
					"$RUN" "$T/$1.$v.uth" "$PROMPT" 8 $batch 64 all >"$T/$v.out" 2>"$T/$v.err"
				else
					MOE_ISA=$isa "$RUN" "$T/$1.$v.uth" "$PROMPT" 8 $batch 64 all \
						>"$T/$v.out" 2>"$T/$v.err"
				fi || { sed 's/^/#   /' "$T/$v.err"; : >"$T/$v.out"; }
			done
			[ -s "$T/plain.out" ] && cmp -s "$T/plain.out" "$T/r4.out"
			ok $? "$1 ($isa, batch $batch): repacked logits == plain logits, byte for byte"
		done
	done
}

seed=60
for spec in "mixtral q8_0" "olmoe q8_0" "qwen2moe q8_0" "granitemoeshared q8_0" \
	    "deepseek2-v2 q8_0" "gpt-oss q8_0" "phimoe q8_0" \
	    "mixtral q4_k" "olmoe q4_k_m" "deepseek2-v2 q4_k" "qwen3moe q4_k_m"; do
	set -- $spec
	name=$1-$2
	seed=$((seed + 1))
	case $2 in q8_0) tol=1e-6 ;; *) tol=1e-5 ;; esac
	if ! "$PYTHON3" "$GEN" --arch "$1" --type "$2" --shape small --seed $seed --out "$T/$name" \
			>"$T/gen.err" 2>&1 ||
	   ! "$CONV" "$T/$name.gguf" "$T/$name.plain.uth" >>"$T/gen.err" 2>&1 ||
	   ! "$CONV" --repack "$T/$name.gguf" "$T/$name.r4.uth" >>"$T/gen.err" 2>&1; then
		ok 1 "$name: generate and convert (plain and --repack)"; sed 's/^/#   /' "$T/gen.err"
		continue
	fi
	r4=$("$CONV" --info --json "$T/$name.r4.uth" | "$PYTHON3" -c \
		'import json,sys; print(json.load(sys.stdin)["layouts"].get("r4", 0))')
	[ "$r4" -gt 0 ] 2>/dev/null
	ok $? "$name: --info --json counts $r4 r4 tensors"
	"$CONV" --info "$T/$name.r4.uth" | grep -q "^layouts: .* r4 $r4\$"
	ok $? "$name: --info text: $("$CONV" --info "$T/$name.r4.uth" | grep '^layouts')"
	same "$name"
	# with a tape of the engine's roundings: the reference takes its side
	# at rounding ties only (tests/ref/README)
	ENGINE_RUN_TAPE="$T/r4.out.tape" "$RUN" "$T/$name.r4.uth" "$PROMPT" 32 >"$T/r4.out" \
		2>"$T/r4.err"
	"$PYTHON3" "$VS" --model "$T/$name.gguf" --tokens "$PROMPT" --emulate act-quant,kv-f16 \
		--tol $tol --plain-tol 0 --self-tol 1e-4 --tapes "$name-r4=$T/r4.out" >"$T/vs.out" \
		2>"$T/vs.err"
	[ $? -le 1 ] && [ ! -s "$T/vs.err" ] && grep -q "^ok" "$T/vs.out"
	ok $? "$name: vs_engine.py ran on the repacked model"
	sed 's/^/#   /' "$T/vs.err" | head -5
	replay "$T/vs.out" "$name repacked vs the numpy reference: "
	rm -f "$T/$name.gguf"
done

# The expert store reads an expert's tensors with one read: repacked ones too.
name=mixtral-q8_0
if [ -f "$T/$name.r4.uth" ]; then
	"$BIN/moe-run" -m "$T/$name.plain.uth" -p "The quick brown fox" -n 16 --temp 0 --ignore-eos \
		>"$T/ref.txt" 2>"$T/err"
	"$BIN/moe-run" -m "$T/$name.r4.uth" -p "The quick brown fox" -n 16 --temp 0 --ignore-eos \
		--mem-budget min >"$T/out.txt" 2>>"$T/err"
	[ $? -eq 0 ] && [ -s "$T/ref.txt" ] && cmp -s "$T/ref.txt" "$T/out.txt"
	ok $? "$name: --mem-budget min on the repacked model: the plain model's text"
	sed 's/^/#   /' "$T/err" | head -5
fi

# moe-quant --repack, from F16: q8_0 and the q4_k_m recipe (q4_k, q6_k and
# q8_0 matrices; the q6_k ones stay plain).
name=olmoe-f16
if "$PYTHON3" "$GEN" --arch olmoe --type f16 --shape small --seed 70 --out "$T/$name" \
		>"$T/gen.err" 2>&1 && "$CONV" "$T/$name.gguf" "$T/$name.uth" >>"$T/gen.err" 2>&1; then
	for t in q8_0 q4_k_m; do
		"$QUANT" -q -t $t "$T/$name.uth" "$T/$t.plain.uth" 2>"$T/err" &&
		"$QUANT" -q -t $t --repack "$T/$name.uth" "$T/$t.r4.uth" 2>>"$T/err" &&
		"$QUANT" -q -t $t --repack "$T/$name.uth" - 2>>"$T/err" >"$T/$t.pipe.uth"
		ok $? "moe-quant -t $t [--repack] to a file and to a pipe"
		sed 's/^/#   /' "$T/err"
		cmp -s "$T/$t.r4.uth" "$T/$t.pipe.uth"
		ok $? "moe-quant -t $t --repack: the piped output is the file's bytes"
		"$CONV" --info "$T/$t.r4.uth" | grep -q "^layouts: .* r4 [1-9]"
		ok $? "moe-quant -t $t --repack wrote r4 tensors"
		same $t
	done
	"$QUANT" -q -t q8_0 "$T/q8_0.r4.uth" "$T/q.again.uth" 2>"$T/err"
	st=$?
	[ $st -eq 1 ] && grep -q "q8_0.r4.uth: tensor '.*' is repacked (layout r4)" "$T/err" &&
		[ ! -e "$T/q.again.uth" ]
	ok $? "moe-quant refuses a repacked input: $(cat "$T/err")"
else
	ok 1 "$name: generate and convert"; sed 's/^/#   /' "$T/gen.err"
fi
done_testing
