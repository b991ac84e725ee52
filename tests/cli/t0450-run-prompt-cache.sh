#!/bin/sh
# t0450-run-prompt-cache.sh — moe-run --prompt-cache: the first run saves
# the prompt's KV state, a later run whose prompt starts the same way loads
# it instead of computing it and writes the same text; a damaged, truncated,
# foreign or unrelated file gives a warning and a recomputation, never other
# text; the file's header is as moe-run(1) describes it.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
RUN="$BIN/moe-run"

check "generate a tiny mixtral" -- $GEN --arch mixtral --format gguf --seed 21 --out "$T/m"
check "convert it" -- "$BIN/moe-convert" "$T/m.gguf" "$T/m.uth"
check "another model" -- $GEN --arch mixtral --format gguf --seed 22 --out "$T/o"
check "convert it" -- "$BIN/moe-convert" "$T/o.gguf" "$T/o.uth"
P="the quick brown fox jumps over the lazy dog and runs away from the farm"
P2="$P and then far into the woods"
OPTS="-n 12 --temp 0 --ignore-eos --verbose"

evaluated() { sed -n 's/.*prompt \([0-9]*\) tokens (\([0-9]*\) evaluated).*/\1 \2/p' "$1"; }

"$RUN" -m "$T/m.uth" -p "$P" $OPTS > "$T/plain.txt" 2>/dev/null; ok $? "without a cache"
"$RUN" -m "$T/m.uth" -p "$P" $OPTS --prompt-cache "$T/c.kv" > "$T/a.txt" 2> "$T/a.err"
ok $? "first run with --prompt-cache"
cmp -s "$T/a.txt" "$T/plain.txt"; ok $? "... same text"
[ -s "$T/c.kv" ]; ok $? "... the cache file was written"
set -- $(evaluated "$T/a.err"); n=$1
is "$2" "$n" "... every prompt token computed ($n)"
"$RUN" -m "$T/m.uth" -p "$P" $OPTS --prompt-cache "$T/c.kv" > "$T/b.txt" 2> "$T/b.err"
ok $? "second run"
cmp -s "$T/b.txt" "$T/plain.txt"; ok $? "... same text"
is "$(evaluated "$T/b.err")" "$n 1" "... only the last prompt token computed"
"$RUN" -m "$T/m.uth" -p "$P2" $OPTS > "$T/plain2.txt" 2>/dev/null
"$RUN" -m "$T/m.uth" -p "$P2" $OPTS --prompt-cache "$T/c.kv" > "$T/c.txt" 2> "$T/c.err"
cmp -s "$T/c.txt" "$T/plain2.txt"; ok $? "a longer prompt with the same start: same text as without a cache"
set -- $(evaluated "$T/c.err")
[ "$2" -lt "$1" ] && [ "$2" -le $(($1 - n + 1)) ]; ok $? "... its first $((n - 1)) tokens loaded ($2 of $1 computed)"

# the header (moe-run(1))
$PYTHON3 - "$T/c.kv" "$n" <<'PY'
import struct, sys, os
b = open(sys.argv[1], 'rb').read()
assert b[:8] == b'MOEKVC\0\0'
ver, hs = struct.unpack_from('<II', b, 8)
mid, kvt, nl, rb, nt, cs, rs, xx = struct.unpack_from('<QIIIIQQQ', b, 16)
assert ver == 1 and hs == 64 and kvt == 1 and nl >= 1 and rb > 0
assert cs == len(b) - 64, (cs, len(b))
assert rs == nt * 4 + nl * nt * 2 * rb
PY
ok $? "header fields as documented"

# bad files: a warning, the prompt computed, the same text
cp "$T/c.kv" "$T/bad.kv"
$PYTHON3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0x55; open(p,'wb').write(b)" "$T/bad.kv"
"$RUN" -m "$T/m.uth" -p "$P2" $OPTS --prompt-cache "$T/bad.kv" > "$T/d.txt" 2> "$T/d.err"
ok $? "a damaged cache: success"
cmp -s "$T/d.txt" "$T/plain2.txt"; ok $? "... same text"
grep -q "warning: .*bad.kv: \(checksum mismatch\|damaged data\)" "$T/d.err"; ok $? "... with a warning: $(grep warning "$T/d.err")"
head -c 100 "$T/c.kv" > "$T/short.kv"
"$RUN" -m "$T/m.uth" -p "$P2" $OPTS --prompt-cache "$T/short.kv" > "$T/e.txt" 2> "$T/e.err"
cmp -s "$T/e.txt" "$T/plain2.txt" && grep -q "warning: .*truncated" "$T/e.err"
ok $? "a truncated cache: warning, same text"
"$RUN" -m "$T/o.uth" -p "$P2" $OPTS > "$T/plain-o.txt" 2>/dev/null
cp "$T/c.kv" "$T/foreign.kv"
"$RUN" -m "$T/o.uth" -p "$P2" $OPTS --prompt-cache "$T/foreign.kv" > "$T/f.txt" 2> "$T/f.err"
cmp -s "$T/f.txt" "$T/plain-o.txt" && grep -q "warning: .*another model" "$T/f.err"
ok $? "another model's cache: warning, that model's own text"
echo "not a cache" > "$T/junk.kv"
"$RUN" -m "$T/m.uth" -p "$P" $OPTS --prompt-cache "$T/junk.kv" > "$T/g.txt" 2> "$T/g.err"
cmp -s "$T/g.txt" "$T/plain.txt" && grep -q "warning: .*not a prompt cache" "$T/g.err"
ok $? "an unrelated file: warning, same text"
"$RUN" -m "$T/m.uth" --jsonl --prompt-cache "$T/c.kv" < /dev/null 2>/dev/null; is $? 2 "--prompt-cache with --jsonl: usage error"
"$RUN" -m "$T/m.uth" -p "$P" -n 2 --prompt-cache "$T/nodir/c.kv" > /dev/null 2> "$T/i.err"; is $? 1 "an unwritable cache path: failure"
grep -q "prompt-cache" "$T/i.err"; ok $? "... naming the option: $(cat "$T/i.err")"
done_testing
