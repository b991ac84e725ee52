# tests/cli/pull-lib.sh — helpers for moe-pull's tests (source after lib.sh).
# Everything lives under $T: the Hugging Face cache ($HF_HOME), the store
# ($MOE_STORE) and the URL downloads ($XDG_CACHE_HOME).  start_hub runs
# tests/cli/hubsim.py on 127.0.0.1 and sets HF_ENDPOINT, HUB, CDN, HUB_LOG;
# servers are stopped on exit and end by themselves anyway.
PULL="$BIN/moe-pull"
HUBSIM="$top_srcdir/tests/cli/hubsim.py"
export HF_HOME="$T/hf" MOE_STORE="$T/store" XDG_CACHE_HOME="$T/xdg" XDG_DATA_HOME="$T/data"
unset HF_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_TOKEN_PATH
HUB_PIDS=""
HUB_LOG="$T/hub.log"
trap 'stop_hubs; rm -rf "$T"' EXIT

stop_hubs() {
	for p in $HUB_PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	HUB_PIDS=""
}

# start_hub [hubsim options...]: a fresh server (the previous one stops).
start_hub() {
	stop_hubs
	rm -f "$T/ports"
	"$PYTHON3" "$HUBSIM" --portfile "$T/ports" --log "$HUB_LOG" --lifetime 300 "$@" &
	HUB_PIDS="$!"
	i=0
	while [ ! -s "$T/ports" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
	read -r HUB CDN < "$T/ports" || return 1
	export HF_ENDPOINT="http://127.0.0.1:$HUB"
}

# Models for the repos: a tiny mixtral as GGUF (Q8_0, F32, split Q8_0) and as
# a safetensors snapshot.  Sets $REPO_G and $REPO_S (directories).
make_repos() {
	$PYTHON3 "$top_srcdir/scripts/gen-model" --arch mixtral --format both --seed 5 --type q8_0 --out "$T/src/mix" >/dev/null || return 1
	$PYTHON3 "$top_srcdir/scripts/gen-model" --arch mixtral --format gguf --seed 5 --out "$T/src/mixf32" >/dev/null || return 1
	REPO_G="$T/repos/mix-GGUF" REPO_S="$T/repos/mix"
	mkdir -p "$REPO_G/Q4_SPLIT" "$REPO_S"
	cp "$T/src/mix.gguf" "$REPO_G/mix-Q8_0.gguf"
	cp "$T/src/mixf32.gguf" "$REPO_G/mix-F32.gguf"
	echo "# a test repo" > "$REPO_G/README.md"
	$PYTHON3 "$top_srcdir/tests/cli/gguf-split.py" "$T/src/mix.gguf" "$REPO_G/Q4_SPLIT/mix-SPLIT" 3 || return 1
	cp "$T/src/mix.hf"/* "$REPO_S/"
	echo "# a test repo" > "$REPO_S/README.md"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }
# Bytes the CDN sent for a blob, from the log.
# cdn_bytes SHA [EXPECT]: bytes of blob SHA the CDN sent.  The hub logs a
# request after its last byte, so a client can finish before the line is
# written: with EXPECT, wait (at most 10 s) until the sum reaches it, then
# 0.5 s more, so that a late line of a second download is counted too.
cdn_sum() { awk -v b="/blobs/$1" '$1 == "cdn" && index($3, b) == 1 { sub("bytes=", "", $6); s += $6 } END { print s + 0 }' "$HUB_LOG"; }
cdn_bytes() {
	if [ -n "$2" ]; then
		i=0
		while [ "$(cdn_sum "$1")" -lt "$2" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		sleep 0.5
	fi
	cdn_sum "$1"
}
msg() { head -n1 "$1" | cut -c1-200; }
