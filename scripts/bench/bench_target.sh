#!/usr/bin/env bash
# Target forward benchmark (docs/benchmarks.md, "Target forward"): builds eagle_bench_target into
# build/ and runs it. Usage: scripts/bench/bench_target.sh [timed runs, default 3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
[[ -f "$BUILD/build.ninja" ]] || "$ROOT/scripts/build.sh"
cmake --build "$BUILD" --target eagle_bench_target -j "${EAGLE_BUILD_JOBS:-$(nproc)}" >/dev/null
"$BUILD/eagle_bench_target" "${1:-3}"
