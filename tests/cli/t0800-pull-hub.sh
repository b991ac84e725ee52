#!/bin/sh
# t0800-pull-hub.sh — moe-pull against a local imitation of the Hugging Face
# hub (tests/cli/hubsim.py on 127.0.0.1): GGUF by quantisation, split GGUF,
# safetensors snapshots, the cache layout huggingface_hub expects, the
# converted model equal to a direct conversion and runnable by name,
# offline mode, the token only for the hub, parallel ranges, URLs.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/pull-lib.sh"
CONV="$BIN/moe-convert"
DIFF="$top_builddir/tests/unit/uth-diff"

check "make the repos" -- make_repos
check "start the hub" -- start_hub --repo test/mix-GGUF="$REPO_G" --repo test/mix="$REPO_S"

# ---- GGUF by quantisation
check "pull test/mix-GGUF:Q8_0" -- "$PULL" test/mix-GGUF:Q8_0
R="$HF_HOME/hub/models--test--mix-GGUF"
commit=$(cat "$R/refs/main" 2>/dev/null)
is "$(printf %s "$commit" | wc -c)" 40 "refs/main holds a 40-hex commit"
sha=$(sha256 "$REPO_G/mix-Q8_0.gguf")
[ -f "$R/blobs/$sha" ] && [ "$(sha256 "$R/blobs/$sha")" = "$sha" ]
ok $? "blobs/<sha256> holds the LFS file"
is "$(readlink "$R/snapshots/$commit/mix-Q8_0.gguf")" "../../blobs/$sha" "snapshot link is relative to the blob"
[ ! -e "$R/blobs/$sha.incomplete" ] && [ -f "$HF_HOME/hub/.locks/models--test--mix-GGUF/$sha.lock" ]
ok $? "no .incomplete left; per-blob lock file where huggingface_hub keeps it"
[ ! -e "$R/snapshots/$commit/mix-F32.gguf" ]
ok $? "only the chosen quantisation was fetched"
cp "$REPO_G/mix-Q8_0.gguf" "$T/mix-Q8_0.gguf"
check "direct conversion" -- "$CONV" "$T/mix-Q8_0.gguf" "$T/direct.uth"
path=$("$PULL" show --json test/mix-GGUF:Q8_0 | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')
check "pulled UTH is byte-identical to the direct conversion" -- cmp "$path" "$T/direct.uth"
is "$(basename "$path")" "$(sha256 "$path").uth" "store file is named by its sha256"
"$BIN/moe-run" -m "$T/direct.uth" -p "hello" -n 8 --temp 0 > "$T/run-direct" 2>/dev/null
"$BIN/moe-run" -m test/mix-GGUF:Q8_0 -p "hello" -n 8 --temp 0 > "$T/run-name" 2>"$T/err"
ok $? "moe-run -m ORG/NAME:TAG runs the pulled model"
check "same greedy text by name and by path" -- cmp "$T/run-direct" "$T/run-name"
check "moe-bench -m NAME" -- "$BIN/moe-bench" -m mix-GGUF:Q8_0 -p 16 -n 4 -r 1 -t 1 -o csv
check "moe-run -m SHORTNAME (after the last /)" -- "$BIN/moe-run" -m mix-GGUF --tokenize -p hi

# ---- already there: no download, no HEAD
n0=$(wc -l < "$HUB_LOG")
check "second pull" -- "$PULL" test/mix-GGUF:Q8_0
n1=$(wc -l < "$HUB_LOG")
is "$((n1 - n0))" 1 "second pull: one listing request, nothing downloaded"

# ---- split GGUF, joined
check "pull split GGUF :SPLIT" -- "$PULL" test/mix-GGUF:SPLIT
n=$(ls "$R/snapshots/$commit/Q4_SPLIT/" | wc -l)
is "$n" 3 "all three shards linked in the snapshot"
is "$(readlink "$R/snapshots/$commit/Q4_SPLIT/mix-SPLIT-00002-of-00003.gguf" | cut -c1-15)" "../../../blobs/" \
	"nested snapshot links climb one more level"
check "joined split GGUF converts to the same tensors and metadata" -- \
	"$DIFF" --ignore provenance "$T/direct.uth" "$("$PULL" show --json test/mix-GGUF:SPLIT | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')"
is "$("$PULL" --download-only -q test/mix-GGUF:SPLIT)" "$R/snapshots/$commit/Q4_SPLIT" \
	"--download-only prints a split GGUF's shard directory"
is "$("$PULL" --download-only -q test/mix-GGUF:Q8_0)" "$R/snapshots/$commit/mix-Q8_0.gguf" \
	"--download-only prints a single GGUF's snapshot path"
"$PULL" test/mix-GGUF 2>"$T/err"
is "$?" 1 "several GGUF models and no quant: exit 1"
grep -q "mix-F32.gguf" "$T/err" && grep -q "mix-Q8_0.gguf" "$T/err"
ok $? "ambiguity lists the models ($(msg "$T/err"))"
"$PULL" test/mix-GGUF:Q5_K 2>"$T/err"
is "$?" 1 "missing quant: exit 1"
grep -q "no GGUF file for quantisation 'Q5_K'" "$T/err"
ok $? "missing quant named"
"$PULL" test/nope 2>"$T/err"
is "$?" 1 "missing repo: exit 1"
grep -q "RepoNotFound" "$T/err"
ok $? "missing repo: the hub's reason is shown"

# ---- revisions, HF_HUB_CACHE, and huggingface_hub's lock
check "--revision COMMIT" -- "$PULL" -n rev:c --revision "$commit" test/mix-GGUF:Q8_0
[ ! -e "$R/refs/$commit" ]
ok $? "a commit as revision writes no ref"
"$PULL" --revision nope test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 1 "unknown revision: exit 1"
grep -q "RevisionNotFound" "$T/err"
ok $? "unknown revision named ($(msg "$T/err"))"
HF_HUB_CACHE="$T/hubcache" "$PULL" -n cachedir test/mix-GGUF:F32 2>/dev/null
ok $? "pull with HF_HUB_CACHE"
fsha=$(sha256 "$REPO_G/mix-F32.gguf")
[ -f "$T/hubcache/models--test--mix-GGUF/blobs/$fsha" ] && [ ! -e "$R/blobs/$fsha" ]
ok $? "HF_HUB_CACHE holds the files"
# huggingface_hub's filelock takes flock() on .locks/models--ORG--NAME/ETAG.lock:
# hold it from Python for 2 s and the pull must wait for it.
mkdir -p "$HF_HOME/hub/.locks/models--test--mix-GGUF"
$PYTHON3 -c '
import fcntl, sys, time
f = open(sys.argv[1], "w"); fcntl.flock(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close(); time.sleep(2)
' "$HF_HOME/hub/.locks/models--test--mix-GGUF/$fsha.lock" "$T/locked" &
lp=$!
while [ ! -e "$T/locked" ]; do sleep 0.05; done
s=$(date +%s.%N)
"$PULL" -n locked test/mix-GGUF:F32 2>/dev/null
r=$?
e=$(date +%s.%N)
wait $lp
is "$r" 0 "pull while another process holds the blob lock"
is "$($PYTHON3 -c "print($e - $s >= 1.5)")" True "it waited for the lock"

# ---- safetensors snapshot
check "pull test/mix (safetensors)" -- "$PULL" test/mix
RS="$HF_HOME/hub/models--test--mix"
cs=$(cat "$RS/refs/main")
etag=$(readlink "$RS/snapshots/$cs/config.json" | sed 's|.*/||')
is "$etag" "$(git hash-object "$REPO_S/config.json" 2>/dev/null || $PYTHON3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$REPO_S/config.json")" \
	"small files are blobs named by their git blob sha1"
[ ! -e "$RS/snapshots/$cs/README.md" ]
ok $? "README not fetched for a snapshot"
check "direct conversion of the snapshot" -- "$CONV" "$REPO_S" "$T/direct-hf.uth"
check "pulled snapshot converts to the same tensors and metadata" -- \
	"$DIFF" --ignore provenance "$T/direct-hf.uth" "$("$PULL" show --json test/mix | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')"
check "--include downloads only matching files" -- "$PULL" --download-only -I 'README*' test/mix
[ -L "$RS/snapshots/$cs/README.md" ]
ok $? "--include README* linked README.md"

# ---- a sharded safetensors snapshot (index + two shards)
check "generate a sharded snapshot" -- $PYTHON3 "$top_srcdir/scripts/gen-model" --arch qwen3moe --format hf --shards 2 --seed 9 --out "$T/src/q3"
mkdir -p "$T/repos/q3" && cp "$T/src/q3.hf"/* "$T/repos/q3/"
check "hub with the sharded repo" -- start_hub --repo test/q3="$T/repos/q3" --repo test/mix-GGUF="$REPO_G" --repo test/mix="$REPO_S"
check "pull the sharded snapshot" -- "$PULL" test/q3
nsh=$(ls "$HF_HOME/hub/models--test--q3/snapshots/"*/ | grep -c 'safetensors$')
is "$nsh" 2 "both shards fetched"
check "direct conversion of the sharded snapshot" -- "$CONV" "$T/repos/q3" "$T/direct-q3.uth"
check "sharded snapshot converts to the same tensors and metadata" -- \
	"$DIFF" --ignore provenance "$T/direct-q3.uth" "$("$PULL" show --json test/q3 | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')"

