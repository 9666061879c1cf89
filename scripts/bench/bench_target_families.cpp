// Target forward benchmark of the hybrid linear-attention and MLA families (docs/benchmarks.md): (a) real
// tokens/s of random Qwen3.5 (Gated DeltaNet layers among gated full attention), Qwen3.5-MoE and DeepSeek-V3
// (multi-head latent attention, with dense layers only and with its experts) against a dense Qwen3 of the same
// active parameters per token; (b) the peak resident memory and time of one long row through Gated DeltaNet
// layers and through full-attention ones, each (layers, T) in a process of its own. Run through
// scripts/bench/bench_target_families.sh.
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_target_util.h"
#include "eagle/target/target.h"

using namespace eagle::bench;
using nlohmann::json;

namespace {

constexpr std::int64_t kVocab = 32000, kHidden = 512, kLayers = 4, kBatch = 4, kSeq = 512;

// The dense Qwen3 of bench_target.cpp's moe_versus_dense: 4 layers of hidden 512, 8 heads / 4 key/value heads
// of 64, MLP intermediate 1536, vocabulary 32000, untied (45.36 M parameters, all active).
json dense_qwen3() {
  return {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", kVocab},
          {"hidden_size", kHidden}, {"num_hidden_layers", kLayers}, {"num_attention_heads", 8},
          {"num_key_value_heads", 4}, {"head_dim", 64}, {"intermediate_size", 1536}, {"rms_norm_eps", 1e-6},
          {"max_position_embeddings", 4096}, {"rope_theta", 1e6}, {"torch_dtype", "float32"},
          {"tie_word_embeddings", false}};
}

// Qwen3.5 on the dense's embedding, heads and LM head: layers 0-2 Gated DeltaNet, layer 3 gated full attention
// (full_attention_interval 4, as shipped), the Gated DeltaNet as wide against H as Qwen3-Next-80B-A3B's
// (key heads 4 x 128 = H, value heads 8 x 128 = 2 H; conv kernel 4). Each of its layers holds 2.11 M parameters
// against 0.79 M of a GQA attention, so the MLP narrows to intermediate 845 for the same active total.
json qwen3_5(bool moe) {
  auto c = dense_qwen3();
  c["architectures"] = {moe ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM"};
  c["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  c["layer_types"] = {"linear_attention", "linear_attention", "linear_attention", "full_attention"};
  c["linear_conv_kernel_dim"] = 4;
  c["linear_num_key_heads"] = 4;
  c["linear_key_head_dim"] = 128;
  c["linear_num_value_heads"] = 8;
  c["linear_value_head_dim"] = 128;
  if (!moe) {
    c["intermediate_size"] = 845;
    return c;
  }
  // 16 experts of 280, 2 per token, and the gated shared expert of 280: 3 x 280 of active MLP, the
  // dense Qwen3.5's 845 less the router (16 x H) and the shared expert's gate (H).
  c.erase("intermediate_size");
  c["num_experts"] = 16;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 280;
  c["shared_expert_intermediate_size"] = 280;
  return c;
}

// DeepSeek-V3's multi-head latent attention on the same 8 heads: q through q_lora_rank 256, keys and values from
// the latent of kv_lora_rank 128 plus one shared RoPE key of 32, qk_nope 64, v 64 (0.80 M parameters a layer).
// moe false: every layer dense (first_k_dense_replace 4), intermediate 1525; true: layer 0 dense (intermediate
// 1521 = 3 x 507, DeepSeek-V3's dense width is its active experts' too), layers 1-3 with 16 routed experts of
// 507 (sigmoid routing, 4 groups, 2 kept, top 2) beside 1 shared expert of 507.
json deepseek_v3(bool moe) {
  auto c = dense_qwen3();
  c.erase("head_dim");
  c["architectures"] = {"DeepseekV3ForCausalLM"};
  c["model_type"] = "deepseek_v3";
  c["num_key_value_heads"] = 8;
  c["q_lora_rank"] = 256;
  c["kv_lora_rank"] = 128;
  c["qk_nope_head_dim"] = 64;
  c["qk_rope_head_dim"] = 32;
  c["v_head_dim"] = 64;
  c["num_nextn_predict_layers"] = 0;
  c["n_routed_experts"] = 16;
  c["num_experts_per_tok"] = 2;
  c["n_group"] = 4;
  c["topk_group"] = 2;
  c["n_shared_experts"] = 1;
  c["moe_intermediate_size"] = 507;
  c["routed_scaling_factor"] = 2.5;
  c["norm_topk_prob"] = true;
  c["first_k_dense_replace"] = moe ? 1 : kLayers;
  c["intermediate_size"] = moe ? 3 * 507 : 1525;
  return c;
}

// (a): each model's tokens/s on batch 4 x 512, the dense Qwen3 first and again last (the drift of a
// shared machine between the two is the noise to read the others against).
void families_versus_dense(int reps) {
  // The embedding and LM head (2 V H) and the final norm, the same in every model: active parameters
  // beyond them are the decoder layers' own.
  const double ends = 2.0 * kVocab * kHidden + kHidden;
  const std::pair<const char*, json> models[] = {
      {"dense Qwen3", dense_qwen3()},
      {"Qwen3.5 (3 Gated DeltaNet + 1 gated attention)", qwen3_5(false)},
      {"Qwen3.5-MoE (the same, 16 experts top 2 + shared)", qwen3_5(true)},
      {"DeepSeek-V3 MLA, dense MLPs", deepseek_v3(false)},
      {"DeepSeek-V3 MLA + MoE (16 routed top 2 + 1 shared)", deepseek_v3(true)},
      {"dense Qwen3 (again)", dense_qwen3()}};
  std::cout << fmt::format("threads {}; batch {} x {} real tokens, fp32, teacher over 8000 draft ids\n",
                           torch::get_num_threads(), kBatch, kSeq);
  ForwardRate dense;
  for (const auto& [name, config] : models) {
    const auto r = forward_rate(config, reps, kBatch, kSeq);
    if (dense.active == 0) dense = r;
    std::cout << fmt::format(
        "{}: {:.2f} M parameters, {:.3f} M active ({:.3f} M in the layers, {:+.2f}% against the dense's), "
        "{:.0f} tokens/s (median of {}, {:.2f}x the dense)\n",
        name, r.params / 1e6, r.active / 1e6, (r.active - ends) / 1e6,
        100.0 * (r.active - ends - (dense.active - ends)) / (dense.active - ends), r.tokens_per_s, reps,
        r.tokens_per_s / dense.tokens_per_s);
  }
}

// (b): one row of T tokens through 2 layers of hidden 256 (vocabulary 4096, MLP intermediate 768, untied),
// either both Gated DeltaNet (Qwen3.5 layer_types linear_attention; key heads 2 x 64, value heads 4 x 64)
// or both full causal attention (Qwen3, 4 heads / 2 key/value heads of 64), teacher over 1024 draft ids,
// default target_chunk_tokens (4096). Allocations of 1 MiB or more are mapped and unmapped on their own
// so that the resident peak follows the live tensors (as bench_target.cpp's long_row_memory).
void long_row(const std::string& kind, std::int64_t T) {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  json c = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", 4096},
            {"hidden_size", 256}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"head_dim", 64}, {"intermediate_size", 768}, {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 32768},
            {"rope_theta", 1e6}, {"torch_dtype", "float32"}, {"tie_word_embeddings", false}};
  if (kind == "gdn") {
    c["architectures"] = {"Qwen3_5ForCausalLM"};
    c["model_type"] = "qwen3_5_text";
    c["layer_types"] = {"linear_attention", "linear_attention"};
    c["linear_conv_kernel_dim"] = 4;
    c["linear_num_key_heads"] = 2;
    c["linear_key_head_dim"] = 64;
    c["linear_num_value_heads"] = 4;
    c["linear_value_head_dim"] = 64;
  }
  torch::manual_seed(0);
  auto m = eagle::target::TargetModel::random(config_of(c), torch::kFloat32, torch::kCPU);
  const eagle::target::TeacherSpec teacher{torch::arange(0, 4096, 4), 1024};
  eagle::target::TargetBatch row{torch::randint(4096, {1, T}), torch::arange(T).unsqueeze(0),
                                torch::zeros({1, T}, torch::kInt64), {false, 0}};
  const double base = rss_mib();
  reset_peak();
  const auto t0 = Clock::now();
  auto out = m.forward(row, teacher);
  const double secs = seconds_since(t0);
  const double peak = peak_rss_mib() - base;
  const double outputs = double(out.aux_hidden.nbytes() + out.final_hidden.nbytes() + out.teacher_logits.nbytes() +
                                out.target_argmax.nbytes()) / (1 << 20);
  std::cout << fmt::format(
      "{}, one row of {} tokens: peak RSS increase {:.0f} MiB (outputs {:.0f} MiB, working {:.0f} MiB = "
      "{:.1f} KiB a token), {:.2f} s\n",
      kind == "gdn" ? "2 Gated DeltaNet layers" : "2 full-attention layers", T, peak, outputs, peak - outputs,
      (peak - outputs) * 1024.0 / double(T), secs);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 4 && std::string(argv[2]) == "long") {  // `1 long gdn|full T`: one row alone in this process
    const std::string kind = argv[3];
    const auto T = std::atoll(argv[4]);
    if ((kind != "gdn" && kind != "full") || T < 1 || T > 32768) {
      std::cerr << "usage: eagle_bench_target_families 1 long gdn|full T (1 <= T <= 32768)\n";
      return 2;
    }
    long_row(kind, T);
    return 0;
  }
  families_versus_dense(argc > 1 ? std::max(1, std::atoi(argv[1])) : 3);
  return 0;
}
