// The ledger of eagle-train follow (see state.h).
#include "eagle/follow/state.h"

#include <algorithm>

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/json_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace eagle::follow {

bool FollowState::consumed(const std::string& name) const {
  return std::any_of(shards.begin(), shards.end(), [&](const Shard& s) { return s.name == name; });
}

std::optional<Published> FollowState::serving() const {
  if (published.empty()) return std::nullopt;
  return published.back();
}

std::vector<std::string> FollowState::shard_names() const {
  std::vector<std::string> out;
  for (const auto& s : shards) out.push_back(s.name);
  return out;
}

json FollowState::to_json() const {
  json shard_list = json::array(), versions = json::array();
  for (const auto& s : shards)
    shard_list.push_back({{"name", s.name},
                          {"bytes", s.bytes},
                          {"version", s.version},
                          {"order", s.seen_order},
                          {"dropped", s.dropped}});
  for (const auto& p : published)
    versions.push_back({{"version", p.version},
                        {"ar", p.ar},
                        {"policy_version", p.policy_version},
                        {"round", p.round},
                        {"steps", p.steps}});
  return {{"rounds", rounds},
          {"steps", steps},
          {"policy_version", policy_version},
          {"policy_dir", policy_dir},
          {"shards", shard_list},
          {"published", versions},
          {"draft", draft}};
}

FollowState FollowState::from_json(const json& j, const std::string& file) {
  FollowState s;
  try {
    s.rounds = j.at("rounds").get<std::int64_t>();
    s.steps = j.at("steps").get<std::int64_t>();
    s.policy_version = j.at("policy_version").get<std::int64_t>();
    s.policy_dir = j.at("policy_dir").get<std::string>();
    s.draft = j.at("draft").get<std::string>();
    for (const auto& e : j.at("shards"))
      s.shards.push_back({e.at("name").get<std::string>(), e.at("bytes").get<std::uintmax_t>(),
                          e.at("version").get<std::int64_t>(), e.at("order").get<std::int64_t>(),
                          e.at("dropped").get<bool>()});
    for (const auto& e : j.at("published"))
      s.published.push_back({e.at("version").get<std::int64_t>(), e.at("ar").get<double>(),
                             e.at("policy_version").get<std::int64_t>(), e.at("round").get<std::int64_t>(),
                             e.at("steps").get<std::int64_t>()});
  } catch (const json::exception& e) {
    throw Error(ErrorKind::input, "the follow ledger is not one eagle-train wrote")
        .file(file)
        .found(e.what())
        .hint("restore it, or start in a new output_dir");
  }
  return s;
}

FollowState FollowState::load(const fs::path& dir) {
  const auto file = dir / kStateFile;
  if (!fs::exists(file)) return {};
  return from_json(util::read_json_object(file.string(), "follow ledger", "a follow_state.json eagle-train wrote"),
                   file.string());
}

void FollowState::save(const fs::path& dir) const {
  util::write_file_atomic(dir / kStateFile, to_json().dump(2) + "\n");
}

}  // namespace eagle::follow
