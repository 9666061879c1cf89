// The statistics file of a prepared dataset (stats.json, described in docs/data.md): TokenStats as
// JSON and back.
#pragma once

#include <nlohmann/json.hpp>

#include "eagle/data/dataset.h"

namespace eagle::data {

inline constexpr int kStatsFormatVersion = 2;  // 2: sparse trained_token_counts [[id, count], ...]

// One split's statistics: counts, fractions, the length histogram (with bucket bounds) and the
// dense per-id trained-token counts.
nlohmann::json stats_to_json(const TokenStats& s);
// The inverse of stats_to_json (fractions and bounds are derived, so ignored). Throws
// ErrorKind::input naming `file` when a field is missing or of the wrong type.
TokenStats stats_from_json(const nlohmann::json& j, const std::string& file);

}  // namespace eagle::data
