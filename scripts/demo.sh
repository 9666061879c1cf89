#!/usr/bin/env bash
# The main job on the built-in default: sets up (if needed), builds, makes the demo target (a small
# Llama trained on Alpaca, cached in ~/.cache/eagle-train/demo-target; about 10 minutes the first
# time), trains an EAGLE-3 head on it with configs/alpaca-demo.json, shows loss falling and AR
# rising, and exports the head for SGLang/vLLM.
# --regenerate (first argument): the target first rewrites the Alpaca responses itself
# (eagle-train generate, a few minutes on 2 cores) and the head trains on those. Other arguments go
# to `eagle-train train`.
set -euo pipefail
REGENERATE=0
if [[ "${1:-}" == "--regenerate" ]]; then
  REGENERATE=1
  shift
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
# shellcheck disable=SC1091
source "$DEPS_DIR/env.sh"
BIN="${EAGLE_BUILD_DIR:-$ROOT/build}/eagle-train"
TARGET="${EAGLE_DEMO_TARGET:-$DEPS_DIR/demo-target}"
OUT="${EAGLE_DEMO_OUTPUT:-$ROOT/output/alpaca-demo}"

"$EAGLE_PYTHON" "$ROOT/scripts/make_demo_target.py" --output "$TARGET"
"$BIN" --version
"$BIN" inspect --model_name_or_path "$TARGET"
DATA="$TARGET/alpaca.jsonl"
if [[ $REGENERATE == 1 ]]; then
  # A fresh file each time (the target may have been rebuilt); an interrupted one is continued.
  DATA="$OUT-regenerated.jsonl"
  rm -f "$DATA"
  mkdir -p "$(dirname "$DATA")"
  "$BIN" generate --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
    --data_path "$TARGET/alpaca.jsonl" --output "$DATA" --generate_batch_size 32 --num_threads 1
fi
# A fresh run each time: the previous demo run's files are replaced (overwrite_output_dir).
"$BIN" train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
  --data_path "$DATA" --output_dir "$OUT" --overwrite_output_dir "$@"
FINAL="$(ls -d "$OUT"/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)"
rm -rf "$OUT/export-sglang"
"$BIN" export --checkpoint "$FINAL" --format sglang --output "$OUT/export-sglang"
echo
echo "loss and AR over the run: $OUT/metrics.jsonl (TensorBoard: tensorboard --logdir $OUT)"
"$EAGLE_PYTHON" - "$OUT/metrics.jsonl" <<'PYEOF'
import json, sys
print(f"{'step':>6} {'train loss':>11} {'acc_0':>6} {'AR':>6}")
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "loss" in j or "ar" in j:
        loss = f"{j['loss']:.4f}" if j.get("loss") is not None else ""
        acc = f"{j['acc'][0]:.3f}" if j.get("acc") else ""
        ar = f"{j['ar']:.3f}" if j.get("ar") is not None else ""
        print(f"{j['step']:>6} {loss:>11} {acc:>6} {ar:>6}")
PYEOF
echo
echo "summary: $OUT/summary.json"
echo "run report (loss, acc, AR and throughput curves; open in a browser): $OUT/report.html"
echo "exported EAGLE-3 head (SGLang / vLLM layout): $OUT/export-sglang"
