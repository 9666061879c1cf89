// Checkpoint folders: temporary folder, fsync, rename, COMPLETE marker; rotation, best, resume,
// output_dir guard.
#include "eagle/run/checkpoint_dir.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/util/log.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"

namespace eagle::run {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::string_view kPrefix = "checkpoint-";

// The step of a folder named checkpoint-<digits>, else nullopt.
std::optional<std::int64_t> step_of_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() == kPrefix.size() || name.size() > kPrefix.size() + 18)
    return std::nullopt;
  std::string digits = name.substr(kPrefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

bool is_complete(const fs::path& folder) {
  std::error_code ec;
  return fs::is_directory(folder, ec) && fs::is_regular_file(folder / CheckpointDir::kComplete, ec);
}

// A symlink in the run folder was put there by someone else (this tool creates none): rotation and
// cleaning never follow one, so another run's checkpoint it points to is never touched.
bool is_link(const fs::directory_entry& entry) {
  std::error_code ec;
  return entry.is_symlink(ec);
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw Error(ErrorKind::output, "cannot remove").file(p.string()).found(ec.message());
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error(ErrorKind::output, "cannot rename to " + to.string()).file(from.string()).found(ec.message());
}

void make_folder(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw Error(ErrorKind::output, "cannot create the folder").file(p.string()).found(ec.message());
}

// A replica of `from` at `to`: hard links (files are never rewritten in place, so sharing is
// safe and costs no space), copies where the file system refuses links.
void link_tree(const fs::path& from, const fs::path& to) {
  make_folder(to);
  for (const auto& entry : fs::recursive_directory_iterator(from)) {
    fs::path dest = to / fs::relative(entry.path(), from);
    if (entry.is_directory()) {
      make_folder(dest);
      continue;
    }
    std::error_code ec;
    fs::create_hard_link(entry.path(), dest, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(entry.path(), dest, ec);
      if (ec) throw Error(ErrorKind::output, "cannot copy into the best checkpoint").file(entry.path().string())
          .found(ec.message());
    }
  }
}

void write_empty_synced(const fs::path& p) {
  std::ofstream out(p, std::ios::binary);
  if (!out) throw Error(ErrorKind::output, "cannot create the marker").file(p.string());
  out.close();
  util::fsync_path(p);
}

}  // namespace

CheckpointDir::CheckpointDir(fs::path output_dir) : dir_(std::move(output_dir)) {}

fs::path CheckpointDir::checkpoint_path(std::int64_t step) const { return dir_ / fmt::format("checkpoint-{}", step); }

