#!/usr/bin/env bash
# One eagle-train run of scripts/bench/real_target.sh (issue 52): trains a draft for BUDGET_S seconds of wall time and
# keeps heads along the way, so that the acceptance can be drawn against wall time.
#
#   scripts/bench/peers/eagle_train.sh MODE OUT
#     MODE  eagle3            EAGLE-3, eagle-train's default batching (length-grouped, buckets of 128 tokens)
#           eagle3-peerbatch  EAGLE-3 batched as SpecForge does: random order, each batch padded to its longest row
#                             (--group_by_length=false --bucket_granularity 1)
#           eagle3-cpu        EAGLE-3 with eagle-train's CPU recipe: buckets of 16 tokens (--bucket_granularity 16:
#                             no CUDA graphs to bound, so pad less; padding efficiency 0.96 instead of 0.73 here),
#                             the head under bf16 autocast (--bf16; weights and optimizer fp32) and the frozen
#                             target's forward in bf16 (--target_dtype bfloat16) on the CPU's bf16 matmuls (AVX-512
#                             BF16: 2.2x the fp32 rate); the peers run fp32 here, as they do on a CPU
#           eagle3-offline    EAGLE-3 from speculators' stored hidden states (RT_FEATURES, the folder
#                             speculators-eagle3 trains from; --features_path), as speculators trains: no target
#                             forward in the step
#           dflash            a DFlash block draft (--draft dflash, its defaults: block 16, SpecForge's target layers)
#     OUT   the run folder (created; must not hold a finished run)
#
# Environment (set by real_target.sh): RT_BIN (eagle-train), RT_MODEL (target folder), RT_DATA (training JSONL),
# RT_FEATURES (eagle3-offline: a speculators data folder), RT_T0 (the launch time, seconds since the epoch, from `date +%s.%N`), BUDGET_S, SAVES, RT_THREADS, RT_SEQ_LEN,
# RT_ET_SAVE_STEPS (checkpoint every this many steps, default 25, and 4 for dflash, whose SmolLM2 step takes ~20 s;
# the head of the last checkpoint before each mark k * BUDGET_S / SAVES is kept), RT_BATCH (2), RT_LR (1e-3), RT_DRAFT_VOCAB (8192), RT_TTT (7), RT_DFLASH_ANCHORS
# (DFlash anchors per row; empty: eagle-train's default, 512, speculators' too).
#
# eagle-train has no wall-clock limit of its own: the watcher below sends one SIGTERM at BUDGET_S (after RT_T0), and
# eagle-train then saves the last completed step and exits 130 (not `timeout`: it signals the process group as well,
# and a second SIGTERM makes eagle-train exit at once without saving). A watcher copies the head (config.json, model.safetensors,
# trainer_state.json) of each complete checkpoint into OUT/heads/step-N, keeping the newest per interval, and
# OUT/saves.jsonl gets one line per kept head: {"dir", "wall_s", "step", "real_tokens"} (wall_s: when the checkpoint
# was complete, after RT_T0).
set -euo pipefail
MODE="$1"
OUT="$2"
: "${RT_BIN:?}" "${RT_MODEL:?}" "${RT_DATA:?}" "${RT_T0:?}"
BUDGET_S="${BUDGET_S:-1200}"
SAVES="${SAVES:-6}"
THREADS="${RT_THREADS:-2}"
SEQ_LEN="${RT_SEQ_LEN:-1024}"
SAVE_STEPS="${RT_ET_SAVE_STEPS:-$([ "$MODE" = dflash ] && echo 4 || echo 25)}"
BATCH="${RT_BATCH:-2}"
LR="${RT_LR:-1e-3}"
DRAFT_VOCAB="${RT_DRAFT_VOCAB:-8192}"
TTT="${RT_TTT:-7}"
case "$MODE" in
  eagle3) EXTRA=(--ttt_steps "$TTT" --draft_vocab_size "$DRAFT_VOCAB") ;;
  eagle3-peerbatch) EXTRA=(--ttt_steps "$TTT" --draft_vocab_size "$DRAFT_VOCAB" --group_by_length=false
    --bucket_granularity 1) ;;
  eagle3-cpu) EXTRA=(--ttt_steps "$TTT" --draft_vocab_size "$DRAFT_VOCAB" --bucket_granularity 16 --bf16
    --target_dtype bfloat16) ;;
  eagle3-offline) EXTRA=(--ttt_steps "$TTT" --draft_vocab_size "$DRAFT_VOCAB" --features_path "${RT_FEATURES:?}") ;;
  dflash) EXTRA=(--draft dflash ${RT_DFLASH_ANCHORS:+--dflash_num_anchors "$RT_DFLASH_ANCHORS"}) ;;
  *) echo "unknown mode $MODE (eagle3, eagle3-peerbatch, eagle3-cpu, eagle3-offline, dflash)" >&2; exit 2 ;;
