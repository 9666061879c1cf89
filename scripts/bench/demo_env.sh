# Sourced by the benchmarks on the demo target: sets ROOT, DEPS_DIR, PY, BIN and TARGET (each
# overridable: EAGLE_DEPS_DIR, EAGLE_PYTHON, EAGLE_BUILD_DIR, EAGLE_DEMO_TARGET), builds eagle-train
# when it is missing and makes the demo target when it is missing (scripts/make_demo_target.py).
# demo_head OUT THREADS sets HEAD: BENCH_HEAD when given, else a head trained with
# configs/alpaca-demo.json into OUT/run.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
PY="${EAGLE_PYTHON:-$DEPS_DIR/venv/bin/python}"
BIN="${EAGLE_BUILD_DIR:-$ROOT/build}/eagle-train"
TARGET="${EAGLE_DEMO_TARGET:-$DEPS_DIR/demo-target}"
[ -x "$BIN" ] || EAGLE_BUILD_JOBS="${EAGLE_BUILD_JOBS:-2}" "$ROOT/scripts/build.sh"
[ -f "$TARGET/DONE" ] || "$PY" "$ROOT/scripts/make_demo_target.py" --output "$TARGET"

demo_head() {  # OUT THREADS
  HEAD="${BENCH_HEAD:-}"
  if [ -z "$HEAD" ]; then
    "$BIN" train --config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" \
      --data_path "$TARGET/alpaca.jsonl" --output_dir "$1/run" --overwrite_output_dir --device cpu \
      --num_threads "$2" --eval_num_prompts 4 >"$1/train.log" 2>&1
    HEAD="$(ls -d "$1"/run/checkpoint-[0-9]* | sort -t- -k2 -n | tail -1)"
  fi
  echo "head: $HEAD"
}
