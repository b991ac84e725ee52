#!/bin/sh
# tests/cli/t0400-ref-selftest.sh — checks of the independent numpy reference
# (tests/ref) itself, before it is trusted to judge the engine:
#  - block decoders, RoPE and whole tiny models against values worked out by
#    hand (tests/ref/selftest.py);
#  - for every architecture, the generator's GGUF and HF twins give the same
#    logits and the same 32-token greedy continuation: the GGUF path (llama.cpp
#    names, q/k rows permuted for llama, interleaved-pair RoPE, quantised
#    blocks decoded by tests/ref/quants.py) against the HF path (HF names,
#    natural row order, rotate-half RoPE, values as the generator decoded them);
#    also with linear / YaRN RoPE scaling, F16 / BF16 / quantised weights and
#    tied embeddings;
#  - the KV-cache path equals recomputation; greedy output is deterministic;
#    the CLI's output forms agree and bad input fails cleanly;
#  - --emulate (act-quant, kv-f16, act-bf16): the activation quantisers, the
#    f16 and bf16 roundings on values worked out by hand, the rounding-tie bookkeeping
#    vs_engine.py uses, and which products see quantised inputs;
#  - the second family (deepseek2 in its V2-Lite / V2 / V3 forms, gpt-oss,
#    phimoe, granitemoe with and without a shared expert): GGUF and HF twins
#    agree (F32, F16, Q8_0, Q4_K, MXFP4 experts), each architecture-specific
#    piece against a hand-computed case, absorbed MLA = expanded MLA, the
#    sliding window changes outputs beyond the window and not within it,
#    DeepSeek's YaRN attention scale from both files, KV cache =
#    recomputation, and config.json values the reference refuses.
. "$top_srcdir/tests/cli/lib.sh"

REF="$top_srcdir/tests/ref/ref.py"
SELF="$top_srcdir/tests/ref/selftest.py"
GEN="$top_srcdir/scripts/gen-model"
PROMPT="1 7 3 9 4 200 11 5"
TOL=1e-6          # max |GGUF - HF| relative to max |logit|, float64

check 'block decoders: hand-built blocks, loop decoder, generator decoder' -- \
	"$PYTHON3" "$SELF" quants
check 'rope: interleaved / neox pairs, linear and YaRN scaling by hand' -- \
	"$PYTHON3" "$SELF" rope
check 'hand-computed models: attention + RoPE + SwiGLU, MoE routing, shared expert' -- \
	"$PYTHON3" "$SELF" hand "$T"

# twin NAME GEN-ARGS...: generate NAME.gguf + NAME.hf, run both, compare
twin() {
	name=$1; shift
	if ! "$PYTHON3" "$GEN" --format both --out "$T/$name" "$@" 2>"$T/gen.err"; then
		ok 1 "$name: gen-model $*"; sed 's/^/#   /' "$T/gen.err"; return
	fi
	pair "$name" "$T/$name"
}

# pair NAME PREFIX: ref.py on PREFIX.gguf and PREFIX.hf must agree
pair() {
	name=$1 p=$2
	for f in gguf hf; do
		if ! "$PYTHON3" "$REF" --model "$p.$f" --tokens "$PROMPT" --logits "$p.$f.npy" \
				--greedy 32 >"$p.$f.greedy" 2>"$T/ref.err"; then
			ok 1 "$name: ref.py on $f"; sed 's/^/#   /' "$T/ref.err"; return
		fi
	done
	check "$name: GGUF and HF logits agree" -- \
		"$PYTHON3" "$SELF" compare "$p.gguf.npy" "$p.hf.npy" $TOL
	is "$(cat "$p.gguf.greedy")" "$(cat "$p.hf.greedy")" \
		"$name: same 32-token greedy continuation"
}

for a in llama mixtral qwen2 qwen2moe qwen3 qwen3moe olmoe; do
	twin "$a" --arch "$a" --seed 1
done

