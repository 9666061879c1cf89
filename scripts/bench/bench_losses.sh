#!/usr/bin/env bash
# Heads trained with each loss (docs/benchmarks.md, "Acceptance: chains, trees, temperature"): the
# demo config (configs/alpaca-demo.json: the same data, steps and seed) with --loss kl, tv and
# lk_hybrid, then `eagle-train eval` of each final checkpoint on the same held-out prompts: the
# greedy chain AR (temperature 0) and the AR at temperature 1 with greedy and with sampled drafts,
# with alpha's chain estimate. Prints a Markdown table.
# Knobs (environment): BENCH_LOSSES ("kl tv lk_hybrid"), BENCH_STEPS (600, the config's),
# BENCH_EVAL_PROMPTS (32), BENCH_MAX_NEW (64), BENCH_THREADS (1), BENCH_OUT (/tmp/eagle-bench-losses).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-losses}"
STEPS="${BENCH_STEPS:-600}"
PROMPTS="${BENCH_EVAL_PROMPTS:-32}"
MAX_NEW="${BENCH_MAX_NEW:-64}"
THREADS="${BENCH_THREADS:-1}"
mkdir -p "$OUT"
echo "host: $(nproc) cores; $(uptime)"
for loss in ${BENCH_LOSSES:-kl tv lk_hybrid}; do
  if [ ! -d "$OUT/$loss/checkpoint-$STEPS" ]; then
    start=$(date +%s)
    "$BIN" train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
      --data_path "$TARGET/alpaca.jsonl" --output_dir "$OUT/$loss" --overwrite_output_dir --device cpu \
      --num_threads "$THREADS" --max_steps "$STEPS" --save_steps "$STEPS" --eval_steps 0 --eval_num_prompts 0 \
      --loss "$loss" >"$OUT/train-$loss.log" 2>&1
    echo "trained $loss in $(($(date +%s) - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  fi
done
COMMON=(--model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl" --training_seq_len 512
  --validation_fraction 0.02 --eval_num_prompts "$PROMPTS" --eval_max_new_tokens "$MAX_NEW" --eval_draft_len 3
  --num_threads "$THREADS" --device cpu --json)
field() { "$PY" -c 'import json,sys; t=open(sys.argv[1]).read(); j=json.loads(t[t.index("{\n"):]); v=j.get(sys.argv[2]); print("n/a" if v is None else (f"{v:.3f}" if isinstance(v,float) else v))' "$@"; }
echo "| loss | held-out loss | AR, temperature 0 | AR at 1, greedy drafts ± 95% | AR at 1, sampled drafts ± 95% | alpha chain at 1 |"
echo "|---|---|---|---|---|---|"
for loss in ${BENCH_LOSSES:-kl tv lk_hybrid}; do
  ckpt="$OUT/$loss/checkpoint-$STEPS"
  "$BIN" eval --checkpoint "$ckpt" "${COMMON[@]}" >"$OUT/eval-$loss-t0.json" 2>"$OUT/eval-$loss-t0.log"
  for d in greedy sample; do
    "$BIN" eval --checkpoint "$ckpt" "${COMMON[@]}" --eval_temperature 1 --eval_draft_sampling "$d" --seed 42 \
      >"$OUT/eval-$loss-t1-$d.json" 2>"$OUT/eval-$loss-t1-$d.log"
  done
  echo "| $loss | $(field "$OUT/eval-$loss-t0.json" eval_loss) | $(field "$OUT/eval-$loss-t0.json" ar) |" \
    "$(field "$OUT/eval-$loss-t1-greedy.json" temp_ar) ± $(field "$OUT/eval-$loss-t1-greedy.json" temp_ar_ci95) |" \
    "$(field "$OUT/eval-$loss-t1-sample.json" temp_ar) ± $(field "$OUT/eval-$loss-t1-sample.json" temp_ar_ci95) |" \
    "$(field "$OUT/eval-$loss-t1-sample.json" alpha_ar) |"
done
