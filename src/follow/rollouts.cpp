// The rollout folder (see rollouts.h).
#include "eagle/follow/rollouts.h"

#include <algorithm>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"

namespace fs = std::filesystem;

namespace eagle::follow {

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool is_shard_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || util::is_temporary(name)) return false;
  for (std::string_view ext : {".jsonl", ".jsonl.gz", ".json", ".json.gz", ".bin"})
    if (ends_with(name, ext)) return true;
  return false;
}

std::int64_t version_in_name(const std::string& name) {
  static const std::regex pattern(R"([-.]v(\d{1,9})\.(jsonl|json|bin)(\.gz)?$)");
  std::smatch m;
  return std::regex_search(name, m, pattern) ? std::stoll(m[1].str()) : -1;
}

std::vector<fs::path> new_shard_files(const fs::path& dir, const std::vector<std::string>& known) {
  std::error_code ec;
  EAGLE_CHECK(fs::is_directory(dir, ec), Error(ErrorKind::input, "the rollout folder does not exist")
                                             .file(dir.string())
                                             .place("rollout_dir")
                                             .expected("a folder the producer adds shards to"));
  const std::set<std::string> seen(known.begin(), known.end());
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (!e.is_regular_file(ec) || !is_shard_name(name) || seen.count(name)) continue;
    found.emplace_back(e.last_write_time(ec), e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [time, path] : found) out.push_back(std::move(path));
  return out;
}

fs::path quarantine(const fs::path& dir, const std::string& name) {
  const auto q = dir / kQuarantineDir;
  fs::create_directories(q);
  auto to = q / name;
  for (int i = 1; fs::exists(to); ++i) to = q / fmt::format("{}.{}", name, i);
  fs::rename(dir / name, to);
  return to;
}

}  // namespace eagle::follow
