// Padding efficiency, shapes and attention cost of batching modes over sample lengths.
#include "eagle/data/batching_stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>

#include "eagle/data/dataset.h"

namespace eagle::data {

LengthSummary summarize_lengths(const std::vector<std::int64_t>& lengths) {
  LengthSummary s;
  s.samples = static_cast<std::int64_t>(lengths.size());
  if (lengths.empty()) return s;
  std::vector<std::int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t l : sorted) {
    s.tokens += l;
    std::size_t b = length_bucket(l);
    if (s.histogram.size() <= b) s.histogram.resize(b + 1, 0);
    ++s.histogram[b];
  }
  // Nearest-rank percentiles: the smallest length with at least p% of the samples at or below it.
  auto pct = [&](int p) {
    std::size_t rank = (static_cast<std::size_t>(p) * sorted.size() + 99) / 100;
    return sorted[std::max<std::size_t>(rank, 1) - 1];
  };
  s.min = sorted.front();
  s.max = sorted.back();
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  s.mean = static_cast<double>(s.tokens) / static_cast<double>(s.samples);
  return s;
}

ModeReport evaluate_mode(const std::vector<std::int64_t>& lengths, const SamplerOptions& o, std::string name) {
  ModeReport r;
  r.name = std::move(name);
  r.options = o;
  r.options.num_ranks = 1;
  r.options.rank = 0;
  auto start = std::chrono::steady_clock::now();
  EpochPlan plan = plan_epoch(lengths, r.options, 0);
  r.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::set<Shape> used;
  double computed = 0, ideal = 0;
  auto square = [](std::int64_t n) { return static_cast<double>(n) * static_cast<double>(n); };
  for (const auto& step : plan) {
    const BatchPlan& p = step[0];
    ++r.batches;
    r.real_tokens += p.real_tokens(lengths);
    r.computed_tokens += p.computed_tokens();
    used.insert(Shape{p.rows, p.length});
    if (!p.packed) {
      computed += static_cast<double>(p.rows) * square(p.length);  // causal over the whole padded row
      continue;
    }
    for (const auto& row : p.row_samples) {  // each document, and the padding run, on its own
      std::int64_t used_tokens = 0;
      for (std::int64_t s : row) {
        computed += square(lengths[static_cast<std::size_t>(s)]);
        used_tokens += lengths[static_cast<std::size_t>(s)];
      }
      computed += square(p.length - used_tokens);
    }
  }
  for (std::int64_t l : lengths) ideal += static_cast<double>(l) * static_cast<double>(l);
  r.efficiency = r.computed_tokens ? static_cast<double>(r.real_tokens) / static_cast<double>(r.computed_tokens) : 0;
  r.shapes_used = static_cast<std::int64_t>(used.size());
  r.shapes_possible = static_cast<std::int64_t>(possible_shapes(r.options).size());
  r.attention_vs_ideal = ideal > 0 ? computed / ideal : 0;
  return r;
}

std::vector<RankReport> evaluate_ranks(const std::vector<std::int64_t>& lengths, const SamplerOptions& o,
                                       std::int64_t num_ranks) {
  std::vector<RankReport> out(static_cast<std::size_t>(num_ranks));
  for (std::int64_t r = 0; r < num_ranks; ++r) out[static_cast<std::size_t>(r)].rank = r;
  SamplerOptions ro = o;
  ro.num_ranks = num_ranks;
  ro.rank = 0;
  for (const auto& step : plan_epoch(lengths, ro, 0))
    for (std::size_t r = 0; r < step.size() && r < out.size(); ++r) {
      ++out[r].batches;
      out[r].real_tokens += step[r].real_tokens(lengths);
      out[r].computed_tokens += step[r].computed_tokens();
    }
  return out;
}

