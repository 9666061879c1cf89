// The mixture-of-experts fields of config.json (target_config.cpp reads the rest): the expert
// layout and router of each MoE family (transformers' modeling_qwen3_moe, _mixtral, _gpt_oss,
// _qwen3_next, _qwen3_5_moe), DeepSeek-V3 / GLM-4.5's sigmoid-routed grouped top-k with shared experts, and
// DeepSeek-V2's softmax-routed one (_deepseek_v2).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "config_reader.h"
#include "eagle/target/target_config.h"
#include "eagle/util/error.h"

namespace eagle::target {

namespace {

// The defaults of transformers' configs for the sigmoid-routed families (DeepseekV3Config, Glm4MoeConfig,
// Glm4MoeLiteConfig): experts, per token, expert width, scaling, groups kept of groups, dense first layers.
struct SigmoidMoeDefaults {
  std::int64_t experts, per_token, width;
  double scaling;
  std::int64_t groups, kept, dense;
};

SigmoidMoeDefaults sigmoid_moe_defaults(Family f) {
  if (f == Family::deepseek_v3) return {256, 8, 2048, 2.5, 8, 4, 3};
  if (f == Family::glm4_moe) return {128, 8, 1408, 1.0, 1, 1, 1};
  return {64, 4, 1536, 1.8, 1, 1, 1};  // glm4_moe_lite
}

// DeepSeek-V3 and GLM-4.5's mixture of experts (transformers' DeepseekV3MoE, Glm4MoeMoE): n_routed_experts
// behind the sigmoid router with grouped top-k (MoeRouting::sigmoid_grouped), n_shared_experts' MLP beside
// them, dense MLPs (intermediate_size) in the first first_k_dense_replace layers (GLM-4.7-Flash:
// mlp_layer_types, by default the first layer dense).
void read_sigmoid_moe(const Reader& r, TargetConfig& c) {
  const auto d = sigmoid_moe_defaults(c.family);
  namespace lim = model::limits;
  c.moe.num_experts = r.bounded_or("n_routed_experts", d.experts, 1, lim::kMaxExperts);
  c.moe.experts_per_token = r.integer_or("num_experts_per_tok", d.per_token);
  c.moe.intermediate_size = r.bounded_or("moe_intermediate_size", d.width, 1, lim::kMaxSize);
  c.moe.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
  c.moe.routing = MoeRouting::sigmoid_grouped;
  c.moe.routing_weights_fp32 = true;  // the fp32 router's weights multiply each expert's output before the cast
  c.moe.routed_scaling_factor = r.number_in("routed_scaling_factor", d.scaling, 1e-6, 1e12);
  c.moe.n_group = r.bounded_or("n_group", d.groups, 1, lim::kMaxExperts);
  c.moe.topk_group = r.bounded_or("topk_group", d.kept, 1, lim::kMaxExperts);
  EAGLE_CHECK(c.moe.topk_group <= c.moe.n_group, r.bad("topk_group", "more groups kept than there are")
                                                     .expected(fmt::format("1..{} (n_group)", c.moe.n_group))
                                                     .found(std::to_string(c.moe.topk_group)));
  // Each group's score is the sum of its two best experts (topk(2) per group), so a group holds at least two.
  EAGLE_CHECK(c.moe.num_experts % c.moe.n_group == 0 && c.moe.num_experts / c.moe.n_group >= 2,
              r.bad("n_group", "the experts must split into groups of at least two")
                  .found(fmt::format("{} experts in {} groups", c.moe.num_experts, c.moe.n_group)));
  const auto candidates = c.moe.topk_group * (c.moe.num_experts / c.moe.n_group);
  EAGLE_CHECK(c.moe.experts_per_token >= 1 && c.moe.experts_per_token <= candidates,
              r.bad("num_experts_per_tok", "experts per token out of range")
                  .expected(fmt::format("1..{} (the experts of topk_group {} groups)", candidates, c.moe.topk_group))
                  .found(std::to_string(c.moe.experts_per_token)));
  const auto shared = r.bounded_or("n_shared_experts", 1, 0, 64);
  c.moe.shared_intermediate_size = shared * c.moe.intermediate_size;
  c.moe.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), true);
  if (c.family == Family::glm4_moe_lite && r.has("mlp_layer_types")) {
    // Glm4MoeLiteDecoderLayer: "sparse" or "dense" per layer (first_k_dense_replace is not read).
    const auto& types = r.j["mlp_layer_types"];
    EAGLE_CHECK(types.is_array() && static_cast<std::int64_t>(types.size()) == c.num_hidden_layers,
                r.bad("mlp_layer_types", "expected one MLP type per layer")
                    .expected(fmt::format("a list of {} entries", c.num_hidden_layers))
                    .found(types.dump()));
    for (std::size_t l = 0; l < types.size(); ++l) {
      EAGLE_CHECK(types[l] == "sparse" || types[l] == "dense",
                  r.bad(fmt::format("mlp_layer_types[{}]", l), "unknown MLP type")
                      .expected("sparse or dense")
                      .found(types[l].dump()));
      c.moe.sparse_layers[l] = types[l] == "sparse";
    }
  } else {
    const auto dense = c.family == Family::glm4_moe_lite
                           ? std::min<std::int64_t>(1, c.num_hidden_layers)
                           : r.bounded_or("first_k_dense_replace", d.dense, 0, c.num_hidden_layers);
    for (std::int64_t l = 0; l < dense; ++l) c.moe.sparse_layers[static_cast<std::size_t>(l)] = false;
  }
  // The original DeepSeek-V3 configs name their router; transformers computes only this one.
  const auto scoring = r.string_or("scoring_func", "sigmoid");
  EAGLE_CHECK(scoring == "sigmoid",
              r.bad("scoring_func", "only the sigmoid router is implemented").expected("sigmoid").found(scoring));
  const auto method = r.string_or("topk_method", "noaux_tc");
  EAGLE_CHECK(method == "noaux_tc", r.bad("topk_method", "only the grouped top-k with a correction bias is implemented")
                                        .expected("noaux_tc")
                                        .found(method)
                                        .hint("DeepSeek-V2's greedy and group_limited_greedy: DeepseekV2ForCausalLM"));
  c.moe.router_named = r.has("scoring_func") && r.has("topk_method");
  const auto freq = r.integer_or("moe_layer_freq", 1);
  EAGLE_CHECK(freq == 1, r.bad("moe_layer_freq", "every layer after first_k_dense_replace is a MoE layer")
                             .expected("1")
                             .found(std::to_string(freq)));
  // The MTP layers (model.layers.{L + i}.*): transformers' default is 1; they are never loaded.
  c.num_mtp_layers = r.bounded_or("num_nextn_predict_layers", r.bounded_or("num_mtp_layers", 1, 0, 16), 0, 16);
}

