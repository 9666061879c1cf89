// Checkpoint folders of a run: output_dir/checkpoint-<step>/ written through a temporary folder,
// synced, renamed and then marked COMPLETE; rotation (save_total_limit), the best checkpoint kept
// apart, resume resolution, and the guard against training into another run's output_dir. Only
// folders are managed here: the trainer's callback writes the files (safetensors, JSON state).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eagle::run {

struct CheckpointRef {
  std::int64_t step = -1;       // -1: unknown (a folder not named checkpoint-<step>; read its state)
  std::filesystem::path path;
};

struct BestInfo {
  std::int64_t step = 0;        // the step of the checkpoint checkpoint-best replicates
  std::string metric;           // e.g. "ar"
  double value = 0.0;           // higher is better
};

class CheckpointDir {
 public:
  static constexpr const char* kComplete = "COMPLETE";        // empty marker, written last
  static constexpr const char* kBestFolder = "checkpoint-best";
  static constexpr const char* kBestJson = "best.json";       // {"step", "metric", "value"}

  explicit CheckpointDir(std::filesystem::path output_dir);

  // Writes output_dir/checkpoint-<step>/: creates .tmp-checkpoint-<step>/, calls
  // write_files(that folder), fsyncs its files and itself, renames it to checkpoint-<step>, then
  // writes and fsyncs the empty COMPLETE marker and the folders. A checkpoint-<step> already there
  // (a resumed run repeating a step) is replaced only once the new one is in place. If
  // write_files throws, the temporary folder is removed and the error passed on.
  CheckpointRef save(std::int64_t step, const std::function<void(const std::filesystem::path&)>& write_files);

  // Complete checkpoint-<step> folders (holding COMPLETE), oldest first; checkpoint-best excluded.
  std::vector<CheckpointRef> list_complete() const;
  std::optional<CheckpointRef> latest() const;

  // Deletes the oldest complete checkpoints beyond the newest `keep` (0: keep all); returns them.
  // checkpoint-best is a separate folder and never counts or goes.
  std::vector<CheckpointRef> rotate(std::int64_t keep);

  // When `value` is higher than the recorded best (or there is none), makes checkpoint-best a
  // replica of the complete checkpoint-<step> (hard links, copies where links fail) holding
  // best.json, swapped in by renames. Returns whether it became the best. NaN never wins.
  bool update_best(std::int64_t step, std::string_view metric, double value);
  std::optional<BestInfo> best() const;

  // Removes leftovers of an interrupted write (.tmp-* entries, checkpoint-<step> folders without
  // COMPLETE left by a killed rotation or save); puts back checkpoint-best when a crash hit between
  // the two renames of its swap. Returns the number of entries removed. Call it only while holding
  // the folder's lock (dir_lock.h): nothing else may be writing there.
  std::size_t clean_temporaries();

  // The files and folders of an earlier run in output_dir: checkpoint-<step>, checkpoint-best,
  // metrics.jsonl, summary.json, config.json, command_line.txt, events.out.tfevents.*. Anything
  // else (the user's own files) is never listed nor touched.
  std::vector<std::filesystem::path> run_artifacts() const;
  void remove_run_artifacts();

  const std::filesystem::path& output_dir() const { return dir_; }
  std::filesystem::path checkpoint_path(std::int64_t step) const;

 private:
  std::filesystem::path dir_;
};

// Resolves resume_from_checkpoint: "" -> none; "auto" -> the newest complete checkpoint in
// output_dir, or none; anything else is a checkpoint folder that must exist and hold COMPLETE,
// else Error(input) saying which. The step comes from the name checkpoint-<step> (or best.json).
std::optional<CheckpointRef> find_resume(const std::string& resume_from_checkpoint,
                                         const std::filesystem::path& output_dir);

// The start of a train run: creates output_dir, cleans leftovers, resolves the resume checkpoint
// and guards against another run's files:
// - resuming from a checkpoint inside output_dir continues that run (refused together with
//   overwrite_output_dir, which would delete it);
// - otherwise, when output_dir holds run artifacts: refused (Error(usage) listing them) unless
//   overwrite_output_dir, which deletes them first; with "auto" and no complete checkpoint the
//   artifacts are an attempt that never saved one, and are replaced.
// Returns the checkpoint to resume from, if any.
std::optional<CheckpointRef> prepare_output_dir(const std::filesystem::path& output_dir,
                                                const std::string& resume_from_checkpoint,
                                                bool overwrite_output_dir);

}  // namespace eagle::run
