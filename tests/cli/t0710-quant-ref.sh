#!/bin/sh
# t0710-quant-ref.sh — moe-quant's output against the independent numpy code
# of tests/ref: (1) each type's error on a generated model's F32 weights,
# decoded by tests/ref/quants.py, below a uniform-grid bound, and for the
# scale-only 32-element types within 2% of a brute-force search and below
# round to nearest (tests/ref/quant_check.py errors); (2) quantised models
# run by the engine match the numpy reference forward pass on the same
# quantised weights (re-packed as GGUF by quant_check.py regguf), with the
# emulation and tolerance t0410-engine-ref.sh uses for quantised types.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/engine-lib.sh"
Q="$BIN/moe-quant"
QC="$top_srcdir/tests/ref/quant_check.py"
[ -x "$Q" ] || skip_all "tools/moe-quant not built"

"$PYTHON3" "$GEN" --arch olmoe --shape small --type f32 --seed 7 --out "$T/o" >/dev/null 2>&1 &&
	"$CONV" "$T/o.gguf" "$T/o.uth" 2>/dev/null
ok $? "generate olmoe small f32"

# (1) errors against numpy
for t in q4_0 q4_1 q5_0 q5_1 q8_0 iq4_nl q3_k q4_k q5_k q6_k iq4_xs q2_k; do
	"$Q" -q -t f32 --tensor-type "attn_q|ffn_gate=$t" "$T/o.uth" "$T/o-$t.uth" ||
		{ ok 1 "$t: quantise"; continue; }
	"$PYTHON3" "$QC" errors "$T/o.uth" "$T/o-$t.uth" $t blk.0.attn_q.weight \
		blk.1.ffn_gate.1.weight >"$T/res" 2>&1
	st=$?
	while IFS= read -r line; do
		case $line in
		"ok - "*) ok 0 "${line#ok - }" ;;
		"not ok - "*) ok 1 "${line#not ok - }" ;;
		*) diag "$line" ;;
		esac
	done <"$T/res"
	[ $st -le 1 ] && ! grep -q Traceback "$T/res"; ok $? "$t: quant_check.py ran"
done

# (2) engine = reference on quantised weights
model() { # NAME ARCH SEED RECIPE
	name=$1
	"$PYTHON3" "$GEN" --arch "$2" --shape small --type f16 --seed "$3" --out "$T/$name" \
		>/dev/null 2>&1 && "$CONV" "$T/$name.gguf" "$T/$name.uth" 2>/dev/null &&
	"$Q" -q -t "$4" "$T/$name.uth" "$T/$name-q.uth" &&
	"$PYTHON3" "$QC" regguf "$T/$name.gguf" "$T/$name-q.uth" "$T/$name-q.gguf"
	ok $? "$name: generate, quantise ($4), re-pack as GGUF"
	# with a tape of the engine's roundings: the reference takes its side
	# at rounding ties only (tests/ref/README)
	ENGINE_RUN_TAPE="$T/$name.out.tape" "$RUN" "$T/$name-q.uth" "$PROMPT" 32 >"$T/$name.out" \
		2>"$T/$name.err"
	ok $? "$name: engine-run"
	"$PYTHON3" "$VS" --model "$T/$name-q.gguf" --tokens "$PROMPT" --emulate act-quant,kv-f16 \
		--tol 1e-5 --self-tol 1e-4 --tapes "$name=$T/$name.out" >"$T/$name.vs" 2>&1
	st=$?
	while IFS= read -r line; do
		case $line in
		"ok - "*) ok 0 "${line#ok - }" ;;
		"not ok - "*) ok 1 "${line#not ok - }" ;;
		*) diag "$line" ;;
		esac
	done <"$T/$name.vs"
	[ $st -le 1 ] && ! grep -q Traceback "$T/$name.vs"; ok $? "$name: vs_engine.py ran"
}
model olmoe-q4_k_m olmoe 21 q4_k_m
model olmoe-q2_k olmoe 22 q2_k
model qwen2moe-q3_k_m qwen2moe 23 q3_k_m
model mixtral-iq4_xs mixtral 24 iq4_xs
model qwen3moe-q5_k_s qwen3moe 25 q5_k_s
model llama-q6_k llama 26 q6_k
done_testing
