// TargetConfig::from_json_file: reads a Hugging Face config.json in the transformers 4.x and 5.x
// spellings and refuses, by name, every architecture or field that would change the math; and
// generation_end_ids, which adds generation_config.json's eos ids.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config_reader.h"
#include "eagle/model/mla.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::target {

namespace {

using nlohmann::json;

void read_gemma(const Reader& r, TargetConfig& c);
void read_phi3(const Reader& r, TargetConfig& c);
void read_mimo(const Reader& r, TargetConfig& c);
void read_deepseek(const Reader& r, TargetConfig& c);
void read_glm4_moe(const Reader& r, TargetConfig& c);
void read_hybrid(const Reader& r, TargetConfig& c);

// The families, one row each: how config.json names it, whether its MLP is a mixture of experts
// (read_moe), the reader of the fields only it has (after the common ones), another model_type the
// same architecture is published under (Kimi-K2's config.json says kimi_k2 for DeepseekV3ForCausalLM),
// and whether it is a multimodal wrapper read as its text model (text_config, model.language_model.*).
struct FamilyRow {
  Family family;
  const char* architecture;
  const char* model_type;
  bool moe;
  void (*read)(const Reader&, TargetConfig&);
  const char* model_type_alias = nullptr;
  bool multimodal = false;
};
constexpr FamilyRow kFamilies[] = {
    {Family::llama, "LlamaForCausalLM", "llama", false, nullptr},
    {Family::mistral, "MistralForCausalLM", "mistral", false, nullptr},
    {Family::qwen2, "Qwen2ForCausalLM", "qwen2", false, nullptr},
    {Family::mimo, "MiMoForCausalLM", "mimo", false, read_mimo},
    {Family::qwen3, "Qwen3ForCausalLM", "qwen3", false, nullptr},
    {Family::qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe", true, nullptr},
    {Family::mixtral, "MixtralForCausalLM", "mixtral", true, nullptr},
    {Family::gpt_oss, "GptOssForCausalLM", "gpt_oss", true, nullptr},
    {Family::gemma2, "Gemma2ForCausalLM", "gemma2", false, read_gemma},
    {Family::gemma3_text, "Gemma3ForCausalLM", "gemma3_text", false, read_gemma},
    {Family::phi3, "Phi3ForCausalLM", "phi3", false, read_phi3},
    {Family::deepseek_v3, "DeepseekV3ForCausalLM", "deepseek_v3", true, read_deepseek, "kimi_k2"},
    {Family::glm4_moe, "Glm4MoeForCausalLM", "glm4_moe", true, read_glm4_moe},
    {Family::glm4_moe_lite, "Glm4MoeLiteForCausalLM", "glm4_moe_lite", true, read_deepseek},
    {Family::qwen3_next, "Qwen3NextForCausalLM", "qwen3_next", true, read_hybrid},
    {Family::qwen3_5, "Qwen3_5ForCausalLM", "qwen3_5_text", false, read_hybrid},
    {Family::qwen3_5, "Qwen3_5ForConditionalGeneration", "qwen3_5", false, read_hybrid, nullptr, true},
    {Family::qwen3_5_moe, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", true, read_hybrid},
    {Family::qwen3_5_moe, "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", true, read_hybrid, nullptr, true},
    {Family::gemma4_text, "Gemma4ForCausalLM", "gemma4_text", false, read_gemma4},
    {Family::gemma4_text, "Gemma4ForConditionalGeneration", "gemma4", false, read_gemma4, nullptr, true}};

bool hybrid_family(Family f) { return f == Family::qwen3_next || f == Family::qwen3_5 || f == Family::qwen3_5_moe; }

// "A, B, ... or Z": the supported architectures, for the refusal of any other.
std::string family_list() {
  std::string out;
  const auto n = std::size(kFamilies);
  for (std::size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : (i + 1 == n ? " or " : ", ")) + std::string(kFamilies[i].architecture);
  return out;
}

// Numbers whose 0 means "none", as null does, in every family (docs/models.md): the soft caps (a
// family without them accepts 0 or null, and refuses a cap). sliding_window follows the same rule
// (read_attention_types).
constexpr std::string_view kNoneMeansZero[] = {"attn_logit_softcapping", "final_logit_softcapping"};

// Fields that other decoders use to change the math; none of them exists in the supported
// families, so their presence means the checkpoint is something we would compute wrongly.
constexpr const char* kForeignMathFields[] = {
    "attn_logit_softcapping", "final_logit_softcapping", "logit_scale",
    "embedding_multiplier",   "residual_multiplier",     "attention_multiplier",
    "logits_scaling",         "no_rope_layers",          "use_qk_norm",
    "query_pre_attn_scalar"};

// The expert layout of the MoE families (transformers' modeling_qwen3_moe, _mixtral, _gpt_oss).
void read_sigmoid_moe(const Reader& r, TargetConfig& c);

void read_moe(const Reader& r, TargetConfig& c) {
  const auto t = c.family;
  if (t == Family::deepseek_v3 || t == Family::glm4_moe || t == Family::glm4_moe_lite) return read_sigmoid_moe(r, c);
  const bool qwen_moe = t == Family::qwen3_moe || t == Family::qwen3_next || t == Family::qwen3_5_moe;
  const char* experts_key = (qwen_moe && r.has("num_experts")) || hybrid_family(t) ? "num_experts" : "num_local_experts";
  // Bounded before anything is made per expert; the checkpoint is compared with it at load. The defaults are
  // each config class's (Qwen3NextConfig 512 top 10, Qwen3_5MoeTextConfig 256 top 8).
  const std::int64_t experts_default =
      t == Family::mixtral ? 8 : (t == Family::qwen3_next ? 512 : (t == Family::qwen3_5_moe ? 256 : 128));
  c.num_experts = r.bounded_or(experts_key, experts_default, t == Family::qwen3_moe ? 0 : 1, model::limits::kMaxExperts);
  c.experts_per_token = r.integer_or(
      "num_experts_per_tok",
      t == Family::gpt_oss ? 4 : (t == Family::mixtral ? 2 : (t == Family::qwen3_next ? 10 : 8)));
  EAGLE_CHECK(c.num_experts == 0 || (c.experts_per_token >= 1 && c.experts_per_token <= c.num_experts),
              r.bad("num_experts_per_tok", "experts per token out of range")
                  .expected(fmt::format("1..{} (the number of experts)", c.num_experts))
                  .found(std::to_string(c.experts_per_token)));
  c.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), c.num_experts > 0);
  if (hybrid_family(t)) {
    // Qwen3NextSparseMoeBlock / Qwen3_5MoeSparseMoeBlock: Qwen3-MoE's router (Qwen3.5-MoE always renormalises
    // the top k), plus one shared expert of shared_expert_intermediate_size times sigmoid(shared_expert_gate(x)).
    c.moe_intermediate_size = r.bounded_or("moe_intermediate_size", 512, 1, model::limits::kMaxSize);
    c.norm_topk_prob = t == Family::qwen3_5_moe || r.boolean_or("norm_topk_prob", true);
    c.shared_intermediate_size = r.bounded_or("shared_expert_intermediate_size", 512, 1, model::limits::kMaxSize);
    c.shared_expert_gate = true;
  }
  if (t == Family::qwen3_moe || t == Family::qwen3_next) {
    if (t == Family::qwen3_moe) {
      c.moe_intermediate_size = r.bounded("moe_intermediate_size", 1, model::limits::kMaxSize);
      c.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
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
      c.sparse_layers[static_cast<std::size_t>(l)] =
          c.num_experts > 0 && (l + 1) % step == 0 && std::find(dense.begin(), dense.end(), l) == dense.end();
  } else if (!hybrid_family(t)) {
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
  }
  c.routing_weights_fp32 = t == Family::mixtral;
  if (t == Family::gpt_oss) {
    c.routing = MoeRouting::topk_softmax;
    c.router_bias = c.expert_bias = c.clamped_swiglu = true;
    c.swiglu_alpha = r.number_or("swiglu_alpha", 1.702);
    c.swiglu_limit = r.number_or("swiglu_limit", 7.0);
    EAGLE_CHECK(std::isfinite(c.swiglu_alpha) && c.swiglu_limit > 0 && std::isfinite(c.swiglu_limit),
                r.bad("swiglu_limit", "gpt-oss's swiglu_alpha and swiglu_limit must be finite, the limit positive")
                    .found(fmt::format("{} and {}", c.swiglu_alpha, c.swiglu_limit)));
  }
}

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
  c.num_experts = r.bounded_or("n_routed_experts", d.experts, 1, lim::kMaxExperts);
  c.experts_per_token = r.integer_or("num_experts_per_tok", d.per_token);
  c.moe_intermediate_size = r.bounded_or("moe_intermediate_size", d.width, 1, lim::kMaxSize);
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
  c.routing = MoeRouting::sigmoid_grouped;
  c.routing_weights_fp32 = true;  // the fp32 router's weights multiply each expert's output before the cast
  c.routed_scaling_factor = r.number_in("routed_scaling_factor", d.scaling, 1e-6, 1e12);
  c.n_group = r.bounded_or("n_group", d.groups, 1, lim::kMaxExperts);
  c.topk_group = r.bounded_or("topk_group", d.kept, 1, lim::kMaxExperts);
  EAGLE_CHECK(c.topk_group <= c.n_group, r.bad("topk_group", "more groups kept than there are")
                                             .expected(fmt::format("1..{} (n_group)", c.n_group))
                                             .found(std::to_string(c.topk_group)));
  // Each group's score is the sum of its two best experts (topk(2) per group), so a group holds at least two.
  EAGLE_CHECK(c.num_experts % c.n_group == 0 && c.num_experts / c.n_group >= 2,
              r.bad("n_group", "the experts must split into groups of at least two")
                  .found(fmt::format("{} experts in {} groups", c.num_experts, c.n_group)));
  const auto candidates = c.topk_group * (c.num_experts / c.n_group);
  EAGLE_CHECK(c.experts_per_token >= 1 && c.experts_per_token <= candidates,
              r.bad("num_experts_per_tok", "experts per token out of range")
                  .expected(fmt::format("1..{} (the experts of topk_group {} groups)", candidates, c.topk_group))
                  .found(std::to_string(c.experts_per_token)));
  const auto shared = r.bounded_or("n_shared_experts", 1, 0, 64);
  c.shared_intermediate_size = shared * c.moe_intermediate_size;
  c.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), true);
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
      c.sparse_layers[l] = types[l] == "sparse";
    }
  } else {
    const auto dense = c.family == Family::glm4_moe_lite
                           ? std::min<std::int64_t>(1, c.num_hidden_layers)
                           : r.bounded_or("first_k_dense_replace", d.dense, 0, c.num_hidden_layers);
    for (std::int64_t l = 0; l < dense; ++l) c.sparse_layers[static_cast<std::size_t>(l)] = false;
  }
  // The original DeepSeek-V3 configs name their router; transformers computes only this one.
  const auto scoring = r.string_or("scoring_func", "sigmoid");
  EAGLE_CHECK(scoring == "sigmoid",
              r.bad("scoring_func", "only the sigmoid router is implemented").expected("sigmoid").found(scoring));
  const auto method = r.string_or("topk_method", "noaux_tc");
  EAGLE_CHECK(method == "noaux_tc", r.bad("topk_method", "only the grouped top-k with a correction bias is implemented")
                                        .expected("noaux_tc")
                                        .found(method)
                                        .hint("DeepSeek-V2's greedy and group_limited_greedy are not supported"));
  const auto freq = r.integer_or("moe_layer_freq", 1);
  EAGLE_CHECK(freq == 1, r.bad("moe_layer_freq", "every layer after first_k_dense_replace is a MoE layer")
                             .expected("1")
                             .found(std::to_string(freq)));
  // The MTP layers (model.layers.{L + i}.*): transformers' default is 1; they are never loaded.
  c.num_mtp_layers = r.bounded_or("num_nextn_predict_layers", r.bounded_or("num_mtp_layers", 1, 0, 16), 0, 16);
}

