#!/usr/bin/env python3
"""speculators 0.9.0's own trainer (EAGLE-3 or DFlash) on CPU, for scripts/bench/real_target.sh (issue 52).

Runs speculators.train.cli.main (the `speculators train` command: TrainConfig from command-line flags, its draft
builder, its vocabulary mapping from token_freq.pt, its packed data loader over an offline data folder, its
Trainer and its loss) with four CPU adaptations, nothing else changed:

  - the Trainer moves the model and batches to `get_local_rank()` (0: cuda:0): patched to "cpu";
  - torch.accelerator.synchronize (its step timer) is a no-op without an accelerator;
  - Trainer.run_training is replaced by a loop that stops at the wall-clock budget: epochs of Trainer.train_epoch,
    whose per-step callback saves a head at each mark k * BUDGET_S / SAVES (scripts/bench/peers/common.py) the way
    speculators' checkpointer does (save_pretrained of the draft, its config, and the optimizer state), in float32
    (speculators' checkpointer defaults to bfloat16; float32 keeps the evaluation free of that rounding);
  - --draft-attn-impl sdpa (flex attention, the default, has no backward on CPU) and --loss-implementation eager
    (the default, fused, is a Triton GPU kernel);
  - EAGLE-3 with --no-norm-before-residual (its default is true, a layer `eagle-train eval` does not read);
  - DFlash with --sliding-window-non-causal (non-causal blocks: its default, block-causal, is not read) and
    --full-attention-indices 0..4 (its default, sliding windows of 2048 tokens, computes the same on these short
    samples but is a layout `eagle-train eval` does not read);
  - DFlash over the target's whole vocabulary (--draft-vocab-size = the target's; a reduced draft vocabulary gives the
    draft its own lm_head and d2t, which `eagle-train eval` does not read; eagle-train's DFlash has none either);
  - no validation epochs (the benchmark measures every head with `eagle-train eval` on held-out prompts).

The data folder is speculators' offline layout (prepare_data's Arrow dataset, token_freq.pt, hidden_states/hs_<i>
with the target layers and the last layer), written by real_target.sh's data stage with
scripts/make_speculators_fixture.py. Real tokens are the batches' tokens with a document id (not packing padding).

  python scripts/bench/peers/speculators_train.py --type eagle3|dflash --model TARGET --data SPEC_DATA --out OUT \
      [--total-seq-len N] [--lr 1e-3] [--ttt 7] [--draft-vocab 8192] [--threads 2] [--optimizer adamw] \
      [-- more speculators train flags]
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock  # noqa: E402


class _Stop(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--type", choices=["eagle3", "dflash"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--total-seq-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ttt", type=int, default=7)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dflash-layers", type=int, default=5, help="speculators' DFlash draft layers (its default, 5)")
    ap.add_argument("extra", nargs="*", help="more `speculators train` flags, after --")
    args = ap.parse_args()
    os.environ.pop("LOCAL_RANK", None)
    import torch
    torch.set_num_threads(args.threads)
    clock = Clock(args.out)

    if not torch.accelerator.is_available():
        torch.accelerator.synchronize = lambda *a, **k: None
    import speculators.train.trainer as trainer_mod
    from speculators.train.checkpointer import convert_float_dtype, patch_config_dtype
    from speculators.train.cli import main as speculators_main
    from speculators.train.config import TrainConfig

    trainer_mod.get_local_rank = lambda: "cpu"
    real_tokens = [0]

    def run_training(self):
        self.device_type = "cpu"
        raw = self.model

        def count(_mod, _args, kwargs):
            doc = kwargs.get("document_ids")
            ids = kwargs.get("input_ids")
            real_tokens[0] += int((doc != -1).sum()) if doc is not None else int(ids.numel())
        raw.register_forward_pre_hook(count, with_kwargs=True)

        def save(d):
            raw.save_pretrained(d, state_dict=convert_float_dtype(raw.state_dict(), torch.float32))
            patch_config_dtype(Path(d) / "config.json", torch.float32)
            torch.save([opt.state_dict() for opt in self.optimizers], os.path.join(d, "optimizer_state_dict.pt"))

        def on_step():
            if self.global_step % 50 == 0:
                print(f"step {self.global_step} {clock.wall():.0f} s {real_tokens[0]} real tokens", flush=True)
            if clock.due():
                clock.record(save, self.global_step, real_tokens[0])
                if clock.done():
                    raise _Stop()

        epoch = 0
        try:
            while not clock.done():
                self.train_epoch(epoch, step_callback=on_step)
                epoch += 1
        except _Stop:
            pass

    trainer_mod.Trainer.run_training = run_training

    draft_vocab = args.draft_vocab
    if args.type == "dflash":
        # DFlash drafts over the target's whole vocabulary with the target's LM head (DFlash's design, and the only
        # DFlash layout `eagle-train eval` reads: a draft with its own lm_head and d2t is refused); --draft-vocab
        # applies to EAGLE-3 only, as in eagle-train (--draft_vocab_size is refused with --draft dflash)
        import json
        with open(os.path.join(args.model, "config.json")) as f:
            draft_vocab = json.load(f)["vocab_size"]
    flags = [
        "--verifier-name-or-path", args.model, "--data-path", args.data, "--save-path",
        os.path.join(args.out, "speculators"), "--speculator-type", args.type, "--total-seq-len",
        str(args.total_seq_len), "--lr", str(args.lr), "--optimizer", args.optimizer, "--scheduler-type", "none",
        "--hidden-states-dtype", "float32", "--num-workers", "0", "--train-data-ratio", "0.9999",
        "--draft-vocab-size", str(draft_vocab), "--seed", str(args.seed), "--log-dir",
        os.path.join(args.out, "logs"), "--epochs", "1000000",
        # speculators' default draft attention, flex attention, has no backward on CPU; sdpa is its documented
        # choice "for hardware that doesn't support flex attention"
        "--draft-attn-impl", "sdpa",
        # its default loss, "fused", is a Triton GPU kernel; "eager" is the same loss in PyTorch
        "--loss-implementation", "eager",
    ]
    if args.type == "eagle3":
        # speculators' default EAGLE-3 layer normalizes the state before the residual (norm_before_residual true);
        # `eagle-train eval` (like SGLang's and SpecForge's layer) reads only heads without it, so the benchmark
        # trains speculators' EAGLE-3 with it off: the same layer as the other tools' heads
        flags += ["--ttt-steps", str(args.ttt), "--no-norm-before-residual"]
    else:
        # speculators' DFlash layers default to block-causal attention inside a block; `eagle-train eval` reads
        # (and eagle-train trains) non-causal blocks, DFlash's original layout: trained that way here
        # and its layers default to sliding-window attention (window 2048, longer than any sample here, so the same
        # computation as full attention); eagle-train reads full-attention DFlash layers: all layers full here
        flags += ["--sliding-window-non-causal", "--full-attention-indices",
                  *[str(i) for i in range(args.dflash_layers)]]
    flags += args.extra
    print("speculators train " + " ".join(flags), flush=True)
    speculators_main(TrainConfig.resolve(flags))


if __name__ == "__main__":
    main()
