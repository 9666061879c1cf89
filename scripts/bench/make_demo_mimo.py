#!/usr/bin/env python3
"""The demo target as a MiMo-architecture target with one MTP layer, for the MTP benchmark
(scripts/bench/bench_mtp.sh, docs/benchmarks.md "MTP fine-tuning").

The demo target (scripts/make_demo_target.py, a Llama) becomes a Qwen2-style MiMo model with the same
function: its q/k/v projections get zero biases (Qwen2 has them), the config says model_type mimo.
The MTP layer model.mtp_layers.0.* (token_layernorm, hidden_layernorm, input_proj, a Qwen2 decoder
layer, final_layernorm: the names MiMo-7B ships) is initialised as transformers initialises a new
layer (normal, std initializer_range; norms 1; biases 0) from a fixed seed: an untrained "shipped"
layer, so the benchmark's step-0 AR is that of a layer that never saw the target.

Usage: make_demo_mimo.py DEMO_TARGET OUTPUT   (the venv's python: torch and safetensors)
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["model_type"] == "llama" and not cfg.get("attention_bias"), "expects the demo Llama target"
    H, I, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    std = cfg.get("initializer_range", 0.02)
    tensors = load_file(str(src / "model.safetensors"))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}.self_attn."
        tensors[p + "q_proj.bias"] = torch.zeros(nq * D)
        tensors[p + "k_proj.bias"] = torch.zeros(nkv * D)
        tensors[p + "v_proj.bias"] = torch.zeros(nkv * D)
    g = torch.Generator().manual_seed(1234)
    normal = lambda *shape: torch.randn(*shape, generator=g) * std
    m = "model.mtp_layers.0."
    tensors.update({
        m + "token_layernorm.weight": torch.ones(H),
        m + "hidden_layernorm.weight": torch.ones(H),
        m + "input_proj.weight": normal(H, 2 * H),
        m + "input_layernorm.weight": torch.ones(H),
        m + "self_attn.q_proj.weight": normal(nq * D, H),
        m + "self_attn.q_proj.bias": torch.zeros(nq * D),
        m + "self_attn.k_proj.weight": normal(nkv * D, H),
        m + "self_attn.k_proj.bias": torch.zeros(nkv * D),
        m + "self_attn.v_proj.weight": normal(nkv * D, H),
        m + "self_attn.v_proj.bias": torch.zeros(nkv * D),
        m + "self_attn.o_proj.weight": normal(H, nq * D),
        m + "post_attention_layernorm.weight": torch.ones(H),
        m + "mlp.gate_proj.weight": normal(I, H),
        m + "mlp.up_proj.weight": normal(I, H),
        m + "mlp.down_proj.weight": normal(H, I),
        m + "final_layernorm.weight": torch.ones(H),
    })
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "model.safetensors.tmp"
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, str(tmp), metadata={"format": "pt"})
    tmp.rename(out / "model.safetensors")
    mimo = {
        "architectures": ["MiMoForCausalLM"], "model_type": "mimo",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": nq, "num_key_value_heads": nkv, "head_dim": D, "hidden_act": "silu",
        "rms_norm_eps": cfg["rms_norm_eps"], "max_position_embeddings": cfg["max_position_embeddings"],
        "rope_theta": cfg["rope_parameters"]["rope_theta"], "rope_scaling": None,
        "vocab_size": cfg["vocab_size"], "tie_word_embeddings": False, "use_sliding_window": False,
        "max_window_layers": cfg["num_hidden_layers"], "attention_dropout": 0.0,
        "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"], "initializer_range": std, "torch_dtype": "float32",
        "num_nextn_predict_layers": 1,
    }
    (out / "config.json").write_text(json.dumps(mimo, indent=2) + "\n")
    for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "alpaca.jsonl"):
        if (src / f).exists():
            shutil.copy(src / f, out / f)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
