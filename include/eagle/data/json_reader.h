// Reading pretokenized JSON samples (JSONL, a JSON array, folders, .gz) into flat storage, with the
// validation and the bad-sample and overlong policies of docs/data.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/flat_builder.h"

namespace eagle::data {

struct ReadOptions {
  std::int64_t training_seq_len = 2048;  // tokens; longer samples follow overlong_policy
  config::BadSamplePolicy bad_sample_policy = config::BadSamplePolicy::error;
  config::OverlongPolicy overlong_policy = config::OverlongPolicy::truncate;
  std::int64_t vocab_size = 0;  // the target's vocabulary: ids >= it are refused by line; 0: no target known
  bool allow_untrained = false;  // keep samples without a trained token (generate copies them)
};

struct ReadCounts {
  std::uint64_t records = 0;    // samples seen in the input
  std::uint64_t kept = 0;       // samples added to the output
  std::uint64_t truncated = 0;  // kept, cut to training_seq_len
  std::uint64_t dropped = 0;    // overlong under drop, or no trained token left after truncation
  std::uint64_t skipped = 0;    // invalid, under bad_sample_policy skip
  std::uint64_t input_bytes = 0;  // bytes of the input files (compressed size for .gz)
};

// Called now and then with the input bytes consumed so far (all files) and the samples kept.
using ProgressFn = std::function<void(std::uint64_t bytes, std::uint64_t samples)>;

// True for the names read as sample files: .jsonl, .json, .jsonl.gz, .json.gz.
bool is_sample_file(const std::string& path);
// Expands folders (recursively, sorted by path) into sample files; checks that every path exists
// and that a plain file has a sample-file extension. Throws ErrorKind::input.
std::vector<std::string> list_sample_files(const std::vector<std::string>& inputs);
// Reads the files in order, appending the kept samples to `out`.
ReadCounts read_sample_files(const std::vector<std::string>& files, const ReadOptions& opts, FlatBuilder& out,
                             const ProgressFn& progress = {});

}  // namespace eagle::data
