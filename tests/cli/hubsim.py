#!/usr/bin/env python3
"""hubsim.py — a small imitation of the Hugging Face hub for moe-pull's tests.

Two HTTP servers on 127.0.0.1 (ports chosen by the kernel, written to
--portfile as "HUB_PORT CDN_PORT"):

  hub  GET  /api/models/ORG/NAME/revision/REV   {"sha": COMMIT, "siblings": [...]}
       HEAD|GET /ORG/NAME/resolve/REV/FILE
            small files: 200, ETag = git blob sha1, X-Repo-Commit
            LFS files (.gguf, .safetensors, or larger than 64 KiB): 302 to the
            CDN with X-Linked-Etag = sha256, X-Linked-Size, X-Repo-Commit
  cdn  HEAD|GET /blobs/SHA256    with Range support (206)

A repo is a directory: --repo ORG/NAME=DIR (repeatable).  Its commit is
the sha1 of the file names and contents, so it changes when the files do.
--token T makes the hub answer 401 without "Authorization: Bearer T".
--log FILE records one line per request: "SERVER METHOD PATH range=R
auth=yes|no bytes=N status=S".

Faults (--fault, repeatable), to test what a client does with bad answers:
  drop:N[:K]        the first K (default 1) CDN bodies stop after N bytes
                    (connection closed; Content-Length announced the whole)
  norange           the CDN ignores Range and sends the whole file (200)
  wrongbytes        the CDN changes one byte of every body
  status:CODE[:K]   the first K (default 1000000) CDN GETs answer CODE
  hubstatus:CODE    resolve and API requests answer CODE (401, 403, 404, ...)
  retryafter:S      with status 429/503: send Retry-After: S
  stall:N           CDN bodies stop after N bytes and then send nothing
  slow:BPS          CDN bodies at BPS bytes per second
  redirectloop      the CDN redirects every request to itself
  hugeheader        resolve answers carry 40 headers of 5000 bytes
  giantheader       resolve answers carry one header of 200 KB
  lielen            the CDN announces 1000 bytes more than it sends
  badsize           X-Linked-Size is 10 bytes less than the file
  evilname:NAME     the listing also names NAME (e.g. ../x.gguf)
  nocommit          resolve answers have no X-Repo-Commit
The process ends by itself after --lifetime seconds (default 120).
"""
import argparse
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_MIN = 64 * 1024


class State:
    def __init__(self, args):
        self.repos = {}   # "org/name" -> dir
        self.blobs = {}   # sha256 -> path
        self.token = args.token
        self.faults = {}
        self.counts = {}
        self.lock = threading.Lock()
        self.log = open(args.log, "a", buffering=1) if args.log else None
        for f in args.fault or []:
            parts = f.split(":", 1)
            self.faults[parts[0]] = parts[1] if len(parts) > 1 else ""
        for r in args.repo or []:
            name, d = r.split("=", 1)
            self.repos[name] = d
        self.meta = {}

    def files(self, repo):
        d = self.repos[repo]
        out = []
        for root, dirs, names in os.walk(d):
            dirs.sort()
            for n in sorted(names):
                p = os.path.join(root, n)
                out.append(os.path.relpath(p, d))
        return out

    def commit(self, repo):
        h = hashlib.sha1()
        for f in self.files(repo):
            h.update(f.encode() + b"\0")
            h.update(self.file_meta(repo, f)["sha256"].encode())
        return h.hexdigest()

    def file_meta(self, repo, rel):
        p = os.path.join(self.repos[repo], rel)
        st = os.stat(p)
        key = (p, st.st_mtime_ns, st.st_size)
        m = self.meta.get(key)
        if m is None:
            s256, s1 = hashlib.sha256(), hashlib.sha1()
            s1.update(b"blob %d\0" % st.st_size)
            with open(p, "rb") as fh:
                while True:
                    b = fh.read(1 << 20)
                    if not b:
                        break
                    s256.update(b)
                    s1.update(b)
            lfs = rel.endswith((".gguf", ".safetensors")) or st.st_size > LFS_MIN
            m = {"sha256": s256.hexdigest(), "sha1": s1.hexdigest(), "size": st.st_size,
                 "lfs": lfs, "path": p}
            self.meta[key] = m
            with self.lock:
                self.blobs[m["sha256"]] = p
        return m

    def take(self, name, limit):
        """True for the first `limit` uses of a counted fault."""
        with self.lock:
            n = self.counts.get(name, 0)
            self.counts[name] = n + 1
            return n < limit


