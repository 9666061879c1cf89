#!/usr/bin/env bash
# eagle-train follow beside a drifting target, on CPU (issue 51; docs/benchmarks.md, "Following a changing target").
#
# Stages k = 0 .. BENCH_STAGES-1. Policy version k is the demo target (k = 0) or version k-1 fine-tuned on slice k of
# the Alpaca data (scripts/bench/drift_target.py, BENCH_DRIFT_STEPS steps): the target drifts stage by stage, as an
# RL policy does. Once version k is written (policy/v<k>, then policy/latest), its rollouts are made:
# `eagle-train generate` lets version k rewrite the replies of BENCH_PROMPTS prompts of slice k, cut into shards of
# BENCH_SHARD samples named *-v<k>.jsonl and renamed into the rollout folder; BENCH_HELDOUT more prompts of the slice,
# regenerated apart, are the measurement's held-out rollouts of version k.
#  (a) frozen:  a draft trained once on version 0's rollouts (BENCH_BASE_STEPS steps), never updated;
#  (b) follow:  `eagle-train follow --init_draft (a)`, run after each stage for BENCH_ROUNDS rounds of BENCH_EVERY
#               steps on up to BENCH_WINDOW new shards each (producer and follower take turns: the order of a
#               side-by-side run, but repeatable);
#  (c) scratch: after the last stage, a draft trained from zero on the last version's rollouts for as many steps as
#               the follower trained in all (equal steps; the wall times are printed beside).
# Every draft is measured by `eagle-train eval` on each version's held-out rollouts against that version: (a) and
# (b) (the follower's serving version after the stage) by version, (c) on the last. Prints a Markdown table and
# writes BENCH_OUT/follow_sim.svg (AR by policy version).
#
# Knobs: BENCH_STAGES (4), BENCH_DRIFT_STEPS (150), BENCH_PROMPTS (400), BENCH_SHARD (50), BENCH_HELDOUT (48),
# BENCH_BASE_STEPS (400), BENCH_EVERY (100), BENCH_ROUNDS (2), BENCH_WINDOW (4), BENCH_MAX_NEW (64), BENCH_THREADS (2),
# BENCH_OUT (/tmp/eagle-bench-follow).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
STAGES="${BENCH_STAGES:-4}"
DRIFT_STEPS="${BENCH_DRIFT_STEPS:-150}"
PROMPTS="${BENCH_PROMPTS:-400}"
SHARD="${BENCH_SHARD:-50}"
HELDOUT="${BENCH_HELDOUT:-48}"
BASE_STEPS="${BENCH_BASE_STEPS:-400}"
EVERY="${BENCH_EVERY:-100}"
ROUNDS="${BENCH_ROUNDS:-2}"
WINDOW="${BENCH_WINDOW:-4}"  # new shards per round: ROUNDS x WINDOW >= the PROMPTS / SHARD of a stage keeps up
MAX_NEW="${BENCH_MAX_NEW:-64}"
THREADS="${BENCH_THREADS:-2}"
OUT="${BENCH_OUT:-/tmp/eagle-bench-follow}"
rm -rf "$OUT"
mkdir -p "$OUT/policy" "$OUT/rollouts" "$OUT/heldout" "$OUT/slices"
COMMON=(--config "$ROOT/configs/alpaca-demo.json" --device cpu --num_threads "$THREADS" --eval_num_prompts "$HELDOUT"
  --eval_max_new_tokens 48 --eval_draft_len 3)
TRAIN=(--warmup_steps 0 --save_steps 0 --eval_steps 0 --validation_fraction 0 --logging_steps 50)
SLICE=$((PROMPTS + HELDOUT))
now() { date +%s.%N; }

set_latest() {  # VERSION
  printf 'v%s\n' "$1" >"$OUT/policy/.latest.tmp"
  mv "$OUT/policy/.latest.tmp" "$OUT/policy/latest"
}

# Version k's rollouts: its replies to slice k's prompts, cut into shards, and its held-out rollouts.
rollouts() {  # VERSION
  local k=$1 slice="$OUT/slices/$1.jsonl"
  sed -n "$((k * SLICE + 1)),$(((k + 1) * SLICE))p" "$TARGET/alpaca.jsonl" >"$slice"
  head -n "$PROMPTS" "$slice" >"$OUT/slices/$k-train.jsonl"
  tail -n "$HELDOUT" "$slice" >"$OUT/slices/$k-heldout.jsonl"
  for part in train heldout; do
    "$BIN" generate --model_name_or_path "$OUT/policy/v$k" --data_path "$OUT/slices/$k-$part.jsonl" \
      --output "$OUT/slices/$k-$part-regen.jsonl" --training_seq_len 512 --max_new_tokens "$MAX_NEW" \
      --generate_batch_size 32 --device cpu --num_threads "$THREADS" >"$OUT/generate-$k-$part.log" 2>&1
  done
  cp "$OUT/slices/$k-heldout-regen.jsonl" "$OUT/heldout/v$k.jsonl"
  split -l "$SHARD" -d -a 3 "$OUT/slices/$k-train-regen.jsonl" "$OUT/slices/$k-shard-"
  for f in "$OUT/slices/$k-shard-"*; do
    local name
    name="stage$k-$(basename "$f" | sed 's/.*shard-//')-v$k.jsonl"
    cp "$f" "$OUT/rollouts/.tmp-$name"
    mv "$OUT/rollouts/.tmp-$name" "$OUT/rollouts/$name"
  done
}

