#!/bin/sh
# t0910-serve-registry.sh — moe-serve with the model registry and the
# streamed expert store, against the hub imitation (tests/cli/hubsim.py) on
# 127.0.0.1 and a store under $T:
#   - -m takes registry names; requests name registered models (loaded on
#     first use), never files (a path is refused without --allow-paths);
#   - /v1/models and /api/tags list the registered models;
#   - /api/pull from the hub: NDJSON status objects ending in "success",
#     sent as the pull goes (a slow CDN), stream false gives one object;
#     the pulled model answers; a missing repo is 404, a CDN sending wrong
#     bytes 502 (streamed: a last {"error"} line), a URL or a path 403;
#   - a stalled CDN: the client leaving cancels the pull and removes the
#     partial file; 8 pulls at once, the 9th is 503; SIGTERM during a pull
#     ends it at once and removes the partial file;
#   - /api/delete removes a name (then 404), as 'moe-pull rm';
#   - --mem-budget: the answer equals the one with all weights in memory,
#     and /metrics shows the expert store's counters.
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/pull-lib.sh"
SERVE="$BIN/moe-serve"
SPID=""
trap 'stop_serve; stop_hubs; rm -rf "$T"' EXIT

# Every server must exit 0 on SIGTERM with nothing from a sanitizer.
SERVE_BAD=""
stop_serve() {
	if [ -n "$SPID" ]; then
		kill "$SPID" 2>/dev/null
		wait "$SPID" 2>/dev/null
		st=$?
		if [ "$st" -ne 0 ] || grep -q "Sanitizer\|runtime error" "$T/serve.err"; then
			SERVE_BAD="$SERVE_BAD $st:$(grep -m1 "Sanitizer\|runtime error" "$T/serve.err" | cut -c1-100)"
		fi
	fi
	SPID=""
}

# start_serve ARGS...: moe-serve on a free loopback port; sets URL.
start_serve() {
	stop_serve
	: > "$T/serve.err"
	"$SERVE" --port 0 --keep-alive -1 -t 1 "$@" 2>"$T/serve.err" &
	SPID=$!
	i=0
	while ! grep -q "listening on" "$T/serve.err" && [ $i -lt 200 ]; do
		kill -0 "$SPID" 2>/dev/null || return 1
		sleep 0.05; i=$((i + 1))
	done
	URL=$(sed -n 's/.*listening on \(http:[^ ]*\)\/$/\1/p' "$T/serve.err")
	[ -n "$URL" ]
}