// DeepSeek-V2's mixture of experts (transformers' DeepseekV2Moe): n_routed_experts behind the softmax router
// (MoeRouting::softmax_grouped; topk_method greedy, or group_limited_greedy over n_group groups), no score
// correction bias, n_shared_experts' MLP beside them, dense MLPs in the first first_k_dense_replace layers.
// DeepseekV2Config's defaults: 64 experts of 1407, 2 shared, scaling 1, no dense layer; k has none.
void read_softmax_moe(const Reader& r, TargetConfig& c) {
  namespace lim = model::limits;
  c.moe.num_experts = r.bounded_or("n_routed_experts", 64, 1, lim::kMaxExperts);
  c.moe.experts_per_token = r.bounded("num_experts_per_tok", 1, c.moe.num_experts);
  c.moe.intermediate_size = r.bounded_or("moe_intermediate_size", 1407, 1, lim::kMaxSize);
  c.moe.routing = MoeRouting::softmax_grouped;
  c.moe.routing_weights_fp32 = true;  // the fp32 router's weights multiply each expert's output before the cast
  c.moe.norm_topk_prob = false;
  c.moe.routed_scaling_factor = r.number_in("routed_scaling_factor", 1.0, 1e-6, 1e12);
  // transformers' router never renormalises; DeepSeek's own modeling_deepseek.py would, so a true is ambiguous.
  EAGLE_CHECK(!r.boolean_or("norm_topk_prob", false),
              r.bad("norm_topk_prob", "DeepSeek-V2's renormalised top-k weights are not implemented")
                  .expected("false (as every DeepSeek-V2 release ships it)")
                  .found("true")
                  .hint("transformers' DeepseekV2TopkRouter ignores it; vLLM's deepseek_v2.py renormalises by it"));
  const auto scoring = r.string_or("scoring_func", "softmax");
  EAGLE_CHECK(scoring == "softmax",
              r.bad("scoring_func", "DeepSeek-V2's router scores by softmax").expected("softmax").found(scoring));
  const auto method = r.string_or("topk_method", "greedy");
  EAGLE_CHECK(method == "greedy" || method == "group_limited_greedy",
              r.bad("topk_method", "unknown DeepSeek-V2 expert choice")
                  .expected("greedy or group_limited_greedy")
                  .found(method)
                  .hint("noaux_tc (with a score correction bias) is DeepSeek-V3's: DeepseekV3ForCausalLM"));
  c.moe.n_group = c.moe.topk_group = 1;  // greedy: the k best of all experts (n_group and topk_group unread)
  if (method == "group_limited_greedy") {
    c.moe.n_group = r.bounded("n_group", 1, c.moe.num_experts);
    c.moe.topk_group = r.bounded("topk_group", 1, c.moe.n_group);
    EAGLE_CHECK(c.moe.num_experts % c.moe.n_group == 0,
                r.bad("n_group", "the experts must split into equal groups")
                    .found(fmt::format("{} experts in {} groups", c.moe.num_experts, c.moe.n_group)));
    // Beyond the kept groups' experts transformers would pick zeroed scores (ties): refused.
    const auto candidates = c.moe.topk_group * (c.moe.num_experts / c.moe.n_group);
    EAGLE_CHECK(c.moe.experts_per_token <= candidates,
                r.bad("num_experts_per_tok", "more experts per token than the kept groups hold")
                    .expected(fmt::format("1..{} (the experts of topk_group {} groups)", candidates, c.moe.topk_group))
                    .found(std::to_string(c.moe.experts_per_token)));
  }
  c.moe.shared_intermediate_size = r.bounded_or("n_shared_experts", 2, 1, 64) * c.moe.intermediate_size;
  c.moe.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), true);
  const auto dense = r.bounded_or("first_k_dense_replace", 0, 0, c.num_hidden_layers);
  for (std::int64_t l = 0; l < dense; ++l) c.moe.sparse_layers[static_cast<std::size_t>(l)] = false;
  // transformers reads no moe_layer_freq; DeepSeek's own code skips layers by it: only 1 means the same.
  const auto freq = r.integer_or("moe_layer_freq", 1);
  EAGLE_CHECK(freq == 1, r.bad("moe_layer_freq", "every layer after first_k_dense_replace is a MoE layer")
                             .expected("1")
                             .found(std::to_string(freq)));
  c.num_mtp_layers = 0;  // DeepSeek-V2 ships no MTP layers
}

}  // namespace

