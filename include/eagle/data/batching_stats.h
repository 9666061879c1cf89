// What each batching mode costs on a list of sample lengths: padding efficiency, batch shapes and
// attention cost, for data-stats and the batching benchmark. Plain C++ over the epoch plans.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "eagle/data/plan.h"

namespace eagle::data {

struct LengthSummary {
  std::int64_t samples = 0, tokens = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;
  double mean = 0;
  std::vector<std::int64_t> histogram;  // index b: samples with length in [2^b, 2^(b+1))
};
LengthSummary summarize_lengths(const std::vector<std::int64_t>& lengths);

struct ModeReport {
  std::string name;               // e.g. "granularity 128, grouped"
  SamplerOptions options;
  std::int64_t batches = 0;       // in epoch 0
  std::int64_t real_tokens = 0;   // non-padding tokens
  std::int64_t computed_tokens = 0;
  double efficiency = 0;          // real / computed tokens (for padding-free: the fill ratio)
  std::int64_t shapes_used = 0;   // distinct (rows, length) in epoch 0
  std::int64_t shapes_possible = 0;
  // Attention cost of what the trainer computes (model/attention.h) divided by the cost of attending
  // within each sample only (sum of sample length^2): a padded row costs its length^2 (causal over
  // the whole row, padding included); a packed row the sum of its samples' length^2 plus its padding
  // run's (document-aware kernels), so packing sits just above the floor of 1.0.
  double attention_vs_ideal = 0;
  double plan_ms = 0;             // time to plan the epoch
};

// Plans epoch 0 with these options (one rank) and measures it.
ModeReport evaluate_mode(const std::vector<std::int64_t>& lengths, const SamplerOptions& o, std::string name);

// One rank's share of epoch 0 under data parallelism: every rank gets the same number of batches
// (the planner splits each global batch evenly), the tokens in them differ.
struct RankReport {
  std::int64_t rank = 0;
  std::int64_t batches = 0;
  std::int64_t real_tokens = 0;
  std::int64_t computed_tokens = 0;
};

// Plans epoch 0 with these options for num_ranks ranks and returns each rank's share.
std::vector<RankReport> evaluate_ranks(const std::vector<std::int64_t>& lengths, const SamplerOptions& o,
                                       std::int64_t num_ranks);

// The granularities data-stats compares: 0 (the baseline), 64, 128, 256, 512, 1024, powers of two
// from 2048 up to training_seq_len / 16 (long contexts), and base's own granularity.
std::vector<std::int64_t> granularity_grid(const SamplerOptions& base);

// The comparison data-stats prints: the granularity_grid, the given bucket_boundaries (or the
// suggested ones), and padding-free, each grouped and not; rows, token budget, training_seq_len and
// seed are taken from `base`.
std::vector<ModeReport> evaluate_grid(const std::vector<std::int64_t>& lengths, const SamplerOptions& base);

// At most `count` bucket lengths, multiples of `multiple`, the last training_seq_len, chosen to pad
// the samples least (each padded to its bucket; an exact dynamic program over the candidates).
// fairseq takes length quantiles instead; those waste more in the long tail.
std::vector<std::int64_t> suggest_boundaries(const std::vector<std::int64_t>& lengths, std::int64_t training_seq_len,
                                             std::int64_t count = 16, std::int64_t multiple = 16);

nlohmann::json to_json(const LengthSummary& s);
nlohmann::json to_json(const ModeReport& r);
nlohmann::json to_json(const RankReport& r);

}  // namespace eagle::data
