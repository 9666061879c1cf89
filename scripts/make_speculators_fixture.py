#!/usr/bin/env python3
"""Build a tiny offline-training data folder in the vllm-project/speculators layout.

The committed fixtures of tests/fixtures/speculators/ come from this script, so the C++ tests read
real `datasets`/pyarrow/safetensors output without needing those libraries at test time:

  tiny-llama/   hidden states of tests/fixtures/models/tiny-llama (fp32) for the first 16 samples
                of tests/fixtures/data/smoke.jsonl clipped to 80 tokens (rows without a trained
                token are dropped, as speculators' prepare_data drops them), layer ids 1 2 3 4
  arrow-2500/   only the Arrow files of 2500 synthetic rows (several record batches), no hidden
                states: --synthetic-rows 2500 (row i: 1 + i % 7 ids 7*i + k, loss_mask k % 2)

Regenerate (datasets and pyarrow are not in the project venv; install the pinned versions into a
folder whose path contains "site-packages", or dill fails with PicklingError: MonthDayNano):
  ~/.cache/eagle-train/venv/bin/python -m pip install --target /some/site-packages \
      datasets==5.2.0 pyarrow==25.0.1
  PYTHONPATH=/some/site-packages ~/.cache/eagle-train/venv/bin/python scripts/make_speculators_fixture.py \
      --model tests/fixtures/models/tiny-llama --samples tests/fixtures/data/smoke.jsonl --max-samples 16 \
      --seq-length 80 --layer-ids 1 2 3 --no-token-freq --verify --out tests/fixtures/speculators/tiny-llama
  PYTHONPATH=/some/site-packages ~/.cache/eagle-train/venv/bin/python scripts/make_speculators_fixture.py \
      --synthetic-rows 2500 --out tests/fixtures/speculators/arrow-2500

Layout reproduced (speculators @ c05b95b303f7d4f21e8d7624e0ffa1c2d9b4d73b):

  OUT/                                  <- scripts/prepare_data.py: dataset.save_to_disk(OUT)
    data-00000-of-00001.arrow           <- HF `datasets` Arrow *IPC stream*; columns
                                           input_ids: list<int32> (datasets narrows it),
                                           loss_mask: list<int64>, seq_len: int64
    dataset_info.json, state.json       <- written by datasets.save_to_disk
                                           (state.json records _format_type "torch")
    token_freq.pt                       <- torch.save(dict[int,int]) of loss-masked token
                                           counts (train.vocab_mapping); optional here (a pickle:
                                           eagle-train never reads it)
    hidden_states/hs_<row>.safetensors  <- scripts/data_generation_offline.py moves the file
                                           that vLLM's ExampleHiddenStatesConnector wrote:
                                             "hidden_states": [T, n_ids, H] (model dtype)
                                             "token_ids":     [T] int64 (== row input_ids)
                                           no __metadata__

hidden_states[:, j] is the state for layer id ids[j] (ids ascending, vLLM appends them in
layer order). Layer id k = hidden_states + residual after k decoder layers, i.e. k=0 is the
embedding output, k=L (num_hidden_layers) is the last decoder layer's output BEFORE the
final RMSNorm. HF's output_hidden_states[k] matches for k < L, but HF's hidden_states[L] is
post-norm, so this script captures layer outputs with forward hooks instead.

Default ids are scripts/launch_vllm.py's: [2, L//2, L-3, L]. Training uses
hidden_states[:, :-1] (flattened to 3*H) as draft input and hidden_states[:, -1] as
verifier_last_hidden_states (-> verifier_norm -> verifier_lm_head = teacher logits).

samples: a JSON list (or JSONL) of {"input_ids": [...], "loss_mask": [...]}.
Without --samples, three short deterministic demo samples are generated.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="HF Llama folder (config.json + model.safetensors)")
    p.add_argument("--out", required=True, help="output folder (speculators --data-path)")
    p.add_argument("--samples", default=None, help="JSON list / JSONL of {input_ids, loss_mask}")
    p.add_argument("--max-samples", type=int, default=None, help="read only the first N samples")
    p.add_argument("--synthetic-rows", type=int, default=None,
                   help="write only the Arrow files of N synthetic rows (no model, no hidden states)")
    p.add_argument("--layer-ids", type=int, nargs="+", default=None,
                   help="target layer ids incl. the last one (default [2, L//2, L-3, L])")
    p.add_argument("--hs-dtype", choices=sorted(DTYPES), default="float32",
                   help="dtype stored in hidden_states (vLLM stores the served model dtype, "
                        "normally bfloat16). Model itself always runs in fp32.")
    p.add_argument("--seq-length", type=int, default=8192,
                   help="prepare_data --seq-length: rows are clipped to this many tokens")
    p.add_argument("--no-token-freq", action="store_true", help="skip token_freq.pt")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--verify", action="store_true",
                   help="reload everything and check shapes/token ids/teacher logits")
    return p.parse_args()


def demo_samples(vocab_size: int) -> list[dict]:
    rng = random.Random(0)
    out = []
    for prompt_len, resp_len in ((4, 3), (6, 5), (3, 9)):
        ids = [1] + [rng.randrange(3, vocab_size) for _ in range(prompt_len + resp_len - 1)]
        out.append({"input_ids": ids, "loss_mask": [0] * prompt_len + [1] * resp_len})
    return out


def synthetic_samples(n: int) -> list[dict]:
    """Row i: 1 + i % 7 tokens 7*i + k with loss_mask k % 2 (rows of one token have no trained
    token and are dropped by the passthrough, as in prepare_data)."""
    return [{"input_ids": [7 * i + k for k in range(1 + i % 7)],
             "loss_mask": [k % 2 for k in range(1 + i % 7)]} for i in range(n)]


def load_samples(path: str | None, vocab_size: int, max_samples: int | None) -> list[dict]:
    if path is None:
        return demo_samples(vocab_size)
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    data = data[:max_samples] if max_samples is not None else data
    for i, s in enumerate(data):
        if len(s["input_ids"]) != len(s["loss_mask"]):
            raise ValueError(f"sample {i}: input_ids/loss_mask length mismatch")
        if any(not 0 <= t < vocab_size for t in s["input_ids"]):
            raise ValueError(f"sample {i}: token id out of range [0, {vocab_size})")
    return data


def resolve_layer_ids(ids: list[int] | None, num_layers: int) -> list[int]:
    if ids is None:  # scripts/launch_vllm.py lines 128-134
        ids = [2, num_layers // 2, num_layers - 3, num_layers]
    else:
        ids = list(ids)
        if num_layers not in ids:  # launch_vllm.py --include-last-layer (default True)
            ids.append(num_layers)
    if len(set(ids)) != len(ids) or any(not 0 <= k <= num_layers for k in ids):
        raise SystemExit(
            f"layer ids {ids} are invalid for num_hidden_layers={num_layers}: vLLM needs "
            f"distinct ids in [0, {num_layers}] (it returns one state per distinct layer). "
            f"Pass --layer-ids, e.g. --layer-ids 1 2 3 {num_layers}")
    # vLLM appends aux states while walking the layers, so the stored order is ascending.
    return sorted(ids)


def build_arrow_dataset(samples: list[dict], seq_length: int):
    """Same code path as speculators prepare_data (_passthrough_pretokenized + save_to_disk)."""
    from datasets import Dataset

    def passthrough(examples):  # preprocessing.py _passthrough_pretokenized/_append_row
        res = {"input_ids": [], "loss_mask": [], "seq_len": []}
        for ids, mask in zip(examples["input_ids"], examples["loss_mask"], strict=True):
            ids, mask = ids[:seq_length], mask[:seq_length]
            if sum(mask) == 0:  # "unsupervised" rows are dropped
                continue
            res["input_ids"].append(torch.tensor(ids, dtype=torch.long))
            res["loss_mask"].append(torch.tensor(mask, dtype=torch.long))
            res["seq_len"].append(len(ids))
        return res

    raw = Dataset.from_dict({"input_ids": [s["input_ids"] for s in samples],
                             "loss_mask": [s["loss_mask"] for s in samples]})
    ds = raw.map(passthrough, batched=True, batch_size=1000,
                 remove_columns=raw.column_names, keep_in_memory=True)
    ds.set_format(type="torch")
    return ds


class LayerTap:
    """Records each decoder layer's output (pre-final-norm residual stream)."""

    def __init__(self, model):
        self.outs: dict[int, torch.Tensor] = {}
        self.handles = [
            layer.register_forward_hook(self._hook(i)) for i, layer in enumerate(model.model.layers)
        ]

    def _hook(self, i):
        def fn(_mod, _args, out):
            self.outs[i] = (out[0] if isinstance(out, tuple) else out).detach()
        return fn


