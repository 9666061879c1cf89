#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the main job on the built-in default.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
BIN="${EAGLE_BUILD_DIR:-$ROOT/build}/eagle-train"
"$BIN" --version
"$BIN" --help
