// TargetConfig::from_json_file: reads a Hugging Face config.json in the transformers 4.x and 5.x
// spellings and refuses, by name, every architecture or field that would change the math; and
// generation_end_ids, which adds generation_config.json's eos ids.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/model/target.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::model {

namespace {

using nlohmann::json;

struct Reader {
  const std::string& path;
  const json& j;

  Error bad(const std::string& key, const std::string& what) const {
    return Error(ErrorKind::input, what).file(path).place(fmt::format("field \"{}\"", key));
  }
  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }

  std::int64_t integer(const std::string& key) const {
    EAGLE_CHECK(has(key), bad(key, "required field missing"));
    EAGLE_CHECK(j[key].is_number_integer(), bad(key, "not an integer").found(j[key].dump()));
    // An unsigned value past 2^63-1 would wrap to a negative one (2^64-1 reads as -1).
    EAGLE_CHECK(!j[key].is_number_unsigned() ||
                    j[key].get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                bad(key, "integer out of range").expected("at most 2^63-1").found(j[key].dump()));
    return j[key].get<std::int64_t>();
  }
  std::int64_t positive(const std::string& key) const {
    auto v = integer(key);
    EAGLE_CHECK(v > 0, bad(key, "must be positive").found(std::to_string(v)));
    return v;
  }
  std::int64_t integer_or(const std::string& key, std::int64_t def) const { return has(key) ? integer(key) : def; }
  double number_or(const std::string& key, double def) const {
    if (!has(key)) return def;
    EAGLE_CHECK(j[key].is_number(), bad(key, "not a number").found(j[key].dump()));
    return j[key].get<double>();
  }
  bool boolean_or(const std::string& key, bool def) const {
    if (!has(key)) return def;
    EAGLE_CHECK(j[key].is_boolean(), bad(key, "not a boolean").found(j[key].dump()));
    return j[key].get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& def) const {
    if (!has(key)) return def;
    EAGLE_CHECK(j[key].is_string(), bad(key, "not a string").found(j[key].dump()));
    return j[key].get<std::string>();
  }
  // A token id or a list of them (eos_token_id); empty when absent. Each must be a token of the
  // vocabulary: 2^64-1 would read as -1 through a signed cast, and an id past the vocabulary never
  // ends a reply.
  std::vector<std::int64_t> id_list(const std::string& key, std::int64_t vocab_size) const {
    std::vector<std::int64_t> ids;
    if (!has(key)) return ids;
    const json list = j[key].is_array() ? j[key] : json::array({j[key]});
    for (const auto& x : list) {
      EAGLE_CHECK(x.is_number_integer(), bad(key, "not an integer").found(x.dump()));
      const bool in_vocab = x.is_number_unsigned() ? x.get<std::uint64_t>() < static_cast<std::uint64_t>(vocab_size)
                                                   : x.get<std::int64_t>() >= 0 && x.get<std::int64_t>() < vocab_size;
      EAGLE_CHECK(in_vocab, bad(key, "token id outside the vocabulary")
                                .expected(fmt::format("an id in [0, {}) (vocab_size)", vocab_size))
                                .found(x.dump()));
      ids.push_back(x.get<std::int64_t>());
    }
    return ids;
  }
};

struct Family {
  const char* architecture;
  const char* model_type;
};
constexpr Family kFamilies[] = {{"LlamaForCausalLM", "llama"},       {"MistralForCausalLM", "mistral"},
                                {"Qwen2ForCausalLM", "qwen2"},       {"Qwen3ForCausalLM", "qwen3"},
                                {"Qwen3MoeForCausalLM", "qwen3_moe"}, {"MixtralForCausalLM", "mixtral"},
                                {"GptOssForCausalLM", "gpt_oss"}};
constexpr const char* kFamilyList =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
    "MixtralForCausalLM or GptOssForCausalLM";

// Fields that other decoders use to change the math; none of them exists in the supported
// families, so their presence means the checkpoint is something we would compute wrongly.
constexpr const char* kForeignMathFields[] = {
    "attn_logit_softcapping", "final_logit_softcapping", "logit_scale", "embedding_multiplier",
    "residual_multiplier",    "attention_multiplier",    "logits_scaling", "no_rope_layers",
    "use_qk_norm",            "query_pre_attn_scalar"};

