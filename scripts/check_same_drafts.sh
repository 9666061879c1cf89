#!/usr/bin/env bash
# Checks that two builds of eagle-train train and evaluate every draft kind the same (refactors that must
# not change behaviour, e.g. the draft-table re-layout of issue 48): on the demo target an EAGLE-3 head, an
# EAGLE-1 head and a DFlash draft, on the demo target written as MiMo (scripts/bench/make_demo_mimo.py) its
# MTP layer, each trained CHECK_STEPS steps (evaluated every CHECK_STEPS / 2) by both binaries; every
# number of metrics.jsonl but the timings compared exactly; then eval --json of each final checkpoint by
# both binaries for the greedy chain (batched and one prompt at a time), the tree (EAGLE-3, MTP) and
# temperature 1, compared key by key ("seconds" aside). Keys only the new binary writes are listed, not
# compared; a key it lost fails. Exit 1 on any difference.
# Usage: scripts/check_same_drafts.sh OLD_BIN NEW_BIN   (CHECK_STEPS, default 60; CHECK_OUT keeps the runs)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
# shellcheck disable=SC1091
source "$DEPS_DIR/env.sh"
OLD="$1"
NEW="$2"
STEPS="${CHECK_STEPS:-60}"
TARGET="${EAGLE_DEMO_TARGET:-$DEPS_DIR/demo-target}"
"$EAGLE_PYTHON" "$ROOT/scripts/make_demo_target.py" --output "$TARGET"
WORK="${CHECK_OUT:-$(mktemp -d)}"
[[ -z "${CHECK_OUT:-}" ]] && trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"
MIMO="$WORK/demo-mimo"
[ -f "$MIMO/model.safetensors" ] || "$EAGLE_PYTHON" "$ROOT/scripts/bench/make_demo_mimo.py" "$TARGET" "$MIMO" >/dev/null
COMMON=(--training_seq_len 512 --bucket_granularity 64 --validation_fraction 0.02 --per_device_train_batch_size 8
  --learning_rate 0.002 --warmup_steps 10 --max_steps "$STEPS" --eval_steps $((STEPS / 2)) --save_steps "$STEPS"
  --eval_num_prompts 8 --eval_max_new_tokens 32 --device cpu --num_threads 2 --seed 42 --logging_steps 10)
EVAL=(--eval_num_prompts 8 --eval_max_new_tokens 32 --validation_fraction 0.02 --training_seq_len 512
  --device cpu --num_threads 2 --seed 42 --json)
# kind NAME TARGET EVAL_MODES -- TRAIN FLAGS
KINDS=(
  "eagle3|$TARGET|chain batched tree temp|--draft eagle --eagle_version 3 --ttt_steps 3 --draft_vocab_size 1024 --aux_hidden_state_layer_ids 1 2 3"
  "eagle1|$TARGET|chain batched|--draft eagle --eagle_version 1 --ttt_steps 1"
  "dflash|$TARGET|chain batched temp|--draft dflash --dflash_block_size 4 --draft_num_layers 1 --dflash_num_anchors 64"
  "mtp|$MIMO|chain tree temp|--draft mtp --ttt_steps 3"
)
status=0
for row in "${KINDS[@]}"; do
  IFS='|' read -r name target modes flags <<<"$row"
  for which in old new; do
    BIN="$OLD"
    [[ $which == new ]] && BIN="$NEW"
    # shellcheck disable=SC2086
    "$BIN" train --model_name_or_path "$target" --data_path "$target/alpaca.jsonl" "${COMMON[@]}" $flags \
      --output_dir "$WORK/$name-$which" --overwrite_output_dir >"$WORK/$name-$which.log" 2>&1 ||
      { echo "[check] $name: $which ($BIN) failed:"; tail -5 "$WORK/$name-$which.log"; exit 1; }
  done
  ckpt="$WORK/$name-old/checkpoint-$STEPS"
  for mode in $modes; do
    case $mode in
      chain) extra=(--eval_batch_size 1) ;;
      batched) extra=(--eval_batch_size 8) ;;
      tree) extra=(--eval_tree_topk 4 --eval_tree_steps 3 --eval_tree_draft_tokens 8) ;;
      temp) extra=(--eval_temperature 1) ;;
    esac
    for which in old new; do
      BIN="$OLD"
      [[ $which == new ]] && BIN="$NEW"
      "$BIN" eval --checkpoint "$ckpt" --model_name_or_path "$target" --data_path "$target/alpaca.jsonl" \
        "${EVAL[@]}" "${extra[@]}" >"$WORK/$name-$mode-$which.json" 2>"$WORK/$name-$mode-$which.eval.log" ||
        { echo "[check] $name eval $mode: $which failed:"; tail -5 "$WORK/$name-$mode-$which.eval.log"; exit 1; }
    done
  done
  "$EAGLE_PYTHON" - "$WORK" "$name" "$modes" <<'PYEOF' || status=1
import json, sys
work, name, modes = sys.argv[1], sys.argv[2], sys.argv[3].split()
TIMING = ("tokens_per_s", "ms_per_step", "peak_memory_mib", "seconds")
def rows(path):
    return [{k: v for k, v in json.loads(l).items() if k not in TIMING} for l in open(path)]
def load(path):
    t = open(path).read()
    return {k: v for k, v in json.loads(t[max(t.find("{"), 0):]).items() if k not in TIMING}
def compare(what, old, new):
    added = sorted(set(new) - set(old))
    lost = sorted(set(old) - set(new))
    diff = [k for k in set(old) & set(new) if old[k] != new[k]]
    if added:
        print(f"[check] {name} {what}: new keys (not compared): {', '.join(added)}")
    return lost, diff
bad = []
old, new = rows(f"{work}/{name}-old/metrics.jsonl"), rows(f"{work}/{name}-new/metrics.jsonl")
if len(old) != len(new):
    bad.append(f"metrics.jsonl: {len(old)} lines against {len(new)}")
for i, (a, b) in enumerate(zip(old, new)):
    lost, diff = compare(f"metrics line {i + 1}", a, b)
    bad += [f"metrics line {i + 1}: lost {k}" for k in lost] + [f"metrics line {i + 1}: {k} {a[k]} != {b[k]}" for k in diff]
for mode in modes:
    a, b = load(f"{work}/{name}-{mode}-old.json"), load(f"{work}/{name}-{mode}-new.json")
    lost, diff = compare(f"eval {mode}", a, b)
    bad += [f"eval {mode}: lost {k}" for k in lost] + [f"eval {mode}: {k} {a[k]} != {b[k]}" for k in diff]
if bad:
    print(f"[check] {name}: DIFFERENT")
    for line in bad:
        print("  " + line)
    sys.exit(1)
print(f"[check] {name}: SAME ({len(old)} metrics lines; eval {', '.join(modes)}: "
      + "; ".join(f"{m} ar {load(f'{work}/{name}-{m}-new.json').get('ar')}" for m in modes) + ")")
PYEOF
done
exit $status
