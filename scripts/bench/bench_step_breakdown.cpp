// Where a training step's time goes (issue 52): the trainer's own pieces, run one after the other with a
// synchronisation between them, for any head and target `eagle-train train` takes (the same flags, e.g.
// --model_name_or_path, --data_path, --draft, --per_device_train_batch_size): data (the batch from the
// sampler, its loss plan and its copy to the buffers), target forward (the feature source's head inputs:
// the target's forward online, the stored features offline), draft forward (train_step_forward), backward,
// optimizer (clip and AdamW). Each part's model FLOPs (head/flops.h, target/flops.h; the draft's forward
// taken as a third of its training FLOPs) against the matmul rate measured on the step's own GEMM shapes
// (device/peak_flops.h, 1 s) give its MFU. Prints a Markdown table and one JSON line
// (scripts/bench/bench_step_breakdown.sh). Extra flags: --bench_steps N (timed, default 20),
// --bench_warmup N (default 3), --bench_label TEXT, --bench_profile PATH (a chrome trace of the timed steps, by
// LibTorch's profiler: the op-level view of where a part's time goes).
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "eagle/config/resolve.h"
#include "eagle/data/sampler.h"
#include "eagle/device/peak_flops.h"
#include "eagle/device/runtime.h"
#include "eagle/features/inputs.h"
#include "eagle/head/draft_spec.h"
#include "eagle/target/flops.h"
#include "eagle/train/micro_batch.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"
#include "eagle/train/step_flops.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

using namespace eagle;
using Clock = std::chrono::steady_clock;

namespace {

void sync(torch::Device d) {
#ifdef EAGLE_WITH_CUDA
  if (d.is_cuda()) at::cuda::getCurrentCUDAStream(d.index()).synchronize();
#endif
  (void)d;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum Part { kData, kTarget, kForward, kBackward, kOptimizer, kParts };
constexpr const char* kPartNames[kParts] = {"data", "target forward", "draft forward", "backward", "optimizer"};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"step breakdown"};
  config::BoundFlags bound{config::Command::train, {}, {}};
  config::add_flags(app, bound);
  std::int64_t steps = 20, warmup = 3;
  std::string label, profile;
  app.add_option("--bench_steps", steps);
  app.add_option("--bench_warmup", warmup);
  app.add_option("--bench_label", label);
  app.add_option("--bench_profile", profile);
  CLI11_PARSE(app, argc, argv);
  auto o = config::resolve(bound);
  config::validate(o, config::Command::train);
  device::configure_runtime(o);
  const torch::Device dev = device::resolve_device(o.device);

  auto inputs = features::load_train_inputs(o, dev);
  auto head = train::make_head(o, inputs, dev);
  const auto& cfg = head->config();
  const auto& spec = head::draft_spec(cfg);
  auto sources = inputs.sources(head->teacher_spec(), dev);
  const auto& source = *sources.train;
  data::Sampler sampler(inputs.train->lengths(), data::SamplerOptions::from(o, 1, 0));
  const auto max_segments =
      o.padding_free ? data::max_segments_per_row(inputs.train->lengths(), o.training_seq_len) : 0;
  train::AdamW optimizer(head::named_parameters(*head), train::AdamWConfig{o.adam_beta1, o.adam_beta2, o.adam_epsilon,
                                                                           o.weight_decay, o.max_grad_norm});
  const target::TargetConfig* step_target = inputs.store ? nullptr : &inputs.ends.config;