@torch.no_grad()
def hidden_states_for(model, tap: LayerTap, ids: list[int], layer_ids: list[int]):
    x = torch.tensor([ids], dtype=torch.long)
    tap.outs.clear()
    out = model(input_ids=x, output_hidden_states=True)
    per_id = []
    for k in layer_ids:
        h = out.hidden_states[0] if k == 0 else tap.outs[k - 1]  # state after k layers
        per_id.append(h[0])
    return torch.stack(per_id, dim=1), out.logits[0]  # [T, n, H], [T, V]


def fresh_folder(path: str, overwrite: bool) -> Path:
    out = Path(path)
    if out.exists():
        if not overwrite and any(out.iterdir()):
            raise SystemExit(f"{out} is not empty (use --overwrite)")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


def main():
    args = parse_args()
    if args.synthetic_rows is not None:
        out = fresh_folder(args.out, args.overwrite)
        build_arrow_dataset(synthetic_samples(args.synthetic_rows), args.seq_length).save_to_disk(str(out))
        print(f"wrote the Arrow files of {args.synthetic_rows} synthetic rows to {out}")
        return
    if args.model is None:
        raise SystemExit("--model is required (unless --synthetic-rows)")
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(args.model)
    num_layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    layer_ids = resolve_layer_ids(args.layer_ids, num_layers)
    samples = load_samples(args.samples, cfg.vocab_size, args.max_samples)
    out = fresh_folder(args.out, args.overwrite)

    # 1) prepare_data.py equivalent
    ds = build_arrow_dataset(samples, args.seq_length)
    ds.save_to_disk(str(out))
    if not args.no_token_freq:  # train/vocab_mapping.py save_token_frequency_distribution
        freq: dict[int, int] = {}
        for row in ds:
            masked = row["input_ids"][row["loss_mask"].to(torch.bool)]
            u, c = masked.unique(return_counts=True)
            for t, n in zip(u.tolist(), c.tolist(), strict=True):
                freq[t] = freq.get(t, 0) + n
        torch.save(freq, out / "token_freq.pt")

    # 2) data_generation_offline.py equivalent (vLLM replaced by an fp32 HF forward)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tap = LayerTap(model)
    hs_dir = out / "hidden_states"
    hs_dir.mkdir()
    rows = ds.with_format(None)
    for i in range(len(rows)):
        ids = rows[i]["input_ids"]
        hs, _ = hidden_states_for(model, tap, ids, layer_ids)
        save_file({"hidden_states": hs.to(DTYPES[args.hs_dtype]).contiguous(),
                   "token_ids": torch.tensor(ids, dtype=torch.long)},
                  str(hs_dir / f"hs_{i}.safetensors"))

    print(f"wrote {len(rows)} rows to {out}; layer ids {layer_ids} "
          f"(stored as hidden_states[T, {len(layer_ids)}, {hidden}] {args.hs_dtype})")
    if args.verify:
        verify(out, model, tap, layer_ids, args.hs_dtype)


