// Progress bar (terminal) or periodic lines (log) for prepare.
#include "eagle/data/progress.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "eagle/io/log.h"

namespace eagle::data {
namespace {

std::string clock_text(double s) {
  auto t = static_cast<long long>(s + 0.5);
  return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
}

std::uint64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  while (f >> k) {
    if (k == key) {
      std::uint64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 12, '\n');
  }
  return 0;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

std::uint64_t resident_bytes() { return status_kb("VmRSS:"); }
std::uint64_t peak_resident_bytes() { return status_kb("VmHWM:"); }

ByteProgress::ByteProgress(std::string label, std::uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), terminal_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_(start_), cpu_start_(thread_cpu_s()) {}

double ByteProgress::cpu_s() const { return thread_cpu_s() - cpu_start_; }

double ByteProgress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ByteProgress::update(std::uint64_t bytes, std::uint64_t samples) {
  auto now = std::chrono::steady_clock::now();
  auto every = terminal_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(10000);
  if (now - last_ < every) return;
  last_ = now;
  drawn_ = true;
  draw(bytes, samples, false);
}

void ByteProgress::finish(std::uint64_t bytes, std::uint64_t samples) { draw(bytes, samples, true); }

void ByteProgress::draw(std::uint64_t bytes, std::uint64_t samples, bool final) {
  double s = std::max(elapsed_s(), 1e-9);
  double mb = static_cast<double>(bytes) / 1e6;
  double frac = total_ ? std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_)) : 0.0;
  std::string eta = total_ && frac > 0 && !final ? " ETA " + clock_text(s / frac - s) : "";
  std::string text = fmt::format("{:.1f}/{:.1f} MB, {} samples, {:.0f} samples/s, {:.1f} MB/s{}", mb,
                                 static_cast<double>(total_) / 1e6, samples, static_cast<double>(samples) / s, mb / s, eta);
  if (!terminal_) {
    log::info("data", "{} {:.0f}%: {}", label_, 100 * frac, text);
    return;
  }
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  std::fprintf(stderr, "\r%s [%s%s] %3.0f%% %s\033[K%s", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), 100 * frac, text.c_str(), final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace eagle::data
