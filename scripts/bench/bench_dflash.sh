#!/usr/bin/env bash
# DFlash block drafts against EAGLE-3 on the demo target (issue 40; docs/benchmarks.md, "DFlash drafts").
# (a) ar: an EAGLE-3 head (configs/alpaca-demo.json, BENCH_STEPS steps) and DFlash drafts at block 8 and
#     16 on the same data, split and seed (the same config less EAGLE's keys, + --draft dflash), each
#     DFlash run given the EAGLE-3 run's training-loop seconds (or BENCH_SECONDS for every draft): a
#     pilot of BENCH_PILOT_STEPS steps measures s/step and sets max_steps (train has no time limit).
#     The DFlash drafts read the features EAGLE-3 reads (target layers 0,1,2 = aux ids 1,2,3) with
#     BENCH_DFLASH_LAYERS layers (EAGLE-3 has 1), decay gamma 4 at block 8 and 7 at 16 (ModelOpt's).
#     Then `eagle-train eval --json` of each on the same held-out prompts (greedy chains: EAGLE-3 at
#     K = BENCH_EAGLE_DRAFT_LEN, DFlash at K = block - 1; ar_by_depth is the AR drafting k = 1..K).
# (b) tput: training real tokens/s and peak memory by block size and anchor count (--dflash_num_anchors),
#     DFlash and DSpark, with an EAGLE-3 row, on packed rows (padding_free: every row holds training_seq_len 512 tokens, so
#     each row computes exactly that many anchor blocks; anchors beyond its trainable positions are
#     padding that counts nothing), BENCH_TPUT_ROWS rows, BENCH_TPUT_STEPS steps.
# (c) seq: peak memory and real tokens/s by row length T (BENCH_SEQ_LENS, packed rows of T tokens) at a
#     fixed block (BENCH_SEQ_BLOCK) and anchor count (BENCH_SEQ_ANCHORS), BENCH_TPUT_ROWS rows,
#     BENCH_TPUT_STEPS steps: the block-sparse attention's memory against T (a dense mask would grow as
#     T squared).
# Prints a Markdown table per part (scripts/bench/dflash_table.py).
#
# Knobs (environment): BENCH_PARTS ("ar tput"; "seq" on request), BENCH_SEQ_LENS ("256 512 1024 2048"),
# BENCH_SEQ_BLOCK (16), BENCH_SEQ_ANCHORS (128), BENCH_STEPS (200; the demo trains 600), BENCH_SECONDS
# (unset: EAGLE-3's loop time), BENCH_PILOT_STEPS (12), BENCH_DFLASH_LAYERS (1), BENCH_EAGLE_DRAFT_LEN
# (15), BENCH_EVAL_PROMPTS (32), BENCH_MAX_NEW (64), BENCH_BLOCKS ("8 16"), BENCH_ANCHORS ("64 256 512"),
# BENCH_TPUT_STEPS (16), BENCH_TPUT_ROWS (4), BENCH_THREADS (2), BENCH_DEVICE (cpu),
# BENCH_OUT (/tmp/eagle-bench-dflash), BENCH_DSPARK (1: a DSpark draft beside each DFlash block in (a) and
# each DFlash row in (b)), BENCH_DSPARK_RANK (256), BENCH_DFLASH2 (0; 1: a DFlash2 draft beside each DFlash
# block in (a) and each DFlash row in (b)).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-dflash}"
PARTS="${BENCH_PARTS:-ar tput}"
STEPS="${BENCH_STEPS:-200}"
PILOT_STEPS="${BENCH_PILOT_STEPS:-12}"
LAYERS="${BENCH_DFLASH_LAYERS:-1}"
EAGLE_K="${BENCH_EAGLE_DRAFT_LEN:-15}"
PROMPTS="${BENCH_EVAL_PROMPTS:-32}"
MAX_NEW="${BENCH_MAX_NEW:-64}"
BLOCKS="${BENCH_BLOCKS:-8 16}"
ANCHORS="${BENCH_ANCHORS:-64 256 512}"
TPUT_STEPS="${BENCH_TPUT_STEPS:-16}"
TPUT_ROWS="${BENCH_TPUT_ROWS:-4}"
THREADS="${BENCH_THREADS:-2}"
DEVICE="${BENCH_DEVICE:-cpu}"
TABLE="$ROOT/scripts/bench/dflash_table.py"
mkdir -p "$OUT"
EAGLE_CONFIG="$ROOT/configs/alpaca-demo.json"
DFLASH_CONFIG="$OUT/dflash-demo.json"  # the demo config less what --draft dflash refuses
"$PY" - "$EAGLE_CONFIG" "$DFLASH_CONFIG" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
for k in ("ttt_steps", "ttt_loss_decay", "draft_vocab_size", "aux_hidden_state_layer_ids", "eval_draft_len"):
    c.pop(k, None)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PYEOF

