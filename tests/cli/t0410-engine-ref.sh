#!/bin/sh
# tests/cli/t0410-engine-ref.sh — the C engine against the independent numpy
# reference (tests/ref) on generated models: every architecture at F32, and
# mixtral / olmoe (and qwen2moe for a few) at every type scripts/gen-model
# writes.  For each model (GGUF -> moe-convert -> UTH, run by
# tests/unit/engine-run) and each kernel set (the default one, MOE_ISA=generic,
# MOE_ISA=avx2 and, where the CPU has AVX-VNNI, MOE_ISA=avxvnni; for BF16
# also avx512bf16 or avx512, whichever the default is not, on a CPU with
# avx512bf16), tests/ref/vs_engine.py checks
#   - the logits of the last prompt position against the reference that
#     emulates the engine's specified arithmetic (tests/ref/README): KV cache
#     rounded to F16, and for quantised weights the activations rounded to the
#     weight type's 8-bit format; tolerance per type below;
#   - that each of the 32 greedily generated ids is the reference's greedy
#     choice for the same prefix (so the continuation is the reference's);
#   - F32/F16/BF16: the logits within 1e-3 of max |logit| of the exact
#     reference (no emulation), the issue's figure.
# Rounding ties the float32 noise may decide either way: each run writes a
# tape of the engine's rounding decisions (engine-run's ENGINE_RUN_TAPE) and
# vs_engine.py --tapes takes the engine's side only where the reference's
# own value is within 1e-5 of the tie (tests/ref/actquant.py's oracle; it
# says how many ties it took, and any other disagreement fails).  Also: prefill token by token
# gives the logits of one batch within 1e-4 and the same ids.
# MOE_T0410_SEED=K adds K to every model's seed (to try other models).
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/engine-lib.sh"

N=32
S=${MOE_T0410_SEED:-0}

# Tolerances: max |engine - reference| / max |reference logit| at the last
# prompt position (tests/ref/README has the measurements: seven sets of
# seeds, generic, AVX2 and AVX-512 kernels, after tie handling):
#   type             emulation           tolerance  measured max   exact ref.
#   f32 f16 bf16     kv-f16              2e-4       6.9e-5         1e-3
#   q8_0 q4_0        act-quant,kv-f16    1e-6       1.1e-7         -
#   q4_k q5_k q6_k
#   q4_k_m           act-quant,kv-f16    1e-5       1.7e-6         -
# (without emulation quantised types differ by 1.3e-2 .. 3.8e-2).
# BF16 weights on the avx512bf16 level (vdpbf16ps) meet activations rounded
# to bfloat16: those runs are judged with act-bf16 emulated, at the same
# 2e-4, and within 1e-2 of the exact reference (bf16 activations move the
# logits by about 5e-3 of max |logit| on these models; README, "Numerics of
# the avx512bf16 level").
BF16_TOL="act-bf16,kv-f16 2e-4 1e-2"
tol() {
	case $1 in
	f32|f16|bf16) echo "kv-f16 2e-4 1e-3" ;;
	q8_0|q4_0) echo "act-quant,kv-f16 1e-6 0" ;;
	*) echo "act-quant,kv-f16 1e-5 0" ;;
	esac
}

# The level the default runs get (MOE_ISA from the caller applies), and
# whether this CPU has avx512bf16 at all.
LEVEL=$("$BIN/moe-run" --version | sed -n 's/^kernels: \([a-z0-9]*\).*/\1/p')
HAS_BF16=$(env -u MOE_ISA "$BIN/moe-run" --version | grep -q '^kernels: avx512bf16' && echo 1)
HAS_VNNI=$(grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && [ "$LEVEL" != avxvnni ] && echo 1)

