// Training-step throughput by batching mode and execution, on any device: a target of the given
// config.json with random weights made on the device (no checkpoint), an EAGLE-3 head, long-tailed
// synthetic lengths (log-normal, median 600, sigma 0.8, capped at training_seq_len, random ids), a
// token budget per batch. For granularity 0, granularity 128 and padding-free, eager and with CUDA
// graphs: the trainer's own step (MicroBatchRunner, AdamW through CudaGraphCache) timed
// at steady state for the most frequent batch shapes of the epoch plan, weighted by how often each
// occurs; real tokens/s, MFU from the model's FLOPs on the real tokens, peak device memory. Prints
// one Markdown table and writes it to --out. Run by scripts/gpu_check.sh (H200, Llama-3.1-8B shapes)
// and, at small shapes on CPU, by its dry run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include <fmt/format.h>
#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/sampler.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/head/draft_spec.h"
#include "eagle/head/loss.h"
#include "eagle/train/micro_batch.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"
#include "eagle/train/step_flops.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

using namespace eagle;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string device = "cuda", config, out = "bench_step.md";
  std::int64_t seq_len = 4096, tokens = 16384, samples = 2000, timed = 3, shapes = 4, ttt_steps = 7;
  std::int64_t draft_vocab = 32000;
  double peak_tflops = 989.0;  // H200 bf16 dense
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      a.device = v;
    else if (k == "--config")
      a.config = v;
    else if (k == "--out")
      a.out = v;
    else if (k == "--seq_len")
      a.seq_len = std::stoll(v);
    else if (k == "--tokens")
      a.tokens = std::stoll(v);
    else if (k == "--samples")
      a.samples = std::stoll(v);
    else if (k == "--timed")
      a.timed = std::stoll(v);
    else if (k == "--shapes")
      a.shapes = std::stoll(v);
    else if (k == "--ttt_steps")
      a.ttt_steps = std::stoll(v);
    else if (k == "--draft_vocab")
      a.draft_vocab = std::stoll(v);
    else if (k == "--peak_tflops")
      a.peak_tflops = std::stod(v);
    else
      throw std::runtime_error("unknown argument " + k);
  }
  if (a.config.empty()) throw std::runtime_error("--config CONFIG.json is required");
  return a;
}

// Long-tailed lengths with the benchmark's own seed; ids uniform, the first 20% outside the loss.
data::Dataset longtail(std::int64_t n, std::int64_t cap, std::int64_t vocab) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> len(std::log(600.0), 0.8);
  std::uniform_int_distribution<std::int64_t> id(0, vocab - 1);
  std::vector<data::Sample> samples(static_cast<std::size_t>(n));
  for (auto& s : samples) {
    const auto l = std::clamp<std::int64_t>(std::llround(len(rng)), 16, cap);
    for (std::int64_t p = 0; p < l; ++p) {
      s.input_ids.push_back(static_cast<data::TokenId>(id(rng)));
      s.loss_mask.push_back(p >= l / 5 ? 1 : 0);
    }
  }
  return data::Dataset::from_samples(samples, "<long-tailed synthetic>");
}

struct ModeResult {
  std::string mode, execution;
  double covered = 0, real_per_step = 0, seconds_per_step = 0, tokens_per_s = 0, mfu = 0;
  double peak_allocated_gib = -1, peak_reserved_gib = -1;
  std::int64_t shapes = 0, captured = 0, replays = 0;
};

void synchronize(torch::Device d) {
#ifdef EAGLE_WITH_CUDA
  if (d.is_cuda()) c10::cuda::device_synchronize();
#endif
}

