// Gemma 4's config.json fields (transformers' configuration_gemma4.Gemma4TextConfig, read as
// modeling_gemma4 uses them): layer types and windows, each layer's head width and key/value heads,
// RoPE per layer type (proportional on the full layers), KV sharing, per-layer inputs and the MoE block.
#include <cmath>
#include <string>

#include "config_reader.h"

namespace eagle::target {

namespace {

namespace lim = model::limits;

// layer_types (default: every sixth layer full, Gemma4TextConfig.__post_init__); the last layer is
// forced to full_attention as transformers forces it. Returns per layer whether it is full.
std::vector<bool> gemma4_full_layers(const Reader& r, std::int64_t L) {
  std::vector<bool> full(static_cast<std::size_t>(L), false);
  if (auto types = read_layer_types(r, L, "sliding_attention", "full_attention", "attention type")) {
    full = std::move(*types);
  } else {
    for (std::int64_t l = 0; l < L; ++l) full[static_cast<std::size_t>(l)] = (l + 1) % 6 == 0;
  }
  full.back() = true;
  return full;
}

// Each layer's head width and key/value heads: config.json's per_layer_config (layer index -> overrides
// of head_dim and num_key_value_heads, what save_pretrained writes), else the full layers get
// global_head_dim (default 512) and, with attention_k_eq_v, num_global_key_value_heads.
void read_layer_geometry(const Reader& r, TargetConfig& c, const std::vector<bool>& full) {
  const auto L = c.num_hidden_layers;
  c.gemma4.layer_head_dims.assign(static_cast<std::size_t>(L), c.head_dim);
  c.gemma4.layer_kv_heads.assign(static_cast<std::size_t>(L), c.num_key_value_heads);
  if (r.has("per_layer_config")) {
    const auto& plc = r.j["per_layer_config"];
    EAGLE_CHECK(plc.is_object(), r.bad("per_layer_config", "not an object").found(plc.dump()));
    for (auto it = plc.begin(); it != plc.end(); ++it) {
      const auto& key = it.key();
      const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
      const auto l = digits ? std::stoll(key) : -1;
      EAGLE_CHECK(l >= 0 && l < L, r.bad("per_layer_config." + key, "not a layer index")
                                       .expected(fmt::format("0..{}", L - 1)));
      EAGLE_CHECK(it.value().is_object(), r.bad("per_layer_config." + key, "not an object").found(it.value().dump()));
      const Reader o{r.path, it.value(), r.prefix + "per_layer_config." + key + "."};
      for (auto f = it.value().begin(); f != it.value().end(); ++f)
        EAGLE_CHECK(f.key() == "head_dim" || f.key() == "num_key_value_heads",
                    o.bad(f.key(), "per-layer override not supported")
                        .expected("head_dim or num_key_value_heads")
                        .hint("other per-layer overrides change the layer's math and are not implemented"));
      const auto i = static_cast<std::size_t>(l);
      c.gemma4.layer_head_dims[i] = o.bounded_or("head_dim", c.head_dim, 2, lim::kMaxHeadDim);
      c.gemma4.layer_kv_heads[i] = o.bounded_or("num_key_value_heads", c.num_key_value_heads, 1, lim::kMaxHeads);
    }
  } else {
    const auto global = r.bounded_or("global_head_dim", 512, 2, lim::kMaxHeadDim);
    const auto kv = c.gemma4.k_eq_v
                        ? r.bounded_or("num_global_key_value_heads", c.num_key_value_heads, 1, lim::kMaxHeads)
                        : c.num_key_value_heads;
    for (std::int64_t l = 0; l < L; ++l)
      if (full[static_cast<std::size_t>(l)]) {
        c.gemma4.layer_head_dims[static_cast<std::size_t>(l)] = global;
        c.gemma4.layer_kv_heads[static_cast<std::size_t>(l)] = kv;
      }
  }
  // One RoPE table per layer type needs one head width per type (transformers refuses the rest too).
  std::int64_t width[2] = {-1, -1};
  for (std::int64_t l = 0; l < L; ++l) {
    const auto i = static_cast<std::size_t>(l);
    auto& w = width[full[i] ? 1 : 0];
    EAGLE_CHECK(w < 0 || w == c.gemma4.layer_head_dims[i],
                r.bad("per_layer_config", "layers of one type must share their head_dim (one RoPE per layer type)")
                    .found(fmt::format("layer {}: {}, an earlier one: {}", l, c.gemma4.layer_head_dims[i], w)));
    w = c.gemma4.layer_head_dims[i];
    EAGLE_CHECK(c.gemma4.layer_head_dims[i] % 2 == 0,
                r.bad("per_layer_config", "head_dim must be even for RoPE")
                    .found(fmt::format("layer {}: {}", l, c.gemma4.layer_head_dims[i])));
    EAGLE_CHECK(c.num_attention_heads % c.gemma4.layer_kv_heads[i] == 0,
                r.bad("per_layer_config", "key/value heads must divide num_attention_heads")
                    .found(fmt::format("layer {}: {} heads, {} key/value heads", l, c.num_attention_heads,
                                       c.gemma4.layer_kv_heads[i])));
  }
}

// One layer type's RoPE (Gemma4TextRotaryEmbedding): "default" over the type's whole head width (its
// partial_rotary_factor is not read), or "proportional" (_compute_proportional_rope_parameters): the
// first int(partial_rotary_factor * head_dim // 2) pairs turn at theta^(-2i / head_dim), the rest stay
// (frequency 0), all over factor. Returns the RoPE and the turning pairs (0: all).
std::pair<model::RopeConfig, std::int64_t> gemma4_rope(const Reader& r, const json& rp, const std::string& type,
                                                       std::int64_t head_dim, const TargetConfig& c) {
  const std::string where = "rope_parameters." + type;
  EAGLE_CHECK(rp.contains(type) && rp[type].is_object(),
              r.bad(where, "Gemma 4 needs a RoPE for each layer type it has").expected("an object"));
  const Reader p{r.path, rp[type], r.prefix + where + "."};
  const auto kind = p.string_or("rope_type", "default");
  EAGLE_CHECK(kind == "default" || kind == "proportional",
              p.bad("rope_type", "unsupported RoPE type for Gemma 4")
                  .expected("default or proportional")
                  .found(kind)
                  .hint("other scalings are not implemented for this family"));
  EAGLE_CHECK(p.has("rope_theta"), p.bad("rope_theta", "required field missing"));
  json params = rp[type];
  params.erase("partial_rotary_factor");
  std::int64_t angles = 0;
  if (kind == "proportional") {
    const double partial = p.number_in("partial_rotary_factor", 1.0, 0.0, 1.0);
    const double factor = p.number_in("factor", 1.0, 1.0, lim::kMaxRope);
    angles = static_cast<std::int64_t>(std::floor(partial * static_cast<double>(head_dim) / 2.0));
    // factor divides every frequency: linear scaling's inv_freq / factor.
    params["rope_type"] = factor == 1.0 ? "default" : "linear";
  }
  TargetConfig at = c;
  at.head_dim = head_dim;
  auto rope = parse_rope(r, params, where, at);
  if (kind == "default") return {rope, 0};  // every pair turns
  return {rope, angles == head_dim / 2 ? 0 : (angles == 0 ? -1 : angles)};
}

// The MoE block (enable_moe_block; gemma-4-26B-A4B): Gemma4TextDecoderLayer builds a router and experts in every
// layer, beside the dense MLP (intermediate_size) that still runs: num_experts of moe_intermediate_size, top_k_experts
// per token (the config class has no defaults), routed by MoeRouting::scaled_softmax_topk.
void read_gemma4_moe(const Reader& r, TargetConfig& c) {
  if (!r.boolean_or("enable_moe_block", false)) return;
  c.moe.num_experts = r.bounded("num_experts", 1, lim::kMaxExperts);
  c.moe.experts_per_token = r.bounded("top_k_experts", 1, c.moe.num_experts);
  c.moe.intermediate_size = r.bounded("moe_intermediate_size", 1, lim::kMaxSize);
  c.moe.routing = MoeRouting::scaled_softmax_topk;
  c.moe.norm_topk_prob = true;        // Gemma4TextRouter always renormalises the chosen k
  c.moe.routing_weights_fp32 = true;  // its fp32 weights times per_expert_scale multiply each expert's output
  c.moe.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), true);
}

}  // namespace

