# Sourced by the benchmarks on the demo target: sets ROOT, DEPS_DIR, PY, BIN and TARGET (each
# overridable: EAGLE_DEPS_DIR, EAGLE_PYTHON, EAGLE_BUILD_DIR, EAGLE_DEMO_TARGET), builds eagle-train
# when it is missing and makes the demo target when it is missing (scripts/make_demo_target.py).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
PY="${EAGLE_PYTHON:-$DEPS_DIR/venv/bin/python}"
BIN="${EAGLE_BUILD_DIR:-$ROOT/build}/eagle-train"
TARGET="${EAGLE_DEMO_TARGET:-$DEPS_DIR/demo-target}"
[ -x "$BIN" ] || EAGLE_BUILD_JOBS="${EAGLE_BUILD_JOBS:-2}" "$ROOT/scripts/build.sh"
[ -f "$TARGET/DONE" ] || "$PY" "$ROOT/scripts/make_demo_target.py" --output "$TARGET"
