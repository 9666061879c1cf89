// The objects of a small training run on one device, built as the trainer builds them (inputs, a head
// seeded 7, its feature source, the sampler, AdamW, the step's loss and metric sums): the fixture of the
// micro-batch tests of every draft kind (tests/test_train_micro_batch*.cpp).
#pragma once

#include <memory>
#include <utility>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/config/options.h"
#include "eagle/data/plan.h"
#include "eagle/data/sampler.h"
#include "eagle/features/inputs.h"
#include "eagle/head/loss.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"

namespace eagle::test {

struct StepRig {
  config::Options o;
  torch::Device device;
  features::RunInputs inputs;
  std::shared_ptr<head::DraftHead> head;
  std::unique_ptr<features::FeatureSource> features;
  data::Sampler sampler;
  train::AdamW optimizer;
  std::int64_t max_segments;
  torch::Tensor step_loss, metrics;

  StepRig(config::Options opts, torch::Device dev)
      : o(std::move(opts)),
        device(dev),
        inputs(features::load_train_inputs(o, device)),
        head(seeded_head(o, inputs, device)),
        features(inputs.sources(head->teacher_spec(), device).train),
        sampler(inputs.train->lengths(), data::SamplerOptions::from(o)),
        optimizer(head::named_parameters(*head), train::AdamWConfig{0.9, 0.95, 1e-8, 0.0, 1.0}),
        max_segments(o.padding_free ? data::max_segments_per_row(inputs.train->lengths(), o.training_seq_len) : 0) {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    step_loss = torch::zeros({}, f32);
    metrics = torch::zeros({head->config().steps(), head::kMetricColumns}, f32);
  }
  static std::shared_ptr<head::DraftHead> seeded_head(const config::Options& o, const features::RunInputs& inputs,
                                                      torch::Device device) {
    torch::manual_seed(7);
    return train::make_head(o, inputs, device);
  }
};

// Graphed steps against eager ones in fp32 (a run's per-step losses, final parameters and peak reserved
// GPU memory): the same losses and parameters to rounding, and the graphs' memory near eager's.
template <typename Run>
void check_graphed_like_eager(const Run& eager, const Run& graphed) {
  REQUIRE(graphed.losses.size() == eager.losses.size());
  for (std::size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(graphed.losses[i] == Approx(eager.losses[i]).epsilon(1e-5));
  }
  for (std::size_t i = 0; i < eager.params.size(); ++i)
    CHECK(torch::allclose(graphed.params[i], eager.params[i], 1e-5, 1e-6));
  INFO("peak reserved: eager " << eager.peak_reserved / (1 << 20) << " MiB, graphed "
                               << graphed.peak_reserved / (1 << 20) << " MiB");
  CHECK(graphed.peak_reserved <= 1.3 * eager.peak_reserved);
}

}  // namespace eagle::test
