#!/usr/bin/env bash
# Checks that two builds of eagle-train train the same: runs the demo's training
# (configs/alpaca-demo.json on the demo target, seed 42, 2 threads) with each binary and compares
# every logged number of metrics.jsonl but the timings and memory (tokens/s, ms per step, peak memory). For refactors that
# must not change behaviour: the losses, accuracies, tau and AR must be bit-identical on CPU. Keys
# only the new binary logs (new outputs) are listed and not compared; a key it lost fails.
# Usage: scripts/check_same_losses.sh OLD_BIN NEW_BIN [extra train flags, e.g. --max_steps 100]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
# shellcheck disable=SC1091
source "$DEPS_DIR/env.sh"
OLD="$1"
NEW="$2"
shift 2
TARGET="${EAGLE_DEMO_TARGET:-$DEPS_DIR/demo-target}"
"$EAGLE_PYTHON" "$ROOT/scripts/make_demo_target.py" --output "$TARGET"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for which in old new; do
  BIN="$OLD"
  [[ $which == new ]] && BIN="$NEW"
  "$BIN" train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
    --data_path "$TARGET/alpaca.jsonl" --output_dir "$WORK/$which" "$@" > "$WORK/$which.log" 2>&1 ||
    { echo "[check] $which ($BIN) failed:"; tail -5 "$WORK/$which.log"; exit 1; }
done
"$EAGLE_PYTHON" - "$WORK/old/metrics.jsonl" "$WORK/new/metrics.jsonl" <<'PYEOF'
import json, sys
TIMING = ("tokens_per_s", "ms_per_step", "peak_memory_mib")  # measurements, not results
def numbers(path):
    rows = []
    for line in open(path):
        j = json.loads(line)
        rows.append({k: v for k, v in j.items() if k not in TIMING})
    return rows
old, new = numbers(sys.argv[1]), numbers(sys.argv[2])
# A key only the new binary logs is a new output (reported); one only the old logs was lost (a failure).
added = sorted({k for b in new for k in b} - {k for a in old for k in a})
lost = sorted({k for a in old for k in a} - {k for b in new for k in b})
if added:
    print(f"[check] keys only the new binary logs (not compared): {', '.join(added)}")
new = [{k: v for k, v in b.items() if k not in added} for b in new]
diff = [(a, b) for a, b in zip(old, new) if a != b]
if len(old) != len(new) or diff or lost:
    if lost:
        print(f"[check] keys the new binary no longer logs: {', '.join(lost)}")
    print(f"[check] DIFFERENT: {len(old)} vs {len(new)} lines, {len(diff)} differ")
    for a, b in diff[:3]:
        print(" old", a, "\n new", b)
    sys.exit(1)
print(f"[check] identical: {len(old)} metrics lines (losses, acc, tau, AR, lr, grad norm, padding), timings aside")
PYEOF
