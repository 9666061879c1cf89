// The dump-features folder's set-up (see dump_folder.h): the marker, cleaning, refusals.
#include "dump_folder.h"

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "eagle/data/binary_format.h"
#include "eagle/data/stats_file.h"
#include "eagle/features/store.h"
#include "eagle/run/dir_lock.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"

namespace eagle::features {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarkerText = "eagle-train dump-features\n";

// What a dump writes in its folder; anything else there is the user's and is never touched.
const std::set<std::string>& dump_names() {
  static const std::set<std::string> names{kFeaturesManifest, data::kTrainFile,   data::kValidationFile,
                                           data::kStatsFile,  kFeaturesTargetDir, kFeaturesShardDir};
  return names;
}

bool has_marker(const fs::path& out) {
  std::error_code ec;
  const auto marker = out / kDumpMarker;
  if (!fs::is_regular_file(fs::symlink_status(marker, ec))) return false;
  std::string text(64, '\0');
  FILE* f = std::fopen(marker.c_str(), "rb");
  if (!f) return false;
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  return text == kMarkerText;
}

bool is_link(const fs::path& p) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec));
}

// Whether `inner` is `outer` or below it (both absolute, symlinks resolved).
bool within(const fs::path& inner, const fs::path& outer) {
  const auto rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

fs::path resolved(const std::string& p) {
  std::error_code ec;
  auto c = fs::weakly_canonical(fs::absolute(p), ec);
  c = ec ? fs::absolute(p).lexically_normal() : c;
  return c.has_filename() ? c : c.parent_path();
}

// Called under the folder's lock: no live dump writes here, so every temporary is a dead writer's.
void remove_stale(const fs::path& folder) {
  std::error_code ec;
  std::vector<fs::path> tmp;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (util::is_temporary(e.path().filename().string())) tmp.push_back(e.path());
  for (const auto& p : tmp) {
    fs::remove_all(p, ec);  // a symlink is removed as a link, its target untouched
    log::info("dump", "removed {}, left by a stopped dump", p.string());
  }
}

}  // namespace

void check_output_apart(const config::Options& o, const fs::path& out) {
  const fs::path dir = resolved(out.string());
  for (const auto& [flag, value] : {std::pair{"--data_path", o.data_path}, {"--eval_data_path", o.eval_data_path}}) {
    if (value.empty()) continue;
    const fs::path input = resolved(value);
    const bool clash = within(dir, input) || within(input, dir);
    EAGLE_CHECK(!clash, Error(ErrorKind::usage, fmt::format("--output is equal to, inside or around {}", flag))
                            .place(fmt::format("--output, {}", flag))
                            .file(out.string())
                            .expected(fmt::format("a folder apart from {} ({})", flag, input.string()))
                            .found(dir.string())
                            .hint("the dump would write over the data it reads: choose another --output"));
  }
}

void prepare_fresh(const fs::path& out) {
  std::vector<fs::path> ours;
  std::vector<std::string> others;
  for (const auto& e : fs::directory_iterator(out)) {
    const auto name = e.path().filename().string();
    if (name == run::kLockFile || name == kDumpMarker) continue;
    if (dump_names().count(name) || util::is_temporary(name)) ours.push_back(e.path());
    else others.push_back(name);
  }
  const bool marked = has_marker(out);
  if (!others.empty() || (!ours.empty() && !marked)) {
    std::string found;
    for (const auto& n : others) found += (found.empty() ? "" : ", ") + n;
    for (const auto& p : ours) found += (found.empty() ? "" : ", ") + p.filename().string();
    throw Error(ErrorKind::output, marked ? "the output folder holds other files"
                                          : "the output folder is not empty and not an unfinished dump of this tool")
        .file(out.string())
        .found(found)
        .expected(fmt::format("a new or empty folder, or a dump-features folder (with its {} marker)", kDumpMarker))
        .hint("choose another --output; dump-features never removes what it did not write");
  }
  for (const auto& p : ours) {
    std::error_code ec;
    fs::remove_all(p, ec);  // a symlink is removed as a link, its target untouched
    EAGLE_CHECK(!ec, Error(ErrorKind::output, "cannot remove a leftover of a stopped dump").file(p.string())
                         .found(ec.message()));
    log::info("dump", "removed {}, left by a dump stopped before its manifest", p.string());
  }
  if (!marked) util::write_file_atomic(out / kDumpMarker, kMarkerText);
}

void clean_folder(const fs::path& out) {
  for (const auto& name : dump_names())
    EAGLE_CHECK(!is_link(out / name),
                Error(ErrorKind::output, "the features folder holds a symbolic link where dump-features writes")
                    .file((out / name).string())
                    .expected("a file or folder this tool wrote")
                    .found("a symbolic link")
                    .hint("dump-features never writes or deletes through a link it did not create: replace the "
                          "link by its target's contents, or choose another --output"));
  // Only in a folder of this tool: a temporary-looking name in anyone else's folder is theirs.
  if (!has_marker(out) && !is_features_folder(out.string())) return;
  remove_stale(out);
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(out / kFeaturesShardDir, ec))) remove_stale(out / kFeaturesShardDir);
}

}  // namespace eagle::features
