#!/bin/sh
# t0810-pull-faults.sh — moe-pull against a hub that misbehaves: dropped
# connections (resume with Range), kill -9 mid-download (resume on the next
# run, one and several connections), a server that ignores Range, wrong
# bytes (sha256 mismatch: deleted, exit 1, file named), 429/503 (retries,
# Retry-After), 401/403/404, a stall, a redirect loop, enormous headers, a
# lying Content-Length or size, unsafe file names, a missing commit.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/pull-lib.sh"

check "make the repos" -- make_repos
R="$HF_HOME/hub/models--test--mix-GGUF"
sha=$(sha256 "$REPO_G/mix-Q8_0.gguf")
size=$(stat -c %s "$REPO_G/mix-Q8_0.gguf")
fresh() { rm -rf "$HF_HOME" "$MOE_STORE"; : > "$HUB_LOG"; }
hub() { fresh; start_hub --repo test/mix-GGUF="$REPO_G" "$@"; }
FAST="--retry-wait 0.05"

# ---- a dropped connection resumes where it stopped
hub --fault drop:50000:2
check "drop after 50000 bytes, twice: pull succeeds" -- "$PULL" $FAST test/mix-GGUF:Q8_0
grep -q "^cdn GET.*range=bytes=50000-" "$HUB_LOG"
ok $? "the retry asked for bytes=50000-"
is "$(cdn_bytes "$sha" "$size")" "$size" "no byte fetched twice"
is "$(sha256 "$R/blobs/$sha")" "$sha" "blob intact"