dflash() {  # BLOCK: the DFlash flags of a block size
  local gamma=7
  if [ "$1" -le 8 ]; then gamma=4; fi
  echo "--draft dflash --dflash_block_size $1 --dflash_decay_gamma $gamma --draft_num_layers $LAYERS" \
    "--dflash_target_layers 0,1,2"
}
dflash2() {  # BLOCK: the DFlash2 flags of a block size (speculators' recipe: 2 taps, groups of 16, rank 256, top 16)
  echo "--draft dflash2 --dflash_block_size $1 --dflash_decay_gamma 4 --draft_num_layers $LAYERS" \
    "--dflash_target_layers 0,1,2"
}
dspark() {  # BLOCK: the DSpark flags of a block size (speculators' recipe: gamma 4, Markov rank 256, confidence on)
  echo "--draft dspark --dflash_block_size $1 --dflash_decay_gamma 4 --draft_num_layers $LAYERS" \
    "--dflash_target_layers 0,1,2 --dspark_markov_rank ${BENCH_DSPARK_RANK:-256}"
}
# train NAME CONFIG STEPS FLAGS...: one run into $OUT/NAME, log $OUT/NAME.log; no evaluation inside
# the loop (the held-out loss once at the end), one checkpoint at the end.
train() {
  local name="$1" config="$2" steps="$3" t0
  shift 3
  t0=$(date +%s)
  if ! "$BIN" train --config "$config" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl" \
      --output_dir "$OUT/$name" --overwrite_output_dir --device "$DEVICE" --num_threads "$THREADS" \
      --max_steps "$steps" --eval_steps 0 --eval_num_prompts 0 --save_steps 0 "$@" >"$OUT/$name.log" 2>&1; then
    echo "$name FAILED (see $OUT/$name.log)" >&2
    exit 1
  fi
  echo "  $name: $steps steps, $(($(date +%s) - t0)) s wall; load $(cut -d' ' -f1-3 /proc/loadavg)"
}
# budget_steps NAME CONFIG FLAGS...: max_steps that fill $BUDGET s at a pilot run's s/step
budget_steps() {
  local name="$1" config="$2"
  shift 2
  train "$name-pilot" "$config" "$PILOT_STEPS" --warmup_steps 2 --logging_steps 4 "$@" >&2
  "$PY" "$TABLE" steps "$OUT/$name-pilot" "$BUDGET"
}
evaluate() {  # NAME FLAGS...: eval --json of NAME's last checkpoint into $OUT/NAME.eval.json
  local name="$1" ckpt
  shift
  ckpt="$(ls -d "$OUT/$name"/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)"
  "$BIN" eval --checkpoint "$ckpt" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl" \
    --training_seq_len 512 --validation_fraction 0.02 --eval_num_prompts "$PROMPTS" \
    --eval_max_new_tokens "$MAX_NEW" --num_threads "$THREADS" --device "$DEVICE" --json "$@" \
    >"$OUT/$name.eval.json" 2>"$OUT/$name.eval.log"
}

