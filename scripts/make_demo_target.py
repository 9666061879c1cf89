#!/usr/bin/env python3
"""Trains the demo target: a byte-level BPE tokenizer and a small Llama on the Alpaca demo data
(data/alpaca_5000.json.gz in the repo).

No model hub is reachable and a random target makes acceptance meaningless, so the demo trains its
own target on CPU in minutes and saves it in the Hugging Face layout (config.json,
model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json), together with
the pretokenized dataset alpaca.jsonl ({"input_ids", "loss_mask"} per line, the same prompt
template as the training). Training runs a fixed number of steps (never a time budget), so the
target is the same on every machine. A DONE stamp written last holds every setting, their hash and
the steps trained: a second run with the same settings exits at once, a cached target whose stamp
differs is rebuilt, and --check says whether the cache is the target these settings describe.

Run with the project's venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_demo_target.py
"""
import argparse
import gzip
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

SCRIPT_VERSION = 2  # bump when the output changes for the same settings (2: fixed steps, no time budget)
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"  # ids 0, 1, 2 (trainer order)

# Full demo: 800 steps (docs/demo.md has the times on 2 cores, idle and busy); --quick: a smoke test
# (< 1 minute). The steps are fixed: a slow machine takes longer, never trains less.
FULL = dict(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            tie_word_embeddings=False, max_steps=800, batch_tokens=1024, lr=2e-3,
            min_lr_ratio=0.1, warmup_steps=20, weight_decay=0.1, max_grad_norm=1.0, log_every=10)
QUICK = dict(FULL, vocab_size=1024, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=1, max_steps=40, batch_tokens=1024,
             warmup_steps=5, log_every=5)

SAMPLE_PROMPTS = [
    ("Give three tips for staying healthy.", ""),
    ("Rewrite the following sentence in the passive voice.", "The cat chased the mouse."),
    ("Name three primary colors.", ""),
]


def format_example(instruction, input_text, output=None):
    """The one prompt template (training, alpaca.jsonl, samples): returns (prompt, response).

    The model sees <|bos|> prompt response <|eos|>; only response + eos carry loss_mask 1.
    """
    prompt = "### Instruction:\n" + instruction.strip() + "\n"
    if input_text.strip():
        prompt += "### Input:\n" + input_text.strip() + "\n"
    prompt += "### Response:\n"
    return prompt, (output or "").strip()


def encode_example(tok, record):
    """Ids and loss mask of one record: [bos] + prompt (mask 0) + response + [eos] (mask 1)."""
    prompt, response = format_example(record["instruction"], record["input"], record["output"])
    p = tok.encode(prompt, add_special_tokens=False).ids
    r = tok.encode(response, add_special_tokens=False).ids
    ids = [tok.token_to_id(BOS)] + p + r + [tok.token_to_id(EOS)]
    mask = [0] * (1 + len(p)) + [1] * (len(r) + 1)
    return ids, mask


def cpu_has_bf16():
    """bf16 autocast pays only with native bf16 matmuls (AVX512-BF16, AMX); else it is slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def load_records(path):
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            records = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"error: {path}: cannot read the Alpaca data: {e}\n"
                 "hint: pass --data path/to/alpaca_5000.json")
    for i, r in enumerate(records):
        for key in ("instruction", "input", "output"):
            if not isinstance(r.get(key), str):
                sys.exit(f"error: {path}: record {i}, field \"{key}\": expected a string, "
                         f"found {type(r.get(key)).__name__}")
    return records


def train_tokenizer(records, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(("".join(format_example(r["instruction"], r["input"], r["output"]))
                             for r in records), trainer=trainer)
    # tokenizer(text) gives what the model saw at the start of a sample: <|bos|> first.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return tok


def make_batches(lengths, batch_tokens):
    """Index groups of similar length (sorted), each padded size rows x longest <= batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def lr_at(progress, s):
    """Linear warmup over warmup_steps, then cosine to min_lr_ratio * lr as progress goes 0 -> 1."""
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return s["lr"] * (s["min_lr_ratio"] + (1 - s["min_lr_ratio"]) * cosine)


