// Batch planning over sample lengths: buckets, grouping windows, token budgets, first-fit-decreasing
// packing and the token-balanced split of each global batch between ranks.
#include "eagle/data/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <ostream>

#include "eagle/config/options.h"
#include "eagle/data/rng.h"
#include "eagle/util/error.h"

namespace eagle::data {
namespace {

// The content of one row before padding: its samples and their total tokens.
struct Row {
  std::vector<std::int64_t> samples;
  std::int64_t tokens = 0;
};

// A batch of all ranks together: num_ranks * rows_per_rank rows of one length.
struct GlobalBatch {
  std::int64_t length = 0;
  std::int64_t rows_per_rank = 0;
  std::vector<Row> rows;
};

// First-fit over bins with a max-tree of remaining room: the leftmost bin with room for a sample is
// found in O(log bins), so packing a window of thousands of rows stays cheap.
class FirstFit {
 public:
  FirstFit(std::size_t max_bins, std::int64_t capacity) {
    while (size_ < max_bins) size_ *= 2;
    room_.assign(2 * size_, capacity);
  }
  std::size_t find(std::int64_t need) const {
    std::size_t node = 1;
    while (node < size_) node = room_[2 * node] >= need ? 2 * node : 2 * node + 1;
    return node - size_;
  }
  void take(std::size_t bin, std::int64_t need) {
    std::size_t i = bin + size_;
    room_[i] -= need;
    for (i /= 2; i >= 1; i /= 2) room_[i] = std::max(room_[2 * i], room_[2 * i + 1]);
  }

 private:
  std::size_t size_ = 1;
  std::vector<std::int64_t> room_;
};

class Planner {
 public:
  Planner(const std::vector<std::int64_t>& lengths, const SamplerOptions& o)
      : lengths_(lengths), o_(o), buckets_(bucket_lengths(o)) {}

  std::vector<GlobalBatch> plan(std::int64_t epoch) {
    Rng rng(o_.seed, static_cast<std::uint64_t>(epoch));
    std::vector<std::int64_t> order(lengths_.size());
    std::iota(order.begin(), order.end(), 0);
    rng.shuffle(order);
    std::vector<GlobalBatch> out;
    if (o_.group_by_length) {
      plan_windows(order, out);
      rng.shuffle(out);
    } else {
      cut(o_.padding_free ? next_fit(order) : single_rows(order), out, nullptr);
    }
    largest_first(out);
    return out;
  }

  std::vector<BatchPlan> split(const GlobalBatch& gb) const {
    const std::int64_t n = o_.num_ranks, r = gb.rows_per_rank;
    std::vector<BatchPlan> plans(n, BatchPlan{r, gb.length, {}, o_.padding_free});
    std::vector<std::size_t> idx(gb.rows.size());
    std::iota(idx.begin(), idx.end(), 0);
    // With several ranks, longest rows first, each to the rank holding the fewest tokens so far
    // (ties: the lowest rank), so no rank waits long for the others.
    if (n > 1)
      std::stable_sort(idx.begin(), idx.end(),
                       [&](std::size_t a, std::size_t b) { return gb.rows[a].tokens > gb.rows[b].tokens; });
    std::vector<std::int64_t> tokens(n, 0);
    for (std::size_t i : idx) {
      std::int64_t best = -1;
      for (std::int64_t k = 0; k < n; ++k) {
        if (static_cast<std::int64_t>(plans[k].row_samples.size()) >= r) continue;
        if (best < 0 || tokens[k] < tokens[best]) best = k;
      }
      plans[best].row_samples.push_back(gb.rows[i].samples);
      tokens[best] += gb.rows[i].tokens;
    }
    for (auto& p : plans) p.row_samples.resize(static_cast<std::size_t>(r));
    return plans;
  }

 private:
  std::int64_t bucket(std::int64_t need) const {
    return *std::lower_bound(buckets_.begin(), buckets_.end(), need);
  }
  // Rows of all ranks together in a batch of this length.
  std::int64_t global_rows(std::int64_t length) const {
    return o_.num_ranks * (o_.padding_free ? packed_rows(o_) : rows_for_length(o_, length));
  }