// rope_parameters (5.x) or rope_theta + rope_scaling (4.x) into a RopeConfig.
RopeConfig read_rope(const Reader& r, std::int64_t head_dim, std::int64_t max_pos) {
  RopeConfig rope;
  rope.head_dim = head_dim;
  rope.max_position_embeddings = max_pos;
  json params = json::object();
  std::string where = "rope_parameters";
  if (r.has("rope_parameters")) {
    params = r.j["rope_parameters"];
    EAGLE_CHECK(params.is_object() && !params.contains("full_attention"),
                r.bad(where, "unsupported rope_parameters layout (per-layer-type RoPE)").found(params.dump()));
  } else {
    where = "rope_scaling";
    if (r.has("rope_scaling")) {
      params = r.j["rope_scaling"];
      EAGLE_CHECK(params.is_object(), r.bad(where, "not an object").found(params.dump()));
    }
    params["rope_theta"] = r.number_or("rope_theta", 10000.0);
  }
  const Reader p{r.path, params};
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error(ErrorKind::input, what).file(r.path).place(fmt::format("field \"{}.{}\"", where, key));
  };
  rope.theta = p.number_or("rope_theta", 10000.0);
  EAGLE_CHECK(rope.theta > 0, bad("rope_theta", "must be positive").found(std::to_string(rope.theta)));
  rope.type = p.has("rope_type") ? p.string_or("rope_type", "default") : p.string_or("type", "default");
  EAGLE_CHECK(rope.type == "default" || rope.type == "linear" || rope.type == "dynamic" || rope.type == "llama3" ||
                  rope.type == "yarn",
              bad("rope_type", "unsupported RoPE type").expected("default, linear, dynamic, llama3 or yarn")
                  .found(rope.type).hint("this scaling changes the attention math and is not implemented"));
  const double partial = p.number_or("partial_rotary_factor", r.number_or("partial_rotary_factor", 1.0));
  EAGLE_CHECK(partial == 1.0, bad("partial_rotary_factor", "partial rotary embeddings are not supported")
                                  .expected("1.0").found(std::to_string(partial)));
  if (rope.type == "yarn") {
    rope.original_max_position_embeddings = p.integer("original_max_position_embeddings");
    EAGLE_CHECK(rope.original_max_position_embeddings > 0,
                bad("original_max_position_embeddings", "must be positive")
                    .found(std::to_string(rope.original_max_position_embeddings)));
    // transformers: a missing factor is the ratio of the two context lengths.
    rope.factor = p.number_or("factor", static_cast<double>(max_pos) /
                                            static_cast<double>(rope.original_max_position_embeddings));
    rope.beta_fast = p.number_or("beta_fast", 32.0);
    rope.beta_slow = p.number_or("beta_slow", 1.0);
    // transformers reads truncate from the top-level rope_parameters (default true).
    rope.truncate = p.boolean_or("truncate", true);
    rope.attention_factor = p.number_or("attention_factor", 0.0);
    rope.mscale = p.number_or("mscale", 0.0);
    rope.mscale_all_dim = p.number_or("mscale_all_dim", 0.0);
    EAGLE_CHECK(rope.beta_fast > 0 && rope.beta_slow > 0 && std::isfinite(rope.beta_fast) &&
                    std::isfinite(rope.beta_slow),
                bad("beta_fast", "yarn's beta_fast and beta_slow must be positive")
                    .found(fmt::format("{} and {}", rope.beta_fast, rope.beta_slow)));
    EAGLE_CHECK(rope.attention_factor >= 0 && std::isfinite(rope.attention_factor),
                bad("attention_factor", "must be positive").found(std::to_string(rope.attention_factor)));
  }
  if (rope.type != "default" && rope.type != "yarn") {
    rope.factor = p.number_or("factor", 0.0);
    EAGLE_CHECK(rope.factor >= 1.0,
                bad("factor", "RoPE scaling factor must be >= 1").found(std::to_string(rope.factor)));
  }
  if (rope.type == "llama3") {
    rope.low_freq_factor = p.number_or("low_freq_factor", 1.0);
    rope.high_freq_factor = p.number_or("high_freq_factor", 4.0);
    rope.original_max_position_embeddings = p.integer("original_max_position_embeddings");
    EAGLE_CHECK(rope.high_freq_factor > rope.low_freq_factor,
                bad("high_freq_factor", "must exceed low_freq_factor").found(std::to_string(rope.high_freq_factor)));
  }
  EAGLE_CHECK(rope.factor >= 1.0 && std::isfinite(rope.factor),
              bad("factor", "RoPE scaling factor must be >= 1").found(std::to_string(rope.factor)));
  // dynamic: transformers scales against max_position_embeddings (original_max_position_embeddings
  // is not used by its formula), so rope.original_max_position_embeddings stays 0.
  return rope;
}

