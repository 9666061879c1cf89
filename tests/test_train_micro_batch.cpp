// The trainer's step body on the real components (tiny Llama fixture, EAGLE-3 head, smoke data,
// sampler, AdamW), padded and packed: on CPU it reads nothing back on the host (what lets a GPU
// capture it; dynamic-NTK RoPE included); on a GPU, each batch shape is captured once and replayed,
// graphed steps equal eager ones in fp32, and the graphs' memory stays near eager's.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "eagle/config/resolve.h"
#include "eagle/data/sampler.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/device/runtime.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/head/draft_spec.h"
#include "eagle/head/loss.h"
#include "eagle/train/micro_batch.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"
#include "helpers.h"
#include "host_sync_probe.h"
#include "step_rig.h"
#include "train_helpers.h"

#ifdef EAGLE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

using namespace eagle;
namespace fs = std::filesystem;

namespace {

config::Options smoke_options(bool packed, const std::string& model_dir = "") {
  config::Options o = test::smoke_options();
  if (!model_dir.empty()) o.model_name_or_path = model_dir;
  o.validation_fraction = 0;
  o.padding_free = packed;
  o.training_seq_len = 128;
  o.bucket_granularity = 32;
  return o;
}

using Rig = test::StepRig;

// A copy of the tiny Llama fixture whose config asks for dynamic-NTK RoPE (scaling from 64
// positions, so the smoke rows exceed it).
fs::path dynamic_rope_model(const test::TempDir& dir) {
  const fs::path src = fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/models/tiny-llama";
  auto cfg = nlohmann::json::parse(test::read_file(src / "config.json"));
  cfg["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "dynamic"}, {"factor", 2.0}};
  cfg["max_position_embeddings"] = 64;
  test::write_file(dir / "config.json", cfg.dump());
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  return dir.path();
}

}  // namespace

TEST_CASE("the training step body reads nothing back on the host, padded and packed", "[train]") {
  test::TempDir dir;
  const auto dynamic = dynamic_rope_model(dir);
  for (bool packed : {false, true}) {
    for (const std::string& model_dir : {std::string(), dynamic.string()}) {
      INFO("packed " << packed << ", model " << (model_dir.empty() ? "tiny-llama" : "dynamic RoPE"));
      Rig rig(smoke_options(packed, model_dir), torch::kCPU);
      for (int step = 0; step < 2; ++step) {
        auto batch = data::make_batch(*rig.inputs.train, rig.sampler.next());
        CHECK(batch.packed == packed);
        auto buffers = features::allocate_like(batch, torch::kCPU, rig.max_segments);
        features::copy_into(batch, buffers);
        auto denominators = train::denominator_tensor(head::count_loss_positions(batch, rig.head->config().steps()));
        rig.optimizer.zero_grad();
        // What the captured graphs run: (a) the shape's forward + backward, (b) the update. AdamW's
        // fused CPU kernel reads the lr and step tensors on the host where its CUDA kernel reads
        // them on the device; the [gpu] test counts without that exemption.
        test::HostSyncProbe probe({"aten::_fused_adamw_"});
        train::train_micro_batch(*rig.features, *rig.head, buffers, denominators, false, rig.step_loss, rig.metrics);
        rig.optimizer.step(rig.step_loss);
        INFO(probe.names());
        CHECK(probe.count() == 0);
      }
      CHECK(std::isfinite(rig.step_loss.item<double>()));
    }
  }
}

TEST_CASE("graphed training steps equal eager ones, one capture per shape, then replays", "[train][gpu]") {
#ifdef EAGLE_WITH_CUDA
  for (bool packed : {false, true}) {
    INFO("packed " << packed);
    struct Result {
      std::vector<double> losses;
      std::vector<torch::Tensor> params;
      std::int64_t captured = 0, replays = 0, shapes = 0, calls = 0, sync_ops = 0;
      double peak_reserved = 0;
    };
    auto run = [&](std::int64_t max_graphs) {
      Result r;
      Rig rig(smoke_options(packed), torch::kCUDA);
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::resetPeakStats(0);
      const auto counts = rig.sampler.shape_counts(0);
      device::CudaGraphCache cache(rig.device, max_graphs,
                                   device::most_frequent_shapes(counts, static_cast<std::int64_t>(counts.size())), "test");
      std::map<data::Shape, features::BatchTensors> buffers;
      std::map<data::Shape, torch::Tensor> denominators;
      test::HostSyncProbe probe;
      for (int step = 0; step < 12; ++step) {
        auto batch = data::make_batch(*rig.inputs.train, rig.sampler.next());
        const data::Shape shape{batch.rows, batch.length};
        if (!buffers.count(shape)) {
          buffers.emplace(shape, features::allocate_like(batch, rig.device, rig.max_segments));
          denominators.emplace(shape, torch::zeros({rig.head->config().steps()}, rig.step_loss.options()));
        }
        ++r.calls;
        features::copy_into(batch, buffers.at(shape));
        denominators.at(shape).copy_(
            train::denominator_tensor(head::count_loss_positions(batch, rig.head->config().steps())));
        rig.optimizer.zero_grad();
        rig.optimizer.set_lr(1e-3);
        rig.step_loss.zero_();
        const int before = probe.count();
        cache.run(shape, [&] {
          train::train_micro_batch(*rig.features, *rig.head, buffers.at(shape), denominators.at(shape), false,
                                   rig.step_loss, rig.metrics);
        });
        cache.run(device::kOptimizerUpdate, [&] { rig.optimizer.step(rig.step_loss); });
        r.sync_ops += probe.count() - before;
        r.losses.push_back(rig.step_loss.item<double>());  // read after the step, outside the graphs
      }
      cache.synchronize();
      r.shapes = static_cast<std::int64_t>(buffers.size());
      r.captured = cache.captured_count();
      r.replays = cache.replay_count();
      r.peak_reserved = static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak);
      for (const auto& [name, p] : head::named_parameters(*rig.head)) r.params.push_back(p.detach().cpu());
      return r;
    };
    auto eager = run(0);
    auto graphed = run(8);
    CHECK(eager.captured == 0);
    // Every shape of the run (at most 8 here) and the optimizer update: captured once each; every
    // call after a shape's first replays.
    CHECK(graphed.captured == graphed.shapes + 1);
    CHECK(graphed.replays == 2 * graphed.calls - (graphed.shapes + 1));
    CHECK(graphed.sync_ops == 0);
    test::check_graphed_like_eager(eager, graphed);
  }
#endif
}
