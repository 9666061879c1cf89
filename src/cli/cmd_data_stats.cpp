// eagle-train data-stats: the length histogram of a dataset and, for each batching mode, the
// padding efficiency, batch shapes and attention cost, so a user can pick a bucket granularity.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>

#include "eagle/cli/commands.h"
#include "eagle/data/batching_stats.h"
#include "eagle/data/loader.h"

namespace eagle::cli {
namespace {

// The mode of the options given (marked in the table), described like the grid's names.
bool is_configured(const data::ModeReport& r, const data::SamplerOptions& o) {
  const data::SamplerOptions& m = r.options;
  if (m.padding_free != o.padding_free || m.group_by_length != o.group_by_length) return false;
  if (o.padding_free) return true;
  if (!o.bucket_boundaries.empty()) return m.bucket_boundaries == o.bucket_boundaries;
  return m.bucket_boundaries.empty() && m.bucket_granularity == o.bucket_granularity;
}

void print_text(const data::Dataset& ds, const data::LengthSummary& s, const std::vector<data::ModeReport>& modes,
                const data::SamplerOptions& o, const std::vector<std::int64_t>& suggested,
                const std::vector<data::RankReport>& ranks) {
  const data::TokenStats& st = ds.stats();
  std::cout << fmt::format("{}: {} samples, {} tokens ({} trained); truncated {}, dropped {}, skipped {}\n",
                           ds.source(), s.samples, s.tokens, st.trained_tokens, st.truncated, st.dropped, st.skipped);
  std::cout << fmt::format("lengths: min {}, p50 {}, mean {:.1f}, p90 {}, p99 {}, max {} (training_seq_len {})\n\n",
                           s.min, s.p50, s.mean, s.p90, s.p99, s.max, o.training_seq_len);
  std::cout << "length histogram (tokens):\n";
  const std::int64_t most = *std::max_element(s.histogram.begin(), s.histogram.end());
  for (std::size_t b = 0; b < s.histogram.size(); ++b) {
    if (s.histogram[b] == 0) continue;
    std::cout << fmt::format("  [{:>7}, {:>7}) {:>9}  {}\n", std::int64_t{1} << b, std::int64_t{2} << b, s.histogram[b],
                             std::string(static_cast<std::size_t>(50 * s.histogram[b] / most), '#'));
  }
  std::cout << fmt::format("\nbatching, epoch 0 ({}, seed {}):\n",
                           o.max_tokens_per_batch ? fmt::format("token budget {} a batch", o.max_tokens_per_batch)
                                                  : fmt::format("{} rows a batch", o.rows),
                           o.seed);
  std::cout << fmt::format("  {:<40} {:>10} {:>14} {:>9} {:>12}\n", "mode", "efficiency", "shapes used/all", "batches",
                           "attention x");
  for (const auto& r : modes)
    std::cout << fmt::format("{} {:<40} {:>10.3f} {:>14} {:>9} {:>12.2f}\n", is_configured(r, o) ? "*" : " ", r.name,
                             r.efficiency, fmt::format("{}/{}", r.shapes_used, r.shapes_possible), r.batches,
                             r.attention_vs_ideal);
  std::cout << "  (*: the options given; efficiency: real / computed tokens; attention x: the attention the trainer\n"
               "   computes (padded rows whole, packed rows per sample) over attending within each sample only)\n";
  std::cout << fmt::format("suggested bucket_boundaries (16 buckets, least padding): {}\n", fmt::join(suggested, ","));
  if (ranks.size() < 2) return;
  std::cout << fmt::format("\nper rank, the options given, {} ranks (epoch 0):\n", ranks.size());
  std::cout << fmt::format("  {:>4} {:>9} {:>14} {:>16}\n", "rank", "batches", "real tokens", "computed tokens");
  for (const auto& r : ranks)
    std::cout << fmt::format("  {:>4} {:>9} {:>14} {:>16}\n", r.rank, r.batches, r.real_tokens, r.computed_tokens);
}

}  // namespace

void run_data_stats(const config::Options& opts, const Invocation& argv) {
  auto lo = data::LoadOptions::from(opts);
  lo.validation_fraction = 0;  // the statistics cover the whole dataset
  const data::SamplerOptions o = data::SamplerOptions::from(opts);  // checked before the data is read
  data::LoadedData loaded = data::load_dataset(opts.data_path, lo);
  const data::Dataset& ds = loaded.train;
  const std::vector<std::int64_t> lengths = ds.lengths();
  const data::LengthSummary summary = data::summarize_lengths(lengths);
  const std::vector<data::ModeReport> modes = data::evaluate_grid(lengths, o);
  const std::vector<std::int64_t> suggested = data::suggest_boundaries(lengths, o.training_seq_len);
  // The configured mode split over num_ranks data-parallel ranks (as torchrun would run it).
  const std::vector<data::RankReport> ranks = data::evaluate_ranks(lengths, o, opts.num_ranks);
  if (!opts.json) {
    print_text(ds, summary, modes, o, suggested, ranks);
    return;
  }
  nlohmann::json j;
  j["source"] = ds.source();
  j["training_seq_len"] = o.training_seq_len;
  j["per_device_train_batch_size"] = o.rows;
  j["max_tokens_per_batch"] = o.max_tokens_per_batch;
  j["seed"] = o.seed;
  j["trained_tokens"] = ds.stats().trained_tokens;
  j["truncated"] = ds.stats().truncated;
  j["dropped"] = ds.stats().dropped;
  j["skipped"] = ds.stats().skipped;
  j["lengths"] = data::to_json(summary);
  j["modes"] = nlohmann::json::array();
  for (const auto& r : modes) {
    j["modes"].push_back(data::to_json(r));
    j["modes"].back()["configured"] = is_configured(r, o);
  }
  j["suggested_bucket_boundaries"] = suggested;
  j["num_ranks"] = opts.num_ranks;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : ranks) j["ranks"].push_back(data::to_json(r));
  std::cout << j.dump(2) << "\n";
}

}  // namespace eagle::cli