# weight types: HF holds the values the generator's decoders produce
twin llama-q8_0 --arch llama --type q8_0 --seed 2
twin qwen2moe-q4_0 --arch qwen2moe --type q4_0 --seed 3
twin qwen3moe-q4_k --arch qwen3moe --shape small --type q4_k --seed 4
twin mixtral-q5_k --arch mixtral --shape small --type q5_k --seed 5
twin olmoe-q6_k --arch olmoe --shape small --type q6_k --seed 6
twin llama-q4_k_m --arch llama --shape small --type q4_k_m --seed 7
twin qwen2-f16 --arch qwen2 --type f16 --seed 8
twin qwen3-bf16 --arch qwen3 --type bf16 --seed 9
twin llama-tied --arch llama --tied --seed 10
twin qwen3moe-tied --arch qwen3moe --tied --seed 11

# the second family (tests/ref/arch_*.py): every check in one process
# (selftest2.py family2: generation, both loaders, hand-computed pieces,
# MLA forms, the sliding window, the cache, refused configs), one TAP line each
"$PYTHON3" "$SELF" family2 "$T" >"$T/family2" 2>"$T/family2.err"
st=$?
while IFS= read -r line; do
	case $line in
	'ok '*) ok 0 "${line#ok }" ;;
	'not ok '*) ok 1 "${line#not ok }" ;;
	*) echo "$line" ;;
	esac
done <"$T/family2"
[ -s "$T/family2.err" ] && sed 's/^/#   /' "$T/family2.err" | head -20
grep -q '^ok KV cache' "$T/family2" && [ $st -le 1 ]
ok $? 'family2 checks ran to the end'
"$PYTHON3" "$REF" --model "$T/gpt-oss-q4_k-mxfp4.gguf" --tokens "$PROMPT" --greedy 8 \
	--emulate act-quant,kv-f16 >"$T/emu2.greedy" 2>"$T/ref.err"
is "$?:$(wc -w <"$T/emu2.greedy")" "0:8" 'ref.py --emulate on gpt-oss with MXFP4 experts: 8 ids'
for f in gguf hf; do
	"$PYTHON3" "$REF" --model "$T/deepseek3.$f" --tokens "$PROMPT" --greedy 4 >"$T/ds.$f" 2>"$T/ref.err"
	is "$?:$(wc -w <"$T/ds.$f")" "0:4" "ref.py on deepseek3.$f: 4 ids"
done
is "$(cat "$T/ds.gguf")" "$(cat "$T/ds.hf")" 'ref.py: deepseek3 GGUF and HF continue alike'
"$PYTHON3" "$REF" --model "$T/deepseek3.gguf" --tokens "$PROMPT" --greedy 4 --mla expanded \
	>"$T/ds.x" 2>"$T/ref.err"
is "$?:$(cat "$T/ds.x")" "0:$(cat "$T/ds.gguf")" 'ref.py --mla expanded: the same continuation'
"$PYTHON3" "$REF" --model "$T/phimoe.gguf" --tokens 1 --mla expanded >/dev/null 2>"$T/err"
is "$?:$(grep -c 'no latent attention' "$T/err")" "1:1" 'ref.py --mla on phimoe: exit 1, says why'

# --emulate (the engine's arithmetic: tests/ref/README): quantisers and
# float16 rounding by hand, then on a K-quant and an F32 model
check 'emulation: Q8_0/Q8_1/Q8_K quantisers, f16 rounding, ties, wiring' -- \
	"$PYTHON3" "$SELF" emulate "$T/qwen3moe-q4_k.gguf" "$T/qwen3moe.gguf"
"$PYTHON3" "$REF" --model "$T/qwen3moe-q4_k.gguf" --tokens "$PROMPT" --greedy 32 \
	--emulate act-quant,kv-f16 --logits "$T/emu.npy" >"$T/emu.greedy" 2>"$T/ref.err"
is "$?:$(wc -w <"$T/emu.greedy")" "0:32" 'ref.py --emulate act-quant,kv-f16: 32 ids'
check 'emulated logits within 10% of the exact ones' -- \
	"$PYTHON3" "$SELF" compare "$T/emu.npy" "$T/qwen3moe-q4_k.gguf.npy" 0.1
