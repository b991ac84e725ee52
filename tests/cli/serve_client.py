#!/usr/bin/python3
"""serve_client.py — moe-serve's test client (tests/cli/t0900-serve.sh).

Starts moe-serve itself (loopback, an ephemeral port or a Unix socket),
talks to it with the standard library only (http.client for ordinary
requests, raw sockets where the bytes on the wire matter), kills it at the
end, and prints TAP.  Every wait is bounded.

usage: serve_client.py MOE_SERVE MODEL MOE_RUN TMPDIR [REF_GGUF REF_UTH]
       serve_client.py --part memory MOE_SERVE MODEL MOE_RUN TMPDIR MOE_UTH

With REF_GGUF/REF_UTH (a generated F32 model and its conversion), the
embeddings are also checked against the numpy reference
(serve_embed_ref.py).  --part memory (t0920-serve-memory.sh) tests the
shared --mem-budget with MOE_UTH (a small generated MoE model; MODEL, the
dense demo model, plays the busy one) and Ollama's num_ctx.
"""
import base64
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ARGS = sys.argv[1:]
PART = "main"
if ARGS[:1] == ["--part"]:
    PART, ARGS = ARGS[1], ARGS[2:]
SERVE, MODEL, RUN, TMP = ARGS[0:4]
REF_GGUF, REF_UTH = (ARGS[4:6] + [None, None])[:2]
n_test = 0
n_fail = 0


def ok(cond, name, diag=None):
    global n_test, n_fail
    n_test += 1
    print(("ok" if cond else "not ok") + " %d - %s" % (n_test, name), flush=True)
    if not cond:
        n_fail += 1
        if diag is not None:
            for line in str(diag).splitlines()[:20]:
                print("#   " + line, flush=True)


