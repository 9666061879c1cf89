// The MTP head's config from the target's, from a folder's config.json, and an MTP checkpoint's config.json
// (see mtp_config.h).
#include "eagle/head/mtp/config.h"

#include <fmt/format.h>

#include "eagle/head/mtp/layout.h"
#include "eagle/util/error.h"

using nlohmann::json;

namespace eagle::head {

namespace {

using target::Family;

// The config field that counts a family's MTP layers.
const char* mtp_layers_field(Family f) {
  return f == Family::qwen3_5 || f == Family::qwen3_5_moe ? "mtp_num_hidden_layers" : "num_nextn_predict_layers";
}

// Qwen3.5 architectures (text and multimodal, dense and MoE) and Qwen3-Next's.
bool qwen_hybrid_architecture(const std::string& arch) {
  return arch == "Qwen3_5ForCausalLM" || arch == "Qwen3_5ForConditionalGeneration" || arch == "Qwen3_5MoeForCausalLM" ||
         arch == "Qwen3_5MoeForConditionalGeneration" || arch == "Qwen3NextForCausalLM";
}

// The architectures whose MTP layer is model.layers.{num_hidden_layers} (DeepSeek-V3 and Kimi-K2, GLM-4.5,
// GLM-4.7-Flash; the last is refused by mtp_config_from_target).
bool after_last_architecture(const std::string& arch) {
  return arch == "DeepseekV3ForCausalLM" || arch == "Glm4MoeForCausalLM" || arch == "Glm4MoeLiteForCausalLM";
}

// The MTP family of a target family ("" when it has none the head trains).
std::string mtp_family_of(Family f) {
  switch (f) {
    case Family::mimo:
      return "mimo";
    case Family::qwen3_5:
      return "qwen3_5";
    case Family::qwen3_5_moe:
      return "qwen3_5_moe";
    case Family::qwen3_next:
      return "qwen3_next";
    case Family::deepseek_v3:
      return "deepseek_v3";
    case Family::glm4_moe:
      return "glm4_moe";
    default:
      return "";
  }
}

// What vLLM's DeepSeek-V3 and GLM-4.5 MTP layers take from the target's config beyond the head's layout,
// refused by name where vLLM would serve another layer than the one read here.
void check_after_last(const target::TargetConfig& t, const MtpLayout& l) {
  auto refuse = [&](const std::string& what, const char* field) {
    return Error(ErrorKind::usage,
                 fmt::format("--draft mtp does not train this {} MTP layer: {}", t.architecture, what))
        .place(field)
        .hint("--draft eagle trains a new head for any target");
  };
  // vLLM's DeepseekV2MoE and Glm4MoE: n_shared_experts' MLP beside the routed experts (0 builds a zero-wide one).
  EAGLE_CHECK(t.moe.shared_intermediate_size >= 1,
              refuse("no shared experts", "n_shared_experts").expected("at least 1").found("0"));
  if (!l.mla) {
    // GLM-4.5 and 4.6 ship default RoPE, the one an MTP checkpoint's config.json writes for this layer.
    EAGLE_CHECK(t.rope.type == "default",
                refuse("its RoPE is scaled", "rope_parameters").expected("rope_type default").found(t.rope.type));
    return;
  }
  // vLLM's DeepseekV2MoE reads scoring_func (default softmax) and builds the correction bias only for topk_method
  // noaux_tc; transformers' DeepseekV3Config has neither and computes the sigmoid router with the bias.
  EAGLE_CHECK(t.moe.router_named, refuse("vLLM reads its router from scoring_func and topk_method, absent here "
                                         "(it would route by softmax, without e_score_correction_bias)",
                                         "scoring_func, topk_method")
                                      .expected("\"scoring_func\": \"sigmoid\" and \"topk_method\": \"noaux_tc\" in "
                                                "config.json, as DeepSeek-V3's and Kimi-K2's configs write them")
                                      .found("missing"));
  // The head's MLA layer has a latent query (q_a_proj, q_a_layernorm, q_b_proj).
  EAGLE_CHECK(t.attention.q_lora_rank > 0,
              refuse("no q_lora_rank (q_proj straight from the hidden state)", "q_lora_rank")
                  .expected("q_lora_rank > 0 (DeepSeek-V3, Kimi-K2)")
                  .found("null"));
  // DeepseekV2MLAAttention serves any scaled RoPE as deepseek_yarn, and YaRN with attention_factor 1 as
  // deepseek_llama_scaling.
  EAGLE_CHECK(t.rope.type == "default" || (t.rope.type == "yarn" && t.rope.attention_factor != 1.0),
              refuse("vLLM's MLA layer serves default RoPE and YaRN (deepseek_yarn)", "rope_parameters")
                  .expected("rope_type default, or yarn without attention_factor 1")
                  .found(t.rope.type + (t.rope.attention_factor == 1.0 ? ", attention_factor 1" : "")));
}

// DeepSeek-V3's and GLM-4.5's fields of an MTP checkpoint's config.json (transformers' DeepseekV3Config,
// Glm4MoeConfig), read back by the target reader into the same head config.
json after_last_config_json(const HeadConfig& c) {
  const bool mla = c.mla();
  json rope = {{"rope_type", c.rope.type}, {"rope_theta", c.rope.theta}};
  if (c.rope.type == "yarn")
    rope.update({{"factor", c.rope.factor},
                 {"original_max_position_embeddings", c.rope.original_max_position_embeddings},
                 {"beta_fast", c.rope.beta_fast},
                 {"beta_slow", c.rope.beta_slow},
                 {"mscale", c.rope.mscale},
                 {"mscale_all_dim", c.rope.mscale_all_dim}});
  if (!mla) rope["partial_rotary_factor"] = static_cast<double>(c.rope.head_dim) / static_cast<double>(c.head_dim);
  const auto& r = c.moe_router;
  json j = {{"architectures", {mla ? "DeepseekV3ForCausalLM" : "Glm4MoeForCausalLM"}},
            {"model_type", mla ? "deepseek_v3" : "glm4_moe"},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"num_hidden_layers", c.target_num_hidden_layers},
            {"num_nextn_predict_layers", 1},
            {"rms_norm_eps", c.rms_norm_eps},
            {"hidden_act", c.hidden_act},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rope_parameters", rope},
            {"attention_bias", c.attention_bias},
            {"vocab_size", c.vocab_size},
            {"tie_word_embeddings", false},
            {"dtype", c.target_dtype},
            // The layer at index L is sparse for any first_k_dense_replace <= L; 0 says so.
            {"first_k_dense_replace", 0},
            {"n_routed_experts", r.num_experts},
            {"num_experts_per_tok", r.experts_per_token},
            {"moe_intermediate_size", c.moe_intermediate_size},
            {"n_shared_experts", c.shared_intermediate_size / c.moe_intermediate_size},
            {"n_group", r.n_group},
            {"topk_group", r.topk_group},
            {"routed_scaling_factor", r.routed_scaling_factor},
            {"norm_topk_prob", r.norm_topk_prob}};
  if (mla) {
    j.update({{"q_lora_rank", c.q_lora_rank},
              {"kv_lora_rank", c.kv_lora_rank},
              {"qk_nope_head_dim", c.qk_nope_head_dim},
              {"qk_rope_head_dim", c.qk_rope_head_dim},
              {"v_head_dim", c.v_head_dim},
              {"rope_interleave", true},
              {"scoring_func", "sigmoid"},
              {"topk_method", "noaux_tc"}});
  } else {
    j.update({{"head_dim", c.head_dim}, {"use_qk_norm", c.qk_norm}});
  }
  return j;
}

}  // namespace

