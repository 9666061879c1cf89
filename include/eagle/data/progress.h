// Progress of a long read (prepare): a redrawn bar with bytes, samples/s and ETA on a terminal,
// plain periodic log lines otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace eagle::data {

class ByteProgress {
 public:
  // total_bytes: the input size (0: unknown, no ETA).
  ByteProgress(std::string label, std::uint64_t total_bytes);
  // Cheap to call often: it draws at most 5 times a second (a log line every 10 s off a terminal).
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
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_;
  double cpu_start_;
  bool drawn_ = false;
};

// Resident memory of this process from /proc/self/status (VmRSS, VmHWM = peak), bytes; 0 if unknown.
std::uint64_t resident_bytes();
std::uint64_t peak_resident_bytes();

}  // namespace eagle::data
