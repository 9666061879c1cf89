#!/usr/bin/env bash
# Batching benchmark (issue 4): padding efficiency, shapes and attention cost of every batching mode
# on the Alpaca data (byte-level lengths) and on a log-normal length distribution. Prints Markdown;
# results are recorded in docs/benchmarks.md. Build first (scripts/build.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
BENCH="$BUILD/eagle_bench_batching"
[[ -x "$BENCH" ]] || { echo "missing $BENCH: run scripts/build.sh first" >&2; exit 1; }

# The Alpaca file: EAGLE_ALPACA, else the copy in the repo (data/alpaca_5000.json.gz).
ALPACA="${EAGLE_ALPACA:-$ROOT/data/alpaca_5000.json.gz}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

if [[ -n "$ALPACA" && -f "$ALPACA" ]]; then
  # Byte-level tokens: the UTF-8 bytes of instruction, input and output, plus 8 template tokens
  # (begin, the two role markers with their separators, end).
  python3 - "$ALPACA" > "$TMP/alpaca.txt" <<'PY'
import gzip, json, sys
opener = gzip.open if sys.argv[1].endswith(".gz") else open
for r in json.load(opener(sys.argv[1], "rt", encoding="utf-8")):
    text = r["instruction"] + (("\n\n" + r["input"]) if r.get("input") else "") + "\n" + r["output"]
    print(len(text.encode("utf-8")) + 8)
PY
  echo "## Alpaca ($ALPACA), byte-level lengths, training_seq_len 2048, 8 rows a batch"
  echo
  "$BENCH" --lengths "$TMP/alpaca.txt" --training_seq_len 2048 --rows 8
  echo
else
  echo "(Alpaca data not found: set EAGLE_ALPACA=/path/alpaca_5000.json)" >&2
fi

echo "## Log-normal lengths (median 600, sigma 0.8, 20000 samples), training_seq_len 4096, 8 rows a batch"
echo
"$BENCH" --median 600 --sigma 0.8 --samples 20000 --training_seq_len 4096 --rows 8
echo
echo "## The same with a token budget of 32768 tokens a batch (max_tokens_per_batch)"
echo
"$BENCH" --median 600 --sigma 0.8 --samples 20000 --training_seq_len 4096 --max_tokens_per_batch 32768
echo
for w in 8 16 256; do
  echo "## Window of $w batches instead of 64 (log-normal, 8 rows)"
  echo
  "$BENCH" --median 600 --sigma 0.8 --samples 20000 --training_seq_len 4096 --rows 8 --window_batches "$w" | grep -E "^\|(---| mode | granularity (128|256), grouped | padding-free, grouped )"
  echo
done
