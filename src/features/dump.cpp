// dump-features (see dump.h): the folder's set-up or resumption, the size estimate, then
// the target's forward over each missing shard's samples, written shard by shard.
#include "eagle/features/dump.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dump_folder.h"
#include "eagle/config/option_table.h"
#include "eagle/data/binary_format.h"
#include "eagle/data/loader.h"
#include "eagle/data/plan.h"
#include "eagle/data/sampler.h"
#include "eagle/data/stats_file.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/device/runtime.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/features/inputs.h"
#include "eagle/features/store.h"
#include "eagle/features/target_identity.h"
#include "eagle/head/draft_spec.h"
#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/run/dir_lock.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"
#include "eagle/util/progress.h"

namespace eagle::features {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string canonical(const std::string& p) {
  if (p.empty()) return p;
  std::error_code ec;
  auto c = fs::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

// The options that decide what the folder holds: a resumed dump must be given the same ones
// (batching, device and threads only change how fast it goes).
json content_options(const config::Options& o, const std::vector<std::int64_t>& aux_ids) {
  json j{{"model_name_or_path", canonical(o.model_name_or_path)},
         {"data_path", canonical(o.data_path)},
         {"eval_data_path", canonical(o.eval_data_path)},
         {"training_seq_len", o.training_seq_len},
         {"overlong_policy", config::name_of(o.overlong_policy)},
         {"bad_sample_policy", config::name_of(o.bad_sample_policy)},
         {"validation_fraction", o.validation_fraction},
         {"seed", o.seed},
         {"target_dtype", config::name_of(o.target_dtype)},
         {"eagle_version", o.eagle_version},
         {"aux_hidden_state_layer_ids", aux_ids},
         {"features_dtype", config::name_of(o.features_dtype)},
         {"features_shard_mb", o.features_shard_mb}};
  // Only when set: the folders dumped before the flag existed hold the same options.
  if (o.features_pre_norm) j["features_pre_norm"] = true;
  return j;
}

void check_same_options(const FeatureManifest& m, const json& now, const fs::path& out) {
  std::vector<std::string> diff;
  for (const auto& [key, value] : now.items())
    if (!m.options.contains(key) || m.options[key] != value)
      diff.push_back(fmt::format("{}: folder {}, now {}", key, m.options.contains(key) ? m.options[key].dump() : "none",
                                 value.dump()));
  for (const auto& [key, value] : m.options.items())
    if (!now.contains(key)) diff.push_back(fmt::format("{}: folder {}, now none", key, value.dump()));
  if (diff.empty()) return;
  throw Error(ErrorKind::usage, fmt::format("the folder was dumped with other options ({} differ):\n  {}", diff.size(),
                                            fmt::join(diff, "\n  ")))
      .file((out / kFeaturesManifest).string())
      .hint("run with the folder's options (its manifest.json) to complete it, or choose another --output");
}

// The prepared dataset of the folder (train.bin, validation.bin, stats.json): what train reads.
void write_data(const fs::path& out, const TrainData& d, const config::Options& o) {
  json stats{{"format", "eagle-train dataset statistics"},
             {"version", data::kStatsFormatVersion},
             {"inputs", {o.data_path}},
             {"training_seq_len", o.training_seq_len}};
  auto write = [&](const data::Dataset& ds, const char* file, const char* split, const data::TokenStats& counts) {
    std::vector<std::size_t> all(ds.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    auto s = data::write_dataset_file((out / file).string(), ds, all, counts, o.training_seq_len);
    stats["splits"][split] = data::stats_to_json(s);
    stats["splits"][split]["file"] = file;
  };
  write(d.train, data::kTrainFile, "train", d.train.stats());
  if (d.heldout) write(*d.heldout, data::kValidationFile, "validation", data::TokenStats{});
  util::write_file_atomic(out / data::kStatsFile, stats.dump(1) + "\n");
}

// The target's ends (target/config.json and target/model.safetensors): what training from the
// folder needs of the target when no --model_name_or_path is given.
std::uint64_t write_ends(const fs::path& out, const config::Options& o, const target::TargetEnds& e) {
  fs::create_directories(out / kFeaturesTargetDir);
  fs::copy_file(fs::path(o.model_name_or_path) / "config.json", out / kFeaturesTargetDir / "config.json",
                fs::copy_options::overwrite_existing);
  std::map<std::string, torch::Tensor> t{{"model.embed_tokens.weight", e.embed}, {"model.norm.weight", e.final_norm}};
  if (!e.config.tie_word_embeddings) t.emplace("lm_head.weight", e.lm_head);
  const auto file = out / kFeaturesTargetDir / "model.safetensors";
  model::save_safetensors(file.string(), t);
  return fs::file_size(file);
}

void write_manifest(const fs::path& out, const FeatureManifest& m) {
  util::write_file_atomic(out / kFeaturesManifest, to_json(m).dump(1) + "\n");
}

// Fixed device buffers of one batch shape: the inputs and the outputs a captured graph writes.
struct ShapeBuffers {
  BatchTensors in;
  torch::Tensor aux, last, argmax;
};

// Every possible shape, the largest first: the dump plans shard by shard, so the graphs go to the
// shapes whose launches cost the most (ties: the smaller shape first).
std::vector<data::Shape> largest_first(const data::SamplerOptions& so) {
  auto shapes = data::possible_shapes(so);
  std::sort(shapes.begin(), shapes.end(), [](const data::Shape& a, const data::Shape& b) {
    const auto ta = a.rows * a.length, tb = b.rows * b.length;
    return ta != tb ? ta > tb : a < b;
  });
  return shapes;
}

class Dumper {
 public:
  Dumper(const target::TargetModel& target, const FeatureLayout& layout, const data::SamplerOptions& so,
         std::int64_t max_cuda_graphs)
      : target_(target),
        layout_(layout),
        so_(so),
        graphs_(target.device(), max_cuda_graphs, largest_first(so), "dump") {}

  // The tensors of one shard (write_shard); on_tokens(n) after each batch of n real tokens.
  std::map<std::string, torch::Tensor> run(const data::Dataset& ds, const ShardInfo& s,
                                           const std::function<void(std::int64_t)>& on_tokens) {
    torch::NoGradGuard no_grad;
    auto offsets = torch::empty({s.samples + 1}, torch::kInt64);
    auto* off = offsets.data_ptr<std::int64_t>();
    off[0] = 0;
    for (std::int64_t j = 0; j < s.samples; ++j)
      off[j + 1] = off[j] + ds.length(static_cast<std::size_t>(s.first_sample + j));
    std::map<std::string, torch::Tensor> t{
        {"last_hidden", torch::empty({s.tokens, layout_.hidden_size}, layout_.dtype)},
        {"target_argmax", torch::empty({s.tokens}, torch::kInt32)},
        {"sample_offsets", offsets}};
    if (layout_.aux_width > 0) t["aux_hidden"] = torch::empty({s.tokens, layout_.aux_width}, layout_.dtype);
    for (const auto& plan : data::plan_sorted(ds.lengths(), s.first_sample, s.samples, so_)) {
      const auto batch = data::make_batch(ds, plan);
      const data::Shape shape{batch.rows, batch.length};
      auto it = buffers_.find(shape);
      if (it == buffers_.end()) it = buffers_.emplace(shape, allocate(batch)).first;
      ShapeBuffers& b = it->second;
      copy_into(batch, b.in);
      graphs_.run(shape, [&] {
        auto out = target_.forward(
            target::TargetBatch{b.in.input_ids, b.in.position_ids, b.in.document_ids, b.in.attention}, {});
        // Outputs copied into fixed buffers: a replayed graph rewrites them in place. features_pre_norm:
        // the target's last aux id is L, kept before the final norm (dump_features), after the dump's own.
        const auto A = layout_.aux_width;
        if (b.aux.defined()) b.aux.copy_(layout_.pre_norm ? out.aux_hidden.narrow(-1, 0, A) : out.aux_hidden);
        b.last.copy_(layout_.pre_norm ? out.aux_hidden.narrow(-1, A, layout_.hidden_size) : out.final_hidden);
        b.argmax.copy_(out.target_argmax);
      });
      const auto last = b.last.to(torch::kCPU, layout_.dtype);
      const auto aux = layout_.aux_width > 0 ? b.aux.to(torch::kCPU, layout_.dtype) : torch::Tensor();
      const auto argmax = b.argmax.to(torch::kCPU);
      for (std::int64_t r = 0; r < plan.rows; ++r) {
        const auto& row = plan.row_samples[static_cast<std::size_t>(r)];
        if (row.empty()) continue;
        const auto t0 = off[row[0] - s.first_sample], n = ds.length(static_cast<std::size_t>(row[0]));
        t["last_hidden"].narrow(0, t0, n).copy_(last[r].narrow(0, 0, n));
        t["target_argmax"].narrow(0, t0, n).copy_(argmax[r].narrow(0, 0, n));
        if (aux.defined()) t["aux_hidden"].narrow(0, t0, n).copy_(aux[r].narrow(0, 0, n));
      }
      on_tokens(batch.real_tokens);
    }
    return t;
  }

 private:
  ShapeBuffers allocate(const data::Batch& batch) const {
    const auto opts = torch::TensorOptions().dtype(target_.dtype()).device(target_.device());
    ShapeBuffers b{allocate_like(batch, target_.device()), {}, {}, {}};
    if (layout_.aux_width > 0) b.aux = torch::zeros({batch.rows, batch.length, layout_.aux_width}, opts);
    b.last = torch::zeros({batch.rows, batch.length, layout_.hidden_size}, opts);
    b.argmax = torch::zeros({batch.rows, batch.length}, opts.dtype(torch::kInt64));
    return b;
  }

  const target::TargetModel& target_;
  FeatureLayout layout_;
  data::SamplerOptions so_;
  device::CudaGraphCache graphs_;
  std::map<data::Shape, ShapeBuffers> buffers_;
};

// A line of progress: tokens of the folder done, shards, speed and ETA of this process's part.
class DumpProgress {
 public:
  DumpProgress(std::int64_t total_tokens, std::int64_t done_tokens, std::int64_t shards)
      : total_(total_tokens), done_(done_tokens), start_done_(done_tokens), shards_(shards), display_("dump") {}
  void add(std::int64_t tokens, std::int64_t shards_done, bool final = false) {
    done_ += tokens;
    const double s = std::chrono::duration<double>(Clock::now() - start_).count();
    if (!display_.due(s, final)) return;
    const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const double mine = static_cast<double>(done_ - start_done_);
    const auto text = fmt::format("{}/{} tokens, shard {}/{}, {:.0f} tokens/s | {} elapsed | {}", done_, total_,
                                  shards_done, shards_, mine / std::max(s, 1e-9), util::format_duration(s),
                                  util::format_eta(mine, static_cast<double>(total_ - start_done_), s));
    util::ProgressLine("dump").show(display_, frac, text, s, final);
  }
  void finish() { display_.finish(); }

 private:
  std::int64_t total_, done_, start_done_, shards_;
  Clock::time_point start_ = Clock::now();
  util::ProgressDisplay display_;
};

// The folder claimed. A complete folder is only read: it is never written again, so deciding
// "nothing to do" needs no lock (and works on a read-only folder). Else it is created and locked,
// a stopped dump's leftovers removed, and the manifest read again under the lock (another dump may
// have written it meanwhile); a folder without one is made ready for a fresh dump.
std::optional<FeatureManifest> claim_folder(const fs::path& out, std::optional<run::DirLock>& lock) {
  std::optional<FeatureManifest> existing;
  if (is_features_folder(out.string())) existing = read_manifest(out.string());
  if (existing && existing->complete) return existing;
  std::error_code ec;
  fs::create_directories(out, ec);
  EAGLE_CHECK(!ec,
              Error(ErrorKind::output, "cannot create the features folder").file(out.string()).found(ec.message()));
  lock.emplace(out / run::kLockFile, "the features folder");
  clean_folder(out);
  existing.reset();
  if (is_features_folder(out.string()))
    existing = read_manifest(out.string());
  else
    prepare_fresh(out);
  return existing;
}

// A complete folder: nothing to do.
DumpSummary complete_summary(const FeatureManifest& m, const fs::path& out) {
  DumpSummary summary;
  for (const auto& s : m.shards) {
    summary.tokens += s.tokens;
    summary.samples += s.samples;
  }
  summary.shards = static_cast<std::int64_t>(m.shards.size());
  summary.bytes_per_token = m.bytes_per_token();
  summary.already_complete = true;
  log::info("dump", "{} is complete ({} shards, {} tokens): nothing to do", out.string(), summary.shards,
            summary.tokens);
  return summary;
}

// What the shards are written from: the manifest, the data, and the bytes of the target's ends
// written by this run (0 when continuing).
struct DumpPlan {
  FeatureManifest m;
  TrainData data;
  std::uint64_t ends_bytes = 0;
};

// A stopped dump continued: its manifest and the prepared data it wrote.
DumpPlan continue_dump(const fs::path& out, const FeatureManifest& existing) {
  DumpPlan p;
  p.m = existing;
  p.data.train = data::open_dataset_file((out / data::kTrainFile).string());
  if (fs::exists(out / data::kValidationFile))
    p.data.heldout = data::open_dataset_file((out / data::kValidationFile).string());
  log::info("dump", "continuing the dump in {}", out.string());
  return p;
}

// A fresh dump: the data loaded and written, the target's ends, the layout and the shards planned,
// the manifest written (incomplete).
DumpPlan start_dump(const config::Options& o, const fs::path& out, const target::TargetModel& target,
                    const std::vector<std::int64_t>& aux_ids, const json& options, const json& identity) {
  const auto& tc = target.config();
  DumpPlan p;
  p.data = load_train_data(o, tc);
  write_data(out, p.data, o);
  p.ends_bytes = write_ends(out, o, target.ends());
  FeatureManifest& m = p.m;
  m.layout.aux_width = static_cast<std::int64_t>(aux_ids.size()) * tc.hidden_size;  // none for EAGLE-1
  m.layout.hidden_size = tc.hidden_size;
  m.layout.dtype =
      o.features_dtype == config::TargetDtype::auto_ ? target.dtype() : model::target_dtype(o.features_dtype);
  m.layout.pre_norm = o.features_pre_norm;
  m.layout.has_argmax = true;
  m.aux_layer_ids = aux_ids;
  m.target = identity;
  m.options = options;
  const auto max_bytes = static_cast<std::uint64_t>(o.features_shard_mb) << 20;
  m.shards = plan_shards("train", p.data.train, m.bytes_per_token(), max_bytes);
  if (p.data.heldout) {
    auto v = plan_shards("validation", *p.data.heldout, m.bytes_per_token(), max_bytes);
    m.shards.insert(m.shards.end(), v.begin(), v.end());
  }
  fs::create_directories(out / kFeaturesShardDir);
  write_manifest(out, m);
  return p;
}

// Which shards are written already, and the tokens of both kinds.
struct ShardsDone {
  std::vector<bool> done;
  std::int64_t done_tokens = 0, todo_tokens = 0, done_shards = 0;
};

// The size estimate: the shards still missing, logged and checked against the free disk space.
ShardsDone check_space(const config::Options& o, const fs::path& out, const DumpPlan& p, DumpSummary& summary) {
  const auto& m = p.m;
  ShardsDone d;
  for (const auto& s : m.shards) {
    d.done.push_back(shard_done(out.string(), s, m.layout));
    (d.done.back() ? d.done_tokens : d.todo_tokens) += s.tokens;
    d.done_shards += d.done.back() ? 1 : 0;
    summary.samples += s.samples;
  }
  summary.tokens = d.done_tokens + d.todo_tokens;
  summary.shards = static_cast<std::int64_t>(m.shards.size());
  summary.bytes_per_token = m.bytes_per_token();
  const std::uint64_t todo_bytes = static_cast<std::uint64_t>(d.todo_tokens) * m.bytes_per_token();
  std::error_code ec;
  const auto space = fs::space(out, ec);
  log::info("dump",
            "{} samples, {} tokens at {} bytes per token ({} {} values, the last hidden state {} the final norm, + "
            "the target's argmax): {:.3f} GB in "
            "{} shards of at most {} MiB, plus the target's ends ({:.3f} GB); {:.3f} GB still to write, {:.1f} GB "
            "free",
            summary.samples, summary.tokens, m.bytes_per_token(), m.layout.aux_width + m.layout.hidden_size,
            model::dtype_name(m.layout.dtype), m.layout.pre_norm ? "before" : "after",
            1e-9 * static_cast<double>(summary.tokens) * static_cast<double>(m.bytes_per_token()), m.shards.size(),
            o.features_shard_mb, 1e-9 * static_cast<double>(p.ends_bytes), 1e-9 * static_cast<double>(todo_bytes),
            ec ? -1.0 : 1e-9 * static_cast<double>(space.available));
  EAGLE_CHECK(ec || todo_bytes <= space.available,
              Error(ErrorKind::output, "not enough free disk space for the features")
                  .file(out.string())
                  .expected(fmt::format("{:.3f} GB", 1e-9 * static_cast<double>(todo_bytes)))
                  .found(fmt::format("{:.3f} GB free", 1e-9 * static_cast<double>(space.available)))
                  .hint("free space or choose another --output; --features_dtype bfloat16 halves float32's size"));
  return d;
}

// The target's forward over each missing shard's samples, written shard by shard; then the
// manifest marked complete.
void write_shards(const config::Options& o, const target::TargetModel& target, const fs::path& out, DumpPlan& p,
                  ShardsDone d, DumpSummary& summary, const DumpHooks& hooks) {
  auto& m = p.m;
  auto so = data::SamplerOptions::from(o);
  so.padding_free = false;
  // A target that reads the host in its forward runs eagerly (TargetModel::graphed_steps).
  Dumper dumper(target, m.layout, so, target.graphed_steps(o.max_cuda_graphs, target::TargetModel::Step::training));
  DumpProgress progress(summary.tokens, d.done_tokens, summary.shards);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < m.shards.size(); ++i) {
    if (d.done[i]) continue;
    const auto& s = m.shards[i];
    const data::Dataset& ds = s.split == "train" ? p.data.train : *p.data.heldout;
    auto tensors = dumper.run(ds, s, [&](std::int64_t n) { progress.add(n, d.done_shards); });
    write_shard(out.string(), s, tensors);
    ++d.done_shards;
    ++summary.shards_written;
    summary.shard_bytes += static_cast<std::uint64_t>(s.tokens) * m.bytes_per_token();
    if (hooks.after_shard) hooks.after_shard(summary.shards_written);
  }
  progress.add(0, d.done_shards, /*final=*/true);
  progress.finish();
  summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  summary.tokens_per_s = static_cast<double>(d.todo_tokens) / std::max(summary.seconds, 1e-9);
  m.complete = true;
  write_manifest(out, m);
  log::info("dump", "wrote {}: {} shards ({} by this run), {} tokens in {:.1f} s ({:.0f} tokens/s)", out.string(),
            summary.shards, summary.shards_written, d.todo_tokens, summary.seconds, summary.tokens_per_s);
}

}  // namespace

DumpSummary dump_features(const config::Options& o, const DumpHooks& hooks) {
  device::configure_runtime(o);
  const torch::Device device = device::resolve_device(o.device);
  fs::path out = fs::path(o.output).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();
  check_output_apart(o, out);
  const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
  // The aux layers of the head the options describe (its row's plan): none where it reads the final hidden.
  std::vector<std::int64_t> aux_ids;
  if (head::draft_spec(config::draft_kind(o)).plan(head::HeadSettings::from(o, o.model_name_or_path)).aux_hidden)
    aux_ids = o.aux_hidden_state_layer_ids.empty() ? target::default_aux_layer_ids(config.num_hidden_layers)
                                                   : o.aux_hidden_state_layer_ids;
  // The pre-norm last state is read as aux id L, which an aux feature (hidden_states[L], after the norm) would share.
  EAGLE_CHECK(!o.features_pre_norm || std::count(aux_ids.begin(), aux_ids.end(), config.num_hidden_layers) == 0,
              Error(ErrorKind::usage,
                    "features_pre_norm keeps the last layer before the final norm, and an aux id names the last "
                    "layer (after it)")
                  .place("aux_hidden_state_layer_ids")
                  .found(fmt::format("[{}], num_hidden_layers {}", fmt::join(aux_ids, ", "), config.num_hidden_layers))
                  .hint("choose aux layer ids below num_hidden_layers, or dump without --features_pre_norm"));
  const json options = content_options(o, aux_ids);
  std::optional<run::DirLock> lock;  // held until the dump ends
  const auto existing = claim_folder(out, lock);
  if (existing) check_same_options(*existing, options, out);
  if (existing && existing->complete) return complete_summary(*existing, out);
  // The target's identity from its files, before its weights load: a resumed dump of another target
  // (or of a fine-tune of it) is refused by the tensor that differs.
  const auto identity = target_identity(canonical(o.model_name_or_path), o.model_name_or_path, config);
  if (existing)
    check_same_target(existing->target, identity, (out / kFeaturesManifest).string(), /*with_path=*/true,
                      "complete the dump with its own target, or choose another --output");
  auto target = target::load_target(o, device);
  auto forward_ids = aux_ids;  // features_pre_norm: then aux id L before the final norm, the stored last state
  if (o.features_pre_norm) forward_ids.push_back(config.num_hidden_layers);
  target.set_last_aux_pre_norm(o.features_pre_norm);
  if (!forward_ids.empty()) target.set_aux_layer_ids(forward_ids);
  auto plan = existing ? continue_dump(out, *existing) : start_dump(o, out, target, aux_ids, options, identity);
  DumpSummary summary;
  const auto done = check_space(o, out, plan, summary);
  write_shards(o, target, out, plan, done, summary, hooks);
  return summary;
}

}  // namespace eagle::features
