// A head's config.json read back into a HeadConfig (see head_io.h): every layout's field names, each
// size range-checked before anything is built from it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/model/head_io.h"
#include "eagle/util/error.h"

using nlohmann::json;

namespace eagle::model {
namespace {

Error config_error(const std::string& file, const std::string& key, const std::string& what) {
  return Error(ErrorKind::input, what).file(file).place(fmt::format("key \"{}\"", key));
}

std::int64_t get_int(const json& j, const std::string& key, const std::string& file) {
  EAGLE_CHECK(j.contains(key) && j[key].is_number_integer(), config_error(file, key, "missing or not an integer")
                                                                 .expected("an integer")
                                                                 .found(j.contains(key) ? j[key].dump() : "nothing"));
  return j[key].get<std::int64_t>();
}

// An integer field in [lo, hi]; the bounds keep every size made from it (a head of
// intermediate_size 1e9 is a 256 GB allocation) and every division by it (no head_dim: H / heads) sane.
std::int64_t get_int(const json& j, const std::string& key, const std::string& file, std::int64_t lo, std::int64_t hi) {
  const auto v = get_int(j, key, file);
  EAGLE_CHECK(v >= lo && v <= hi, config_error(file, key, "out of range")
                                      .expected(fmt::format("an integer in [{}, {}]", lo, hi))
                                      .found(std::to_string(v)));
  return v;
}

RopeConfig rope_from_json(const json& j, std::int64_t head_dim, std::int64_t max_pos) {
  RopeConfig r;
  r.head_dim = head_dim;
  r.max_position_embeddings = max_pos;
  json p = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"]
           : j.contains("rope_scaling") && j["rope_scaling"].is_object()     ? j["rope_scaling"]
                                                                             : json::object();
  r.theta = p.value("rope_theta", j.value("rope_theta", 10000.0));
  r.type = p.value("rope_type", p.value("type", std::string("default")));
  r.factor = p.value("factor", 1.0);
  r.low_freq_factor = p.value("low_freq_factor", 1.0);
  r.high_freq_factor = p.value("high_freq_factor", 4.0);
  r.original_max_position_embeddings = p.value("original_max_position_embeddings", std::int64_t{0});
  r.beta_fast = p.value("beta_fast", 32.0);
  r.beta_slow = p.value("beta_slow", 1.0);
  r.truncate = p.value("truncate", true);
  r.attention_factor = p.value("attention_factor", 0.0);
  r.mscale = p.value("mscale", 0.0);
  r.mscale_all_dim = p.value("mscale_all_dim", 0.0);
  return r;
}

}  // namespace

HeadConfig head_config_from_json(const json& j, const std::string& file, HeadFormat* format_out) {
  HeadFormat format;
  std::string arch = j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()
                         ? j["architectures"][0].get<std::string>()
                         : "";
  if (j.value("speculators_model_type", std::string()) == "eagle3")
    format = HeadFormat::speculators;
  else if (arch == "LlamaForCausalLMEagle3" || arch == "Eagle3LlamaForCausalLM" || arch == "Eagle3Qwen3ForCausalLM")
    format = HeadFormat::sglang;
  else if (arch == "EagleLlamaForCausalLM")
    format = HeadFormat::vllm_eagle1;
  else
    throw config_error(file, "architectures", "not a draft head this tool reads")
        .expected("LlamaForCausalLMEagle3, Eagle3Speculator (speculators_model_type eagle3) or EagleLlamaForCausalLM")
        .found(arch.empty() ? "none" : arch);
  if (format_out) *format_out = format;
  const json& layer = format == HeadFormat::speculators ? j.at("transformer_layer_config") : j;
  HeadConfig c;
  c.eagle_version = format == HeadFormat::vllm_eagle1 ? 1 : 3;
  constexpr std::int64_t kMaxSize = std::int64_t{1} << 20, kMaxVocab = std::int64_t{1} << 24;
  c.hidden_size = get_int(layer, "hidden_size", file, 1, kMaxSize);
  c.intermediate_size = get_int(layer, "intermediate_size", file, 1, kMaxSize);
  c.num_attention_heads = get_int(layer, "num_attention_heads", file, 1, 4096);
  c.num_key_value_heads = layer.contains("num_key_value_heads")
                              ? get_int(layer, "num_key_value_heads", file, 1, c.num_attention_heads)
                              : c.num_attention_heads;
  EAGLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              config_error(file, "num_key_value_heads", "must divide num_attention_heads")
                  .found(fmt::format("{} heads, {} key/value heads", c.num_attention_heads, c.num_key_value_heads)));
  if (layer.contains("head_dim") && !layer["head_dim"].is_null()) {
    c.head_dim = get_int(layer, "head_dim", file, 2, 4096);
  } else {
    EAGLE_CHECK(
        c.hidden_size % c.num_attention_heads == 0,
        config_error(file, "head_dim", "missing, and hidden_size is not divisible by num_attention_heads")
            .found(fmt::format("hidden_size {}, num_attention_heads {}", c.hidden_size, c.num_attention_heads)));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  EAGLE_CHECK(c.head_dim % 2 == 0,
              config_error(file, "head_dim", "must be even for RoPE").found(std::to_string(c.head_dim)));
  c.rms_norm_eps = layer.value("rms_norm_eps", 1e-6);
  EAGLE_CHECK(
      c.rms_norm_eps > 0 && c.rms_norm_eps < 1,
      config_error(file, "rms_norm_eps", "out of range").expected("in (0, 1)").found(std::to_string(c.rms_norm_eps)));
  c.hidden_act = layer.value("hidden_act", std::string("silu"));
  c.max_position_embeddings =
      layer.contains("max_position_embeddings") ? get_int(layer, "max_position_embeddings", file, 1, 1 << 24) : 2048;
  c.rope = rope_from_json(layer, c.head_dim, c.max_position_embeddings);
  if (c.eagle_version == 3) {  // EAGLE 3.1 switches at the top level (norm_before_fc also in eagle_config)
    auto flag = [&](const char* key) {
      const json* where = j.contains(key) ? &j : nullptr;
      if (!where && j.contains("eagle_config") && j["eagle_config"].is_object() && j["eagle_config"].contains(key))
        where = &j["eagle_config"];
      if (!where) return false;
      EAGLE_CHECK((*where)[key].is_boolean(), config_error(file, key, "not a boolean").found((*where)[key].dump()));
      return (*where)[key].get<bool>();
    };
    c.fc_norm = flag("fc_norm");
    c.norm_output = flag("norm_output");
    c.norm_before_fc = flag("norm_before_fc");
    EAGLE_CHECK(!(c.fc_norm && c.norm_before_fc),
                config_error(file, "norm_before_fc", "fc_norm and norm_before_fc together are not read")
                    .hint("speculators refuses the pair; export one of them"));
    // speculators: norm_before_residual is true when absent; eagle-train trains it false.
    const bool nbr = j.contains("norm_before_residual") ? j["norm_before_residual"].is_boolean() &&
                                                              j["norm_before_residual"].get<bool>()
                                                        : format == HeadFormat::speculators;
    EAGLE_CHECK(!nbr, config_error(file, "norm_before_residual", "heads with norm_before_residual are not read")
                          .expected("false (written by eagle-train)").found("true (or absent in speculators format)"));
    c.qk_norm = layer.value("model_type", std::string("llama")) == "qwen3" || arch == "Eagle3Qwen3ForCausalLM";
  }
  c.target_dtype = j.value("dtype", j.value("torch_dtype", layer.value("torch_dtype", c.target_dtype)));
  c.vocab_size = get_int(layer, "vocab_size", file, 1, kMaxVocab);
  c.draft_vocab_size = c.eagle_version == 3 ? get_int(j, "draft_vocab_size", file, 1, c.vocab_size) : c.vocab_size;
  c.target_hidden_size =
      j.contains("target_hidden_size") ? get_int(j, "target_hidden_size", file, 1, kMaxSize) : c.hidden_size;
  if (c.eagle_version == 3) {
    if (j.contains("eagle_aux_hidden_state_layer_ids")) {
      c.aux_layer_ids = j["eagle_aux_hidden_state_layer_ids"].get<std::vector<std::int64_t>>();
    } else if (j.contains("eagle_config") && j["eagle_config"].contains("eagle_aux_hidden_state_layer_ids")) {
      for (auto id : j["eagle_config"]["eagle_aux_hidden_state_layer_ids"].get<std::vector<std::int64_t>>())
        c.aux_layer_ids.push_back(id + 1);
    }
  }
  if (j.contains("speculators_config")) {
    const auto& s = j["speculators_config"];
    if (s.contains("proposal_methods") && !s["proposal_methods"].empty())
      c.ttt_steps = s["proposal_methods"][0].value("speculative_tokens", c.ttt_steps);
    if (s.contains("verifier")) {
      c.target_name_or_path = s["verifier"].value("name_or_path", std::string());
      if (s["verifier"].contains("architectures") && !s["verifier"]["architectures"].empty())
        c.target_architecture = s["verifier"]["architectures"][0].get<std::string>();
    }
  }
  if (j.contains("eagle_train")) {
    const auto& e = j["eagle_train"];
    c.target_name_or_path = e.value("target_name_or_path", c.target_name_or_path);
    c.target_architecture = e.value("target_architecture", c.target_architecture);
    c.target_dtype = e.value("target_dtype", c.target_dtype);
    c.target_num_hidden_layers = e.value("target_num_hidden_layers", c.target_num_hidden_layers);
    c.ttt_steps = e.value("ttt_steps", c.ttt_steps);
    c.ttt_loss_decay = e.value("ttt_loss_decay", c.ttt_loss_decay);
    c.fc_bias = e.value("fc_bias", c.fc_bias);
    c.eagle1_feature_weight = e.value("eagle1_feature_weight", c.eagle1_feature_weight);
    c.eagle1_token_weight = e.value("eagle1_token_weight", c.eagle1_token_weight);
  }
  EAGLE_CHECK(
      c.ttt_steps >= 1 && c.ttt_steps <= 64,
      config_error(file, "ttt_steps", "out of range").expected("in [1, 64]").found(std::to_string(c.ttt_steps)));
  if (c.eagle_version == 3) {
    EAGLE_CHECK(!c.aux_layer_ids.empty(),
                config_error(file, "eagle_aux_hidden_state_layer_ids", "the aux layers are not named")
                    .expected("eagle_aux_hidden_state_layer_ids or eagle_config.eagle_aux_hidden_state_layer_ids"));
  }
  return c;
}

}  // namespace eagle::model
