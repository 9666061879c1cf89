// Batching: buckets, first-fit-decreasing packing, epoch plans (grouped, token budget, packed,
// sharded) and plan -> Batch, asserted exactly on hand-built length lists.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "eagle/config/resolve.h"
#include "eagle/data/plan.h"
#include "eagle/data/rng.h"
#include "eagle/data/sampler.h"
#include "eagle/util/error.h"

using namespace eagle;
using namespace eagle::data;
using Rows = std::vector<std::vector<std::int64_t>>;

namespace {

SamplerOptions opts(std::int64_t seq_len, std::int64_t granularity, std::int64_t rows) {
  SamplerOptions o;
  o.training_seq_len = seq_len;
  o.bucket_granularity = granularity;
  o.rows = rows;
  o.seed = 7;
  return o;
}

// The plans of rank 0, sorted, so a plan whose set of batches does not depend on the shuffle can be
// compared exactly.
std::vector<BatchPlan> sorted(std::vector<BatchPlan> v) {
  std::sort(v.begin(), v.end(), [](const BatchPlan& a, const BatchPlan& b) {
    return std::tie(a.length, a.rows, a.row_samples) > std::tie(b.length, b.rows, b.row_samples);
  });
  return v;
}
std::vector<BatchPlan> sorted_rank0(const EpochPlan& plan) {
  std::vector<BatchPlan> v;
  for (const auto& step : plan) v.push_back(step[0]);
  return sorted(v);
}

// Log-normal-ish lengths from our own generator (exact on every platform).
std::vector<std::int64_t> random_lengths(std::size_t n, std::int64_t max_len, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) {
    double u = rng.uniform_double();
    x = 1 + static_cast<std::int64_t>(static_cast<double>(max_len - 1) * u * u * u);
  }
  return v;
}

// Checks every plan of an epoch: shapes known in advance, equal shapes across ranks, rows within the
// length, and every sample exactly once.
void check_epoch(const EpochPlan& plan, const std::vector<std::int64_t>& lengths, const SamplerOptions& o) {
  auto shapes = possible_shapes(o);
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& step : plan) {
    REQUIRE(static_cast<std::int64_t>(step.size()) == o.num_ranks);
    for (const BatchPlan& p : step) {
      CHECK(p.rows == step[0].rows);
      CHECK(p.length == step[0].length);
      CHECK(std::find(shapes.begin(), shapes.end(), Shape{p.rows, p.length}) != shapes.end());
      REQUIRE(static_cast<std::int64_t>(p.row_samples.size()) == p.rows);
      if (o.max_tokens_per_batch > 0) CHECK(p.computed_tokens() <= o.max_tokens_per_batch);
      for (const auto& row : p.row_samples) {
        std::int64_t t = 0;
        for (std::int64_t s : row) {
          t += lengths[s];
          ++seen[s];
        }
        CHECK(t <= p.length);
        if (!o.padding_free) CHECK(row.size() <= 1);
      }
    }
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(lengths.size()));
}

std::vector<SamplerOptions> all_modes() {
  std::vector<SamplerOptions> modes;
  for (bool grouped : {true, false})
    for (bool packed : {false, true})
      for (std::int64_t budget : {0, 2048}) {
        SamplerOptions o = opts(512, 64, 3);
        o.group_by_length = grouped;
        o.padding_free = packed;
        o.max_tokens_per_batch = budget;
        o.window_batches = 4;
        modes.push_back(o);
      }
  return modes;
}

}  // namespace