HeadConfig mtp_config_from_target(const target::TargetConfig& t) {
  // vLLM 0.32.0's hf_config_override for Glm4MoeLiteForCausalLM sets num_hidden_layers 0
  // (vllm/config/speculative.py), so its glm4_moe_lite_mtp.py reads model.layers.0.* (the target's first,
  // dense layer) as the MTP layer and not model.layers.{L}.*: no layer trained here would be served.
  EAGLE_CHECK(t.family != Family::glm4_moe_lite || t.num_mtp_layers == 0,
              Error(ErrorKind::usage, "--draft mtp does not train GLM-4.7-Flash's MTP layer")
                  .place("draft")
                  .found(fmt::format("{}: vLLM 0.32.0 serves model.layers.0 as its MTP layer (its override sets "
                                     "num_hidden_layers 0), not the shipped model.layers.{}",
                                     t.architecture, t.num_hidden_layers))
                  .hint("--draft eagle trains a new head for any target"));
  const auto family = mtp_family_of(t.family);
  EAGLE_CHECK(t.num_mtp_layers >= 1 && !family.empty(),
              Error(ErrorKind::usage, "the target ships no MTP layer for --draft mtp")
                  .place("draft")
                  .expected("a MiMoForCausalLM, DeepseekV3ForCausalLM (DeepSeek-V3, Kimi-K2) or Glm4MoeForCausalLM "
                            "(GLM-4.5, 4.6) target with num_nextn_predict_layers >= 1, a Qwen3.5 or Qwen3.5-MoE one "
                            "with mtp_num_hidden_layers >= 1, or a Qwen3NextForCausalLM")
                  .found(fmt::format("{} with {} MTP layers", t.architecture, t.num_mtp_layers))
                  .hint("--draft eagle trains a new head for any target"));
  // vLLM's Qwen3NextDecoderLayer makes its MLP a mixture of experts by its layer index (0 in mtp.layers.0) as the
  // target's layers (mlp_only_layers, decoder_sparse_step): Qwen3-Next's released models have experts everywhere;
  // a dense MTP layer is not what every vLLM build serves, so it is refused by name.
  EAGLE_CHECK(t.family != Family::qwen3_next || t.sparse(0),
              Error(ErrorKind::usage, "--draft mtp does not train a dense Qwen3-Next MTP layer")
                  .place("decoder_sparse_step, mlp_only_layers")
                  .expected("layer index 0 a mixture of experts (decoder_sparse_step 1, 0 not in mlp_only_layers)")
                  .found(fmt::format("{}: layer 0 dense", t.architecture))
                  .hint("--draft eagle trains a new head for any target"));
  // vLLM drafts k > 1 tokens with several MTP layers through MultiModuleMTPSpeculator, whose rules
  // differ (MTP.md 8); MiMo-7B, the Qwen3.5 models, DeepSeek-V3 and GLM-4.5 ship one layer.
  EAGLE_CHECK(t.num_mtp_layers == 1, Error(ErrorKind::usage, "--draft mtp trains a target with one MTP layer")
                                         .place(mtp_layers_field(t.family))
                                         .expected("1")
                                         .found(std::to_string(t.num_mtp_layers)));
  const auto l = mtp_layout(family, t.num_hidden_layers);
  // Qwen3.5's attention_bias puts a bias on o_proj as well, which the head's layer does not have; DeepSeek-V3's
  // on q_a_proj, kv_a_proj_with_mqa and o_proj, which vLLM's MLA layer does not have (its loader skips them).
  EAGLE_CHECK(l.attention_bias || !t.attention.bias,
              Error(ErrorKind::usage,
                    fmt::format("--draft mtp does not train a {} MTP layer with attention biases", t.architecture))
                  .place("attention_bias")
                  .expected("false")
                  .found("true"));
  if (l.prefix_after_last_layer) check_after_last(t, l);
  auto c = HeadConfig::from_target(t, 3, {t.num_hidden_layers}, t.vocab_size);
  c.mtp_family = l.family;
  c.attention_bias = l.attention_bias && t.attention.bias;
  c.qk_norm = l.qk_norm || (l.qk_norm_of_target && t.attention.qk_norm);
  c.norm_one_plus = l.norm_one_plus;
  c.attn_output_gate = l.attn_output_gate;
  if (l.partial_rope) c.rope = t.rope;  // its rotary width: the first head_dim * partial_rotary_factor features
  if (l.mla) c.set_mla_shape(t);        // vLLM's DeepseekV2MLAAttention of the target's config, its RoPE theta
  c.num_layers = 1;
  c.draft_vocab_size = t.vocab_size;
  c.ttt_steps = t.num_mtp_layers;  // vLLM's default k: n_predict (MTP.md 1)
  // The block's MLP: Qwen3.5-MoE's and Qwen3-Next's Qwen3NextSparseMoeBlock (softmax top k, Qwen3.5-MoE always
  // renormalised, the gated shared expert; vLLM's qwen3_next.py, qwen3_5.py), DeepSeek-V3's DeepseekV2MoE and
  // GLM-4.5's Glm4MoE (sigmoid grouped top k with the correction bias, routed_scaling_factor, shared_experts):
  // vLLM makes layer index L sparse when L >= first_k_dense_replace, which the target reader bounds to <= L.
  const bool qwen_moe = t.family == Family::qwen3_5_moe || t.family == Family::qwen3_next;
  if (qwen_moe || (l.prefix_after_last_layer && t.moe.enabled())) {
    c.moe_router = t.moe_router();
    c.moe_intermediate_size = t.moe.intermediate_size;
    c.shared_intermediate_size = t.moe.shared_intermediate_size;
    c.shared_expert_gate = t.moe.shared_expert_gate;
  }
  return c;
}

