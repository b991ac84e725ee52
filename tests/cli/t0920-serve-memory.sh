#!/bin/sh
# t0920-serve-memory.sh — moe-serve's shared --mem-budget and Ollama's
# num_ctx, driven by tests/cli/serve_client.py --part memory (loopback only,
# every wait bounded):
#   - /api/ps reports each loaded model's weight bytes; --mem-budget min
#     streams every model at its minimum;
#   - a model that does not fit beside the others unloads the least
#     recently used idle one; one larger than the whole budget is 507 and
#     unloads nothing; a model alone over the budget streams its experts
#     within it; with the others busy a model streams in the room left (the
#     same temperature-0 text), and without that room it is 503 with
#     Retry-After until they are idle; keep_alive 0 frees the room at once;
#   - num_ctx: generation stops at the window (done_reason "length"), a
#     prompt that fills it is 400, num_ctx is capped at -c;
#   - scripts/bench-serve runs and prints its tables (no timing judged).
. "$top_srcdir/tests/cli/lib.sh"
MODEL="$top_srcdir/share/moe-demo.uth"
export MOE_STORE="$T/store" HF_HOME="$T/hf" XDG_CACHE_HOME="$T/xdg" HF_HUB_OFFLINE=1
[ -f "$MODEL" ] || skip_all "share/moe-demo.uth not found"
# a small MoE model (the demo model is dense: nothing to stream)
"$PYTHON3" "$top_srcdir/scripts/gen-model" --arch mixtral --format gguf --seed 5 --type q8_0 \
	--n-layer 4 --out "$T/moe" >/dev/null 2>&1 &&
	"$BIN/moe-convert" "$T/moe.gguf" "$T/moe.uth" >/dev/null 2>&1 ||
	{ echo "not ok 1 - generate the MoE model"; echo "1..1"; exit 1; }
"$PYTHON3" "$top_srcdir/tests/cli/serve_client.py" --part memory "$BIN/moe-serve" "$MODEL" \
	"$BIN/moe-run" "$T" "$T/moe.uth"
