#!/bin/sh
# t0500-bench-throughput.sh — moe-bench's throughput mode: every output
# format parses (json, jsonl, csv, md), rows name the tests as llama-bench
# does, the model's size and parameters (total and active) match what an
# independent GGUF reader counts, the bandwidth columns follow from
# --bw/--stream-bw, and the usage errors.  Timings are never asserted.
. "$top_srcdir/tests/cli/lib.sh"
GEN="$PYTHON3 $top_srcdir/scripts/gen-model"
BENCH="$BIN/moe-bench"

check "generate a tiny mixtral" -- $GEN --arch mixtral --format gguf --seed 3 --out "$T/m"
check "convert it" -- "$BIN/moe-convert" "$T/m.gguf" "$T/m.uth"
check "a q8_0 twin" -- $GEN --arch mixtral --format gguf --seed 3 --type q8_0 --out "$T/q"
check "convert it" -- "$BIN/moe-convert" "$T/q.gguf" "$T/q.uth"

FAST="-p 16 -n 4 -r 2 -t 1"

# JSON: one object per test, llama-bench's names, every run's samples.
"$BENCH" -m "$T/m.uth" $FAST -pg 8,2 -d 0,8 -o json > "$T/out.json"; ok $? "-o json"
$PYTHON3 - "$T/out.json" "$T/m.gguf" "$top_srcdir/scripts" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
from moegen.reader import GGUFReader
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list) and len(rows) == 6, len(rows)
tests = [r['test'] for r in rows]
assert tests == ['pp16', 'tg4', 'pp8+tg2', 'pp16 @ d8', 'tg4 @ d8', 'pp8+tg2 @ d8'], tests
for r in rows:
    for k in ('build_commit', 'cpu_info', 'model_filename', 'model_type', 'model_size',
              'model_n_params', 'n_batch', 'n_threads', 'type_k', 'n_prompt', 'n_gen', 'n_depth',
              'test_time', 'avg_ns', 'stddev_ns', 'avg_ts', 'stddev_ts', 'samples_ns',
              'samples_ts', 'isa', 'n_params_active', 'weight_types', 'bytes_per_token',
              'bw_gbs', 'bw_pct', 'median_ts', 'load_time_s', 'peak_rss_bytes'):
        assert k in r, k
    assert len(r['samples_ns']) == 2 and len(r['samples_ts']) == 2
    n = r['n_prompt'] + r['n_gen']
    for ns, ts in zip(r['samples_ns'], r['samples_ts']):
        assert abs(ts - n * 1e9 / ns) <= 1e-6 * ts, (ts, ns)
    assert abs(r['avg_ts'] - sum(r['samples_ts']) / 2) <= 1e-6 * r['avg_ts']
    assert r['n_threads'] == 1 and r['type_k'] == 'f16' and r['peak_rss_bytes'] > 0
    assert r['bw_pct'] is None  # no bandwidth measured
assert [r['n_depth'] for r in rows] == [0, 0, 0, 8, 8, 8]
assert [(r['n_prompt'], r['n_gen']) for r in rows[:3]] == [(16, 0), (0, 4), (8, 2)]
assert rows[1]['bw_gbs'] > 0 and rows[0]['bw_gbs'] is None  # weights/s on tg rows only

# size and parameters against the GGUF, counted independently
g = GGUFReader(sys.argv[2])
nx = g.kv['llama.expert_count']; k = g.kv['llama.expert_used_count']
total = sum(t.n_elements for t in g.tensors)
embd = g.info('token_embd.weight').n_elements
experts = sum(t.n_elements for t in g.tensors if '_exps' in t.name)
active = total - embd - experts * (nx - k) // nx
r = rows[0]
assert r['model_n_params'] == total, (r['model_n_params'], total)
assert r['n_params_active'] == active, (r['n_params_active'], active)
assert r['model_size'] == 4 * total  # all F32
assert r['weight_types'] == 'f32 100%' and r['model_type'].startswith('llama ')
PY
ok $? "json rows: names, samples, size and parameters as counted from the GGUF"

# JSON lines and CSV carry the same rows.
"$BENCH" -m "$T/m.uth" $FAST -o jsonl > "$T/out.jsonl"; ok $? "-o jsonl"
"$BENCH" -m "$T/m.uth" $FAST -o csv > "$T/out.csv"; ok $? "-o csv"
$PYTHON3 - "$T/out.jsonl" "$T/out.csv" <<'PY'
import csv, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2 and [r['test'] for r in rows] == ['pp16', 'tg4']
lines = list(csv.reader(open(sys.argv[2])))
assert len(lines) == 3, lines
assert all(len(l) == len(lines[0]) for l in lines), [len(l) for l in lines]
head = lines[0]
assert head == list(rows[0].keys()), 'csv columns = json fields, same order'
d = dict(zip(head, lines[2]))
assert d['test'] == 'tg4' and d['n_gen'] == '4' and len(d['samples_ns'].split()) == 2
float(d['avg_ts'])
PY
ok $? "jsonl: one object per line; csv: same fields, consistent columns"

# Markdown: two models; every table line has its table's column count.
"$BENCH" -m "$T/m.uth" -m "$T/q.uth" $FAST --bw 40 > "$T/out.md"; ok $? "-o md with two models"
$PYTHON3 - "$T/out.md" <<'PY'
import sys
tables, cur = [], []
for line in open(sys.argv[1], encoding='utf-8'):
    if line.startswith('|'):
        cur.append(line.rstrip('\n'))
    elif cur:
        tables.append(cur); cur = []
