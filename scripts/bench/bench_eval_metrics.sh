#!/usr/bin/env bash
# Acceptance metrics of one demo head (docs/benchmarks.md, "Acceptance: chains, trees, temperature"):
# trains a head with configs/alpaca-demo.json (or reuses BENCH_HEAD, a checkpoint folder), then
# `eagle-train eval` on the same held-out prompts: the greedy chain and SGLang trees (steps, topk,
# draft_tokens) = (3,1,4), (5,4,8), (7,8,64); AR at temperature 0, 0.7 and 1.0 with greedy and sampled
# drafts, with alpha's chain estimate. Prints a Markdown table per part and each eval's wall time.
# `bench_eval_metrics.sh batch` instead times the greedy chain evaluation at eval_batch_size 1 (one
# prompt at a time), 4, 16 and 64 on the same prompts (the AR must not change).
# Knobs (environment): BENCH_HEAD, BENCH_EVAL_PROMPTS (32), BENCH_MAX_NEW (64), BENCH_THREADS (2),
# BENCH_OUT (/tmp/eagle-bench-eval-metrics).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-eval-metrics}"
PROMPTS="${BENCH_EVAL_PROMPTS:-32}"
MAX_NEW="${BENCH_MAX_NEW:-64}"
THREADS="${BENCH_THREADS:-2}"
mkdir -p "$OUT"
echo "host: $(nproc) cores; $(uptime)"
demo_head "$OUT" "$THREADS"
COMMON=(--checkpoint "$HEAD" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl"
  --training_seq_len 512 --validation_fraction 0.02 --eval_num_prompts "$PROMPTS"
  --eval_max_new_tokens "$MAX_NEW" --num_threads "$THREADS" --device cpu --json)
run_eval() {  # name, extra args...: prints the JSON's line of interest and the wall time
  local name="$1"
  shift
  local start end
  start=$(date +%s.%N)
  "$BIN" eval "${COMMON[@]}" "$@" >"$OUT/$name.json" 2>"$OUT/$name.log"
  end=$(date +%s.%N)
  "$PY" - "$OUT/$name.json" "$name" "$(echo "$end - $start" | bc)" <<'PYEOF'
import json, sys
text = open(sys.argv[1]).read()
j = json.loads(text[text.index("{\n"):])
f = lambda k: "n/a" if j.get(k) is None else f"{j[k]:.3f}"
alpha = " ".join(f"{a:.3f}" for a in j.get("alpha", []))
ci = "" if j.get("temp_ar_ci95") is None else f" ± {j['temp_ar_ci95']:.3f}"
cells = [sys.argv[2], f("ar"), f("tree_ar"), f("temp_ar") + ci, alpha, f("alpha_ar"), f"{float(sys.argv[3]):.1f}"]
print("| " + " | ".join(cells) + " |")
PYEOF
}
if [ "${1:-}" = batch ]; then
  echo "| eval_batch_size | chain AR | rounds | tokens | AR decoding s | eval wall s |"
  echo "|---|---|---|---|---|---|"
  for rows in 1 4 16 64; do
    start=$(date +%s.%N)
    "$BIN" eval "${COMMON[@]}" --eval_draft_len 3 --eval_batch_size "$rows" >"$OUT/batch-$rows.json" \
      2>"$OUT/batch-$rows.log"
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    # "AR over N prompts (B at a time): R rounds, G tokens in S s"
    read -r rounds tokens seconds < <(sed -n 's/.*AR over .*: \([0-9]*\) rounds, \([0-9]*\) tokens in \([0-9.]*\) s.*/\1 \2 \3/p' \
      "$OUT/batch-$rows.log")
    ar=$("$PY" -c 'import json,sys; t=open(sys.argv[1]).read(); print("%.3f" % json.loads(t[t.index("{\n"):])["ar"])' \
      "$OUT/batch-$rows.json")
    printf '| %s | %s | %s | %s | %s | %.1f |\n' "$rows" "$ar" "$rounds" "$tokens" "$seconds" "$wall"
  done
  exit 0
fi
echo "| setting | chain AR | tree AR | AR at temperature ± 95% | alpha_k | alpha chain | wall s |"
echo "|---|---|---|---|---|---|---|"
run_eval chain-3 --eval_draft_len 3
run_eval tree-3-1-4 --eval_draft_len 3 --eval_tree_steps 3 --eval_tree_topk 1 --eval_tree_draft_tokens 4
run_eval tree-5-4-8 --eval_draft_len 3 --eval_tree_steps 5 --eval_tree_topk 4 --eval_tree_draft_tokens 8
run_eval tree-7-8-64 --eval_draft_len 3 --eval_tree_steps 7 --eval_tree_topk 8 --eval_tree_draft_tokens 64
for t in 0.000001 0.7 1.0; do
  for d in greedy sample; do
    run_eval "temp-$t-$d" --eval_draft_len 3 --eval_temperature "$t" --eval_draft_sampling "$d" --seed 42
  done
done