// The expert layout of the MoE families (transformers' modeling_qwen3_moe, _mixtral, _gpt_oss, _qwen3_next,
// _qwen3_5_moe); the sigmoid-routed ones through read_sigmoid_moe.
void read_moe(const Reader& r, TargetConfig& c) {
  const auto t = c.family;
  if (t == Family::deepseek_v3 || t == Family::glm4_moe || t == Family::glm4_moe_lite) return read_sigmoid_moe(r, c);
  if (t == Family::deepseek_v2) return read_softmax_moe(r, c);
  const bool qwen_moe = t == Family::qwen3_moe || t == Family::qwen3_next || t == Family::qwen3_5_moe;
  const char* experts_key = (qwen_moe && r.has("num_experts")) || hybrid_family(t) ? "num_experts" : "num_local_experts";
  // Bounded before anything is made per expert; the checkpoint is compared with it at load. The defaults are
  // each config class's (Qwen3NextConfig 512 top 10, Qwen3_5MoeTextConfig 256 top 8).
  const std::int64_t experts_default =
      t == Family::mixtral ? 8 : (t == Family::qwen3_next ? 512 : (t == Family::qwen3_5_moe ? 256 : 128));
  c.moe.num_experts =
      r.bounded_or(experts_key, experts_default, t == Family::qwen3_moe ? 0 : 1, model::limits::kMaxExperts);
  c.moe.experts_per_token =
      r.integer_or("num_experts_per_tok",
                   t == Family::gpt_oss ? 4 : (t == Family::mixtral ? 2 : (t == Family::qwen3_next ? 10 : 8)));
  EAGLE_CHECK(c.moe.num_experts == 0 || (c.moe.experts_per_token >= 1 && c.moe.experts_per_token <= c.moe.num_experts),
              r.bad("num_experts_per_tok", "experts per token out of range")
                  .expected(fmt::format("1..{} (the number of experts)", c.moe.num_experts))
                  .found(std::to_string(c.moe.experts_per_token)));
  c.moe.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), c.moe.num_experts > 0);
  if (hybrid_family(t)) {
    // Qwen3NextSparseMoeBlock / Qwen3_5MoeSparseMoeBlock: Qwen3-MoE's router (Qwen3.5-MoE always renormalises
    // the top k), plus one shared expert of shared_expert_intermediate_size times sigmoid(shared_expert_gate(x)).
    c.moe.intermediate_size = r.bounded_or("moe_intermediate_size", 512, 1, model::limits::kMaxSize);
    c.moe.norm_topk_prob = t == Family::qwen3_5_moe || r.boolean_or("norm_topk_prob", true);
    c.moe.shared_intermediate_size = r.bounded_or("shared_expert_intermediate_size", 512, 1, model::limits::kMaxSize);
    c.moe.shared_expert_gate = true;
  }
  if (t == Family::qwen3_moe || t == Family::qwen3_next) {
    if (t == Family::qwen3_moe) {
      c.moe.intermediate_size = r.bounded("moe_intermediate_size", 1, model::limits::kMaxSize);
      c.moe.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
    }
    const auto step = r.integer_or("decoder_sparse_step", 1);
    EAGLE_CHECK(step >= 1, r.bad("decoder_sparse_step", "must be positive").found(std::to_string(step)));
    std::vector<std::int64_t> dense;
    if (r.has("mlp_only_layers")) {
      EAGLE_CHECK(r.j["mlp_only_layers"].is_array(), r.bad("mlp_only_layers", "not a list of layer indices"));
      for (const auto& x : r.j["mlp_only_layers"]) {
        EAGLE_CHECK(x.is_number_integer(), r.bad("mlp_only_layers", "not a layer index").found(x.dump()));
        dense.push_back(x.get<std::int64_t>());
      }
    }
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
      c.moe.sparse_layers[static_cast<std::size_t>(l)] =
          c.moe.num_experts > 0 && (l + 1) % step == 0 && std::find(dense.begin(), dense.end(), l) == dense.end();
  } else if (!hybrid_family(t)) {
    c.moe.intermediate_size = c.intermediate_size;
    c.moe.norm_topk_prob = true;
  }
  c.moe.routing_weights_fp32 = t == Family::mixtral;
  if (t == Family::gpt_oss) {
    c.moe.routing = MoeRouting::topk_softmax;
    c.moe.router_bias = c.moe.expert_bias = c.moe.clamped_swiglu = true;
    c.moe.swiglu_alpha = r.number_or("swiglu_alpha", 1.702);
    c.moe.swiglu_limit = r.number_or("swiglu_limit", 7.0);
    EAGLE_CHECK(std::isfinite(c.moe.swiglu_alpha) && c.moe.swiglu_limit > 0 && std::isfinite(c.moe.swiglu_limit),
                r.bad("swiglu_limit", "gpt-oss's swiglu_alpha and swiglu_limit must be finite, the limit positive")
                    .found(fmt::format("{} and {}", c.moe.swiglu_alpha, c.moe.swiglu_limit)));
  }
}

}  // namespace eagle::target