void read_fp8(const Reader& r, const json& q, TargetConfig& c);

// A quantization_config: gpt-oss's MXFP4 experts are read (dequantized exactly at load); any other
// method is refused by name.
void read_quantization(const Reader& r, TargetConfig& c) {
  if (!r.has("quantization_config")) return;
  const auto& q = r.j["quantization_config"];
  EAGLE_CHECK(q.is_object(), r.bad("quantization_config", "not an object").found(q.dump()));
  const std::string method =
      q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"].get<std::string>() : q.dump();
  // FP8 is read for the attention-only dense families (a hybrid's Gated DeltaNet projections are not covered).
  // Gemma 4 is not: which of its per-layer-input projections a release would quantize is unknown.
  if (method == "fp8" && !c.moe() && !c.hybrid() && !c.gemma4) return read_fp8(r, q, c);
  EAGLE_CHECK(c.family == Family::gpt_oss && method == "mxfp4",
              r.bad("quantization_config.quant_method", "quantized checkpoint not supported")
                  .expected(c.family == Family::gpt_oss ? "mxfp4, or no quantization_config"
                                                        : "fp8 (block-scaled e4m3) on a dense target, or none")
                  .found(method)
                  .hint("use the checkpoint's bf16 release, or dequantize it with transformers first"));
  EAGLE_CHECK(c.hidden_size % 32 == 0 && c.moe_intermediate_size % 32 == 0,
              r.bad("quantization_config",
                    "MXFP4 blocks hold 32 values: hidden_size and intermediate_size must be "
                    "multiples of 32")
                  .found(fmt::format("{} and {}", c.hidden_size, c.moe_intermediate_size)));
  c.quant_method = method;
}

