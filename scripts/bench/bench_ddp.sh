#!/usr/bin/env bash
# Data parallelism (docs/distributed.md): the same global batch trained by one process and by
# torchrun with BENCH_RANKS ranks, on the Alpaca demo (configs/alpaca-demo.json, the demo target and
# its alpaca.jsonl: data/alpaca_5000.json.gz tokenized by scripts/make_demo_target.py).
#   single          1 process, per_device_train_batch_size RANKS x ROWS, THREADS threads
#   single, cores   the same with RANKS x THREADS threads (the cores the ranks use together)
#   torchrun        RANKS ranks (torchrun --standalone: a free port), ROWS rows and THREADS threads each
# Same seed, same steps, no evaluation (validation_fraction 0) and no checkpoint inside the loop;
# each run in its own output_dir under BENCH_OUT. The final losses of the runs should agree to about
# 1e-6 (the sums are only reordered). Prints a Markdown table:
#   wall s     the whole process (or torchrun): start-up, loading, training, the final checkpoint
#   tokens/s   real (non-pad) tokens per second of all ranks together: summary.json's tokens_per_s
#              (every step), and "steady" from metrics.jsonl without the first logging window
#              (allocation of each new shape), as scripts/bench/train_table.py does
#
# Knobs (environment): BENCH_STEPS (30), BENCH_ROWS (4: rows per rank), BENCH_RANKS (2),
# BENCH_THREADS (1: threads per rank), BENCH_LOGGING_STEPS (5), BENCH_DEVICE (cpu; cuda: rank r on
# GPU r), BENCH_OUT (a fresh folder under /tmp), EAGLE_TORCHRUN (the venv's torchrun),
# EAGLE_DEMO_TARGET, EAGLE_BUILD_DIR, EAGLE_DEPS_DIR, EAGLE_PYTHON.
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
TORCHRUN="${EAGLE_TORCHRUN:-$DEPS_DIR/venv/bin/torchrun}"
OUT="${BENCH_OUT:-$(mktemp -d /tmp/eagle-bench-ddp.XXXXXX)}"
STEPS="${BENCH_STEPS:-30}"
ROWS="${BENCH_ROWS:-4}"
RANKS="${BENCH_RANKS:-2}"
THREADS="${BENCH_THREADS:-1}"
LOG_STEPS="${BENCH_LOGGING_STEPS:-5}"
DEVICE="${BENCH_DEVICE:-cpu}"

[ -x "$TORCHRUN" ] || { echo "no torchrun at $TORCHRUN (scripts/setup.sh makes the venv; or set EAGLE_TORCHRUN)" >&2; exit 2; }
DATA="$TARGET/alpaca.jsonl"
mkdir -p "$OUT"

TRAIN_ARGS=(train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" --data_path "$DATA"
  --device "$DEVICE" --max_steps "$STEPS" --warmup_steps 2 --logging_steps "$LOG_STEPS" --eval_steps 0
  --eval_num_prompts 0 --validation_fraction 0 --save_steps 0 --seed 42 --overwrite_output_dir)

echo "host: $(nproc) cores; $(uptime)"
echo "$STEPS steps of $((RANKS * ROWS)) rows (global), device $DEVICE; runs in $OUT"
ROWS_OUT=()
# run NAME MODE RANKS THREADS COMMAND...: times COMMAND (its output in $OUT/NAME.log)
run() {
  local name="$1" mode="$2" ranks="$3" threads="$4" t0 t1 wall rc=0
  shift 4
  t0=$(date +%s.%N)
  "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "  $name: exit $rc, $wall s wall; load $(cut -d' ' -f1-3 /proc/loadavg)"
  ROWS_OUT+=("$mode|$ranks|$threads|$((RANKS * ROWS))|$wall|$rc|$OUT/$name")
}

run single "single" 1 "$THREADS" \
  "$BIN" "${TRAIN_ARGS[@]}" --output_dir "$OUT/single" --num_threads "$THREADS" \
  --per_device_train_batch_size "$((RANKS * ROWS))"
run single-cores "single, cores of the ranks" 1 "$((RANKS * THREADS))" \
  "$BIN" "${TRAIN_ARGS[@]}" --output_dir "$OUT/single-cores" --num_threads "$((RANKS * THREADS))" \
  --per_device_train_batch_size "$((RANKS * ROWS))"
run torchrun "torchrun" "$RANKS" "$THREADS" \
  "$TORCHRUN" --standalone --nproc-per-node "$RANKS" --no-python \
  "$BIN" "${TRAIN_ARGS[@]}" --output_dir "$OUT/torchrun" --num_threads "$THREADS" \
  --per_device_train_batch_size "$ROWS"
echo "host after: $(uptime)"
echo

"$PY" - "${ROWS_OUT[@]}" <<'PYEOF'
import json, os, sys

print("| mode | ranks | threads per rank | rows per step (global) | wall s | real tokens/s (summary) "
      "| real tokens/s (steady) | final loss |")
print("|---|---|---|---|---|---|---|---|")
for spec in sys.argv[1:]:
    mode, ranks, threads, rows, wall, rc, run_dir = spec.split("|")
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
        windows, prev = [], 0
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                j = json.loads(line)
                if j.get("tokens_per_s") is None:
                    continue
                seconds = j["ms_per_step"] * (j["step"] - prev) / 1000.0
                windows.append((seconds, j["tokens_per_s"] * seconds))
                prev = j["step"]
        timed = windows[1:] if len(windows) > 1 else windows
        secs = sum(w[0] for w in timed)
        steady = sum(w[1] for w in timed) / secs if secs > 0 else float("nan")
        loss = s.get("final_loss")
        status = "" if rc == "0" and s.get("exit_reason") == "completed" else f" (exit {rc})"
        print(f"| {mode}{status} | {ranks} | {threads} | {rows} | {float(wall):.1f} | {s['tokens_per_s']:.0f} "
              f"| {steady:.0f} | {'n/a' if loss is None else f'{loss:.6f}'} |")
    except (OSError, ValueError, KeyError) as e:
        print(f"| {mode} (exit {rc}, {type(e).__name__}: see {run_dir}.log) | {ranks} | {threads} | {rows} "
              f"| {float(wall):.1f} | | | |")
PYEOF
