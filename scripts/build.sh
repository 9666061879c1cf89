#!/usr/bin/env bash
# Configures and builds eagle-train (Release, Ninja, ccache) into build/. Run scripts/setup.sh first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
# shellcheck disable=SC1091
source "$DEPS_DIR/env.sh"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build}"
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$EAGLE_TORCH_CMAKE_PREFIX" "$@"
fi
cmake --build "$BUILD" -j "${EAGLE_BUILD_JOBS:-$(nproc)}"
