// A draft's config.json read through typed, bounded getters, shared by every kind's reader (export/config_json.cpp
// for EAGLE, dflash/io.cpp for DFlash): absent or null is the default; another JSON type, or a number outside
// its field's range, is an Error(input) naming the file, the field's path ("eagle_train.ttt_steps") and what
// was expected. The ranges keep every size made from a field and every loop over one bounded
// (model/config_limits.h), before anything is allocated.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/model/config_limits.h"
#include "eagle/util/error.h"

namespace eagle::head {

// A draft's layers and block, as train bounds them (--draft_num_layers, --dflash_block_size).
inline constexpr std::int64_t kMaxDraftLayers = 16;
inline constexpr std::int64_t kMaxBlockSize = 64;

inline Error config_error(const std::string& file, const std::string& key, const std::string& what) {
  return Error(ErrorKind::input, what).file(file).place(fmt::format("key \"{}\"", key));
}

// One object of the config (the top level, transformer_layer_config, eagle_train, ...).
struct ConfigFields {
  const nlohmann::json& j;
  const std::string& file;
  std::string prefix;  // "" or "eagle_train." for a nested object

  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  Error bad(const std::string& key, const std::string& what) const { return config_error(file, prefix + key, what); }
  const nlohmann::json& typed(const std::string& key, bool ok, const char* type) const {
    EAGLE_CHECK(ok, bad(key, "wrong JSON type").expected(type).found(j[key].dump()));
    return j[key];
  }

  std::int64_t integer(const std::string& key) const {
    EAGLE_CHECK(has(key), bad(key, "missing or not an integer").expected("an integer").found("nothing"));
    const auto& v = typed(key, j[key].is_number_integer(), "an integer");
    // An unsigned value past 2^63-1 would wrap to a negative one (2^64-1 reads as -1).
    EAGLE_CHECK(!v.is_number_unsigned() ||
                    v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                bad(key, "out of range").expected("an integer in [-2^63, 2^63-1]").found(v.dump()));
    return v.get<std::int64_t>();
  }
  // An integer field in [lo, hi]; the bounds keep every size made from it (a head of
  // intermediate_size 1e9 is a 256 GB allocation) and every division by it (no head_dim: H / heads) sane.
  std::int64_t integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    // A value past 2^63-1 is out of [lo, hi] too: named with the field's own range (a mask_token_id
    // of 2^64-1 is outside the vocabulary, not "outside int64").
    EAGLE_CHECK(!has(key) || !j[key].is_number_unsigned() ||
                    j[key].get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                bad(key, "out of range").expected(fmt::format("an integer in [{}, {}]", lo, hi)).found(j[key].dump()));
    const auto v = integer(key);
    EAGLE_CHECK(
        v >= lo && v <= hi,
        bad(key, "out of range").expected(fmt::format("an integer in [{}, {}]", lo, hi)).found(std::to_string(v)));
    return v;
  }
  std::int64_t integer_or(const std::string& key, std::int64_t def, std::int64_t lo, std::int64_t hi) const {
    return has(key) ? integer(key, lo, hi) : def;
  }
  // A finite number in [lo, hi], else the default.
  double number_or(const std::string& key, double def, double lo, double hi) const {
    if (!has(key)) return def;
    const double v = typed(key, j[key].is_number(), "a number").get<double>();
    EAGLE_CHECK(std::isfinite(v) && v >= lo && v <= hi,
                bad(key, "out of range").expected(fmt::format("a number in [{}, {}]", lo, hi)).found(j[key].dump()));
    return v;
  }
  // rms_norm_eps in (0, model::limits::kMaxNormEps) (0 divides by zero on a zero row), else the default 1e-6.
  double rms_norm_eps() const {
    constexpr double kMax = model::limits::kMaxNormEps;
    const double v = number_or("rms_norm_eps", 1e-6, 0, kMax);
    EAGLE_CHECK(v > 0 && v < kMax, bad("rms_norm_eps", "out of range")
                                       .expected(fmt::format("a number in (0, {})", kMax))
                                       .found(fmt::format("{}", v)));
    return v;
  }
  std::string string_or(const std::string& key, const std::string& def) const {
    return has(key) ? typed(key, j[key].is_string(), "a string").get<std::string>() : def;
  }
  bool boolean_or(const std::string& key, bool def) const {
    return has(key) ? typed(key, j[key].is_boolean(), "true or false").get<bool>() : def;
  }
  // The first string of a list of strings (architectures); empty when absent or empty.
  std::string first_string(const std::string& key) const {
    if (!has(key)) return "";
    const auto& list = typed(key, j[key].is_array(), "a list of strings");
    if (list.empty()) return "";
    EAGLE_CHECK(list[0].is_string(), bad(key + "[0]", "wrong JSON type").expected("a string").found(list[0].dump()));
    return list[0].get<std::string>();
  }
  std::vector<std::int64_t> integers(const std::string& key) const {
    const auto& list = typed(key, j[key].is_array(), "a list of integers");
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      EAGLE_CHECK(
          list[i].is_number_integer() &&
              (!list[i].is_number_unsigned() ||
               list[i].get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())),
          bad(fmt::format("{}[{}]", key, i), "wrong JSON type").expected("an integer").found(list[i].dump()));
      out.push_back(list[i].get<std::int64_t>());
    }
    return out;
  }
  // A nested object (an empty one when absent), its fields named under "key.".
  ConfigFields object(const std::string& key) const {
    static const nlohmann::json empty = nlohmann::json::object();
    if (!has(key)) return {empty, file, prefix + key + "."};
    return {typed(key, j[key].is_object(), "an object"), file, prefix + key + "."};
  }
  // The first object of a list of objects (proposal_methods); an empty one when absent or empty.
  ConfigFields first_object(const std::string& key) const {
    static const nlohmann::json empty = nlohmann::json::object();
    if (!has(key)) return {empty, file, prefix + key + "[0]."};
    const auto& list = typed(key, j[key].is_array(), "a list of objects");
    if (list.empty()) return {empty, file, prefix + key + "[0]."};
    EAGLE_CHECK(list[0].is_object(), bad(key + "[0]", "wrong JSON type").expected("an object").found(list[0].dump()));
    return {list[0], file, prefix + key + "[0]."};
  }
};

}  // namespace eagle::head