def verify(out: Path, model, tap: LayerTap, layer_ids: list[int], hs_dtype: str):
    """Reload like speculators.train.data.ArrowDataset + eagle3 shift_batch and check."""
    from datasets import load_from_disk
    from safetensors.torch import load_file

    ds = load_from_disk(str(out))
    assert ds.format["type"] == "torch", ds.format
    tol = 1e-5 if hs_dtype == "float32" else 5e-2
    for i in range(len(ds)):
        row = ds[i]
        hs = load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))
        assert set(hs) == {"hidden_states", "token_ids"}, hs.keys()
        assert torch.equal(hs["token_ids"], row["input_ids"])           # train/data.py:286
        T = int(row["seq_len"])
        assert hs["hidden_states"].shape == (T, len(layer_ids), model.config.hidden_size)
        aux = hs["hidden_states"][:, :-1].flatten(1)                    # train/data.py:295
        last = hs["hidden_states"][:, -1].float()                       # train/data.py:299
        # teacher logits = verifier_lm_head(verifier_norm(last)) (eagle3/core.py:251)
        teacher = model.lm_head(model.model.norm(last))
        _, ref_logits = hidden_states_for(model, tap, row["input_ids"].tolist(), layer_ids)
        err = (teacher - ref_logits).abs().max().item()
        assert err < tol * max(1.0, ref_logits.abs().max().item()), err
        # eagle3/data.py shift_batch: position j pairs (x[j+1], g[j], y[j+1], l[j+1])
        n = T - 1
        print(f"row {i}: T={T} loss_mask={row['loss_mask'].tolist()} aux={tuple(aux.shape)} "
              f"teacher-vs-model max|dlogit|={err:.2e}; after shift: {n} positions")
    print("verify: OK")


if __name__ == "__main__":
    sys.exit(main())