# req METHOD PATH [JSON]: prints "STATUS" on the first line, then the body.
req() {
	"$PYTHON3" - "$URL" "$@" <<'EOF'
import sys, urllib.request, urllib.error
url, method, path = sys.argv[1], sys.argv[2], sys.argv[3]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
r = urllib.request.Request(url + path, data=data, method=method,
                           headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(r, timeout=120) as f:
        status, body = f.status, f.read()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read()
sys.stdout.write("%d\n%s" % (status, body.decode()))
EOF
}
status() { head -n1 "$1"; }
body() { tail -n +2 "$1"; }
# jq-like: jget FILE EXPR (python over the JSON body)
jget() { body "$1" | "$PYTHON3" -c "import json,sys; d=json.load(sys.stdin); print($2)"; }

DEMO="$top_srcdir/share/moe-demo.uth"
[ -f "$DEMO" ] || skip_all "share/moe-demo.uth not found"
check "make the repos" -- make_repos
check "register the demo model as acme/demo" -- "$PULL" -q -n acme/demo "$DEMO"

# ---- -m NAME and request names
check "moe-serve -m acme/demo" -- start_serve -m acme/demo
req POST /v1/completions '{"prompt":"Once upon","max_tokens":6,"temperature":0}' > "$T/a"
is "$(status "$T/a")" 200 "the default model (a registry name) answers"
ref=$(jget "$T/a" 'd["choices"][0]["text"]')
req POST /v1/completions '{"model":"acme/demo:latest","prompt":"Once upon","max_tokens":6,"temperature":0}' > "$T/b"
is "$(status "$T/b"):$(jget "$T/b" 'd["choices"][0]["text"]')" "200:$ref" "a request naming acme/demo:latest gets the same model"
req GET /v1/models > "$T/m"
jget "$T/m" '" ".join(x["id"] for x in d["data"])' | grep -q "acme/demo:latest"
ok $? "/v1/models lists the registered name"
# /api/ps: a model moe-pull registered has its file's digest (sha256sum's)
# and the registry's parameter count and weight types, as /api/tags gives
req GET /api/ps > "$T/ps"
is "$(jget "$T/ps" 'd["models"][0]["digest"]')" "sha256:$(sha256sum "$DEMO" | cut -d' ' -f1)" \
	"/api/ps: the registered model's digest is its file's sha256"
"$PULL" show --json acme/demo > "$T/show"
is "$(jget "$T/ps" 'd["models"][0]["details"]["parameter_size"]')" \
	"$("$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameters"])' "$T/show")" \
	"/api/ps: parameter_size is the registry's parameter count"
jget "$T/ps" 'd["models"][0]["details"]["quantization_level"]' | grep -q "f32"
ok $? "/api/ps: quantization_level lists the weight types"
stop_serve
# $MOE_MODEL stands for -m: a registry name there too
export MOE_MODEL=acme/demo
check "MOE_MODEL=acme/demo moe-serve (no -m)" -- start_serve
unset MOE_MODEL
req POST /v1/completions '{"prompt":"Once upon","max_tokens":6,"temperature":0}' > "$T/a"
is "$(status "$T/a"):$(jget "$T/a" 'd["choices"][0]["text"]')" "200:$ref" "... serves that model"
stop_serve

check "register the demo again as other/demo2" -- "$PULL" -q -n other/demo2 "$DEMO"
cp "$DEMO" "$T/plain.uth"
check "moe-serve -m FILE" -- start_serve -m "$T/plain.uth"
req POST /v1/completions '{"model":"other/demo2","prompt":"Once upon","max_tokens":6,"temperature":0}' > "$T/g"
is "$(status "$T/g"):$(jget "$T/g" 'd["choices"][0]["text"]')" "200:$ref" "a registered model not given with -m loads on first use"
req GET /api/tags > "$T/t"
names=$(jget "$T/t" '" ".join(sorted(x["name"] for x in d["models"]))')
is "$names" "acme/demo:latest other/demo2:latest plain" "/api/tags: -m models and registered names"
jget "$T/t" '[x for x in d["models"] if x["name"]=="acme/demo:latest"][0]["digest"]' | grep -q "^sha256:[0-9a-f]\{64\}$"
ok $? "/api/tags: a registered model's digest"
req POST /v1/completions "{\"model\":\"$T/plain.uth\",\"prompt\":\"x\",\"max_tokens\":1}" > "$T/p"
is "$(status "$T/p")" 400 "a path is refused without --allow-paths"
req POST /v1/completions '{"model":"../etc/passwd","prompt":"x","max_tokens":1}' > "$T/p"
is "$(status "$T/p")" 400 "a relative path is refused"
req POST /v1/completions '{"model":"nosuch/model","prompt":"x","max_tokens":1}' > "$T/p"
is "$(status "$T/p")" 404 "an unknown name: 404"
body "$T/p" | grep -q "acme/demo"
ok $? "the 404 lists the registered names ($(body "$T/p" | cut -c1-120))"

# ---- /api/delete
req DELETE /api/delete '{"model":"other/demo2"}' > "$T/d"
is "$(status "$T/d")" 200 "/api/delete other/demo2"
"$PULL" list > "$T/list"
! grep -q "^other/demo2" "$T/list"
ok $? "the name is gone from the registry"
req DELETE /api/delete '{"model":"other/demo2"}' > "$T/d"
is "$(status "$T/d")" 404 "/api/delete of a missing name: 404"
req DELETE /api/delete '{}' > "$T/d"
is "$(status "$T/d")" 400 "/api/delete without a model: 400"

# ---- /api/pull from the hub
check "start the hub" -- start_hub --repo test/mix-GGUF="$REPO_G"
check "moe-serve with HF_ENDPOINT of the hub" -- start_serve -m "$T/plain.uth"
req POST /api/pull '{"model":"test/mix-GGUF:Q8_0"}' > "$T/pl"
is "$(status "$T/pl")" 200 "/api/pull streams (200)"
body "$T/pl" | "$PYTHON3" -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin.read().splitlines()]
assert all("status" in o for o in lines), lines
assert lines[-1] == {"status": "success"}, lines[-1]
assert any(o["status"].startswith("pulling ") and o.get("total", 0) > 0 and o["completed"] == o["total"] for o in lines), lines
'
ok $? "NDJSON status objects: a file pulled completely, then success"
"$PULL" list | grep -q "^test/mix-GGUF:Q8_0 "
ok $? "the pulled model is registered"
req POST /v1/completions '{"model":"test/mix-GGUF:Q8_0","prompt":"hello","max_tokens":4,"temperature":0}' > "$T/c"
is "$(status "$T/c")" 200 "the pulled model answers"
"$BIN/moe-run" -m test/mix-GGUF:Q8_0 -p hello -n 4 --temp 0 > "$T/run" 2>/dev/null
is "$(jget "$T/c" 'd["choices"][0]["text"]')" "$(cat "$T/run")" "... the same text as moe-run"
req POST /api/pull '{"model":"test/mix-GGUF:Q8_0","stream":false}' > "$T/pl"
is "$(status "$T/pl"):$(body "$T/pl")" '200:{"status":"success"}' "stream false: one object"
req POST /api/pull '{"model":"test/nosuch"}' > "$T/pl"
is "$(status "$T/pl")" 404 "a missing repo: 404"
body "$T/pl" | grep -q '"error"'
ok $? "... with an error object ($(body "$T/pl" | cut -c1-100))"
req POST /api/pull '{"model":"https://127.0.0.1/x.gguf"}' > "$T/pl"
is "$(status "$T/pl")" 403 "a URL needs --allow-paths"
req POST /api/pull "{\"model\":\"$T/m.gguf\"}" > "$T/pl"
is "$(status "$T/pl")" 403 "a path needs --allow-paths"
req POST /api/pull '{"model":"test/mix-GGUF:Q8_0","stream":3}' > "$T/pl"
is "$(status "$T/pl")" 400 "a bad stream value: 400"
req POST /api/pull '{}' > "$T/pl"
is "$(status "$T/pl")" 400 "no model: 400"
check "a hub whose CDN sends wrong bytes" -- start_hub --repo test/mix-GGUF="$REPO_G" --fault wrongbytes
check "moe-serve with that hub" -- start_serve -m "$T/plain.uth"
req POST /api/pull '{"model":"test/mix-GGUF:F32","stream":false}' > "$T/pl"
is "$(status "$T/pl")" 502 "a checksum failure: 502"
body "$T/pl" | grep -qi "sha256 mismatch"
ok $? "... named ($(body "$T/pl" | cut -c1-120))"
req POST /api/pull '{"model":"test/mix-GGUF:F32"}' > "$T/pl"
is "$(status "$T/pl")" 200 "streamed: the files were on their way (200)"
body "$T/pl" | tail -n1 | grep -q '^{"error":.*sha256 mismatch'
ok $? "... and the last line is the error ($(body "$T/pl" | tail -n1 | cut -c1-100))"