if cur:
    tables.append(cur)
assert len(tables) == 2, tables
for t in tables:
    n = t[0].count('|')
    assert all(l.count('|') == n for l in t), t
main = tables[0]
assert len(main) == 2 + 4, main           # header, alignment, 2 tests x 2 models
assert 'Q8_0' in main[4] and 'F32' in main[2]
assert '| tg4 |' in main[3] and '%' in main[3].split('|')[-2]   # % bw on tg rows
assert len(tables[1]) == 2 + 2             # one line per model
PY
ok $? "md: a row per test and model, consistent columns, % bw with --bw"

# --bw: the percentage is bytes/token x t/s over the given bandwidth.
"$BENCH" -m "$T/m.uth" -p 0 -n 4 -r 1 -t 1 --bw 20 -o json > "$T/bw.json"; ok $? "--bw 20"
$PYTHON3 - "$T/bw.json" <<'PY'
import json, sys
r, = json.load(open(sys.argv[1]))
want = r['bytes_per_token'] * r['avg_ts'] / 1e9
assert abs(r['bw_gbs'] - want) <= 1e-6 * want and abs(r['bw_pct'] - 100 * want / 20) <= 1e-6 * r['bw_pct']
assert r['stream_gbs'] == 20
PY
ok $? "bw_gbs = bytes/token x t/s, bw_pct against --bw"

# --stream-bw measures the machine; alone it prints just that.
"$BENCH" -m "$T/m.uth" -p 0 -n 4 -r 1 -t 1 --stream-mib 8 -o json > "$T/st.json"; ok $? "--stream-mib 8"
$PYTHON3 -c "import json,sys; r,=json.load(open(sys.argv[1])); assert r['stream_gbs'] > 0 and r['bw_pct'] > 0" "$T/st.json"
ok $? "measured bandwidth in the rows"
out=$("$BENCH" --stream-bw --stream-mib 8 -t 1); ok $? "--stream-bw alone"
case $out in "memory bandwidth: triad "*) ok 0 "it prints the bandwidth";; *) ok 1 "it prints the bandwidth: $out";; esac

# Usage errors (2) and failures (1).
"$BENCH" -p 16 2>/dev/null; is $? 2 "no model: usage error"
"$BENCH" -m "$T/m.uth" -o xml 2>/dev/null; is $? 2 "-o xml: usage error"
"$BENCH" -m "$T/m.uth" -pg 16 2>/dev/null; is $? 2 "-pg without TG: usage error"
"$BENCH" -m "$T/m.uth" -t 0 2>/dev/null; is $? 2 "-t 0: usage error"
"$BENCH" -m "$T/m.uth" -r 0 2>/dev/null; is $? 2 "-r 0: usage error"
"$BENCH" -m "$T/m.uth" -p 16 --perplexity "$T/out.md" 2>/dev/null; is $? 2 "-p with --perplexity: usage error"
"$BENCH" -m "$T/none.uth" -p 16 2>/dev/null; is $? 1 "a missing model: failure"
"$BENCH" --help > /dev/null; is $? 0 "--help"
"$BENCH" --version | grep -q "moe-bench"; ok $? "--version names the program"

# -np: several sequences at once (llama-batched-bench's test and names).
"$BENCH" -m "$T/m.uth" -np 1,3 -p 70 -n 4 -r 2 -t 1 -o json > "$T/np.json"; ok $? "-np 1,3 -o json"
$PYTHON3 - "$T/np.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["pl"] for r in rows] == [1, 3], rows
for r in rows:
    assert r["pp"] == 70 and r["tg"] == 4 and r["n_kv"] == r["pl"] * 74
    assert len(r["samples_pp_ns"]) == 2 and len(r["samples_tg_ns"]) == 2
    med = lambda v: sorted(v)[0] / 2 + sorted(v)[1] / 2
    assert abs(r["t_pp"] - med(r["samples_pp_ns"]) / 1e9) < 1e-9
    assert abs(r["speed_pp"] - r["pl"] * 70 / r["t_pp"]) < 1e-6 * r["speed_pp"]
    assert abs(r["speed_tg"] - r["pl"] * 4 / r["t_tg"]) < 1e-6 * r["speed_tg"]
    # 74 tokens per sequence: two blocks of 64 each, no more
    assert r["kv_block"] == 64 and r["kv_peak_blocks"] == 2 * r["pl"], r
    assert r["kv_peak_bytes"] > 0 and r["is_pp_shared"] == 0
PY
ok $? "-np rows: pp, tg, pl, n_kv, medians, aggregate speeds, KV peak of 2 blocks per sequence"
"$BENCH" -m "$T/m.uth" -np 2 -p 8 -n 2 -r 1 -t 1 > "$T/np.md"; ok $? "-np 2, md"
grep -q "| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |" "$T/np.md"
ok $? "md: llama-batched-bench's columns"
"$BENCH" -m "$T/m.uth" -np 2 -p 8 -n 2 -r 1 -t 1 -o csv > "$T/np.csv"; ok $? "-np -o csv"
head -1 "$T/np.csv" | grep -q "speed_tg"; ok $? "csv header has speed_tg"
"$BENCH" -m "$T/m.uth" -np 2 -pg 8,2 2>/dev/null; is $? 2 "-np with -pg: usage error"
"$BENCH" -m "$T/m.uth" -np 0 2>/dev/null; is $? 2 "-np 0: usage error"
done_testing
