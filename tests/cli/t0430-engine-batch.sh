#!/bin/sh
# tests/cli/t0430-engine-batch.sh — batch invariance of the engine: for
# every architecture (F32) and mixtral / olmoe at F16, BF16, Q8_0, Q4_0,
# Q4_K and the Q4_K_M mix (and the deepseek2 forms: latent cache rows), on every kernel set (default, MOE_ISA=avx2,
# MOE_ISA=generic, and MOE_ISA=avxvnni on a CPU with AVX-VNNI), tests/unit/engine-batch checks that a sequence's logits
# and greedy ids are bit-identical alone and among 16 other sequences, with
# other batch sizes, thread counts and prompt chunkings; that a sequence
# sharing its prompt's blocks from the pool gets the same logits; that
# every block returns to the pool; pool exhaustion; cancel mid-prefill.
. "$top_srcdir/tests/cli/lib.sh"

HELPER="$top_builddir/tests/unit/engine-batch"
CONV="$BIN/moe-convert"
GEN="$top_srcdir/scripts/gen-model"
[ -x "$HELPER" ] || skip_all "tests/unit/engine-batch not built (make check builds it)"

isas="default avx2 generic"
grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && isas="$isas avxvnni"
seed=40
for spec in "llama f32 tiny" "mixtral f32 tiny" "qwen2 f32 tiny" "qwen2moe f32 tiny" \
	    "qwen3 f32 tiny" "qwen3moe f32 tiny" "olmoe f32 tiny" \
	    "mixtral f16 tiny" "mixtral bf16 tiny" "mixtral q8_0 tiny" "mixtral q4_0 tiny" \
	    "mixtral q4_k small" "mixtral q4_k_m small" "olmoe q8_0 tiny" "olmoe q4_k_m small" \
	    "granitemoe f32 tiny" "granitemoeshared q8_0 tiny" "phimoe f32 tiny" "phimoe q4_k small" \
	    "gpt-oss f32 tiny" "gpt-oss mxfp4 tiny" \
	    "deepseek2 f32 tiny" "deepseek2-v2 q8_0 tiny" "deepseek3 f16 tiny" "deepseek3 q4_k small"; do
	set -- $spec
	name=$1-$2
	seed=$((seed + 1))
	if ! "$PYTHON3" "$GEN" --arch "$1" --type "$2" --shape "$3" --seed $seed --out "$T/$name" \
			>"$T/gen.err" 2>&1 || ! "$CONV" "$T/$name.gguf" "$T/$name.uth" >>"$T/gen.err" 2>&1; then
		ok 1 "$name: generate and convert"; sed 's/^/#   /' "$T/gen.err"
		continue
	fi
	# BF16 is the one type whose avx512 kernels differ from the default
	# level's on a CPU with avx512bf16 (vdpbf16ps): run both
	these=$isas
	[ "$2" = bf16 ] && these="$these avx512"
	for isa in $these; do
		if [ $isa = default ]; then
			"$HELPER" "$T/$name.uth" "$name" >"$T/out" 2>&1
		else
			MOE_ISA=$isa "$HELPER" "$T/$name.uth" "$name ($isa)" >"$T/out" 2>&1
		fi
		replay "$T/out" ""
	done
	rm -f "$T/$name.gguf" "$T/$name.uth"
done
done_testing
