// The DFlash training step (--draft dflash) on the real components (tiny Qwen3 target, smoke data,
// sampler, AdamW, anchors drawn as the trainer draws them), padded and packed: on CPU the step body
// reads nothing back on the host, runs the same operators on the same shapes whatever its anchors and
// valid slots (so one graph per batch shape replays every batch of it), and on a shape's fixed
// buffers (MicroBatchRunner) computes bit for bit what a step on fresh tensors computes; on a GPU each
// shape is captured once and replayed, and graphed steps equal eager ones in fp32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "eagle/data/sampler.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/features/inputs.h"
#include "eagle/head/dflash/attention.h"
#include "eagle/head/dflash/spec.h"
#include "eagle/head/loss.h"
#include "eagle/train/micro_batch.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"
#include "helpers.h"
#include "host_sync_probe.h"
#include "op_trace.h"
#include "step_rig.h"

#ifdef EAGLE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

using namespace eagle;

namespace {

// Block 4 (K = 3), two layers, N = min(112, T) anchors: 96 in the smoke data's 96-token bucket,
// 112 in the 128-token one (one anchor count per shape). Hard labels take the unchunked loss, soft
// ones the chunked.
config::Options dflash_options(bool packed, bool hard) {
  config::Options o;
  o.model_name_or_path = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-qwen3";
  o.data_path = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl";
  o.validation_fraction = 0;
  o.padding_free = packed;
  o.training_seq_len = 128;
  o.bucket_granularity = 32;
  o.per_device_train_batch_size = 4;
  o.draft = config::Draft::dflash;
  o.dflash_block_size = 4;
  o.draft_num_layers = 2;
  o.dflash_num_anchors = 112;
  o.dflash_hard_labels = hard;
  o.loss_chunk_size = hard ? 0 : 64;
  o.seed = 42;
  return o;
}

// The step rig of a DFlash run, with its batches, the trainer's anchors and the gradients.
struct DFlashRig : test::StepRig {
  using StepRig::StepRig;
  data::Batch next_batch() { return data::make_batch(*inputs.train, sampler.next()); }
  // The trainer's anchors of micro-batch 0 of `step` (host tensors) and their valid slots.
  head::DFlashAnchors anchors(const data::Batch& b, std::int64_t step) const {
    return head::dflash_batch_anchors(b, head->config(), head::dflash_anchor_generator(42, step, 0));
  }
  std::vector<torch::Tensor> grads() const {
    std::vector<torch::Tensor> out;
    for (const auto& [name, p] : head::named_parameters(*head)) out.push_back(p.grad().detach().clone());
    return out;
  }
};

// The next batch of `shape` in the sampler's order (every shape of these runs repeats in an epoch).
data::Batch next_of_shape(DFlashRig& rig, const data::Shape& shape) {
  for (int i = 0; i < 200; ++i) {
    auto b = rig.next_batch();
    if (b.rows == shape.rows && b.length == shape.length) return b;
  }
  FAIL("no second batch of shape " << shape.rows << "x" << shape.length);
  return {};
}

// Row 0 keeps its first two trained positions: fewer candidates than anchors, so padding anchors.
data::Batch with_few_trained(data::Batch b) {
  int kept = 0;
  for (std::int64_t p = 0; p < b.length; ++p) {
    auto& m = b.loss_mask[static_cast<std::size_t>(b.at(0, p))];
    if (m != 0 && kept++ >= 2) m = 0;
  }
  return b;
}

std::int64_t fewest_candidates(const data::Batch& b, std::int64_t block) {
  const auto mask =
      torch::tensor(std::vector<std::int64_t>(b.loss_mask.begin(), b.loss_mask.end())).view({b.rows, b.length});
  const auto docs =
      torch::tensor(std::vector<std::int64_t>(b.document_ids.begin(), b.document_ids.end())).view({b.rows, b.length});
  return head::dflash_anchor_candidates(mask, docs, block).sum(1).min().item<std::int64_t>();
}

}  // namespace

TEST_CASE("the DFlash training step body reads nothing back on the host, padded and packed", "[train]") {
  for (bool packed : {false, true}) {
    for (bool hard : {false, true}) {
      INFO("packed " << packed << ", hard labels " << hard);
      DFlashRig rig(dflash_options(packed, hard), torch::kCPU);
      for (std::int64_t step = 1; step <= 2; ++step) {
        auto batch = rig.next_batch();
        CHECK(batch.packed == packed);
        auto a = rig.anchors(batch, step);  // on the host, before the step (the trainer's order)
        auto buffers = features::allocate_like(batch, torch::kCPU, rig.max_segments);
        features::copy_into(batch, buffers);
        buffers.extra = a.anchors;
        const auto denominators = train::denominator_tensor(a.slots);
        rig.optimizer.zero_grad();
        // What the captured graphs run: (a) the shape's forward + backward, (b) the update (AdamW's
        // fused CPU kernel reads lr and step on the host, its CUDA kernel on the device).
        test::HostSyncProbe probe({"aten::_fused_adamw_"});
        train::train_micro_batch(*rig.features, *rig.head, buffers, denominators, false, rig.step_loss, rig.metrics);
        rig.optimizer.step(rig.step_loss);
        INFO(probe.names());
        CHECK(probe.count() == 0);
      }
      CHECK(std::isfinite(rig.step_loss.item<double>()));
      CHECK(rig.metrics.select(1, head::kValid).sum().item<double>() > 0);
    }
  }
}