# a slow CDN: the status objects arrive while the pull goes on
check "a slow hub" -- start_hub --repo test/mix-GGUF="$REPO_G" --fault slow:200000
check "moe-serve with that hub" -- start_serve -m "$T/plain.uth"
"$PYTHON3" - "$URL" > "$T/live" <<'EOF2'
import json, sys, time, urllib.request
r = urllib.request.Request(sys.argv[1] + "/api/pull", data=b'{"model":"test/mix-GGUF:F32"}',
                           method="POST")
t0 = time.monotonic()
seen = []
with urllib.request.urlopen(r, timeout=120) as f:
    for line in f:
        seen.append((time.monotonic() - t0, json.loads(line)))
first = [t for t, o in seen if o.get("status", "").startswith("pulling mix")]
print("%.2f %.2f %d" % (first[0] if first else -1, seen[-1][0], seen[-1][1] == {"status": "success"}))
EOF2
read -r t_first t_end okk < "$T/live"
"$PYTHON3" -c "import sys; sys.exit(not ($okk == 1 and 0 <= $t_first and $t_end - $t_first > 0.3))"
ok $? "streamed as it goes: first file line at ${t_first}s, success at ${t_end}s"
stop_serve

# ---- a stalled CDN: the client leaving, or SIGTERM, cancels the pull
check "a stalled hub" -- start_hub --repo test/stall-GGUF="$REPO_G" --fault stall:1000
check "moe-serve with that hub" -- start_serve -m "$T/plain.uth"
cat > "$T/pullc.py" <<'EOF2'
import glob, json, os, re, signal, socket, sys, time, urllib.request
url, hf, what = sys.argv[1], sys.argv[2], sys.argv[3]
host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
def partials():
    return [p for p in glob.glob(hf + "/**/*", recursive=True)
            if p.endswith(".incomplete") or ".moe-parts" in p]
def active():
    with urllib.request.urlopen(url + "/metrics", timeout=30) as f:
        return int(re.search(rb"moe_pulls_active (\d+)", f.read()).group(1))
