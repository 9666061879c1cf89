// A head's training FLOPs (flops.h), counted from its config and the batch on the host.
#include "eagle/head/flops.h"

#include "eagle/target/flops.h"

namespace eagle::head {

namespace {
constexpr double kTrained = 3, kFrozen = 2;  // forward + backward of a trained and of a frozen matmul
}

double layer_macs(const HeadConfig& c, std::int64_t in_width) {
  const double H = static_cast<double>(c.hidden_size), in = static_cast<double>(in_width);
  const double nh = static_cast<double>(c.num_attention_heads), hd = static_cast<double>(c.head_dim);
  double attention = 0;
  if (c.mla()) {
    attention = in * c.q_lora_rank + c.q_lora_rank * nh * hd + in * (c.kv_lora_rank + c.qk_rope_head_dim) +
                c.kv_lora_rank * nh * (c.qk_nope_head_dim + c.v_head_dim) + nh * c.v_head_dim * H;
  } else {
    attention = in * nh * hd * (c.attn_output_gate ? 2 : 1) + 2 * in * c.num_key_value_heads * hd + nh * hd * H;
  }
  double mlp = 3 * H * static_cast<double>(c.intermediate_size);
  if (c.moe())
    mlp = H * c.moe_router.num_experts + c.moe_router.experts_per_token * 3 * H * c.moe_intermediate_size +
          3 * H * c.shared_intermediate_size + (c.shared_expert_gate ? H : 0);
  return attention + mlp;
}

double attention_key_flops(const HeadConfig& c) {
  const double value = c.mla() ? c.v_head_dim : c.head_dim;
  return 2 * static_cast<double>(c.num_attention_heads) * (static_cast<double>(c.head_dim) + value);
}

double ttt_train_flops(const HeadConfig& c, const data::Batch& b, const torch::Tensor&) {
  const double H = static_cast<double>(c.hidden_size), real = static_cast<double>(b.real_tokens);
  const std::int64_t K = c.steps();
  // The input projection: MTP's eh_proj [e; h] -> H, once per step; EAGLE-1's fc [e; f] -> H, its one step;
  // EAGLE-3's fc over the aux features, once.
  double trained = 0, frozen = 0;
  if (c.mtp()) {
    trained += static_cast<double>(K) * 2 * H * H;
  } else if (c.eagle_version == 1) {
    trained += 2 * H * H;
  } else {
    trained += static_cast<double>(c.aux_layer_ids.size()) * static_cast<double>(c.target_hidden_size) * H;
  }
  // Each step's layers: EAGLE-3's first reads [e; s] (2H), the others H; EAGLE-1 and MTP read H.
  const double first_in = (c.eagle_version == 3 && !c.mtp()) ? 2 * H : H;
  const double layers = layer_macs(c, static_cast<std::int64_t>(first_in)) +
                        static_cast<double>(c.num_layers - 1) * layer_macs(c, c.hidden_size);
  trained += static_cast<double>(K) * layers;
  // The LM head: the draft's own over the draft vocabulary (EAGLE-3), else the target's, frozen.
  const bool own_head = c.eagle_version == 3 && !c.mtp();
  (own_head ? trained : frozen) += static_cast<double>(K) * H * static_cast<double>(c.draft_vocab_size);
  // Step k's queries attend their sample's keys and k diagonal keys (k = 0 .. K-1).
  const double keys = static_cast<double>(K) * target::attended_keys(b) + real * static_cast<double>(K * (K - 1)) / 2;
  const double attention = static_cast<double>(c.num_layers) * attention_key_flops(c) * keys;
  return real * 2 * (kTrained * trained + kFrozen * frozen) + kTrained * attention;
}

double block_train_flops(const HeadConfig& c, const data::Batch& b, const torch::Tensor& extra) {
  const double H = static_cast<double>(c.hidden_size), real = static_cast<double>(b.real_tokens);
  const double L = static_cast<double>(c.num_layers), s = static_cast<double>(c.dflash_block_size);
  const double slots = static_cast<double>(c.steps());
  // Per real token: fc over the target's features, and each layer's keys and values of that context.
  const double context_kv = 2 * H * static_cast<double>(c.num_key_value_heads * c.head_dim);
  const double per_token =
      static_cast<double>(c.aux_layer_ids.size()) * static_cast<double>(c.target_hidden_size) * H + L * context_kv;
  double flops = real * 2 * kTrained * per_token;
  if (!extra.defined() || extra.numel() == 0) return flops;
  // The anchors whose labels (steps() tokens after the anchor) lie in the anchor's sample.
  auto anchors = extra.to(torch::kCPU, torch::kInt64).contiguous();
  const auto* a = anchors.data_ptr<std::int64_t>();
  const std::int64_t n = anchors.size(1), span = c.steps() + 1;
  double blocks = 0, keys = 0;
  for (std::int64_t r = 0; r < anchors.size(0) && r < b.rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t p = a[r * n + j], end = p + span - 1;
      if (p < 0 || end >= b.length) continue;
      const auto doc = b.document_ids[static_cast<std::size_t>(b.at(r, p))];
      if (doc < 0 || b.document_ids[static_cast<std::size_t>(b.at(r, end))] != doc) continue;
      blocks += 1;
      keys += s * (static_cast<double>(b.position_ids[static_cast<std::size_t>(b.at(r, p))]) + s);
    }
  // Each block token through every layer (its own queries, keys and values and the MLP).
  double trained = blocks * s * L * layer_macs(c, c.hidden_size);
  double frozen = blocks * slots * H * static_cast<double>(c.draft_vocab_size);  // the target's LM head rows
  if (c.dspark()) trained += blocks * slots * static_cast<double>(c.dspark_markov_rank * c.draft_vocab_size);
  flops += 2 * (kTrained * trained + kFrozen * frozen) + kTrained * L * attention_key_flops(c) * keys;
  return flops;
}

}  // namespace eagle::head
