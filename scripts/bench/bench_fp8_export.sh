#!/usr/bin/env bash
# The acceptance an FP8 export loses (docs/benchmarks.md, "FP8 exports"): one trained head (BENCH_HEAD,
# a checkpoint folder; default: a demo head trained with configs/alpaca-demo.json), exported
# unquantized and with --quantize fp8 under each scale choice (amax, mse; fc kept or quantized), then
# `eagle-train eval` of every export on the same held-out prompts: chain AR, its 95% interval where
# printed, the drafts that differ from the unquantized head's, and each export's size on disk.
# Knobs (environment): BENCH_HEAD, BENCH_EVAL_PROMPTS (32), BENCH_MAX_NEW (64), BENCH_THREADS (2),
# BENCH_OUT (/tmp/eagle-bench-fp8).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-fp8}"
PROMPTS="${BENCH_EVAL_PROMPTS:-32}"
MAX_NEW="${BENCH_MAX_NEW:-64}"
THREADS="${BENCH_THREADS:-2}"
mkdir -p "$OUT"
echo "host: $(nproc) cores; $(uptime)"
demo_head "$OUT" "$THREADS"
rm -rf "$OUT"/export-*
"$BIN" export --checkpoint "$HEAD" --output "$OUT/export-none" >/dev/null
"$BIN" export --checkpoint "$HEAD" --quantize fp8 --output "$OUT/export-fp8-amax" >/dev/null
"$BIN" export --checkpoint "$HEAD" --quantize fp8 --quantize_scale mse --output "$OUT/export-fp8-mse" >/dev/null
"$BIN" export --checkpoint "$HEAD" --quantize fp8 --quantize_fc --output "$OUT/export-fp8-amax-fc" >/dev/null
"$BIN" export --checkpoint "$HEAD" --quantize fp8 --quantize_scale mse --quantize_fc \
  --output "$OUT/export-fp8-mse-fc" >/dev/null
echo "| export | chain AR | rounds | size on disk |"
echo "|---|---|---|---|"
for e in none fp8-amax fp8-mse fp8-amax-fc fp8-mse-fc; do
  "$BIN" eval --checkpoint "$OUT/export-$e" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl" \
    --training_seq_len 512 --validation_fraction 0.02 --eval_num_prompts "$PROMPTS" \
    --eval_max_new_tokens "$MAX_NEW" --num_threads "$THREADS" --device cpu --json \
    >"$OUT/$e.json" 2>"$OUT/$e.log"
  "$PY" - "$OUT/$e.json" "$e" "$(du -sh "$OUT/export-$e" | cut -f1)" <<'PYEOF'
import json, sys
j = json.loads(open(sys.argv[1]).read())
ar = j.get("ar")
rounds = j.get("rounds", j.get("ar_rounds", ""))
print(f"| {sys.argv[2]} | {ar:.5f} | {rounds} | {sys.argv[3]} |" if ar is not None else f"| {sys.argv[2]} | n/a | | {sys.argv[3]} |")
PYEOF
done
