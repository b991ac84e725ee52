#!/bin/sh
# t0720-quant-outliers.sh — (1) scripts/outlier-model keeps the function
# (KL divergence 0 against the original, in the engine) while giving the
# activations outlier channels (the importance matrix moe-bench measures on
# it has them), and on such a model an importance matrix from one text
# lowers the KL divergence of q4_k_m on another; (2) moe-convert --type
# quantises with moe-quant's quantisers (the same bytes as moe-quant -t TYPE
# for those matrices, less error than --reference-quant, which keeps
# ggml's round-to-nearest bytes).
. "$top_srcdir/tests/cli/lib.sh"
Q="$BIN/moe-quant"
CONV="$BIN/moe-convert"
BENCH="$BIN/moe-bench"
GEN="$top_srcdir/scripts/gen-model"
OUT="$top_srcdir/scripts/outlier-model"
TEXT="$top_srcdir/tests/golden/demo-model-heldout.txt"
[ -x "$Q" ] && [ -x "$BENCH" ] || skip_all "tools not built"

n=$(wc -l <"$TEXT")
head -n $((n / 2)) "$TEXT" >"$T/calib.txt"
tail -n +$((n / 2 + 1)) "$TEXT" >"$T/eval.txt"
kl() { # MODEL BASE: mean KL divergence
	"$BENCH" -m "$1" --kl "$2" 2>&1 | sed -n 's/^Mean *KLD: *\([0-9.e+-]*\).*/\1/p'
}

# ---- (1) the outlier model
"$PYTHON3" "$GEN" --arch olmoe --shape small --type f16 --seed 9 --out "$T/o" >/dev/null 2>&1
ok $? "generate olmoe small f16"
check "outlier-model" -- "$PYTHON3" "$OUT" "$T/o.gguf" "$T/x.gguf"
check "convert both" -- sh -c "'$CONV' '$T/o.gguf' '$T/o.uth' && '$CONV' '$T/x.gguf' '$T/x.uth'"
cmp -s "$T/o.uth" "$T/x.uth"; [ $? -ne 0 ]; ok $? "the weights changed"
check "base log-probabilities" -- "$BENCH" -m "$T/o.uth" --perplexity "$T/eval.txt" -c 128 \
	--chunks 4 --kl-base "$T/o.kl"
k=$(kl "$T/x.uth" "$T/o.kl")
"$PYTHON3" -c "import sys; sys.exit(0 if float('$k') < 1e-6 else 1)"
ok $? "the same function: KL divergence against the original $k"
for m in o x; do
	"$BENCH" -m "$T/$m.uth" --imatrix "$T/$m.imat" -f "$T/calib.txt" -c 128 --chunks 8 \
		>/dev/null 2>&1
	ok $? "imatrix of $m"
