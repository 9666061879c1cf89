#!/usr/bin/env bash
# The GPU checks in one command, for a bare GPU machine (python3 with torch, nvcc, cmake, ninja; no
# package registry, no Debian -dev packages): builds (Release) against the bundle of
# scripts/gpu_bundle.sh (.cache/gpu-bundle, carried along) and the machine's Python torch, runs the
# [gpu] tests (the real training step per batch shape: graphed == eager in fp32, one capture per
# shape then replays, no host synchronisation, graph memory near eager's; flash attention; CUDA
# parity, MoE grouped matmuls and sliding-window/sink flash attention in bf16), trains the smoke config
# eagerly and with CUDA graphs (same losses; also on the MXFP4 gpt-oss fixture), trains DFlash, DSpark
# and DFlash2 drafts eagerly and with CUDA graphs, padded and packed (same losses; the graphed runs must capture and
# replay), generates eagerly and with graphed decode steps (same file), and benchmarks the
# training step at Llama-3.1-8B shapes with random weights made on the device (granularity 0 / 128 /
# padding-free, eager / graphed: real tokens/s, peak memory, MFU). Everything goes under $OUT
# (default output/gpu-check); the summary and the table are printed and written to
# $OUT/gpu_report.md. Exits non-zero when a check failed.
#
#   scripts/gpu_check.sh                  on the GPU machine
#   scripts/gpu_check.sh --device cpu     dry run here: the same steps with CPU stand-ins (CPU tests
#                                         of the step for the [gpu] ones, small shapes for the bench)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEVICE=cuda
[[ "${1:-}" = --device ]] && DEVICE="${2:?--device cuda|cpu}"
OUT="${OUT:-$ROOT/output/gpu-check}"
BUNDLE="${EAGLE_GPU_BUNDLE:-$ROOT/.cache/gpu-bundle}"
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build-gpu}"
PY="${EAGLE_PYTHON:-python3}"
JOBS="${EAGLE_BUILD_JOBS:-$(nproc)}"
mkdir -p "$OUT"
START=$(date +%s)
FAILED=()
REPORT="$OUT/gpu_report.md"
phase() { echo "== [$(($(date +%s) - START)) s] $*" | tee -a "$OUT/phases.log"; }
fail() {
  FAILED+=("$1")
  echo "!! FAILED: $1" | tee -a "$OUT/phases.log"
}
finish() {
  {
    echo "# GPU check ($DEVICE), $(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - START)) s"
    echo
    echo '```'
    cat "$OUT/environment.txt" 2>/dev/null
    echo '```'
    echo
    echo "Command: \`scripts/gpu_check.sh --device $DEVICE\` (OUT=$OUT)"
    echo
    if ((${#FAILED[@]})); then printf -- '- FAILED: %s\n' "${FAILED[@]}"; else echo "- every check passed"; fi
    [[ -f "$OUT/summary.txt" ]] && sed 's/^/- /' "$OUT/summary.txt"
    echo
    cat "$OUT/bench.md" 2>/dev/null
  } >"$REPORT"
  echo
  cat "$REPORT"
  exit $((${#FAILED[@]} > 0))
}
rm -f "$OUT/phases.log" "$OUT/summary.txt" "$OUT/bench.md"

phase "environment"
{
  echo "host: $(nproc) cores, $(uname -r), glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -2 | head -1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  cmake --version | head -1
  echo "bundle: $(head -1 "$BUNDLE/MANIFEST" 2>/dev/null)"
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
[[ -f "$BUNDLE/bundle.cmake" ]] ||
  { fail "no bundle at $BUNDLE (run scripts/gpu_bundle.sh where apt works, carry it)"; finish; }
need="$(grep '^glibc' "$BUNDLE/MANIFEST" | cut -d' ' -f2)"
have="$(ldd --version | head -1 | grep -o '[0-9.]*$')"
[[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ]] ||
  { fail "glibc $have is older than the bundle's $need"; finish; }

phase "configure and build (Release, -j$JOBS)"
TORCH_CMAKE="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" ||
  { fail "no torch in $PY (set EAGLE_PYTHON)"; finish; }
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -C "$BUNDLE/bundle.cmake" \
    -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"
  fail "configure"
  finish
fi
if ! cmake --build "$BUILD" -j "$JOBS" --target eagle-train eagle_tests eagle_bench_step >"$OUT/build.log" 2>&1; then
  grep -m 20 -A 5 'error' "$OUT/build.log"
  fail "build"
  finish
fi
"$BUILD/eagle-train" --version | tee -a "$OUT/environment.txt"

if [[ "$DEVICE" = cuda ]]; then
  phase "[gpu] tests (ctest -R gpu)"
  (cd "$BUILD" && ctest -R gpu -V --timeout 300) >"$OUT/gpu_tests.log" 2>&1 || fail "[gpu] tests"
  grep -q 'Skipped' "$OUT/gpu_tests.log" && fail "[gpu] tests skipped: no CUDA device seen"
  echo "[gpu] tests: $(grep -E 'test cases|tests passed|tests failed' "$OUT/gpu_tests.log" | tr '\n' ' ')" \
    >>"$OUT/summary.txt"
else
  # Stand-ins where no GPU is needed: the CPU tests of the same step body and attention kernels.
  phase "CPU stand-ins of the [gpu] tests"
  (cd "$BUILD" && ctest -R gpu) >"$OUT/gpu_tests.log" 2>&1 || fail "ctest -R gpu"
  "$BUILD/eagle_tests" \
    "*reads nothing back*,*whatever its anchors*,*log-sum-exp*,*per document when packed*,*most frequent shapes*" \
    -r compact >"$OUT/gpu_tests_detail.log" 2>&1 || fail "CPU stand-in tests"
  echo "CPU stand-in tests: $(grep -E 'test cases' "$OUT/gpu_tests_detail.log" | tail -1)" >>"$OUT/summary.txt"
fi

phase "smoke training, eager and with CUDA graphs"
common=(--config "$ROOT/configs/smoke.json" --model_name_or_path "$ROOT/tests/fixtures/models/tiny-llama"
  --data_path "$ROOT/tests/fixtures/data/smoke.jsonl" --device "$DEVICE" --num_threads 4 --max_steps 40
  --eval_steps 0 --save_steps 0 --eval_num_prompts 0 --overwrite_output_dir)
for mode in eager graphed packed-eager packed-graphed; do
  graphs=8
  [[ "$mode" = *eager ]] && graphs=0
  extra=()
  [[ "$mode" = packed-* ]] && extra=(--padding_free)
  "$BUILD/eagle-train" train "${common[@]}" "${extra[@]}" --max_cuda_graphs "$graphs" --output_dir "$OUT/$mode" \
    >"$OUT/$mode.log" 2>&1 || fail "smoke training ($mode)"
done
# A mixture-of-experts target with sinks, sliding windows and YaRN in bf16: grouped matmuls and
# flash windows, eager and graphed (TargetModel::graph_safe on sm90).
for mode in moe-eager moe-graphed; do
  graphs=8
  [[ "$mode" = *eager ]] && graphs=0
  "$BUILD/eagle-train" train "${common[@]}" --model_name_or_path "$ROOT/tests/fixtures/models/tiny-gpt-oss-mxfp4" \
    --target_dtype bfloat16 --max_cuda_graphs "$graphs" --output_dir "$OUT/$mode" \
    >"$OUT/$mode.log" 2>&1 || fail "MoE smoke training ($mode)"
done
phase "DFlash training, eager and with CUDA graphs"
# --draft dflash on the tiny Qwen3 fixture, padded and packed: the step with each batch's anchors
# copied into its shape's buffer (a fixed anchor count per shape), eager and replayed from graphs.
dflash=(--model_name_or_path "$ROOT/tests/fixtures/models/tiny-qwen3" --data_path "$ROOT/tests/fixtures/data/smoke.jsonl"
  --training_seq_len 256 --bucket_granularity 64 --validation_fraction 0.1 --per_device_train_batch_size 4
  --draft dflash --dflash_block_size 4 --draft_num_layers 2 --dflash_num_anchors 32 --learning_rate 0.001
  --warmup_steps 0 --logging_steps 5 --max_steps 20 --eval_steps 0 --save_steps 0 --eval_num_prompts 0
  --device "$DEVICE" --num_threads 4 --seed 42 --overwrite_output_dir)
for mode in dflash-eager dflash-graphed dflash-packed-eager dflash-packed-graphed \
  dspark-eager dspark-graphed dspark-packed-eager dspark-packed-graphed \
  dflash2-eager dflash2-graphed dflash2-packed-eager dflash2-packed-graphed; do
  graphs=8
  [[ "$mode" = *eager ]] && graphs=0
  extra=()
  [[ "$mode" = *packed* ]] && extra=(--padding_free)
  # DSpark: DFlash's backbone with the Markov and confidence heads, its slots drafted left to right.
  [[ "$mode" = dspark* ]] && extra+=(--draft dspark --dspark_markov_rank 8 --dflash_decay_gamma 4)
  # DFlash2: the block convolutions in every layer and the candidate selector (its top-k inside the graph).
  [[ "$mode" = dflash2* ]] && extra+=(--draft dflash2 --dflash2_selector_rank 8 --dflash_decay_gamma 4)
  "$BUILD/eagle-train" train "${dflash[@]}" "${extra[@]}" --max_cuda_graphs "$graphs" --output_dir "$OUT/$mode" \
    >"$OUT/$mode.log" 2>&1 || fail "DFlash/DSpark/DFlash2 training ($mode)"
done
"$PY" - "$OUT" "$DEVICE" >>"$OUT/summary.txt" <<'PYEOF' || fail "graphed losses differ from eager, or a DFlash run replayed no graph"
import json, re, sys
out, device = sys.argv[1], sys.argv[2]
def losses(run):
    return [j["loss"] for j in map(json.loads, open(f"{out}/{run}/metrics.jsonl")) if "loss" in j]
ok = True
for e, g in (("eager", "graphed"), ("packed-eager", "packed-graphed"), ("moe-eager", "moe-graphed"),
             ("dflash-eager", "dflash-graphed"), ("dflash-packed-eager", "dflash-packed-graphed"),
             ("dspark-eager", "dspark-graphed"), ("dspark-packed-eager", "dspark-packed-graphed"),
             ("dflash2-eager", "dflash2-graphed"), ("dflash2-packed-eager", "dflash2-packed-graphed")):
    a, b = losses(e), losses(g)
    worst = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
    graphs = re.findall(r"CUDA graphs: .*", open(f"{out}/{g}.log").read())
    counts = graphs[-1] if graphs else "no CUDA graphs"
    print(f"smoke {g} vs {e}: {len(a)} logged losses, max |difference| {worst:.2e}; {counts}")
    ok &= worst < 1e-4
    # A DFlash run on a GPU must have replayed graphs: its shapes and the update captured, then replays.
    m = re.search(r"(\d+) captured, (\d+) replays", counts)
    if device == "cuda" and g.startswith(("dflash", "dspark")) and not (m and int(m.group(1)) > 1 and int(m.group(2)) > 0):
        print(f"smoke {g}: no CUDA graph replayed")
        ok = False
sys.exit(0 if ok else 1)
PYEOF

phase "generate, eager and with CUDA graphs"
# Greedy decode steps, eager and replayed from CUDA graphs, must write the same file.
gen=(generate --config "$ROOT/configs/smoke.json" --model_name_or_path "$ROOT/tests/fixtures/models/tiny-llama"
  --data_path "$ROOT/tests/fixtures/data/smoke.jsonl" --device "$DEVICE" --max_new_tokens 64 --generate_batch_size 16)
for graphs in 0 8; do
  rm -f "$OUT/generate-$graphs.jsonl"*
  "$BUILD/eagle-train" "${gen[@]}" --max_cuda_graphs "$graphs" --output "$OUT/generate-$graphs.jsonl" \
    >"$OUT/generate-$graphs.log" 2>&1 || fail "generate (max_cuda_graphs $graphs)"
done
if cmp -s "$OUT/generate-0.jsonl" "$OUT/generate-8.jsonl"; then
  echo "generate: eager and graphed decoding wrote the same file" >>"$OUT/summary.txt"
else
  fail "generate: eager and graphed decoding differ"
fi

phase "follow: two rounds from a released draft, on the device"
# eagle-train follow on the device: rounds of train runs (each its own CUDA graphs) started from a draft speculators
# saved (--init_draft), the gate's evaluations, a published version.
rm -rf "$OUT/follow" && mkdir -p "$OUT/follow/rollouts"
for k in 0 1 2; do
  sed -n "$((k * 16 + 1)),$((k * 16 + 16))p" "$ROOT/tests/fixtures/data/smoke.jsonl" >"$OUT/follow/rollouts/.s$k"
  mv "$OUT/follow/rollouts/.s$k" "$OUT/follow/rollouts/s$k.jsonl"
done
"$BUILD/eagle-train" follow --model_name_or_path "$ROOT/tests/fixtures/models/tiny-llama" \
  --rollout_dir "$OUT/follow/rollouts" --output_dir "$OUT/follow/out" \
  --init_draft "$ROOT/tests/fixtures/models/eagle3-speculators" --training_seq_len 256 --bucket_granularity 64 \
  --per_device_train_batch_size 4 --publish_every 10 --max_steps 20 --follow_window 1 --eval_num_prompts 4 \
  --eval_max_new_tokens 16 --device "$DEVICE" --num_threads 4 --follow_poll_s 0.1 >"$OUT/follow.log" 2>&1 ||
  fail "follow (see $OUT/follow.log)"
[[ -f "$OUT/follow/out/latest" ]] || fail "follow published no version"
echo "follow: $(grep -c '"round"' "$OUT/follow/out/metrics.jsonl") rounds, serving $(cat "$OUT/follow/out/latest")" \
  >>"$OUT/summary.txt"

phase "training step benchmark"
if [[ "$DEVICE" = cuda ]]; then
  bench=(--device cuda --config "$ROOT/tests/fixtures/configs/llama31-4x.json" --seq_len 4096 --tokens 16384
    --samples 2000 --timed 3 --shapes 4)
else
  # CPU peak, roughly: 32 fp32 FLOPs a cycle (two 256-bit FMA pipes) at ~3 GHz, per core.
  cpu_peak=$(awk -v n="$(nproc)" 'BEGIN { printf "%.2f", n * 0.1 }')
  bench=(--device cpu --config "$ROOT/tests/fixtures/models/tiny-llama/config.json" --seq_len 256 --tokens 1024
    --samples 300 --timed 1 --shapes 2 --ttt_steps 3 --draft_vocab 256 --peak_tflops "$cpu_peak")
fi
echo "command: $BUILD/eagle_bench_step ${bench[*]}" >"$OUT/bench.log"
timeout 360 "$BUILD/eagle_bench_step" "${bench[@]}" --out "$OUT/bench.md" >>"$OUT/bench.log" 2>&1 ||
  fail "benchmark (see $OUT/bench.log)"

phase "done"
finish