bool is_mtp_config(const json& j) {
  const auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) return false;
  const auto name = (*arch)[0].get<std::string>();
  if (name == "MiMoForCausalLM") return true;
  const bool after_last = after_last_architecture(name);
  if (!after_last && !qwen_hybrid_architecture(name)) return false;
  const auto text = j.find("text_config");
  const json& r = text != j.end() && text->is_object() ? *text : j;
  // Qwen3-Next, DeepSeek-V3 and GLM: num_nextn_predict_layers, absent 1 (vLLM's default; transformers' configs);
  // DeepSeek's and GLM's reader also takes num_mtp_layers.
  const bool next = name == "Qwen3NextForCausalLM" || after_last;
  const char* key = next ? "num_nextn_predict_layers" : "mtp_num_hidden_layers";
  auto v = r.find(key);
  if (v == r.end() && after_last) v = r.find("num_mtp_layers");
  if (v == r.end()) return next;
  return v->is_number_integer() && v->get<std::int64_t>() >= 1;
}

HeadConfig mtp_config_from_json(const json& j, const std::string& file) {
  auto c = mtp_config_from_target(target::TargetConfig::from_json_file(file));
  if (!j.contains("eagle_train")) return c;
  const auto& e = j["eagle_train"];
  auto bad = [&](const char* key) {
    return Error(ErrorKind::input, "an eagle_train field of the MTP head is out of range")
        .file(file)
        .place(fmt::format("eagle_train.{}", key))
        .found(e.contains(key) ? e[key].dump() : "missing");
  };
  EAGLE_CHECK(e.is_object() && e.value("mtp_family", "") == c.mtp_family, bad("mtp_family"));
  EAGLE_CHECK(e.contains("ttt_steps") && e["ttt_steps"].is_number_integer() &&
                  e["ttt_steps"].get<std::int64_t>() >= 1 && e["ttt_steps"].get<std::int64_t>() <= 32,
              bad("ttt_steps"));
  c.ttt_steps = e["ttt_steps"].get<std::int64_t>();
  EAGLE_CHECK(e.contains("ttt_loss_decay") && e["ttt_loss_decay"].is_number() &&
                  e["ttt_loss_decay"].get<double>() >= 0.0 && e["ttt_loss_decay"].get<double>() <= 1.0,
              bad("ttt_loss_decay"));
  c.ttt_loss_decay = e["ttt_loss_decay"].get<double>();
  c.target_name_or_path = e.value("target_name_or_path", "");
  // A checkpoint's config.json is a text model's: the target's own architecture (a multimodal
  // Qwen3_5ForConditionalGeneration) is recorded beside it.
  if (e.contains("target_architecture") && e["target_architecture"].is_string())
    c.target_architecture = e["target_architecture"].get<std::string>();
  return c;
}

