#!/usr/bin/env bash
# Where a training step's time goes, and its MFU against the matmul rate measured on the step's own GEMMs
# (issue 52; scripts/bench/bench_step_breakdown.cpp; docs/benchmarks.md, "Step breakdown and MFU"): data,
# target forward, draft forward, backward, optimizer and host time per step, for
#   the demo target (scripts/make_demo_target.py): EAGLE-3 and DFlash; its MiMo twin
#     (scripts/bench/make_demo_mimo.py): MTP;
#   SmolLM2-135M-Instruct (scripts/bench/real_target.sh prepare, when $RT_DIR/smollm2-135m exists): EAGLE-3
#     and DFlash, 2 rows a batch, TTT 7, draft vocabulary 8192 (the real-target comparison's recipe).
# Knobs: BENCH_THREADS (2), BENCH_STEPS (20), BENCH_PARTS ("demo smollm2"), RT_DIR
# ($HOME/.cache/eagle-train/real-target), BENCH_OUT (/tmp/eagle-bench-breakdown), BENCH_EXTRA (flags added
# to every run, e.g. "--bf16").
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-breakdown}"
THREADS="${BENCH_THREADS:-2}"
STEPS="${BENCH_STEPS:-20}"
PARTS="${BENCH_PARTS:-demo smollm2}"
RT_DIR="${RT_DIR:-$HOME/.cache/eagle-train/real-target}"
EXTRA="${BENCH_EXTRA:-}"
BUILD="$(dirname "$BIN")"
cmake --build "$BUILD" --target eagle_bench_step_breakdown >/dev/null
B="$BUILD/eagle_bench_step_breakdown"
mkdir -p "$OUT"
: >"$OUT/results.jsonl"

# one LABEL FLAGS...: one configuration; its table to stdout, its JSON line to results.jsonl.
one() {
  local label="$1"
  shift
  # shellcheck disable=SC2086
  "$B" --device cpu --num_threads "$THREADS" --bench_steps "$STEPS" --bench_label "$label" --output_dir "$OUT/unused" \
    "$@" $EXTRA >"$OUT/$label.txt" 2>"$OUT/$label.log" || { echo "$label FAILED ($OUT/$label.log)" >&2; exit 1; }
  sed '$d' "$OUT/$label.txt"
  tail -1 "$OUT/$label.txt" >>"$OUT/results.jsonl"
}

if [[ " $PARTS " == *" demo "* ]]; then
  # The demo config's shapes (configs/alpaca-demo.json: 8 rows of 64-token buckets up to 512, TTT 3).
  DEMO=(--model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl" --training_seq_len 512
        --bucket_granularity 64 --per_device_train_batch_size 8 --learning_rate 0.002)
  one demo-eagle3 "${DEMO[@]}" --ttt_steps 3 --draft_vocab_size 1024
  one demo-dflash "${DEMO[@]}" --draft dflash --dflash_block_size 4
  MIMO="$OUT/demo-mimo"
  [ -f "$MIMO/model.safetensors" ] || "$PY" "$ROOT/scripts/bench/make_demo_mimo.py" "$TARGET" "$MIMO" >/dev/null
  one demo-mtp "${DEMO[@]}" --model_name_or_path "$MIMO" --data_path "$MIMO/alpaca.jsonl" --draft mtp --ttt_steps 3
fi
if [[ " $PARTS " == *" smollm2 "* && -f "$RT_DIR/smollm2-135m/config.json" ]]; then
  SMOL=(--model_name_or_path "$RT_DIR/smollm2-135m" --data_path "$RT_DIR/data/train.jsonl" --training_seq_len 1024
        --per_device_train_batch_size 2 --learning_rate 1e-3)
  one smollm2-eagle3 "${SMOL[@]}" --ttt_steps 7 --draft_vocab_size 8192
  one smollm2-dflash "${SMOL[@]}" --draft dflash
fi
echo "results: $OUT/results.jsonl"
