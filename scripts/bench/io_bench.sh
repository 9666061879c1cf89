#!/usr/bin/env bash
# Measures the run's I/O overheads (logging a step, saving/rotating checkpoints) on the file system
# of FOLDER: scripts/bench/io_bench.sh [FOLDER] [CHECKPOINT_MIB]. Prints Markdown table rows.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/build.sh" >/dev/null
cmake --build "$BUILD" --target eagle_io_bench -j "${EAGLE_BUILD_JOBS:-$(nproc)}" >/dev/null
"$BUILD/eagle_io_bench" "${1:-${TMPDIR:-/tmp}}" "${2:-256}"