ModeResult run_mode(const std::string& name, config::Options o, bool graphed, const Args& a,
                    const target::TargetModel& target, const data::Dataset& dataset, torch::Device device) {
  ModeResult r{name, !graphed ? "eager" : device.is_cuda() ? "CUDA graphs" : "graphs asked (CPU: eager)"};
#ifdef EAGLE_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#endif
  torch::manual_seed(7);
  auto inputs = features::online_inputs(target, "random " + target.config().architecture);
  inputs.train = dataset;
  auto head = train::make_head(o, inputs, device);
  train::AdamW optimizer(head::named_parameters(*head), train::AdamWConfig{0.9, 0.95, 1e-8, 0.0, 0.5});
  const auto features = features::online_features(target, head->teacher_spec());
  const auto K = head->config().steps();
  data::Sampler sampler(dataset.lengths(), data::SamplerOptions::from(o));
  const auto counts = sampler.shape_counts(0);
  const auto chosen = device::most_frequent_shapes(counts, a.shapes);
  std::map<data::Shape, std::int64_t> chosen_counts;
  std::int64_t all = 0, covered = 0;
  for (const auto& [shape, n] : counts) {
    all += n;
    if (std::find(chosen.begin(), chosen.end(), shape) != chosen.end()) {
      chosen_counts[shape] = n;
      covered += n;
    }
  }
  r.covered = static_cast<double>(covered) / static_cast<double>(all);
  r.shapes = static_cast<std::int64_t>(chosen.size());
  // The batches of each chosen shape, in plan order (enough for warm-up, capture and timing).
  std::map<data::Shape, std::vector<data::BatchPlan>> plans;
  for (std::int64_t i = 0; i < sampler.batches_in_epoch(0); ++i) {
    auto p = sampler.next();
    auto& v = plans[data::Shape{p.rows, p.length}];
    if (chosen_counts.count({p.rows, p.length}) && static_cast<std::int64_t>(v.size()) < a.timed + 2) v.push_back(p);
  }
  const std::int64_t max_segments =
      o.padding_free ? data::max_segments_per_row(dataset.lengths(), o.training_seq_len) : 0;
  device::CudaGraphCache cache(device, graphed ? a.shapes : 0, chosen, "bench");
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto step_loss = torch::zeros({}, f32), metrics = torch::zeros({K, head::kMetricColumns}, f32);
  double weighted_time = 0, weighted_real = 0, weighted_flops = 0, weight = 0;
  train::MicroBatchRunner micro_batches(*features, *head, max_segments, o.bf16);  // the trainer's step pieces
  for (const auto& shape : chosen) {
    const auto& batches = plans.at(shape);
    auto step = [&](const data::Batch& batch) {
      optimizer.zero_grad();
      optimizer.set_lr(1e-5);
      step_loss.zero_();
      micro_batches.run(cache, batch, train::denominator_tensor(head::count_loss_positions(batch, K)), step_loss,
                        metrics);
      cache.run(device::kOptimizerUpdate, [&] { optimizer.step(step_loss); });
    };
    const std::int64_t untimed = graphed && device.is_cuda() ? 2 : 1;  // warm-up (and capture)
    double seconds = 0, real = 0, flops = 0;
    for (std::int64_t i = 0; i < untimed + a.timed; ++i) {
      const auto batch = data::make_batch(dataset, batches[static_cast<std::size_t>(i) % batches.size()]);
      synchronize(device);
      const auto t0 = Clock::now();
      step(batch);
      synchronize(device);
      if (i < untimed) continue;
      seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      real += static_cast<double>(batch.real_tokens);
      flops += train::step_flops(head::draft_spec(head->config()), head->config(), &target.config(), {batch}, {});
    }
    const double n = static_cast<double>(chosen_counts.at(shape)), timed = static_cast<double>(a.timed);
    weighted_time += n * seconds / timed;
    weighted_real += n * real / timed;
    weighted_flops += n * flops / timed;
    weight += n;
    std::cerr << fmt::format("  {} {} {}x{}: {:.3f} s/step, {:.0f} real tokens/step (loss {:.3f})\n", name, r.execution,
                             shape.rows, shape.length, seconds / timed, real / timed, step_loss.item<double>());
  }
  r.seconds_per_step = weighted_time / weight;
  r.real_per_step = weighted_real / weight;
  r.tokens_per_s = weighted_real / weighted_time;
  r.mfu = weighted_flops / weighted_time / (a.peak_tflops * 1e12);
  r.captured = cache.captured_count();
  r.replays = cache.replay_count();
#ifdef EAGLE_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    r.peak_allocated_gib = static_cast<double>(stats.allocated_bytes[0].peak) / (1 << 30);
    r.peak_reserved_gib = static_cast<double>(stats.reserved_bytes[0].peak) / (1 << 30);
  }
#endif
  return r;
}

