#!/usr/bin/env bash
# MTP fine-tuning: AR of the shipped MTP layer before and after `train --draft mtp`, against an EAGLE-3
# head trained with the same steps on the same target (issue 38; docs/benchmarks.md, "MTP fine-tuning").
# (demo) The demo target as a MiMo target with an untrained MTP layer (scripts/bench/make_demo_mimo.py:
#        the same function, zero q/k/v biases, the layer as transformers initialises one), trained with
#        configs/alpaca-demo.json for BENCH_STEPS steps: --draft mtp (ttt_steps 3, the demo's EAGLE-3 keys
#        ignored) and the EAGLE-3 head of the same config. eval --json of the target folder (the shipped
#        layer, = the AR logged at step 0), of the MTP checkpoint and of the EAGLE-3 head, on the same
#        held-out prompts, greedy chains of BENCH_DRAFT_LEN tokens.
# (fixtures) Each MTP family's tiny test fixture (random weights) on tests/fixtures/data/smoke.jsonl,
#        BENCH_FIXTURE_STEPS steps of --draft mtp and of an EAGLE-3 head, the same three evals.
# Knobs: BENCH_PARTS ("demo fixtures"), BENCH_STEPS (600), BENCH_FIXTURE_STEPS (200), BENCH_DRAFT_LEN (3),
# BENCH_EVAL_PROMPTS (32), BENCH_MAX_NEW (64), BENCH_THREADS (2), BENCH_FIXTURES (the MTP fixtures),
# BENCH_OUT (/tmp/eagle-bench-mtp).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-mtp}"
PARTS="${BENCH_PARTS:-demo fixtures}"
STEPS="${BENCH_STEPS:-600}"
FSTEPS="${BENCH_FIXTURE_STEPS:-200}"
K="${BENCH_DRAFT_LEN:-3}"
PROMPTS="${BENCH_EVAL_PROMPTS:-32}"
MAX_NEW="${BENCH_MAX_NEW:-64}"
THREADS="${BENCH_THREADS:-2}"
FIXTURES="${BENCH_FIXTURES:-tiny-mimo tiny-qwen3-5-mtp tiny-qwen3-5-moe-mtp tiny-qwen3-next-mtp tiny-deepseek-v3-mtp tiny-glm4-moe-mtp}"
mkdir -p "$OUT"
ROWS=()

# run TARGET DATA NAME STEPS FLAGS...: train into $OUT/NAME; no evaluation in the loop, one checkpoint.
run() {
  local target="$1" data="$2" name="$3" steps="$4" t0
  shift 4
  t0=$(date +%s)
  "$BIN" train --model_name_or_path "$target" --data_path "$data" --output_dir "$OUT/$name" \
    --overwrite_output_dir --device cpu --num_threads "$THREADS" --max_steps "$steps" --eval_steps 0 \
    --eval_num_prompts 0 --save_steps 0 "$@" >"$OUT/$name.log" 2>&1 || { echo "$name FAILED ($OUT/$name.log)" >&2; exit 1; }
  echo "  $name: $steps steps, $(($(date +%s) - t0)) s wall"
}
# evaluate CHECKPOINT TARGET DATA NAME FLAGS...: eval --json into $OUT/NAME.eval.json
evaluate() {
  local ckpt="$1" target="$2" data="$3" name="$4"
  shift 4
  "$BIN" eval --checkpoint "$ckpt" --model_name_or_path "$target" --data_path "$data" \
    --eval_num_prompts "$PROMPTS" --eval_max_new_tokens "$MAX_NEW" --eval_draft_len "$K" \
    --num_threads "$THREADS" --device cpu --json "$@" >"$OUT/$name.eval.json" 2>"$OUT/$name.eval.log"
}
last_ckpt() { ls -d "$OUT/$1"/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1; }
# family TARGET DATA NAME STEPS EVALFLAGS -- TRAINFLAGS...: the three rows of one target
family() {
  local target="$1" data="$2" name="$3" steps="$4" evalflags="$5"
  shift 6
  # shellcheck disable=SC2086
  evaluate "$target" "$target" "$data" "$name-shipped" $evalflags
  run "$target" "$data" "$name-mtp" "$steps" "$@" --draft mtp --ttt_steps 3
  # shellcheck disable=SC2086
  evaluate "$(last_ckpt "$name-mtp")" "$target" "$data" "$name-mtp" $evalflags
  run "$target" "$data" "$name-eagle3" "$steps" "$@" --draft eagle --eagle_version 3 --ttt_steps 3
  # shellcheck disable=SC2086
  evaluate "$(last_ckpt "$name-eagle3")" "$target" "$data" "$name-eagle3" $evalflags
  ROWS+=("$name=$steps=$OUT/$name-shipped.eval.json=$OUT/$name-mtp.eval.json=$OUT/$name-eagle3.eval.json")
}

echo "host: $(nproc) cores; $(uptime)"
if [[ " $PARTS " == *" demo "* ]]; then
  MIMO="$OUT/demo-mimo"
  [ -f "$MIMO/model.safetensors" ] || "$PY" "$ROOT/scripts/bench/make_demo_mimo.py" "$TARGET" "$MIMO"
  family "$MIMO" "$MIMO/alpaca.jsonl" demo-mimo "$STEPS" "--training_seq_len 512 --validation_fraction 0.02" -- \
    --config "$ROOT/configs/alpaca-demo.json"
fi
if [[ " $PARTS " == *" fixtures "* ]]; then
  COMMON=(--training_seq_len 256 --bucket_granularity 64 --validation_fraction 0.1 --per_device_train_batch_size 4
    --learning_rate 0.001 --warmup_steps 10 --seed 42)
  for f in $FIXTURES; do
    family "$ROOT/tests/fixtures/models/$f" "$ROOT/tests/fixtures/data/smoke.jsonl" "$f" "$FSTEPS" \
      "--training_seq_len 256 --validation_fraction 0.1" -- "${COMMON[@]}"
  done
fi
echo
"$PY" - "${ROWS[@]}" <<'PYEOF'
import json, sys
def load(p):
    t = open(p).read()
    return json.loads(t[max(t.find("{\n"), 0):])
f = lambda v: "n/a" if v is None else f"{v:.3f}"
print("| target | steps | shipped MTP ar | fine-tuned MTP ar | EAGLE-3 ar | MTP ar_by_depth 1..K (after) | EAGLE-3 ar_by_depth |")
print("|---|---|---|---|---|---|---|")
for row in sys.argv[1:]:
    name, steps, a, b, c = row.split("=")
    a, b, c = load(a), load(b), load(c)
    d = lambda j: " ".join(f(x) for x in j.get("ar_by_depth", []))
    print(f"| {name} | {steps} | {f(a.get('ar'))} | {f(b.get('ar'))} | {f(c.get('ar'))} | {d(b)} | {d(c)} |")
PYEOF
echo "host after: $(uptime)"
