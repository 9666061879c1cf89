// Publishing drafts and reading the policy pointer (see publish.h).
#include "eagle/follow/publish.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <vector>

#include <fmt/format.h>

#include "eagle/head/export/draft.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"

namespace fs = std::filesystem;

namespace eagle::follow {

Policy read_policy(const fs::path& policy_dir) {
  Policy p{policy_dir, "", 0};
  const auto pointer = policy_dir / kLatestFile;
  if (!fs::exists(pointer)) return p;
  std::ifstream in(pointer);
  std::getline(in, p.name);
  while (!p.name.empty() && (p.name.back() == '\n' || p.name.back() == '\r' || p.name.back() == ' ')) p.name.pop_back();
  EAGLE_CHECK(!p.name.empty() && fs::path(p.name).is_relative() && p.name.find("..") == std::string::npos,
              Error(ErrorKind::input, "the policy pointer does not name a subfolder")
                  .file(pointer.string())
                  .place("line 1")
                  .expected("the name of a folder beside it, e.g. versions/3")
                  .found(p.name.empty() ? "an empty line" : p.name));
  p.dir = policy_dir / p.name;
  EAGLE_CHECK(fs::is_directory(p.dir), Error(ErrorKind::input, "the policy pointer names a missing folder")
                                           .file(pointer.string())
                                           .place("line 1")
                                           .found(p.dir.string()));
  static const std::regex number(R"((\d{1,9})$)");
  std::smatch m;
  const auto leaf = fs::path(p.name).filename().string();
  p.version = std::regex_search(leaf, m, number) ? std::stoll(m[1].str()) : 0;
  return p;
}

fs::path publish(const std::string& checkpoint, const fs::path& output_dir, std::int64_t version,
                 const std::string& target_dir) {
  const auto versions = output_dir / kVersionsDir;
  fs::create_directories(versions);
  const auto dir = versions / std::to_string(version);  // a new number (follow's next_version)
  const auto loaded = head::load_head(checkpoint);
  const auto format = head::draft_spec(loaded.config).formats.front();
  head::export_draft(loaded, format, {dir.string(), target_dir, nullptr}, checkpoint);  // temporary, then renamed
  util::write_file_atomic(output_dir / kLatestFile, fmt::format("{}/{}\n", kVersionsDir, version));
  return dir;
}

std::vector<std::int64_t> published_versions(const fs::path& output_dir) {
  std::vector<std::int64_t> found;
  std::error_code ec;
  if (!fs::is_directory(output_dir / kVersionsDir, ec)) return found;
  for (const auto& e : fs::directory_iterator(output_dir / kVersionsDir)) {
    const auto name = e.path().filename().string();
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit))
      found.push_back(static_cast<std::int64_t>(std::stoll(name)));
  }
  std::sort(found.begin(), found.end());
  return found;
}

void prune_versions(const fs::path& output_dir, std::int64_t serving, std::int64_t keep) {
  if (keep <= 0) return;
  auto found = published_versions(output_dir);
  std::reverse(found.begin(), found.end());  // newest first: the first `keep` stay
  for (std::size_t i = static_cast<std::size_t>(keep); i < found.size(); ++i) {
    if (found[i] == serving) continue;
    fs::remove_all(output_dir / kVersionsDir / std::to_string(found[i]));
    log::info("follow", "pruned published version {} (keep_versions {})", found[i], keep);
  }
}

void run_publish_command(const std::string& command, const fs::path& dir, std::int64_t version) {
  if (command.empty()) return;
  ::setenv("EAGLE_PUBLISHED_DIR", fs::absolute(dir).c_str(), 1);
  ::setenv("EAGLE_PUBLISHED_VERSION", std::to_string(version).c_str(), 1);
  const int status = std::system(command.c_str());
  if (status == 0) {
    log::info("follow", "publish_command done for version {}", version);
    return;
  }
  const int code = status > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  log::warn("follow", "publish_command failed for version {} (exit {}): the draft stays published at {}", version, code,
            dir.string());
}

}  // namespace eagle::follow
