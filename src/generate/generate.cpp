// Batched regeneration of training replies (see generate.h).
#include "eagle/generate/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "eagle/device/cuda_graph_cache.h"
#include "eagle/device/memory.h"
#include "eagle/model/sampling.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "eagle/util/progress.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace eagle::generate {

GenerateSettings GenerateSettings::from(const config::Options& o, const std::vector<std::int64_t>& end_ids) {
  GenerateSettings s;
  s.batch_size = o.generate_batch_size;
  s.limits.max_new_tokens = o.max_new_tokens;
  s.limits.context = o.training_seq_len;
  s.limits.overlong = o.overlong_policy;
  for (auto id : end_ids) s.limits.end_ids.push_back(static_cast<data::TokenId>(id));
  s.temperature = o.temperature;
  s.top_p = o.top_p;
  s.seed = static_cast<std::uint64_t>(o.seed);
  s.max_cuda_graphs = o.max_cuda_graphs;
  return s;
}

namespace {

at::Generator make_generator(torch::Device device, std::uint64_t seed) {
#ifdef EAGLE_WITH_CUDA
  if (device.is_cuda()) {
    auto g = at::cuda::detail::createCUDAGenerator(device.has_index() ? device.index() : 0);
    g.set_current_seed(seed);
    return g;
  }
#endif
  return at::detail::createCPUGenerator(seed);
}

}  // namespace

TokenChooser::TokenChooser(torch::Device device, double temperature, double top_p, std::uint64_t seed)
    : temperature_(temperature), top_p_(top_p), generator_(make_generator(device, seed)) {}

torch::Tensor TokenChooser::choose(const torch::Tensor& logits) {
  if (temperature_ <= 0) return logits.argmax(-1);
  auto probs = model::top_p_filter(torch::softmax(logits / temperature_, -1), top_p_);
  // Exponential race: argmax p_i / E_i with E_i ~ Exp(1) picks token i with probability p_i / sum p.
  auto race = torch::empty_like(probs).exponential_(1.0, generator_);
  return (probs / race).argmax(-1);
}

namespace {

constexpr std::int64_t kPrefillTokens = 4096;  // padded tokens per prefill forward (more when one prompt needs it)
using device::kGraphColumns;  // graphed decode steps read a multiple of this many columns
constexpr std::int64_t kRefillFraction = 8;    // free rows are refilled once batch_size / 8 of them are free

// The KV cache of batch_size rows of context + 1 columns and the rows' logits, against the memory
// the device has left, before any of it is allocated: generate_batch_size 4096 at training_seq_len
// 1048576 asked for terabytes and ended in bad_alloc. Unknown memory (no /proc/meminfo): not checked.
void check_cache_fits(const target::TargetModel& target, const GenerateSettings& s) {
  const auto& c = target.config();
  const double columns = static_cast<double>(s.limits.context + 1), rows = static_cast<double>(s.batch_size);
  const double cache = 2.0 * static_cast<double>(c.num_hidden_layers * c.num_key_value_heads * c.head_dim) * rows *
                       columns * static_cast<double>(c10::elementSize(target.dtype()));
  const double bytes = cache + rows * static_cast<double>(c.vocab_size) * 4.0;
  const auto available = device::available_memory(target.device());
  if (!available || bytes <= static_cast<double>(available->bytes)) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  throw Error(ErrorKind::usage, "generate's KV cache does not fit in the memory available")
      .place("generate_batch_size, training_seq_len")
      .expected(fmt::format("at most {:.2f} GiB ({} on {})", static_cast<double>(available->bytes) / kGiB,
                            available->source, target.device().str()))
      .found(fmt::format("{:.2f} GiB: {} rows of {} tokens, {} layers of {} key/value heads x {}", bytes / kGiB,
                         s.batch_size, s.limits.context + 1, c.num_hidden_layers, c.num_key_value_heads, c.head_dim))
      .hint("lower --generate_batch_size or --training_seq_len");
}

class Generator {
 public:
  Generator(const target::TargetModel& target, const data::Dataset& dataset, std::size_t first,
            const GenerateSettings& s)
      : target_(target),
        dataset_(dataset),
        s_(s),
        first_(first),
        next_(first),
        next_emit_(first),
        spare_(s.limits.context),
        slots_(static_cast<std::size_t>(s.batch_size)),
        chooser_(target.device(), s.temperature, s.top_p, s.seed ^ (0x9E3779B97F4A7C15ull * first)) {
    const auto device = target.device();
    // Real tokens use columns [0, context); the last column takes the writes of padding and idle rows.
    check_cache_fits(target, s);
    cache_ = target.new_cache(s.batch_size, s.limits.context + 1);
    if (const auto graphs = target.graphed_steps(s.max_cuda_graphs, target::TargetModel::Step::decoding); graphs > 0) {
      // Every reply passes the shorter key lengths first: they get the graphs when there are too few.
      graphs_.emplace(device, graphs, device::length_ladder(s.batch_size, s.limits.context + 1, kGraphColumns),
                      "generate");
    }
    const auto iopts = torch::TensorOptions().dtype(torch::kInt64).device(device);
    ids_ = torch::zeros({s.batch_size, 1}, iopts);
    columns_ = torch::full({s.batch_size, 1}, spare_, iopts);
    last_ = torch::zeros({s.batch_size}, iopts);
    logits_ = torch::zeros({s.batch_size, target.config().vocab_size}, iopts.dtype(torch::kFloat32));
  }

