#!/bin/sh
# t0340-harmony.sh — gpt-oss's harmony chat format in moe-run: a generated
# gpt-oss model whose vocabulary carries the harmony markers (and gpt-oss's
# published chat template) is recognised as harmony; --jsonl gives the final
# channel as "text" and the analysis as "reasoning_content", which must equal
# what an independent parse (Python, below) finds in the raw text of the
# same sampled generation (fixed seed, --reasoning=raw); --chat hides the analysis by
# default.  Option errors are usage errors.
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

# Usage errors.
"$RUN" -m "$T/m.uth" --reasoning=loud --chat < /dev/null > /dev/null 2>&1; is $? 2 "--reasoning=loud: usage error"
"$RUN" -m "$T/m.uth" --reasoning=show -p hi > /dev/null 2>&1; is $? 2 "--reasoning without --chat/--jsonl: usage error"
done_testing