echo "host: $(nproc) cores; $(uptime)"
if [[ " $PARTS " == *" ar "* ]]; then
  echo "(a) AR at equal training time"
  if [ -n "${BENCH_SECONDS:-}" ]; then
    BUDGET="$BENCH_SECONDS"
    train eagle3 "$EAGLE_CONFIG" "$(budget_steps eagle3 "$EAGLE_CONFIG")"
  else
    train eagle3 "$EAGLE_CONFIG" "$STEPS"
    BUDGET=$("$PY" "$TABLE" loop "$OUT/eagle3")
  fi
  echo "  budget: $BUDGET s of training loop a draft"
  ROWS=("EAGLE-3=$OUT/eagle3=$OUT/eagle3.eval.json")
  evaluate eagle3 --eval_draft_len "$EAGLE_K"
  for b in $BLOCKS; do
    # shellcheck disable=SC2046
    steps=$(budget_steps "dflash$b" "$DFLASH_CONFIG" $(dflash "$b"))
    # shellcheck disable=SC2046
    train "dflash$b" "$DFLASH_CONFIG" "$steps" $(dflash "$b")
    evaluate "dflash$b"
    ROWS+=("DFlash block $b ($LAYERS layer(s))=$OUT/dflash$b=$OUT/dflash$b.eval.json")
    if [ "${BENCH_DSPARK:-1}" = 1 ]; then  # DSpark on the same backbone: all b tokens of its block drafted
      # shellcheck disable=SC2046
      steps=$(budget_steps "dspark$b" "$DFLASH_CONFIG" $(dspark "$b"))
      # shellcheck disable=SC2046
      train "dspark$b" "$DFLASH_CONFIG" "$steps" $(dspark "$b")
      evaluate "dspark$b"
      ROWS+=("DSpark block $b ($LAYERS layer(s))=$OUT/dspark$b=$OUT/dspark$b.eval.json")
    fi
    if [ "${BENCH_DFLASH2:-0}" = 1 ]; then  # DFlash2 on the same backbone and 1 + N block
      # shellcheck disable=SC2046
      steps=$(budget_steps "dflash2-$b" "$DFLASH_CONFIG" $(dflash2 "$b"))
      # shellcheck disable=SC2046
      train "dflash2-$b" "$DFLASH_CONFIG" "$steps" $(dflash2 "$b")
      evaluate "dflash2-$b"
      ROWS+=("DFlash2 block $b ($LAYERS layer(s))=$OUT/dflash2-$b=$OUT/dflash2-$b.eval.json")
    fi
  done
  echo
  "$PY" "$TABLE" ar "${ROWS[@]}"
  echo
fi
if [[ " $PARTS " == *" tput "* ]]; then
  echo "(b) training throughput and memory: packed rows of 512, $TPUT_ROWS rows, $TPUT_STEPS steps"
  PACKED=(--padding_free --bucket_granularity 0 --per_device_train_batch_size "$TPUT_ROWS" --warmup_steps 2
    --logging_steps 4)
  train tput-eagle3 "$EAGLE_CONFIG" "$TPUT_STEPS" "${PACKED[@]}"
  ROWS=("EAGLE-3 (ttt_steps 3)=$OUT/tput-eagle3")
  for b in $BLOCKS; do
    for a in $ANCHORS; do
      # shellcheck disable=SC2046
      train "tput-b$b-a$a" "$DFLASH_CONFIG" "$TPUT_STEPS" "${PACKED[@]}" $(dflash "$b") --dflash_num_anchors "$a"
      ROWS+=("DFlash block $b, $a anchors=$OUT/tput-b$b-a$a")
      if [ "${BENCH_DSPARK:-1}" = 1 ]; then
        # shellcheck disable=SC2046
        train "tput-dspark-b$b-a$a" "$DFLASH_CONFIG" "$TPUT_STEPS" "${PACKED[@]}" $(dspark "$b") \
          --dflash_num_anchors "$a"
        ROWS+=("DSpark block $b, $a anchors=$OUT/tput-dspark-b$b-a$a")
      fi
      if [ "${BENCH_DFLASH2:-0}" = 1 ]; then
        # shellcheck disable=SC2046
        train "tput-dflash2-b$b-a$a" "$DFLASH_CONFIG" "$TPUT_STEPS" "${PACKED[@]}" $(dflash2 "$b") \
          --dflash_num_anchors "$a"
        ROWS+=("DFlash2 block $b, $a anchors=$OUT/tput-dflash2-b$b-a$a")
      fi
    done
  done
  echo
  "$PY" "$TABLE" tput "${ROWS[@]}"
fi
if [[ " $PARTS " == *" seq "* ]]; then
  SEQ_BLOCK="${BENCH_SEQ_BLOCK:-16}"
  SEQ_ANCHORS="${BENCH_SEQ_ANCHORS:-128}"
  echo "(c) memory by row length: block $SEQ_BLOCK, $SEQ_ANCHORS anchors, $TPUT_ROWS packed rows, $TPUT_STEPS steps"
  ROWS=()
  for t in ${BENCH_SEQ_LENS:-256 512 1024 2048}; do
    # shellcheck disable=SC2046
    train "seq-t$t" "$DFLASH_CONFIG" "$TPUT_STEPS" --padding_free --bucket_granularity 0 \
      --per_device_train_batch_size "$TPUT_ROWS" --warmup_steps 2 --logging_steps 4 --training_seq_len "$t" \
      $(dflash "$SEQ_BLOCK") --dflash_num_anchors "$SEQ_ANCHORS"
    ROWS+=("T $t=$OUT/seq-t$t")
  done
  echo
  "$PY" "$TABLE" tput "${ROWS[@]}"
fi
echo "host after: $(uptime)"