# ---- URL sources (the resolve URL redirects to the CDN; its sha256 is checked)
URL1="$HF_ENDPOINT/test/mix-GGUF/resolve/main/mix-Q8_0.gguf"
check "pull an http URL" -- "$PULL" -n byurl "$URL1"
check "a hub URL with a CDN that sends wrong bytes" -- start_hub --repo test/mix-GGUF="$REPO_G" --fault wrongbytes
"$PULL" -n byurl2 "$HF_ENDPOINT/test/mix-GGUF/resolve/main/mix-F32.gguf" 2>"$T/err"
is "$?" 1 "URL: the hub's X-Linked-Etag is checked after the redirect"
grep -q "mix-F32.*sha256 mismatch" "$T/err"
ok $? "mismatch reported ($(msg "$T/err"))"
check "restart the hub" -- start_hub --repo test/mix-GGUF="$REPO_G" --repo test/mix="$REPO_S"
check "URL model equals the direct conversion" -- cmp "$T/direct.uth" \
	"$("$PULL" show --json byurl | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')"
"$PULL" -n badsha --sha256 "$(printf '%064d' 0)" "$HF_ENDPOINT/test/mix-GGUF/resolve/main/mix-F32.gguf" 2>"$T/err"
is "$?" 1 "URL with a wrong --sha256: exit 1"
grep -q "sha256 mismatch" "$T/err" && [ -z "$(find "$XDG_CACHE_HOME/moe/downloads" -name 'mix-F32.gguf*' ! -name '*.lock')" ]
ok $? "mismatch deleted the download ($(msg "$T/err"))"