done
# the largest column mean square over the median, in attn_q's input
ratio() {
	"$PYTHON3" - "$1" <<'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
p = 16
_, n = struct.unpack_from('<II', b, 8)
for _ in range(n):
	l, = struct.unpack_from('<I', b, p); name = b[p + 4:p + 4 + l].decode(); p += 4 + l
	nc, rows = struct.unpack_from('<IQ', b, p); p += 12
	s = sorted(struct.unpack_from('<%dd' % nc, b, p)); p += 8 * nc
	if name == 'blk.0.attn_q.weight':
		print('%.0f' % (s[-1] / s[nc // 2]))
EOF
}
ro=$(ratio "$T/o.imat"); rx=$(ratio "$T/x.imat")
[ "$rx" -ge 50 ] && [ "$ro" -lt 10 ]
ok $? "outlier channels: max/median column mean square $rx (original $ro)"
check "q4_k_m without an imatrix" -- "$Q" -q -t q4_k_m "$T/x.uth" "$T/x-q4.uth"
check "q4_k_m with the imatrix" -- "$Q" -q -t q4_k_m --imatrix "$T/x.imat" "$T/x.uth" "$T/x-q4i.uth"
k0=$(kl "$T/x-q4.uth" "$T/o.kl"); k1=$(kl "$T/x-q4i.uth" "$T/o.kl")
"$PYTHON3" -c "import sys; sys.exit(0 if float('$k1') < 0.8 * float('$k0') else 1)"
ok $? "q4_k_m KL divergence: $k1 with the imatrix, $k0 without (at least 20% lower)"
"$PYTHON3" "$OUT" "$T/o.uth" "$T/y.gguf" 2>"$T/err"; is "$?" 1 "not a GGUF: exit 1"
[ ! -e "$T/y.gguf" ] && [ ! -e "$T/y.gguf.tmp" ]; ok $? "... no output left"
"$PYTHON3" "$GEN" --arch olmoe --shape small --type q8_0 --seed 9 --out "$T/q" >/dev/null 2>&1
"$PYTHON3" "$OUT" "$T/q.gguf" "$T/y.gguf" 2>"$T/err"; is "$?" 1 "a Q8_0 model: exit 1"
grep -q "only F32 and F16" "$T/err"; ok $? "... says why: $(cat "$T/err")"
[ ! -e "$T/y.gguf" ] && [ ! -e "$T/y.gguf.tmp" ]; ok $? "... no output left"

# ---- (2) moe-convert --type: moe-quant's quantisers
"$PYTHON3" "$GEN" --arch mixtral --shape small --type f32 --format hf --seed 4 --out "$T/h" \
	>/dev/null 2>&1
ok $? "generate an F32 snapshot"
check "convert --type q8_0" -- "$CONV" --type q8_0 "$T/h.hf" "$T/c8.uth"
check "convert --type q8_0 --reference-quant" -- "$CONV" --type q8_0 --reference-quant \
	"$T/h.hf" "$T/r8.uth"
check "convert f32" -- "$CONV" "$T/h.hf" "$T/f.uth"
check "moe-quant -t q8_0 of the f32 conversion" -- "$Q" -q -t q8_0 "$T/f.uth" "$T/m8.uth"
"$PYTHON3" - "$top_srcdir/tests/ref" "$T/f.uth" "$T/c8.uth" "$T/r8.uth" "$T/m8.uth" <<'EOF' >"$T/res"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import quants
from quant_check import read_uth
F, C, R, M = (read_uth(p) for p in sys.argv[2:6])
names = [n for n in C if C[n][0] == quants.BY_NAME['Q8_0']]
same = all(C[n][2] == M[n][2] for n in names)
print('%s - the %d q8_0 matrices equal moe-quant -t q8_0 byte for byte'
      % ('ok' if same and names else 'not ok', len(names)))
ec = er = 0.0
for n in names:
	x = np.frombuffer(F[n][2], dtype='<f4').astype(np.float64)
	ec += ((x - quants.decode(np.frombuffer(C[n][2], np.uint8), C[n][0], x.size)) ** 2).sum()
	er += ((x - quants.decode(np.frombuffer(R[n][2], np.uint8), R[n][0], x.size)) ** 2).sum()
print('%s - squared error %.4g below --reference-quant %.4g (%.1f%% lower)'
      % ('ok' if ec < er else 'not ok', ec, er, 100 * (1 - ec / er)))
EOF
while IFS= read -r line; do
	case $line in
	"ok - "*) ok 0 "${line#ok - }" ;;
	"not ok - "*) ok 1 "${line#not ok - }" ;;
	*) diag "$line" ;;
	esac
done <"$T/res"
grep -q "^ok - squared" "$T/res"; ok $? "the comparison ran"
"$CONV" --reference-quant "$T/h.hf" "$T/out.uth" 2>"$T/err"; is "$?" 2 "--reference-quant without --type: exit 2"
"$CONV" --type f16 --reference-quant "$T/h.hf" "$T/out.uth" 2>"$T/err"; is "$?" 2 "--reference-quant with f16: exit 2"
grep -q "quantised --type" "$T/err"; ok $? "... says why: $(cat "$T/err")"
done_testing
