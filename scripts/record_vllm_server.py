#!/usr/bin/env python3
"""Records a real vLLM hidden-states server for the C++ tests of `train --target_server` (docs/offline.md).

Run with the vLLM CPU venv's python (scripts/setup_vllm_cpu.sh). It
  1. makes the fixture target when --make-target is given: a Llama of head_dim 32 (vLLM's CPU attention
     has no head size 16, the other fixtures' size), random weights, bf16;
  2. starts `python -m vllm.entrypoints.openai.api_server` on it with the speculative method
     extract_hidden_states and the ExampleHiddenStatesConnector writing into a temporary folder;
  3. sends one completion request per sample (prompt token ids, max_tokens 1, return_token_ids), waits on
     each file's .lock (LOCK_SH: vLLM holds LOCK_EX until the write is complete) and moves the file;
  4. writes OUT/: models.json (GET /v1/models), responses.jsonl (per sample: the request body and the
     response body as received), hidden_states/hs_<i>.safetensors (the files vLLM wrote), samples.jsonl (the
     rows as eagle-train JSON data) and the same rows as a speculators folder (state.json + one Arrow IPC
     stream: input_ids list<int32>, loss_mask list<int64>), so one fixture is both a server recording and
     the speculators folder the server's features must train like.

  ~/.cache/eagle-train/vllm-venv/bin/python scripts/record_vllm_server.py \
      --make-target tests/fixtures/models/tiny-llama-h32 --samples tests/fixtures/data/smoke.jsonl \
      --max-samples 6 --seq-length 60 --out tests/fixtures/vllm-server/tiny-llama-h32

With --generate it records a plain vLLM server writing replies for `eagle-train generate --target_server`
(no speculative config; --generation-config vllm, so the model's generation defaults do not apply): it
starts the server on --model, puts a small recording proxy in front of it (every request body and response
body as received), runs the built eagle-train generate against the proxy once per entry of GENERATE_RUNS (run.json:
the arguments and the end ids it used, the in-process ones included) on --samples, and writes OUT/:
models.json, responses.jsonl (request bodies with their responses), samples.jsonl and run.json.

  ~/.cache/eagle-train/vllm-venv/bin/python scripts/record_vllm_server.py --generate \
      --model tests/fixtures/models/tiny-llama-h32 --end-id 12 --max-model-len 64 \
      --samples tests/fixtures/vllm-server/generate-tiny-llama-h32/samples.jsonl \
      --eagle-train build/eagle-train --out tests/fixtures/vllm-server/generate-tiny-llama-h32
(its 8 hand-written samples: one turn, two turns, a reply ending at the end id 12 (the greedy fixture writes
it), a copy, a reply cut at the context, a second turn that no longer fits, short ones).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LAYER_IDS = [1, 2, 3]  # the fixture's aux layers; the last hidden state (id = num_hidden_layers) follows


def make_target(out: pathlib.Path) -> None:
    import torch
    import transformers

    torch.manual_seed(2028)
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-5, max_position_embeddings=256,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # weights of a realistic scale, so the layers' outputs differ visibly
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
    model = model.to(torch.bfloat16)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    (out / "generation_config.json").unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: dict | None = None, timeout: float = 120) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def serve_command(python: str, model: str, port: int, storage: str, num_layers: int, max_len: int) -> list[str]:
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": LAYER_IDS + [num_layers]}}}
    kv = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
          "kv_connector_extra_config": {"shared_storage_path": storage}}
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
            "--port", str(port), "--dtype", "bfloat16", "--max-model-len", str(max_len), "--max-num-seqs", "4",
            "--skip-tokenizer-init", "--enforce-eager", "--no-enable-prefix-caching", "--seed", "0",
            "--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(kv)]


def wait_healthy(base: str, proc: subprocess.Popen, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the vLLM server exited with {proc.returncode} before it was healthy")
        try:
            http(base + "/health", timeout=5)
            return
        except Exception:
            time.sleep(2)
    sys.exit(f"the vLLM server was not healthy after {limit_s} s")


def wait_file(path: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path + ".lock") and not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"no hidden-states file {path}")
        time.sleep(0.05)
    if os.path.exists(path + ".lock"):
        with open(path + ".lock") as lf:
            fcntl.flock(lf, fcntl.LOCK_SH)


def write_speculators_arrow(out: pathlib.Path, rows: list[dict]) -> None:
    import pyarrow as pa

    table = pa.table({
        "input_ids": pa.array([r["input_ids"] for r in rows], type=pa.list_(pa.int32())),
        "loss_mask": pa.array([r["loss_mask"] for r in rows], type=pa.list_(pa.int64())),
        "seq_len": pa.array([len(r["input_ids"]) for r in rows], type=pa.int64()),
    })
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(out / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (out / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}], "_format_type": None}) + "\n")


# eagle-train generate's settings of the recorded runs (the test repeats them from run.json).
GENERATE_ARGS = ["--training_seq_len", "40", "--max_new_tokens", "8", "--overlong_policy", "truncate",
                 "--generate_batch_size", "3", "--target_dtype", "float32", "--target_server_retries", "0"]
GENERATE_RUNS = {"greedy": [], "sampled": ["--temperature", "1", "--top_p", "0.9", "--seed", "7"]}


def generate_command(python: str, model: str, port: int, max_len: int) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
            "--port", str(port), "--dtype", "float32", "--max-model-len", str(max_len), "--max-num-seqs", "4",
            "--skip-tokenizer-init", "--enforce-eager", "--seed", "0", "--generation-config", "vllm"]


class Recorder(ThreadingHTTPServer):
    """Forwards every request to the upstream server and records POST bodies with their responses."""

    daemon_threads = True

    def __init__(self, upstream: str):
        self.upstream, self.records, self.models, self.lock = upstream, [], None, threading.Lock()
        super().__init__(("127.0.0.1", 0), RecordingHandler)


class RecordingHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def forward(self, body: bytes | None) -> None:
        req = urllib.request.Request(self.server.upstream + self.path, data=body, method=self.command,
                                     headers={"Content-Type": "application/json"} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        with self.server.lock:
            if self.command == "POST":
                self.server.records.append({"request": json.loads(body), "status": status, "response": raw.decode()})
            elif self.path == "/v1/models":
                self.server.models = raw.decode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        self.forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))


def end_id_model(model: str, end_id: int, folder: str) -> str:
    """The target folder for eagle-train: the weights linked, generation_config.json naming end_id as well."""
    os.makedirs(folder)
    for name in os.listdir(model):
        os.symlink(os.path.abspath(os.path.join(model, name)), os.path.join(folder, name))
    eos = json.loads((pathlib.Path(model) / "config.json").read_text()).get("eos_token_id")
    eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
    (pathlib.Path(folder) / "generation_config.json").write_text(json.dumps({"eos_token_id": eos + [end_id]}))
    return folder


def record_generate(args) -> None:
    samples = pathlib.Path(args.samples).read_text()  # before OUT is cleared: it may be OUT/samples.jsonl
    out = pathlib.Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "samples.jsonl").write_text(samples)
    work = tempfile.mkdtemp(prefix="vllm-gen-")
    target = end_id_model(args.model, args.end_id, os.path.join(work, "target"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND="nobind")
    log_path = os.path.join(work, "server.log")
    cmd = generate_command(sys.executable, args.model, port, args.max_model_len)
    print(" ".join(cmd), f"(log {log_path})", flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    proxy = Recorder(base)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
    runs = {}
    try:
        t0 = time.monotonic()
        wait_healthy(base, proc, args.start_timeout)
        print(f"server healthy after {time.monotonic() - t0:.0f} s", flush=True)
        for name, extra in GENERATE_RUNS.items():
            argv = ["generate", "--model_name_or_path", target, "--data_path", str(out / "samples.jsonl"),
                    "--output", os.path.join(work, f"{name}.jsonl"), "--target_server", proxy_url,
                    *GENERATE_ARGS, *extra]
            t0 = time.monotonic()
            r = subprocess.run([args.eagle_train, *argv], capture_output=True, text=True)
            print(r.stdout + r.stderr, flush=True)
            if r.returncode != 0:
                sys.exit(f"eagle-train generate ({name}) exited with {r.returncode}")
            print(f"{name}: {time.monotonic() - t0:.2f} s", flush=True)
            runs[name] = {"args": GENERATE_ARGS + extra,
                          "output": [json.loads(line) for line in open(os.path.join(work, f"{name}.jsonl"))]}
    finally:
        proxy.shutdown()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    (out / "models.json").write_text(proxy.models + "\n")
    with open(out / "responses.jsonl", "w") as f:
        for rec in proxy.records:
            f.write(json.dumps(rec) + "\n")
    run = {"served_model": args.model, "end_id": args.end_id, "max_model_len": args.max_model_len,
           "server": " ".join(cmd[1:]), "runs": runs}
    (out / "run.json").write_text(json.dumps(run) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}: {len(proxy.records)} requests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-target", help="make the fixture target in this folder and serve it")
    ap.add_argument("--model", help="serve this target folder instead")
    ap.add_argument("--samples", required=True, help="JSONL of {input_ids, loss_mask}")
    ap.add_argument("--max-samples", type=int, default=6)
    ap.add_argument("--seq-length", type=int, default=60, help="clip each sample to this many tokens")
    ap.add_argument("--min-trained", type=int, default=4,
                    help="keep only samples with this many trained tokens (loss_mask 1 at position 2 or later) "
                         "within the clip")
    ap.add_argument("--max-model-len", type=int, default=64)
    ap.add_argument("--out", required=True)
    ap.add_argument("--start-timeout", type=float, default=900)
    ap.add_argument("--generate", action="store_true", help="record a plain server writing replies (see above)")
    ap.add_argument("--end-id", type=int, default=7, help="--generate: an end id beside the target's own")
    ap.add_argument("--eagle-train", default="build/eagle-train", help="--generate: the built eagle-train")
    args = ap.parse_args()
    if args.generate:
        if not args.model:
            sys.exit("--generate needs --model")
        record_generate(args)
        return

    if args.make_target:
        make_target(pathlib.Path(args.make_target))
    model = args.make_target or args.model
    if not model:
        sys.exit("give --make-target or --model")
    num_layers = json.loads((pathlib.Path(model) / "config.json").read_text())["num_hidden_layers"]

    rows = []
    for line in pathlib.Path(args.samples).read_text().splitlines():
        if line.strip() and len(rows) < args.max_samples:
            s = json.loads(line)
            n = min(args.seq_length, len(s["input_ids"]))
            if sum(s["loss_mask"][2:n]) < args.min_trained:
                continue
            rows.append({"input_ids": s["input_ids"][:n], "loss_mask": s["loss_mask"][:n]})

    out = pathlib.Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    (out / "hidden_states").mkdir(parents=True)
    storage = tempfile.mkdtemp(prefix="vllm-hs-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND="nobind")
    log_path = os.path.join(tempfile.gettempdir(), f"vllm-server-{port}.log")
    log = open(log_path, "w")
    print(f"server log: {log_path}", flush=True)
    cmd = serve_command(sys.executable, model, port, storage, num_layers, args.max_model_len)
    print(" ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        wait_healthy(base, proc, args.start_timeout)
        print(f"server healthy after {time.monotonic() - t0:.0f} s", flush=True)
        models = json.loads(http(base + "/v1/models"))
        (out / "models.json").write_text(json.dumps(models, indent=1) + "\n")
        name = models["data"][0]["id"]
        records = []
        t0 = time.monotonic()
        for i, r in enumerate(rows):
            body = {"model": name, "prompt": r["input_ids"], "max_tokens": 1, "return_token_ids": True}
            raw = http(base + "/v1/completions", body)
            resp = json.loads(raw)
            path = resp["kv_transfer_params"]["hidden_states_path"]
            wait_file(path)
            shutil.move(path, out / "hidden_states" / f"hs_{i}.safetensors")
            pathlib.Path(path + ".lock").unlink(missing_ok=True)
            records.append({"request": body, "response": raw.decode()})
        print(f"{len(rows)} requests in {time.monotonic() - t0:.2f} s", flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(storage, ignore_errors=True)
    with open(out / "responses.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    with open(out / "samples.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    write_speculators_arrow(out, rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