# ---- offline: no server at all
stop_hubs
HF_HUB_OFFLINE=1 "$PULL" -n offline:copy test/mix-GGUF:Q8_0 2>"$T/err"
ok $? "HF_HUB_OFFLINE=1: a cached repo pulls under a new name with the hub down"
check "offline model runs by name" -- "$BIN/moe-run" -m offline:copy --tokenize -p hi
HF_HUB_OFFLINE=1 "$PULL" test/other:Q4_0 2>"$T/err"
is "$?" 1 "offline and not cached: exit 1"
grep -q "HF_HUB_OFFLINE" "$T/err"
ok $? "offline error says why ($(msg "$T/err"))"
s=$(date +%s)
HF_HUB_OFFLINE=1 "$PULL" test/mix-GGUF:Q8_0 2>/dev/null
ok $? "offline pull of a registered model succeeds"
is "$(( $(date +%s) - s < 5 ))" 1 "offline: no waiting for a network"

HF_HUB_OFFLINE=1 "$PULL" -n byurl:offline "$URL1" 2>"$T/err"
ok $? "offline: a URL downloaded before pulls again ($(msg "$T/err"))"
HF_HUB_OFFLINE=1 "$PULL" "http://127.0.0.1:1/never.gguf" 2>"$T/err"
is "$?" 1 "offline: a URL never downloaded: exit 1"
grep -q "HF_HUB_OFFLINE is set" "$T/err"
ok $? "offline URL error says why"

# ---- the token goes to the hub, never to the CDN
: > "$HUB_LOG"
check "hub with a token" -- start_hub --repo test/mix-GGUF="$REPO_G" --token s3cret
HF_TOKEN=wrong "$PULL" -n t1 test/mix-GGUF:F32 2>"$T/err"
is "$?" 1 "wrong token: exit 1"
grep -q "401" "$T/err" && grep -q "HF_TOKEN" "$T/err"
ok $? "401 explained ($(msg "$T/err"))"
rm -rf "$HF_HOME/hub/models--test--mix-GGUF"
HF_TOKEN=s3cret "$PULL" -n t2 test/mix-GGUF:F32 2>"$T/err"
ok $? "HF_TOKEN accepted"
mkdir -p "$HF_HOME" && echo s3cret > "$HF_HOME/token"
rm -rf "$HF_HOME/hub/models--test--mix-GGUF"
check "token from \$HF_HOME/token" -- "$PULL" -n t3 test/mix-GGUF:F32
rm -f "$HF_HOME/token"
grep -q '^cdn GET.*status=200' "$HUB_LOG"
ok $? "the CDN served the files"
! grep -q '^cdn .*auth=yes' "$HUB_LOG" && grep -q '^hub .*auth=yes' "$HUB_LOG"
ok $? "Authorization sent to the hub, never to the CDN host"

# ---- parallel ranges on a large file
mkdir -p "$T/repos/big"
head -c $((80 * 1024 * 1024 + 12345)) /dev/urandom > "$T/repos/big/blob.safetensors"
: > "$HUB_LOG"
check "hub with a large file" -- start_hub --repo test/big="$T/repos/big"
check "download-only, 4 connections" -- "$PULL" --download-only -j 4 -I '*.safetensors' test/big
RB="$HF_HOME/hub/models--test--big"
bsha=$(sha256 "$T/repos/big/blob.safetensors")
is "$(sha256 "$RB/blobs/$bsha")" "$bsha" "large file intact"
nr=$(grep -c '^cdn GET.*range=bytes=' "$HUB_LOG")
[ "$nr" -ge 4 ]
ok $? "fetched as $nr ranges"
bsz=$(stat -c %s "$T/repos/big/blob.safetensors")
is "$(cdn_bytes "$bsha" "$bsz")" "$bsz" "each byte sent once"
stop_hubs
done_testing