def make_handler(state, server_name, ports):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def record(self, status, nbytes, rng=""):
            if state.log:
                auth = "yes" if self.headers.get("Authorization") else "no"
                state.log.write("%s %s %s range=%s auth=%s bytes=%d status=%d\n" % (
                    server_name, self.command, self.path, rng or "-", auth, nbytes, status))

        def send_simple(self, code, body=b"", headers=None):
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.record(code, len(body) if self.command != "HEAD" else 0)

        def do_HEAD(self):
            self.route()

        def do_GET(self):
            self.route()

        def route(self):
            try:
                if server_name == "hub":
                    self.hub()
                else:
                    self.cdn()
            except (BrokenPipeError, ConnectionResetError):
                pass

        # ------------------------------------------------------------ hub
        def hub(self):
            f = state.faults
            if state.token and self.headers.get("Authorization") != "Bearer " + state.token:
                return self.send_simple(401, b'{"error":"unauthorized"}',
                                        {"X-Error-Code": "GatedRepo",
                                         "X-Error-Message": "Access restricted"})
            if "hubstatus" in f:
                code = int(f["hubstatus"])
                return self.send_simple(code, b"{}", {"X-Error-Code": "Simulated"})
            path = urllib.parse.urlsplit(self.path).path
            m = re.match(r"^/api/models/([^/]+/[^/]+)/revision/(.+)$", path)
            if m:
                return self.api(m.group(1), urllib.parse.unquote(m.group(2)))
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                return self.resolve(m.group(1), urllib.parse.unquote(m.group(2)),
                                    urllib.parse.unquote(m.group(3)))
            self.send_simple(404, b"{}", {"X-Error-Code": "EntryNotFound"})

        def check_rev(self, repo, rev):
            if repo not in state.repos:
                self.send_simple(404, b"{}", {"X-Error-Code": "RepoNotFound",
                                              "X-Error-Message": "Repository not found"})
                return None
            c = state.commit(repo)
            if rev not in ("main", c):
                self.send_simple(404, b"{}", {"X-Error-Code": "RevisionNotFound",
                                              "X-Error-Message": "Invalid rev id: " + rev})
                return None
            return c

        def api(self, repo, rev):
            c = self.check_rev(repo, rev)
            if c is None:
                return
            sib = [{"rfilename": n} for n in state.files(repo)]
            if "evilname" in state.faults:
                sib.append({"rfilename": state.faults["evilname"]})
            body = json.dumps({"id": repo, "sha": c, "siblings": sib}).encode()
            self.send_simple(200, body, {"Content-Type": "application/json"})

        def resolve(self, repo, rev, rel):
            c = self.check_rev(repo, rev)
            if c is None:
                return
            if rel not in state.files(repo):
                return self.send_simple(404, b"{}", {"X-Error-Code": "EntryNotFound",
                                                     "X-Error-Message": "Entry not found"})
            m = state.file_meta(repo, rel)
            h = {}
            if "nocommit" not in state.faults:
                h["X-Repo-Commit"] = c
            if "hugeheader" in state.faults:
                for i in range(40):
                    h["X-Padding-%d" % i] = "x" * 5000
            if "giantheader" in state.faults:
                h["X-Padding"] = "x" * 200000
            if m["lfs"]:
                size = m["size"] - (10 if "badsize" in state.faults else 0)
                h["X-Linked-Etag"] = '"%s"' % m["sha256"]
                h["X-Linked-Size"] = str(size)
                h["ETag"] = '"%s"' % m["sha1"]
                h["Location"] = "http://127.0.0.1:%d/blobs/%s?repo=%s" % (
                    ports["cdn"], m["sha256"], urllib.parse.quote(repo, safe=""))
                return self.send_simple(302, b"", h)
            h["ETag"] = '"%s"' % m["sha1"]
            h["Accept-Ranges"] = "bytes"
            with open(m["path"], "rb") as fh:
                body = fh.read()
            self.send_simple(200, body, h)

        # ------------------------------------------------------------ cdn
        def cdn(self):
            f = state.faults
            path = urllib.parse.urlsplit(self.path).path
            if "redirectloop" in f:
                return self.send_simple(302, b"", {"Location": self.path})
            m = re.match(r"^/blobs/([0-9a-f]{64})$", path)
            p = state.blobs.get(m.group(1)) if m else None
            if not p:
                return self.send_simple(404, b"not found")
            if self.command == "GET" and "status" in f:
                code, _, k = f["status"].partition(":")
                if state.take("status", int(k) if k else 1000000):
                    h = {}
                    if "retryafter" in f:
                        h["Retry-After"] = f["retryafter"]
                    return self.send_simple(int(code), b"busy", h)
            size = os.path.getsize(p)
            start, end = 0, size
            rng = self.headers.get("Range")
            partial = False
            if rng and "norange" not in f:
                mm = re.match(r"bytes=(\d+)-(\d*)$", rng)
                if mm:
                    start = int(mm.group(1))
                    end = int(mm.group(2)) + 1 if mm.group(2) else size
                    end = min(end, size)
                    if start >= size:
                        return self.send_simple(416, b"", {"Content-Range": "bytes */%d" % size})
                    partial = True
            n = end - start
            self.send_response(206 if partial else 200)
            self.send_header("Accept-Ranges", "bytes")
            if partial:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
            announced = n + (1000 if "lielen" in f else 0)
            self.send_header("Content-Length", str(announced))
            self.end_headers()
            if self.command == "HEAD":
                return self.record(206 if partial else 200, 0, rng)
            limit = n
            close = False
            if "drop" in f:
                nb, _, k = f["drop"].partition(":")
                if state.take("drop", int(k) if k else 1):
                    limit = min(n, int(nb))
                    close = True
            stall = int(f["stall"]) if "stall" in f else None
            slow = int(f["slow"]) if "slow" in f else None
            sent = 0
            self.wfile.flush()
            with open(p, "rb") as fh:
                if not (stall is not None or slow or "wrongbytes" in f or close or "lielen" in f):
                    # the fast path, for throughput measurements
                    sent = os.sendfile(self.connection.fileno(), fh.fileno(), start, n) if n else 0
                    while sent < n:
                        k = os.sendfile(self.connection.fileno(), fh.fileno(), start + sent, n - sent)
                        if k == 0:
                            break
                        sent += k
                    self.record(206 if partial else 200, sent, rng)
                    return
                fh.seek(start)
                first = True
                while sent < limit:
                    step = min(limit - sent, 65536 if not slow else max(1, slow // 10))
                    b = fh.read(step)
                    if not b:
                        break
                    if "wrongbytes" in f and first:
                        b = bytes([b[0] ^ 0xFF]) + b[1:]
                    first = False
                    if stall is not None and sent + len(b) > stall:
                        b = b[:max(0, stall - sent)]
                        if b:
                            self.wfile.write(b)
                            self.wfile.flush()
                        sent += len(b)
                        time.sleep(60)
                        close = True
                        break
                    self.wfile.write(b)
                    sent += len(b)
                    if slow:
                        self.wfile.flush()
                        time.sleep(len(b) / slow)
            self.wfile.flush()
            self.record(206 if partial else 200, sent, rng)
            if close or "lielen" in f:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    return H


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", action="append")
    ap.add_argument("--token")
    ap.add_argument("--fault", action="append")
    ap.add_argument("--log")
    ap.add_argument("--portfile", required=True)
    ap.add_argument("--lifetime", type=float, default=120)
    args = ap.parse_args()
    state = State(args)
    for repo in state.repos:  # hash everything once, so the CDN knows the blobs
        for rel in state.files(repo):
            state.file_meta(repo, rel)
    ports = {}
    # a client that hangs up (as the tests make it) is not news
    ThreadingHTTPServer.handle_error = lambda self, request, addr: None
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 64
    hub = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state, "hub", ports))
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state, "cdn", ports))
    ports["hub"] = hub.server_address[1]
    ports["cdn"] = cdn.server_address[1]
    for s in (hub, cdn):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = args.portfile + ".tmp"
    with open(tmp, "w") as fh:
        fh.write("%d %d\n" % (ports["hub"], ports["cdn"]))
    os.rename(tmp, args.portfile)
    time.sleep(args.lifetime)
    sys.exit(0)


if __name__ == "__main__":
    main()
