// The resumable JSONL output of `eagle-train generate`: samples are appended to OUTPUT.partial;
// commit() makes them durable (fsync) and records in OUTPUT.progress, atomically, how many input
// samples are done, how many bytes of the part file hold them, the run's settings and its counts;
// finish() renames the part file to OUTPUT and records the run in OUTPUT.progress as complete. A new
// run that finds OUTPUT.progress with the same settings cuts the part file back to the recorded
// bytes (a write torn by a kill) and continues with the next input sample; one that finds OUTPUT
// complete with the same settings has nothing to do (finished()). Neither name ends in
// .json/.jsonl, so folder readers skip them.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/data/dataset.h"

namespace eagle::data {

inline constexpr const char* kPartSuffix = ".partial";
inline constexpr const char* kProgressSuffix = ".progress";

class SampleWriter {
 public:
  // output must end in .jsonl and must not exist (Error(output)); a progress file recorded with other
  // settings is refused (Error(usage), naming the first setting that differs).
  SampleWriter(const std::string& output, const nlohmann::json& settings);
  ~SampleWriter();
  SampleWriter(const SampleWriter&) = delete;
  SampleWriter& operator=(const SampleWriter&) = delete;
  // The constructor's checks, for a command to run before any heavy work: a .jsonl name, and no
  // OUTPUT there unless a finished run recorded it as complete (Error(output) otherwise).
  static void check_output(const std::string& output);
  // For an OUTPUT that exists: the counts its finished run recorded when it was written with these
  // settings and is unchanged since (a rerun has nothing to do). Error(usage) naming the first setting
  // that differs; Error(output) when OUTPUT is not such a run's, or changed since.
  static nlohmann::json finished(const std::string& output, const nlohmann::json& settings);

  // Input samples done (written or skipped), those of an interrupted run included.
  std::uint64_t samples_done() const { return samples_done_; }
  // The counts the interrupted run committed; null when starting fresh.
  const nlohmann::json& resumed_counts() const { return resumed_counts_; }

  void write(const Sample& s);  // the next input sample's output, one JSONL line
  void skip();                  // the next input sample has no output (dropped)
  // Makes everything written so far durable and records it with `counts` (opaque here).
  void commit(const nlohmann::json& counts);
  // commit(), then the part file becomes OUTPUT and the progress file records the run as complete.
  void finish(const nlohmann::json& counts);

 private:
  void write_progress(const nlohmann::json& counts, bool complete) const;

  std::string output_, part_, progress_;
  nlohmann::json settings_, resumed_counts_;
  int fd_ = -1;
  std::string buffer_;                          // lines not yet written to the part file
  std::uint64_t samples_done_ = 0, bytes_ = 0;  // bytes_: of the part file, buffer included
};

// One line of the output format: {"input_ids":[...],"loss_mask":[...]} and a newline.
std::string sample_jsonl(const Sample& s);

}  // namespace eagle::data