std::string device_name(torch::Device d) {
#ifdef EAGLE_WITH_CUDA
  if (d.is_cuda()) return at::cuda::getDeviceProperties(d.index())->name;
#endif
  return "CPU";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const torch::Device device(a.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
    const bool cuda = device.is_cuda();
    auto cfg = target::TargetConfig::from_json_file(a.config);
    torch::manual_seed(0);
    const auto target = target::TargetModel::random(cfg, cuda ? torch::kBFloat16 : torch::kFloat32, device);
    const auto dataset = longtail(a.samples, a.seq_len, cfg.vocab_size);

    config::Options base;
    base.model_name_or_path = a.config;
    base.training_seq_len = a.seq_len;
    base.max_tokens_per_batch = a.tokens;
    base.eagle_version = 3;
    base.ttt_steps = a.ttt_steps;
    base.draft_vocab_size = std::min(a.draft_vocab, cfg.vocab_size);
    base.bf16 = cuda;
    base.seed = 42;
    std::vector<std::pair<std::string, config::Options>> modes;
    for (std::int64_t g : {0, 128}) {
      auto o = base;
      o.bucket_granularity = g;
      modes.emplace_back(fmt::format("granularity {}", g), o);
    }
    auto pf = base;
    pf.padding_free = true;
    pf.bucket_granularity = 0;
    modes.emplace_back("padding-free", pf);

    std::vector<ModeResult> results;
    for (const auto& [name, o] : modes)
      for (bool graphed : {false, true}) results.push_back(run_mode(name, o, graphed, a, target, dataset, device));

    const double base_tps = results.front().tokens_per_s;
    std::string table =
        "| mode | execution | shapes timed (share of batches) | real tokens/step | s/step | real tokens/s | vs g0 "
        "eager "
        "| MFU | peak allocated GiB | peak reserved GiB | graphs captured / replays |\n|";
    for (int c = 0; c < 11; ++c) table += "---|";
    table += "\n";
    for (const auto& r : results)
      table += fmt::format(
          "| {} | {} | {} ({:.0f}%) | {:.0f} | {:.3f} | {:.0f} | {:.2f}x | {:.1f}% | {} | {} | {} / {} |\n", r.mode,
          r.execution, r.shapes, 100 * r.covered, r.real_per_step, r.seconds_per_step, r.tokens_per_s,
          r.tokens_per_s / base_tps, 100 * r.mfu,
          r.peak_allocated_gib < 0 ? "n/a" : fmt::format("{:.1f}", r.peak_allocated_gib),
          r.peak_reserved_gib < 0 ? "n/a" : fmt::format("{:.1f}", r.peak_reserved_gib), r.captured, r.replays);
    auto ratio = [&](std::size_t i, std::size_t j) { return results[i].tokens_per_s / results[j].tokens_per_s; };
    double best_mfu = 0;
    for (const auto& r : results) best_mfu = std::max(best_mfu, r.mfu);
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    std::string report = fmt::format(
        "## Training step throughput ({}, {})\n\n"
        "Target: {} with random {} weights ({} layers, hidden {}, vocabulary {}); EAGLE-3 head, {} TTT steps, draft "
        "vocabulary {}; training_seq_len {}, token budget {} a batch; {} long-tailed samples (log-normal, median 600, "
        "sigma 0.8); steady state of the {} most frequent shapes per mode, {} timed steps each, weighted by the epoch "
        "plan; MFU on the real tokens' model FLOPs against {} TFLOP/s.\n\n{}\n"
        "Ratios: graphed / eager: g0 {:.2f}x, g128 {:.2f}x, padding-free {:.2f}x; eager g128 / g0 {:.2f}x; "
        "eager padding-free / g128 {:.2f}x; best MFU {:.1f}%.\n",
        device_name(device), date, cfg.architecture, cuda ? "bf16" : "fp32", cfg.num_hidden_layers, cfg.hidden_size,
        cfg.vocab_size, a.ttt_steps, base.draft_vocab_size, a.seq_len, a.tokens, a.samples, a.shapes, a.timed,
        a.peak_tflops, table, ratio(1, 0), ratio(3, 2), ratio(5, 4), ratio(2, 0), ratio(4, 2), 100 * best_mfu);
    std::cout << report;
    std::ofstream(a.out) << report;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_step: " << e.what() << "\n";
    return 1;
  }
}
