#!/bin/sh
# tests/cli/t0412-engine-deepseek2.sh — deepseek2 in the engine against the
# independent numpy reference (tests/ref/arch_deepseek2.py), as t0410 does
# for the other architectures: the three forms scripts/gen-model writes
#   deepseek2     V2-Lite: direct queries, softmax, greedy top-k, 2 shared
#                 experts, a leading dense layer, YaRN x4 (mscale 0.5)
#   deepseek2-v2  V2: low-rank queries with their norm, group-limited top-k
#                 (4 groups ranked by their best score, 2 kept), x2 scaling
#   deepseek3     V3/R1: sigmoid scores, the score-correction bias for the
#                 choice only, groups ranked by their best two, normalised
#                 weights, x2.5 scaling
# at F32, F16, Q8_0 (tiny) and Q4_K (small), each with the default kernels,
# MOE_ISA=generic, MOE_ISA=avx2 and, where the CPU has AVX-VNNI,
# MOE_ISA=avxvnni (the default is AVX-512 where the CPU has it; its bf16
# level changes only BF16 weights, which these models do not have), and prefill token by token against one batch.  The engine caches the
# latent and the rope key and attends in the absorbed form; the reference's
# default is the absorbed form too, and its selftest (t0400) checks absorbed
# = expanded within 1e-10.  Tolerances: t0410's, except the exact
# reference's for F32/F16 and Q4_K's (measured and explained below).  Also:
# the prompt cache file holds one row of
# kv_lora_rank + rope values per position and layer; a Q8_0 cache runs where
# that row is whole blocks of 32 and is refused, naming the fields, where not.
. "$top_srcdir/tests/cli/lib.sh"

RUN="$top_builddir/tests/unit/engine-run"
CONV="$BIN/moe-convert"
GEN="$top_srcdir/scripts/gen-model"
VS="$top_srcdir/tests/ref/vs_engine.py"
[ -x "$RUN" ] || skip_all "tests/unit/engine-run not built (make check builds it)"
[ -x "$CONV" ] || skip_all "tools/moe-convert not built"
PROMPT="1 7 3 9 4 200 11 5"
N=32

# Tolerances (max |engine - reference| / max |reference logit|):
#   type      emulation         tolerance  measured max  exact reference
#   f32 f16   kv-f16            2e-4       4.2e-5        3e-3 (measured 1.75e-3)
#   q8_0      act-quant,kv-f16  1e-6       below it, as t0410
#   q4_k      act-quant,kv-f16  5e-2       3.1e-2
# The exact reference (no F16 cache) is further than t0410's 1e-3 for the
# V3 form: the latent's F16 rounding is every head's key and value at once.
# This is the cache format, not the engine: the reference with kv-f16
# against the exact reference alone (no engine) differs by 1.74e-3 on the
# V3 F32 model below (seed 66; the other five F32/F16 models 2.2e-4 ..
# 5.9e-4), as t0410's README notes for mixtral seed 400 (1.12e-3).
# Q4_K: these models amplify float32 noise.  Q8_K activation roundings over
# 256 values and the F16 latent cache, which every head reads, flip near
# their ties differently on each ISA, and some chains of such flips are more
# than vs_engine.py's tie search reconstructs.  Measured with seeds 63 67 71
# 100 101 102 per form (three ISAs each, 54 runs, during this work): the
# strict 1e-5 passed on every ISA for 5 of 6 V2-Lite models, 4 of 6 V2 and
# 5 of 6 V3; 6 runs failed, each with another ISA passing on the same
# model, by 2.0e-2 .. 3.1e-2; with the suite's seeds below the V2-Lite and
# V3 forms are at 2.7e-2 and 2.1e-2 on some or all ISAs (kernel changes
# move these).  At main 1.2 h before the end of stop 20 (with the avxvnni
# level): V2-Lite seed 69 2.68e-2 on avx2/avxvnni/avx512 (generic 2.4e-7),
# V2 seed 70 below 2.2e-7 on all four, V3 seed 71 2.96e-2 on generic only
# (the others 1.6e-7); V2 seed 67 2.03e-2 on all but generic.
# Traced again with every product input of the engine dumped (V2, seed
# 67, AVX2): two independent ties, layer 1's rope key in the cache
# (position 5, 4.7e-8 from its tie) and the float16 scale of attn_k_b's
# Q8_0 input (head 0, position 7: the engine's d lies exactly on a float16
# midpoint), which the tape did not know; neither alone shrinks the error
# by the search's 30%.  vs_engine.py now names scale ties and tries pairs
# and chains: seed 67 on AVX2 passes 1e-5 (1.96e-7), V3 seed 71 on
# generic too (1.2e-7).  Still failing 1e-5: V2-Lite seed 69 on
# avx2/avxvnni/avx512 (2.68e-2), a chain of at least two code ties (layer
# 0's ffn_down input at position 2, then attn_output's at position 6) and
# more after them.  So Q4_K is held to 5e-2 —
# still far below what a wrong per-head product or router gives (order 1)
# — and each greedy id must be the reference's choice or within 5e-2 of it;
# F32, F16 and Q8_0 check the arithmetic strictly.
tol() {
	case $1 in
	f32|f16|bf16) echo "kv-f16 2e-4 3e-3" ;;
	q8_0|q4_0) echo "act-quant,kv-f16 1e-6 0" ;;
	*) echo "act-quant,kv-f16 5e-2 0" ;;
	esac
}

