// The ledger of eagle-train follow: output_dir/follow_state.json, rewritten whole (a temporary, then renamed)
// after each round. A shard is recorded when the round that trained on it completes: a process killed during a
// round leaves the ledger of the round before, and the restart trains the same shards again from the same draft,
// so that no shard is lost or trained on twice.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle/follow/rollouts.h"

namespace eagle::follow {

inline constexpr const char* kStateFile = "follow_state.json";

// A published draft: output_dir/versions/<version>.
struct Published {
  std::int64_t version = 0;
  double ar = 0;                    // on the held-out shard of its round, against its policy
  std::int64_t policy_version = 0;  // the target's version it was trained and measured on
  std::int64_t round = 0;
  std::int64_t steps = 0;  // follow's optimizer steps when it was published
};

struct FollowState {
  std::int64_t rounds = 0;           // completed rounds
  std::int64_t steps = 0;            // optimizer steps of the completed rounds
  std::int64_t policy_version = -1;  // the target's version of the last round (-1: none yet)
  std::string policy_dir;            // its folder
  std::vector<Shard> shards;         // consumed, in order of arrival (seen_order)
  std::vector<Published> published;  // in order; the last is serving
  std::string draft;                 // the draft the next round starts from (a folder in output_dir), "" at first

  bool consumed(const std::string& name) const;
  std::optional<Published> serving() const;
  std::vector<std::string> shard_names() const;

  nlohmann::json to_json() const;
  static FollowState from_json(const nlohmann::json& j, const std::string& file);
  // The state in dir, or a new one when dir holds none.
  static FollowState load(const std::filesystem::path& dir);
  void save(const std::filesystem::path& dir) const;
};

}  // namespace eagle::follow
