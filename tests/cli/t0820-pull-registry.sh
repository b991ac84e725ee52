#!/bin/sh
# t0820-pull-registry.sh — the registry: local files pulled and named, list /
# show / tag / rm (the file goes with its last name), name resolution in the
# tools (exact, short, tags, ambiguous and missing names say what exists),
# concurrent pulls (one download, one row) and readers, a corrupt database
# (named, with the recovery command) and 'moe-pull repair'.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/pull-lib.sh"

check "make the repos" -- make_repos
cp "$T/src/mix.gguf" "$T/m.gguf"
check "pull a local GGUF" -- "$PULL" "$T/m.gguf"
check "pull a local snapshot under a name" -- "$PULL" -n acme/mix:hf "$T/src/mix.hf"
check "pull a snapshot with --type q8_0" -- "$PULL" -q -n acme/mix:q8 -t q8_0 "$T/src/mix.hf"
"$PULL" show acme/mix:q8 | grep -q "^weight types: *f32,q8_0"
ok $? "--type q8_0 reached the converter"
check "rm acme/mix:q8" -- "$PULL" -q rm acme/mix:q8
cp "$T/m.gguf" "$T/other.gguf"
check "convert a UTH (another provenance, so other bytes)" -- "$BIN/moe-convert" "$T/other.gguf" "$T/m2.uth"
check "register a UTH file as is" -- "$PULL" -n acme/copy "$T/m2.uth"
p=$("$PULL" show --json acme/copy | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')
check "a registered UTH is copied byte for byte" -- cmp "$T/m2.uth" "$p"
"$PULL" list > "$T/list"
grep -q '^m:latest ' "$T/list" && grep -q '^acme/mix:hf ' "$T/list" && grep -q '^acme/copy:latest ' "$T/list"
ok $? "list shows NAME:TAG rows"
n=$("$PULL" list --json | $PYTHON3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d), sorted(d[0]))')
is "$n" "3 ['architecture', 'created', 'last_used', 'name', 'parameters', 'path', 'revision', 'sha256', 'size', 'source', 'tag', 'weight_types']" "list --json: every field"
"$PULL" show m > "$T/show"
grep -q "^architecture: *llama" "$T/show" && grep -q "^weight types: *f32,q8_0" "$T/show" && grep -q "^parameters: *140096" "$T/show"
ok $? "show: architecture, weight types, parameters"
"$PULL" show m | grep -q "last used: *never"
ok $? "never used yet"
check "moe-run -m m" -- "$BIN/moe-run" -m m --tokenize -p hi
"$PULL" show m | grep -q "last used: *20"
ok $? "moe-run updated last used"

# ---- names in the tools
check "tag m other/m:v2" -- "$PULL" tag m other/m:v2
check "moe-run -m other/m:v2" -- "$BIN/moe-run" -m other/m:v2 --tokenize -p hi
check "tag m third/m:v3" -- "$PULL" tag m third/m:v3
"$BIN/moe-run" -m m:v3 --tokenize -p hi >/dev/null 2>&1
ok $? "short name with a tag"
"$BIN/moe-run" -m nosuch --tokenize -p hi 2>"$T/err"
is "$?" 1 "missing name: exit 1"
grep -q "no model named 'nosuch'" "$T/err" && grep -q "acme/mix:hf" "$T/err"
ok $? "missing name lists what exists ($(msg "$T/err"))"
"$BIN/moe-bench" -m nosuch -p 8 -n 0 2>"$T/err"
is "$?" 1 "moe-bench: missing name: exit 1"
# moe-bench --imatrix parses its own options: its -m takes names too
printf 'It was the best of times, it was the worst of times, it was the age of wisdom.\n' >"$T/calib.txt"
check "moe-bench -m m --imatrix" -- "$BIN/moe-bench" -m m --imatrix "$T/m.imatrix" -f "$T/calib.txt" -c 8
# $MOE_MODEL stands for -m, so it takes names too (moe-run and moe-serve)
check "MOE_MODEL=m moe-run" -- env MOE_MODEL=m "$BIN/moe-run" --tokenize -p hi
check "tag acme/mix:hf other2/mix:hf" -- "$PULL" tag acme/mix:hf other2/mix:hf
"$BIN/moe-run" -m mix:hf --tokenize -p hi 2>"$T/err"
is "$?" 1 "short name of two repos: exit 1"
grep -q "ambiguous" "$T/err" && grep -q "acme/mix:hf" "$T/err" && grep -q "other2/mix:hf" "$T/err"
ok $? "ambiguity lists both ($(msg "$T/err"))"
check "tag m multi:a" -- "$PULL" tag m multi:a
check "tag m multi:b" -- "$PULL" tag m multi:b
"$BIN/moe-run" -m multi --tokenize -p hi 2>"$T/err"
is "$?" 1 "two tags, none 'latest': ambiguous"
check "tag m multi (latest)" -- "$PULL" tag m multi
check "with a 'latest' tag the bare name works" -- "$BIN/moe-run" -m multi --tokenize -p hi
"$BIN/moe-run" -m "$T/none.uth" --tokenize -p hi 2>"$T/err"
is "$?" 1 "missing path: exit 1"
grep -q "none.uth: No such file" "$T/err"
ok $? "a path is reported as a missing file"
mkdir -p "$T/cwd" && cp "$T/m2.uth" "$T/cwd/m"
(cd "$T/cwd" && "$BIN/moe-run" -m m --tokenize -p hi >/dev/null 2>&1)
ok $? "an existing file wins over a registry name"