ar_of() {  # HEAD VERSION
  "$BIN" eval --checkpoint "$1" --model_name_or_path "$OUT/policy/v$2" --eval_data_path "$OUT/heldout/v$2.jsonl" \
    --training_seq_len 512 --eval_num_prompts "$HELDOUT" --eval_max_new_tokens 48 --eval_draft_len 3 --device cpu \
    --num_threads "$THREADS" --json 2>/dev/null | "$PY" -c 'import json,sys; t=sys.stdin.read(); print(json.loads(t[t.index("{"):])["ar"])'
}

# Version 0 and the frozen draft (a).
cp -r "$TARGET" "$OUT/policy/v0"
set_latest 0
rollouts 0
t0=$(now)
"$BIN" train "${COMMON[@]}" "${TRAIN[@]}" --model_name_or_path "$OUT/policy/v0" \
  --data_path "$OUT/slices/0-train-regen.jsonl" --max_steps "$BASE_STEPS" --output_dir "$OUT/frozen" >"$OUT/frozen.log" 2>&1
FROZEN="$OUT/frozen/checkpoint-$BASE_STEPS"
echo "frozen draft: $BASE_STEPS steps in $(echo "$(now) - $t0" | bc) s"

declare -a ROWS
follow_seconds=0
for k in $(seq 0 $((STAGES - 1))); do
  if [ "$k" -gt 0 ]; then
    "$PY" "$ROOT/scripts/bench/drift_target.py" --base "$OUT/policy/v$((k - 1))" --data "$TARGET/alpaca.jsonl" \
      --first $((k * SLICE)) --count "$PROMPTS" --steps "$DRIFT_STEPS" --seed "$k" --out "$OUT/policy/v$k" \
      >"$OUT/drift-$k.log" 2>&1
    set_latest "$k"
    rollouts "$k"
  fi
  t0=$(now)
  "$BIN" follow "${COMMON[@]}" --model_name_or_path "$OUT/policy" --rollout_dir "$OUT/rollouts" \
    --output_dir "$OUT/follow" --init_draft "$FROZEN" --publish_every "$EVERY" --warmup_steps 0 \
    --learning_rate 0.001 --max_steps $(((k + 1) * ROUNDS * EVERY)) --follow_window "$WINDOW" --follow_replay 1 \
    --follow_poll_s 1 >"$OUT/follow-$k.log" 2>&1
  follow_seconds=$(echo "$follow_seconds + $(now) - $t0" | bc)
  serving="$OUT/follow/$(cat "$OUT/follow/latest")"
  ROWS+=("| $k | $(ar_of "$FROZEN" "$k") | $(ar_of "$serving" "$k") | $(basename "$serving") |")
done

# (c) from scratch on the last version's rollouts, as many steps as the follower's.
last=$((STAGES - 1))
steps=$((STAGES * ROUNDS * EVERY))
t0=$(now)
"$BIN" train "${COMMON[@]}" "${TRAIN[@]}" --model_name_or_path "$OUT/policy/v$last" \
  --data_path "$OUT/slices/$last-train-regen.jsonl" --max_steps "$steps" --output_dir "$OUT/scratch" >"$OUT/scratch.log" 2>&1
scratch_seconds=$(echo "$(now) - $t0" | bc)
SCRATCH_AR=$(ar_of "$OUT/scratch/checkpoint-$steps" "$last")

echo
echo "| policy version | (a) frozen (trained on v0) | (b) follow (serving) | serving |"
echo "|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "(c) from scratch on v$last's rollouts, $steps steps: AR $SCRATCH_AR (${scratch_seconds} s); the follower: $steps steps in all, ${follow_seconds} s with its gate evaluations"
printf '%s\n' "${ROWS[@]}" >"$OUT/rows.md"
"$PY" "$ROOT/scripts/bench/follow_plot.py" "$OUT/rows.md" "$OUT/follow_sim.svg" "$SCRATCH_AR"
