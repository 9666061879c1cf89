#!/usr/bin/env bash
# Target forward benchmark (docs/benchmarks.md, "Target forward"): builds eagle_bench_target into
# build/ and runs it. Usage: scripts/bench/bench_target.sh [timed runs, default 3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
[[ -f "$BUILD/build.ninja" ]] || "$ROOT/scripts/build.sh"
cmake --build "$BUILD" --target eagle_bench_target -j "${EAGLE_BUILD_JOBS:-$(nproc)}" >/dev/null
"$BUILD/eagle_bench_target" "${1:-3}"
# One row of 16384 tokens with target_chunk_tokens 0, 4096 and 1024, each in a fresh process.
for chunk in 0 4096 1024; do "$BUILD/eagle_bench_target" 1 long "$chunk" 2>/dev/null; done
