#!/usr/bin/env bash
# One EAGLE-3 draft step alone (issue 29's shapes: hidden 1024, 16 heads, 8 KV heads, intermediate
# 2816, V_d 8192, fp32, clip + AdamW) at each T and K, unchunked (loss_chunk_size 0) and chunked;
# and the losses tv and lk_hybrid against kl. Prints a Markdown table; each configuration runs in its
# own process so the peaks are separate. BENCH_T, BENCH_K, BENCH_CHUNK, BENCH_THREADS, BENCH_LOSS_T
# override.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
cmake --build "$BUILD" --target eagle_bench_head_step -j "${EAGLE_BUILD_JOBS:-2}" >/dev/null
export OMP_NUM_THREADS="${BENCH_THREADS:-2}"
CHUNK="${BENCH_CHUNK:-1024}"
field() { sed -E "s/.*\"$1\": \"?([0-9a-z_.]+)\"?.*/\1/" <<<"$2"; }
row() {
  local r
  r=$("$BUILD/eagle_bench_head_step" "$@")
  echo "| $(field T "$r") | $(field K "$r") | $(field loss "$r") | $(field chunk "$r") | $(field seconds "$r") |" \
    "$(field peak_extra_rss_mib "$r") | $(field peak_extra_alloc_mib "$r") |"
}
echo "| T | K | loss | loss_chunk_size | s/step | peak extra RSS MiB | peak extra allocated MiB |"
echo "|---|---|---|---|---|---|---|"
for T in ${BENCH_T:-2048 8192}; do
  for K in ${BENCH_K:-3 7}; do
    row "$T" "$K" 0 kl
    row "$T" "$K" "$CHUNK" kl
  done
done
for L in tv lk_hybrid; do row "${BENCH_LOSS_T:-2048}" 7 "$CHUNK" "$L"; done