bool is_moe_family(const std::string& model_type) {
  return model_type == "qwen3_moe" || model_type == "mixtral" || model_type == "gpt_oss";
}

// The expert layout of the MoE families (transformers' modeling_qwen3_moe, _mixtral, _gpt_oss).
void read_moe(const Reader& r, TargetConfig& c) {
  const auto& t = c.model_type;
  const char* experts_key = t == "qwen3_moe" && r.has("num_experts") ? "num_experts" : "num_local_experts";
  c.num_experts = r.integer_or(experts_key, t == "mixtral" ? 8 : 128);
  c.experts_per_token = r.integer_or("num_experts_per_tok", t == "gpt_oss" ? 4 : (t == "mixtral" ? 2 : 8));
  EAGLE_CHECK(c.num_experts >= 0 && (t == "qwen3_moe" || c.num_experts > 0),
              r.bad(experts_key, "number of experts out of range").found(std::to_string(c.num_experts)));
  EAGLE_CHECK(c.num_experts == 0 || (c.experts_per_token >= 1 && c.experts_per_token <= c.num_experts),
              r.bad("num_experts_per_tok", "experts per token out of range")
                  .expected(fmt::format("1..{} (the number of experts)", c.num_experts))
                  .found(std::to_string(c.experts_per_token)));
  c.sparse_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), c.num_experts > 0);
  if (t == "qwen3_moe") {
    c.moe_intermediate_size = r.positive("moe_intermediate_size");
    c.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
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
  } else {
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
  }
  c.routing_weights_fp32 = t == "mixtral";
  if (t == "gpt_oss") {
    c.routing = MoeRouting::topk_softmax;
    c.router_bias = c.expert_bias = c.clamped_swiglu = true;
    c.swiglu_alpha = r.number_or("swiglu_alpha", 1.702);
    c.swiglu_limit = r.number_or("swiglu_limit", 7.0);
    EAGLE_CHECK(std::isfinite(c.swiglu_alpha) && c.swiglu_limit > 0 && std::isfinite(c.swiglu_limit),
                r.bad("swiglu_limit", "gpt-oss's swiglu_alpha and swiglu_limit must be finite, the limit positive")
                    .found(fmt::format("{} and {}", c.swiglu_alpha, c.swiglu_limit)));
  }
}

// A quantization_config: gpt-oss's MXFP4 experts are read (dequantized exactly at load); any other
// method is refused by name.
void read_quantization(const Reader& r, TargetConfig& c) {
  if (!r.has("quantization_config")) return;
  const auto& q = r.j["quantization_config"];
  EAGLE_CHECK(q.is_object(), r.bad("quantization_config", "not an object").found(q.dump()));
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string()
                                 ? q["quant_method"].get<std::string>() : q.dump();
  EAGLE_CHECK(c.model_type == "gpt_oss" && method == "mxfp4",
              r.bad("quantization_config.quant_method", "quantized checkpoint not supported")
                  .expected(c.model_type == "gpt_oss" ? "mxfp4, or no quantization_config"
                                                      : "no quantization_config (a float checkpoint)")
                  .found(method)
                  .hint("use the checkpoint's bf16 release, or dequantize it with transformers first"));
  EAGLE_CHECK(c.hidden_size % 32 == 0 && c.moe_intermediate_size % 32 == 0,
              r.bad("quantization_config", "MXFP4 blocks hold 32 values: hidden_size and intermediate_size must be "
                                           "multiples of 32")
                  .found(fmt::format("{} and {}", c.hidden_size, c.moe_intermediate_size)));
  c.quant_method = method;
}