// Which keys each layer attends, as transformers' masks do per family: `layer_types` when the
// config lists them (full_attention | sliding_attention, the window being sliding_window); else
// Mistral, Mixtral and Phi-3 slide in every layer when sliding_window is set, Qwen2/Qwen3 from
// layer max_window_layers on with use_sliding_window (Qwen3-MoE: every layer), gpt-oss and Gemma 2
// alternate (sliding first), Gemma 3 slides except every sliding_window_pattern-th layer.
void read_attention_types(const Reader& r, TargetConfig& c) {
  const auto t = c.family;
  if (hybrid_family(t) || t == Family::gemma4_text) return;  // read_hybrid's, read_gemma4's own
  const auto L = c.num_hidden_layers;
  const bool qwen = t == Family::qwen2 || t == Family::mimo || t == Family::qwen3 || t == Family::qwen3_moe;
  // DeepSeek-V3, GLM-4.5 and GLM-4.7-Flash never slide (transformers' masks ignore sliding_window there).
  const bool full_only = t == Family::deepseek_v3 || t == Family::glm4_moe || t == Family::glm4_moe_lite;
  const bool slides = qwen ? r.boolean_or("use_sliding_window", false) : !full_only;
  const bool gemma = t == Family::gemma2 || t == Family::gemma3_text;
  const std::int64_t default_window = t == Family::gpt_oss ? 128 : (gemma ? 4096 : 0);
  const auto window = slides ? r.integer_or("sliding_window", qwen ? 4096 : default_window) : 0;
  EAGLE_CHECK(window >= 0,
              r.bad("sliding_window", "must be positive, or 0 or null for none").found(std::to_string(window)));
  std::vector<bool> sliding(static_cast<std::size_t>(L), false);
  if (r.has("layer_types")) {
    const auto& types = r.j["layer_types"];
    EAGLE_CHECK(types.is_array() && static_cast<std::int64_t>(types.size()) == L,
                r.bad("layer_types", "expected one attention type per layer")
                    .expected(fmt::format("a list of {} entries", L))
                    .found(types.dump()));
    for (std::size_t l = 0; l < sliding.size(); ++l) {
      EAGLE_CHECK(types[l] == "full_attention" || types[l] == "sliding_attention",
                  r.bad(fmt::format("layer_types[{}]", l), "unknown attention type")
                      .expected("full_attention or sliding_attention")
                      .found(types[l].dump()));
      sliding[l] = types[l] == "sliding_attention";
    }
  } else {
    const auto pattern = t == Family::gemma3_text ? r.integer_or("sliding_window_pattern", 6) : 2;
    EAGLE_CHECK(pattern >= 1, r.bad("sliding_window_pattern", "must be positive").found(std::to_string(pattern)));
    const auto from =
        t == Family::qwen2 || t == Family::mimo || t == Family::qwen3 ? r.integer_or("max_window_layers", 0) : 0;
    for (std::int64_t l = 0; l < L; ++l) {
      const bool alternate = t == Family::gpt_oss || gemma;
      sliding[static_cast<std::size_t>(l)] = alternate ? (l + 1) % pattern != 0 : l >= from;
    }
  }
  for (std::size_t l = 0; l < sliding.size(); ++l) {
    if (!sliding[l] || window == 0) continue;
    if (c.layer_windows.empty()) c.layer_windows.assign(sliding.size(), 0);
    c.layer_windows[l] = window;
  }
  EAGLE_CHECK(window > 0 || !r.has("layer_types") || std::find(sliding.begin(), sliding.end(), true) == sliding.end() ||
                  qwen || full_only,
              r.bad("sliding_window", "sliding_attention layers need a window (0 and null mean none)")
                  .expected("a window of 1 or more tokens")
                  .found(r.has("sliding_window") ? r.j["sliding_window"].dump() : "null"));
}

