// What reading pretokenized samples is asked to do and what it did: the options and counts shared by
// the JSON reader (json_reader.h) and its sample parser, kept apart so neither needs the other.
#pragma once

#include <cstdint>

#include "eagle/config/options.h"

namespace eagle::data {

struct ReadOptions {
  std::int64_t training_seq_len = 2048;  // tokens; longer samples follow overlong_policy
  config::BadSamplePolicy bad_sample_policy = config::BadSamplePolicy::error;
  config::OverlongPolicy overlong_policy = config::OverlongPolicy::truncate;
  std::int64_t vocab_size = 0;   // the target's vocabulary: ids >= it are refused by line; 0: no target known
  bool allow_untrained = false;  // keep samples without a trained token (generate copies them)
};

struct ReadCounts {
  std::uint64_t records = 0;      // samples seen in the input
  std::uint64_t kept = 0;         // samples added to the output
  std::uint64_t truncated = 0;    // kept, cut to training_seq_len
  std::uint64_t dropped = 0;      // overlong under drop, or no trained token left after truncation
  std::uint64_t skipped = 0;      // invalid, under bad_sample_policy skip
  std::uint64_t input_bytes = 0;  // bytes of the input files (compressed size for .gz)
};

}  // namespace eagle::data
