#!/usr/bin/env bash
# Sets up (if needed), builds and runs every test through CTest. Extra arguments go to ctest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
cd "${EAGLE_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure "$@"
