#!/usr/bin/env python3
"""SpecForge 0.2.0's EAGLE-3 training on CPU, for scripts/bench/real_target.sh (issue 52).

SpecForge's own entry point (`specforge train --config run.yaml`) captures the target's features with SGLang
(online) or reads a features store written by it (offline); neither runs on a CPU-only machine. This driver runs
SpecForge's training step unchanged and replaces only the capture with a transformers forward of the same target:

  draft config   generated from the target's config as SpecForge does (training/model_loading._generate_draft_config:
                 the target's architecture fields, LlamaForCausalLMEagle3, 1 layer, draft_vocab_size)
  draft model    specforge.modeling.auto.AutoDraftModel.from_config (sdpa), the target's embedding loaded and frozen
  vocab mapping  specforge.data.preprocessing.process_token_dict_to_mappings over the trained tokens of the data
  step           specforge.training.strategies.base.Eagle3TrainStrategy over OnlineEagle3Model (TTT length 7, loss
                 decay 0.8), fed as SpecForge's offline path is (target_repr "hidden_state": the target's final,
                 normed hidden state, projected by SpecForge's TargetHead inside the step; aux states of SpecForge's
                 capture layers [1, L/2 - 1, L - 4], output-of-layer, = transformers' hidden_states[2, L/2, L-3])
  loss           SpecForge's KL loss; on CPU its PyTorch form (core/loss._compute_loss) instead of the Triton kernel
  optimizer      specforge.optimizer.BF16Optimizer (AdamW over fp32 masters, grad clip 0.5), constant lr
  batches        SpecForge's collation: random order, rows padded to the longest row of the batch
  save           the SGLang layout SpecForge's exporter writes (export/to_sglang: the draft's state without the
                 embedding, config.json), which `eagle-train eval` reads

  python scripts/bench/peers/specforge_eagle3.py --model TARGET --data train.jsonl --out OUT \
      [--batch 2] [--lr 1e-3] [--ttt 7] [--draft-vocab 8192] [--seq-len 1024] [--threads 2] [--seed 42]

Budget and saves: BUDGET_S, SAVES and RT_T0 from the environment (scripts/bench/peers/common.py).
"""
import argparse
import os
import random
import sys
from collections import Counter
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, read_jsonl  # noqa: E402

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ttt", type=int, default=7)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    clock = Clock(args.out)

    from specforge.algorithms.eagle3.model import OnlineEagle3Model
    from specforge.data.preprocessing import process_token_dict_to_mappings
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.export.to_sglang import _serving_state
    from specforge.modeling.auto import AutoDraftModel
    from specforge.modeling.target.target_head import TargetHead
    from specforge.optimizer import BF16Optimizer
    from specforge.runtime.contracts import TrainBatch
    from specforge.training.model_loading import _generate_draft_config
    from specforge.training.strategies.base import Eagle3TrainStrategy
    import specforge.algorithms.eagle3.model as eagle3_model
    import specforge.core.loss as specforge_loss

    if not torch.cuda.is_available():
        # SpecForge's KL loss (core/loss.py LogSoftmaxLoss) is a Triton GPU kernel; its PyTorch twin in the same file
        # (_compute_loss: -sum(mask * p * log_softmax(logits)) averaged over positions) computes the same loss on CPU
        eagle3_model.LogSoftmaxLoss = SimpleNamespace(apply=specforge_loss._compute_loss)

    samples = [s for s in read_jsonl(args.data) if sum(s["loss_mask"]) > 0]
    for s in samples:
        s["input_ids"], s["loss_mask"] = s["input_ids"][:args.seq_len], s["loss_mask"][:args.seq_len]

    # the draft config SpecForge generates from the target (no draft config given)
    cfg = SimpleNamespace(model=SimpleNamespace(target_model_path=args.model, cache_dir=None, trust_remote_code=False),
                          training=SimpleNamespace(strategy="eagle3"))
    provider = SimpleNamespace(target_defaults=SimpleNamespace(model_type="llama", num_hidden_layers=1,
                                                               draft_vocab_size=args.draft_vocab, populate=None),
                               architecture="LlamaForCausalLMEagle3")
    draft_config = _generate_draft_config(cfg, provider)
    draft = AutoDraftModel.from_config(draft_config, attention_backend="sdpa", torch_dtype=torch.float32)
    counts = Counter()
    for s in samples:
        counts.update(t for t, m in zip(s["input_ids"], s["loss_mask"]) if m)
    d2t, t2d = process_token_dict_to_mappings(counts, args.draft_vocab, draft_config.vocab_size)
    draft.d2t.copy_(d2t)
    draft.t2d.copy_(t2d)
    draft.load_embedding(args.model, embedding_key="model.embed_tokens.weight")
    draft.freeze_embedding()
    model = OnlineEagle3Model(draft_model=draft, length=args.ttt, attention_backend="sdpa")

    target = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    head = TargetHead(args.model)  # SpecForge's frozen target head; fp32 here (from_pretrained casts to bf16)
    head.fc.weight.data.copy_(target.get_output_embeddings().weight.data)
    head.freeze_weights()
    head.eval()
    n_layers = target.config.num_hidden_layers
    capture = [1, n_layers // 2 - 1, n_layers - 4]  # specforge resolve_eagle_capture_layers (output-of-layer ids)
    strategy = Eagle3TrainStrategy(model, target_head=head, ploss_decay=0.8)
    optimizer = BF16Optimizer(model, lr=args.lr, max_grad_norm=0.5, total_steps=10**9, warmup_ratio=0.0,
                              lr_scheduler="constant")
    print(f"specforge eagle3: {len(samples)} samples, capture layers {capture}, draft vocab {args.draft_vocab}, "
          f"ttt {args.ttt}, batch {args.batch}", flush=True)

    def save(d):
        full = {k: v for k, v in draft.state_dict().items() if "embed" not in k.lower()}
        draft.save_pretrained(d, state_dict=_serving_state(full, {}))
        apply_legacy_rope_scaling(d)

    rng = random.Random(args.seed)
    step, real_tokens = 0, 0
    model.train()
    while not clock.done():
        order = list(range(len(samples)))
        rng.shuffle(order)
        for i in range(0, len(order) - args.batch + 1, args.batch):
            rows = [samples[j] for j in order[i:i + args.batch]]
            length = max(len(r["input_ids"]) for r in rows)
            ids = torch.zeros(len(rows), length, dtype=torch.long)
            mask = torch.zeros(len(rows), length, dtype=torch.long)
            attn = torch.zeros(len(rows), length, dtype=torch.long)
            for r, s in enumerate(rows):
                n = len(s["input_ids"])
                ids[r, :n] = torch.tensor(s["input_ids"])
                mask[r, :n] = torch.tensor(s["loss_mask"])
                mask[r, n - 1] = 0  # as SpecForge's normalize_offline_sample
                attn[r, :n] = 1
            with torch.no_grad():
                hs = target.model(input_ids=ids, attention_mask=attn, output_hidden_states=True).hidden_states
                aux = torch.cat([hs[k + 1] for k in capture], dim=-1)
                final = hs[-1]  # transformers' last entry is after the final norm
            batch = TrainBatch(sample_ids=[str(j) for j in order[i:i + args.batch]], strategy="eagle3",
                               tensors={"input_ids": ids, "attention_mask": attn, "loss_mask": mask,
                                        "hidden_state": aux, "target": final},
                               metadata={"target_repr": "hidden_state"})
            out = strategy.forward_loss(batch)
            out.loss.backward()
            optimizer.step()  # clips, steps the fp32 masters, copies them back and clears the grads
            step += 1
            real_tokens += int(attn.sum())
            if step % 50 == 0:
                acc = [round(float(a), 3) for a in out.metrics["acces"]]
                print(f"step {step} loss {float(out.loss):.4f} acc {acc} {clock.wall():.0f} s", flush=True)
            if clock.due():
                clock.record(save, step, real_tokens)
                if clock.done():
                    break


if __name__ == "__main__":
    main()
