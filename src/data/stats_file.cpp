// TokenStats <-> JSON for stats.json (layout in docs/data.md).
#include "eagle/data/stats_file.h"

#include <type_traits>

#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::data {

nlohmann::json stats_to_json(const TokenStats& s) {
  nlohmann::json j;
  auto frac = [](std::uint64_t a, std::uint64_t b) {
    return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
  };
  j["samples"] = s.samples;
  j["tokens"] = s.tokens;
  j["trained_tokens"] = s.trained_tokens;
  j["trained_fraction"] = frac(s.trained_tokens, s.tokens);
  j["masked_fraction"] = s.tokens ? 1.0 - frac(s.trained_tokens, s.tokens) : 0.0;
  j["mean_length"] = frac(s.tokens, s.samples);
  j["max_length"] = s.max_length;
  j["max_token_id"] = s.max_token_id;
  j["truncated"] = s.truncated;
  j["dropped"] = s.dropped;
  j["skipped"] = s.skipped;
  nlohmann::json hist = nlohmann::json::array();
  for (std::size_t b = 0; b < s.length_histogram.size(); ++b) {
    std::uint64_t lo = b == 0 ? 1 : (1ull << b), hi = (2ull << b) - 1;
    hist.push_back({{"min_length", lo}, {"max_length", hi}, {"samples", s.length_histogram[b]}});
  }
  j["length_histogram"] = std::move(hist);
  // Sparse: [[id, count], ...] for the ids seen, by increasing id.
  nlohmann::json counts = nlohmann::json::array();
  for (const auto& [id, n] : s.trained_token_counts.entries()) counts.push_back({id, n});
  j["trained_token_counts"] = std::move(counts);
  return j;
}

TokenStats stats_from_json(const nlohmann::json& j, const std::string& file) {
  TokenStats s;
  auto get = [&](const char* key, auto& out) { out = util::json_field<std::decay_t<decltype(out)>>(j, key, file); };
  get("samples", s.samples);
  get("tokens", s.tokens);
  get("trained_tokens", s.trained_tokens);
  get("max_length", s.max_length);
  get("max_token_id", s.max_token_id);
  get("truncated", s.truncated);
  get("dropped", s.dropped);
  get("skipped", s.skipped);
  std::vector<TokenCounts::Entry> counts;
  get("trained_token_counts", counts);
  s.trained_token_counts = TokenCounts(counts);
  nlohmann::json hist;
  get("length_histogram", hist);
  EAGLE_CHECK(hist.is_array(), util::json_field_wrong_type("length_histogram", file, "not a list"));
  for (const auto& b : hist) {
    EAGLE_CHECK(b.is_object(), util::json_field_wrong_type("length_histogram", file, "an entry is not an object"));
    EAGLE_CHECK(!b.contains("samples") || b["samples"].is_number_unsigned(),
                util::json_field_wrong_type("length_histogram[].samples", file, "not a count"));
    s.length_histogram.push_back(b.value("samples", std::uint64_t{0}));
  }
  return s;
}

}  // namespace eagle::data