// Which keys each layer attends. Dense families: sliding windows are refused where they apply;
// Mixtral and Qwen3-MoE (use_sliding_window) slide in every layer; gpt-oss follows layer_types.
void read_attention_types(const Reader& r, TargetConfig& c) {
  const auto& t = c.model_type;
  const auto L = static_cast<std::size_t>(c.num_hidden_layers);
  if (t == "mistral") {
    const auto window = r.integer_or("sliding_window", 0);
    EAGLE_CHECK(window <= 0 || window >= c.max_position_embeddings,
                r.bad("sliding_window", "sliding-window attention is not supported")
                    .expected(fmt::format("null or >= max_position_embeddings ({})", c.max_position_embeddings))
                    .found(std::to_string(window)));
  } else if (t == "qwen2" || t == "qwen3") {
    EAGLE_CHECK(!r.boolean_or("use_sliding_window", false),
                r.bad("use_sliding_window", "sliding-window attention is not supported").found("true"));
  } else if (t == "mixtral" || (t == "qwen3_moe" && r.boolean_or("use_sliding_window", false))) {
    const auto window = r.integer_or("sliding_window", t == "qwen3_moe" ? 4096 : 0);
    EAGLE_CHECK(window >= 0, r.bad("sliding_window", "must be positive or null").found(std::to_string(window)));
    if (window > 0) c.layer_windows.assign(L, window);
  }
  if (t == "gpt_oss") {
    const auto window = r.integer_or("sliding_window", 128);
    EAGLE_CHECK(window > 0, r.bad("sliding_window", "must be positive").found(std::to_string(window)));
    c.layer_windows.assign(L, 0);
    if (!r.has("layer_types")) {  // transformers' default: sliding, full, sliding, ...
      for (std::size_t l = 0; l < L; l += 2) c.layer_windows[l] = window;
      return;
    }
    const auto& types = r.j["layer_types"];
    EAGLE_CHECK(types.is_array() && types.size() == L,
                r.bad("layer_types", "expected one attention type per layer")
                    .expected(fmt::format("a list of {} entries", L)).found(types.dump()));
    for (std::size_t l = 0; l < L; ++l) {
      EAGLE_CHECK(types[l] == "full_attention" || types[l] == "sliding_attention",
                  r.bad(fmt::format("layer_types[{}]", l), "unknown attention type")
                      .expected("full_attention or sliding_attention").found(types[l].dump()));
      if (types[l] == "sliding_attention") c.layer_windows[l] = window;
    }
    return;
  }
  if (r.has("layer_types")) {
    EAGLE_CHECK(r.j["layer_types"].is_array(), r.bad("layer_types", "not a list"));
    for (const auto& x : r.j["layer_types"])
      EAGLE_CHECK(x == "full_attention", r.bad("layer_types", "only full_attention layers are supported")
                                             .found(x.dump()));
  }
}

}  // namespace