// Gemma 2 and 3 (transformers' modeling_gemma2, _gemma3): norms, embedding scale, attention scale,
// soft caps, the GELU MLP, q/k norm (Gemma 3).
void read_gemma(const Reader& r, TargetConfig& c) {
  c.norm_one_plus = c.embed_scaled = c.sandwich_norms = true;
  c.qk_norm = c.family == Family::gemma3_text;
  c.hidden_act = r.string_or("hidden_activation", r.string_or("hidden_act", "gelu_pytorch_tanh"));
  EAGLE_CHECK(c.hidden_act == "gelu_pytorch_tanh",
              r.bad("hidden_activation", "unsupported activation").expected("gelu_pytorch_tanh").found(c.hidden_act));
  const double scalar = r.number_in("query_pre_attn_scalar", static_cast<double>(c.head_dim), 1e-6, 1e12);
  c.attention_scale = 1.0 / std::sqrt(scalar);
  // Gemma 3's attention never applies attn_logit_softcapping (transformers does not pass it on).
  // A soft cap of 0 or null is no cap (kNoneMeansZero); each one is named by its own field.
  c.attn_softcap = c.family == Family::gemma2 ? r.number_in("attn_logit_softcapping", 0.0, 0.0, 1e12) : 0.0;
  c.final_softcap = r.number_in("final_logit_softcapping", 0.0, 0.0, 1e12);
  EAGLE_CHECK(!r.boolean_or("use_bidirectional_attention", false),
              r.bad("use_bidirectional_attention", "bidirectional attention (an encoder) is not a causal target")
                  .found("true"));
}

// Phi-3 / Phi-4: fused qkv_proj and gate_up_proj in the checkpoint (split at load), no bias.
void read_phi3(const Reader& r, TargetConfig& c) {
  c.fused_checkpoint = true;
  EAGLE_CHECK(!r.boolean_or("attention_bias", false),
              r.bad("attention_bias", "Phi-3 has no attention bias").found("true"));
}

// MiMo-7B: a Qwen2 decoder plus num_nextn_predict_layers MTP layers (model.mtp_layers.{i}.*), which
// the target does not load (MTP.md 2.4); 0 or absent: none.
void read_mimo(const Reader& r, TargetConfig& c) {
  c.num_mtp_layers = r.bounded_or("num_nextn_predict_layers", 0, 0, 16);
}

