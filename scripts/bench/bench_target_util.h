// What the target benchmarks share (bench_target.cpp, bench_target_families.cpp): the process's resident
// memory and its high-water mark, a median, a TargetConfig from a config.json written on the fly, and the
// real tokens/s of the training forward of a random model of that config.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "eagle/target/target.h"

namespace eagle::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A field of /proc/self/status in MiB (VmRSS: resident now, VmHWM: the high-water mark); -1 if absent.
inline double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(field.size())) / 1024.0;
  return -1;
}
inline double peak_rss_mib() { return status_mib("VmHWM:"); }
inline double rss_mib() { return status_mib("VmRSS:"); }
// Writing 5 to clear_refs resets the high-water mark to the current resident set (Linux >= 4.0).
inline void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The config as TargetConfig::from_json_file reads it (through a temporary file, removed after).
inline target::TargetConfig config_of(const nlohmann::json& config) {
  const auto file = std::filesystem::temp_directory_path() / fmt::format("eagle_bench_config_{}.json", ::getpid());
  std::ofstream(file) << config.dump();
  auto c = target::TargetConfig::from_json_file(file.string());
  std::filesystem::remove(file);
  return c;
}

struct ForwardRate {
  double tokens_per_s = 0;          // median over the timed forwards
  std::int64_t params = 0, active = 0;  // TargetModel::parameter_count, active_parameter_count
};

// The training forward of a random fp32 model of this config on batch x seq real tokens (padded rows,
// no padding), teacher over every 4th id of the vocabulary (chunks of 1024 rows): one warm-up, then the
// median tokens/s of reps forwards.
inline ForwardRate forward_rate(const nlohmann::json& config, int reps, std::int64_t batch, std::int64_t seq) {
  const auto c = config_of(config);
  torch::manual_seed(0);
  auto m = target::TargetModel::random(c, torch::kFloat32, torch::kCPU);
  target::TargetBatch b{torch::randint(c.vocab_size, {batch, seq}),
                        torch::arange(seq).unsqueeze(0).expand({batch, seq}).contiguous(),
                        torch::zeros({batch, seq}, torch::kInt64), {false, 0}};
  const target::TeacherSpec teacher{torch::arange(0, c.vocab_size, 4), 1024};
  m.forward(b, teacher);  // warm-up
  std::vector<double> tps;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    m.forward(b, teacher);
    tps.push_back(double(batch * seq) / seconds_since(t0));
  }
  return {median_of(tps), m.parameter_count(), m.active_parameter_count()};
}

}  // namespace eagle::bench