  double seconds[kParts] = {}, total = 0, real = 0, flops_target = 0, flops_head = 0;
  std::int64_t tokens_sum = 0, timed = 0;
  for (std::int64_t s = 0; s < warmup + steps; ++s) {
    const bool timing = s >= warmup;
    std::optional<torch::autograd::profiler::RecordProfile> trace;
    if (timing && !profile.empty() && s == warmup) trace.emplace(profile);
    double t[kParts] = {};
    const auto step_start = Clock::now();
    auto t0 = Clock::now();
    auto batch = data::make_batch(*inputs.train, sampler.next());
    auto plan = spec.loss_plan({batch}, cfg, head::PlanSeed{static_cast<std::uint64_t>(o.seed), s + 1, 0});
    auto buffers = source.allocate(batch, max_segments);
    source.fill(batch, buffers);
    if (plan.extras[0].defined()) buffers.extra = plan.extras[0].to(dev);
    auto denominators = train::denominator_tensor(plan.denominators).to(dev);
    sync(dev);
    t[kData] = since(t0);
    t0 = Clock::now();
    head::HeadInputs in;
    {
      torch::NoGradGuard no_grad;
      in = source.head_inputs(buffers);
    }
    sync(dev);
    t[kTarget] = since(t0);
    optimizer.zero_grad();
    t0 = Clock::now();
    head::HeadStepOutput out;
    {
      device::AutocastGuard autocast(dev, o.bf16);
      out = head->train_step_forward(in, denominators);
    }
    sync(dev);
    t[kForward] = since(t0);
    t0 = Clock::now();
    out.loss.backward();
    sync(dev);
    t[kBackward] = since(t0);
    t0 = Clock::now();
    optimizer.set_lr(o.learning_rate);
    optimizer.step(out.loss.detach());
    sync(dev);
    t[kOptimizer] = since(t0);
    const double step_seconds = since(step_start);
    if (!timing) continue;
    ++timed;
    for (int p = 0; p < kParts; ++p) seconds[p] += t[p];
    total += step_seconds;
    real += static_cast<double>(batch.real_tokens);
    tokens_sum += batch.computed_tokens();
    if (step_target) flops_target += target::forward_flops(*step_target, batch);
    flops_head += spec.train_flops(cfg, batch, plan.extras[0]);
  }
  const auto tokens = tokens_sum / std::max<std::int64_t>(1, timed);
  const double peak = device::measure_matmul_tflops(train::step_gemm_shapes(cfg, step_target, tokens),
                                                    o.bf16 ? torch::kBFloat16 : torch::kFloat32, dev, 1.0);
  auto mfu = [&](double flops, double secs) { return secs > 0 ? flops / secs / 1e12 / peak : 0.0; };
  const double draft_forward = flops_head / 3;  // forward of a trained matmul: a third of its training FLOPs
  const double mfus[kParts] = {0, mfu(flops_target, seconds[kTarget]), mfu(draft_forward, seconds[kForward]),
                               mfu(flops_head - draft_forward, seconds[kBackward]), 0};
  const double host = total - (seconds[0] + seconds[1] + seconds[2] + seconds[3] + seconds[4]);
  std::string table = "| part | ms/step | share | MFU |\n|---|---|---|---|\n";
  nlohmann::json line{{"label", label},
                      {"draft", spec.name},
                      {"steps", timed},
                      {"real_tokens_per_step", real / static_cast<double>(timed)},
                      {"padded_tokens_per_step", tokens},
                      {"peak_tflops_measured", peak}};
  for (int p = 0; p < kParts; ++p) {
    table += fmt::format("| {} | {:.1f} | {:.1f}% | {} |\n", kPartNames[p], 1000 * seconds[p] / timed,
                         100 * seconds[p] / total, mfus[p] > 0 ? fmt::format("{:.1f}%", 100 * mfus[p]) : "-");
    line["ms"][kPartNames[p]] = 1000 * seconds[p] / timed;
    line["mfu"][kPartNames[p]] = mfus[p];
  }
  const double step_mfu = mfu(flops_target + flops_head, total);
  const double model_mfu = mfu(flops_target + flops_head, total - seconds[kData] - host);
  table += fmt::format("| host (between parts) | {:.1f} | {:.1f}% | - |\n", 1000 * host / timed, 100 * host / total);
  table += fmt::format("| **step** | **{:.1f}** | 100% | **{:.1f}%** (model parts alone {:.1f}%) |\n",
                       1000 * total / timed, 100 * step_mfu, 100 * model_mfu);
  line["ms"]["host"] = 1000 * host / timed;
  line["ms"]["step"] = 1000 * total / timed;
  line["mfu"]["step"] = step_mfu;
  line["mfu"]["model_parts"] = model_mfu;
  line["tokens_per_s"] = real / total;
  std::printf(
      "%s: %s draft, %.0f real tokens a step, matmul peak %.4g TFLOP/s measured on the step's GEMMs\n\n%s\n%s\n",
      label.c_str(), spec.name, real / static_cast<double>(timed), peak, table.c_str(), line.dump().c_str());
  return 0;
}