TargetConfig TargetConfig::from_json_file(const std::string& path) {
  const json j = util::read_json_object(path, "model config",
                                  "--model_name_or_path must be a Hugging Face model folder with config.json");
  const Reader r{path, j};

  TargetConfig c;
  EAGLE_CHECK(r.has("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
                  j["architectures"][0].is_string(),
              r.bad("architectures", "expected a list with one architecture name")
                  .found(r.has("architectures") ? j["architectures"].dump() : "nothing"));
  c.architecture = j["architectures"][0].get<std::string>();
  c.model_type = r.string_or("model_type", "");
  const Family* fam = nullptr;
  for (const auto& f : kFamilies)
    if (c.architecture == f.architecture) fam = &f;
  EAGLE_CHECK(fam != nullptr,
              r.bad("architectures", "unsupported architecture").expected(kFamilyList).found(c.architecture));
  EAGLE_CHECK(c.model_type == fam->model_type,
              r.bad("model_type", "model_type does not match the architecture")
                  .expected(fam->model_type).found(c.model_type));

  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  // Qwen3-MoE's intermediate_size is only its dense layers' (checked below when there are any).
  c.intermediate_size = c.model_type == "qwen3_moe" ? r.integer_or("intermediate_size", 0)
                                                   : r.positive("intermediate_size");
  c.num_hidden_layers = r.positive("num_hidden_layers");
  c.num_attention_heads = r.positive("num_attention_heads");
  c.num_key_value_heads = r.has("num_key_value_heads") ? r.positive("num_key_value_heads") : c.num_attention_heads;
  EAGLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              r.bad("num_key_value_heads", "must divide num_attention_heads")
                  .found(fmt::format("{} heads, {} key/value heads", c.num_attention_heads, c.num_key_value_heads)));
  if (r.has("head_dim")) {
    c.head_dim = r.positive("head_dim");
  } else {
    EAGLE_CHECK(c.hidden_size % c.num_attention_heads == 0,
                r.bad("hidden_size", "not divisible by num_attention_heads and no head_dim given"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  EAGLE_CHECK(c.head_dim % 2 == 0, r.bad("head_dim", "must be even for RoPE").found(std::to_string(c.head_dim)));
  c.max_position_embeddings = r.integer_or("max_position_embeddings", 2048);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.hidden_act = r.string_or("hidden_act", "silu");
  EAGLE_CHECK(c.hidden_act == "silu",
              r.bad("hidden_act", "unsupported activation").expected("silu").found(c.hidden_act));
  c.dtype = r.has("dtype") ? r.string_or("dtype", "float32") : r.string_or("torch_dtype", "float32");
  EAGLE_CHECK(c.dtype == "float32" || c.dtype == "bfloat16" || c.dtype == "float16",
              r.bad(r.has("dtype") ? "dtype" : "torch_dtype", "unsupported dtype")
                  .expected("float32, bfloat16 or float16").found(c.dtype));
  c.rope = read_rope(r, c.head_dim, c.max_position_embeddings);

  // Bias and normalisation layout per family (as in transformers' modeling files).
  const bool attention_bias = r.boolean_or("attention_bias", c.model_type == "gpt_oss");
  if (c.model_type == "qwen2") {
    c.attention_bias = true;  // Qwen2 always has q/k/v bias, never o_proj bias
  } else if (c.model_type == "mistral" || c.model_type == "mixtral") {
    EAGLE_CHECK(!attention_bias, r.bad("attention_bias", "Mistral and Mixtral have no attention bias").found("true"));
  } else {
    c.attention_bias = attention_bias;
    c.o_bias = attention_bias;  // Llama, Qwen3(-MoE) and gpt-oss put the bias on o_proj too
  }
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  c.attention_sinks = c.norm_weight_fp32 = c.model_type == "gpt_oss";
  EAGLE_CHECK(!r.boolean_or("mlp_bias", false),
              r.bad("mlp_bias", "MLP bias is not supported").expected("false").found("true"));
  if (is_moe_family(c.model_type)) read_moe(r, c);
  bool dense_layers = !c.moe();
  for (bool sparse : c.sparse_layers) dense_layers = dense_layers || !sparse;
  EAGLE_CHECK(!dense_layers || c.intermediate_size > 0,
              r.bad("intermediate_size", "required (the dense MLP layers' size) and must be positive")
                  .found(std::to_string(c.intermediate_size)));
  read_quantization(r, c);
  // Sliding windows change which keys a query sees; refused where they apply and are not implemented.
  read_attention_types(r, c);
  for (const char* key : kForeignMathFields)
    EAGLE_CHECK(!r.has(key), r.bad(key, "field changes the model's math and is not supported by this architecture")
                                 .hint("is this really a " + c.architecture + " checkpoint?"));

  c.eos_token_ids = r.id_list("eos_token_id", c.vocab_size);
  c.bos_token_id = r.integer_or("bos_token_id", -1);
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

}  // namespace eagle::model
