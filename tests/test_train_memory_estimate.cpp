// The memory estimator (train/memory_estimate.h): its parts move the way the step's memory does
// (recomputation, the chunked loss, tokens, K, bf16, the online target), `train --dry_run` prints it
// for Llama-3.1-8B shapes from a config.json alone, and a step that cannot fit is refused by name
// (exit 2) before training, unless --check_memory=false; train logs the prediction; recompute_activations
// auto picks the first mode whose step fits. The formula's error against the
// measured peaks is in docs/benchmarks.md (scripts/bench/bench_head_step.sh prints both).
#include <catch2/catch.hpp>

#include "eagle/config/options.h"
#include "eagle/device/memory.h"
#include "eagle/target/target.h"
#include "eagle/train/memory_estimate.h"
#include "helpers.h"

using namespace eagle;
using eagle::test::run_cli;
using eagle::test::TempDir;

namespace {

const std::string kLlama8b = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/llama3.1-8b-config";

train::StepShape bench_shape(std::int64_t tokens, std::int64_t k, head::RecomputeMode mode, std::int64_t chunk) {
  train::StepShape s;  // issue 29's bench head: H 1024, 16 heads, 8 KV heads, I 2816, V_d 8192
  auto& c = s.head;
  c.hidden_size = c.target_hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.vocab_size = c.draft_vocab_size = 8192;
  c.aux_layer_ids = {2, 8, 13};
  c.ttt_steps = k;
  c.recompute = mode;
  c.loss_chunk_size = chunk;
  s.tokens = tokens;
  s.target_element_bytes = 4;
  return s;
}

double peak(const train::StepShape& s) { return train::estimate_step_memory(s).peak; }

}  // namespace

TEST_CASE("the memory estimate follows recomputation, the loss chunks, tokens, K, bf16 and the target", "[train]") {
  using M = head::RecomputeMode;
  const auto layer = peak(bench_shape(8192, 7, M::layer, 1024)), mlp = peak(bench_shape(8192, 7, M::mlp, 1024));
  const auto off = peak(bench_shape(8192, 7, M::off, 1024)), before = peak(bench_shape(8192, 7, M::off, 0));
  CHECK(layer < mlp);
  CHECK(mlp < off);
  CHECK(off < before);
  CHECK(layer * 3 < before);  // issue 29's goal at T 8192, K 7
  // Linear in tokens (equal increments), more with K, less in bf16.
  const auto a = peak(bench_shape(8192, 7, M::layer, 1024)), b = peak(bench_shape(16384, 7, M::layer, 1024));
  const auto c = peak(bench_shape(24576, 7, M::layer, 1024));
  CHECK((c - b) == Approx(b - a).epsilon(1e-6));
  CHECK(peak(bench_shape(8192, 3, M::layer, 1024)) < a);
  auto bf16 = bench_shape(8192, 7, M::layer, 1024);
  bf16.bf16 = true;
  CHECK(peak(bf16) < a);
  // Online: the target's weights (Llama-3.1-8B in bf16: about 15 GiB) and its forward.
  const auto target = target::TargetConfig::from_model_dir(kLlama8b);
  auto online = bench_shape(8192, 7, M::layer, 1024);
  online.target = target;
  online.target_element_bytes = 2;
  const auto e = train::estimate_step_memory(online);
  CHECK(e.part("target weights").bytes / (1 << 30) == Approx(14.96).epsilon(0.01));
  CHECK(e.peak > peak(bench_shape(8192, 7, M::layer, 1024)) + e.part("target weights").bytes);
  CHECK_THROWS(e.part("nothing"));
}

TEST_CASE("train --dry_run prints the predicted peak for Llama-3.1-8B shapes from its config.json alone", "[train]") {
  const std::string base = "train --dry_run --config " + std::string(EAGLE_SOURCE_DIR) +
                           "/configs/llama3.1-8b-eagle3.json --model_name_or_path " + kLlama8b;
  auto r = run_cli(base + " --training_seq_len 32768 --max_tokens_per_batch 32768 --device cuda");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);  // no CUDA device here: the available memory is unknown, not refused
  CHECK(r.output.find("32768 tokens per micro-batch, K 7") != std::string::npos);
  CHECK(r.output.find("target weights") != std::string::npos);
  CHECK(r.output.find("peak (resident + the larger phase)") != std::string::npos);
  // On this machine's CPU a 128k-token step of the 8B target does not fit: refused by name.
  auto big = run_cli(base + " --training_seq_len 131072 --max_tokens_per_batch 131072 --device cpu");
  INFO(big.output);
  CHECK(big.exit_code == 2);
  CHECK(big.output.find("exceeds the memory available") != std::string::npos);
  CHECK(big.output.find("MemAvailable") != std::string::npos);
  auto forced = run_cli(base +
                        " --training_seq_len 131072 --max_tokens_per_batch 131072 --device cpu "
                        "--check_memory=false");
  CHECK(forced.exit_code == 0);
  CHECK(forced.output.find("does not fit") != std::string::npos);
}

TEST_CASE("train logs the predicted peak of its largest micro-batch before the first step", "[train]") {
  // The refusal itself is check_step_fits, the same as --dry_run's above (a tiny target's step fits).
  TempDir dir;
  auto ok = run_cli("train " + eagle::test::smoke_args() + " --max_steps 1 --eval_steps 0 --output_dir " +
                    (dir / "ok").string());
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.output.find("predicted peak memory of a step") != std::string::npos);
  CHECK(ok.output.find("GiB available") != std::string::npos);
}

TEST_CASE("recompute_activations auto takes the first of off, mlp and layer whose step fits the memory", "[train]") {
  using M = head::RecomputeMode;
  CHECK(config::Options().recompute_activations == "auto");
  const auto target = target::TargetConfig::from_model_dir(kLlama8b);
  const torch::Device cpu("cpu");
  const auto available = device::available_memory(cpu);
  REQUIRE(available);
  const double budget = train::kAutoShare * static_cast<double>(available->bytes);
  config::Options o;
  o.features_path = "stored";  // offline: no target weights or forward in the step
  o.per_device_train_batch_size = 1;
  const auto head = bench_shape(1, 7, M::layer, 1024).head;
  auto at = [&](std::int64_t t, M mode) {
    auto h = head;
    h.recompute = mode;
    o.training_seq_len = t;
    return train::estimate_step_memory(train::step_shape(o, target, h)).peak;
  };
  // Short rows fit without recomputation: nothing is recomputed (no time spent on it).
  REQUIRE(at(256, M::off) < 0.5 * budget);
  CHECK(train::resolve_recompute(o, target, head, cpu, false) == M::off);
  // Rows where the kept path takes well over the budget: a recomputing mode whose step fits.
  std::int64_t t = 256;
  while (at(t, M::off) < 1.2 * budget) t = t * 5 / 4;  // off takes about 2.7x what layer does here
  REQUIRE(at(t, M::layer) < 0.9 * budget);
  const auto chosen = train::resolve_recompute(o, target, head, cpu, false);
  CHECK(chosen != M::off);
  CHECK(at(t, chosen) <= 1.1 * budget);
  // So long that nothing fits: layer, the least memory (check_step_memory then refuses by name).
  while (at(t, M::layer) < 2 * budget) t *= 2;
  CHECK(train::resolve_recompute(o, target, head, cpu, false) == M::layer);
  // A named mode is taken as given.
  o.recompute_activations = "mlp";
  CHECK(train::resolve_recompute(o, target, head, cpu, false) == M::mlp);
}