class Server:
    """A moe-serve process; port read from its 'listening on' line."""

    def __init__(self, *args, socket_path=None, model=None):
        self.log = open(os.path.join(TMP, "serve-%d.log" % time.monotonic_ns()), "w+")
        cmd = [SERVE, "-m", model or MODEL, "-t", "1"] + list(args)
        if socket_path:
            cmd += ["--socket", socket_path]
        else:
            cmd += ["--port", "0"]
        self.socket_path = socket_path
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            self.log.seek(0)
            text = self.log.read()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", text)
            if m:
                self.port = int(m.group(1))
                break
            if socket_path and "listening on unix:" in text:
                break
            if self.p.poll() is not None:
                raise RuntimeError("moe-serve exited: " + text)
            time.sleep(0.05)
        # wait for the model
        while time.monotonic() < deadline:
            st, _, _ = self.request("GET", "/health")
            if st == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("moe-serve did not become healthy")

    def conn(self, timeout=60):
        if self.socket_path:
            c = http.client.HTTPConnection("localhost", timeout=timeout)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect(self.socket_path)
            c.sock = s
            return c
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data

    def json(self, method, path, body=None, headers=None):
        st, h, data = self.request(method, path, body, headers)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, data

    def raw(self, data, timeout=10, shut=False):
        """Send raw bytes on a new TCP connection; return all bytes read until
        the server closes (or the timeout)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except (socket.timeout, ConnectionResetError, BrokenPipeError):
            pass
        finally:
            s.close()
        return out

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        # a sanitizer build reports here whatever the other checks missed
        self.log.seek(0)
        text = self.log.read()
        if re.search(r"Sanitizer|runtime error:", text):
            ok(False, "sanitizer report from moe-serve", text[-3000:])
        return rc


def mask(o):
    """Volatile fields (ids, times, durations) replaced by their type."""
    volatile = {"id", "created", "created_at", "modified_at", "expires_at", "total_duration",
                "load_duration", "prompt_eval_duration", "eval_duration", "system_fingerprint"}
    if isinstance(o, dict):
        return {k: ("<%s>" % type(v).__name__ if k in volatile else mask(v)) for k, v in o.items()}
    if isinstance(o, list):
        return [mask(v) for v in o]
    return o


def shape(o):
    """Keys and value types, recursively (the golden shape of a response)."""
    if isinstance(o, dict):
        return {k: shape(v) for k, v in o.items()}
    if isinstance(o, list):
        return [shape(v) for v in o[:1]]
    return type(o).__name__


def sse_events(raw):
    """Split an SSE body exactly: every event 'data: X\\n\\n', nothing else."""
    events = []
    rest = raw
    while rest:
        m = re.match(rb"data: ([^\n]*)\n\n", rest)
        if not m:
            raise ValueError("bad SSE framing at %r" % rest[:80])
        events.append(m.group(1).decode())
        rest = rest[m.end():]
    return events


def stream_body(srv, path, body, headers=None):
    """The raw body of a streamed response (http.client undoes chunking)."""
    c = srv.conn()
    c.request("POST", path, body=json.dumps(body), headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), data


CHAT = [{"role": "user", "content": "Who made the heaven and the earth?"}]


def test_shapes(srv):
    st, h, body = srv.request("GET", "/health")
    ok(st == 200 and json.loads(body) == {"status": "ok"}, "/health 200 {status: ok}", body)
    st, j = srv.json("GET", "/v1/models")
    ok(st == 200 and isinstance(j["data"][0].pop("created", None), int) and j == {
        "object": "list", "data": [{"id": "moe-demo", "object": "model", "owned_by": "moe"}]},
       "/v1/models shape", j)
    st, j = srv.json("GET", "/v1/models/moe-demo")
    ok(st == 200 and j.get("id") == "moe-demo", "/v1/models/ID", j)
    st, j = srv.json("POST", "/v1/chat/completions",
                     {"model": "moe-demo", "messages": CHAT, "max_tokens": 12, "temperature": 0})
    want = {"id": "<str>", "object": "chat.completion", "created": "<int>", "model": "moe-demo",
            "system_fingerprint": "<str>",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "str"},
                         "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": "int", "completion_tokens": "int", "total_tokens": "int"}}
    got = mask(j)
    if isinstance(got, dict) and got.get("choices"):
        got["choices"][0]["message"]["content"] = type(j["choices"][0]["message"]["content"]).__name__
        got["usage"] = shape(got["usage"])
    ok(st == 200 and got == want, "chat.completion shape (golden, volatile fields masked)", j)
    ok(st == 200 and j["usage"]["completion_tokens"] == 12 and
       j["usage"]["total_tokens"] == j["usage"]["prompt_tokens"] + 12, "usage counts", j)
    st, j = srv.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 8,
                                                 "temperature": 0})
    ok(st == 200 and j.get("object") == "text_completion" and
       set(j["choices"][0]) == {"index", "text", "logprobs", "finish_reason"}, "text_completion shape", j)
    # the same text as moe-run in-process
    run = subprocess.run([RUN, "-m", MODEL, "-t", "1", "-p", "Once upon", "-n", "8", "--temp", "0"],
                         capture_output=True, timeout=60)
    ok(st == 200 and j["choices"][0]["text"] == run.stdout.decode(),
       "/v1/completions text equals moe-run's", "%r vs %r" % (j, run.stdout))
    st, j = srv.json("POST", "/v1/chat/completions",
                     {"messages": CHAT, "max_tokens": 4, "temperature": 0, "logprobs": True,
                      "top_logprobs": 3})
    c = j["choices"][0]["logprobs"]["content"] if st == 200 else []
    ok(st == 200 and len(c) == 4 and all(
        set(e) == {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 3 and
        e["logprob"] <= 0 and abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-6
        for e in c), "chat logprobs: chosen token (greedy: the top one), 3 top_logprobs", j)
    ok(st == 200 and "".join(e["token"] for e in c) == j["choices"][0]["message"]["content"],
       "logprobs tokens spell the content", j)
    st, j = srv.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 3,
                                                 "temperature": 0, "logprobs": 2})
    lp = j["choices"][0]["logprobs"] if st == 200 else {}
    ok(st == 200 and set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"} and
       len(lp["tokens"]) == 3 and all(len(t) <= 2 for t in lp["top_logprobs"]),
       "completions logprobs (legacy shape)", j)
    # Ollama
    st, j = srv.json("POST", "/api/generate", {"model": "moe-demo", "prompt": "Once upon",
                                               "stream": False, "options": {"num_predict": 6,
                                                                            "temperature": 0}})
    keys = {"model", "created_at", "response", "done", "done_reason", "total_duration",
            "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
            "eval_duration"}
    ok(st == 200 and set(j) == keys and j["done"] is True and j["eval_count"] == 6 and
       all(isinstance(j[k], int) for k in keys if k.endswith("duration")),
       "/api/generate stream:false: one object, durations in ns", j)
    st, j = srv.json("POST", "/api/chat", {"model": "moe-demo:latest", "messages": CHAT,
                                           "stream": False, "options": {"num_predict": 5,
                                                                        "temperature": 0}})
    ok(st == 200 and j.get("message", {}).get("role") == "assistant" and j.get("done") is True and
       j.get("done_reason") == "length", "/api/chat stream:false (name:latest accepted)", j)
    st, j = srv.json("GET", "/api/tags")
    ok(st == 200 and j["models"][0]["name"] == "moe-demo" and
       set(j["models"][0]) >= {"name", "model", "modified_at", "size", "digest", "details"},
       "/api/tags", j)
    st, j = srv.json("GET", "/api/ps")
    ok(st == 200 and len(j["models"]) == 1 and "expires_at" in j["models"][0], "/api/ps", j)
    st, j = srv.json("POST", "/api/show", {"model": "moe-demo"})
    ok(st == 200 and j["model_info"]["general.architecture"] == "llama" and "template" in j and
       "details" in j, "/api/show", j)
    st, j = srv.json("GET", "/api/version")
    ok(st == 200 and isinstance(j.get("version"), str), "/api/version", j)
    # the registry endpoints (more in t0910-serve-registry.sh): the store
    # is empty and HF_HUB_OFFLINE=1 (t0900-serve.sh)
    st, j = srv.json("POST", "/api/pull", {"model": "/etc/passwd"})
    ok(st == 403 and isinstance(j.get("error"), str), "/api/pull of a path: 403", j)
    st, j = srv.json("DELETE", "/api/delete", {"model": "x"})
    ok(st == 404 and isinstance(j.get("error"), str), "/api/delete of a missing name: 404", j)
    st, j = srv.json("POST", "/tokenize", {"content": "Hello world"})
    ok(st == 200 and all(isinstance(t, int) for t in j["tokens"]), "/tokenize", j)
    st2, j2 = srv.json("POST", "/detokenize", {"tokens": j["tokens"]})
    ok(st2 == 200 and j2["content"] == "Hello world", "/detokenize inverts /tokenize", j2)
    st, h, body = srv.request("GET", "/metrics")
    text = body.decode()
    ok(st == 200 and h.get("content-type", "").startswith("text/plain") and all(
        re.search(r"^%s(\{[^}]*\})? \d" % n, text, re.M) for n in
        ["moe_requests_total", "moe_prompt_tokens_total", "moe_generated_tokens_total",
         "moe_queue_depth", "moe_kv_blocks_used", "moe_kv_blocks_total",
         "moe_generation_tokens_per_second"]), "/metrics Prometheus text", text)


def test_streams(srv):
    body = {"messages": CHAT, "max_tokens": 16, "temperature": 0}
    st, plain = srv.json("POST", "/v1/chat/completions", body)
    st, ctype, raw = stream_body(srv, "/v1/chat/completions",
                                 dict(body, stream=True, stream_options={"include_usage": True}))
    try:
        ev = sse_events(raw)
        framing = True
    except ValueError as e:
        ev, framing = [], False
        print("# " + str(e))
    ok(st == 200 and ctype == "text/event-stream" and framing and ev[-1] == "[DONE]",
       "SSE framing byte for byte: 'data: JSON\\n\\n' events, then 'data: [DONE]\\n\\n'", raw[:400])
    chunks = [json.loads(e) for e in ev[:-1]]
    ok(chunks and mask(chunks[0]) == {
        "id": "<str>", "object": "chat.completion.chunk", "created": "<int>", "model": "moe-demo",
        "system_fingerprint": "<str>", "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                           "content": ""},
                                                     "logprobs": None, "finish_reason": None}],
        "usage": None}, "first chunk: the role (golden)", chunks[:1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    ok(text == plain["choices"][0]["message"]["content"], "streamed text equals non-streamed (chat)",
       "%r vs %r" % (text, plain))
    ok(chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"] == [] and
       chunks[-1]["usage"] == plain["usage"], "finish chunk, then the usage chunk (include_usage)",
       chunks[-2:])
    ok(len({c["id"] for c in chunks}) == 1, "one id for all chunks")
    # completions
    body = {"prompt": "In the beginning", "max_tokens": 20, "temperature": 0}
    st, plain = srv.json("POST", "/v1/completions", body)
    st, ctype, raw = stream_body(srv, "/v1/completions", dict(body, stream=True))
    ev = sse_events(raw)
    chunks = [json.loads(e) for e in ev[:-1]]
    ok("".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"] and
       all("usage" not in c for c in chunks), "streamed text equals non-streamed (completions); "
       "no usage without include_usage", raw[:300])
    # Ollama NDJSON
    body = {"prompt": "In the beginning", "options": {"num_predict": 12, "temperature": 0}}
    st, plain = srv.json("POST", "/api/generate", dict(body, stream=False))
    st, ctype, raw = stream_body(srv, "/api/generate", body)
    lines = raw.split(b"\n")
    ok(st == 200 and ctype == "application/x-ndjson" and lines[-1] == b"" and
       all(l.startswith(b"{") and b"\n" not in l for l in lines[:-1]),
       "NDJSON framing: one object per line, each ending in \\n", raw[:300])
    objs = [json.loads(l) for l in lines[:-1]]
    ok(all(o["done"] is False for o in objs[:-1]) and objs[-1]["done"] is True and
       objs[-1]["response"] == "" and objs[-1]["eval_count"] == 12,
       "NDJSON: done:false pieces, then the done:true summary", objs[-1:])
    ok("".join(o["response"] for o in objs) == plain["response"],
       "streamed text equals non-streamed (Ollama)", "%r" % plain)
    st, ctype, raw = stream_body(srv, "/api/chat", {"messages": CHAT, "options": {
        "num_predict": 6, "temperature": 0}})
    objs = [json.loads(l) for l in raw.split(b"\n")[:-1]]
    ok(objs[-1]["done"] is True and all(o["message"]["role"] == "assistant" for o in objs),
       "/api/chat streams message pieces", objs[:2])


def test_stop(srv):
    body = {"prompt": "In the beginning", "max_tokens": 24, "temperature": 0}
    st, j = srv.json("POST", "/v1/completions", body)
    full = j["choices"][0]["text"]
    # a stop string from the middle of the greedy text
    words = full.split()
    stop = words[len(words) // 2] if len(words) > 2 else full[len(full) // 2:]
    cut = full[:full.find(stop)]
    st, j = srv.json("POST", "/v1/completions", dict(body, stop=stop))
    ok(st == 200 and j["choices"][0]["text"] == cut and j["choices"][0]["finish_reason"] == "stop",
       "stop string: text up to it, finish_reason stop", "%r / %r / %r" % (full, stop, j))
    st, j = srv.json("POST", "/v1/completions", dict(body, stop=["@@never", stop]))
    ok(st == 200 and j["choices"][0]["text"] == cut, "stop list", j)
    st, ctype, raw = stream_body(srv, "/v1/completions", dict(body, stop=stop, stream=True))
    chunks = [json.loads(e) for e in sse_events(raw)[:-1]]
    ok("".join(c["choices"][0]["text"] for c in chunks) == cut, "stop string while streaming", raw[:300])
    st, j = srv.json("POST", "/api/generate", {"prompt": "In the beginning", "raw": True,
                                               "stream": False, "options": {
                                                   "num_predict": 24, "temperature": 0, "stop": [stop]}})
    ok(st == 200 and j["response"] == cut and j["done_reason"] == "stop", "Ollama options.stop (raw)", j)


def test_concurrent(srv):
    body = {"prompt": "In the beginning", "max_tokens": 24, "temperature": 0, "stream": True}
    _, _, solo = stream_body(srv, "/v1/completions", body)

    def text_of(raw):
        return "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(raw)[:-1])

    want = text_of(solo)
    out = [None] * 16

    def worker(i):
        try:
            out[i] = text_of(stream_body(srv, "/v1/completions", body)[2])
        except Exception as e:  # reported below
            out[i] = "error: %s" % e
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    ok(all(o == want for o in out), "16 concurrent streams, temperature 0: each equals the solo "
       "answer", "%r vs %r" % (want, out))


def kv_used(srv):
    _, _, body = srv.request("GET", "/metrics")
    m = re.search(rb'moe_kv_blocks_used\{[^}]*\} (\d+)', body)
    q = re.search(rb'moe_queue_depth\{[^}]*\} (\d+)', body)
    return int(m.group(1)) if m else -1, int(q.group(1)) if q else -1


def test_abort(srv):
    body = json.dumps({"prompt": "In the beginning", "max_tokens": 200, "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(req)
    first = s.recv(4096)
    s.close()
    ok(first.startswith(b"HTTP/1.1 200"), "stream started", first[:100])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and kv_used(srv) != (0, 0):
        time.sleep(0.05)
    ok(kv_used(srv) == (0, 0), "a closed connection cancels its request: no KV blocks, empty queue",
       kv_used(srv))
    st, j = srv.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 4})
    ok(st == 200 and j["usage"]["completion_tokens"] == 4, "the next request works", j)


def status_of(resp):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", resp)
    return int(m.group(1)) if m else None


def post_raw(srv, path, body, extra=b"", host=b"127.0.0.1"):
    return srv.raw(b"POST " + path + b" HTTP/1.1\r\nHost: " + host +
                   b"\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra +
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)


def test_hostile(srv):
    p = b"/v1/chat/completions"
    cases = [
        ("truncated JSON", b'{"messages": [{"role": "user", "content": "hi"', 400),
        ("invalid JSON", b'{messages: nope}', 400),
        ("not an object", b'[1, 2, 3]', 400),
        ("10000 nested arrays", b'{"x":' + b"[" * 10000 + b"]" * 10000 + b"}", 400),
        ("invalid UTF-8", b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400),
        ("NUL byte in the body", b'{"messages":[{"role":"user","content":"a\x00b"}]}', 400),
        ("\\u0000 in a string", b'{"messages":[{"role":"user","content":"a\\u0000b"}]}', 400),
        ("negative max_tokens", b'{"messages":[{"role":"user","content":"a"}],"max_tokens":-5}', 400),
        ("huge max_tokens", b'{"messages":[{"role":"user","content":"a"}],"max_tokens":1000000000000}', 400),
        ("max_tokens a string", b'{"messages":[{"role":"user","content":"a"}],"max_tokens":"5"}', 400),
        ("n = 2", b'{"messages":[{"role":"user","content":"a"}],"n":2}', 400),
        ("temperature 1e309", b'{"messages":[{"role":"user","content":"a"}],"temperature":1e309}', 400),
        ("top_p 2", b'{"messages":[{"role":"user","content":"a"}],"top_p":2}', 400),
        ("messages missing", b'{"model":"moe-demo"}', 400),
        ("message without content", b'{"messages":[{"role":"user"}]}', 400),
        ("unknown model", b'{"model":"nope","messages":[{"role":"user","content":"a"}]}', 404),
        ("a path as the model", b'{"model":"/etc/passwd","messages":[{"role":"user","content":"a"}]}', 400),
        ("empty body", b'', 400),
    ]
    for name, body, want in cases:
        resp = post_raw(srv, p, body)
        st = status_of(resp)
        err = resp.split(b"\r\n\r\n", 1)[-1]
        try:
            e = json.loads(err)["error"]
            shape_ok = set(e) == {"message", "type", "param", "code"} and e["message"]
        except (ValueError, KeyError, TypeError):
            shape_ok = False
        ok(st == want and shape_ok, "%s -> %d with an OpenAI error object" % (name, want), resp[:300])
    resp = post_raw(srv, p, b'{"messages":[{"role":"user","content":"a"}],"max_tokens":2,'
                            b'"frobnicate":{"x":[1]},"user":"u","temperature":null}')
    ok(status_of(resp) == 200, "unknown fields and nulls are ignored", resp[:300])
    resp = post_raw(srv, b"/api/generate", b'{"prompt": 5}')
    ok(status_of(resp) == 400 and set(json.loads(resp.split(b"\r\n\r\n", 1)[1])) == {"error"},
       "Ollama errors are {\"error\": message}", resp[:300])
    resp = post_raw(srv, b"/api/generate", b'{"model":"nope","prompt":"x"}')
    ok(status_of(resp) == 404, "Ollama unknown model -> 404", resp[:300])
    long_prompt = json.dumps({"prompt": "and the " * 400, "max_tokens": 1}).encode()
    resp = post_raw(srv, b"/v1/completions", long_prompt)
    ok(status_of(resp) == 400 and b"context" in resp, "prompt longer than the context -> 400",
       resp[:300])
    # 100 MB body: refused from its Content-Length, connection closed
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Length: 104857600\r\n\r\n" + b"[" * 65536)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    ok(status_of(got) == 413, "100 MB body -> 413", got[:200])
    # the same without Content-Length (chunked): cut off at the limit
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    got = b""
    try:
        chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
        for _ in range(100):
            s.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    ok(status_of(got) == 413 or got == b"", "100 MB chunked body -> 413 or closed at the limit",
       got[:200])
    # Host header attacks (DNS rebinding)
    for host in [b"evil.example", b"127.0.0.1.evil.example", b"localhost.evil.example",
                 b"[::2]", b"localhost:80x", b""]:
        resp = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
        ok(status_of(resp) in (400, 403), "Host: %r -> 403" % host, resp[:200])
    for host in [b"localhost", b"localhost:8080", b"127.0.0.1", b"[::1]:1234", b"app.localhost"]:
        resp = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
        ok(status_of(resp) == 200, "Host: %r accepted" % host, resp[:200])
    # a huge header
    resp = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200000 +
                   b"\r\nConnection: close\r\n\r\n")
    ok(status_of(resp) in (413, 431, None), "a 200 kB header is refused", resp[:200])
    resp = srv.raw(b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    ok(status_of(resp) == 404, "unknown path -> 404", resp[:200])
    resp = srv.raw(b"GET /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    ok(status_of(resp) == 405, "GET on a POST endpoint -> 405", resp[:200])
    resp = srv.raw(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
    ok(status_of(resp) in (400, None), "TLS/garbage bytes -> 400 or closed", resp[:100])
    # slow headers (slowloris): the idle timeout closes the connection
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127")
    t0 = time.monotonic()
    try:
        got = s.recv(100)
    except (socket.timeout, ConnectionResetError):
        got = b"timeout"
    s.close()
    ok(got == b"" and time.monotonic() - t0 < 10, "slow headers: closed after the idle timeout "
       "(%.1f s)" % (time.monotonic() - t0), got)
    st, j = srv.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 4})
    ok(st == 200, "the server still serves after the hostile inputs", j)


def test_queue(srv_args):
    srv = Server("--parallel", "1", "--queue", "0", *srv_args)
    res = []
    lock = threading.Lock()

    def worker():
        try:
            st, h, body = srv.request("POST", "/v1/completions", {
                "prompt": "In the beginning", "max_tokens": 150, "ignore_eos": True})
        except Exception as e:
            st, h, body = -1, {}, str(e).encode()
        with lock:
            res.append((st, h, body))
    ts = [threading.Thread(target=worker) for _ in range(12)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    busy = [r for r in res if r[0] == 503]
    good = [r for r in res if r[0] == 200]
    ok(len(busy) >= 1 and len(busy) + len(good) == 12, "--parallel 1 --queue 0: %d of 12 got 503, "
       "the rest 200" % len(busy), [r[0] for r in res])
    ok(all(r[1].get("retry-after") == "1" and json.loads(r[2])["error"]["code"] == "server_busy"
           for r in busy), "503 carries Retry-After and an error object", busy[:1])
    ok(srv.stop() == 0, "exit 0 on SIGTERM")


def test_api_key():
    keyfile = os.path.join(TMP, "key")
    with open(keyfile, "w") as f:
        f.write("s3cret-key\n")
    srv = Server("--api-key-file", keyfile)
    st, j = srv.json("GET", "/v1/models")
    ok(st == 401 and j["error"]["code"] == "invalid_api_key", "no key -> 401", j)
    st, j = srv.json("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    ok(st == 401, "wrong key -> 401", j)
    st, j = srv.json("GET", "/v1/models", headers={"Authorization": "Bearer s3cret-ke"})
    ok(st == 401, "a prefix of the key -> 401", j)
    st, j = srv.json("GET", "/v1/models", headers={"Authorization": "Bearer s3cret-key"})
    ok(st == 200, "Authorization: Bearer KEY -> 200", j)
    st, j = srv.json("GET", "/api/tags", headers={"X-Api-Key": "s3cret-key"})
    ok(st == 200, "X-Api-Key: KEY -> 200", j)
    st, j = srv.json("GET", "/health")
    ok(st == 200, "/health needs no key", j)
    ok(srv.stop() == 0, "exit 0 on SIGTERM")


def test_cors():
    srv = Server("--cors", "http://app.example")
    st, h, _ = srv.request("OPTIONS", "/v1/chat/completions",
                           headers={"Origin": "http://app.example",
                                    "Access-Control-Request-Method": "POST"})
    ok(st == 204 and h.get("access-control-allow-origin") == "http://app.example",
       "--cors: preflight answered", h)
    st, h, _ = srv.request("GET", "/v1/models")
    ok(h.get("access-control-allow-origin") == "http://app.example", "--cors: header on responses", h)
    srv.stop()
    srv = Server()
    st, h, _ = srv.request("GET", "/v1/models")
    ok("access-control-allow-origin" not in h, "no CORS headers by default", h)
    srv.stop()


def test_unix():
    path = os.path.join(TMP, "moe.sock")
    srv = Server(socket_path=path)
    st = os.stat(path)
    ok(oct(st.st_mode & 0o777) == "0o700" or (st.st_mode & 0o077) == 0,
       "the socket is the owner's only", oct(st.st_mode))
    st_, j = srv.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 8,
                                                  "temperature": 0})
    ok(st_ == 200 and j["choices"][0]["text"], "a completion over the Unix socket", j)
    ok(srv.port is None, "--socket alone: no TCP listener")
    ok(srv.stop() == 0 and not os.path.exists(path), "exit 0, socket removed")


def test_sigterm_stream():
    srv = Server()
    body = json.dumps({"prompt": "In the beginning", "max_tokens": 200, "ignore_eos": True,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    got = s.recv(100)
    srv.p.send_signal(signal.SIGTERM)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    rc = srv.stop()
    ok(rc == 0, "SIGTERM during a stream: exit 0", rc)
    ok(got.startswith(b"HTTP/1.1 200") and (b"data: [DONE]" in got or b"finish_reason" in got),
       "the stream ended properly", got[-300:])


def test_keep_alive():
    srv = Server("--keep-alive", "1")
    st, j = srv.json("GET", "/api/ps")
    ok(len(j["models"]) == 1, "loaded at start", j)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and srv.json("GET", "/api/ps")[1]["models"]:
        time.sleep(0.1)
    ok(srv.json("GET", "/api/ps")[1]["models"] == [], "unloaded after keep_alive", None)
    st, j = srv.json("POST", "/api/generate", {"prompt": "Once upon", "stream": False,
                                               "keep_alive": "10m", "options": {"num_predict": 3}})
    ok(st == 200 and j["done"] and j["load_duration"] > 0, "loaded again on first use "
       "(load_duration %s ns)" % j.get("load_duration"), j)
    time.sleep(1.5)
    ok(len(srv.json("GET", "/api/ps")[1]["models"]) == 1, "keep_alive from the request holds it", None)
    st, j = srv.json("POST", "/api/generate", {"model": "moe-demo", "keep_alive": "5m"})
    ok(st == 200 and j["done_reason"] == "load", "empty prompt: load only", j)
    st, j = srv.json("POST", "/api/generate", {"model": "moe-demo", "keep_alive": 0})
    ok(st == 200 and j["done"] and j["done_reason"] == "unload" and j["response"] == "",
       "keep_alive 0 and no prompt: done_reason unload", j)
    # an idle model is unloaded before the answer
    ok(srv.json("GET", "/api/ps")[1]["models"] == [], "keep_alive 0 unloads", None)
    st, j = srv.json("POST", "/api/chat", {"model": "moe-demo", "messages": [], "keep_alive": 0})
    ok(st == 200 and j["done_reason"] == "unload" and j["message"] == {"role": "assistant", "content": ""}
       and srv.json("GET", "/api/ps")[1]["models"] == [],
       "/api/chat without messages, keep_alive 0: unload, nothing loaded", j)
    st, j = srv.json("POST", "/api/generate", {"prompt": "Once upon", "stream": False,
                                               "keep_alive": 0, "options": {"num_predict": 2}})
    ok(st == 200 and j["done_reason"] == "length", "keep_alive 0 with a prompt: loads and answers", j)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and srv.json("GET", "/api/ps")[1]["models"]:
        time.sleep(0.05)
    ok(srv.json("GET", "/api/ps")[1]["models"] == [], "... then unloads", None)
    ok(srv.stop() == 0, "exit 0")


def test_models():
    srv = Server("-m", "second=" + MODEL)
    names = [m["id"] for m in srv.json("GET", "/v1/models")[1]["data"]]
    ok(names == ["moe-demo", "second"], "two models listed", names)
    ok([m["name"] for m in srv.json("GET", "/api/ps")[1]["models"]] == ["moe-demo"],
       "only the default model loaded at start", None)
    st, j = srv.json("POST", "/v1/completions", {"model": "second", "prompt": "Once upon",
                                                 "max_tokens": 8, "temperature": 0})
    st0, j0 = srv.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 8,
                                                   "temperature": 0})
    ok(st == 200 and j["model"] == "second" and j["choices"][0]["text"] == j0["choices"][0]["text"],
       "the second model loads on first use and answers", j)
    ok(len(srv.json("GET", "/api/ps")[1]["models"]) == 2, "/api/ps shows both", None)
    st, j = srv.json("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})
    ok(st in (400, 404), "a path is refused without --allow-paths", j)
    srv.stop()
    srv = Server("--allow-paths")
    st, j = srv.json("POST", "/v1/completions", {"model": MODEL, "prompt": "Once upon",
                                                 "max_tokens": 4})
    ok(st == 200, "--allow-paths: a path loads", j)
    st, j = srv.json("POST", "/v1/completions", {"model": "/nonexistent/x.uth", "prompt": "x"})
    ok(st == 404 and "cannot be loaded" in j["error"]["message"], "a path that does not load: "
       "404 with the reason", j)
    ok(srv.stop() == 0, "exit 0")


def test_bench_endpoint():
    bench = os.path.join(os.path.dirname(SERVE), "moe-bench")
    path = os.path.join(TMP, "bench.sock")
    srv = Server("--port", "0", "--host", "127.0.0.1", socket_path=path)
    for url in ["http://127.0.0.1:%d" % srv.port, "unix:" + path]:
        r = subprocess.run([bench, "--endpoint", url, "-p", "16", "-n", "8", "-np", "1,3", "-r", "2"],
                           capture_output=True, timeout=120)
        rows = [l.split("|")[1:-1] for l in r.stdout.decode().splitlines()[2:]]
        good = r.returncode == 0 and len(rows) == 2 and all(
            int(row[1]) == n and int(row[4]) == 2 * n and float(row[5]) > 0 and float(row[8]) > 0
            for row, n in zip(rows, [1, 3]))
        ok(good, "moe-bench --endpoint %s: rows for -np 1 and 3, every request counted"
           % url.split(":")[0], r.stdout.decode() + r.stderr.decode())
    srv.stop()
    r = subprocess.run([bench, "--endpoint", "http://127.0.0.1:1", "-np", "1", "-r", "1"],
                       capture_output=True, timeout=60)
    ok(r.returncode == 1 and b"every request failed" in r.stderr, "moe-bench --endpoint: no "
       "server -> exit 1 with the reason", r.stderr)


def test_embeddings(srv):
    st, j = srv.json("POST", "/v1/embeddings", {"input": ["In the beginning", "God created"]})
    vecs = [d["embedding"] for d in j.get("data", [])] if st == 200 else []
    ok(st == 200 and [d["index"] for d in j["data"]] == [0, 1] and j["object"] == "list" and
       j["data"][0]["object"] == "embedding" and set(j["usage"]) == {"prompt_tokens", "total_tokens"},
       "/v1/embeddings shape", str(j)[:300])
    ok(vecs and all(abs(sum(x * x for x in v) - 1) < 1e-5 for v in vecs) and vecs[0] != vecs[1],
       "embeddings are L2-normalised and differ by text", None)
    st, one = srv.json("POST", "/v1/embeddings", {"input": "God created"})
    ok(st == 200 and one["data"][0]["embedding"] == vecs[1], "an input alone = in a batch", None)
    st, b = srv.json("POST", "/v1/embeddings", {"input": "God created", "encoding_format": "base64"})
    raw = base64.b64decode(b["data"][0]["embedding"]) if st == 200 else b""
    import struct
    floats = list(struct.unpack("<%df" % (len(raw) // 4), raw))
    ok(len(floats) == len(vecs[1]) and all(abs(a - c) <= 1e-7 * max(1, abs(c))
                                           for a, c in zip(floats, vecs[1])),
       "base64: little-endian float32 of the same vector", str(b)[:200])
    st, o = srv.json("POST", "/api/embed", {"input": "God created"})
    ok(st == 200 and o["embeddings"][0] == vecs[1] and o["prompt_eval_count"] > 0 and
       isinstance(o["total_duration"], int), "/api/embed", str(o)[:200])
    st, o = srv.json("POST", "/api/embeddings", {"prompt": "God created"})
    ok(st == 200 and o["embedding"] == vecs[1], "/api/embeddings (the older one)", str(o)[:200])
    for body, name in [({"input": ""}, "empty input"), ({"input": 5}, "a number"),
                       ({"input": []}, "no inputs"), ({"input": ["a", 3]}, "a number in the list"),
                       ({"input": "a", "encoding_format": "hex"}, "bad encoding_format"),
                       ({"input": "a", "dimensions": 8}, "dimensions"),
                       ({"input": "and the " * 400}, "input longer than the context")]:
        st, j = srv.json("POST", "/v1/embeddings", body)
        ok(st == 400 and "message" in j.get("error", {}), "embeddings: %s -> 400" % name, j)


def test_embeddings_ref():
    if not REF_GGUF:
        return
    srv = Server(model=REF_UTH)
    text = "hello world and more"
    st, ids = srv.json("POST", "/tokenize", {"content": text, "add_special": True})
    st2, emb = srv.json("POST", "/v1/embeddings", {"input": text})
    srv.stop()
    with open(os.path.join(TMP, "ids.json"), "w") as f:
        json.dump(ids, f)
    with open(os.path.join(TMP, "emb.json"), "w") as f:
        json.dump(emb, f)
    r = subprocess.run([os.environ.get("PYTHON3", "/usr/bin/python3"),
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_embed_ref.py"),
                        REF_GGUF, os.path.join(TMP, "ids.json"), os.path.join(TMP, "emb.json")],
                       capture_output=True, timeout=300)
    line = r.stdout.decode().strip()
    ok(st == 200 and st2 == 200 and r.returncode == 0, line.split(" - ", 1)[-1] if line else
       "embeddings against the reference", r.stdout.decode() + r.stderr.decode())


def test_limits_v6():
    srv = Server("--max-connections", "2")
    time.sleep(0.5)  # the start-up health checks' connections wind down
    a = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    b = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    time.sleep(0.3)
    resp = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")

    def closed(sk):
        sk.settimeout(0.5)
        try:
            return sk.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True
    # a server-side thread of an earlier connection may still count: then
    # a or b is the one refused; never are all three served
    refused = [status_of(resp) is None, closed(a), closed(b)]
    ok(any(refused), "--max-connections 2: of three connections one is closed", (resp[:100], refused))
    a.close()
    b.close()
    time.sleep(0.3)
    st, j = srv.json("GET", "/v1/models")
    ok(st == 200, "served again once the others closed", j)
    srv.stop()
    try:
        socket.create_connection(("::1", 9), timeout=1).close()
        have_v6 = True
    except ConnectionRefusedError:
        have_v6 = True
    except OSError:
        have_v6 = False
    if not have_v6:
        ok(True, "--host ::1 # SKIP no IPv6 loopback")
        return
    log = open(os.path.join(TMP, "v6.log"), "w+")
    p = subprocess.Popen([SERVE, "-m", MODEL, "-t", "1", "--host", "::1", "--port", "0"],
                         stdout=subprocess.DEVNULL, stderr=log)
    port = None
    for _ in range(200):
        log.seek(0)
        m = re.search(r"listening on http://\[::1\]:(\d+)/", log.read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    st = None
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("::1", port, timeout=10)
            c.request("GET", "/health")
            st = c.getresponse().status
            c.close()
        except (OSError, TypeError):
            st = None
        if st == 200:
            break
        time.sleep(0.05)
    c = http.client.HTTPConnection("::1", port, timeout=10)
    c.request("GET", "/v1/models", headers={"Host": "[::1]:%d" % port})
    ok(c.getresponse().status == 200, "--host ::1: served, Host [::1] accepted")
    c.close()
    c = http.client.HTTPConnection("::1", port, timeout=10)
    c.request("GET", "/v1/models", headers={"Host": "evil.example"})
    ok(c.getresponse().status == 403, "--host ::1: Host evil.example -> 403")
    c.close()
    p.send_signal(signal.SIGTERM)
    ok(p.wait(timeout=20) == 0, "--host ::1: exit 0")


# ------------------------------------------------------ --part memory

def ps(srv):
    """{name: size} of the loaded models."""
    return dict((m["name"], m["size"]) for m in srv.json("GET", "/api/ps")[1]["models"])


def complete(srv, model, n=6):
    return srv.json("POST", "/v1/completions", {"model": model, "prompt": "Once upon",
                                               "max_tokens": n, "temperature": 0})


def busy(srv, model):
    """A long stream on model, started (its first event read): the model
    is busy until the returned socket closes."""
    body = json.dumps({"model": model, "prompt": "In the beginning", "max_tokens": 3000,
                       "ignore_eos": True, "temperature": 0, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall((b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
               b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body)
    got = b""
    while b"data: " not in got and not (b"\r\n\r\n" in got and b" 200 " not in got[:13]):
        b = s.recv(4096)
        if not b:
            break
        got += b
    return s, got


def idle(srv, model):
    """Wait (bounded) until model has nothing queued or running."""
    deadline = time.monotonic() + 30
    pat = re.compile(rb'moe_queue_depth\{model="%s"\} (\d+)' % model.encode())
    while time.monotonic() < deadline:
        m = pat.search(srv.request("GET", "/metrics")[2])
        if m and m.group(1) == b"0":
            return True
        time.sleep(0.05)
    return False


def test_budget(moe):
    # the sizes the budgets below are made of: all weights, and the least a
    # streamed model needs (its fixed weights and one layer of experts)
    srv = Server(model="moe=" + moe)
    full = ps(srv)["moe"]
    st, j = complete(srv, "moe")
    want = j["choices"][0]["text"]
    srv.stop()
    ok(0 < full <= os.path.getsize(moe), "/api/ps size: the weights (%d bytes, file %d)"
       % (full, os.path.getsize(moe)))
    srv = Server("--mem-budget", "min", model="moe=" + moe)
    small = ps(srv)["moe"]
    srv.stop()
    ok(0 < small < full, "--mem-budget min: streamed, smaller (%d bytes)" % small)
    srv = Server(model="demo=" + MODEL)
    demo = ps(srv)["demo"]
    srv.stop()

    copies = []
    for k in (2, 3):
        copies.append(os.path.join(TMP, "moe%d.uth" % k))
        with open(moe, "rb") as f, open(copies[-1], "wb") as g:
            g.write(f.read())
    # two fit, three do not: the least recently used idle one goes
    srv = Server("-m", "m2=" + copies[0], "-m", "m3=" + copies[1], "-m", "demo=" + MODEL,
                 "--mem-budget", str(2 * full + 1000), model="m1=" + moe)
    ok(ps(srv) == {"m1": full}, "the default model loads at start, all in memory", ps(srv))
    st, j = complete(srv, "m2")
    ok(st == 200 and ps(srv) == {"m1": full, "m2": full}, "a second one fits beside it", ps(srv))
    complete(srv, "m1")  # m2 is now the least recently used
    st, j = complete(srv, "m3")
    ok(st == 200 and j["choices"][0]["text"] == want and ps(srv) == {"m1": full, "m3": full},
       "a third: the least recently used idle model (m2) unloads", ps(srv))
    st, h, body = srv.request("POST", "/v1/completions", {"model": "demo", "prompt": "x",
                                                          "max_tokens": 1})
    ok(st == 507 and b"more than the whole --mem-budget" in body,
       "a model larger than the whole budget: 507", body)
    st, j = srv.json("POST", "/api/generate", {"model": "demo", "prompt": "x", "stream": False})
    ok(st == 507 and "error" in j, "... Ollama's form too", j)
    ok(set(ps(srv)) == {"m1", "m3"}, "... and nothing was unloaded for it", ps(srv))
    ok(srv.stop() == 0, "exit 0")

    # alone and too big for all its weights: experts streamed in the budget
    srv = Server("--mem-budget", str(small + 4096), model="moe=" + moe)
    st, j = complete(srv, "moe")
    met = srv.request("GET", "/metrics")[2]
    ok(ps(srv) == {"moe": small + 4096} and st == 200 and j["choices"][0]["text"] == want,
       "a model bigger than the budget streams its experts within it, same text", (ps(srv), j))
    ok(re.search(rb'moe_experts_requests_total\{model="moe"\} [1-9]', met) is not None,
       "... through the expert store (/metrics)", met[-500:])
    srv.stop()

    # the others busy: the new model streams in the room left
    srv = Server("-m", "moe=" + moe, "--mem-budget", str(demo + small + 8192), "-c", "4096",
                 model="demo=" + MODEL)
    s, got = busy(srv, "demo")
    ok(b" 200 " in got.split(b"\r\n")[0], "a long stream keeps demo busy", got[:200])
    st, j = complete(srv, "moe")
    sizes = ps(srv)
    ok(st == 200 and j["choices"][0]["text"] == want and sizes == {"demo": demo, "moe": small + 8192},
       "demo busy: moe streams within the room left, same text", (sizes, j))
    s.close()
    ok(idle(srv, "demo"), "the stream's end leaves demo idle")
    srv.stop()

    # the others busy and too little room: 503 with Retry-After, later 200
    srv = Server("-m", "moe=" + moe, "--mem-budget", str(demo + small // 2), "-c", "4096",
                 model="demo=" + MODEL)
    s, got = busy(srv, "demo")
    st, h, body = srv.request("POST", "/v1/completions", {"model": "moe", "prompt": "x",
                                                         "max_tokens": 1})
    ok(st == 503 and "retry-after" in h and b"retry later" in body,
       "demo busy, no room for moe even streamed: 503 with Retry-After", (st, h, body))
    s.close()
    ok(idle(srv, "demo"), "demo idle again")
    st, j = complete(srv, "moe")
    ok(st == 200 and ps(srv) == {"moe": full}, "then moe loads: demo, idle, unloaded", ps(srv))
    ok(srv.stop() == 0, "exit 0")

    # keep_alive 0 frees the room at once
    srv = Server("-m", "m2=" + copies[0], "--mem-budget", str(full + 1000), model="m1=" + moe)
    st, j = srv.json("POST", "/api/generate", {"model": "m1", "keep_alive": 0})
    ok(st == 200 and j["done_reason"] == "unload" and ps(srv) == {}, "keep_alive 0 unloads m1", j)
    st, j = complete(srv, "m2")
    ok(st == 200 and ps(srv) == {"m2": full}, "m2 then loads in all its weights", ps(srv))
    ok(srv.stop() == 0, "exit 0")


def test_num_ctx():
    srv = Server("-c", "64")
    st, j = srv.json("POST", "/tokenize", {"content": "Once upon a time", "add_special": True})
    n = len(j["tokens"])
    gen = lambda opts: srv.json("POST", "/api/generate", {"prompt": "Once upon a time", "raw": True,
                                                           "stream": False, "options": opts})
    st, j = gen({"temperature": 0, "num_predict": 10})
    ok(st == 200 and j["eval_count"] == 10 and j["prompt_eval_count"] == n,
       "10 tokens without num_ctx (prompt %d tokens)" % n, j)
    ten = j["response"]
    st, j = gen({"temperature": 0, "num_predict": 10, "num_ctx": n + 4})
    ok(st == 200 and j["done_reason"] == "length" and j["eval_count"] == 4 and ten.startswith(j["response"]),
       "num_ctx = prompt + 4: four tokens, done_reason length", j)
    st, j = gen({"temperature": 0, "num_ctx": n + 4})
    ok(st == 200 and j["eval_count"] == 4, "... also without num_predict", j)
    st, j = gen({"num_ctx": n})
    ok(st == 400 and "num_ctx" in j["error"], "a prompt that fills num_ctx: 400 naming it", j)
    st, j = gen({"temperature": 0, "num_ctx": 100000, "num_predict": 200})
    ok(st == 400 and "64" in j["error"], "num_ctx capped at -c (64): the cap still applies", j)
    st, j = gen({"temperature": 0, "num_ctx": 100000})
    ok(st == 200 and j["prompt_eval_count"] + j["eval_count"] == 64 and j["done_reason"] == "length",
       "num_ctx above -c: generation stops at the server's context (64 tokens)", j)
    st, j = gen({"num_ctx": "big"})
    ok(st == 400, "num_ctx not an integer: 400", j)
    ok(srv.stop() == 0, "exit 0")


def test_bench_serve():
    """scripts/bench-serve runs and prints its three tables (no timing
    is judged: the figures are for people, on a quiet machine)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                          "bench-serve")
    out = os.path.join(TMP, "bench.json")
    r = subprocess.run(["/usr/bin/python3", script, "--bin", os.path.dirname(SERVE), "-m", MODEL,
                        "-t", "1", "--rounds", "1", "--np", "1,2", "-p", "16", "-n", "4",
                        "--ttft-p", "8", "--ttft-reps", "2", "--json", out],
                       capture_output=True, text=True, timeout=600)
    rows = [l for l in r.stdout.splitlines() if l.startswith("| ")]
    good = (r.returncode == 0 and any(l.startswith("| time to first token |") for l in rows)
            and any(l.startswith("| 2 | ") for l in rows)
            and any(l.startswith("| idle, model loaded |") for l in rows))
    ok(good, "scripts/bench-serve: TTFT, throughput (1 and 2 clients) and RSS tables",
       r.stdout + r.stderr)
    with open(out) if good else open(os.devnull) as f:
        j = json.load(f) if good else {}
    ok(good and len(j["samples"]["tps"]["2"]["unix"]) == 1 and j["rss_idle"]["VmRSS"] > 0,
       "... and its --json samples", j)


