#!/usr/bin/env bash
# eagle-train generate on the demo target (scripts/make_demo_target.py), two measurements:
#   speed   generated tokens/s (real tokens only: what the target chose) at generate_batch_size
#           1, 16 and 64 over the first BENCH_SAMPLES samples of the demo alpaca.jsonl, greedy;
#           checks that every batch size writes the same file.
#   effect  EAGLE-3 heads trained with configs/alpaca-demo.json (same steps, seed and held-out
#           split) on the original Alpaca responses and on the target's own (all 5,000 samples
#           regenerated, greedy), then `eagle-train eval` of both final checkpoints on the same
#           held-out prompts (BENCH_EVAL_PROMPTS of them).
#   vllm    side by side with vLLM's CPU backend on one pinned core (see the vllm) case below).
# Usage: scripts/bench/bench_generate.sh speed|effect|vllm
# Knobs (environment): BENCH_SAMPLES (1024), BENCH_THREADS (1), BENCH_DEVICE (cpu),
# BENCH_EVAL_PROMPTS (100), BENCH_OUT (/tmp/eagle-bench-generate).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-generate}"
SAMPLES="${BENCH_SAMPLES:-1024}"
THREADS="${BENCH_THREADS:-1}"
DEVICE="${BENCH_DEVICE:-cpu}"
EVAL_PROMPTS="${BENCH_EVAL_PROMPTS:-100}"
MODE="${1:-}"

mkdir -p "$OUT"
echo "host: $(nproc) cores; $(uptime)"
load() { cut -d' ' -f1-3 /proc/loadavg; }

case "$MODE" in
speed)
  head -n "$SAMPLES" "$TARGET/alpaca.jsonl" >"$OUT/prompts.jsonl"
  echo "| generate_batch_size | samples | generated tokens | seconds | tokens/s | CPU seconds | load (1, 5, 15 min) |"
  echo "|---|---|---|---|---|---|---|"
  for rows in 1 16 64; do
    rm -f "$OUT/out-$rows.jsonl"*
    /usr/bin/time -f "%U %S" -o "$OUT/time-$rows" "$BIN" generate --model_name_or_path "$TARGET" \
      --data_path "$OUT/prompts.jsonl" --output "$OUT/out-$rows.jsonl" --training_seq_len 512 \
      --generate_batch_size "$rows" --device "$DEVICE" --num_threads "$THREADS" >"$OUT/speed-$rows.log" 2>&1
    # "this run: N tokens in S s (R tokens/s)"
    read -r tokens seconds rate < <(sed -n 's/.*this run: \([0-9]*\) tokens in \([0-9.]*\) s (\([0-9]*\) tokens\/s).*/\1 \2 \3/p' \
      "$OUT/speed-$rows.log")
    cpu=$(awk '{printf "%.1f", $1 + $2}' "$OUT/time-$rows")
    echo "| $rows | $SAMPLES | $tokens | $seconds | $rate | $cpu | $(load) |"
  done
  for rows in 16 64; do
    cmp -s "$OUT/out-1.jsonl" "$OUT/out-$rows.jsonl" && echo "batch $rows: the same file as batch 1" ||
      echo "batch $rows: DIFFERS from batch 1"
  done
  ;;
effect)
  REGEN="$OUT/alpaca-regenerated.jsonl"
  if [ ! -f "$REGEN" ]; then
    t0=$(date +%s)
    "$BIN" generate --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
      --data_path "$TARGET/alpaca.jsonl" --output "$REGEN" --generate_batch_size 32 --device "$DEVICE" \
      --num_threads "$THREADS" >"$OUT/generate.log" 2>&1
    echo "regenerated in $(($(date +%s) - t0)) s: $(grep -o 'wrote .*' "$OUT/generate.log" | head -1)"
    grep -o '[0-9]* tokens generated.*' "$OUT/generate.log"
  fi
  for name in original regenerated; do
    data="$TARGET/alpaca.jsonl"
    [ "$name" = regenerated ] && data="$REGEN"
    [ -f "$OUT/head-$name/summary.json" ] && continue  # trained by an earlier run of this script
    t0=$(date +%s)
    "$BIN" train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" --data_path "$data" \
      --output_dir "$OUT/head-$name" --overwrite_output_dir --device "$DEVICE" --num_threads "$THREADS" \
      >"$OUT/train-$name.log" 2>&1
    echo "trained on $name: $(($(date +%s) - t0)) s, load $(load)"
  done
  echo "| training data | final train loss | AR (training's final eval, 16 prompts) | AR ($EVAL_PROMPTS held-out prompts) | acc, held-out original responses | acc, held-out regenerated responses |"
  echo "|---|---|---|---|---|---|"
  for name in original regenerated; do
    final="$(ls -d "$OUT/head-$name"/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)"
    # The same held-out samples for both heads: the seeded validation split (same indices) of the
    # original data and of the regenerated data; AR depends only on their prompts, which are equal.
    for held in original regenerated; do
      data="$TARGET/alpaca.jsonl"
      [ "$held" = regenerated ] && data="$REGEN"
      "$BIN" eval --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" --checkpoint "$final" \
        --data_path "$data" --eval_num_prompts "$EVAL_PROMPTS" --device "$DEVICE" --num_threads "$THREADS" \
        --json >"$OUT/eval-$name-on-$held.json" 2>"$OUT/eval-$name-on-$held.log"
    done
    "$PY" - "$OUT/head-$name/summary.json" "$OUT/eval-$name-on-original.json" "$OUT/eval-$name-on-regenerated.json" \
      "$name" <<'PYEOF'