"$PYTHON3" "$REF" --model "$T/qwen3moe.gguf" --tokens 1 --emulate act-quant,bogus \
	>/dev/null 2>"$T/err"
is "$?" 2 '--emulate with an unknown name: usage error'

# RoPE scaling declared in each format's own way (a long prompt is not
# needed: every position's angle changes)
for s in "llama linear 4" "llama yarn 8" "qwen2moe yarn 4" "olmoe linear 2"; do
	set -- $s
	if "$PYTHON3" "$SELF" rope-meta "$T/$1" "$T/$1-$2" "$2" "$3" 2>"$T/meta.err"; then
		pair "$1 rope $2 x$3" "$T/$1-$2"
	else
		ok 1 "$1 rope $2: rewrite"; sed 's/^/#   /' "$T/meta.err"
	fi
	if cmp -s "$T/$1.gguf.npy" "$T/$1-$2.gguf.npy"; then
		ok 1 "$1 rope $2 changes the logits"
	else
		ok 0 "$1 rope $2 changes the logits"
	fi
done

# the KV cache
check 'KV cache = recomputation (qwen2moe GGUF)' -- "$PYTHON3" "$SELF" cache "$T/qwen2moe.gguf"
check 'KV cache = recomputation (llama HF)' -- "$PYTHON3" "$SELF" cache "$T/llama.hf"
"$PYTHON3" "$REF" --model "$T/olmoe.gguf" --tokens "$PROMPT" --greedy 32 --recompute \
	>"$T/olmoe.recompute" 2>"$T/ref.err"
is "$(cat "$T/olmoe.recompute")" "$(cat "$T/olmoe.gguf.greedy")" \
	'ref.py --recompute: same continuation'

# determinism
"$PYTHON3" "$REF" --model "$T/mixtral.gguf" --tokens "$PROMPT" --greedy 32 >"$T/again" 2>&1
is "$(cat "$T/again")" "$(cat "$T/mixtral.gguf.greedy")" 'greedy continuation is deterministic'
n=$(wc -w <"$T/again")
is "$n" 32 'greedy prints 32 token ids'

# CLI forms: a prompt file, text logits, all positions, float32
echo "$PROMPT" | tr ' ' '\n' >"$T/ids"
"$PYTHON3" "$REF" --model "$T/qwen3.gguf" --prompt-ids-file "$T/ids" --logits "$T/f.npy" \
	--logits-txt "$T/f.txt" --all-positions 2>"$T/ref.err"
check '--prompt-ids-file = --tokens; --all-positions ends with the last position' -- \
	"$PYTHON3" -c "
import numpy as np, sys
a, b = np.load('$T/f.npy'), np.load('$T/qwen3.gguf.npy')
t = np.loadtxt('$T/f.txt').reshape(a.shape)
ok = a.shape == (8, b.size) and (a[-1] == b).all()
sys.exit(not (ok and np.allclose(t, a, rtol=1e-8, atol=0)))"
"$PYTHON3" "$REF" --model "$T/qwen3.gguf" --tokens "$PROMPT" --dtype float32 \
	--logits "$T/f32.npy" 2>"$T/ref.err"
check 'float32 run close to float64' -- \
	"$PYTHON3" "$SELF" compare "$T/f32.npy" "$T/qwen3.gguf.npy" 1e-4

# bad input: exit 1 with a message naming the problem
"$PYTHON3" "$REF" --model "$T/llama.gguf" --tokens "1 99999" >/dev/null 2>"$T/err"
is "$?:$(grep -c 'out of range' "$T/err")" "1:1" 'token id past the vocabulary: exit 1'
"$PYTHON3" "$REF" --model "$T/missing.gguf" --tokens "1" >/dev/null 2>"$T/err"
is "$?" 1 'missing model: exit 1'
head -c 100000 "$T/llama.gguf" >"$T/short.gguf"
"$PYTHON3" "$REF" --model "$T/short.gguf" --tokens "1" >/dev/null 2>"$T/err"
is "$?:$(grep -c 'past end of file' "$T/err")" "1:1" 'truncated GGUF: exit 1, says where'

done_testing