std::vector<std::int64_t> suggest_boundaries(const std::vector<std::int64_t>& lengths, std::int64_t training_seq_len,
                                             std::int64_t count, std::int64_t multiple) {
  // Candidates: multiples of `multiple` (coarsened so there are at most 1024) and training_seq_len.
  multiple = std::max({multiple, std::int64_t{1}, (training_seq_len + 1023) / 1024});
  std::vector<std::int64_t> cand;
  for (std::int64_t b = multiple; b < training_seq_len; b += multiple) cand.push_back(b);
  cand.push_back(training_seq_len);
  const std::size_t m = cand.size();
  // cnt[i], sum[i]: samples (and their tokens) of length <= cand[i-1]; index 0 is "none".
  std::vector<double> cnt(m + 1, 0), sum(m + 1, 0);
  for (std::int64_t l : lengths) {
    auto i = static_cast<std::size_t>(std::lower_bound(cand.begin(), cand.end(), l) - cand.begin()) + 1;
    cnt[i] += 1;
    sum[i] += static_cast<double>(l);
  }
  for (std::size_t i = 1; i <= m; ++i) {
    cnt[i] += cnt[i - 1];
    sum[i] += sum[i - 1];
  }
  // Padding of the samples in (cand[j-1], cand[i-1]] when all are padded to cand[i-1].
  auto cost = [&](std::size_t j, std::size_t i) {
    return (cnt[i] - cnt[j]) * static_cast<double>(cand[i - 1]) - (sum[i] - sum[j]);
  };
  // best[t][i]: least padding of the samples up to cand[i-1] with at most t buckets, the last at i.
  const auto k = static_cast<std::size_t>(std::max<std::int64_t>(1, count));
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(m + 1, inf));
  std::vector<std::vector<std::size_t>> from(k + 1, std::vector<std::size_t>(m + 1, 0));
  best[0][0] = 0;
  for (std::size_t t = 1; t <= k; ++t) {
    best[t][0] = 0;
    for (std::size_t i = 1; i <= m; ++i)
      for (std::size_t j = 0; j < i; ++j) {
        double c = best[t - 1][j] + cost(j, i);
        if (c < best[t][i]) {
          best[t][i] = c;
          from[t][i] = j;
        }
      }
  }
  std::vector<std::int64_t> out;
  for (std::size_t t = k, i = m; i > 0; i = from[t--][i])
    if (cnt[i] > cnt[from[t][i]] || i == m) out.push_back(cand[i - 1]);  // empty buckets are dropped
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::int64_t> granularity_grid(const SamplerOptions& base) {
  // 64..1024, then powers of two up to a sixteenth of training_seq_len (long contexts: 2048..8192 at
  // 131072), and the granularity given when it is none of those.
  std::vector<std::int64_t> grid{0, 64, 128, 256, 512, 1024};
  for (std::int64_t g = 2048; g <= base.training_seq_len / 16; g *= 2) grid.push_back(g);
  if (std::find(grid.begin(), grid.end(), base.bucket_granularity) == grid.end()) {
    grid.push_back(base.bucket_granularity);
    std::sort(grid.begin(), grid.end());
  }
  return grid;
}

std::vector<ModeReport> evaluate_grid(const std::vector<std::int64_t>& lengths, const SamplerOptions& base) {
  std::vector<ModeReport> out;
  for (bool grouped : {true, false}) {
    const char* g = grouped ? "grouped" : "random";
    for (std::int64_t gran : granularity_grid(base)) {
      SamplerOptions o = base;
      o.group_by_length = grouped;
      o.padding_free = false;
      o.bucket_boundaries.clear();
      o.bucket_granularity = gran;
      out.push_back(evaluate_mode(lengths, o, gran ? "granularity " + std::to_string(gran) + ", " + g
                                                   : std::string("granularity 0 (baseline), ") + g));
    }
    SamplerOptions b = base;
    b.group_by_length = grouped;
    b.padding_free = false;
    const bool given = !base.bucket_boundaries.empty();
    if (!given) b.bucket_boundaries = suggest_boundaries(lengths, base.training_seq_len);
    out.push_back(
        evaluate_mode(lengths, b, std::string(given ? "bucket_boundaries, " : "least-padding boundaries, ") + g));
    SamplerOptions p = base;
    p.group_by_length = grouped;
    p.padding_free = true;
    out.push_back(evaluate_mode(lengths, p, std::string("padding-free, ") + g));
  }
  return out;
}

nlohmann::json to_json(const LengthSummary& s) {
  nlohmann::json hist = nlohmann::json::array();
  for (std::size_t b = 0; b < s.histogram.size(); ++b)
    hist.push_back(
        {{"min", std::int64_t{1} << b}, {"max_exclusive", std::int64_t{2} << b}, {"samples", s.histogram[b]}});
  return {{"samples", s.samples}, {"tokens", s.tokens}, {"min", s.min},   {"mean", s.mean},
          {"p50", s.p50},         {"p90", s.p90},       {"p99", s.p99},   {"max", s.max},
          {"histogram", hist}};
}

nlohmann::json to_json(const ModeReport& r) {
  const SamplerOptions& o = r.options;
  return {{"mode", r.name},
          {"bucket_granularity", o.bucket_granularity},
          {"bucket_boundaries", o.bucket_boundaries},
          {"group_by_length", o.group_by_length},
          {"padding_free", o.padding_free},
          {"batches", r.batches},
          {"real_tokens", r.real_tokens},
          {"computed_tokens", r.computed_tokens},
          {"padding_efficiency", r.efficiency},
          {"shapes_used", r.shapes_used},
          {"shapes_possible", r.shapes_possible},
          {"attention_vs_ideal", r.attention_vs_ideal}};
}

nlohmann::json to_json(const RankReport& r) {
  return {{"rank", r.rank},
          {"batches", r.batches},
          {"real_tokens", r.real_tokens},
          {"computed_tokens", r.computed_tokens}};
}

}  // namespace eagle::data