// DeepSeek-V3's multi-head latent attention (transformers' DeepseekV3Attention): the LoRA ranks and head
// widths, read before the RoPE (whose rotary width is qk_rope_head_dim: DeepseekV3Config sets head_dim to it).
void read_mla_dims(const Reader& r, TargetConfig& c) {
  namespace lim = model::limits;
  const bool lite = c.family == Family::glm4_moe_lite;  // Glm4MoeLiteConfig's defaults, else DeepseekV3Config's
  // null: q_proj straight from the hidden state (Moonlight); absent: transformers' default.
  c.q_lora_rank = r.j.contains("q_lora_rank") ? r.bounded_or("q_lora_rank", 0, 1, lim::kMaxSize) : (lite ? 768 : 1536);
  c.kv_lora_rank = r.bounded_or("kv_lora_rank", 512, 1, lim::kMaxSize);
  c.qk_nope_head_dim = r.bounded_or("qk_nope_head_dim", lite ? 192 : 128, 1, lim::kMaxHeadDim);
  c.qk_rope_head_dim = r.bounded_or("qk_rope_head_dim", 64, 2, lim::kMaxHeadDim);
  c.v_head_dim = r.bounded_or("v_head_dim", lite ? 256 : 128, 1, lim::kMaxHeadDim);
  EAGLE_CHECK(c.qk_rope_head_dim % 2 == 0,
              r.bad("qk_rope_head_dim", "must be even for RoPE").found(std::to_string(c.qk_rope_head_dim)));
  EAGLE_CHECK(c.qk_nope_head_dim + c.qk_rope_head_dim <= lim::kMaxHeadDim,
              r.bad("qk_nope_head_dim", "query/key head width (qk_nope_head_dim + qk_rope_head_dim) out of range")
                  .expected(fmt::format("at most {}", lim::kMaxHeadDim))
                  .found(std::to_string(c.qk_nope_head_dim + c.qk_rope_head_dim)));
  // transformers builds one key and value per query head (kv_b_proj), then repeat_kv by heads / kv_heads:
  // only equal counts compute.
  EAGLE_CHECK(c.num_key_value_heads == c.num_attention_heads,
              r.bad("num_key_value_heads", "multi-head latent attention has one key/value head per query head")
                  .expected(std::to_string(c.num_attention_heads))
                  .found(std::to_string(c.num_key_value_heads)));
  c.head_dim = c.qk_rope_head_dim;  // the RoPE's width until read_rope_layers has read it
}

// DeepSeek-V3 (and Kimi-K2, Moonlight; transformers' modeling_deepseek_v3) and GLM-4.7-Flash
// (glm4_moe_lite, whose attention is DeepseekV3Attention): MLA (read_mla_dims), the
// softmax scale qk_head_dim^-1/2 times mscale^2 (yarn_apply_mscale: any non-default RoPE with
// mscale_all_dim), attention_bias on q_a_proj, kv_a_proj_with_mqa and o_proj, the interleaved RoPE.
void read_deepseek(const Reader& r, TargetConfig& c) {
  c.attention_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.rope_interleave = r.boolean_or("rope_interleave", true);
  double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const char* key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (c.rope.type != "default" && r.has(key) && r.j[key].is_object()) {
    const Reader p{r.path, r.j[key]};
    const double all_dim = p.number_or("mscale_all_dim", 0.0);
    // yarn_apply_mscale: yarn_get_mscale(factor, mscale_all_dim)^2 (1 for factors up to 1).
    if (all_dim != 0.0) {
      const double mscale = model::yarn_get_mscale(c.rope.factor, all_dim);
      scale *= mscale * mscale;
    }
  }
  c.attention_scale = scale;
}

// GLM-4.5 / 4.6 (transformers' modeling_glm4_moe): attention_bias on q/k/v only (o_proj never), q/k
// RMSNorm per head with use_qk_norm, partial RoPE (partial_rotary_factor, default 0.5: read_rope_layers).
void read_glm4_moe(const Reader& r, TargetConfig& c) {
  c.attention_bias = r.boolean_or("attention_bias", false);
  c.o_bias = false;
  c.qk_norm = r.boolean_or("use_qk_norm", false);
}