engine() { # engine NAME TAG [ISA] [BATCH KV_BLOCK]
	if [ -n "${3:-}" ]; then
		MOE_ISA=$3 "$RUN" "$T/$1.uth" "$PROMPT" $N ${4:-} ${5:-} >"$T/$1.$2.out" 2>"$T/$1.$2.err"
	else
		"$RUN" "$T/$1.uth" "$PROMPT" $N ${4:-} ${5:-} >"$T/$1.$2.out" 2>"$T/$1.$2.err"
	fi
}

model() { # model NAME ARCH TYPE SHAPE SEED -> result lines on stdout
	name=$1 arch=$2 type=$3 shape=$4 seed=$5
	if ! "$PYTHON3" "$GEN" --arch "$arch" --type "$type" --shape "$shape" --seed "$seed" \
			--out "$T/$name" >"$T/$name.gen.err" 2>&1 ||
	   ! "$CONV" "$T/$name.gguf" "$T/$name.uth" >>"$T/$name.gen.err" 2>&1; then
		echo "not ok - $name: generate and convert"; sed 's/^/#   /' "$T/$name.gen.err"
		return
	fi
	outs=""
	# b1: prefill token by token, against one batch (bit for bit); k4: KV
	# blocks of 4 positions (the 40 positions cross 9 block boundaries;
	# the sums over a block's latents change with its size: only against
	# the reference)
	vnni=; grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && vnni=yes
	for run in "default" "generic generic" "avx2 avx2" ${vnni:+"avxvnni avxvnni"} "b1 '' 1" "k4 '' 0 4"; do
		eval "set -- $run"
		if engine "$name" "$@" && ! grep -q 'runtime error' "$T/$name.$1.err"; then
			self=; [ $1 = b1 ] && self=@$name/default
			outs="$outs $name/$1=$T/$name.$1.out$self"
		else
			echo "not ok - $name: engine-run ($1)"; sed 's/^/#   /' "$T/$name.$1.err"
		fi
	done
	# the cache: one F16 row of kv_lora + rope values per position and
	# layer (3 layers; tiny 32 + 8, small 256 + 32), 4 positions a block
	row=80; [ "$shape" = small ] && row=576
	grep -q "blocks x $((4 * 3 * row)) bytes" "$T/$name.k4.err" &&
		echo "ok - $name: KV blocks of $((4 * 3 * row)) bytes (4 positions x 3 layers x $row)" ||
		{ echo "not ok - $name: KV block size"; sed 's/^/#   /' "$T/$name.k4.err"; }
	set -- $(tol "$type")
	"$PYTHON3" "$VS" --model "$T/$name.gguf" --tokens "$PROMPT" --emulate "$1" --tol "$2" \
		--plain-tol "$3" --self-tol 1e-4 $outs 2>"$T/$name.vs.err"
	[ $? -le 1 ] && [ ! -s "$T/$name.vs.err" ] ||
		{ echo "not ok - $name: vs_engine.py"; sed 's/^/#   /' "$T/$name.vs.err"; }
}

set --
seed=60
for a in deepseek2 deepseek2-v2 deepseek3; do
	for t in f32 f16 q8_0; do
		set -- "$@" "$a-$t $a $t tiny $seed"
		seed=$((seed + 1))
	done
done
for a in deepseek2 deepseek2-v2 deepseek3; do
	set -- "$@" "$a-q4_k $a q4_k small $seed"
	seed=$((seed + 1))
done
i=0
for spec in "$@"; do
	model $spec >"$T/res.$i" 2>&1 &
	i=$((i + 1))
	[ $((i % 2)) -eq 0 ] && wait
done
wait
j=0
while [ $j -lt $i ]; do
	replay "$T/res.$j"
	j=$((j + 1))
done

