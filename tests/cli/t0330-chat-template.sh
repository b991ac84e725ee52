#!/bin/sh
# t0330-chat-template.sh — a Hugging Face snapshot whose tokenizer_config.json
# looks like current models' (model_max_length = int(1e30), a list of named
# chat templates with Qwen3's published template as "default") converts, and
# moe-run --render-chat runs that template exactly as Python's jinja2 did
# (tests/golden/chat/render, scripts/gen-chat-goldens).  A template that
# raises gives exit 1 with its message and line.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
GOLD="$top_srcdir/tests/golden/chat"
check "generate a qwen3moe snapshot" -- $GEN --arch qwen3moe --format hf --seed 3 --out "$T/m"
"$PYTHON3" - "$T/m.hf/tokenizer_config.json" "$GOLD/templates/qwen3.jinja" \
	"$GOLD/templates/qwen2.5.jinja" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["model_max_length"] = int(1e30)
cfg["chat_template"] = [
    {"name": "default", "template": open(sys.argv[2], encoding="utf-8").read()},
    {"name": "tool_use", "template": open(sys.argv[3], encoding="utf-8").read()},
]
json.dump(cfg, open(sys.argv[1], "w"))
PY
grep -q '1000000000000000019884624838656' "$T/m.hf/tokenizer_config.json"
ok $? "tokenizer_config.json holds int(1e30)"
check "moe-convert reads it" -- "$BIN/moe-convert" -q "$T/m.hf" "$T/m.uth"
for conv in basic thinking tools-openai unicode; do
	"$PYTHON3" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["messages"]))' \
		"$GOLD/conversations/$conv.json" > "$T/$conv.json"
done
# Arrays of messages, rendered with the generation prompt.
for conv in basic unicode; do
	"$BIN/moe-run" -m "$T/m.uth" --render-chat -f "$T/$conv.json" > "$T/$conv.out" 2>"$T/err"
	cmp -s "$T/$conv.out" "$GOLD/render/qwen3__$conv.txt"
	ok $? "qwen3 template, $conv conversation: as Python's jinja2 renders it"
done
[ ! -s "$T/err" ]; ok $? "... without warnings"
# An object {"messages", "tools", "chat_template_kwargs"}, as a request
# carries it: tool calls and replies, reasoning_content and the template's
# own variables reach the template unchanged.
for conv in tools thinking-off tools-str; do
	"$PYTHON3" -c 'import json,sys; c=json.load(open(sys.argv[1]))
r={"messages": c["messages"]}
if "tools" in c: r["tools"]=c["tools"]
if "vars" in c: r["chat_template_kwargs"]=c["vars"]
print(json.dumps(r))' "$GOLD/conversations/$conv.json" > "$T/$conv.req"
	"$BIN/moe-run" -m "$T/m.uth" --render-chat -f "$T/$conv.req" > "$T/$conv.out"
	cmp -s "$T/$conv.out" "$GOLD/render/qwen3__$conv.txt"
	ok $? "qwen3 template, $conv conversation (tools, tool replies, template variables)"
done
# Without the generation prompt.
"$PYTHON3" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
	"$GOLD/conversations/basic-nogen.json" > "$T/nogen.req"
"$BIN/moe-run" -m "$T/m.uth" --render-chat --no-generation-prompt -f "$T/nogen.req" > "$T/nogen.out"
cmp -s "$T/nogen.out" "$GOLD/render/qwen3__basic-nogen.txt"
ok $? "qwen3 template, --no-generation-prompt"
# A named template of the model: --chat-template tool_use (Qwen2.5's here).
"$BIN/moe-run" -m "$T/m.uth" --render-chat --chat-template tool_use -f "$T/tools.req" \
	> "$T/tool_use.out"
cmp -s "$T/tool_use.out" "$GOLD/render/qwen2.5__tools.txt"
ok $? "--chat-template tool_use renders the model's tool_use template"
"$BIN/moe-run" -m "$T/m.uth" --render-chat --chat-template nosuch -f "$T/tools.req" \
	> /dev/null 2>"$T/err"
is $? 2 "--chat-template with a name neither the model nor moe knows: usage error"
grep -q "unknown chat template 'nosuch'.*tool_use" "$T/err"; ok $? "... listing the choices: $(cat "$T/err")"
# A message that is not an object is an error naming it.
printf '%s\n' '{"messages": [{"role":"user","content":"x"}, 3]}' > "$T/bad.req"
"$BIN/moe-run" -m "$T/m.uth" --render-chat -f "$T/bad.req" > /dev/null 2>"$T/err"
is $? 1 "a message that is not an object: exit 1"
grep -q "message 1" "$T/err"; ok $? "... naming it: $(cat "$T/err")"
# A template error is reported with its line.
printf '%s\n' '[{"role":"user","content":"x"}]' > "$T/one.json"
"$PYTHON3" - "$T/m.hf/tokenizer_config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = "line one\n{% if messages|length > 0 %}{{ raise_exception('no ' ~ messages[0].role ~ ' here') }}{% endif %}"
json.dump(cfg, open(sys.argv[1], "w"))
PY
check "convert with a raising template" -- "$BIN/moe-convert" -q "$T/m.hf" "$T/r.uth"
"$BIN/moe-run" -m "$T/r.uth" --render-chat -f "$T/one.json" > /dev/null 2>"$T/err"
is $? 1 "raise_exception: exit 1"
grep -q 'line 2: raised: no user here' "$T/err"; ok $? "... naming the template line: $(cat "$T/err")"
done_testing