// Qwen3.5 / Qwen3.5-MoE / Qwen3-Next (transformers' modeling_qwen3_5, _qwen3_5_moe, _qwen3_next): layer_types of
// linear_attention (Gated DeltaNet) and full_attention (default: every full_attention_interval-th layer full,
// 4), the Gated DeltaNet's sizes (the config classes' defaults), full attention with an output gate (q_proj
// doubled), q/k norm and partial RoPE (partial_rotary_factor, default 0.25: read_rope_layers), every RMSNorm
// x * (1 + w) in fp32 (Qwen3NextRMSNorm), but the Gated DeltaNet's gated norm (plain weight).
void read_hybrid(const Reader& r, TargetConfig& c) {
  namespace lim = model::limits;
  const auto L = c.num_hidden_layers;
  c.linear_layers.assign(static_cast<std::size_t>(L), false);
  if (r.has("layer_types")) {
    const auto& types = r.j["layer_types"];
    EAGLE_CHECK(types.is_array() && static_cast<std::int64_t>(types.size()) == L,
                r.bad("layer_types", "expected one layer type per layer")
                    .expected(fmt::format("a list of {} entries", L))
                    .found(types.dump()));
    for (std::size_t l = 0; l < types.size(); ++l) {
      EAGLE_CHECK(types[l] == "linear_attention" || types[l] == "full_attention",
                  r.bad(fmt::format("layer_types[{}]", l), "unknown layer type")
                      .expected("linear_attention or full_attention")
                      .found(types[l].dump()));
      c.linear_layers[l] = types[l] == "linear_attention";
    }
  } else {
    const auto interval = r.bounded_or("full_attention_interval", 4, 1, lim::kMaxLayers);
    for (std::int64_t l = 0; l < L; ++l) c.linear_layers[static_cast<std::size_t>(l)] = (l + 1) % interval != 0;
  }
  c.linear_conv_kernel = r.bounded_or("linear_conv_kernel_dim", 4, 1, 64);
  c.linear_key_head_dim = r.bounded_or("linear_key_head_dim", 128, 1, lim::kMaxHeadDim);
  c.linear_value_head_dim = r.bounded_or("linear_value_head_dim", 128, 1, lim::kMaxHeadDim);
  c.linear_key_heads = r.bounded_or("linear_num_key_heads", 16, 1, lim::kMaxHeads);
  c.linear_value_heads = r.bounded_or("linear_num_value_heads", 32, 1, lim::kMaxHeads);
  EAGLE_CHECK(c.linear_value_heads % c.linear_key_heads == 0,
              r.bad("linear_num_value_heads", "must be a multiple of linear_num_key_heads")
                  .found(fmt::format("{} value heads, {} key heads", c.linear_value_heads, c.linear_key_heads)));
  c.attn_output_gate = true;  // transformers doubles q_proj whatever attn_output_gate says
  c.qk_norm = true;
  c.norm_one_plus = true;
  c.attention_bias = c.o_bias = r.boolean_or("attention_bias", false);
  // The shipped MTP layers (mtp.*, never loaded by the target; --draft mtp reads them, head/mtp_io.h): Qwen3.5's
  // mtp_num_hidden_layers (absent: none, as transformers writes the config), Qwen3-Next's
  // num_nextn_predict_layers (vLLM's qwen3_next_mtp.py reads it with default 1).
  c.num_mtp_layers = c.family == Family::qwen3_next ? r.bounded_or("num_nextn_predict_layers", 1, 0, 16)
                                                    : r.bounded_or("mtp_num_hidden_layers", 0, 0, 16);
}

// FP8 block-scaled checkpoints (fine-grained FP8: e4m3 weights, weight_scale_inv per block).
void read_fp8(const Reader& r, const json& q, TargetConfig& c) {
  const Reader qr{r.path, q};
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error(ErrorKind::input, what).file(r.path).place("field \"quantization_config." + key + "\"");
  };
  const auto fmt_name = qr.string_or("fmt", "e4m3");
  EAGLE_CHECK(fmt_name == "e4m3", bad("fmt", "only e4m3 FP8 is read").found(fmt_name));
  EAGLE_CHECK(qr.has("weight_block_size") && q["weight_block_size"].is_array() && q["weight_block_size"].size() == 2,
              bad("weight_block_size", "FP8 checkpoints are read block-scaled only")
                  .expected("[rows, columns] of each weight_scale_inv block")
                  .hint("per-tensor FP8 (weight_scale) is not supported"));
  // Bounded like a size (a block near 2^63 overflowed the grid arithmetic of the scales' shape).
  for (const auto& x : q["weight_block_size"]) {
    const bool in_range = x.is_number_integer() && !(x.is_number_unsigned() && x.get<std::uint64_t>() > (1u << 20)) &&
                          x.get<std::int64_t>() >= 1 && x.get<std::int64_t>() <= model::limits::kMaxSize;
    EAGLE_CHECK(in_range,
                bad("weight_block_size", "block sizes out of range")
                    .expected(fmt::format("integers in [1, {}] (rows, columns of each block)", model::limits::kMaxSize))
                    .found(x.dump()));
    c.fp8_block.push_back(x.get<std::int64_t>());
  }
  if (q.contains("modules_to_not_convert") && q["modules_to_not_convert"].is_array())
    for (const auto& m : q["modules_to_not_convert"])
      if (m.is_string()) c.fp8_skip.push_back(m.get<std::string>() + ".");
}

}  // namespace

