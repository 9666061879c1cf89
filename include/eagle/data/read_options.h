// What reading pretokenized samples is asked to do and what it did: the options and counts shared by
// the JSON reader (json_reader.h) and its sample parser, kept apart so neither needs the other; and
// the media placeholders no sample may hold.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/util/error.h"

namespace eagle::data {

// A token id no sample may hold: a multimodal target's media placeholder (image, video, audio, vision
// start and end), whose embedding its towers compute; a target read as its text model loads none.
struct MediaToken {
  std::int64_t id = 0;
  std::string name;  // the config.json key naming it, e.g. image_token_id
};

// The error of a sample holding one (place: where in the sample; the reader adds the file).
inline Error media_token_error(const MediaToken& token, std::string place) {
  return Error(ErrorKind::input, "a media placeholder token in the data")
      .place(std::move(place))
      .expected("text tokens only")
      .found(std::to_string(token.id) + " (the target's " + token.name + ")")
      .hint("give text-only data: the target is read as its text model (its vision tower is not loaded, nor an "
            "audio one), so nothing computes the placeholder's embedding");
}

struct ReadOptions {
  std::int64_t training_seq_len = 2048;  // tokens; longer samples follow overlong_policy
  config::BadSamplePolicy bad_sample_policy = config::BadSamplePolicy::error;
  config::OverlongPolicy overlong_policy = config::OverlongPolicy::truncate;
  std::int64_t vocab_size = 0;   // the target's vocabulary: ids >= it are refused by line; 0: no target known
  bool allow_untrained = false;  // keep samples without a trained token (generate copies them)
  std::vector<MediaToken> media_tokens{};  // refused in input_ids by line, naming which (none: no check)
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
