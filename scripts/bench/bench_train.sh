#!/usr/bin/env bash
# Real tokens/s of full training steps (`eagle-train train`: target forward, EAGLE-3 head with 3 TTT
# steps, backward, AdamW) by batching mode: bucket_granularity 0 (every batch padded to
# training_seq_len: the baseline), 1024, 256 and padding_free, on (a) the Alpaca demo data at
# training_seq_len 512 and (b) long-tailed synthetic lengths (log-normal, median ~600, sigma 0.8,
# capped at 4096; real text ids cut from the demo data's token stream) at training_seq_len 4096;
# and (c) granularity 0, 128 (grouped and in random order) and padding_free on the same long tail
# capped at 2048, at 2048.
# Same seed, same number of optimizer steps and the same rows per micro-batch in every mode; no
# evaluation or checkpoint inside the loop. Prints a Markdown table (scripts/bench/train_table.py).
#
# Knobs (environment): BENCH_SETS ("alpaca longtail longtail2048": which of (a), (b), (c) to run),
# BENCH_DEMO_STEPS (48), BENCH_DEMO_ROWS (4), BENCH_LONG_STEPS (24), BENCH_LONG_ROWS (2),
# BENCH_MID_STEPS (24), BENCH_MID_ROWS (4), BENCH_THREADS (2), BENCH_OUT (/tmp/eagle-bench-train),
# BENCH_NICE (0: no nice).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-train}"
DEMO_STEPS="${BENCH_DEMO_STEPS:-48}"
DEMO_ROWS="${BENCH_DEMO_ROWS:-4}"
LONG_STEPS="${BENCH_LONG_STEPS:-24}"
LONG_ROWS="${BENCH_LONG_ROWS:-2}"
MID_STEPS="${BENCH_MID_STEPS:-24}"
MID_ROWS="${BENCH_MID_ROWS:-4}"
SETS="${BENCH_SETS:-alpaca longtail longtail2048}"
THREADS="${BENCH_THREADS:-2}"
NICE=()
[ "${BENCH_NICE:-0}" != 0 ] && NICE=(nice -n "${BENCH_NICE}")

mkdir -p "$OUT"
LONG_DATA="$OUT/longtail.jsonl"
[ -f "$LONG_DATA" ] || "$PY" "$ROOT/scripts/bench/make_longtail_jsonl.py" \
  --source "$TARGET/alpaca.jsonl" --output "$LONG_DATA" --samples 2000 --median 600 --sigma 0.8 --cap 4096
MID_DATA="$OUT/longtail2048.jsonl"
[ -f "$MID_DATA" ] || "$PY" "$ROOT/scripts/bench/make_longtail_jsonl.py" \
  --source "$TARGET/alpaca.jsonl" --output "$MID_DATA" --samples 2000 --median 600 --sigma 0.8 --cap 2048

echo "host: $(nproc) cores; $(uptime)"
RUNS=()
# run NAME DATA SEQ_LEN ROWS STEPS LOGGING_STEPS MODE-FLAGS...
run() {
  local name="$1" data="$2" seq="$3" rows="$4" steps="$5" log_steps="$6"
  shift 6
  local dir="$OUT/$name" t0
  t0=$(date +%s)
  # A tiny held-out split (the same samples in every mode: seeded) gives a loss on equal data;
  # it is evaluated once after the loop, outside the timed windows.
  if ! "${NICE[@]}" "$BIN" train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
      --data_path "$data" --output_dir "$dir" --overwrite_output_dir --device cpu --num_threads "$THREADS" \
      --training_seq_len "$seq" --per_device_train_batch_size "$rows" --max_steps "$steps" \
      --warmup_steps 2 --logging_steps "$log_steps" --eval_steps 0 --eval_num_prompts 0 --save_steps 0 \
      --validation_fraction 0.005 --seed 42 "$@" >"$OUT/$name.log" 2>&1; then
    echo "  $name FAILED (see $OUT/$name.log)"
  fi
  echo "  $name: $(($(date +%s) - t0)) s wall; load $(cut -d' ' -f1-3 /proc/loadavg)"
}
MODES=("granularity 0 (baseline)|--bucket_granularity 0"
       "granularity 1024|--bucket_granularity 1024"
       "granularity 256|--bucket_granularity 256"
       "padding_free|--padding_free --bucket_granularity 0")
# Granularity 128 in both orders: grouped by length (the default) and plain random order (what
# bucketing alone gives, as in trainers without length grouping).
MID_MODES=("granularity 0 (baseline)|--bucket_granularity 0"
           "granularity 128|--bucket_granularity 128"
           "granularity 128, random order|--bucket_granularity 128 --group_by_length=false"
           "padding_free|--padding_free --bucket_granularity 0")
# At training_seq_len 512 granularity 1024 pads to 512 like the baseline (the cap); the demo
# config's own granularity 64 is added there.
for spec in "alpaca|$TARGET/alpaca.jsonl|512|$DEMO_ROWS|$DEMO_STEPS|8" \
            "longtail|$LONG_DATA|4096|$LONG_ROWS|$LONG_STEPS|4" \
            "longtail2048|$MID_DATA|2048|$MID_ROWS|$MID_STEPS|4"; do
  IFS='|' read -r set data seq rows steps log_steps <<<"$spec"
  [[ " $SETS " == *" $set "* ]] || continue
  i=0
  modes=("${MODES[@]}")
  [ "$seq" -le 512 ] && modes+=("granularity 64|--bucket_granularity 64")
  [ "$set" = longtail2048 ] && modes=("${MID_MODES[@]}")
  for m in "${modes[@]}"; do
    label="${m%%|*}"
    flags="${m#*|}"
    name="$set-$seq-mode$i"
    # shellcheck disable=SC2086
    run "$name" "$data" "$seq" "$rows" "$steps" "$log_steps" $flags
    RUNS+=("$set $seq, $rows rows:$label=$OUT/$name")
    i=$((i + 1))
  done
done
echo "host after: $(uptime)"
echo
"$PY" "$ROOT/scripts/bench/train_table.py" "${RUNS[@]}"