  GenerateResult run(const EmitFn& emit, const std::function<bool()>& stop_requested) {
    const auto start = std::chrono::steady_clock::now();
    util::ProgressDisplay display("generate");
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    while (true) {
      fill_free_rows();
      emit_finished(emit);
      if (std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s.has_value(); })) break;
      if (stop_requested && stop_requested()) {
        result_.interrupted = true;
        break;
      }
      prefill();
      decode();
      show(display, elapsed(), false);
    }
    emit_finished(emit);
    result_.seconds = elapsed();
    show(display, result_.seconds, true);
    result_.graphed_shapes = graphs_ ? graphs_->captured_count() : 0;
    log::debug("generate", "{} decode steps ({} row-steps), {} prefill forwards ({} tokens, {} with padding)",
               decode_steps_, decode_rows_, prefills_, prefill_tokens_, prefill_padded_);
    return result_;
  }

 private:
  data::Regeneration& job(std::size_t row) { return jobs_.at(*slots_[row]); }

  // Each free row takes the next sample that needs the target; samples copied or dropped at once
  // only wait for their turn to be emitted.
  void fill_free_rows() {
    // Free rows wait until an eighth of them is free (or none is busy), so that new prompts are
    // prefilled several at a time: a prefill forward of one prompt costs about as much as a decode
    // step of every row.
    const auto free = std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return !s; });
    const auto busy = static_cast<std::int64_t>(slots_.size()) - free;
    if (busy > 0 && free < std::max<std::int64_t>(1, s_.batch_size / kRefillFraction)) return;
    for (auto& slot : slots_) {
      while (!slot && next_ < dataset_.size()) {
        const auto index = next_++;
        auto& r = jobs_.emplace(index, data::Regeneration(dataset_.sample(index), s_.limits)).first->second;
        if (!r.finished()) slot = index;
      }
    }
  }

  void emit_finished(const EmitFn& emit) {
    while (!jobs_.empty() && jobs_.begin()->first == next_emit_ && jobs_.begin()->second.finished()) {
      emit(next_emit_, jobs_.begin()->second);
      jobs_.erase(jobs_.begin());
      ++next_emit_;
      ++result_.samples;
    }
  }

  // The target's choices for `rows` (one per row, after its pending tokens).
  void accept(const std::vector<std::size_t>& rows, const torch::Tensor& logits) {
    const auto tokens = chooser_.choose(logits).cpu();
    const auto* t = tokens.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto& r = job(rows[i]);
      r.mark_fed();
      r.accept(static_cast<data::TokenId>(t[i]));
      ++result_.generated_tokens;
      if (r.finished()) slots_[rows[i]].reset();
    }
  }

  // One forward over `rows`, each extended by its pending tokens (right-padded to the longest).
  torch::Tensor forward(const std::vector<std::size_t>& rows) {
    const auto R = static_cast<std::int64_t>(rows.size());
    std::int64_t N = 0, key_len = 0;
    for (auto row : rows) {
      const auto& r = job(row);
      N = std::max<std::int64_t>(N, static_cast<std::int64_t>(r.pending().size()));
      key_len = std::max<std::int64_t>(key_len, r.cached() + static_cast<std::int64_t>(r.pending().size()));
    }
    std::vector<std::int64_t> ids(static_cast<std::size_t>(R * N), 0), columns(ids.size(), spare_), last(rows.size()),
        row_ids(rows.begin(), rows.end());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = job(rows[i]);
      const auto pending = r.pending();
      for (std::size_t k = 0; k < pending.size(); ++k) {
        ids[i * N + k] = pending[k];
        columns[i * N + k] = r.cached() + static_cast<std::int64_t>(k);
      }
      last[i] = static_cast<std::int64_t>(pending.size()) - 1;
    }
    return target_.forward_ragged(cache_, {on_device(ids, {R, N}), on_device(columns, {R, N}), on_device(row_ids, {R}),
                                           on_device(last, {R}), key_len});
  }

  // New prompts and next turns, grouped by length so that padding stays small.
  void prefill() {
    std::vector<std::size_t> rows;
    for (std::size_t b = 0; b < slots_.size(); ++b)
      if (slots_[b] && job(b).pending().size() > 1) rows.push_back(b);
    std::sort(rows.begin(), rows.end(),
              [&](auto a, auto b) { return job(a).pending().size() < job(b).pending().size(); });
    auto length = [&](std::size_t i) { return static_cast<std::int64_t>(job(rows[i]).pending().size()); };
    std::size_t begin = 0;
    while (begin < rows.size()) {
      // A group grows while it fits the token budget and padding stays under a quarter of it.
      std::size_t end = begin + 1;
      std::int64_t real = length(begin);
      while (end < rows.size()) {
        const auto padded = static_cast<std::int64_t>(end + 1 - begin) * length(end);
        if (padded > kPrefillTokens || 4 * (padded - real - length(end)) > padded) break;
        real += length(end++);
      }
      std::vector<std::size_t> group(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                                     rows.begin() + static_cast<std::ptrdiff_t>(end));
      ++prefills_;
      for (auto row : group) prefill_tokens_ += static_cast<std::int64_t>(job(row).pending().size());
      prefill_padded_ += static_cast<std::int64_t>(group.size() * job(group.back()).pending().size());
      accept(group, forward(group));
      begin = end;
    }
  }

  // One token for every row that has exactly one pending token (the last one chosen).
  void decode() {
    std::vector<std::size_t> rows;
    for (std::size_t b = 0; b < slots_.size(); ++b)
      if (slots_[b] && job(b).pending().size() == 1) rows.push_back(b);
    if (rows.empty()) return;
    // Every row at once reads the cache in place; the decoding rows alone need a gather of their
    // cache rows, which costs more than computing the idle rows unless most rows idle.
    const bool all_rows = graphs_ || 2 * rows.size() >= slots_.size();
    ++decode_steps_;
    decode_rows_ += all_rows ? s_.batch_size : static_cast<std::int64_t>(rows.size());
    accept(rows, all_rows ? decode_all_rows(rows) : forward(rows));
  }

  // The decode step of all rows from fixed storage; rows not decoding write to the spare column. On
  // GPU it has a fixed shape per kGraphColumns columns read and is replayed from a CUDA graph.
  torch::Tensor decode_all_rows(const std::vector<std::size_t>& rows) {
    const auto B = s_.batch_size;
    std::vector<std::int64_t> ids(slots_.size(), 0), columns(slots_.size(), spare_);
    std::int64_t key_len = 1;
    for (auto row : rows) {
      const auto& r = job(row);
      ids[row] = r.pending()[0];
      columns[row] = r.cached();
      key_len = std::max(key_len, r.cached() + 1);
    }
    ids_.copy_(torch::from_blob(ids.data(), {B, 1}, torch::kInt64));
    columns_.copy_(torch::from_blob(columns.data(), {B, 1}, torch::kInt64));
    if (graphs_) key_len = device::graph_key_len(key_len, spare_ + 1);
    auto step = [&] { logits_.copy_(target_.forward_ragged(cache_, {ids_, columns_, {}, last_, key_len})); };
    if (graphs_)
      graphs_->run({B, key_len}, step);
    else
      step();
    if (static_cast<std::int64_t>(rows.size()) == B) return logits_;
    std::vector<std::int64_t> index(rows.begin(), rows.end());
    return logits_.index_select(0, on_device(index, {static_cast<std::int64_t>(index.size())}));
  }

  torch::Tensor on_device(std::vector<std::int64_t>& v, torch::IntArrayRef sizes) const {
    return torch::from_blob(v.data(), sizes, torch::kInt64).to(target_.device());
  }

  void show(util::ProgressDisplay& display, double elapsed_s, bool final) {
    if (!display.due(elapsed_s, final)) return;
    const auto total = dataset_.size();
    const double rate = static_cast<double>(result_.generated_tokens) / std::max(elapsed_s, 1e-9);
    // The ETA counts the samples of this run (a resumed run starts at first_).
    const std::string eta = final ? ""
                                  : " | " + util::format_eta(static_cast<double>(result_.samples),
                                                             static_cast<double>(total - first_), elapsed_s);
    const std::string text = fmt::format("{}/{} samples | {} tokens, {:.0f} tokens/s | {} elapsed{}", next_emit_, total,
                                         result_.generated_tokens, rate, util::format_duration(elapsed_s), eta);
    const double frac = total > 0 ? static_cast<double>(next_emit_) / static_cast<double>(total) : 1.0;
    util::ProgressLine("generate").show(display, frac, text, elapsed_s, final);
  }

  const target::TargetModel& target_;
  const data::Dataset& dataset_;
  const GenerateSettings& s_;
  std::size_t first_, next_, next_emit_;            // first sample of this run, next to start, next to emit
  std::int64_t spare_;                              // the cache column of padding and idle rows
  std::vector<std::optional<std::size_t>> slots_;   // the sample of each cache row
  std::map<std::size_t, data::Regeneration> jobs_;  // started and not yet emitted, by sample index
  target::KvCache cache_;
  TokenChooser chooser_;
  std::optional<device::CudaGraphCache> graphs_;
  torch::Tensor ids_, columns_, last_, logits_;  // fixed storage of the all-rows decode step
  GenerateResult result_;
  std::int64_t decode_steps_ = 0, decode_rows_ = 0, prefills_ = 0, prefill_tokens_ = 0, prefill_padded_ = 0;
};

}  // namespace

GenerateResult generate(const target::TargetModel& target, const data::Dataset& dataset, std::size_t first,
                        const GenerateSettings& settings, const EmitFn& emit,
                        const std::function<bool()>& stop_requested) {
  torch::NoGradGuard no_grad;
  EAGLE_CHECK(settings.batch_size > 0 && settings.limits.context > 1 && settings.limits.max_new_tokens > 0,
              Error(ErrorKind::internal, "generate settings out of range"));
  Generator g(target, dataset, first, settings);
  return g.run(emit, stop_requested);
}

}  // namespace eagle::generate
