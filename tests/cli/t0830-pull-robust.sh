#!/bin/sh
# t0830-pull-robust.sh — kill -9 at random moments never leaves a torn row or
# a file that looks complete; a full disk (hub cache or store on a tiny
# tmpfs) and a read-only store fail cleanly with a message, and what is
# already registered keeps working read-only.  The tmpfs and read-only
# mounts need a private mount namespace (unshare -m as root, else
# unshare -rm); those parts are skipped without one.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/pull-lib.sh"

check "make the repos" -- make_repos
R="$HF_HOME/hub/models--test--mix-GGUF"

# Every registered file exists and has the sha256 its row and name say;
# every LFS blob has the sha256 it is named by; the registry opens.
invariants() {
	"$PULL" list --json > "$T/l.json" || return 1
	$PYTHON3 - "$T/l.json" "$R/blobs" <<'EOF' || return 1
import hashlib, json, os, sys
def h(p):
    s = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            s.update(b)
    return s.hexdigest()
for e in json.load(open(sys.argv[1])):
    assert os.path.isfile(e["path"]), e
    assert h(e["path"]) == e["sha256"] == os.path.basename(e["path"])[:-4], e
d = sys.argv[2]
for n in os.listdir(d) if os.path.isdir(d) else []:
    if len(n) == 64:
        assert h(os.path.join(d, n)) == n, n
EOF
}

# ---- kill -9 at random moments
start_hub --repo test/mix-GGUF="$REPO_G" --fault slow:400000
i=0
for ms in 50 150 250 350 500 700 900 1200; do
	rm -rf "$HF_HOME"
	"$PULL" -q -n "k$i" test/mix-GGUF:Q8_0 2>/dev/null &
	pid=$!
	sleep "$(awk "BEGIN { print $ms / 1000 }")"
	kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
	invariants
	ok $? "kill -9 after ${ms} ms: no torn row, no wrong blob"
	i=$((i + 1))
done
check "a pull after all that succeeds" -- "$PULL" -q -n final test/mix-GGUF:Q8_0
check "invariants hold" -- invariants
[ -z "$(ls -A "$MOE_STORE/tmp" 2>/dev/null)" ]
ok $? "work files of killed pulls were cleaned up"
stop_hubs

# ---- a writer killed inside a transaction leaves a hot rollback journal
# (as a kill during the database's creation does, before it is in WAL
# mode); a reader (list) must roll it back, not fail with "attempt to write
# a readonly database".  Python's sqlite3 makes the journal: a transaction
# big enough to spill to the file, copied with its journal while still open.
mkdir -p "$T/hot/models"
$PYTHON3 - "$MOE_STORE/registry.db" "$T/hot/registry.db" <<'EOF'
import shutil, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
c.execute("PRAGMA cache_size=1")
c.execute("BEGIN")
c.execute("CREATE TABLE junk(x)")
for i in range(2000):
    c.execute("INSERT INTO junk VALUES (?)", ("x" * 1000,))
shutil.copy(sys.argv[1], sys.argv[2])
shutil.copy(sys.argv[1] + "-journal", sys.argv[2] + "-journal")
c.execute("ROLLBACK")
c.execute("PRAGMA journal_mode=WAL")
EOF
MOE_STORE="$T/hot" "$PULL" list > "$T/hot.list" 2> "$T/hot.err"
is "$?" 0 "list after a writer died mid-transaction ($(msg "$T/hot.err"))"
grep -q "^final[: ]" "$T/hot.list"
ok $? "the half-done transaction was rolled back and the model is listed"
[ ! -e "$T/hot/registry.db-journal" ]
ok $? "the hot journal is gone"

# ---- full disk and read-only store
if [ "$(id -u)" -eq 0 ]; then US="unshare -m"; else US="unshare -rm"; fi
if ! $US sh -c 'mkdir -p "$1" && mount -t tmpfs -o size=64k tmpfs "$1"' sh "$T/probe" 2>/dev/null; then
	diag "no private mount namespace (unshare): full-disk and read-only tests skipped"
	done_testing
	exit $?
fi
start_hub --repo test/mix-GGUF="$REPO_G"
mkdir -p "$T/small"
$US sh -c 'mount -t tmpfs -o size=100k tmpfs "$1" && HF_HOME="$1/hf" "$2" test/mix-GGUF:Q8_0' sh "$T/small" "$PULL" 2>"$T/err"
is "$?" 1 "hub cache on a full disk: exit 1"
grep -q "No space left on device" "$T/err"
ok $? "disk full reported ($(msg "$T/err"))"
"$PULL" list | grep -q "test/mix-GGUF"
is "$?" 1 "nothing registered"
rm -rf "$HF_HOME"
$US sh -c 'mount -t tmpfs -o size=160k tmpfs "$1" && MOE_STORE="$1/store" "$2" -n full test/mix-GGUF:Q8_0; rc=$?; ls "$1/store/models" "$1/store/tmp"/* > "$3" 2>&1; exit $rc' \
	sh "$T/small" "$PULL" "$T/left" 2>"$T/err"
is "$?" 1 "store on a full disk: exit 1"
grep -q "No space left on device\|disk full" "$T/err"
ok $? "disk full reported ($(msg "$T/err"))"
! grep -q '\.uth' "$T/left"
ok $? "no model file left in the store"

check "register a model" -- "$PULL" -q -n ro:ok test/mix-GGUF:Q8_0
cp "$T/src/mix.gguf" "$T/m.gguf"
$US sh -c 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" &&
	"$2" -n ro:new "$3" 2>"$4.new"; echo $? > "$4.rc1";
	"$5" -m ro:ok --tokenize -p hi > /dev/null 2>"$4.run"; echo $? > "$4.rc2";
	"$2" list > "$4.list" 2>&1; echo $? > "$4.rc3"' \
	sh "$MOE_STORE" "$PULL" "$T/m.gguf" "$T/ro" "$BIN/moe-run"
is "$(cat "$T/ro.rc1")" 1 "read-only store: pull exits 1"
grep -qi "read-only" "$T/ro.new"
ok $? "read-only reported ($(msg "$T/ro.new"))"
is "$(cat "$T/ro.rc2")" 0 "read-only store: moe-run -m NAME works"
is "$(cat "$T/ro.rc3")" 0 "read-only store: list works"
grep -q "^ro:ok " "$T/ro.list"
ok $? "read-only list shows the model"
stop_hubs
done_testing