  std::vector<Row> single_rows(const std::vector<std::int64_t>& samples) const {
    std::vector<Row> rows;
    rows.reserve(samples.size());
    for (std::int64_t s : samples) rows.push_back(Row{{s}, lengths_[s]});
    return rows;
  }

  // Packing in the given order (no grouping): a row is closed when the next sample does not fit.
  std::vector<Row> next_fit(const std::vector<std::int64_t>& samples) const {
    std::vector<Row> rows;
    for (std::int64_t s : samples) {
      if (rows.empty() || rows.back().tokens + lengths_[s] > o_.training_seq_len) rows.emplace_back();
      rows.back().samples.push_back(s);
      rows.back().tokens += lengths_[s];
    }
    return rows;
  }

  // Cuts rows, in order, into global batches: a row joins the open batch while the batch, padded to
  // the bucket of its longest row, still has a row free for it. With `carry`, a last batch that is
  // not full is handed back (its rows go to the next window) instead of being padded.
  void cut(const std::vector<Row>& rows, std::vector<GlobalBatch>& out, std::vector<Row>* carry) const {
    GlobalBatch cur;
    std::int64_t longest = 0;
    auto close = [&] {
      cur.length = bucket(longest);
      cur.rows_per_rank = global_rows(cur.length) / o_.num_ranks;
      out.push_back(std::move(cur));
      cur = GlobalBatch{};
      longest = 0;
    };
    for (const Row& row : rows) {
      std::int64_t grown = std::max(longest, row.tokens);
      if (!cur.rows.empty() && static_cast<std::int64_t>(cur.rows.size()) + 1 > global_rows(bucket(grown))) close();
      longest = std::max(longest, row.tokens);
      cur.rows.push_back(row);
    }
    if (cur.rows.empty()) return;
    if (carry && static_cast<std::int64_t>(cur.rows.size()) < global_rows(bucket(longest))) {
      *carry = std::move(cur.rows);
      return;
    }
    close();
  }

  // Cuts rows sorted longest first bucket by bucket, so no batch straddles two bucket lengths (its
  // rows would be padded to the longer one); each bucket's unfilled batch is carried (returned).
  std::vector<Row> cut_by_bucket(const std::vector<Row>& rows, std::vector<GlobalBatch>& out) const {
    std::vector<Row> carried;
    for (std::size_t begin = 0; begin < rows.size();) {
      std::size_t end = begin;
      const std::int64_t len = bucket(rows[begin].tokens);
      while (end < rows.size() && bucket(rows[end].tokens) == len) ++end;
      std::vector<Row> run(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                           rows.begin() + static_cast<std::ptrdiff_t>(end));
      std::vector<Row> rest;
      cut(run, out, &rest);
      carried.insert(carried.end(), rest.begin(), rest.end());
      begin = end;
    }
    return carried;
  }

  // Length grouping: the shuffled samples are taken a window (window_batches global batches'
  // worth) at a time, sorted longest first (or packed first-fit-decreasing) and cut into batches;
  // a window's last, unfilled batch is carried into the next window.
  void plan_windows(const std::vector<std::int64_t>& order, std::vector<GlobalBatch>& out) const {
    const std::int64_t w = o_.window_batches * o_.num_ranks;
    const bool by_tokens = o_.padding_free || o_.max_tokens_per_batch > 0;
    const std::int64_t budget =
        o_.padding_free ? packed_rows(o_) * o_.training_seq_len : o_.max_tokens_per_batch;
    std::vector<std::int64_t> pending;
    std::size_t pos = 0;
    while (true) {
      std::vector<std::int64_t> window = std::move(pending);
      pending.clear();
      std::int64_t tokens = 0;
      for (std::int64_t s : window) tokens += lengths_[s];
      auto full = [&] {
        return by_tokens ? tokens >= w * budget : static_cast<std::int64_t>(window.size()) >= w * o_.rows;
      };
      while (pos < order.size() && !full()) {
        window.push_back(order[pos]);
        tokens += lengths_[order[pos++]];
      }
      if (window.empty()) return;
      const bool last = pos >= order.size();
      const std::size_t emitted_before = out.size();
      std::vector<Row> rows;
      if (o_.padding_free) {
        for (auto& bin : pack_first_fit_decreasing(window, lengths_, o_.training_seq_len)) {
          Row r{std::move(bin), 0};
          for (std::int64_t s : r.samples) r.tokens += lengths_[s];
          rows.push_back(std::move(r));
        }
      } else {
        rows = single_rows(window);
      }
      std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.tokens > b.tokens; });
      if (last) {
        cut(rows, out, nullptr);
        return;
      }
      std::vector<Row> carried = o_.padding_free ? std::vector<Row>{} : cut_by_bucket(rows, out);
      std::int64_t carried_measure = 0;
      for (const Row& r : carried) carried_measure += by_tokens ? r.tokens : 1;
      // Buckets too fine for the window would carry most of it: cut it as one run instead, which
      // carries less than one batch, so every window makes progress.
      if (o_.padding_free || 2 * carried_measure > (by_tokens ? tokens : static_cast<std::int64_t>(window.size()))) {
        out.resize(emitted_before);
        carried.clear();
        cut(rows, out, &carried);
      }
      for (const Row& r : carried) pending.insert(pending.end(), r.samples.begin(), r.samples.end());
    }
  }

