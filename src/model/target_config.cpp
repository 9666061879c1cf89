// TargetConfig::from_json_file: reads a Hugging Face config.json in the transformers 4.x and 5.x
// spellings and refuses, by name, every architecture or field that would change the math; and
// generation_end_ids, which adds generation_config.json's eos ids.
#include <algorithm>
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
constexpr Family kFamilies[] = {{"LlamaForCausalLM", "llama"},
                                {"MistralForCausalLM", "mistral"},
                                {"Qwen2ForCausalLM", "qwen2"},
                                {"Qwen3ForCausalLM", "qwen3"}};

// Fields that other decoders use to change the math; none of them exists in the four supported
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
  EAGLE_CHECK(rope.type == "default" || rope.type == "linear" || rope.type == "dynamic" || rope.type == "llama3",
              bad("rope_type", "unsupported RoPE type").expected("default, linear, dynamic or llama3").found(rope.type)
                  .hint("this scaling changes the attention math and is not implemented"));
  const double partial = p.number_or("partial_rotary_factor", r.number_or("partial_rotary_factor", 1.0));
  EAGLE_CHECK(partial == 1.0, bad("partial_rotary_factor", "partial rotary embeddings are not supported")
                                  .expected("1.0").found(std::to_string(partial)));
  if (rope.type != "default") {
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
  // dynamic: transformers scales against max_position_embeddings (original_max_position_embeddings
  // is not used by its formula), so rope.original_max_position_embeddings stays 0.
  return rope;
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
              r.bad("architectures", "unsupported architecture")
                  .expected("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM")
                  .found(c.architecture));
  EAGLE_CHECK(c.model_type == fam->model_type,
              r.bad("model_type", "model_type does not match the architecture")
                  .expected(fam->model_type).found(c.model_type));

  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  c.intermediate_size = r.positive("intermediate_size");
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
  const bool attention_bias = r.boolean_or("attention_bias", false);
  if (c.model_type == "qwen2") {
    c.attention_bias = true;  // Qwen2 always has q/k/v bias, never o_proj bias
  } else if (c.model_type == "mistral") {
    EAGLE_CHECK(!attention_bias, r.bad("attention_bias", "Mistral has no attention bias").found("true"));
  } else {
    c.attention_bias = attention_bias;
    c.o_bias = attention_bias;  // Llama and Qwen3 put the bias on o_proj too
  }
  c.qk_norm = c.model_type == "qwen3";
  EAGLE_CHECK(!r.boolean_or("mlp_bias", false),
              r.bad("mlp_bias", "MLP bias is not supported").expected("false").found("true"));

  // Sliding windows change which keys a query sees; refuse them where they actually apply.
  if (c.model_type == "mistral") {
    const auto window = r.integer_or("sliding_window", 0);
    EAGLE_CHECK(window <= 0 || window >= c.max_position_embeddings,
                r.bad("sliding_window", "sliding-window attention is not supported")
                    .expected(fmt::format("null or >= max_position_embeddings ({})", c.max_position_embeddings))
                    .found(std::to_string(window)));
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    EAGLE_CHECK(!r.boolean_or("use_sliding_window", false),
                r.bad("use_sliding_window", "sliding-window attention is not supported").found("true"));
  }
  if (r.has("layer_types")) {
    EAGLE_CHECK(j["layer_types"].is_array(), r.bad("layer_types", "not a list"));
    for (const auto& t : j["layer_types"])
      EAGLE_CHECK(t == "full_attention", r.bad("layer_types", "only full_attention layers are supported")
                                             .found(t.dump()));
  }
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
