// Progress of a long read (prepare, loading JSON data): bytes, samples/s and ETA through the one
// progress display (util/progress.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "eagle/util/progress.h"

namespace eagle::data {

class ByteProgress {
 public:
  // total_bytes: the input size (0: unknown, no ETA).
  ByteProgress(std::string label, std::uint64_t total_bytes);
  // Cheap to call often: it draws only when the display is due.
  void update(std::uint64_t bytes, std::uint64_t samples);
  // Draws the final state and ends the bar's line.
  void finish(std::uint64_t bytes, std::uint64_t samples);
  double elapsed_s() const;
  bool drawn() const { return drawn_; }  // update() has drawn at least once
  // CPU seconds this thread spent since construction (the read runs on one thread).
  double cpu_s() const;

 private:
  void draw(std::uint64_t bytes, std::uint64_t samples, bool final);
  std::string label_;
  std::uint64_t total_;
  std::chrono::steady_clock::time_point start_;
  double cpu_start_;
  bool drawn_ = false;
  util::ProgressDisplay display_;
};

}  // namespace eagle::data
