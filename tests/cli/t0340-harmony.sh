#!/bin/sh
# t0340-harmony.sh — gpt-oss's harmony chat format in moe-run: a generated
# gpt-oss model whose vocabulary carries the harmony markers (and gpt-oss's
# published chat template) is recognised as harmony; --jsonl gives the final
# channel as "text" and the analysis as "reasoning_content", which must equal
# what an independent parse (Python, below) finds in the raw text of the
# same sampled generation (fixed seed, --reasoning=raw); --chat hides the
# analysis by default; moe-serve's OpenAI and Ollama chats split the same
# way and take reasoning_effort / think.  Option errors are usage errors.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
GOLD="$top_srcdir/tests/golden/chat"
RUN="$BIN/moe-run"
check "generate a gpt-oss snapshot" -- $GEN --arch gpt-oss --format hf --seed 3 --out "$T/m"
# The harmony markers take the places of the last ordinary tokens (which
# are removed with the merges that make or use them).
"$PYTHON3" - "$T/m.hf" "$GOLD/templates/gpt-oss.jinja" <<'PY'
import json, os, sys
d = sys.argv[1]
tj = json.load(open(os.path.join(d, "tokenizer.json")))
cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
markers = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
           "<|return|>", "<|call|>"]
vocab = tj["model"]["vocab"]
special = {t["id"] for t in tj["added_tokens"]}
free = sorted((i for t, i in vocab.items() if i not in special), reverse=True)[:len(markers)]
gone = {t for t, i in vocab.items() if i in free}
for t in gone:
    del vocab[t]
def parts(m):
    return m.split(" ", 1) if isinstance(m, str) else m
tj["model"]["merges"] = [m for m in tj["model"]["merges"]
                         if not (set(parts(m)) & gone or "".join(parts(m)) in gone)]
for m, i in zip(markers, free):
    vocab[m] = i
    tj["added_tokens"].append({"id": i, "content": m, "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": True})
cfg["chat_template"] = open(sys.argv[2], encoding="utf-8").read()
cfg["eos_token"] = "<|return|>"
json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
PY
check "moe-convert reads it" -- "$BIN/moe-convert" -q "$T/m.hf" "$T/m.uth"
# The markers are printed by the detokeniser (they are the text's structure).
"$RUN" -m "$T/m.uth" --tokenize --parse-special -p '<|channel|>final<|message|>' > "$T/ids"
tr '\n' ' ' < "$T/ids" | "$RUN" -m "$T/m.uth" --detokenize > "$T/back"
is "$(cat "$T/back")" "<|channel|>final<|message|>" "harmony markers come back as text"

# The same generation (sampled with a fixed seed, hot and long enough, past
# end-of-turn tokens, that the random model emits markers), raw and parsed.
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
	printf '{"id": %d, "messages": [{"role": "user", "content": "Question %d: what is 6*7?"}]}\n' "$i" "$i"
done > "$T/req.jsonl"
G="--temp 3 --top-k 0 --top-p 1 --min-p 0 --seed 7 -n 160 --ignore-eos -t 1"
"$RUN" -m "$T/m.uth" $G --jsonl --reasoning=raw < "$T/req.jsonl" > "$T/raw.jsonl"
ok $? "--jsonl --reasoning=raw"
"$RUN" -m "$T/m.uth" $G --jsonl < "$T/req.jsonl" > "$T/hide.jsonl"
ok $? "--jsonl (default: hide)"
"$PYTHON3" - "$T/raw.jsonl" "$T/hide.jsonl" > "$T/cmp" <<'PY'
import json, re, sys
# Harmony, parsed independently: messages are HEADER<|message|>CONTENT up
# to <|end|>, <|return|>, <|call|> or the end; the channel is named after
# <|channel|> in the header; text outside messages counts as final.
M = r"<\|(start|end|message|channel|constrain|return|call)\|>"
def parse(raw):
    final, analysis = [], []
    state, header = "header", ""
    pos = 0
    for m in list(re.finditer(M, raw)) + [None]:
        text = raw[pos:m.start()] if m else raw[pos:]
        if state == "header":
            header += text
        elif state == "content":
            (analysis if ch == "analysis" else final if ch == "final" else []).append(text)
        else:
            final.append(text)
        if not m:
            if state == "header" and header and "<|" not in header:
                final.append(header)
            break
        pos = m.end()
        k = m.group(1)
        if k == "start":
            state, header = "header", ""
        elif k in ("channel", "constrain"):
            if state != "header":
                state, header = "header", ""
            header += m.group(0)
        elif k == "message":
            if state == "header":
                c = re.search(r"<\|channel\|>([^ <]*)", header)
                ch = c.group(1) if c else "final"
                state, header = "content", ""
        else:
            state, header = "outside", ""
    return "".join(final), "".join(analysis)
raw = [json.loads(l) for l in open(sys.argv[1])]
hide = [json.loads(l) for l in open(sys.argv[2])]
bad = 0
markers = 0
for r, h in zip(raw, hide):
    f, a = parse(r["text"])
    markers += len(re.findall(M, r["text"]))
    if (h["text"], h.get("reasoning_content")) != (f, a) or "reasoning_content" in r:
        bad += 1
        print("mismatch", r["id"], repr(r["text"]), repr(h), file=sys.stderr)
print(len(raw), len(hide), bad, markers)
PY
read n1 n2 bad markers < "$T/cmp"
diag "raw texts hold $markers harmony markers"
ok $([ "$markers" -ge 10 ]; echo $?) "the raw texts hold markers to parse ($markers)"
ok $([ "$n1" = 12 ] && [ "$n2" = 12 ] && [ "$bad" = 0 ]; echo $?) \
	"text and reasoning_content = the final and analysis channels of the raw text ($bad of 12 differ)"

