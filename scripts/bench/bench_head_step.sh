#!/usr/bin/env bash
# One EAGLE-3 draft step alone (issue 29's shapes: hidden 1024, 16 heads, 8 KV heads, intermediate
# 2816, V_d 8192, fp32, clip + AdamW) at each T and K: before (recompute_activations off,
# loss_chunk_size 0, the path before issue 29) and after (recompute_activations layer, the chunked
# loss), back to back so that their ratio means something on a shared machine; then each T in
# BENCH_AFTER_ONLY_T with the after configuration only (one step, timed alone: the longest rows);
# then the losses tv and lk_hybrid against kl. Prints a Markdown table with the estimator's
# prediction beside the measured peak (train/memory_estimate.h); each configuration runs in its own
# process so the peaks are separate. BENCH_T, BENCH_K, BENCH_AFTER_ONLY_T, BENCH_CHUNK, BENCH_THREADS,
# BENCH_LOSS_T (empty: no loss rows), BENCH_MODES (extra recompute modes at BENCH_T) override.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
cmake --build "$BUILD" --target eagle_bench_head_step -j "${EAGLE_BUILD_JOBS:-2}" >/dev/null
export OMP_NUM_THREADS="${BENCH_THREADS:-2}"
CHUNK="${BENCH_CHUNK:-1024}"
field() { sed -E "s/.*\"$1\": \"?([0-9a-z_.-]+)\"?.*/\1/" <<<"$2"; }
row() {
  local r
  r=$("$BUILD/eagle_bench_head_step" "$@")
  echo "| $(field T "$r") | $(field K "$r") | $(field loss "$r") | $(field chunk "$r") | $(field recompute "$r") |" \
    "$(field seconds "$r") | $(field peak_extra_rss_mib "$r") | $(field peak_extra_alloc_mib "$r") |" \
    "$(field predicted_mib "$r") | $(field kept_mib "$r") | $(field predicted_kept_mib "$r") |"
}
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| T | K | loss | loss_chunk_size | recompute | s/step | peak extra RSS MiB | peak extra allocated MiB |" \
  "predicted MiB | kept after forward MiB | predicted kept MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for T in ${BENCH_T:-2048 8192}; do
  for K in ${BENCH_K:-3 7}; do
    row "$T" "$K" 0 kl off
    row "$T" "$K" "$CHUNK" kl layer
    for M in ${BENCH_MODES:-}; do row "$T" "$K" "$CHUNK" kl "$M"; done
  done
done
for T in ${BENCH_AFTER_ONLY_T:-32768}; do
  for K in ${BENCH_K:-3 7}; do row "$T" "$K" "$CHUNK" kl layer 0; done
done
for L in ${BENCH_LOSS_T:+tv lk_hybrid}; do row "${BENCH_LOSS_T}" 7 "$CHUNK" "$L" layer; done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