CheckpointRef CheckpointDir::save(std::int64_t step, const std::function<void(const fs::path&)>& write_files) {
  make_folder(dir_);
  fs::path final_path = checkpoint_path(step);
  fs::path tmp = util::temporary_folder_name(final_path);
  fs::path old = dir_ / fmt::format(".tmp-old-checkpoint-{}", step);
  remove_tree(tmp);
  make_folder(tmp);
  try {
    write_files(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  util::fsync_tree(tmp);
  std::error_code ec;
  bool replacing = fs::exists(final_path, ec);
  if (replacing) {
    remove_tree(old);
    rename_or_throw(final_path, old);
  }
  rename_or_throw(tmp, final_path);
  util::fsync_path(dir_);
  write_empty_synced(final_path / kComplete);
  util::fsync_path(final_path);
  if (replacing) remove_tree(old);
  log::info("ckpt", "saved {}", final_path.string());
  return CheckpointRef{step, final_path};
}

std::vector<CheckpointRef> CheckpointDir::list_complete() const {
  std::vector<CheckpointRef> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    auto step = step_of_name(entry.path().filename().string());
    if (step && !is_link(entry) && is_complete(entry.path())) out.push_back(CheckpointRef{*step, entry.path()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointRef> CheckpointDir::latest() const {
  auto all = list_complete();
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::vector<CheckpointRef> CheckpointDir::rotate(std::int64_t keep) {
  std::vector<CheckpointRef> removed;
  if (keep <= 0) return removed;
  auto all = list_complete();
  if (static_cast<std::int64_t>(all.size()) <= keep) return removed;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    // The marker goes first: a crash mid-removal leaves an incomplete folder, never a
    // complete-looking one with files missing.
    std::error_code ec;
    fs::remove(all[i].path / kComplete, ec);
    remove_tree(all[i].path);
    log::info("ckpt", "removed {} (save_total_limit {})", all[i].path.string(), keep);
    removed.push_back(all[i]);
  }
  return removed;
}

std::optional<BestInfo> CheckpointDir::best() const {
  fs::path best_dir = dir_ / kBestFolder;
  if (!is_complete(best_dir)) return std::nullopt;
  std::ifstream in(best_dir / kBestJson);
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("step") || !doc["step"].is_number_integer() || !doc.contains("value") ||
      !doc["value"].is_number() || (doc.contains("metric") && !doc["metric"].is_string()))
    throw Error(ErrorKind::input, "malformed best-checkpoint record").file((best_dir / kBestJson).string())
        .expected("{\"step\": int, \"metric\": string, \"value\": number}");
  return BestInfo{doc["step"].get<std::int64_t>(), doc.value("metric", ""), doc["value"].get<double>()};
}

bool CheckpointDir::update_best(std::int64_t step, std::string_view metric, double value) {
  if (std::isnan(value)) return false;
  auto current = best();
  if (current && !(value > current->value)) return false;
  fs::path source = checkpoint_path(step);
  if (!is_complete(source))
    throw Error(ErrorKind::internal, "the best checkpoint must be a complete saved checkpoint").file(source.string())
        .hint("save a checkpoint at the evaluation step before calling update_best");
  fs::path best_dir = dir_ / kBestFolder;
  fs::path tmp = util::temporary_folder_name(best_dir);
  fs::path old = dir_ / ".tmp-old-checkpoint-best";
  remove_tree(tmp);
  link_tree(source, tmp);
  json record = {{"step", step}, {"metric", std::string(metric)}, {"value", value}};
  // best.json is the one file of its own; the hard-linked files are shared with checkpoint-<step>.
  std::error_code ec;
  fs::remove(tmp / kBestJson, ec);
  util::write_file_atomic(tmp / kBestJson, record.dump(2) + "\n");
  util::fsync_tree(tmp);
  bool had_best = fs::exists(best_dir, ec);
  if (had_best) {
    remove_tree(old);
    rename_or_throw(best_dir, old);
  }
  rename_or_throw(tmp, best_dir);
  util::fsync_path(dir_);
  if (had_best) remove_tree(old);
  log::info("ckpt", "best checkpoint: step {} ({} {:.4f})", step, metric, value);
  return true;
}

std::size_t CheckpointDir::clean_temporaries() {
  std::size_t removed = 0;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return 0;
  fs::path best_dir = dir_ / kBestFolder, old_best = dir_ / ".tmp-old-checkpoint-best";
  if (!fs::exists(best_dir, ec) && is_complete(old_best)) {
    rename_or_throw(old_best, best_dir);
    log::warn("ckpt", "restored {} from an interrupted update", best_dir.string());
  }
  // A crash while save() replaced an existing checkpoint-<step> (a resumed run saving a step
  // again): when the new one did not get its COMPLETE marker, the old complete one comes back.
  std::vector<fs::path> moved_aside;
  for (const auto& entry : fs::directory_iterator(dir_))
    if (!is_link(entry) && entry.path().filename().string().rfind(".tmp-old-", 0) == 0)
      moved_aside.push_back(entry.path());
  for (const auto& old : moved_aside) {
    fs::path original = dir_ / old.filename().string().substr(std::string_view(".tmp-old-").size());
    if (step_of_name(original.filename().string()) && !is_complete(original) && is_complete(old)) {
      remove_tree(original);
      rename_or_throw(old, original);
      log::warn("ckpt", "restored {} from an interrupted replacement", original.string());
    }
  }
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (is_link(entry)) continue;
    // .tmp-* folders, and checkpoint-<step> folders without COMPLETE: a rotation that was killed
    // after it removed the marker, or a save killed between its rename and its marker.
    if (util::is_temporary(name) || (step_of_name(name) && !is_complete(entry.path())))
      leftovers.push_back(entry.path());
  }
  for (const auto& p : leftovers) {
    remove_tree(p);
    log::info("ckpt", "removed the leftover {}", p.string());
    ++removed;
  }
  return removed;
}

std::vector<fs::path> CheckpointDir::run_artifacts() const {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    std::string name = entry.path().filename().string();
    bool ours = step_of_name(name).has_value() || name == kBestFolder || name == "metrics.jsonl" ||
                name == "summary.json" || name == "config.json" || name == "command_line.txt" ||
                name.rfind("events.out.tfevents.", 0) == 0;
    if (ours) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CheckpointDir::remove_run_artifacts() {
  for (const auto& p : run_artifacts()) remove_tree(p);
}

std::optional<CheckpointRef> find_resume(const std::string& resume_from_checkpoint, const fs::path& output_dir) {
  if (resume_from_checkpoint.empty()) return std::nullopt;
  if (resume_from_checkpoint == "auto") return CheckpointDir(output_dir).latest();
  fs::path path = resume_from_checkpoint;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(ErrorKind::input, "the checkpoint to resume from does not exist").file(path.string())
        .place("resume_from_checkpoint").hint("give a checkpoint-<step> folder, or auto for the newest in output_dir");
  if (!fs::is_directory(path, ec))
    throw Error(ErrorKind::input, "the checkpoint to resume from is not a folder").file(path.string())
        .place("resume_from_checkpoint");
  if (!is_complete(path))
    throw Error(ErrorKind::input, "the checkpoint to resume from is incomplete").file(path.string())
        .place("resume_from_checkpoint").expected("a COMPLETE marker").found("none")
        .hint("it was interrupted while being written; resume from an earlier one or use auto");
  CheckpointRef ref{-1, path};
  std::string name = path.filename().empty() ? path.parent_path().filename().string() : path.filename().string();
  if (auto step = step_of_name(name)) {
    ref.step = *step;
  } else if (fs::exists(path / CheckpointDir::kBestJson, ec)) {
    std::ifstream in(path / CheckpointDir::kBestJson);
    json doc = json::parse(in, nullptr, false);
    if (doc.is_object() && doc.contains("step") && doc["step"].is_number_integer())
      ref.step = doc["step"].get<std::int64_t>();
  }
  return ref;
}

std::optional<CheckpointRef> prepare_output_dir(const fs::path& output_dir, const std::string& resume_from_checkpoint,
                                                bool overwrite_output_dir) {
  make_folder(output_dir);
  CheckpointDir dir(output_dir);
  auto same_folder = [](const fs::path& a, const fs::path& b) {
    return fs::weakly_canonical(a) == fs::weakly_canonical(b);
  };
  auto parent_of = [](const fs::path& p) {
    return p.filename().empty() ? p.parent_path().parent_path() : p.parent_path();
  };
  // Leftovers are only touched once this run may use the folder: a run continuing here repairs
  // interrupted swaps before the newest checkpoint is looked up; a refused start touches nothing.
  bool continuing = resume_from_checkpoint == "auto" ||
                    (!resume_from_checkpoint.empty() && same_folder(parent_of(resume_from_checkpoint), output_dir));
  if (continuing && !overwrite_output_dir) dir.clean_temporaries();
  auto resume = find_resume(resume_from_checkpoint, output_dir);
  if (resume && same_folder(parent_of(resume->path), output_dir)) {
    if (overwrite_output_dir)
      throw Error(ErrorKind::usage, "overwrite_output_dir would delete the checkpoint to resume from")
          .file(resume->path.string()).place("resume_from_checkpoint, overwrite_output_dir")
          .hint("drop --overwrite_output_dir to continue this run, or resume_from_checkpoint to start afresh");
    log::info("ckpt", "resuming from {} (step {})", resume->path.string(), resume->step);
    return resume;
  }
  auto artifacts = dir.run_artifacts();
  if (artifacts.empty()) {
    dir.clean_temporaries();
    return resume;
  }
  bool never_saved =
      resume_from_checkpoint == "auto" && !resume && !fs::exists(output_dir / CheckpointDir::kBestFolder);
  if (overwrite_output_dir || never_saved) {
    log::warn("ckpt", "{}: removing {} files/folders of an earlier run ({})", output_dir.string(), artifacts.size(),
              overwrite_output_dir ? "overwrite_output_dir" : "it never saved a checkpoint");
    dir.remove_run_artifacts();
    dir.clean_temporaries();
    return resume;
  }
  std::string found;
  for (std::size_t i = 0; i < artifacts.size() && i < 5; ++i)
    found += (i ? ", " : "") + artifacts[i].filename().string();
  if (artifacts.size() > 5) found += fmt::format(" and {} more", artifacts.size() - 5);
  throw Error(ErrorKind::usage, "output_dir holds another run").file(output_dir.string()).place("output_dir")
      .expected("a new or empty run folder").found(found)
      .hint("--resume_from_checkpoint auto continues that run; --overwrite_output_dir replaces it");
}

}  // namespace eagle::run