def train_model(samples, s, tok, log):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(
        vocab_size=s["vocab_size"], hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"], num_hidden_layers=s["num_hidden_layers"],
        num_attention_heads=s["num_attention_heads"], num_key_value_heads=s["num_key_value_heads"],
        max_position_embeddings=s["max_position_embeddings"], rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=s["tie_word_embeddings"], bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS), pad_token_id=tok.token_to_id(PAD))
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters, {s['num_hidden_layers']} layers, hidden "
        f"{s['hidden_size']}, heads {s['num_attention_heads']}/{s['num_key_value_heads']} kv")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=s["lr"], betas=(0.9, 0.95), eps=1e-8)
    batches = make_batches([len(ids) for ids, _ in samples], s["batch_tokens"])
    rng = random.Random(s["seed"])
    pad_id = tok.token_to_id(PAD)
    t0, step, epoch, queue = time.time(), 0, 0, []
    window, history, losses, tokens_seen = [], [], [], 0
    model.train()
    while step < s["max_steps"]:
        if not queue:  # a new epoch: the same length groups, a new seeded order
            queue = list(batches)
            rng.shuffle(queue)
            epoch += 1
        group = queue.pop()
        width = max(len(samples[i][0]) for i in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(group), width), dtype=torch.long)
        for row, i in enumerate(group):  # right padding; labels -100 on padding
            ids[row, :len(samples[i][0])] = torch.tensor(samples[i][0])
            attn[row, :len(samples[i][0])] = 1
        labels = ids.masked_fill(attn == 0, -100)
        # The schedule follows the steps alone: the same target on an idle or a busy machine.
        lr = lr_at(step / s["max_steps"], s) * min(1.0, (step + 1) / s["warmup_steps"])
        for g in opt.param_groups:
            g["lr"] = lr
        # bf16 matmuls (fp32 master weights and loss): ~1.5x the fp32 speed on AVX512-BF16 CPUs.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=s["bf16_autocast"]):
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s["max_grad_norm"])
        opt.step()
        step += 1
        tokens_seen += int(attn.sum())
        window.append(loss.item())
        losses.append(window[-1])
        if step % s["log_every"] == 0 or step == s["max_steps"]:
            elapsed = time.time() - t0
            mean = sum(window) / len(window)
            history.append((step, mean))
            log(f"step {step}/{s['max_steps']} epoch {epoch} loss {mean:.4f} lr {lr:.2e} "
                f"grad_norm {float(grad_norm):.2f} tokens/s {tokens_seen / elapsed:.0f} "
                f"elapsed {elapsed:.0f}s")
            window = []
    if window:
        history.append((step, sum(window) / len(window)))
    model.eval()
    return model, dict(steps=step, epochs=round(step / len(batches), 2), tokens_seen=tokens_seen,
                       train_seconds=round(time.time() - t0, 1), stop_reason="max_steps",
                       # mean of the last 50 steps: batches of different lengths differ a lot
                       final_loss=round(sum(losses[-50:]) / max(1, len(losses[-50:])), 4),
                       loss_history=[[st, round(lo, 4)] for st, lo in history],
                       parameters=n_params)


def greedy_samples(model, tok, max_new_tokens):
    import torch
    out = []
    for instruction, input_text in SAMPLE_PROMPTS:
        prompt, _ = format_example(instruction, input_text)
        ids = torch.tensor([tok.encode(prompt).ids])  # <|bos|> + prompt (post-processor)
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_new_tokens, eos_token_id=tok.token_to_id(EOS),
                                 pad_token_id=tok.token_to_id(PAD))
        response = tok.decode(gen[0, ids.shape[1]:].tolist(), skip_special_tokens=True)
        out.append({"instruction": instruction, "input": input_text, "response": response})
    return out