# The cache holds the latent: the prompt cache file (moe-run(1)) has one row
# of (kv_lora_rank + rope) F16 values per position and layer.  small:
# 256 + 32 values = 576 bytes; tiny: 32 + 8 = 80 bytes.
OPTS="-n 6 --temp 0 --ignore-eos"
"$BIN/moe-run" -m "$T/deepseek3-q4_k.uth" -p "a b c d e f g" $OPTS >"$T/plain.txt" 2>"$T/plain.err"
ok $? "moe-run on deepseek3 (small, q4_k): $(head -c 160 "$T/plain.err")"
"$BIN/moe-run" -m "$T/deepseek3-q4_k.uth" -p "a b c d e f g" $OPTS --prompt-cache "$T/c.kv" \
	>"$T/a.txt" 2>/dev/null && cmp -s "$T/a.txt" "$T/plain.txt"
ok $? "... with --prompt-cache (saved): same text"
"$BIN/moe-run" -m "$T/deepseek3-q4_k.uth" -p "a b c d e f g" $OPTS --prompt-cache "$T/c.kv" \
	--verbose >"$T/b.txt" 2>"$T/b.err" && cmp -s "$T/b.txt" "$T/plain.txt" &&
	grep -q "prompt [0-9]* tokens (1 evaluated)" "$T/b.err"
ok $? "... loaded: same text, one prompt token computed"
for m in deepseek3-q4_k:576 deepseek2-f32:80; do
	"$BIN/moe-run" -m "$T/${m%:*}.uth" -p "a b c d e f g" $OPTS --prompt-cache "$T/${m%:*}.kv" \
		>/dev/null 2>&1
	"$PYTHON3" - "$T/${m%:*}.kv" "${m#*:}" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
mid, kvt, nl, rb, nt, cs, rs, xx = struct.unpack_from('<QIIIIQQQ', b, 16)
assert rb == int(sys.argv[2]), rb
assert rs == nt * 4 + nl * nt * rb, (rs, nt, nl, rb)
PY
	ok $? "${m%:*}: prompt cache rows of ${m#*:} bytes, one per position and layer"
done

# Q8_0 cache: small's row (kv_lora 256 + rope 32 = 288 values) is 9 blocks of
# 32; tiny's (40) is not.  On small F32 models (no activation rounding), the
# logits with a Q8_0 cache against those with the F16 cache, relative to max
# |logit| — measured: deepseek2-v2 1.4e-2, deepseek3 1.9e-2 (mixtral and
# olmoe small: 1.0e-2), within 5e-2; the V2-Lite form 0.16, because one
# token's second expert at layer 1 changes (softmax top-k, no groups): there
# only the same greedy choice is asked for.
for a in deepseek2 deepseek2-v2 deepseek3; do
	n=$a-s
	if ! "$PYTHON3" "$GEN" --arch $a --type f32 --shape small --seed 80 --out "$T/$n" \
			>"$T/$n.gen.err" 2>&1 ||
	   ! "$CONV" "$T/$n.gguf" "$T/$n.uth" >>"$T/$n.gen.err" 2>&1; then
		ok 1 "$n: generate and convert"; sed 's/^/#   /' "$T/$n.gen.err"
		continue
	fi
	"$RUN" "$T/$n.uth" "$PROMPT" 0 >"$T/$n.f16" 2>"$T/$n.err" &&
		ENGINE_RUN_KV_TYPE=q8_0 "$RUN" "$T/$n.uth" "$PROMPT" 0 >"$T/$n.q8" 2>>"$T/$n.err"
	ok $? "$n: the engine runs with a Q8_0 cache: $(head -c 160 "$T/$n.err")"
	tol=5e-2
	[ $a = deepseek2 ] && tol=1
	"$PYTHON3" - "$T/$n.f16" "$T/$n.q8" $tol <<'PY'
import sys
a, b = ([float(v) for v in open(p).readline().split()] for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b)) / max(abs(x) for x in a)
print('# max |q8_0 - f16| / max |f16| = %.3g' % d)
sys.exit(not (d <= float(sys.argv[3]) and a.index(max(a)) == b.index(max(b))))
PY
	ok $? "... logits within $tol of the F16 cache's, the same greedy choice"
done
OPTS="-n 6 --temp 0 --ignore-eos"
"$BIN/moe-run" -m "$T/deepseek2-f32.uth" -p "a b" $OPTS --kv-type q8_0 >/dev/null 2>"$T/err"
st=$?
[ $st -eq 1 ] && grep -q "kv_lora_rank + rope_head_dim" "$T/err" && grep -q "(this model's are 40)" "$T/err"
ok $? "deepseek2 (tiny): --kv-type q8_0 refused (exit $st): $(head -c 200 "$T/err")"
done_testing
