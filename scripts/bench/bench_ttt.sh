#!/usr/bin/env bash
# TTT attention benchmark: reference vs efficient, peak memory and time of one K-step forward and
# backward against K and T (CPU; B=1, 8 heads, head_dim 64 unless BENCH_B/BENCH_HEADS/BENCH_DIM are
# set). Prints a Markdown table; each configuration runs in its own process so peaks are separate.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
cmake --build "$BUILD" --target eagle_bench_ttt -j "${EAGLE_BUILD_JOBS:-2}" >/dev/null
B="${BENCH_B:-1}" H="${BENCH_HEADS:-8}" D="${BENCH_DIM:-64}"
echo "| K | T | reference s | reference peak MiB | efficient s | efficient peak MiB |"
echo "|---|---|---|---|---|---|"
for T in ${BENCH_T:-256 512 1024 2048}; do
  for K in ${BENCH_K:-1 3 7}; do
    ref=$("$BUILD/eagle_bench_ttt" reference "$K" "$T" "$B" "$H" "$D")
    eff=$("$BUILD/eagle_bench_ttt" efficient "$K" "$T" "$B" "$H" "$D")
    field() { sed -E "s/.*\"$1\": ([0-9.]+).*/\1/" <<<"$2"; }
    echo "| $K | $T | $(field seconds "$ref") | $(field peak_mib "$ref") | $(field seconds "$eff") | $(field peak_mib "$eff") |"
  done
done
