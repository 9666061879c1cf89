#!/usr/bin/env bash
# The EAGLE-3 variants of issue 24 on the demo target, one after another with the same data, steps
# and seed (configs/alpaca-demo.json: ttt_steps 3, eval_draft_len 3, 16 held-out prompts, greedy):
# EAGLE-3 (today's default), EAGLE 3.1 (--fc_norm --norm_output), 2 layers, the Qwen3-style layer,
# P-EAGLE (and layers4: 4 layers, for the memory growth). Per variant: the final AR (the run's own
# evaluation at its last step, K = 3 = ttt_steps),
# trainable parameters (the trainer's log), training real tokens/s (summary.json: the loop only) and
# peak memory (/usr/bin/time -v: maximum resident set size of the whole process, target included).
# Prints a Markdown table.
#
# Knobs (environment): BENCH_STEPS (200; the demo trains 600), BENCH_THREADS (2), BENCH_OUT
# (/tmp/eagle-bench-variants), BENCH_VARIANTS (names below, space-separated; default all).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-variants}"
STEPS="${BENCH_STEPS:-200}"
THREADS="${BENCH_THREADS:-2}"
VARIANTS="${BENCH_VARIANTS:-eagle3 eagle31 layers2 qwen3 peagle}"
mkdir -p "$OUT"
flags() {
  case "$1" in
    eagle3) echo "" ;;
    eagle31) echo "--fc_norm --norm_output" ;;
    layers2) echo "--draft_num_layers 2" ;;
    layers4) echo "--draft_num_layers 4" ;;
    qwen3) echo "--draft_layer qwen3" ;;
    peagle) echo "--parallel_drafting" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
echo "host: $(nproc) cores; $(uptime)"
for v in $VARIANTS; do
  # shellcheck disable=SC2046
  /usr/bin/time -v -o "$OUT/$v.time" "$BIN" train --config "$ROOT/configs/alpaca-demo.json" \
    --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl" --output_dir "$OUT/$v" \
    --overwrite_output_dir --device cpu --num_threads "$THREADS" --max_steps "$STEPS" \
    --eval_steps "$STEPS" --save_steps "$STEPS" $(flags "$v") > "$OUT/$v.log" 2>&1
  echo "$v done: $(date +%T)"
done
"$PY" - "$OUT" $VARIANTS <<'PYEOF'
import json, re, sys, pathlib
out = pathlib.Path(sys.argv[1])
print("| variant | AR (K = 3 = ttt_steps) | parameters | real tokens/s | peak RSS (MiB) | final train loss |")
print("|---|---|---|---|---|---|")
for v in sys.argv[2:]:
    log = (out / f"{v}.log").read_text()
    params = re.search(r"TTT step\(s\), (\d+) parameters", log).group(1)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", (out / f"{v}.time").read_text()).group(1))
    summary = json.loads((out / v / "summary.json").read_text())
    ar = loss = None
    for line in (out / v / "metrics.jsonl").read_text().splitlines():
        j = json.loads(line)
        ar = j.get("ar", ar)
        loss = j.get("loss", loss)
    print(f"| {v} | {ar:.3f} | {int(params):,} | {summary['tokens_per_s']:.0f} | {rss / 1024:.0f} | {loss:.4f} |")
PYEOF
