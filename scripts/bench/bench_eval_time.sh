#!/usr/bin/env bash
# Wall time of `eagle-train eval` at its default settings (16 prompts, 64 new tokens, 16 at a time, the
# AR at every depth 1..the head's TTT steps) on one head, for two builds, interleaved repeats (docs/
# benchmarks.md, "Evaluation: one prefill per prompt"): the before and after of a change to the
# evaluation, whose eval --json must be the same. Also times the head run one prompt at a time
# (eval_batch_size 1) and with a tree and temperature 1 (the one-by-one modes).
# Usage: bench_eval_time.sh OLD_BIN NEW_BIN   (the head: BENCH_HEAD, else one trained with
# configs/alpaca-demo.json on the demo target; BENCH_REPEATS 3, BENCH_THREADS 2, BENCH_OUT)
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OLD="$1"
NEW="$2"
OUT="${BENCH_OUT:-/tmp/eagle-bench-eval-time}"
REPEATS="${BENCH_REPEATS:-3}"
THREADS="${BENCH_THREADS:-2}"
mkdir -p "$OUT"
rm -f "$OUT/times.txt"
echo "host: $(nproc) cores; $(uptime)"
demo_head "$OUT" "$THREADS"
COMMON=(--checkpoint "$HEAD" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl"
  --training_seq_len 512 --validation_fraction 0.02 --num_threads "$THREADS" --device cpu --json)
declare -A MODES=([default]="" [one-by-one]="--eval_batch_size 1" [tree+temp]="--eval_batch_size 1 --eval_tree_topk 4 --eval_tree_steps 3 --eval_tree_draft_tokens 8 --eval_temperature 1")
for mode in default one-by-one tree+temp; do
  for ((r = 1; r <= REPEATS; r++)); do
    for which in old new; do
      BIN="$OLD"
      [[ $which == new ]] && BIN="$NEW"
      start=$(date +%s.%N)
      # shellcheck disable=SC2086
      "$BIN" eval "${COMMON[@]}" ${MODES[$mode]} >"$OUT/$mode-$which-$r.json" 2>"$OUT/$mode-$which-$r.log"
      end=$(date +%s.%N)
      echo "$mode $which $r $(echo "$end - $start" | bc)" >>"$OUT/times.txt"
    done
  done
done
"$PY" - "$OUT" <<'PYEOF'
import json, re, statistics, sys
out = sys.argv[1]
rows = [l.split() for l in open(f"{out}/times.txt")]
def load(p):
    t = open(p).read()
    return {k: v for k, v in json.loads(t[t.index("{"):]).items() if k != "seconds"}
def decoding(path):  # the log's "AR over ... in S s": the depth passes alone
    for line in open(path):
        if "AR over" in line:
            return float(re.search(r" in ([0-9.]+) s", line).group(1))
    return float("nan")
print("| eval | wall before (s) | wall after (s) | after / before | depth passes before (s) | after (s) | eval --json the same |")
print("|---|---|---|---|---|---|---|")
for mode in ("default", "one-by-one", "tree+temp"):
    t = {w: [float(r[3]) for r in rows if r[0] == mode and r[1] == w] for w in ("old", "new")}
    if not t["old"]:
        continue
    runs = sorted({r[2] for r in rows if r[0] == mode})
    same = all(load(f"{out}/{mode}-old-{r}.json") == load(f"{out}/{mode}-new-{r}.json") for r in runs)
    a, b = statistics.median(t["old"]), statistics.median(t["new"])
    da = statistics.median(decoding(f"{out}/{mode}-old-{r}.log") for r in runs)
    db = statistics.median(decoding(f"{out}/{mode}-new-{r}.log") for r in runs)
    print(f"| {mode} | {a:.2f} | {b:.2f} | {b / a:.2f} | {da:.2f} | {db:.2f} | {'yes' if same else 'NO'} |")
PYEOF
rm -f "$OUT/times.txt"
echo "host after: $(uptime)"