# ---- rm: the file goes with its last name
f=$("$PULL" show --json m | $PYTHON3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')
check "rm m" -- "$PULL" rm m
[ -f "$f" ]
ok $? "file kept while other names use it"
"$PULL" rm other/m:v2 third/m:v3 multi:a multi:b multi 2>"$T/err"
ok $? "rm several names"
grep -q "and its file" "$T/err" && [ ! -e "$f" ] && [ ! -e "${f%.uth}.json" ]
ok $? "the last name took the file and its record with it"
"$PULL" rm nosuch 2>/dev/null
is "$?" 1 "rm of a missing name: exit 1"

# ---- concurrent pulls: one download, one row; readers meanwhile
start_hub --repo test/mix-GGUF="$REPO_G" --fault slow:200000
sha=$(sha256 "$REPO_G/mix-Q8_0.gguf")
"$PULL" -q test/mix-GGUF:Q8_0 & p1=$!
"$PULL" -q test/mix-GGUF:Q8_0 & p2=$!
"$PULL" -q -n samefile test/mix-GGUF:Q8_0 & p3=$!
readers=0
while kill -0 $p1 2>/dev/null; do
	"$PULL" list >/dev/null && "$BIN/moe-run" -m acme/copy --tokenize -p hi >/dev/null || readers=1
	sleep 0.1
done
wait $p1; r1=$?; wait $p2; r2=$?; wait $p3; r3=$?
is "$r1$r2$r3" 000 "three concurrent pulls of one file all succeed"
is "$readers" 0 "list and moe-run -m work during the pulls"
gsz=$(stat -c %s "$REPO_G/mix-Q8_0.gguf")
is "$(cdn_bytes "$sha" "$gsz")" "$gsz" "the file was downloaded once"
is "$("$PULL" list | grep -c '^test/mix-GGUF:Q8_0 ')" 1 "one row for the model"
stop_hubs

# ---- a corrupt database
db="$MOE_STORE/registry.db"
check "tag acme/copy keep:me" -- "$PULL" tag acme/copy keep:me
cp "$db" "$T/db.good"
printf 'this is not a database, just garbage bytes.............................' > "$db"
rm -f "$db-wal" "$db-shm"
"$PULL" list 2>"$T/err"
is "$?" 1 "corrupt database: list exits 1"
grep -q "registry database $db is corrupt" "$T/err" && grep -q "moe-pull repair" "$T/err"
ok $? "the error names the file and the recovery command ($(msg "$T/err"))"
"$BIN/moe-run" -m keep:me --tokenize -p hi 2>"$T/err"
is "$?" 1 "moe-run -m NAME with a corrupt registry: exit 1"
grep -q "moe-pull repair" "$T/err"
ok $? "moe-run says how to recover"
check "moe-run -m PATH still works" -- "$BIN/moe-run" -m "$T/m2.uth" --tokenize -p hi
check "moe-pull repair" -- "$PULL" repair
ls "$db".corrupt-* >/dev/null 2>&1
ok $? "the corrupt file was kept aside"
"$PULL" list > "$T/list2"
grep -q '^keep:me ' "$T/list2" && grep -q '^acme/copy:latest ' "$T/list2" && grep -q '^test/mix-GGUF:Q8_0 ' "$T/list2"
ok $? "names restored, tags included"
check "restored name runs" -- "$BIN/moe-run" -m keep:me --tokenize -p hi
# truncated in the middle of a page
head -c 6000 "$T/db.good" > "$db"; rm -f "$db-wal" "$db-shm"
"$PULL" list 2>"$T/err"
is "$?" 1 "truncated database: exit 1"
grep -q "moe-pull repair" "$T/err"
ok $? "truncated database named with the recovery command ($(msg "$T/err"))"
check "repair again" -- "$PULL" -q repair
done_testing
