#!/usr/bin/env bash
# Benchmark of `eagle-train prepare`: JSONL MB/s of the read phase (wall clock, and per CPU second of
# the one reading thread, which is what a shared machine cannot disturb) and peak memory (max RSS), on a
# synthetic file of about 220 MB written to /tmp (override with BENCH_MB, BENCH_DIR).
# Usage: scripts/bench/bench_prepare.sh [path/to/eagle-train]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:-$ROOT/build/eagle-train}"
PY="${EAGLE_PYTHON:-$HOME/.cache/eagle-train/venv/bin/python}"
DIR="${BENCH_DIR:-/tmp/eagle_bench_prepare}"
MB="${BENCH_MB:-220}"
mkdir -p "$DIR"
IN="$DIR/synthetic_${MB}mb.jsonl"
[[ -f "$IN" ]] || "$PY" "$ROOT/scripts/bench/gen_jsonl.py" "$IN" --mb "$MB"
rm -rf "$DIR/out"
cat "$IN" > /dev/null  # warm the page cache: measure parsing, not the disk
/usr/bin/time -v "$BIN" prepare --input "$IN" --output "$DIR/out" --training_seq_len 4096 \
  --validation_fraction 0.01 2> "$DIR/log.txt" || { cat "$DIR/log.txt"; exit 1; }
grep -E "wrote|memory:" "$DIR/log.txt" | tail -2
in_bytes=$(stat -c %s "$IN")
out_bytes=$(du -cb "$DIR/out"/*.bin | tail -1 | cut -f1)
rss_kb=$(grep "Maximum resident set size" "$DIR/log.txt" | awk '{print $NF}')
wall=$(grep "Elapsed (wall clock)" "$DIR/log.txt" | awk '{print $NF}')
echo "input $((in_bytes / 1000000)) MB, output $((out_bytes / 1000000)) MB, peak RSS $((rss_kb * 1024 / 1000000)) MB, wall $wall"
base=$(grep -oE "[0-9]+ MB of it resident before reading" "$DIR/log.txt" | awk '{print $1}')
echo "peak RSS / output size: $(awk -v r="$rss_kb" -v o="$out_bytes" 'BEGIN{printf "%.2f", r*1024/o}');" \
  "above the ${base} MB resident before reading: $(awk -v r="$rss_kb" -v b="$base" -v o="$out_bytes" 'BEGIN{printf "%.2f", (r*1024/1e6-b)*1e6/o}')"
