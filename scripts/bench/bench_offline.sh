#!/usr/bin/env bash
# Offline features on the demo target (scripts/make_demo_target.py: 4 layers, hidden 256, vocab
# 4096) and its Alpaca data: (1) dump-features throughput (target tokens/s) and bytes per token on
# disk, bfloat16 and float32; (2) training tokens/s with the target in the step (online) against
# training from the bfloat16 dump (offline), same options, same batches, no evaluation or checkpoint
# inside the loop (summary.json tokens_per_s counts real tokens of training steps only).
#
# Knobs (environment): BENCH_STEPS (48), BENCH_ROWS (8), BENCH_THREADS (2), BENCH_OUT
# (/tmp/eagle-bench-offline), BENCH_DEVICE (cpu).
set -euo pipefail
# shellcheck source=scripts/bench/demo_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_env.sh"
OUT="${BENCH_OUT:-/tmp/eagle-bench-offline}"
STEPS="${BENCH_STEPS:-48}"
ROWS="${BENCH_ROWS:-8}"
THREADS="${BENCH_THREADS:-2}"
DEVICE="${BENCH_DEVICE:-cpu}"

rm -rf "$OUT"
mkdir -p "$OUT"
COMMON=(--config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl"
        --device "$DEVICE" --num_threads "$THREADS" --per_device_train_batch_size "$ROWS" --seed 42)
echo "host: $(nproc) cores; $(uptime)"

# ---- (1) dump ----
for dtype in bfloat16 float32; do
  t0=$(date +%s.%N)
  "$BIN" dump-features "${COMMON[@]}" --features_dtype "$dtype" --output "$OUT/features-$dtype" \
    >"$OUT/dump-$dtype.log" 2>&1
  t1=$(date +%s.%N)
  "$PY" - "$OUT/features-$dtype" "$OUT/dump-$dtype.log" "$t0" "$t1" "$dtype" <<'EOF'
import json, pathlib, re, sys
folder, log, t0, t1, dtype = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]).read_text(), *sys.argv[3:]
m = json.loads((folder / "manifest.json").read_text())
tokens = sum(s["tokens"] for s in m["shards"])
size = lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
shards, ends = size(folder / "features"), size(folder / "target")
data = sum((folder / f).stat().st_size for f in ("train.bin", "validation.bin") if (folder / f).exists())
rate = re.findall(r"\(([0-9]+) tokens/s\)", log)[-1]
print(f"dump {dtype}: {tokens} tokens, {float(t1) - float(t0):.1f} s wall (process start and data load included), "
      f"target forward + write {rate} tokens/s; shards {shards / tokens:.1f} B/token "
      f"(manifest {m['layout']['bytes_per_token']}), data files {data / tokens:.2f} B/token, target ends {ends} B")
EOF
done

# ---- (2) training, online vs offline ----
train() {
  local name="$1"
  shift
  "$BIN" train "${COMMON[@]}" --output_dir "$OUT/$name" --max_steps "$STEPS" --warmup_steps 2 --logging_steps 8 \
    --eval_steps 0 --eval_num_prompts 0 --save_steps 0 "$@" >"$OUT/$name.log" 2>&1
  "$PY" - "$OUT/$name/summary.json" "$name" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: {s['tokens_per_s']:.0f} real tokens/s over {s['steps']} steps, final loss {s['final_loss']:.4f}")
EOF
}
train online
train offline-bf16 --features_path "$OUT/features-bfloat16"
train offline-fp32 --features_path "$OUT/features-float32"
echo "host after: $(uptime)"