esac
mkdir -p "$OUT/heads"
: >"$OUT/saves.jsonl"

# keep the head of each new complete checkpoint; per interval [k-1, k) * BUDGET_S / SAVES only the newest
watch_checkpoints() {
  local seen="" last_interval=-1 last_dir="" stopped=0
  while :; do
    local ended=0
    [ -f "$OUT/.train-ended" ] && ended=1  # a scan that starts after the end sees the last checkpoint
    for ck in $(ls -d "$OUT/run"/checkpoint-[0-9]* 2>/dev/null | sort -t- -k2 -n); do
      [ -f "$ck/COMPLETE" ] || continue
      local step="${ck##*-}"
      case " $seen " in *" $step "*) continue ;; esac
      seen="$seen $step"
      local dst="$OUT/heads/step-$step"
      mkdir -p "$dst.tmp"
      cp "$ck/config.json" "$ck/model.safetensors" "$ck/trainer_state.json" "$dst.tmp/" 2>/dev/null || {
        rm -rf "$dst.tmp"; continue; }
      mv "$dst.tmp" "$dst"
      local wall interval
      wall=$(python3 -c "import os,sys; print(round(os.path.getmtime(sys.argv[1]) - float(sys.argv[2]), 3))" \
        "$ck/COMPLETE" "$RT_T0")
      interval=$(python3 -c "import math,sys; print(min(int(sys.argv[3]), math.floor(float(sys.argv[1]) * int(sys.argv[3]) / float(sys.argv[2]))))" \
        "$wall" "$BUDGET_S" "$SAVES")
      if [ "$interval" = "$last_interval" ] && [ -n "$last_dir" ]; then
        rm -rf "$last_dir"
      fi
      last_interval=$interval
      last_dir=$dst
      echo "$step $wall" >>"$OUT/heads/ledger.txt"
    done
    [ "$ended" = 1 ] && break
    if [ "$stopped" = 0 ] && python3 -c "import sys,time; sys.exit(time.time() - float(sys.argv[2]) < float(sys.argv[1]))" \
      "$BUDGET_S" "$RT_T0"; then
      kill -TERM "$TRAIN_PID" 2>/dev/null || true  # one SIGTERM: eagle-train saves the last completed step, exits 130
      stopped=1
    fi
    sleep 0.5
  done
}
rm -f "$OUT/.train-ended"
"$RT_BIN" train --model_name_or_path "$RT_MODEL" --data_path "$RT_DATA" \
  --output_dir "$OUT/run" --overwrite_output_dir --device cpu --num_threads "$THREADS" \
  --training_seq_len "$SEQ_LEN" --per_device_train_batch_size "$BATCH" --learning_rate "$LR" \
  --lr_scheduler_type constant --warmup_steps 0 --num_train_epochs 100 --save_steps "$SAVE_STEPS" \
  --save_total_limit 3 --eval_num_prompts 0 --eval_steps 0 --validation_fraction 0 --logging_steps 50 \
  "${EXTRA[@]}" >"$OUT/train.log" 2>&1 &
TRAIN_PID=$!
watch_checkpoints &
WATCHER=$!
rc=0
wait "$TRAIN_PID" || rc=$?
touch "$OUT/.train-ended"
wait "$WATCHER"
# 130: stopped by the SIGTERM at the budget, after saving (what is expected); 0: it ran out of epochs first
if [ "$rc" != 0 ] && [ "$rc" != 130 ]; then
  echo "eagle-train train failed (exit $rc); see $OUT/train.log" >&2
  tail -5 "$OUT/train.log" >&2
  exit "$rc"
fi
python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
walls = dict(line.split() for line in open(os.path.join(out, "heads", "ledger.txt")))
with open(os.path.join(out, "saves.jsonl"), "w") as f:
    for name in sorted(os.listdir(os.path.join(out, "heads")), key=lambda n: int(n.split("-")[-1]) if n.startswith("step-") else -1):
        if not name.startswith("step-"):
            continue
        d = os.path.join(out, "heads", name)
        st = json.load(open(os.path.join(d, "trainer_state.json")))
        step = name.split("-")[1]
        f.write(json.dumps({"dir": d, "wall_s": float(walls[step]), "step": st["step"],
                            "real_tokens": st.get("real_tokens")}) + "\n")
EOF
cat "$OUT/saves.jsonl"
