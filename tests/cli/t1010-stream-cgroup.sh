#!/bin/sh
# t1010-stream-cgroup.sh — a model larger than a memory cgroup's limit runs
# inside it with --mem-budget and gives the tokens of an unconstrained
# resident run; the group's limit is never hit (memory.failcnt stays 0), so
# the run does not lean on page-cache reclaim.  Needs root and the cgroup v1
# memory controller at /sys/fs/cgroup/memory (skips with a message otherwise).
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
RUN="$BIN/moe-run"
CGROOT=/sys/fs/cgroup/memory
[ "$(id -u)" = 0 ] || skip_all "not root: cannot create a memory cgroup"
[ -w "$CGROOT/cgroup.procs" ] || skip_all "no writable cgroup v1 memory controller at $CGROOT"
CG="$CGROOT/moe-t1010-$$"
mkdir "$CG" 2>/dev/null || skip_all "cannot create $CG"
trap 'rmdir "$CG" 2>/dev/null; rm -rf "$T"' EXIT
LIMIT=$((64 * 1024 * 1024))
echo $LIMIT > "$CG/memory.limit_in_bytes" 2>/dev/null || skip_all "cannot set memory.limit_in_bytes"
echo 0 > "$CG/memory.swappiness" 2>/dev/null

# ~106 MiB of weights: 4 layers x 16 experts of 1.7 MiB (q8_0)
check "generate a 106 MiB olmoe" -- $GEN --arch olmoe --type q8_0 --shape tiny --n-embd 512 \
	--n-ff-exp 1024 --n-expert 16 --n-layer 4 --format gguf --seed 5 --out "$T/big"
check "convert it" -- "$BIN/moe-convert" "$T/big.gguf" "$T/big.uth"
rm -f "$T/big.gguf"
size=$(stat -c %s "$T/big.uth")
[ "$size" -gt "$LIMIT" ]; ok $? "the model ($size bytes) is larger than the limit ($LIMIT)"
PROMPT="Once upon a time"
"$RUN" -m "$T/big.uth" -p "$PROMPT" -n 16 --temp 0 --ignore-eos > "$T/ref.txt"
ok $? "resident run outside the group"
# the file's pages must not be in the page cache (they would be charged elsewhere)
dd if="$T/big.uth" iflag=nocache count=0 2>/dev/null
sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG" \
	"$RUN" -m "$T/big.uth" -p "$PROMPT" -n 16 --temp 0 --ignore-eos --mem-budget 40M --verbose \
	> "$T/out.txt" 2> "$T/err"
st=$?
is $st 0 "--mem-budget 40M inside a $((LIMIT >> 20)) MiB cgroup: completes"
[ $st -eq 0 ] || sed 's/^/#   /' "$T/err"
cmp -s "$T/out.txt" "$T/ref.txt"; ok $? "... with the resident run's tokens"
grep "experts:" "$T/err" | sed 's/^/# /'
fail=$(cat "$CG/memory.failcnt") max=$(cat "$CG/memory.max_usage_in_bytes")
diag "group peak $((max >> 20)) MiB of $((LIMIT >> 20)) MiB, failcnt $fail"
is "$fail" 0 "the limit was never hit (memory.failcnt 0)"
done_testing