json mtp_config_json(const HeadConfig& c) {
  const bool after_last = mtp_layout(c).prefix_after_last_layer;
  // DeepSeek-V3's MLA layer serves YaRN as well (its fields written below); every other layer default RoPE.
  EAGLE_CHECK(c.rope.type == "default" || (c.mla() && c.rope.type == "yarn"),
              Error(ErrorKind::usage, "the MTP checkpoint writes default RoPE only (YaRN for DeepSeek-V3)")
                  .found(c.rope.type));
  const json eagle_train = {{"mtp_family", c.mtp_family},
                            {"ttt_steps", c.ttt_steps},
                            {"ttt_loss_decay", c.ttt_loss_decay},
                            {"target_name_or_path", c.target_name_or_path},
                            {"target_architecture", c.target_architecture},
                            {"target_dtype", c.target_dtype}};
  if (after_last) {
    auto j = after_last_config_json(c);
    j["eagle_train"] = eagle_train;
    return j;
  }
  if (c.mtp_family != "mimo") {
    // A text config of the family (Qwen3_5TextConfig's, Qwen3_5MoeTextConfig's or Qwen3NextConfig's fields) that
    // the target reader reads back into this head's config.
    const bool next = c.mtp_family == "qwen3_next", moe = c.mtp_family != "qwen3_5";
    json j = {{"architectures",
               {next  ? "Qwen3NextForCausalLM"
                : moe ? "Qwen3_5MoeForCausalLM"
                      : "Qwen3_5ForCausalLM"}},
              {"model_type", next  ? "qwen3_next"
                             : moe ? "qwen3_5_moe_text"
                                   : "qwen3_5_text"},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_key_value_heads},
              {"head_dim", c.head_dim},
              {"num_hidden_layers", c.target_num_hidden_layers},
              {next ? "num_nextn_predict_layers" : "mtp_num_hidden_layers", 1},
              {"rms_norm_eps", c.rms_norm_eps},
              {"hidden_act", c.hidden_act},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rope_parameters",
               {{"rope_type", "default"},
                {"rope_theta", c.rope.theta},
                {"partial_rotary_factor", static_cast<double>(c.rope.head_dim) / static_cast<double>(c.head_dim)}}},
              {"attention_bias", false},
              {"vocab_size", c.vocab_size},
              {"tie_word_embeddings", false},
              {"dtype", c.target_dtype},
              {"eagle_train", eagle_train}};
    if (moe) {
      j["num_experts"] = c.moe_router.num_experts;
      j["num_experts_per_tok"] = c.moe_router.experts_per_token;
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["shared_expert_intermediate_size"] = c.shared_intermediate_size;
    }
    if (next) {
      j["norm_topk_prob"] = c.moe_router.norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = json::array();
    }
    return j;
  }
  return {{"architectures", {"MiMoForCausalLM"}},
          {"model_type", "mimo"},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim},
          {"num_hidden_layers", c.target_num_hidden_layers},
          {"num_nextn_predict_layers", 1},
          {"rms_norm_eps", c.rms_norm_eps},
          {"hidden_act", c.hidden_act},
          {"max_position_embeddings", c.max_position_embeddings},
          {"rope_theta", c.rope.theta},
          {"vocab_size", c.vocab_size},
          {"tie_word_embeddings", false},
          {"use_sliding_window", false},
          {"torch_dtype", c.target_dtype},
          {"eagle_train", eagle_train}};
}

}  // namespace eagle::head