# ---- kill -9 in the middle, then the next run resumes
hub --fault slow:60000
"$PULL" test/mix-GGUF:Q8_0 2>/dev/null &
pid=$!
i=0
while [ "$(stat -c %s "$R/blobs/$sha.incomplete" 2>/dev/null || echo 0)" -lt 30000 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 $pid; wait $pid 2>/dev/null
have=$(stat -c %s "$R/blobs/$sha.incomplete" 2>/dev/null || echo 0)
[ "$have" -gt 0 ] && [ "$have" -lt "$size" ] && [ ! -e "$R/blobs/$sha" ]
ok $? "after kill -9: a partial .incomplete ($have bytes), no blob"
"$PULL" list | grep -q mix-GGUF
is "$?" 1 "after kill -9: nothing registered"
: > "$HUB_LOG"
start_hub --repo test/mix-GGUF="$REPO_G"
"$PULL" test/mix-GGUF:Q8_0 2>"$T/err"
ok $? "next pull succeeds"
grep -q "^cdn GET.*range=bytes=$have-" "$HUB_LOG"
ok $? "it resumed at byte $have"
is "$(sha256 "$R/blobs/$sha")" "$sha" "resumed blob intact"
grep -q "resumed" "$T/err"
ok $? "the file is reported as resumed"

# ---- the server ignores Range: start over from 0, cleanly
hub --fault drop:50000:1 --fault norange
check "drop, then Range ignored: pull succeeds" -- "$PULL" $FAST test/mix-GGUF:Q8_0
is "$(sha256 "$R/blobs/$sha")" "$sha" "restarted blob intact"

# ---- wrong bytes: sha256 mismatch
hub --fault wrongbytes
"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "wrong bytes: exit 1"
grep -q "mix-Q8_0.gguf: sha256 mismatch" "$T/err"
ok $? "message names the file ($(msg "$T/err"))"
[ ! -e "$R/blobs/$sha" ] && [ ! -e "$R/blobs/$sha.incomplete" ]
ok $? "the bad download was deleted"
"$PULL" list | grep -q mix-GGUF
is "$?" 1 "nothing registered"

# ---- retries: 503 twice, 429 with Retry-After
hub --fault status:503:2
check "503 twice: retried, succeeds" -- "$PULL" $FAST test/mix-GGUF:Q8_0
is "$(grep -c '^cdn GET.*status=503' "$HUB_LOG")" 2 "two 503 answers seen"
hub --fault status:429:1 --fault retryafter:1
s=$(date +%s.%N)
check "429 with Retry-After: 1: retried, succeeds" -- "$PULL" $FAST test/mix-GGUF:Q8_0
e=$(date +%s.%N)
is "$($PYTHON3 -c "print($e - $s >= 0.95)")" True "waited the Retry-After second"
hub --fault status:503
"$PULL" $FAST --retries 2 test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "503 forever: exit 1"
grep -q "gave up after 3 attempts" "$T/err"
ok $? "gives up after 1 + --retries attempts ($(msg "$T/err"))"

# ---- permanent refusals
for code in 401 403 404; do
	hub --fault hubstatus:$code
	"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
	is "$?" 1 "hub answers $code: exit 1"
	grep -q "HTTP $code" "$T/err"
	ok $? "$code reported ($(msg "$T/err"))"
	is "$(grep -c '^hub' "$HUB_LOG")" 1 "$code is not retried"
done

# ---- a stall: the no-progress timeout ends it
hub --fault stall:10000
s=$(date +%s)
"$PULL" --timeout 2 --retries 1 $FAST test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "stalled transfer: exit 1"
is "$(( $(date +%s) - s < 20 ))" 1 "ended by the timeout, not by waiting forever"
grep -qi "timeout\|too slow\|transferred" "$T/err"
ok $? "timeout reported ($(msg "$T/err"))"

# ---- hostile answers
hub --fault redirectloop
"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "redirect loop: exit 1"
grep -q "redirect loop" "$T/err"
ok $? "redirect loop named"
for f in hugeheader giantheader; do
	hub --fault $f
	"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
	is "$?" 1 "$f (200 KB of headers): exit 1"
	grep -q "headers larger than" "$T/err"
	ok $? "$f refused ($(msg "$T/err"))"
	is "$(grep -c '^hub HEAD' "$HUB_LOG")" 1 "$f is not retried"
done
hub --fault lielen
"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "Content-Length larger than the file: exit 1"
grep -q "announces" "$T/err" && [ ! -e "$R/blobs/$sha" ]
ok $? "lying Content-Length refused, no blob ($(msg "$T/err"))"
hub --fault badsize
"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "X-Linked-Size smaller than the file: exit 1"
[ ! -e "$R/blobs/$sha" ]
ok $? "no blob from a lying size ($(msg "$T/err"))"
for evil in ../evil.gguf /tmp/evil.gguf 'a/../../evil.gguf'; do
	hub --fault evilname:$evil
	"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
	is "$?" 1 "listing with '$evil': exit 1"
	grep -q "unsafe file name" "$T/err"
	ok $? "'$evil' refused"
done
[ -z "$(find "$T" -name 'evil*')" ]
ok $? "no file written outside the cache"
hub --fault nocommit
"$PULL" $FAST test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "no X-Repo-Commit: exit 1"
grep -q "X-Repo-Commit" "$T/err"
ok $? "missing commit named"

# ---- several connections: drops, kill -9 and resume
mkdir -p "$T/repos/big"
head -c $((70 * 1024 * 1024 + 777)) /dev/urandom > "$T/repos/big/blob.safetensors"
bsha=$(sha256 "$T/repos/big/blob.safetensors")
bsize=$(stat -c %s "$T/repos/big/blob.safetensors")
RB="$HF_HOME/hub/models--test--big"
fresh
start_hub --repo test/big="$T/repos/big" --fault drop:1000000:3
check "4 connections, 3 ranges dropped: succeeds" -- "$PULL" $FAST --download-only -j 4 -I '*.safetensors' test/big
is "$(sha256 "$RB/blobs/$bsha")" "$bsha" "large blob intact after dropped ranges"
is "$(cdn_bytes "$bsha" "$bsize")" "$bsize" "dropped ranges resumed without refetching"
fresh
start_hub --repo test/big="$T/repos/big" --fault slow:8000000
"$PULL" --download-only -j 4 -I '*.safetensors' test/big 2>/dev/null &
pid=$!
P="$RB/blobs/$bsha.moe-parts"
i=0
ndone() { n=$(grep -c '^[0-9][0-9]*$' "$P.done" 2>/dev/null); echo "${n:-0}"; }
while [ "$(ndone)" -lt 2 ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 $pid; wait $pid 2>/dev/null
[ -f "$P" ] && [ -f "$P.done" ] && [ ! -e "$RB/blobs/$bsha" ]
ok $? "kill -9 with 4 connections: parts and their record left, no blob"
# every chunk the record lists holds the right bytes; count what they cover
covered=$($PYTHON3 - "$T/repos/big/blob.safetensors" "$P" "$P.done" <<'EOF2'
import sys
src, parts, done = sys.argv[1:4]
lines = open(done).read().split("\n")
hdr = lines[0].split()
chunk = int(hdr[3])
a, b = open(src, "rb"), open(parts, "rb")
total = 0
for l in lines[1:-1]:
    k = int(l)
    a.seek(k * chunk); b.seek(k * chunk)
    x = a.read(chunk)
    assert x == b.read(len(x)), "chunk %d differs" % k
    total += len(x)
print(total)
EOF2
)
[ -n "$covered" ] && [ "$covered" -gt 0 ]
ok $? "every recorded chunk holds the right bytes ($covered bytes)"
: > "$HUB_LOG"
start_hub --repo test/big="$T/repos/big"
check "resume with 4 connections" -- "$PULL" --download-only -j 4 -I '*.safetensors' test/big
is "$(sha256 "$RB/blobs/$bsha")" "$bsha" "resumed large blob intact"
is "$(cdn_bytes "$bsha" "$((bsize - covered))")" "$((bsize - covered))" "only the chunks not recorded were fetched"
[ ! -e "$P" ] && [ ! -e "$P.done" ] && [ ! -e "$RB/blobs/$bsha.incomplete" ]
ok $? "no work files left"
fresh
start_hub --repo test/big="$T/repos/big" --fault wrongbytes
"$PULL" $FAST --download-only -j 4 -I '*.safetensors' test/big 2>"$T/err"
is "$?" 1 "4 connections, wrong bytes: exit 1"
grep -q "blob.safetensors: sha256 mismatch" "$T/err" && [ ! -e "$P" ] && [ ! -e "$P.done" ] && [ ! -e "$RB/blobs/$bsha" ]
ok $? "mismatch after a parallel download deletes it ($(msg "$T/err"))"
fresh
start_hub --repo test/big="$T/repos/big" --fault norange
check "4 connections, Range ignored: falls back to one" -- "$PULL" $FAST --download-only -j 4 -I '*.safetensors' test/big
is "$(sha256 "$RB/blobs/$bsha")" "$bsha" "blob intact after the fallback"
stop_hubs
done_testing
