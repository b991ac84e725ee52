#!/bin/sh
# t0900-serve.sh — moe-serve over loopback and a Unix socket, driven by
# tests/cli/serve_client.py (Python's standard library only), which starts
# and stops the servers itself:
#   - every endpoint's shape (golden JSON, volatile fields masked): /health,
#     /v1/models, chat and text completions (usage, logprobs), /api/generate,
#     /api/chat, /api/tags, /api/ps, /api/show, /api/version, /tokenize,
#     /detokenize, /metrics; /api/pull of a path and /api/delete of a
#     missing name refused (the registry: t0910-serve-registry.sh);
#   - SSE and NDJSON framing byte for byte; streamed text equals the
#     non-streamed answer; /v1/completions equals moe-run's text;
#   - stop strings (string, list, streaming, Ollama options);
#   - 16 concurrent streams at temperature 0 equal the solo answer;
#   - a client that closes mid-stream frees its KV blocks, and the next
#     request works;
#   - hostile inputs (truncated/invalid JSON, 10000 nested arrays, invalid
#     UTF-8, NUL bytes, negative/huge max_tokens, n = 2, bad sampling values,
#     100 MB bodies, Host attacks, a 200 kB header, garbage, slow headers)
#     get the right 4xx or a closed connection, and the server still serves;
#   - embeddings (/v1/embeddings float and base64, /api/embed,
#     /api/embeddings): shapes, unit norm, batch = single, bad inputs; and
#     on a generated F32 model the pooled hidden state equals the numpy
#     reference's (tests/cli/serve_embed_ref.py);
#   - a full queue answers 503 with Retry-After; --api-key(-file) with
#     Bearer and X-Api-Key, /health exempt; --cors; the Unix socket (mode
#     0700, removed at exit); SIGTERM during a stream exits 0; keep_alive
#     unloads a model and the next request loads it again.
. "$top_srcdir/tests/cli/lib.sh"
MODEL="$top_srcdir/share/moe-demo.uth"
# an empty registry and no network: /api/tags lists only the -m models
export MOE_STORE="$T/store" HF_HOME="$T/hf" XDG_CACHE_HOME="$T/xdg" HF_HUB_OFFLINE=1
[ -f "$MODEL" ] || skip_all "share/moe-demo.uth not found"
# a generated F32 model for the embeddings' reference check
"$PYTHON3" "$top_srcdir/scripts/gen-model" --arch llama --shape tiny --type f32 --vocab synthetic \
	--format gguf --out "$T/ref" >/dev/null 2>&1 &&
	"$BIN/moe-convert" "$T/ref.gguf" "$T/ref.uth" >/dev/null 2>&1 ||
	{ echo "not ok 1 - generate the reference model"; echo "1..1"; exit 1; }
"$PYTHON3" "$top_srcdir/tests/cli/serve_client.py" "$BIN/moe-serve" "$MODEL" "$BIN/moe-run" "$T" \
	"$T/ref.gguf" "$T/ref.uth"
