#!/usr/bin/env bash
# The GPU checks, as one script for a machine with a CUDA device (run from the repo root): builds
# against the Python torch there, runs the [gpu] tests (CUDA graphs equal eager execution, CUDA
# target parity, CUDA head step, graphed generation) and a short smoke training on CUDA with CUDA
# graphs, eager and graphed, comparing their losses; then generate on CUDA, eager and graphed (the
# same file expected), and the generate speed benchmark on the demo target when it is cached. Needs the Debian -dev packages of scripts/setup.sh (CLI11,
# nlohmann-json, spdlog, Catch2 v2, simdjson, zlib) or their headers on CMAKE_PREFIX_PATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/output/gpu-check}"
mkdir -p "$OUT"
PY="${EAGLE_PYTHON:-python3}"
TORCH_CMAKE=$("$PY" -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
BUILD="${EAGLE_BUILD_DIR:-$ROOT/build-gpu}"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" >"$OUT/configure.log"
cmake --build "$BUILD" -j "$(nproc)" >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
"$BUILD/eagle-train" --version | tee "$OUT/version.txt"
(cd "$BUILD" && ctest -R gpu --output-on-failure) 2>&1 | tee "$OUT/gpu_tests.log"
common=(--config "$ROOT/configs/smoke.json" --device cuda --num_threads 4 --eval_steps 0 --save_steps 0)
rm -rf "$OUT/eager" "$OUT/graphed"
"$BUILD/eagle-train" train "${common[@]}" --max_cuda_graphs 0 --output_dir "$OUT/eager" 2>&1 | tee "$OUT/eager.log"
"$BUILD/eagle-train" train "${common[@]}" --max_cuda_graphs 8 --output_dir "$OUT/graphed" 2>&1 | tee "$OUT/graphed.log"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
def losses(run):
    return [j["loss"] for j in map(json.loads, open(f"{out}/{run}/metrics.jsonl")) if "loss" in j]
e, g = losses("eager"), losses("graphed")
print("eager  ", ["%.4f" % x for x in e])
print("graphed", ["%.4f" % x for x in g])
worst = max(abs(a - b) for a, b in zip(e, g))
print("max |eager - graphed| =", worst)
sys.exit(0 if len(e) == len(g) and worst < 1e-3 else 1)
PYEOF
# generate: decode steps eager vs replayed from CUDA graphs write the same file (greedy).
gen=(generate --config "$ROOT/configs/smoke.json" --device cuda --max_new_tokens 64 --generate_batch_size 16)
for graphs in 0 8; do
  rm -f "$OUT/generate-$graphs.jsonl"*
  "$BUILD/eagle-train" "${gen[@]}" --max_cuda_graphs "$graphs" --output "$OUT/generate-$graphs.jsonl" 2>&1 |
    tee "$OUT/generate-$graphs.log"
done
cmp "$OUT/generate-0.jsonl" "$OUT/generate-8.jsonl" || { echo "generate: eager and graphed decode differ"; exit 1; }
echo "generate: eager and graphed decode wrote the same file"
DEMO="${EAGLE_DEMO_TARGET:-$HOME/.cache/eagle-train/demo-target}"
if [ -f "$DEMO/DONE" ]; then
  EAGLE_BUILD_DIR="$BUILD" BENCH_DEVICE=cuda BENCH_THREADS=4 BENCH_OUT="$OUT/bench-generate" \
    "$ROOT/scripts/bench/bench_generate.sh" speed | tee "$OUT/bench_generate.md"
fi
