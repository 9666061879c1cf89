#!/usr/bin/env bash
# Target forward benchmark of the hybrid and MLA families (docs/benchmarks.md, "Hybrid linear-attention and
# MLA targets" and "Gated DeltaNet memory at long sequences"): builds eagle_bench_target_families into build/
# and runs it. Usage: scripts/bench/bench_target_families.sh [timed runs, default 3]
# BENCH_LONG_T: the long rows' lengths (default "8192 32768"); BENCH_PARTS: "rate long" (default both).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
PARTS="${BENCH_PARTS:-rate long}"
[[ -f "$BUILD/build.ninja" ]] || "$ROOT/scripts/build.sh"
cmake --build "$BUILD" --target eagle_bench_target_families -j "${EAGLE_BUILD_JOBS:-$(nproc)}" >/dev/null
# (a) tokens/s of Qwen3.5, Qwen3.5-MoE and DeepSeek-V3 against a dense Qwen3 of the same active parameters.
if [[ " $PARTS " == *" rate "* ]]; then "$BUILD/eagle_bench_target_families" "${1:-3}"; fi
# (b) one row through 2 Gated DeltaNet layers, then 2 full-attention layers, at each length, each in a fresh process.
if [[ " $PARTS " == *" long "* ]]; then
  for T in ${BENCH_LONG_T:-8192 32768}; do
    for kind in gdn full; do "$BUILD/eagle_bench_target_families" 1 long "$kind" "$T"; done
  done
fi
