// The sampler over epoch plans, its JSON state for exact resume, and plan -> Batch.
#include "eagle/data/sampler.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <set>

#include "eagle/config/options.h"
#include "eagle/util/error.h"
#include "eagle/util/hash.h"
#include "eagle/util/log.h"

namespace eagle::data {
namespace {

using json = nlohmann::json;

constexpr const char* kStateFormat = "eagle-train sampler";
constexpr int kStateVersion = 1;

// The fields a restored run must share with the saved one for the batches to be the same.
json identity(const SamplerOptions& o, std::size_t num_samples, std::uint64_t fingerprint) {
  return json{{"seed", o.seed},
              {"num_samples", num_samples},
              {"lengths_fnv1a", fmt::format("{:016x}", fingerprint)},
              {"num_ranks", o.num_ranks},
              {"training_seq_len", o.training_seq_len},
              {"bucket_granularity", o.bucket_granularity},
              {"bucket_boundaries", o.bucket_boundaries},
              {"group_by_length", o.group_by_length},
              {"padding_free", o.padding_free},
              {"max_tokens_per_batch", o.max_tokens_per_batch},
              {"per_device_train_batch_size", o.rows},
              {"window_batches", o.window_batches}};
}

Error state_error(const std::string& what, const std::string& key) {
  return Error(ErrorKind::input, what).place("sampler state: " + key);
}

}  // namespace

std::uint64_t lengths_fingerprint(const std::vector<std::int64_t>& lengths) {
  std::uint64_t h = util::kFnv1aOffset;
  for (std::int64_t v : lengths) h = util::fnv1a_u64(static_cast<std::uint64_t>(v), h);
  return h;
}

Sampler::Sampler(std::vector<std::int64_t> lengths, SamplerOptions options)
    : lengths_(std::move(lengths)), options_(std::move(options)) {
  options_.validate();
  EAGLE_CHECK(!lengths_.empty(), Error(ErrorKind::input, "the dataset has no samples to batch")
                                     .hint("check data_path and the dropped/skipped counts in the data log"));
  fingerprint_ = lengths_fingerprint(lengths_);
}

const std::vector<BatchPlan>& Sampler::plans_of(std::int64_t e) {
  if (cached_epoch_ != e) {
    EpochPlan all = plan_epoch(lengths_, options_, e);
    cached_.clear();
    cached_.reserve(all.size());
    for (auto& step : all) cached_.push_back(std::move(step[static_cast<std::size_t>(options_.rank)]));
    cached_epoch_ = e;
    std::int64_t real = 0, computed = 0;
    std::set<Shape> used;
    for (const BatchPlan& p : cached_) {
      real += p.real_tokens(lengths_);
      computed += p.computed_tokens();
      used.insert(Shape{p.rows, p.length});
    }
    log::info("data", "epoch {}: {} batches on rank {}, {} ({} real of {} computed tokens), {} of {} shapes", e,
              cached_.size(), options_.rank,
              fmt::format("{} {:.3f}", options_.padding_free ? "fill ratio" : "padding efficiency",
                          computed ? static_cast<double>(real) / static_cast<double>(computed) : 0.0),
              real, computed, used.size(), possible_shapes(options_).size());
  }
  return cached_;
}

BatchPlan Sampler::next() {
  if (index_ >= static_cast<std::int64_t>(plans_of(epoch_).size())) {
    ++epoch_;
    index_ = 0;
  }
  return plans_of(epoch_)[static_cast<std::size_t>(index_++)];
}

std::int64_t Sampler::batches_in_epoch(std::int64_t e) { return static_cast<std::int64_t>(plans_of(e).size()); }

std::map<Shape, std::int64_t> Sampler::shape_counts(std::int64_t e) {
  std::map<Shape, std::int64_t> counts;
  for (const BatchPlan& p : plans_of(e)) ++counts[Shape{p.rows, p.length}];
  return counts;
}

json Sampler::state() const {
  json s{{"format", kStateFormat}, {"version", kStateVersion}, {"epoch", epoch_}, {"batch", index_}};
  s["identity"] = identity(options_, lengths_.size(), fingerprint_);
  return s;
}

void Sampler::restore(const json& s) {
  // Compared as JSON values: a field of another type is refused, never a type_error (exit 1).
  EAGLE_CHECK(s.is_object() && s.contains("format") && s["format"] == kStateFormat,
              state_error("not a sampler state", "format")
                  .expected(kStateFormat)
                  .found(!s.is_object()         ? s.type_name()
                         : s.contains("format") ? s["format"].dump()
                                                : "<missing>"));
  EAGLE_CHECK(s.contains("version") && s["version"] == kStateVersion,
              state_error("unsupported sampler state version", "version")
                  .expected(std::to_string(kStateVersion))
                  .found(s.contains("version") ? s["version"].dump() : "<missing>"));
  const json want = identity(options_, lengths_.size(), fingerprint_);
  const json& saved = s.contains("identity") ? s["identity"] : json::object();
  for (const auto& [key, value] : want.items()) {
    const std::string found = saved.contains(key) ? saved[key].dump() : "<missing>";
    EAGLE_CHECK(saved.contains(key) && saved[key] == value,
                state_error("the saved data order does not match this run", "identity." + key)
                    .expected(value.dump() + " (this run)")
                    .found(found + " (saved)")
                    .hint("resume with the same data, seed, batching options and number of ranks, or start a "
                          "fresh run"));
  }
  for (const char* key : {"epoch", "batch"})
    EAGLE_CHECK(s.contains(key) && s[key].is_number_integer() && s[key].get<std::int64_t>() >= 0,
                state_error("bad sampler position", key)
                    .expected("an integer >= 0")
                    .found(s.contains(key) ? s[key].dump() : "<missing>"));
  std::int64_t e = s["epoch"].get<std::int64_t>(), b = s["batch"].get<std::int64_t>();
  EAGLE_CHECK(b <= batches_in_epoch(e),
              state_error("bad sampler position", "batch")
                  .expected(fmt::format("<= {} (batches in epoch {})", batches_in_epoch(e), e))
                  .found(std::to_string(b)));
  epoch_ = e;
  index_ = b;
}

Batch make_batch(const Dataset& dataset, const BatchPlan& plan) {
  auto mismatch = [&](const std::string& place, const std::string& expected, const std::string& found) {
    return Error(ErrorKind::input, "a batch plan does not fit the dataset")
        .file(dataset.source())
        .place(place)
        .expected(expected)
        .found(found)
        .hint("the dataset changed since the batches were planned; plan again from its lengths");
  };
  EAGLE_CHECK(plan.rows >= 1 && plan.length >= 1 && static_cast<std::int64_t>(plan.row_samples.size()) == plan.rows,
              mismatch("plan", fmt::format("{} rows of length >= 1", plan.rows),
                       fmt::format("{} rows of length {}", plan.row_samples.size(), plan.length)));
  Batch b;
  b.rows = plan.rows;
  b.length = plan.length;
  b.packed = plan.packed;
  const auto n = static_cast<std::size_t>(plan.rows * plan.length);
  b.input_ids.assign(n, 0);
  b.loss_mask.assign(n, 0);
  b.position_ids.assign(n, 0);
  b.document_ids.assign(n, -1);
  for (std::int64_t r = 0; r < plan.rows; ++r) {
    std::int64_t pos = 0;
    const auto& row = plan.row_samples[static_cast<std::size_t>(r)];
    for (std::size_t d = 0; d < row.size(); ++d) {
      const std::int64_t s = row[d];
      EAGLE_CHECK(s >= 0 && static_cast<std::size_t>(s) < dataset.size(),
                  mismatch(fmt::format("row {}", r), fmt::format("sample indices below {}", dataset.size()),
                           std::to_string(s)));
      const std::int64_t len = dataset.length(static_cast<std::size_t>(s));
      EAGLE_CHECK(pos + len <= plan.length,
                  mismatch(fmt::format("row {}, sample {}", r, s), fmt::format("row tokens <= {}", plan.length),
                           std::to_string(pos + len)));
      const std::size_t at = static_cast<std::size_t>(b.at(r, pos));
      dataset.copy_sample(static_cast<std::size_t>(s), &b.input_ids[at], &b.loss_mask[at], len);
      for (std::int64_t p = 0; p < len; ++p) {
        b.position_ids[at + p] = static_cast<std::int32_t>(p);
        b.document_ids[at + p] = static_cast<std::int32_t>(d);
      }
      pos += len;
      b.real_tokens += len;
      b.sample_indices.push_back(s);
    }
  }
  return b;
}

std::int64_t Batch::max_segments_per_row() const {
  std::int64_t most = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t runs = 0;
    for (std::int64_t p = 0; p < length; ++p)
      runs += p == 0 ||
              document_ids[static_cast<std::size_t>(at(r, p))] != document_ids[static_cast<std::size_t>(at(r, p - 1))];
    most = std::max(most, runs);
  }
  return most;
}

std::int64_t planned_steps(const config::Options& o, Sampler& sampler) {
  if (o.max_steps > 0) return o.max_steps;
  double batches = 0;
  const auto whole = static_cast<std::int64_t>(o.num_train_epochs);
  for (std::int64_t e = 0; e < whole; ++e) batches += static_cast<double>(sampler.batches_in_epoch(e));
  batches += (o.num_train_epochs - static_cast<double>(whole)) * static_cast<double>(sampler.batches_in_epoch(whole));
  auto steps = static_cast<std::int64_t>(batches / static_cast<double>(o.gradient_accumulation_steps));
  EAGLE_CHECK(steps > 0, Error(ErrorKind::usage, "the run would take no optimizer step")
                             .found(fmt::format("{} batches per epoch, num_train_epochs {}",
                                                sampler.batches_in_epoch(0), o.num_train_epochs))
                             .hint("raise num_train_epochs or set max_steps"));
  return steps;
}

}  // namespace eagle::data