# --chat: the answer only (the analysis is hidden by default); the answers
# equal the jsonl texts of the same conversation's first turn.
echo "Question 1: what is 6*7?" | "$RUN" -m "$T/m.uth" $G --chat > "$T/chat.out" 2>/dev/null
ok $? "--chat on a harmony model"
"$PYTHON3" -c 'import json,sys; sys.stdout.write(json.loads(open(sys.argv[1]).readline())["text"] + "\n")' \
	"$T/hide.jsonl" > "$T/want"
cmp -s "$T/chat.out" "$T/want"; ok $? "--chat prints the final channel, as --jsonl's text"
echo "Question 1: what is 6*7?" | "$RUN" -m "$T/m.uth" $G --chat --reasoning=raw > "$T/chat.raw" 2>/dev/null
"$PYTHON3" -c 'import json,sys; sys.stdout.write(json.loads(open(sys.argv[1]).readline())["text"] + "\n")' \
	"$T/raw.jsonl" > "$T/want"
cmp -s "$T/chat.raw" "$T/want"; ok $? "--chat --reasoning=raw prints the text as generated"

# moe-serve: the same request over the OpenAI and Ollama APIs gives the
# answer as content and the analysis as reasoning_content / thinking, equal
# to --jsonl's; streamed pieces add up to the same; reasoning_effort and
# think reach the template; bad values are 400s.
"$PYTHON3" - "$BIN/moe-serve" "$T/m.uth" "$T/hide.jsonl" > "$T/serve.res" <<'PY'
import http.client, json, re, subprocess, sys, time
serve, model, hide = sys.argv[1:4]
want = json.loads(open(hide).readline())
def ok(cond, name):  # one "STATUS NAME" line per check, for the shell's ok
    print("%d %s" % (0 if cond else 1, name), flush=True)
p = subprocess.Popen([serve, "-m", model, "-t", "1", "--port", "0", "--host", "127.0.0.1"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
port = None
line = ""
for _ in range(600):
    line += p.stderr.readline()
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
    if m:
        port = int(m.group(1))
        break
def post(path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read().decode()
msgs = [{"role": "user", "content": "Question 1: what is 6*7?"}]
samp = {"temperature": 3, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 7, "ignore_eos": True}
try:
    st, b = post("/v1/chat/completions", dict(samp, messages=msgs, max_tokens=160))
    msg = json.loads(b)["choices"][0]["message"] if st == 200 else {}
    ok(st == 200 and msg.get("content") == want["text"] and
       msg.get("reasoning_content") == want["reasoning_content"],
       "OpenAI chat: content and reasoning_content as --jsonl's")
    st, b = post("/v1/chat/completions", dict(samp, messages=msgs, max_tokens=160, stream=True))
    c, r = "", ""
    for l in b.split("\n"):
        if l.startswith("data: {"):
            d = json.loads(l[6:])["choices"][0].get("delta", {})
            c += d.get("content", "")
            r += d.get("reasoning_content", "")
    ok(st == 200 and c == want["text"] and r == want["reasoning_content"],
       "OpenAI chat, streamed: the pieces add up to the same")
    # Ollama has no ignore_eos: its answers are compared with OpenAI's
    # answer to the same request without it.
    del samp["ignore_eos"]
    st, b = post("/v1/chat/completions", dict(samp, messages=msgs, max_tokens=160))
    ref = json.loads(b)["choices"][0]["message"]["content"] if st == 200 else None
    st, b = post("/api/chat", dict(model="m", messages=msgs, stream=False, think=False,
                                   options=dict(samp, num_predict=160)))
    o = json.loads(b) if st == 200 else {"message": {}}
    ok(st == 200 and o["message"].get("content") == ref and "thinking" not in o["message"],
       "Ollama chat with think: false: content, no thinking")
    st, b = post("/api/chat", dict(model="m", messages=msgs, stream=True,
                                   options=dict(samp, num_predict=160)))
    c = "".join(json.loads(l)["message"]["content"] for l in b.splitlines() if l.strip())
    ok(st == 200 and c == ref, "Ollama chat, streamed: the same content")
    counts = {}
    for eff in ("low", "high"):
        st, b = post("/v1/chat/completions", dict(messages=msgs, max_tokens=1, reasoning_effort=eff))
        counts[eff] = json.loads(b)["usage"]["prompt_tokens"] if st == 200 else None
    st, b = post("/v1/chat/completions", dict(messages=msgs, max_tokens=1))
    counts["none"] = json.loads(b)["usage"]["prompt_tokens"] if st == 200 else None
    ok(None not in counts.values() and counts["low"] != counts["high"],
       "reasoning_effort reaches the template (prompt tokens %s)" % counts)
    st, b = post("/v1/chat/completions", dict(messages=msgs, reasoning_effort="extreme"))
    ok(st == 400 and "reasoning_effort" in b, "reasoning_effort \"extreme\": 400 naming it")
    st, b = post("/api/chat", dict(model="m", messages=msgs, think="loud", stream=False))
    ok(st == 400 and "think" in b, "think \"loud\": 400 naming it")
finally:
    p.terminate()
    p.wait(timeout=30)
PY
ok $? "the moe-serve client ran"
while read -r st name; do ok "$st" "$name"; done < "$T/serve.res"

# Usage errors.
"$RUN" -m "$T/m.uth" --reasoning=loud --chat < /dev/null > /dev/null 2>&1; is $? 2 "--reasoning=loud: usage error"
"$RUN" -m "$T/m.uth" --reasoning=show -p hi > /dev/null 2>&1; is $? 2 "--reasoning without --chat/--jsonl: usage error"
done_testing
