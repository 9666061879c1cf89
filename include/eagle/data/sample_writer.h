// The resumable JSONL output of `eagle-train generate`: samples are appended to OUTPUT.partial;
// commit() makes them durable (fsync) and records in OUTPUT.progress, atomically, how many input
// samples are done, how many bytes of the part file hold them, the run's settings and its counts;
// finish() renames the part file to OUTPUT. A new run that finds OUTPUT.progress with the same
// settings cuts the part file back to the recorded bytes (a write torn by a kill) and continues with
// the next input sample. Neither name ends in .json/.jsonl, so folder readers skip them.
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
  // The constructor's checks of the name alone, for a command to run before any heavy work.
  static void check_output(const std::string& output);

  // Input samples done (written or skipped), those of an interrupted run included.
  std::uint64_t samples_done() const { return samples_done_; }
  // The counts the interrupted run committed; null when starting fresh.
  const nlohmann::json& resumed_counts() const { return resumed_counts_; }

  void write(const Sample& s);  // the next input sample's output, one JSONL line
  void skip();                  // the next input sample has no output (dropped)
  // Makes everything written so far durable and records it with `counts` (opaque here).
  void commit(const nlohmann::json& counts);
  // commit(), then the part file becomes OUTPUT and the progress file goes.
  void finish(const nlohmann::json& counts);

 private:
  std::string output_, part_, progress_;
  nlohmann::json settings_, resumed_counts_;
  int fd_ = -1;
  std::string buffer_;                          // lines not yet written to the part file
  std::uint64_t samples_done_ = 0, bytes_ = 0;  // bytes_: of the part file, buffer included
};

// One line of the output format: {"input_ids":[...],"loss_mask":[...]} and a newline.
std::string sample_jsonl(const Sample& s);

}  // namespace eagle::data