def save_all(tmp, model, tok, samples, summary, marker):
    from transformers import GenerationConfig, PreTrainedTokenizerFast
    model.save_pretrained(tmp, safe_serialization=True)
    GenerationConfig(bos_token_id=tok.token_to_id(BOS), eos_token_id=tok.token_to_id(EOS),
                     pad_token_id=tok.token_to_id(PAD), do_sample=False).save_pretrained(tmp)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                            model_max_length=model.config.max_position_embeddings,
                            clean_up_tokenization_spaces=False).save_pretrained(tmp)
    # transformers 5 names the class TokenizersBackend; 4.x only knows this (5.x maps it).
    tc = json.loads((tmp / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    (tmp / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    with open(tmp / "alpaca.jsonl", "w", encoding="utf-8") as f:
        for ids, mask in samples:
            f.write(json.dumps({"input_ids": ids, "loss_mask": mask}, separators=(",", ":")) + "\n")
    (tmp / "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with open(tmp / "DONE", "w") as f:  # last: a folder without it is incomplete
        f.write(json.dumps(marker) + "\n")
        f.flush()
        os.fsync(f.fileno())


def stamp_differs(done, settings_hash, recipe):
    """'' when the DONE stamp is of these settings and of a training that ran all its steps, else why
    not (a target of version 1 was trained to a time budget and may have stopped early)."""
    if not done.is_file():
        return "no DONE stamp"
    try:
        stamp = json.loads(done.read_text())
    except json.JSONDecodeError:
        return "DONE is not JSON"
    if stamp.get("version") != SCRIPT_VERSION:
        return f"made by version {stamp.get('version')} of this script, this is {SCRIPT_VERSION}"
    if stamp.get("settings_hash") != settings_hash:
        old = stamp.get("settings", {})
        changed = sorted(k for k in set(old) | set(recipe) if old.get(k) != recipe.get(k))
        return "other settings: " + ", ".join(
            f"{k} {old.get(k)!r} -> {recipe.get(k)!r}" for k in changed[:4]) if changed else "other settings"
    if stamp.get("steps") != recipe["max_steps"]:
        return f"trained {stamp.get('steps')} of {recipe['max_steps']} steps"
    return ""


def main():
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=None,
                    help="target folder (default ~/.cache/eagle-train/demo-target[-quick])")
    ap.add_argument("--data", type=Path, default=None,
                    help="Alpaca JSON, optionally .gz (default data/alpaca_5000.json.gz in the repo)")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny model and few steps (< 1 minute), to test the script")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=None,
                    help="override the preset's step count (part of the settings: another target)")
    ap.add_argument("--fp32", action="store_true",
                    help="train in fp32 (default: bf16 autocast where the CPU has native bf16)")
    ap.add_argument("--force", action="store_true",
                    help="rebuild even when DONE matches; replace a folder without DONE")
    ap.add_argument("--check", action="store_true",
                    help="build nothing: exit 0 when the folder holds the target these settings "
                         "describe (its DONE stamp), else 1 naming what differs")
    args = ap.parse_args()

    s = dict(QUICK if args.quick else FULL, seed=args.seed, threads=args.threads)
    s["bf16_autocast"] = cpu_has_bf16() and not args.fp32
    if args.max_steps is not None:
        s["max_steps"] = args.max_steps
    data = (args.data or root / "data" / "alpaca_5000.json.gz").resolve()
    out = (args.output or Path.home() / ".cache/eagle-train" /
           ("demo-target-quick" if args.quick else "demo-target")).expanduser().resolve()
    if not data.is_file():
        sys.exit(f"error: {data}: the Alpaca data file is missing\n"
                 "hint: pass --data path/to/alpaca_5000.json")
    raw = data.read_bytes()
    data_sha = hashlib.sha256(gzip.decompress(raw) if data.suffix == ".gz" else raw).hexdigest()
    settings = dict(s, script_version=SCRIPT_VERSION, data_sha256=data_sha,
                    template="### Instruction/### Input/### Response, bos + eos")
    # Every setting is the recipe but the logging interval; the stamp (DONE) carries them, their
    # hash and the steps actually trained, so a cached target is known to be the one they describe.
    recipe = {k: v for k, v in settings.items() if k != "log_every"}
    settings_hash = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    marker = {"script": "make_demo_target.py", "version": SCRIPT_VERSION,
              "settings_hash": settings_hash, "settings": recipe}

    done = out / "DONE"
    why = stamp_differs(done, settings_hash, recipe)
    if args.check:
        if why:
            sys.exit(f"error: {out}: not the demo target these settings describe: {why}\n"
                     "hint: run scripts/make_demo_target.py with the same options to rebuild it")
        print(f"demo target up to date: {out} (settings {settings_hash}, {recipe['max_steps']} steps)")
        return
    if done.is_file() and not args.force:
        if not why:
            print(f"demo target up to date: {out} (settings {settings_hash}, {recipe['max_steps']} steps)")
            return
        print(f"demo target at {out} is not the one these settings describe ({why}): rebuilding")
    elif out.exists() and not done.is_file() and not args.force:
        sys.exit(f"error: {out}: exists but holds no DONE marker of this script; not overwriting it\n"
                 "hint: remove it, choose another --output, or pass --force")

    t_start = time.time()
    log = lambda msg: print(f"[{time.time() - t_start:6.1f}s] {msg}", flush=True)
    import numpy as np
    import torch
    from transformers import set_seed
    torch.set_num_threads(s["threads"])
    set_seed(s["seed"])
    np.random.seed(s["seed"])
    random.seed(s["seed"])

    records = load_records(data)
    log(f"data: {data} ({len(records)} records, sha256 {data_sha[:12]})")
    tok = train_tokenizer(records, s["vocab_size"])
    log(f"tokenizer: byte-level BPE, vocabulary {tok.get_vocab_size()}")
    samples = [encode_example(tok, r) for r in records]
    too_long = [i for i, (ids, _) in enumerate(samples) if len(ids) > s["max_position_embeddings"]]
    limit = s["max_position_embeddings"]
    samples = [(ids[:limit], m[:limit]) for ids, m in samples]
    n_tok = sum(len(ids) for ids, _ in samples)
    n_resp = sum(sum(m) for _, m in samples)
    log(f"samples: {len(samples)}, {n_tok} tokens, {n_resp} response tokens, "
        f"longest {max(len(ids) for ids, _ in samples)}, truncated {len(too_long)}")
    log(f"training: {s['max_steps']} steps of <= {s['batch_tokens']} padded tokens, "
        f"{s['threads']} threads, seed {s['seed']}, "
        f"{'bf16 autocast' if s['bf16_autocast'] else 'fp32'}")

    model, result = train_model(samples, s, tok, log)
    log(f"trained: {result['steps']} steps ({result['epochs']} epochs, "
        f"stop: {result['stop_reason']}), "
        f"final loss {result['final_loss']}")
    gen = greedy_samples(model, tok, 32 if args.quick else 64)
    summary = dict(result, settings=settings, settings_hash=settings_hash, samples=gen,
                   total_tokens=n_tok, samples_in_dataset=len(samples))
    marker = dict(marker, steps=result["steps"], final_loss=result["final_loss"],
                  train_seconds=result["train_seconds"])

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_all(tmp, model, tok, samples, summary, marker)
        if out.exists():  # our own stale cache (or --force): move aside, then drop once replaced
            out.rename(old)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)

    print("\n=== demo target summary ===")
    print(f"model:       {result['parameters'] / 1e6:.2f}M parameters ({s['num_hidden_layers']} "
          f"layers, hidden {s['hidden_size']}, vocab {s['vocab_size']})")
    print(f"training:    {result['steps']} steps, {result['epochs']} epochs, "
          f"{result['tokens_seen']} tokens, {result['train_seconds']}s, stop: {result['stop_reason']}")
    print(f"final loss:  {result['final_loss']}")
    for g in gen:
        print(f"sample:      {g['instruction']!r} {g['input']!r}\n  -> {g['response']!r}")
    print(f"wall time:   {time.time() - t_start:.0f}s")
    print(f"target:      {out}")
    print(f"dataset:     {out / 'alpaca.jsonl'}")


if __name__ == "__main__":
    main()
