// Reading a model's config.json (target_config.cpp, target_config_moe.cpp, target_config_families.cpp,
// target_rope_config.cpp, target_gemma4_config.cpp): typed field access whose errors name the file and the
// field, the RoPE parameters in both transformers spellings, and the per-family readers.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/model/config_limits.h"
#include "eagle/target/target_config.h"
#include "eagle/util/error.h"

namespace eagle::target {

using nlohmann::json;

struct Reader {
  const std::string& path;
  const json& j;
  std::string prefix = "";  // how errors name j: "text_config." for a multimodal checkpoint's text model

  Error bad(const std::string& key, const std::string& what) const {
    return Error(ErrorKind::input, what).file(path).place(fmt::format("field \"{}{}\"", prefix, key));
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
  // An integer in [lo, hi] (model/config_limits.h holds the ceilings): counts and sizes are bounded
  // here, before anything loops over them or allocates by them.
  std::int64_t bounded(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    const auto v = integer(key);
    EAGLE_CHECK(
        v >= lo && v <= hi,
        bad(key, "out of range").expected(fmt::format("an integer in [{}, {}]", lo, hi)).found(std::to_string(v)));
    return v;
  }
  std::int64_t bounded_or(const std::string& key, std::int64_t def, std::int64_t lo, std::int64_t hi) const {
    return has(key) ? bounded(key, lo, hi) : def;
  }
  double number_or(const std::string& key, double def) const {
    if (!has(key)) return def;
    EAGLE_CHECK(j[key].is_number(), bad(key, "not a number").found(j[key].dump()));
    return j[key].get<double>();
  }
  // A number in [lo, hi] (JSON has no NaN or Inf; 1e300 is refused by the bound), else def.
  double number_in(const std::string& key, double def, double lo, double hi) const {
    const double v = number_or(key, def);
    EAGLE_CHECK(v >= lo && v <= hi, bad(key, "out of range")
                                        .expected(fmt::format("a number in [{}, {}]", lo, hi))
                                        .found(has(key) ? j[key].dump() : fmt::format("{}", v)));
    return v;
  }
  // A tanh soft cap: 0 or null is none; else in [1e-6, 1e12] (a cap of 1e-300 is 0 in fp32, and x / 0 is NaN).
  double softcap(const std::string& key) const {
    const double v = number_in(key, 0.0, 0.0, 1e12);
    EAGLE_CHECK(v == 0.0 || v >= 1e-6, bad(key, "out of range")
                                           .expected("0 or null (no cap), or a cap in [1e-06, 1e+12]")
                                           .found(j[key].dump()));
    return v;
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

// config.json's layer_types, when given: one of two names per layer (`other` or `flagged`; `what` names
// them in errors: "attention type", "layer type"); per layer whether it is `flagged`. nullopt: absent.
inline std::optional<std::vector<bool>> read_layer_types(const Reader& r, std::int64_t layers, const char* other,
                                                         const char* flagged, const char* what) {
  if (!r.has("layer_types")) return std::nullopt;
  const auto& types = r.j["layer_types"];
  EAGLE_CHECK(types.is_array() && static_cast<std::int64_t>(types.size()) == layers,
              r.bad("layer_types", fmt::format("expected one {} per layer", what))
                  .expected(fmt::format("a list of {} entries", layers))
                  .found(types.dump()));
  std::vector<bool> out(types.size(), false);
  for (std::size_t l = 0; l < types.size(); ++l) {
    EAGLE_CHECK(types[l] == other || types[l] == flagged,
                r.bad(fmt::format("layer_types[{}]", l), fmt::format("unknown {}", what))
                    .expected(fmt::format("{} or {}", other, flagged))
                    .found(types[l].dump()));
    out[l] = types[l] == flagged;
  }
  return out;
}

// The RoPE of every layer: c.rope (full-attention layers), and c.local_rope where sliding layers
// use another (Gemma 3's rope_local_base_freq, or 5.x rope_parameters per layer type). Reads
// rope_parameters (5.x) or rope_theta + rope_scaling (4.x), partial_rotary_factor, and refuses
// unsupported types by name. c.head_dim, c.max_position_embeddings and c.family must be set.
void read_rope_layers(const Reader& r, TargetConfig& c);
// One RoPE from its parameter object `params` (named `where` in errors), over c.head_dim.
model::RopeConfig parse_rope(const Reader& r, const json& params, const std::string& where, const TargetConfig& c);

inline bool hybrid_family(Family f) {
  return f == Family::qwen3_next || f == Family::qwen3_5 || f == Family::qwen3_5_moe;
}

// The expert layout and router of a MoE family (target_config_moe.cpp; c.family and the common fields set).
void read_moe(const Reader& r, TargetConfig& c);

// The readers of the fields only some families have (target_config_families.cpp), called from each
// family's row after the common fields (read_mla_dims: before the RoPE, whose width it sets).
void read_gemma(const Reader& r, TargetConfig& c);
void read_phi3(const Reader& r, TargetConfig& c);
void read_mimo(const Reader& r, TargetConfig& c);
void read_mla_dims(const Reader& r, TargetConfig& c);
void read_deepseek(const Reader& r, TargetConfig& c);
void read_glm4_moe(const Reader& r, TargetConfig& c);
void read_hybrid(const Reader& r, TargetConfig& c);

// Gemma 4's own fields (target_gemma4_config.cpp): its layer types and windows, per-layer head widths and
// key/value heads, RoPE per layer type, KV sharing, per-layer inputs, the MoE block; refuses what is not
// implemented by name.
void read_gemma4(const Reader& r, TargetConfig& c);

}  // namespace eagle::target
