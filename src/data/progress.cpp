// Progress of a long read (see progress.h).
#include "eagle/data/progress.h"

#include <time.h>

#include <algorithm>

#include <fmt/format.h>

namespace eagle::data {
namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

ByteProgress::ByteProgress(std::string label, std::uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), start_(std::chrono::steady_clock::now()),
      cpu_start_(thread_cpu_s()), display_("data") {}

double ByteProgress::cpu_s() const { return thread_cpu_s() - cpu_start_; }

double ByteProgress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ByteProgress::update(std::uint64_t bytes, std::uint64_t samples) {
  if (!display_.due(elapsed_s(), false)) return;
  drawn_ = true;
  draw(bytes, samples, false);
}

void ByteProgress::finish(std::uint64_t bytes, std::uint64_t samples) {
  draw(bytes, samples, true);
  display_.finish();
}

void ByteProgress::draw(std::uint64_t bytes, std::uint64_t samples, bool final) {
  const double s = std::max(elapsed_s(), 1e-9);
  const double mb = static_cast<double>(bytes) / 1e6;
  const double frac = total_ ? std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_)) : 0.0;
  std::string eta = total_ && !final ? " | " + util::format_eta(mb, static_cast<double>(total_) / 1e6, s) : "";
  std::string text = fmt::format("{:.1f}/{:.1f} MB, {} samples, {:.0f} samples/s, {:.1f} MB/s | {} elapsed{}", mb,
                                 static_cast<double>(total_) / 1e6, samples, static_cast<double>(samples) / s, mb / s,
                                 util::format_duration(s), eta);
  util::ProgressLine(label_).show(display_, frac, text, s, final);
}

}  // namespace eagle::data