  // The batch with the most computed tokens (ties: the longest rows, whose attention is largest)
  // goes first, so an out-of-memory shows at step 1.
  static void largest_first(std::vector<GlobalBatch>& batches) {
    if (batches.empty()) return;
    auto size = [](const GlobalBatch& b) { return std::pair(b.rows_per_rank * b.length, b.length); };
    auto it = std::max_element(batches.begin(), batches.end(),
                               [&](const GlobalBatch& a, const GlobalBatch& b) { return size(a) < size(b); });
    std::rotate(batches.begin(), it, it + 1);
  }

  const std::vector<std::int64_t>& lengths_;
  const SamplerOptions& o_;
  std::vector<std::int64_t> buckets_;
};

}  // namespace

SamplerOptions SamplerOptions::from(const config::Options& o, std::int64_t num_ranks, std::int64_t rank) {
  SamplerOptions s;
  s.training_seq_len = o.training_seq_len;
  s.bucket_granularity = o.bucket_granularity;
  s.bucket_boundaries = o.bucket_boundaries;
  s.group_by_length = o.group_by_length;
  s.padding_free = o.padding_free;
  s.max_tokens_per_batch = o.max_tokens_per_batch;
  s.rows = o.per_device_train_batch_size;
  s.seed = static_cast<std::uint64_t>(o.seed);
  s.num_ranks = num_ranks;
  s.rank = rank;
  s.validate();
  return s;
}

void SamplerOptions::validate() const {
  // The option table checks what users set (lengths, granularity, boundaries, rows, token budget);
  // what is left is set by the program itself.
  EAGLE_CHECK(num_ranks >= 1 && rank >= 0 && rank < num_ranks,
              Error(ErrorKind::internal, "the sampler's rank is out of range").place("SamplerOptions.rank")
                  .expected(fmt::format("0 <= rank < num_ranks ({})", num_ranks)).found(std::to_string(rank)));
  EAGLE_CHECK(window_batches >= 1, Error(ErrorKind::internal, "the sampler's window is empty")
                                       .place("SamplerOptions.window_batches").found(std::to_string(window_batches)));
}

std::int64_t BatchPlan::real_tokens(const std::vector<std::int64_t>& lengths) const {
  std::int64_t n = 0;
  for (const auto& row : row_samples)
    for (std::int64_t s : row) n += lengths[static_cast<std::size_t>(s)];
  return n;
}