TEST_CASE("a DFlash step runs the same operators on the same shapes whatever its anchors and valid slots", "[train]") {
  for (bool packed : {false, true}) {
    for (bool hard : {false, true}) {
      INFO("packed " << packed << ", hard labels " << hard);
      DFlashRig rig(dflash_options(packed, hard), torch::kCPU);
      const auto b1 = rig.next_batch();
      const data::Shape shape{b1.rows, b1.length};
      // Another batch of the shape, with a row of fewer candidates than anchors (padding anchors).
      const auto b2 = with_few_trained(next_of_shape(rig, shape));
      const auto a1 = rig.anchors(b1, 1), a2 = rig.anchors(b2, 2);
      const auto n = a1.anchors.size(1);
      CHECK(n == std::min<std::int64_t>(112, b1.length));
      CHECK(a2.anchors.sizes() == a1.anchors.sizes());
      REQUIRE(fewest_candidates(b2, 4) < n);
      CHECK_FALSE(torch::equal(a1.anchors, a2.anchors));
      CHECK(a1.slots != a2.slots);
      // One set of buffers for the shape, as the graph reads them; the target's features are made
      // outside the trace (on CPU its packed attention walks the documents on the host; on CUDA it
      // does not: the target's own [train] and [gpu] tests).
      auto buffers = features::allocate_like(b1, torch::kCPU, rig.max_segments);
      buffers.extra = torch::zeros_like(a1.anchors);
      auto trace = [&](const data::Batch& b, const head::DFlashAnchors& a) {
        features::copy_into(b, buffers);
        buffers.extra.copy_(a.anchors);
        const auto in = rig.features->head_inputs(buffers);
        const auto denominators = train::denominator_tensor(a.slots);
        rig.optimizer.zero_grad();
        test::OpTrace ops;
        auto out = rig.head->train_step_forward(in, denominators);
        out.loss.backward();
        return ops.ops();
      };
      trace(b1, a1);  // warm-up, as the graph cache's first call
      const auto t1 = trace(b1, a1), t2 = trace(b2, a2);
      CHECK(t1.size() > 200);
      INFO(test::first_difference(t1, t2));
      const bool same = t1 == t2;  // not CHECK(t1 == t2): Catch would print every line of both
      CHECK(same);
      if (!packed) {
        // The trace does tell shapes apart: a batch of another bucket records other lines.
        data::Batch b3;
        for (int i = 0; i < 200 && b3.rows == 0; ++i) {
          auto b = rig.next_batch();
          if (b.length != b1.length) b3 = std::move(b);
        }
        REQUIRE(b3.rows > 0);
        auto buffers3 = features::allocate_like(b3, torch::kCPU, rig.max_segments);
        features::copy_into(b3, buffers3);
        buffers3.extra = rig.anchors(b3, 3).anchors;
        const auto in3 = rig.features->head_inputs(buffers3);
        test::OpTrace ops;
        rig.head->train_step_forward(in3, train::denominator_tensor(rig.anchors(b3, 3).slots)).loss.backward();
        const bool other = ops.ops() != t1;
        CHECK(other);
      }
    }
  }
}

TEST_CASE("a DFlash step on its shape's fixed buffers equals one on fresh tensors bit for bit", "[train]") {
  for (bool packed : {false, true}) {
    INFO("packed " << packed);
    DFlashRig rig(dflash_options(packed, /*hard=*/false), torch::kCPU);
    train::MicroBatchRunner runner(*rig.features, *rig.head, rig.max_segments, /*bf16=*/false);
    device::CudaGraphCache graphs(torch::kCPU, 8, {}, "test");  // CPU: eager
    const auto b1 = rig.next_batch();
    // Two batches of one shape through the same buffers (the second overwrites the first), then another.
    std::vector<data::Batch> batches{b1, with_few_trained(next_of_shape(rig, {b1.rows, b1.length})), rig.next_batch()};
    std::vector<double> losses;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      INFO("batch " << i);
      const auto& b = batches[i];
      const auto a = rig.anchors(b, static_cast<std::int64_t>(i) + 1);
      const auto denominators = train::denominator_tensor(a.slots);
      // The trainer's path: anchors copied into the shape's buffer, the step through the graph cache.
      rig.optimizer.zero_grad();
      rig.step_loss.zero_();
      rig.metrics.zero_();
      runner.run(graphs, b, denominators, rig.step_loss, rig.metrics, a.anchors);
      const auto loss = rig.step_loss.clone(), metrics = rig.metrics.clone();
      const auto grads = rig.grads();
      // The same step on fresh tensors holding the drawn anchors tensor itself (the evaluation's path).
      rig.optimizer.zero_grad();
      rig.step_loss.zero_();
      rig.metrics.zero_();
      auto fresh = rig.features->allocate(b, rig.max_segments);
      rig.features->fill(b, fresh);
      fresh.extra = a.anchors;
      train::train_micro_batch(*rig.features, *rig.head, fresh, denominators, false, rig.step_loss, rig.metrics);
      CHECK(torch::equal(loss, rig.step_loss));
      CHECK(torch::equal(metrics, rig.metrics));
      const auto fresh_grads = rig.grads();
      REQUIRE(fresh_grads.size() == grads.size());
      bool nonzero = false;
      for (std::size_t g = 0; g < grads.size(); ++g) {
        CHECK(torch::equal(grads[g], fresh_grads[g]));
        nonzero |= grads[g].abs().sum().item<double>() > 0;
      }
      CHECK(nonzero);
      CHECK(std::isfinite(loss.item<double>()));
      losses.push_back(loss.item<double>());
    }
    CHECK(losses[0] != losses[1]);  // the second batch's data and anchors reached the step
  }
}

