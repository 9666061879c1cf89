// Cost of the run's I/O building blocks: one logged step through RunLogger (metrics.jsonl line +
// TensorBoard record, both flushed), and checkpoint saves (write, fsync, rename, COMPLETE), the
// best-checkpoint replica and rotation, for a given checkpoint size. Run by io_bench.sh.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "eagle/util/log_sink.h"
#include "eagle/io/run_logger.h"
#include "eagle/run/checkpoint_dir.h"

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

static double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

int main(int argc, char** argv) {
  fs::path base = argc > 1 ? argv[1] : fs::temp_directory_path();
  long mib = argc > 2 ? std::atol(argv[2]) : 256;
  fs::path dir = base / ("eagle_io_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);

  // The console step line is left out (its cost is the terminal's); the file sinks are measured.
  eagle::log::set_log_level(eagle::log::LogLevel::warn);
  const int steps = 2000;
  {
    eagle::io::RunLogger log(dir / "log", steps, std::nullopt, eagle::io::ProgressMode::off);
    eagle::io::StepStats s;
    s.total_steps = steps;
    s.acc = {0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1};
    auto t = clock_type::now();
    for (int i = 1; i <= steps; ++i) {
      s.step = i;
      s.loss = 1.0 / i;
      log.log_step(s);
    }
    double sec = seconds_since(t);
    std::printf("| RunLogger::log_step, 7 TTT steps (metrics.jsonl + TensorBoard, flushed; no console) | %.1f us |\n",
                1e6 * sec / steps);
  }

  std::vector<char> block(1 << 20, 'x');
  eagle::run::CheckpointDir ckpt(dir / "run");
  double write_s = 0;
  auto t = clock_type::now();
  ckpt.save(1, [&](const fs::path& folder) {
    auto tw = clock_type::now();
    std::FILE* f = std::fopen((folder / "model.safetensors").c_str(), "wb");
    for (long i = 0; i < mib; ++i) std::fwrite(block.data(), 1, block.size(), f);
    std::fclose(f);
    write_s = seconds_since(tw);
  });
  double total_s = seconds_since(t);
  std::printf("| checkpoint save, %ld MiB: writing the file (page cache) | %.3f s |\n", mib, write_s);
  std::printf("| checkpoint save, %ld MiB: fsync + rename + COMPLETE | %.3f s |\n", mib, total_s - write_s);
  ckpt.save(2, [&](const fs::path& folder) {
    std::FILE* f = std::fopen((folder / "model.safetensors").c_str(), "wb");
    std::fwrite(block.data(), 1, block.size(), f);
    std::fclose(f);
  });
  t = clock_type::now();
  ckpt.update_best(1, "ar", 2.0);
  std::printf("| checkpoint-best replica (hard links) of the %ld MiB checkpoint | %.4f s |\n", mib, seconds_since(t));
  t = clock_type::now();
  ckpt.rotate(1);
  std::printf("| rotation: deleting the %ld MiB checkpoint | %.4f s |\n", mib, seconds_since(t));
  fs::remove_all(dir);
  return 0;
}