void read_gemma4(const Reader& r, TargetConfig& c) {
  const auto L = c.num_hidden_layers;
  c.gemma4.enabled = c.gemma4.value_norm = c.gemma4.layer_scalar = true;
  c.embed_scaled = c.sandwich_norms = c.attention.qk_norm = true;
  c.norm_one_plus = false;   // Gemma4RMSNorm scales by w itself (in fp32: norm_weight_fp32)
  c.attention.scale = 1.0;   // Gemma4TextAttention: scaling 1.0 (q and k are RMS-normed)
  c.hidden_act = r.string_or("hidden_activation", "gelu_pytorch_tanh");
  EAGLE_CHECK(c.hidden_act == "gelu_pytorch_tanh",
              r.bad("hidden_activation", "unsupported activation").expected("gelu_pytorch_tanh").found(c.hidden_act));
  c.final_softcap = r.softcap("final_logit_softcapping");
  c.attention.bias = c.attention.o_bias = r.boolean_or("attention_bias", false);
  const auto bidirectional = r.string_or("use_bidirectional_attention", "");
  EAGLE_CHECK(bidirectional.empty() || bidirectional == "vision",
              r.bad("use_bidirectional_attention", "bidirectional attention over text is not a causal target")
                  .expected("null, or vision (bidirectional among image tokens only; text stays causal)")
                  .found(bidirectional));
  read_gemma4_moe(r, c);
  c.gemma4.k_eq_v = r.boolean_or("attention_k_eq_v", false);
  c.gemma4.double_wide_mlp = r.boolean_or("use_double_wide_mlp", false);

  const auto full = gemma4_full_layers(r, L);
  const auto window = r.bounded_or("sliding_window", 512, 1, lim::kMaxPositions);
  c.attention.layer_windows.assign(static_cast<std::size_t>(L), 0);
  for (std::size_t l = 0; l < full.size(); ++l) c.attention.layer_windows[l] = full[l] ? 0 : window;
  read_layer_geometry(r, c, full);

  // RoPE per layer type (the config class's defaults when absent): c.rope the full layers', c.local_rope
  // the sliding layers'.
  const json defaults = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                         {"full_attention",
                          {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}};
  const json& rp = r.has("rope_parameters") ? r.j["rope_parameters"] : defaults;
  EAGLE_CHECK(rp.is_object(), r.bad("rope_parameters", "not an object").found(rp.dump()));
  std::int64_t full_dim = 0, sliding_dim = 0;
  for (std::int64_t l = 0; l < L; ++l)
    (full[static_cast<std::size_t>(l)] ? full_dim : sliding_dim) = c.layer_head_dim(l);
  std::int64_t angles = 0;
  std::tie(c.rope, angles) = gemma4_rope(r, rp, "full_attention", full_dim, c);
  EAGLE_CHECK(angles >= 0, r.bad("rope_parameters.full_attention.partial_rotary_factor",
                                 "no frequency turns: transformers' proportional RoPE has none to compute")
                               .expected("a factor with at least one rotated pair"));
  c.gemma4.rope_angles = angles;
  if (sliding_dim > 0) {
    auto [local, local_angles] = gemma4_rope(r, rp, "sliding_attention", sliding_dim, c);
    EAGLE_CHECK(local_angles == 0, r.bad("rope_parameters.sliding_attention.rope_type",
                                         "proportional RoPE is implemented for the full-attention layers only")
                                       .expected("default"));
    c.attention.local_rope = local;
  }

  // KV sharing (Gemma4TextConfig.kv_sharing_modes): layers from L - num_kv_shared_layers on attend the keys
  // and values of the last earlier layer of their type.
  const auto shared = r.bounded_or("num_kv_shared_layers", 0, 0, L - 1);
  c.gemma4.first_kv_shared = L - shared;
  c.gemma4.kv_source.resize(static_cast<std::size_t>(L));
  for (std::int64_t l = 0; l < L; ++l) {
    auto& src = c.gemma4.kv_source[static_cast<std::size_t>(l)];
    src = l;
    if (l < c.gemma4.first_kv_shared) continue;
    src = -1;
    for (std::int64_t p = c.gemma4.first_kv_shared - 1; p >= 0 && src < 0; --p)
      if (full[static_cast<std::size_t>(p)] == full[static_cast<std::size_t>(l)]) src = p;
    EAGLE_CHECK(src >= 0, r.bad("num_kv_shared_layers", "a KV-shared layer has no earlier layer of its type")
                              .found(fmt::format("layer {} ({})", l, full[static_cast<std::size_t>(l)]
                                                                          ? "full_attention"
                                                                          : "sliding_attention")));
    EAGLE_CHECK(c.layer_kv_heads_of(src) == c.layer_kv_heads_of(l),
                r.bad("per_layer_config", "a KV-shared layer must have its source layer's key/value heads")
                    .found(fmt::format("layer {}: {}, its source layer {}: {}", l, c.layer_kv_heads_of(l), src,
                                       c.layer_kv_heads_of(src))));
  }

  // Per-layer inputs (PLE; hidden_size_per_layer_input 0 or null: none).
  c.gemma4.per_layer_input_dim = r.bounded_or("hidden_size_per_layer_input", 256, 0, lim::kMaxSize);
  if (c.gemma4.per_layer_input_dim > 0) {
    c.gemma4.per_layer_vocab = r.bounded_or("vocab_size_per_layer_input", 262144, 1, lim::kMaxVocab);
    EAGLE_CHECK(c.gemma4.per_layer_vocab >= c.vocab_size,
                r.bad("vocab_size_per_layer_input",
                      "smaller than the vocabulary: the per-layer embedding of the "
                      "tokens past it does not exist")
                    .expected(fmt::format("at least {} (vocab_size)", c.vocab_size))
                    .found(std::to_string(c.gemma4.per_layer_vocab)));
  }
}

}  // namespace eagle::target
