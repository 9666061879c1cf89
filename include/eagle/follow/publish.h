// Publishing drafts (eagle-train follow, docs/follow.md) and reading the policy pointer. Both use one pointer
// format: a folder's `latest` file holds one line naming a subfolder of it ("versions/3", "step-1200").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace eagle::follow {

inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kVersionsDir = "versions";

// The target of a policy folder: policy/latest names the current subfolder, and its version is the number its
// name ends with (else the count of changes follow has seen); without a latest file the folder itself is the
// target, version 0.
struct Policy {
  std::filesystem::path dir;
  std::string name;  // latest's line; empty without one
  std::int64_t version = 0;
};
Policy read_policy(const std::filesystem::path& policy_dir);

// Exports the draft of `checkpoint` as output_dir/versions/<version> in its kind's serving layout (written under a
// temporary name, then renamed), then points output_dir/latest at it (a temporary file renamed over it): a reader
// of latest always finds a whole folder. target_dir: the target the export names (an MTP draft is written into a
// copy of it). Returns the published folder.
std::filesystem::path publish(const std::string& checkpoint, const std::filesystem::path& output_dir,
                              std::int64_t version, const std::string& target_dir);
// The version numbers published in output_dir/versions/ (its numeric folders), ascending.
std::vector<std::int64_t> published_versions(const std::filesystem::path& output_dir);
// Removes the published versions other than the newest `keep` and `serving` (keep 0: none removed).
void prune_versions(const std::filesystem::path& output_dir, std::int64_t serving, std::int64_t keep);
// Runs command with sh -c, EAGLE_PUBLISHED_DIR and EAGLE_PUBLISHED_VERSION in its environment; a failure is logged
// (the draft is published whatever the engine does with it).
void run_publish_command(const std::string& command, const std::filesystem::path& dir, std::int64_t version);

}  // namespace eagle::follow