TargetConfig TargetConfig::from_json_file(const std::string& path) {
  const json j = util::read_json_object(path, "model config",
                                        "--model_name_or_path must be a Hugging Face model folder with config.json");
  const Reader top{path, j};

  TargetConfig c;
  EAGLE_CHECK(top.has("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
                  j["architectures"][0].is_string(),
              top.bad("architectures", "expected a list with one architecture name")
                  .found(top.has("architectures") ? j["architectures"].dump() : "nothing"));
  c.architecture = j["architectures"][0].get<std::string>();
  c.model_type = top.string_or("model_type", "");
  const FamilyRow* fam = nullptr;
  for (const auto& f : kFamilies)
    if (c.architecture == f.architecture) fam = &f;
  EAGLE_CHECK(fam != nullptr,
              top.bad("architectures", "unsupported architecture").expected(family_list()).found(c.architecture));
  const bool alias = fam->model_type_alias != nullptr && c.model_type == fam->model_type_alias;
  EAGLE_CHECK(c.model_type == fam->model_type || alias,
              top.bad("model_type", "model_type does not match the architecture")
                  .expected(alias || fam->model_type_alias == nullptr
                                ? std::string(fam->model_type)
                                : fmt::format("{} or {}", fam->model_type, fam->model_type_alias))
                  .found(c.model_type));
  c.family = fam->family;
  const auto t = c.family;
  // A multimodal checkpoint (Qwen3_5ForConditionalGeneration): its text model's fields are text_config's; the
  // vision_config is not read (the vision tower is never loaded).
  c.multimodal = fam->multimodal;
  EAGLE_CHECK(!c.multimodal || (top.has("text_config") && j["text_config"].is_object()),
              top.bad("text_config", "a multimodal checkpoint needs its text model's config")
                  .expected("an object")
                  .found(top.has("text_config") ? j["text_config"].dump() : "nothing"));
  const Reader r = c.multimodal ? Reader{path, j["text_config"], "text_config."} : top;

  // Every size and count within model/config_limits.h's ceilings, the ones the head's reader applies
  // to the head made from them: what train accepts, eval, export and resume read back.
  namespace lim = model::limits;
  c.vocab_size = r.bounded("vocab_size", 1, lim::kMaxVocab);
  c.hidden_size = r.bounded("hidden_size", 1, lim::kMaxSize);
  // Qwen3-MoE's intermediate_size is only its dense layers' (checked below when there are any).
  c.intermediate_size = t == Family::qwen3_moe || t == Family::qwen3_5_moe
                            ? r.bounded_or("intermediate_size", 0, 0, lim::kMaxSize)
                        : t == Family::qwen3_next || t == Family::qwen3_5  // the config classes' defaults
                            ? r.bounded_or("intermediate_size", t == Family::qwen3_next ? 5632 : 12288, 1, lim::kMaxSize)
                            : r.bounded("intermediate_size", 1, lim::kMaxSize);
  c.num_hidden_layers = r.bounded("num_hidden_layers", 1, lim::kMaxLayers);
  c.num_attention_heads = r.bounded("num_attention_heads", 1, lim::kMaxHeads);
  c.num_key_value_heads = r.bounded_or("num_key_value_heads", c.num_attention_heads, 1, lim::kMaxHeads);
  EAGLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              r.bad("num_key_value_heads", "must divide num_attention_heads")
                  .found(fmt::format("{} heads, {} key/value heads", c.num_attention_heads, c.num_key_value_heads)));
  if (t == Family::deepseek_v3 || t == Family::glm4_moe_lite) {
    read_mla_dims(r, c);  // head_dim: the RoPE's width here, each head's query/key width after read_rope_layers
  } else if (r.has("head_dim") || hybrid_family(t) || t == Family::gemma4_text) {
    // Qwen3.5, Qwen3-Next, Gemma 4 (its sliding layers'): 256 by default
    c.head_dim = r.bounded_or("head_dim", 256, 1, lim::kMaxHeadDim);
  } else {
    EAGLE_CHECK(c.hidden_size % c.num_attention_heads == 0,
                r.bad("hidden_size", "not divisible by num_attention_heads and no head_dim given"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
    EAGLE_CHECK(c.head_dim <= lim::kMaxHeadDim,
                r.bad("hidden_size", "head_dim (hidden_size / num_attention_heads) out of range")
                    .expected(fmt::format("at most {}", lim::kMaxHeadDim))
                    .found(std::to_string(c.head_dim)));
  }
  EAGLE_CHECK(c.head_dim % 2 == 0, r.bad("head_dim", "must be even for RoPE").found(std::to_string(c.head_dim)));
  c.max_position_embeddings = r.bounded_or("max_position_embeddings", 2048, 1, lim::kMaxPositions);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  EAGLE_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps < lim::kMaxNormEps,
              r.bad("rms_norm_eps", "out of range")
                  .expected(fmt::format("a number in (0, {})", lim::kMaxNormEps))
                  .found(j["rms_norm_eps"].dump()));
  // A multimodal wrapper ties by its own (top-level) field, as transformers' get_expanded_tied_weights_keys reads it.
  // Gemma4Config and Gemma4TextConfig tie by default.
  c.tie_word_embeddings = (c.multimodal ? top : r).boolean_or("tie_word_embeddings", t == Family::gemma4_text);
  const bool gemma = t == Family::gemma2 || t == Family::gemma3_text;
  const bool gemma_mlp = gemma || t == Family::gemma4_text;
  c.hidden_act = gemma_mlp ? "gelu_pytorch_tanh" : r.string_or("hidden_act", "silu");
  EAGLE_CHECK(c.hidden_act == "silu" || gemma_mlp,
              r.bad("hidden_act", "unsupported activation").expected("silu").found(c.hidden_act));
  const Reader& rd = c.multimodal && !r.has("dtype") && !r.has("torch_dtype") ? top : r;
  c.dtype = rd.has("dtype") ? rd.string_or("dtype", "float32") : rd.string_or("torch_dtype", "float32");
  EAGLE_CHECK(c.dtype == "float32" || c.dtype == "bfloat16" || c.dtype == "float16",
              rd.bad(rd.has("dtype") ? "dtype" : "torch_dtype", "unsupported dtype")
                  .expected("float32, bfloat16 or float16")
                  .found(c.dtype));
  read_rope_layers(r, c);
  if (c.mla()) c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;

  // Bias and normalisation layout per family (as in transformers' modeling files).
  const bool attention_bias = r.boolean_or("attention_bias", t == Family::gpt_oss);
  if (t == Family::qwen2 || t == Family::mimo) {
    c.attention_bias = true;  // Qwen2 (and MiMo, a Qwen2 decoder) always has q/k/v bias, never o_proj bias
  } else if (t == Family::mistral || t == Family::mixtral) {
    EAGLE_CHECK(!attention_bias, r.bad("attention_bias", "Mistral and Mixtral have no attention bias").found("true"));
  } else {
    c.attention_bias = attention_bias;
    c.o_bias = attention_bias;  // Llama, Qwen3(-MoE) and gpt-oss put the bias on o_proj too
  }
  c.qk_norm = t == Family::qwen3 || t == Family::qwen3_moe;
  if (fam->read != nullptr) fam->read(r, c);
  c.attention_sinks = t == Family::gpt_oss;
  c.norm_weight_fp32 = t == Family::gpt_oss || t == Family::gemma4_text;  // Gemma4RMSNorm: x * w in fp32
  EAGLE_CHECK(!r.boolean_or("mlp_bias", false),
              r.bad("mlp_bias", "MLP bias is not supported").expected("false").found("true"));
  if (fam->moe) read_moe(r, c);
  bool dense_layers = !c.moe();
  for (bool sparse : c.sparse_layers) dense_layers = dense_layers || !sparse;
  EAGLE_CHECK(!dense_layers || c.intermediate_size > 0,
              r.bad("intermediate_size", "required (the dense MLP layers' size) and must be positive")
                  .found(std::to_string(c.intermediate_size)));
  read_quantization(c.multimodal && !r.has("quantization_config") ? top : r, c);
  // Sliding windows change which keys a query sees; refused where they apply and are not implemented.
  read_attention_types(r, c);
  for (const char* key : kForeignMathFields) {
    const std::string k = key;
    if (gemma && (k == "attn_logit_softcapping" || k == "final_logit_softcapping" || k == "query_pre_attn_scalar"))
      continue;  // Gemma's own fields (read above)
    if (t == Family::glm4_moe && k == "use_qk_norm") continue;  // GLM-4.5's own (read_glm4_moe)
    if (c.gemma4 && k == "final_logit_softcapping") continue;    // Gemma 4's own (read_gemma4)
    // One rule in every family: a soft cap of 0 means none, as null does.
    if (std::find(std::begin(kNoneMeansZero), std::end(kNoneMeansZero), k) != std::end(kNoneMeansZero) && r.has(key) &&
        r.j[key].is_number() && r.j[key].get<double>() == 0.0)
      continue;
    EAGLE_CHECK(!r.has(key), r.bad(key, "field changes the model's math and is not supported by this architecture")
                                 .found(r.j[key].dump())
                                 .hint("is this really a " + c.architecture + " checkpoint?"));
  }

  c.eos_token_ids = r.id_list("eos_token_id", c.vocab_size);
  c.bos_token_id = r.integer_or("bos_token_id", -1);
  if (c.multimodal) {
    // The wrapper's own ids where its text model names none; and the media placeholders (Qwen3_5Config's
    // defaults), which a text-only target cannot compute (their embeddings come from the vision tower).
    if (c.eos_token_ids.empty()) c.eos_token_ids = top.id_list("eos_token_id", c.vocab_size);
    if (c.bos_token_id < 0) c.bos_token_id = top.integer_or("bos_token_id", -1);
    using Id = std::pair<const char*, std::int64_t>;
    const std::vector<Id> qwen = {Id{"image_token_id", 248056}, Id{"video_token_id", 248057},
                                  Id{"vision_start_token_id", 248053}, Id{"vision_end_token_id", 248054}};
    // Gemma4Model replaces these three (get_placeholder_mask) by the towers' outputs; boi/eoi are plain tokens.
    const std::vector<Id> gemma4 = {Id{"image_token_id", 258880}, Id{"video_token_id", 258884},
                                    Id{"audio_token_id", 258881}};
    for (auto [key, def] : c.gemma4 ? gemma4 : qwen) {
      const auto id = top.integer_or(key, def);
      if (id >= 0 && id < c.vocab_size) c.media_tokens.push_back({id, key});
    }
  }
  return c;
}

std::vector<std::int64_t> generation_end_ids(const std::string& model_dir, const TargetConfig& config) {
  std::vector<std::int64_t> ids = config.eos_token_ids;
  const std::string path = model_dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return ids;
  const json j = util::read_json_object(path, "generation config", "remove the file or fix its JSON");
  for (auto id : Reader{path, j}.id_list("eos_token_id", config.vocab_size))
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

}  // namespace eagle::target