# model NAME ARCH TYPE SHAPE SEED: generate, convert, run the engine four
# ways and judge; writes result lines ("ok - ...", "not ok - ...", "# ...")
# to stdout, for run_models
model() {
	name=$1 arch=$2 type=$3
	if ! make_model "$@"; then
		echo "not ok - $name: generate and convert"; sed 's/^/#   /' "$T/$name.gen.err"
		return
	fi
	outs="" bf16outs=""
	runs="default|generic generic|avx2 avx2|b1 '' 1"
	# AVX-VNNI's level where the CPU has it (the default is above it)
	[ -n "$HAS_VNNI" ] && runs="$runs|avxvnni avxvnni"
	# BF16 on the avx512bf16 level when the default runs are not on it, and
	# on avx512 (float products) when they are
	if [ "$type" = bf16 ] && [ -n "$HAS_BF16" ]; then
		if [ "$LEVEL" = avx512bf16 ]; then
			runs="$runs|avx512 avx512"
		else
			runs="$runs|bf16lvl avx512bf16"
		fi
	fi
	# sliding windows (gpt-oss, window 4 of the 40 positions): blocks of 4
	# positions, so the sliding layers' rows live in window slots that are
	# given back and reused (kv.c); t0435 has longer runs
	[ "$arch" = gpt-oss ] && runs="$runs|w4 '' 0 4|w4g generic 0 4"
	IFS='|'
	set -f
	set -- $runs
	unset IFS
	set +f
	for run; do
		eval "set -- $run"
		# (a sanitizer build reports undefined behaviour on stderr only)
		if engine "$name" "$@" && ! grep -q 'runtime error' "$T/$name.$1.err"; then
			# prefill token by token (b1) is also compared with one batch
			out="$name/$1=$T/$name.$1.out${3:+@$name/default}"
			if [ "$type" = bf16 ] && [ "${2:-$LEVEL}" = avx512bf16 ]; then
				bf16outs="$bf16outs $out"
			else
				outs="$outs $out"
			fi
		else
			echo "not ok - $name: engine-run ($1)"; sed 's/^/#   /' "$T/$name.$1.err"
		fi
	done
	judge "$name" "$outs" $(tol "$type")
	[ -z "$bf16outs" ] || judge "$name" "$bf16outs" $BF16_TOL
}

set --
for a in llama mixtral qwen2 qwen2moe qwen3 qwen3moe olmoe; do
	set -- "$@" "$a-f32 $a f32 tiny $((S + 1))"
done
seed=$((S + 2))
for a in mixtral olmoe; do
	for t in f16 bf16 q8_0 q4_0; do
		set -- "$@" "$a-$t $a $t tiny $seed"
		seed=$((seed + 1))
	done
	for t in q4_k q5_k q6_k q4_k_m; do
		set -- "$@" "$a-$t $a $t small $seed"
		seed=$((seed + 1))
	done
done
set -- "$@" "qwen2moe-bf16 qwen2moe bf16 tiny $((S + 20))" \
	"qwen2moe-q4_0 qwen2moe q4_0 tiny $((S + 21))" \
	"qwen2moe-q5_k qwen2moe q5_k small $((S + 22))" \
	"qwen2moe-q4_k_m qwen2moe q4_k_m small $((S + 23))"
# issue 14: Granite MoE (multipliers; the shared-expert variant)
set -- "$@" "granitemoe-f32 granitemoe f32 tiny $((S + 30))" \
	"granitemoeshared-f32 granitemoeshared f32 tiny $((S + 31))" \
	"granitemoe-q8_0 granitemoe q8_0 tiny $((S + 32))" \
	"granitemoeshared-bf16 granitemoeshared bf16 tiny $((S + 33))" \
	"granitemoeshared-q4_k granitemoeshared q4_k small $((S + 34))" \
	"granitemoe-f16 granitemoe f16 tiny $((S + 43))"
# issue 14: Phi-3.5-MoE (LayerNorm with biases, attention and output biases,
# sparsemixer router, LongRoPE short factors)
set -- "$@" "phimoe-f32 phimoe f32 tiny $((S + 35))" "phimoe-f16 phimoe f16 tiny $((S + 36))" \
	"phimoe-q8_0 phimoe q8_0 tiny $((S + 37))" "phimoe-q4_k phimoe q4_k small $((S + 38))"
# issue 14: gpt-oss (sinks, sliding window 4 < the 40 positions, attention,
# router and expert biases, clamped SwiGLU, YaRN with fractional ramp ends;
# MXFP4 experts)
set -- "$@" "gpt-oss-f32 gpt-oss f32 tiny $((S + 39))" "gpt-oss-mxfp4 gpt-oss mxfp4 tiny $((S + 40))" \
	"gpt-oss-q8_0 gpt-oss q8_0 tiny $((S + 41))" "gpt-oss-q4_k gpt-oss q4_k small $((S + 42))" \
	"gpt-oss-f16 gpt-oss f16 tiny $((S + 44))"

run_models "$@"
done_testing
