// Internal to src/data: the simdjson-based parser of one sample object (validation, policies);
// kept out of include/ so simdjson stays out of every other translation unit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "eagle/data/flat_builder.h"
#include "eagle/data/read_options.h"

namespace eagle::data {

class SampleParser {
 public:
  SampleParser(const ReadOptions& opts, FlatBuilder& out, ReadCounts& counts);
  ~SampleParser();
  // One JSONL line of len bytes at data; at least 64 readable bytes must follow it, the first of
  // which is not a digit (the newline, or padding spaces). line is 1-based.
  void parse_line(const std::string& file, std::uint64_t line, const char* data, std::size_t len);
  // A whole file holding a JSON array of samples (64 padding bytes follow, spaces). on_sample is
  // called after each element with the bytes parsed so far.
  void parse_array(const std::string& file, const char* data, std::size_t len,
                   const std::function<void(std::uint64_t)>& on_sample);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace eagle::data