std::ostream& operator<<(std::ostream& os, const BatchPlan& p) {
  os << p.rows << "x" << p.length << " [";
  for (std::size_t r = 0; r < p.row_samples.size(); ++r)
    os << (r ? ", " : "") << fmt::format("[{}]", fmt::join(p.row_samples[r], ", "));
  return os << "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.rows << "x" << s.length; }

std::vector<std::int64_t> bucket_lengths(const SamplerOptions& o) {
  std::vector<std::int64_t> out;
  if (!o.bucket_boundaries.empty()) {
    for (std::int64_t b : o.bucket_boundaries)
      if (b < o.training_seq_len) out.push_back(b);
  } else if (o.bucket_granularity > 0) {
    for (std::int64_t b = o.bucket_granularity; b < o.training_seq_len; b += o.bucket_granularity) out.push_back(b);
  }
  out.push_back(o.training_seq_len);
  return out;
}

std::int64_t bucket_length(const SamplerOptions& o, std::int64_t longest) {
  EAGLE_CHECK(longest <= o.training_seq_len,
              Error(ErrorKind::internal, "a row is longer than training_seq_len")
                  .expected(fmt::format("<= {}", o.training_seq_len))
                  .found(std::to_string(longest)));
  auto b = bucket_lengths(o);
  return *std::lower_bound(b.begin(), b.end(), longest);
}

std::int64_t rows_for_length(const SamplerOptions& o, std::int64_t length) {
  if (o.max_tokens_per_batch <= 0) return o.rows;
  return std::max<std::int64_t>(1, o.max_tokens_per_batch / length);
}

std::int64_t packed_rows(const SamplerOptions& o) {
  return o.max_tokens_per_batch > 0 ? o.max_tokens_per_batch / o.training_seq_len : o.rows;
}

std::vector<Shape> possible_shapes(const SamplerOptions& o) {
  std::vector<Shape> out;
  for (std::int64_t len : bucket_lengths(o)) {
    std::int64_t rows = o.padding_free ? packed_rows(o) : rows_for_length(o, len);
    out.push_back(Shape{rows, len});
  }
  return out;
}

std::int64_t max_segments_per_row(const std::vector<std::int64_t>& lengths, std::int64_t row_length) {
  std::vector<std::int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  std::int64_t used = 0, samples = 0;
  for (std::int64_t l : sorted) {
    if (used + std::max<std::int64_t>(l, 1) > row_length) break;
    used += std::max<std::int64_t>(l, 1);
    ++samples;
  }
  return std::max<std::int64_t>(samples, 1) + 1;
}

std::vector<std::vector<std::int64_t>> pack_first_fit_decreasing(const std::vector<std::int64_t>& samples,
                                                                 const std::vector<std::int64_t>& lengths,
                                                                 std::int64_t capacity) {
  std::vector<std::int64_t> order = samples;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<std::int64_t>> bins;
  FirstFit fit(std::max<std::size_t>(1, order.size()), capacity);
  for (std::int64_t s : order) {
    EAGLE_CHECK(lengths[s] <= capacity, Error(ErrorKind::internal, "a sample does not fit in a packed row")
                                            .place(fmt::format("sample {}", s))
                                            .expected(fmt::format("<= {} tokens", capacity))
                                            .found(std::to_string(lengths[s])));
    std::size_t bin = fit.find(lengths[s]);
    fit.take(bin, lengths[s]);
    if (bin >= bins.size()) bins.resize(bin + 1);
    bins[bin].push_back(s);
  }
  return bins;
}

EpochPlan plan_epoch(const std::vector<std::int64_t>& lengths, const SamplerOptions& o, std::int64_t epoch) {
  o.validate();
  for (std::size_t i = 0; i < lengths.size(); ++i)
    EAGLE_CHECK(lengths[i] >= 1 && lengths[i] <= o.training_seq_len,
                Error(ErrorKind::input, "a sample length cannot be batched")
                    .place(fmt::format("sample {}", i))
                    .expected(fmt::format("1 to training_seq_len ({}) tokens", o.training_seq_len))
                    .found(std::to_string(lengths[i]))
                    .hint("the loader truncates or drops samples longer than training_seq_len and skips empty ones"));
  Planner planner(lengths, o);
  EpochPlan out;
  for (const GlobalBatch& gb : planner.plan(epoch)) out.push_back(planner.split(gb));
  return out;
}

std::vector<BatchPlan> plan_sorted(const std::vector<std::int64_t>& lengths, std::int64_t first, std::int64_t count,
                                   const SamplerOptions& o) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), first);
  const auto length = [&](std::int64_t i) { return lengths[static_cast<std::size_t>(i)]; };
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return length(a) > length(b); });
  std::vector<BatchPlan> plans;
  for (std::size_t i = 0; i < order.size();) {
    BatchPlan p;
    p.length = bucket_length(o, length(order[i]));
    p.rows = rows_for_length(o, p.length);
    p.row_samples.resize(static_cast<std::size_t>(p.rows));
    for (std::int64_t r = 0; r < p.rows && i < order.size(); ++r)
      p.row_samples[static_cast<std::size_t>(r)] = {order[i++]};
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace eagle::data
