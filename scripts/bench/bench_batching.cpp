// Batching benchmark: padding efficiency, shapes and attention cost of every batching mode on a
// lengths file (one length a line) or a seeded log-normal length distribution; prints Markdown.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <string>

#include "eagle/data/batching_stats.h"
#include "eagle/data/rng.h"
#include "eagle/util/error.h"

using namespace eagle::data;

namespace {

std::vector<std::int64_t> read_lengths(const std::string& path, std::int64_t seq_len) {
  std::ifstream in(path);
  if (!in) throw eagle::Error(eagle::ErrorKind::input, "cannot open the lengths file").file(path);
  std::vector<std::int64_t> out;
  std::int64_t x = 0;
  while (in >> x) out.push_back(std::min(x, seq_len));  // longer samples are truncated, as the loader does
  return out;
}

// Log-normal lengths (Box-Muller on our own generator, so every platform draws the same lengths),
// truncated to seq_len like the loader's default overlong_policy.
std::vector<std::int64_t> lognormal(double median, double sigma, std::size_t n, std::uint64_t seed,
                                    std::int64_t seq_len) {
  Rng rng(seed);
  std::vector<std::int64_t> out(n);
  for (auto& x : out) {
    double u1 = 1.0 - rng.uniform_double(), u2 = rng.uniform_double();
    double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    x = std::clamp<std::int64_t>(std::llround(median * std::exp(sigma * z)), 1, seq_len);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"eagle-train batching benchmark"};
  std::string lengths_file;
  double median = 600, sigma = 0.8;
  std::size_t samples = 20000;
  SamplerOptions o;
  o.training_seq_len = 4096;
  o.rows = 8;
  std::int64_t seed = 42;
  app.add_option("--lengths", lengths_file, "File of sample lengths, one a line; default: log-normal");
  app.add_option("--median", median, "Log-normal median length");
  app.add_option("--sigma", sigma, "Log-normal sigma");
  app.add_option("--samples", samples, "Log-normal sample count");
  app.add_option("--training_seq_len", o.training_seq_len);
  app.add_option("--rows", o.rows, "per_device_train_batch_size");
  app.add_option("--max_tokens_per_batch", o.max_tokens_per_batch);
  app.add_option("--window_batches", o.window_batches);
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);
  o.seed = static_cast<std::uint64_t>(seed);
  try {
    auto lengths = lengths_file.empty() ? lognormal(median, sigma, samples, o.seed, o.training_seq_len)
                                        : read_lengths(lengths_file, o.training_seq_len);
    LengthSummary s = summarize_lengths(lengths);
    std::cout << fmt::format(
        "{} samples, {} tokens; length min {}, p50 {}, mean {:.1f}, p90 {}, p99 {}, max {}; training_seq_len {}, "
        "{} rows a batch{}, window {} batches\n\n",
        s.samples, s.tokens, s.min, s.p50, s.mean, s.p90, s.p99, s.max, o.training_seq_len, o.rows,
        o.max_tokens_per_batch ? fmt::format(" (token budget {})", o.max_tokens_per_batch) : "", o.window_batches);
    std::cout << "| mode | padding efficiency | shapes used / possible | batches | attention vs ideal | plan ms |\n"
                 "|---|---|---|---|---|---|\n";
    for (const ModeReport& r : evaluate_grid(lengths, o))
      std::cout << fmt::format("| {} | {:.3f} | {} / {} | {} | {:.2f} | {:.1f} |\n", r.name, r.efficiency,
                               r.shapes_used, r.shapes_possible, r.batches, r.attention_vs_ideal, r.plan_ms);
  } catch (const eagle::Error& e) {
    std::cerr << e.format() << "\n";
    return 1;
  }
  return 0;
}