import json, sys
s, o, r, name = *(json.load(open(p)) for p in sys.argv[1:4]), sys.argv[4]
num = lambda v, f: format(v, f) if v is not None else "n/a"
acc = lambda e: " ".join(format(a, ".3f") for a in e["eval_acc"])
print(f"| {name} | {num(s.get('final_loss'), '.4f')} | {num(s.get('ar'), '.3f')} | {num(o.get('ar'), '.3f')} | "
      f"{acc(o)} | {acc(r)} |")
PYEOF
  done
  ;;
vllm)
  # Side by side with vLLM's CPU backend on one pinned core (taskset -c BENCH_CORE), the last
  # BENCH_SAMPLES samples (held-out-like), --training_seq_len 512, greedy: eagle-train at
  # generate_batch_size 16, 64 and 256, then vLLM's offline engine on the same prompts
  # (scripts/bench/bench_generate_vllm.py with BENCH_VLLM_PYTHON, a Python that has vllm), which also
  # counts the replies identical to eagle-train's.
  CORE="${BENCH_CORE:-0}"
  VLLM_PY="${BENCH_VLLM_PYTHON:-$DEPS_DIR/vllm-venv/bin/python}"
  tail -n "$SAMPLES" "$TARGET/alpaca.jsonl" >"$OUT/heldout.jsonl"
  echo "| engine | rows | generated tokens | seconds | tokens/s | identical replies | load (1, 5, 15 min) |"
  echo "|---|---|---|---|---|---|---|"
  for rows in 16 64 256; do
    rm -f "$OUT/vllm-out-$rows.jsonl"*
    taskset -c "$CORE" "$BIN" generate --model_name_or_path "$TARGET" --data_path "$OUT/heldout.jsonl" \
      --output "$OUT/vllm-out-$rows.jsonl" --training_seq_len 512 --generate_batch_size "$rows" --device cpu \
      --num_threads 1 >"$OUT/vllm-eagle-$rows.log" 2>&1
    read -r tokens seconds rate < <(sed -n 's/.*this run: \([0-9]*\) tokens in \([0-9.]*\) s (\([0-9]*\) tokens\/s).*/\1 \2 \3/p' \
      "$OUT/vllm-eagle-$rows.log")
    echo "| eagle-train generate | $rows | $tokens | $seconds | $rate | - | $(load) |"
  done
  VLLM_CPU_OMP_THREADS_BIND="$CORE" VLLM_CPU_KVCACHE_SPACE=1 taskset -c "$CORE" "$VLLM_PY" \
    "$ROOT/scripts/bench/bench_generate_vllm.py" "$TARGET" "$OUT/vllm-out-64.jsonl" 512 512 \
    >"$OUT/vllm.json" 2>"$OUT/vllm.log"
  "$PY" - "$OUT/vllm.json" "$(load)" <<'PYEOF'
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"| vLLM (CPU, offline LLM) | its scheduler | {j['tokens']} | {j['seconds']} | {j['tokens_per_s']:.0f} | "
      f"{j['identical_replies']} of {j['prompts']} | {sys.argv[2]} |")
PYEOF
  ;;
*)
  echo "usage: $0 speed|effect|vllm" >&2
  exit 2
  ;;
esac