TEST_CASE("bucket lengths from a granularity, boundaries, or none", "[data]") {
  SamplerOptions o = opts(512, 128, 4);
  CHECK(bucket_lengths(o) == std::vector<std::int64_t>{128, 256, 384, 512});
  CHECK(bucket_length(o, 1) == 128);
  CHECK(bucket_length(o, 128) == 128);
  CHECK(bucket_length(o, 129) == 256);
  CHECK(bucket_length(o, 500) == 512);
  o.bucket_granularity = 200;
  CHECK(bucket_lengths(o) == std::vector<std::int64_t>{200, 400, 512});
  o.bucket_granularity = 0;
  CHECK(bucket_lengths(o) == std::vector<std::int64_t>{512});
  CHECK(bucket_length(o, 3) == 512);
  o.bucket_boundaries = {100, 300, 1000};
  CHECK(bucket_lengths(o) == std::vector<std::int64_t>{100, 300, 512});
  CHECK(bucket_length(o, 101) == 300);
  CHECK(bucket_length(o, 301) == 512);
  CHECK_THROWS_AS(bucket_length(o, 513), Error);
}

TEST_CASE("token budget rows per length and the possible shapes", "[data]") {
  SamplerOptions o = opts(512, 128, 4);
  CHECK(possible_shapes(o) == std::vector<Shape>{{4, 128}, {4, 256}, {4, 384}, {4, 512}});
  o.max_tokens_per_batch = 1000;
  CHECK(rows_for_length(o, 128) == 7);
  CHECK(rows_for_length(o, 384) == 2);
  CHECK(rows_for_length(o, 512) == 1);
  CHECK(possible_shapes(o) == std::vector<Shape>{{7, 128}, {3, 256}, {2, 384}, {1, 512}});
  o.padding_free = true;  // packed rows are training_seq_len long: 1000 / 512 = 1 row
  CHECK(possible_shapes(o) == std::vector<Shape>{{1, 128}, {1, 256}, {1, 384}, {1, 512}});
  // A budget below training_seq_len is refused by the option table, before any planning.
  eagle::config::Options options;
  options.training_seq_len = 512;
  options.max_tokens_per_batch = 500;
  try {
    eagle::config::validate(options, eagle::config::Command::train);
    FAIL("a budget below training_seq_len was accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("--max_tokens_per_batch") && Catch::Contains("500"));
  }
}

TEST_CASE("first-fit-decreasing packs exactly", "[data]") {
  std::vector<std::int64_t> lengths{5, 3, 7, 2, 4, 6, 1};
  // Longest first: 7 -> row 0, 6 -> row 1, 5 -> row 2, 4 -> row 1, 3 -> row 0, 2 -> row 2, 1 -> row 2.
  CHECK(pack_first_fit_decreasing({0, 1, 2, 3, 4, 5, 6}, lengths, 10) == Rows{{2, 1}, {5, 4}, {0, 3, 6}});
  CHECK(pack_first_fit_decreasing({0, 1, 2, 3, 4, 5, 6}, lengths, 7) == Rows{{2}, {5, 6}, {0, 3}, {4, 1}});
  std::vector<std::int64_t> same{3, 3, 3};
  CHECK(pack_first_fit_decreasing({2, 0, 1}, same, 6) == Rows{{2, 0}, {1}});
  CHECK_THROWS_AS(pack_first_fit_decreasing({0}, lengths, 4), Error);
}

TEST_CASE("grouped padded batches are exact", "[data]") {
  //                              0    1   2    3   4    5    6   7
  std::vector<std::int64_t> lengths{10, 200, 30, 130, 60, 250, 100, 20};
  SamplerOptions o = opts(256, 64, 2);
  // One window: sorted longest first and cut two by two; each padded to its bucket.
  std::vector<BatchPlan> want{{2, 256, {{5}, {1}}}, {2, 192, {{3}, {6}}}, {2, 64, {{4}, {2}}}, {2, 64, {{7}, {0}}}};
  EpochPlan plan = plan_epoch(lengths, o, 0);
  CHECK(sorted_rank0(plan) == sorted(want));
  CHECK(plan[0][0] == want[0]);  // the largest batch comes first
  CHECK(plan[0][0].real_tokens(lengths) == 450);
  // Baseline: granularity 0 pads every batch to training_seq_len.
  o.bucket_granularity = 0;
  for (auto& w : want) w.length = 256;
  CHECK(sorted_rank0(plan_epoch(lengths, o, 0)) == sorted(want));
}

TEST_CASE("token-budget batches are exact and within budget", "[data]") {
  std::vector<std::int64_t> lengths{10, 200, 30, 130, 60, 250, 100, 20};
  SamplerOptions o = opts(256, 64, 2);
  o.max_tokens_per_batch = 512;
  // 250 -> bucket 256: 2 rows; 130 -> 192: 2 rows; 60 -> 64: 8 rows, four of them padding.
  std::vector<BatchPlan> want{
      {2, 256, {{5}, {1}}}, {2, 192, {{3}, {6}}}, {8, 64, {{4}, {2}, {7}, {0}, {}, {}, {}, {}}}};
  EpochPlan plan = plan_epoch(lengths, o, 0);
  CHECK(sorted_rank0(plan) == sorted(want));
  CHECK(plan[0][0] == want[0]);  // 512 computed tokens like the 8x64 batch, but longer rows
  for (const auto& step : plan) CHECK(step[0].computed_tokens() <= 512);
}

TEST_CASE("padding-free batches are exact", "[data]") {
  std::vector<std::int64_t> lengths{5, 3, 7, 2, 4, 6, 1};
  SamplerOptions o = opts(10, 0, 1);
  o.padding_free = true;
  std::vector<BatchPlan> want{{1, 10, {{5, 4}}, true}, {1, 10, {{2, 1}}, true}, {1, 10, {{0, 3, 6}}, true}};
  CHECK(sorted_rank0(plan_epoch(lengths, o, 0)) == sorted(want));
  // With buckets, the row holding 8 tokens is padded to 8 only.
  o.bucket_granularity = 2;
  want[2].length = 8;
  CHECK(sorted_rank0(plan_epoch(lengths, o, 0)) == sorted(want));
  // Two rows a batch: the two fullest rows together, the 8-token row with an empty row.
  o.rows = 2;
  std::vector<BatchPlan> two{{2, 10, {{2, 1}, {5, 4}}, true}, {2, 8, {{0, 3, 6}, {}}, true}};
  CHECK(sorted_rank0(plan_epoch(lengths, o, 0)) == sorted(two));
}

TEST_CASE("make_batch fills ids, masks, positions and document ids exactly", "[data]") {
  Dataset ds = Dataset::from_samples({{{11, 12, 13}, {0, 1, 1}}, {{21, 22}, {1, 1}}, {{31, 32, 33, 34}, {0, 0, 1, 1}}});
  Batch b = make_batch(ds, BatchPlan{2, 4, {{0}, {1}}});
  CHECK(b.rows == 2);
  CHECK(b.length == 4);
  CHECK(b.input_ids == std::vector<std::int32_t>{11, 12, 13, 0, 21, 22, 0, 0});
  CHECK(b.loss_mask == std::vector<std::uint8_t>{0, 1, 1, 0, 1, 1, 0, 0});
  CHECK(b.position_ids == std::vector<std::int32_t>{0, 1, 2, 0, 0, 1, 0, 0});
  CHECK(b.document_ids == std::vector<std::int32_t>{0, 0, 0, -1, 0, 0, -1, -1});
  CHECK(b.sample_indices == std::vector<std::int64_t>{0, 1});
  CHECK(b.real_tokens == 5);

  Batch p = make_batch(ds, BatchPlan{3, 8, {{2, 0}, {1}, {}}});
  CHECK(p.input_ids ==
        std::vector<std::int32_t>{31, 32, 33, 34, 11, 12, 13, 0, 21, 22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK(p.loss_mask ==
        std::vector<std::uint8_t>{0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK(p.position_ids ==
        std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK(p.document_ids == std::vector<std::int32_t>{0,  0,  0,  0,  1,  1,  1,  -1, 0,  0,  -1, -1,
                                                    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1});
  CHECK(p.sample_indices == std::vector<std::int64_t>{2, 0, 1});
  CHECK(p.real_tokens == 9);
  CHECK(p.computed_tokens() == 24);
  CHECK_FALSE(p.packed);  // the plan was not made padding-free
  CHECK(p.max_segments_per_row() == 3);  // row 0: two samples and padding
  CHECK(b.max_segments_per_row() == 2);

  CHECK_THROWS_AS(make_batch(ds, BatchPlan{1, 4, {{2, 0}}}), Error);  // 7 tokens in a row of 4
  CHECK_THROWS_AS(make_batch(ds, BatchPlan{1, 4, {{3}}}), Error);     // no sample 3
  CHECK_THROWS_AS(make_batch(ds, BatchPlan{2, 4, {{0}}}), Error);     // one row listed of two
}

TEST_CASE("packed rows never cross a document boundary", "[data]") {
  // Token values encode (sample, position), so every token can be traced back.
  std::vector<std::int64_t> lengths = random_lengths(300, 256, 11);
  std::vector<Sample> samples;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    Sample s;
    for (std::int64_t p = 0; p < lengths[i]; ++p) {
      s.input_ids.push_back(static_cast<TokenId>(i * 1000 + p + 1));
      s.loss_mask.push_back(static_cast<std::uint8_t>((i + p) % 2));
    }
    samples.push_back(s);
  }
  Dataset ds = Dataset::from_samples(samples);
  SamplerOptions o = opts(256, 32, 2);
  o.padding_free = true;
  o.window_batches = 8;
  std::size_t seen = 0;
  const std::int64_t bound = max_segments_per_row(lengths, 256);
  for (const auto& step : plan_epoch(lengths, o, 3)) {
    Batch b = make_batch(ds, step[0]);
    CHECK(b.packed);
    CHECK(b.max_segments_per_row() <= bound);  // the static size of the attention offsets holds
    std::size_t next_sample = 0;
    for (std::int64_t r = 0; r < b.rows; ++r) {
      std::int32_t doc = -1;
      for (std::int64_t t = 0; t < b.length; ++t) {
        auto k = static_cast<std::size_t>(b.at(r, t));
        if (b.document_ids[k] < 0) {  // padding only after the documents, and nothing in it
          CHECK(b.input_ids[k] == 0);
          CHECK(b.loss_mask[k] == 0);
          doc = 1 << 30;
          continue;
        }
        REQUIRE(doc != (1 << 30));
        if (b.document_ids[k] != doc) {  // a new document starts at position 0, numbered doc + 1
          CHECK(b.document_ids[k] == doc + 1);
          CHECK(b.position_ids[k] == 0);
          doc = b.document_ids[k];
          ++next_sample;
        }
        auto s = static_cast<std::size_t>(b.sample_indices[next_sample - 1]);
        CHECK(b.input_ids[k] == static_cast<std::int32_t>(s * 1000 + b.position_ids[k] + 1));
        CHECK(b.loss_mask[k] == (s + b.position_ids[k]) % 2);
        // The whole document sits in this row: its last token is at t - pos + len - 1 < length.
        CHECK(t - b.position_ids[k] + lengths[s] <= b.length);
      }
    }
    CHECK(next_sample == b.sample_indices.size());
    seen += b.sample_indices.size();
  }
  CHECK(seen == lengths.size());
}

TEST_CASE("the bound on runs per packed row: the shortest samples that fit, plus padding", "[data]") {
  CHECK(max_segments_per_row({5, 3, 7, 2, 4, 6, 1}, 10) == 5);  // 1 + 2 + 3 + 4 = 10, then padding
  CHECK(max_segments_per_row({5, 3, 7, 2, 4, 6, 1}, 9) == 4);   // 1 + 2 + 3
  CHECK(max_segments_per_row({10}, 10) == 2);
  // Planned packed batches: every batch of several epochs stays within it, and the epoch's shape
  // counts add up to its batches.
  std::vector<std::int64_t> lengths = random_lengths(400, 128, 9);
  SamplerOptions o = opts(128, 32, 3);
  o.padding_free = true;
  const auto bound = max_segments_per_row(lengths, 128);
  Sampler sampler(lengths, o);
  for (std::int64_t e = 0; e < 3; ++e) {
    std::int64_t counted = 0;
    for (const auto& [shape, n] : sampler.shape_counts(e)) counted += n;
    CHECK(counted == sampler.batches_in_epoch(e));
    for (const auto& step : plan_epoch(lengths, o, e)) {
      CHECK(step[0].packed);
      for (const auto& row : step[0].row_samples) CHECK(static_cast<std::int64_t>(row.size()) + 1 <= bound);
    }
  }
}

TEST_CASE("every mode covers the epoch with known shapes", "[data]") {
  std::vector<std::int64_t> lengths = random_lengths(500, 512, 3);
  for (SamplerOptions o : all_modes())
    for (std::int64_t ranks : {1, 3}) {
      o.num_ranks = ranks;
      INFO("grouped " << o.group_by_length << " packed " << o.padding_free << " budget " << o.max_tokens_per_batch
                      << " ranks " << ranks);
      check_epoch(plan_epoch(lengths, o, 0), lengths, o);
      check_epoch(plan_epoch(lengths, o, 1), lengths, o);
    }
}

TEST_CASE("plans are deterministic for a seed and differ across seeds and epochs", "[data]") {
  std::vector<std::int64_t> lengths = random_lengths(400, 512, 5);
  for (const SamplerOptions& o : all_modes()) {
    EpochPlan a = plan_epoch(lengths, o, 2);
    CHECK(a == plan_epoch(lengths, o, 2));
    CHECK(a != plan_epoch(lengths, o, 3));
    SamplerOptions other = o;
    other.seed = o.seed + 1;
    CHECK(a != plan_epoch(lengths, other, 2));
  }
}

TEST_CASE("ranks share each global batch balanced by tokens, with equal batch counts", "[data]") {
  std::vector<std::int64_t> lengths = random_lengths(1001, 512, 9);
  for (SamplerOptions o : all_modes()) {
    o.num_ranks = 4;
    EpochPlan plan = plan_epoch(lengths, o, 0);
    check_epoch(plan, lengths, o);
    std::int64_t max_len = *std::max_element(lengths.begin(), lengths.end());
    for (std::size_t step = 0; step + 1 < plan.size(); ++step) {  // the last step may be short
      std::int64_t lo = 1 << 30, hi = 0;
      for (const BatchPlan& p : plan[step]) {
        lo = std::min(lo, p.real_tokens(lengths));
        hi = std::max(hi, p.real_tokens(lengths));
      }
      // Longest row first to the lightest rank: the spread is at most one row's tokens.
      CHECK(hi - lo <= (o.padding_free ? o.training_seq_len : max_len));
    }
    // Each rank's own sampler yields as many batches, and together they are the epoch.
    std::multiset<std::int64_t> all;
    for (std::int64_t r = 0; r < o.num_ranks; ++r) {
      SamplerOptions ro = o;
      ro.rank = r;
      Sampler s(lengths, ro);
      CHECK(s.batches_in_epoch(0) == static_cast<std::int64_t>(plan.size()));
      for (std::size_t i = 0; i < plan.size(); ++i) {
        BatchPlan p = s.next();
        CHECK(p == plan[i][static_cast<std::size_t>(r)]);
        for (const auto& row : p.row_samples) all.insert(row.begin(), row.end());
      }
      CHECK(s.epoch() == 0);
    }
    CHECK(all.size() == lengths.size());
    CHECK(std::set<std::int64_t>(all.begin(), all.end()).size() == lengths.size());
  }
}

TEST_CASE("a restored sampler yields exactly the batches of the uninterrupted run", "[data]") {
  std::vector<std::int64_t> lengths = random_lengths(120, 512, 13);
  for (SamplerOptions o : all_modes()) {
    o.num_ranks = 2;
    o.rank = 1;
    Sampler straight(lengths, o);
    const std::int64_t n = 3 * straight.batches_in_epoch(0) + 3;  // crosses epoch boundaries
    std::vector<BatchPlan> want;
    for (std::int64_t i = 0; i < n; ++i) want.push_back(straight.next());

    Sampler first(lengths, o);
    std::vector<BatchPlan> got;
    for (std::int64_t i = 0; i < n / 2; ++i) got.push_back(first.next());
    std::string saved = first.state().dump();
    Sampler second(lengths, o);
    second.restore(nlohmann::json::parse(saved));
    CHECK(second.epoch() == first.epoch());
    CHECK(second.position() == first.position());
    for (std::int64_t i = n / 2; i < n; ++i) got.push_back(second.next());
    CHECK(got == want);
  }
}

TEST_CASE("restoring a state of another run names the field that differs", "[data]") {
  std::vector<std::int64_t> lengths{5, 9, 3, 7};
  SamplerOptions o = opts(16, 4, 2);
  Sampler a(lengths, o);
  a.next();
  nlohmann::json st = a.state();
  CHECK(st["epoch"] == 0);
  CHECK(st["batch"] == 1);
  auto error_place = [&](const std::vector<std::int64_t>& l, SamplerOptions so, const nlohmann::json& s) {
    try {
      Sampler(l, so).restore(s);
    } catch (const Error& e) {
      return e.place();
    }
    return std::string("<no error>");
  };
  SamplerOptions seeded = o;
  seeded.seed = 8;
  CHECK(error_place(lengths, seeded, st) == "sampler state: identity.seed");
  CHECK(error_place({5, 9, 3, 8}, o, st) == "sampler state: identity.lengths_fnv1a");
  SamplerOptions packed = o;
  packed.padding_free = true;
  CHECK(error_place(lengths, packed, st) == "sampler state: identity.padding_free");
  nlohmann::json far = st;
  far["batch"] = 99;
  CHECK(error_place(lengths, o, far) == "sampler state: batch");
  CHECK(error_place(lengths, o, nlohmann::json::object()) == "sampler state: format");
  auto typed = [&](const char* k, nlohmann::json v) { auto s = st; s[k] = v; return error_place(lengths, o, s); };
  CHECK((typed("format", 5) == "sampler state: format" && typed("version", "1") == "sampler state: version"));
  CHECK(error_place(lengths, o, st) == "<no error>");
}

TEST_CASE("lengths outside 1..training_seq_len are refused with the sample named", "[data]") {
  SamplerOptions o = opts(16, 4, 2);
  try {
    plan_epoch({3, 17}, o, 0);
    FAIL("an overlong sample was planned");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    CHECK(e.place() == "sample 1");
    CHECK(e.found() == "17");
  }
  CHECK_THROWS_AS(Sampler({}, o), Error);
}

TEST_CASE("plan_sorted: one pass longest first, each length's last batch filled with empty rows", "[data]") {
  // Samples 2..7 of these lengths (0, 1 and 8 are outside the range); buckets of 16 tokens, 2 rows.
  const std::vector<std::int64_t> lengths{40, 40, 10, 30, 12, 30, 16, 5, 64};
  const auto plans = plan_sorted(lengths, 2, 6, opts(64, 16, 2));
  // Longest first, ties in index order: 3 (30), 5 (30), 6 (16), 4 (12), 2 (10), 7 (5).
  const std::vector<BatchPlan> expected{{2, 32, {{3}, {5}}}, {2, 16, {{6}, {4}}}, {2, 16, {{2}, {7}}}};
  CHECK(plans == expected);
  // A length with one sample left over: its batch keeps its rows, the last one empty.
  const auto odd = plan_sorted(lengths, 2, 5, opts(64, 16, 2));
  REQUIRE(odd.size() == 3);
  CHECK(odd.back() == BatchPlan{2, 16, {{2}, {}}});
  // A token budget gives shorter buckets more rows (rows_for_length).
  auto budget = opts(64, 16, 2);
  budget.max_tokens_per_batch = 64;
  const auto by_budget = plan_sorted(lengths, 2, 6, budget);
  REQUIRE(by_budget.size() == 2);
  CHECK(by_budget[0] == BatchPlan{2, 32, {{3}, {5}}});
  CHECK(by_budget[1] == BatchPlan{4, 16, {{6}, {4}, {2}, {7}}});
  CHECK(plan_sorted(lengths, 0, 0, opts(64, 16, 2)).empty());
}
