// The rollout folder of eagle-train follow (docs/follow.md): shards a producer adds whole (written under another
// name, then renamed in), each a JSONL file (.jsonl, .jsonl.gz, .json) or a prepared .bin file of token ids and
// loss masks. A shard's policy version is in its name (`-v<N>` or `.v<N>` before the extension), else the target's
// version when the shard is first seen. A malformed shard is moved to rollout_dir/quarantine/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace eagle::follow {

inline constexpr const char* kQuarantineDir = "quarantine";

struct Shard {
  std::string name;             // file name inside rollout_dir
  std::uintmax_t bytes = 0;     // its size when first seen
  std::int64_t version = 0;     // the policy version that produced it
  std::int64_t seen_order = 0;  // order of arrival (mtime, then name), increasing
  bool dropped = false;         // not trained on: older than follow_max_version_lag allows when its round came
};

// Whether a file name is a shard's (not hidden, not a temporary, a data extension).
bool is_shard_name(const std::string& name);
// The version a shard's name carries (`-v<N>` / `.v<N>` before the extension), or -1.
std::int64_t version_in_name(const std::string& name);
// The shards in dir whose names are not in `known`, oldest first (mtime, then name).
std::vector<std::filesystem::path> new_shard_files(const std::filesystem::path& dir,
                                                   const std::vector<std::string>& known);
// Moves a shard into dir/quarantine/ (created; a name taken there gets a numbered suffix); returns where.
std::filesystem::path quarantine(const std::filesystem::path& dir, const std::string& name);

}  // namespace eagle::follow
