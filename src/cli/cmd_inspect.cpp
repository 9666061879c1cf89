// eagle-train inspect: loads a target model folder (which checks config.json and every tensor),
// reads every weight for NaN/Inf, runs one short forward, and prints the architecture, sizes, dtype,
// the attention kind, layer types, expert routing, shipped MTP layers and the EAGLE-3 aux layers.
#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "eagle/cli/commands.h"
#include "eagle/device/runtime.h"
#include "eagle/model/dtype.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"

namespace eagle::cli {

namespace {

// Each layer's kind, as transformers' layer_types names them: linear_attention (a hybrid's Gated
// DeltaNet), sliding_attention or full_attention.
std::vector<std::string> layer_types(const target::TargetConfig& c) {
  std::vector<std::string> types;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
    types.push_back(c.linear(l) ? "linear_attention" : (c.window(l) > 0 ? "sliding_attention" : "full_attention"));
  return types;
}

std::int64_t sliding_window(const target::TargetConfig& c) {
  std::int64_t w = 0;
  for (auto x : c.attention.layer_windows) w = std::max(w, x);
  return w;
}

std::vector<std::int64_t> dense_layers(const target::TargetConfig& c) {
  std::vector<std::int64_t> ids;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (!c.sparse(l)) ids.push_back(l);
  return ids;
}

// The attention layers' kind: mla (DeepSeek-V3's latent attention), gated (an output gate on a
// hybrid's full-attention layers), else mha or gqa by the key/value head count.
std::string attention_kind(const target::TargetConfig& c) {
  if (c.mla()) return "mla";
  if (c.attention.output_gate) return "gated";
  return c.num_key_value_heads == c.num_attention_heads ? "mha" : "gqa";
}

// How a token's experts are chosen, as the family's router computes it.
std::string routing_name(const target::TargetConfig& c) {
  if (!c.moe.enabled()) return "";
  switch (c.moe.routing) {
    case target::MoeRouting::softmax_topk: return "softmax_topk";
    case target::MoeRouting::topk_softmax: return "topk_softmax";
    case target::MoeRouting::sigmoid_grouped: return "sigmoid_grouped";
    case target::MoeRouting::softmax_grouped: return "softmax_grouped";
    case target::MoeRouting::scaled_softmax_topk: return "scaled_softmax_topk";
  }
  return "";
}

std::string routing_line(const target::TargetConfig& c) {
  std::string s = routing_name(c);
  if (c.moe.routing == target::MoeRouting::sigmoid_grouped)
    s += fmt::format(" (sigmoid scores + correction bias, top {} of {} groups, scaling {})", c.moe.topk_group,
                     c.moe.n_group, c.moe.routed_scaling_factor);
  else if (c.moe.routing == target::MoeRouting::softmax_grouped)
    s += fmt::format(" (softmax scores, top {} of {} groups by their best, scaling {})", c.moe.topk_group,
                     c.moe.n_group, c.moe.routed_scaling_factor);
  else if (c.moe.routing == target::MoeRouting::softmax_topk)
    s += c.moe.norm_topk_prob ? " (renormalised over the chosen)" : " (not renormalised)";
  else if (c.moe.routing == target::MoeRouting::scaled_softmax_topk)
    s += fmt::format(" (normed input times its scale, softmax, renormalised over the chosen, times each expert's "
                     "scale); the dense MLP of intermediate {} beside the experts in every layer",
                     c.intermediate_size);
  if (c.moe.shared_intermediate_size > 0)
    s += fmt::format("; shared expert intermediate {}{}", c.moe.shared_intermediate_size,
                     c.moe.shared_expert_gate ? " with a sigmoid gate" : "");
  return s;
}

// The lines only MoE, MLA, hybrid, windowed or sink models have.
std::string extra_lines(const target::TargetConfig& c, const target::TargetModel& m) {
  std::string s;
  if (c.moe.enabled())
    s += fmt::format(
        "experts:       {} per sparse layer, {} per token, expert intermediate {}; dense MLP layers {}; "
        "active parameters {} ({:.2f} M){}\n"
        "routing:       {}\n",
        c.moe.num_experts, c.moe.experts_per_token, c.moe.intermediate_size, dense_layers(c),
        m.active_parameter_count(), static_cast<double>(m.active_parameter_count()) / 1e6,
        c.quant.method.empty() ? "" : "; stored as " + c.quant.method, routing_line(c));
  if (c.mla())
    s += fmt::format("latent attn:   q_lora_rank {}, kv_lora_rank {}, qk nope/rope head dims {}/{}, v_head_dim {}\n",
                     c.attention.q_lora_rank, c.attention.kv_lora_rank, c.attention.qk_nope_head_dim,
                     c.attention.qk_rope_head_dim, c.attention.v_head_dim);
  if (c.hybrid())
    s += fmt::format("linear attn:   Gated DeltaNet, {} key heads x {}, {} value heads x {}, conv kernel {}\n",
                     c.linear_attention.key_heads, c.linear_attention.key_head_dim, c.linear_attention.value_heads,
                     c.linear_attention.value_head_dim, c.linear_attention.conv_kernel);
  if (!c.attention.layer_windows.empty() || c.attention.sinks || c.hybrid())
    s += fmt::format("layer types:   {}{}{}\n", layer_types(c),
                     sliding_window(c) > 0 ? fmt::format(" (sliding window {})", sliding_window(c)) : "",
                     c.attention.sinks ? ", attention sinks" : "");
  // GLM-4.7-Flash's: vLLM 0.32.0 serves model.layers.0 in their place, so --draft mtp refuses them (head/mtp/config.h).
  if (c.num_mtp_layers > 0)
    s += fmt::format("mtp layers:    {} shipped (not loaded by the target; --draft mtp {})\n", c.num_mtp_layers,
                     c.family == target::Family::glm4_moe_lite ? "refuses them" : "fine-tunes them");
  return s;
}

}  // namespace

void run_inspect(const config::Options& opts, const Invocation& argv) {
  auto m = target::load_target(opts, device::resolve_device(opts.device));
  const auto& c = m.config();

  // load_target refused NaN or Inf weights by name.
  // A forward over a few tokens proves the weights compute (a mapping beyond the file, a NaN).
  const std::int64_t T = std::min<std::int64_t>(4, c.vocab_size);
  auto ids = torch::arange(T).unsqueeze(0);
  auto out = m.forward({ids, torch::arange(T).unsqueeze(0), torch::zeros({1, T}, torch::kInt64)}, {});
  EAGLE_CHECK(torch::isfinite(out.final_hidden).all().item<bool>(),
              Error(ErrorKind::input, "the model computes non-finite hidden states")
                  .file(opts.model_name_or_path).hint("the weights may be corrupt"));

  const std::string dtype = model::dtype_name(m.dtype());
  if (opts.json) {
    nlohmann::ordered_json j = {
        {"model", opts.model_name_or_path},
        {"architecture", c.architecture},
        {"model_type", c.model_type},
        {"parameters", m.parameter_count()},
        {"dtype", dtype},
        {"checkpoint_dtype", c.dtype},
        {"num_hidden_layers", c.num_hidden_layers},
        {"hidden_size", c.hidden_size},
        {"intermediate_size", c.intermediate_size},
        {"num_attention_heads", c.num_attention_heads},
        {"num_key_value_heads", c.num_key_value_heads},
        {"head_dim", c.head_dim},
        {"vocab_size", c.vocab_size},
        {"tie_word_embeddings", c.tie_word_embeddings},
        {"attention_bias", c.attention.bias},
        {"qk_norm", c.attention.qk_norm},
        {"rope", {{"type", c.rope.type}, {"theta", c.rope.theta}, {"factor", c.rope.factor}}},
        {"max_position_embeddings", c.max_position_embeddings},
        {"aux_hidden_state_layer_ids", m.aux_layer_ids()},
        {"eos_token_ids", c.eos_token_ids},
        {"active_parameters", m.active_parameter_count()},
        {"experts", c.moe.num_experts},
        {"experts_per_token", c.moe.experts_per_token},
        {"moe_intermediate_size", c.moe.intermediate_size},
        {"dense_layers", dense_layers(c)},
        {"quantization", c.quant.method.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(c.quant.method)},
        {"layer_types", layer_types(c)},
        {"sliding_window", sliding_window(c)},
        {"attention_sinks", c.attention.sinks},
        {"attention_kind", attention_kind(c)},
        {"rotary_dim", c.rope.head_dim},
        {"routing", c.moe.enabled() ? nlohmann::ordered_json(routing_name(c)) : nlohmann::ordered_json()},
        {"n_group", c.moe.n_group},
        {"topk_group", c.moe.topk_group},
        {"routed_scaling_factor", c.moe.routed_scaling_factor},
        {"shared_expert_intermediate_size", c.moe.shared_intermediate_size},
        {"shared_expert_gate", c.moe.shared_expert_gate},
        {"q_lora_rank", c.attention.q_lora_rank},
        {"kv_lora_rank", c.attention.kv_lora_rank},
        {"qk_nope_head_dim", c.attention.qk_nope_head_dim},
        {"qk_rope_head_dim", c.attention.qk_rope_head_dim},
        {"v_head_dim", c.attention.v_head_dim},
        {"linear_attention_layers",
         std::count(c.linear_attention.layers.begin(), c.linear_attention.layers.end(), true)},
        {"mtp_layers", c.num_mtp_layers},
        {"multimodal", c.multimodal},
        {"checkpoint_ok", true},
    };
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format(
      "model:         {}\n"
      "architecture:  {} (model_type {})\n"
      "parameters:    {} ({:.2f} M)\n"
      "dtype:         {} (checkpoint {})\n"
      "layers:        {}, hidden {}, intermediate {}\n"
      "attention:     {}, {} heads, {} key/value heads, head_dim {}{}{}{}\n"
      "vocabulary:    {}{}\n"
      "rope:          {} (theta {}, factor {}), max positions {}\n"
      "aux layers:    {} (input-of-layer ids, hidden_states[id])\n"
      "{}"
      "checkpoint:    ok (every tensor present with the right shape and finite; a forward is finite)\n",
      opts.model_name_or_path, c.architecture, c.model_type, m.parameter_count(),
      static_cast<double>(m.parameter_count()) / 1e6, dtype, c.dtype, c.num_hidden_layers, c.hidden_size,
      c.intermediate_size, attention_kind(c), c.num_attention_heads, c.num_key_value_heads, c.head_dim,
      c.attention.bias ? ", q/k/v bias" : "", c.attention.qk_norm ? ", q/k norm" : "",
      c.rope.head_dim < c.head_dim && !c.mla() ? fmt::format(", rotary dims {}", c.rope.head_dim) : "", c.vocab_size,
      c.tie_word_embeddings ? " (tied embeddings)" : "", c.rope.type, c.rope.theta, c.rope.factor,
      c.max_position_embeddings, m.aux_layer_ids(), extra_lines(c, m));
}

}  // namespace eagle::cli