TEST_CASE("graphed DFlash training steps equal eager ones, one capture per shape, then replays", "[train][gpu]") {
#ifdef EAGLE_WITH_CUDA
  for (const auto& combo : std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {false, true}}) {
    const bool packed = combo.first, hard = combo.second;
    INFO("packed " << packed << ", hard labels " << hard);
    constexpr int kSteps = 12;
    struct Result {
      std::vector<double> losses;
      std::vector<torch::Tensor> params;
      std::int64_t captured = 0, replays = 0, shapes = 0, graphed_shapes = 0, graphed_calls = 0, sync_ops = 0;
      double peak_reserved = 0;
    };
    auto run = [&](std::int64_t max_graphs) {
      Result r;
      DFlashRig rig(dflash_options(packed, hard), torch::kCUDA);
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::resetPeakStats(0);
      const auto counts = rig.sampler.shape_counts(0);
      device::CudaGraphCache cache(rig.device, max_graphs,
                                   device::most_frequent_shapes(counts, static_cast<std::int64_t>(counts.size())),
                                   "test");
      std::map<data::Shape, features::BatchTensors> buffers;
      std::map<data::Shape, torch::Tensor> denominators;
      std::map<data::Shape, std::int64_t> calls;
      test::HostSyncProbe probe;
      for (int step = 1; step <= kSteps; ++step) {
        auto batch = rig.next_batch();
        const data::Shape shape{batch.rows, batch.length};
        const auto a = rig.anchors(batch, step);  // host work, outside the graphs
        if (!buffers.count(shape)) {
          auto buf = features::allocate_like(batch, rig.device, rig.max_segments);
          buf.extra = torch::zeros(a.anchors.sizes(), buf.input_ids.options().dtype(torch::kInt64));
          buffers.emplace(shape, std::move(buf));
          denominators.emplace(shape, torch::zeros({rig.head->config().steps()}, rig.step_loss.options()));
        }
        ++calls[shape];
        auto& buf = buffers.at(shape);
        features::copy_into(batch, buf);
        buf.extra.copy_(a.anchors.pin_memory(), /*non_blocking=*/true);
        denominators.at(shape).copy_(train::denominator_tensor(a.slots));
        rig.optimizer.zero_grad();
        rig.optimizer.set_lr(1e-3);
        rig.step_loss.zero_();
        const int before = probe.count();
        cache.run(shape, [&] {
          train::train_micro_batch(*rig.features, *rig.head, buf, denominators.at(shape), false, rig.step_loss,
                                   rig.metrics);
        });
        cache.run(device::kOptimizerUpdate, [&] { rig.optimizer.step(rig.step_loss); });
        r.sync_ops += probe.count() - before;
        r.losses.push_back(rig.step_loss.item<double>());  // read after the step, outside the graphs
      }
      cache.synchronize();
      r.shapes = static_cast<std::int64_t>(buffers.size());
      for (const auto& [shape, n] : calls)
        if (cache.graphed(shape)) {
          ++r.graphed_shapes;
          r.graphed_calls += n;
        }
      r.captured = cache.captured_count();
      r.replays = cache.replay_count();
      r.peak_reserved = static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak);
      for (const auto& [name, p] : head::named_parameters(*rig.head)) r.params.push_back(p.detach().cpu());
      return r;
    };
    auto eager = run(0);
    auto graphed = run(64);
    CHECK(eager.captured == 0);
    CHECK(eager.replays == 0);
    // Every shape met (tiny ones, far inside the memory budget) and the update: captured once each;
    // every later call of a shape replays its graph with the batch's anchors in the shape's buffer.
    CHECK(graphed.graphed_shapes == graphed.shapes);
    CHECK(graphed.captured == graphed.shapes + 1);
    CHECK(graphed.replays == (graphed.graphed_calls - graphed.graphed_shapes) + (kSteps - 1));
    CHECK(graphed.sync_ops == 0);
    test::check_graphed_like_eager(eager, graphed);
  }
#endif
}