def main_memory():
    r = subprocess.run([SERVE, "--port", "0", "-m", MODEL, "--mem-budget", "50%"],
                       capture_output=True, timeout=30)
    ok(r.returncode == 2 and b"50%" in r.stderr and b"shared" in r.stderr,
       "--mem-budget 50%: usage error (the budget is shared, not one model's)", r.stderr)
    test_budget(REF_GGUF)
    test_num_ctx()
    test_bench_serve()
    print("1..%d" % n_test)
    sys.exit(1 if n_fail else 0)


def main():
    if PART == "memory":
        return main_memory()
    srv = Server("--idle-timeout", "2")
    try:
        test_shapes(srv)
        test_streams(srv)
        test_stop(srv)
        test_concurrent(srv)
        test_abort(srv)
        test_hostile(srv)
        test_embeddings(srv)
    finally:
        rc = srv.stop()
    ok(rc == 0, "exit 0 on SIGTERM", rc)
    test_queue([])
    test_api_key()
    test_cors()
    test_unix()
    test_sigterm_stream()
    test_keep_alive()
    test_models()
    test_bench_endpoint()
    test_limits_v6()
    test_embeddings_ref()
    print("1..%d" % n_test)
    sys.exit(1 if n_fail else 0)


if __name__ == "__main__":
    main()
