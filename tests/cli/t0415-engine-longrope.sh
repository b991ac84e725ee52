#!/bin/sh
# t0415-engine-longrope.sh — phimoe's LongRoPE long factors in the engine
# against the reference.  The generated models' original context (1024) is
# never crossed by t0410's 40 positions, so t0410 checks the short factors;
# here the GGUF's rope.scaling.original_context_length is set to 0, so every
# position uses the long factors in the engine (position + 1 > 0) and in the
# reference (sequence length > 0) alike.  (A context crossed inside one call
# is where the two rules differ: transformers picks one set per forward call,
# the engine per token; see moe-convert(1).)
. "$top_srcdir/tests/cli/lib.sh"
RUN="$top_builddir/tests/unit/engine-run"
CONV="$BIN/moe-convert"
[ -x "$RUN" ] || skip_all "tests/unit/engine-run not built (make check builds it)"
PROMPT="1 7 3 9 4 200 11 5"

check "phimoe: generate" -- "$PYTHON3" "$top_srcdir/scripts/gen-model" --arch phimoe --format gguf \
	--seed 11 --out "$T/short"
"$PYTHON3" - "$T/short.gguf" "$T/long.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
k = b'phimoe.rope.scaling.original_context_length'
i = b.index(k) + len(k)
t, v = struct.unpack_from('<II', b, i)
assert (t, v) == (4, 1024), (t, v)   # GGUF type 4 = uint32
struct.pack_into('<I', b, i + 4, 0)
open(sys.argv[2], 'wb').write(b)
PY
ok $? "phimoe: original context set to 0 (long factors everywhere)"
check "convert both" -- sh -c "'$CONV' '$T/short.gguf' '$T/short.uth' && '$CONV' '$T/long.gguf' '$T/long.uth'"
for isa in default generic avx2; do
	if [ $isa = default ]; then
		"$RUN" "$T/long.uth" "$PROMPT" 32 > "$T/long.$isa.out" 2> "$T/err"
	else
		MOE_ISA=$isa "$RUN" "$T/long.uth" "$PROMPT" 32 > "$T/long.$isa.out" 2> "$T/err"
	fi
	ok $? "engine-run ($isa): $(head -c 200 "$T/err")"
done
"$RUN" "$T/long.uth" "$PROMPT" 32 1 > "$T/long.b1.out" 2> "$T/err"; ok $? "engine-run (token by token)"
"$RUN" "$T/short.uth" "$PROMPT" 32 > "$T/short.out" 2> "$T/err"
[ -s "$T/short.out" ] && ! cmp -s "$T/short.out" "$T/long.default.out"
ok $? "the long factors change the logits (the check below can fail)"
"$PYTHON3" "$top_srcdir/tests/ref/vs_engine.py" --model "$T/long.gguf" --tokens "$PROMPT" \
	--emulate kv-f16 --tol 2e-4 --plain-tol 1e-3 --self-tol 1e-4 \
	long/default="$T/long.default.out" long/generic="$T/long.generic.out" \
	long/avx2="$T/long.avx2.out" long/b1="$T/long.b1.out@long/default" > "$T/vs" 2> "$T/vs.err"
while IFS= read -r line; do
	case $line in
	"ok - "*) ok 0 "${line#ok - }" ;;
	"not ok - "*) ok 1 "${line#not ok - }" ;;
	esac
done < "$T/vs"
[ ! -s "$T/vs.err" ]; ok $? "vs_engine.py ran cleanly: $(head -c 200 "$T/vs.err")"
done_testing
