// The target's model FLOPs (flops.h): the matmuls of each layer by its kind, from the config alone.
#include "eagle/target/flops.h"

#include <algorithm>
#include <map>

namespace eagle::target {

double attended_keys(const data::Batch& b, std::int64_t window, std::int64_t extra) {
  double keys = 0;
  for (std::size_t i = 0; i < b.document_ids.size(); ++i) {
    if (b.document_ids[i] < 0) continue;
    auto n = static_cast<std::int64_t>(b.position_ids[i]) + 1;
    if (window > 0) n = std::min(n, window);
    keys += static_cast<double>(n + extra);
  }
  return keys;
}

namespace {

// Multiply-adds per token of layer l's attention projections (q, k, v, o; MLA's factored ones).
double attention_macs(const TargetConfig& c, std::int64_t l) {
  const double H = static_cast<double>(c.hidden_size), nh = static_cast<double>(c.num_attention_heads);
  const auto& a = c.attention;
  if (c.mla()) {
    const double q = a.q_lora_rank > 0 ? H * a.q_lora_rank + a.q_lora_rank * nh * c.head_dim : H * nh * c.head_dim;
    return q + H * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * nh * (a.qk_nope_head_dim + a.v_head_dim) +
           nh * a.v_head_dim * H;
  }
  const double hd = static_cast<double>(c.layer_head_dim(l)), kv = static_cast<double>(c.layer_kv_heads_of(l));
  double macs = H * nh * hd * (a.output_gate ? 2 : 1) + nh * hd * H;  // q (and its gate), o
  if (!c.kv_shared(l)) macs += H * kv * hd * (c.values_from_keys(l) ? 1 : 2);
  return macs;
}

// A Gated DeltaNet layer (Qwen3.5, Qwen3-Next): in_proj_qkvz, in_proj_ba, out_proj, and its recurrence
// (the state's update and read, key_head_dim x value_head_dim per value head, two multiply-adds each).
double linear_attention_macs(const TargetConfig& c) {
  const auto& la = c.linear_attention;
  const double H = static_cast<double>(c.hidden_size);
  return H * (2.0 * la.key_dim() + 2.0 * la.value_dim()) + H * 2.0 * la.value_heads +
         static_cast<double>(la.value_dim()) * H + 2.0 * la.value_heads * la.key_head_dim * la.value_head_dim;
}

double mlp_macs(const TargetConfig& c, std::int64_t l) {
  const double H = static_cast<double>(c.hidden_size);
  const double dense = 3 * H * static_cast<double>(c.layer_intermediate(l));
  if (!c.sparse(l)) return dense;
  const auto& m = c.moe;
  double macs = H * m.num_experts + m.experts_per_token * 3 * H * m.intermediate_size +
                3 * H * m.shared_intermediate_size + (m.shared_expert_gate ? H : 0);
  if (c.gemma4.enabled) macs += dense;  // Gemma 4's dense MLP runs beside its experts
  return macs;
}

}  // namespace

double token_flops(const TargetConfig& c) {
  double macs = static_cast<double>(c.hidden_size) * static_cast<double>(c.vocab_size);  // the LM head
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
    macs += (c.linear(l) ? linear_attention_macs(c) : attention_macs(c, l)) + mlp_macs(c, l);
  return 2 * macs;
}

double forward_flops(const TargetConfig& c, const data::Batch& b) {
  // Attention layers grouped by their window, so each distinct window walks the batch once.
  std::map<std::int64_t, double> per_key;  // window -> FLOPs per attended key, summed over its layers
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.linear(l)) continue;
    const double width = c.mla() ? c.head_dim + c.attention.v_head_dim : 2.0 * c.layer_head_dim(l);
    per_key[c.window(l)] += 2 * static_cast<double>(c.num_attention_heads) * width;
  }
  double flops = token_flops(c) * static_cast<double>(b.real_tokens);
  for (const auto& [window, f] : per_key) flops += f * attended_keys(b, window);
  return flops;
}

}  // namespace eagle::target