def wait_for(cond):
    t = time.monotonic() + 30
    while time.monotonic() < t and not cond():
        time.sleep(0.05)
    return cond()
def start():
    s = socket.create_connection((host, int(port)), timeout=30)
    body = b'{"model":"test/stall-GGUF:F32"}'
    s.sendall(b"POST /api/pull HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s
def started(s):
    got = b""
    while b"pulling mix" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
    return got
if what == "leave":
    s = start()
    got = started(s)
    r = [b"pulling mix" in got, wait_for(lambda: partials() != [])]
    s.close()
    r += [wait_for(lambda: active() == 0), partials() == []]
    socks = [start() for _ in range(8)]
    r.append(wait_for(lambda: active() == 8))
    s = start()
    r.append(s.recv(4096).startswith(b"HTTP/1.1 503"))
    s.close()
    for s in socks:
        s.close()
    r += [wait_for(lambda: active() == 0), partials() == []]
    print(" ".join(str(int(x)) for x in r))
else:
    s = start()
    got = started(s)
    r = [b"pulling mix" in got, wait_for(lambda: partials() != [])]
    os.kill(int(what), signal.SIGTERM)
    t0 = time.monotonic()
    while s.recv(4096):
        pass
    print(" ".join(str(int(x)) for x in r), "%.1f" % (time.monotonic() - t0))
EOF2
"$PYTHON3" "$T/pullc.py" "$URL" "$HF_HOME" leave > "$T/cancel" 2>&1
read -r c1 c2 c3 c4 c5 c6 c7 c8 < "$T/cancel"
is "$c1$c2" 11 "a stalled pull: the file started, a partial download on disk"
is "$c3$c4" 11 "the client leaves: the pull stops (moe_pulls_active 0), the partial file is removed"
is "$c5$c6" 11 "8 pulls at once: the 9th is 503"
is "$c7$c8" 11 "... all 8 cancelled by their clients leaving, no partial file left"
"$PYTHON3" "$T/pullc.py" "$URL" "$HF_HOME" "$SPID" > "$T/cancel" 2>&1
read -r c1 c2 secs < "$T/cancel"
is "$c1$c2" 11 "SIGTERM during a stalled pull ($(cat "$T/cancel"))"
"$PYTHON3" -c "import sys; sys.exit(not float('$secs') < 20)"
ok $? "... the server ends the stream (in ${secs}s, the stall would last 30 s)"
stop_serve
find "$HF_HOME" -name '*.incomplete' -o -name '*.moe-parts*' > "$T/left"
is "$(cat "$T/left")" "" "... and removes the partial file"

# ---- --mem-budget: streamed experts
"$BIN/moe-run" -m test/mix-GGUF:Q8_0 -p hello -n 8 --temp 0 > "$T/run" 2>/dev/null
check "moe-serve --mem-budget min" -- start_serve -m test/mix-GGUF:Q8_0 --mem-budget min
req POST /v1/completions '{"prompt":"hello","max_tokens":8,"temperature":0}' > "$T/c"
is "$(status "$T/c"):$(jget "$T/c" 'd["choices"][0]["text"]')" "200:$(cat "$T/run")" "streamed experts: the same text as moe-run in memory"
req GET /metrics > "$T/met"
grep -q '^moe_experts_requests_total{model="mix-GGUF:Q8_0"} [1-9]' "$T/met" &&
	grep -q '^moe_experts_read_bytes_total{model="mix-GGUF:Q8_0"} [1-9]' "$T/met" &&
	grep -q '^moe_experts_hit_ratio{model="mix-GGUF:Q8_0"} ' "$T/met" &&
	grep -q '^moe_experts_io_wait_seconds_total{model="mix-GGUF:Q8_0"} ' "$T/met"
ok $? "/metrics: the expert store's requests, bytes read, hit ratio, I/O wait"
stop_serve
[ -z "$SERVE_BAD" ]
ok $? "every server exited 0 after SIGTERM, no sanitizer reports${SERVE_BAD:+ (got:$SERVE_BAD)}"
"$SERVE" --port 0 --mem-budget 1x -m test/mix-GGUF:Q8_0 2>"$T/err"
is "$?" 2 "a bad --mem-budget: usage error"
grep -q "1x" "$T/err"
ok $? "... naming the value ($(msg "$T/err"))"
"$SERVE" --port 0 -m nosuch/model 2>"$T/err"
is "$?" 1 "-m with an unknown name: exit 1"
grep -q "no model named 'nosuch/model'" "$T/err"
ok $? "... naming it ($(msg "$T/err"))"
done_testing
