#!/usr/bin/env python3
"""Creates the tiny target-model fixtures and their transformers reference outputs.

For each supported family a tiny random model is built with transformers (pinned below), saved with
save_pretrained into tests/fixtures/models/<name>/, and run on fixed inputs; the reference outputs
(hidden states of every layer, logits, greedy continuation) go to
tests/fixtures/reference/<name>.safetensors. The C++ parity tests compare against them. Reruns give
the same tensors; only the order of the __metadata__ keys may change (safetensors writes them from a
hash map).

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_reference_fixtures.py
"""
import json
import math
import pathlib
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file

PINNED = "5.23.0"
if transformers.__version__ != PINNED:
    sys.exit(f"transformers {PINNED} is required (found {transformers.__version__}): "
             f"pip install transformers=={PINNED}")

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
REFS = ROOT / "tests" / "fixtures" / "reference"
CONFIGS = ROOT / "tests" / "fixtures" / "configs"

GREEDY_TOKENS = 8
LEN_A, LEN_B = 11, 7  # the two fixed prompts; B is right-padded to A's length in the padded batch

# name -> (config class, config kwargs). Odd head counts, grouped-query attention, tied and untied
# embeddings, a llama3 rope scaling, q/k/v bias (Qwen2), q/k norm with an explicit head_dim (Qwen3).
FAMILIES = {
    "tiny-llama": (transformers.LlamaConfig, dict(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=1, eos_token_id=2)),
    "tiny-llama3": (transformers.LlamaConfig, dict(
        vocab_size=256, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=3,
        num_key_value_heads=1, rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        bos_token_id=1, eos_token_id=[2, 3])),
    "tiny-mistral": (transformers.MistralConfig, dict(
        vocab_size=256, hidden_size=60, intermediate_size=64, num_hidden_layers=3, num_attention_heads=5,
        num_key_value_heads=1, head_dim=12, rms_norm_eps=1e-6, max_position_embeddings=512,
        sliding_window=None, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=1, eos_token_id=2)),
    "tiny-qwen2": (transformers.Qwen2Config, dict(
        vocab_size=320, hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=3,
        num_key_value_heads=1, rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=True,
        use_sliding_window=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=None, eos_token_id=5)),
    "tiny-qwen3": (transformers.Qwen3Config, dict(
        vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=20, rms_norm_eps=1e-6, max_position_embeddings=512,
        tie_word_embeddings=False, use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=None, eos_token_id=5)),
}


def randomize(model, gen):
    """Weights of realistic scale (transformers' init is 0.02, which makes near-tied logits): linear
    weights N(0, 1/fan_in), biases and norm offsets small, embeddings N(0, 1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))


def run(model, ids, mask=None):
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    return torch.stack(out.hidden_states).float().contiguous(), out.logits.float().contiguous()


def greedy(model, prompt, n):
    """Greedy continuation through transformers' own KV cache (what generate does)."""
    out = model(input_ids=prompt, use_cache=True)
    past, tokens = out.past_key_values, []
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(n):
        tokens.append(nxt)
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat(tokens, 1)


def make(name, cls, kwargs, index):
    torch.manual_seed(1234 + index)
    gen = torch.Generator().manual_seed(1234 + index)
    config = cls(**kwargs)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                          dtype=torch.float32)
    randomize(model, gen)
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    out_dir = MODELS / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    # generation_config.json is not part of the contract and only adds churn.
    (out_dir / "generation_config.json").unlink(missing_ok=True)

    v = config.vocab_size
    ids_a = torch.randint(3, v, (1, LEN_A), generator=gen)
    ids_b = torch.randint(3, v, (1, LEN_B), generator=gen)
    padded = torch.zeros(2, LEN_A, dtype=torch.long)
    padded[0] = ids_a[0]
    padded[1, :LEN_B] = ids_b[0]
    mask = torch.zeros(2, LEN_A, dtype=torch.long)
    mask[0] = 1
    mask[1, :LEN_B] = 1

    ref = {}
    with torch.no_grad():
        ref["a.input_ids"], ref["b.input_ids"] = ids_a, ids_b
        ref["a.hidden_states"], ref["a.logits"] = run(model, ids_a)
        ref["b.hidden_states"], ref["b.logits"] = run(model, ids_b)
        ref["padded.input_ids"], ref["padded.attention_mask"] = padded, mask
        ref["padded.hidden_states"], ref["padded.logits"] = run(model, padded, mask)
        ref["a.greedy"] = greedy(model, ids_a, GREEDY_TOKENS)
        # The same model computed in bf16 by transformers, for the bf16 bound of our forward.
        bf = model.to(torch.bfloat16)
        ref["a.bf16.hidden_states"], ref["a.bf16.logits"] = run(bf, ids_a)
    REFS.mkdir(parents=True, exist_ok=True)
    save_file({k: t.contiguous() for k, t in ref.items()}, str(REFS / f"{name}.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters")


def write_rope_references():
    """Inverse frequencies of the scaled RoPE types from transformers' own functions, for the
    layers test (llama3 is also covered end to end by tiny-llama3)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cases = {
        "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, None),
        "dynamic": ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 300),
        "llama3": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, None),
    }
    out = {}
    for name, (params, seq_len) in cases.items():
        cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=128,
                                       rope_parameters=params)
        inv, scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu", seq_len=seq_len)
        assert scale == 1.0
        out[name] = inv.float().contiguous()
    save_file(out, str(REFS / "rope.safetensors"), metadata={"head_dim": "64", "max_position_embeddings": "128",
                                                             "dynamic_seq_len": "300"})


def write_4x_config():
    """A Llama 3.1-style config in the transformers 4.x spelling, for the config-reading test."""
    CONFIGS.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009], "pretraining_tp": 1, "transformers_version": "4.43.0",
    }
    (CONFIGS / "llama31-4x.json").write_text(json.dumps(cfg, indent=2) + "\n")


if __name__ == "__main__":
    for i, (name, (cls, kwargs)) in enumerate(FAMILIES.items()):
        make(name, cls, kwargs, i)
    write_rope_references()
    write_4x_config()
