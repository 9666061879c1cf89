// Training from stored features equals training with the target in the step: from a dump of this
// target (float32) the losses, evaluation and weights of N steps match the online run's within
// 1e-5; from a speculators folder made by its own tooling (HF transformers hidden states) the
// losses match too. Without a target the run reports no AR; features of another target or longer
// than the run's training_seq_len are refused.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "data_helpers.h"
#include "eagle/config/resolve.h"
#include "eagle/data/speculators_folder.h"
#include "eagle/features/dump.h"
#include "eagle/model/safetensors.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "train_helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kRoot = EAGLE_SOURCE_DIR;

config::Options options(const fs::path& out) {
  config::Options o = test::smoke_options();
  o.output_dir = out.string();
  o.training_seq_len = 128;
  o.bucket_granularity = 32;
  o.max_steps = 5;
  o.logging_steps = 1;
  o.eval_steps = 0;
  o.save_steps = 0;
  o.eval_num_prompts = 0;
  return o;
}

// The run's logged values by step: training loss lines and the evaluation line.
struct Logged {
  std::map<std::int64_t, double> loss;
  json eval;
};
Logged logged(const fs::path& run) {
  Logged out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = json::parse(line);
    if (j.contains("eval_loss")) out.eval = j;
    if (j.contains("loss") && !j["loss"].is_null()) out.loss[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

void check_close(const std::map<std::int64_t, double>& a, const std::map<std::int64_t, double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (const auto& [step, v] : a) {
    INFO("step " << step);
    CHECK(std::abs(v - b.at(step)) <= tol);
  }
}

double max_weight_difference(const fs::path& a, const fs::path& b) {
  auto ta = model::load_safetensors(a.string()), tb = model::load_safetensors(b.string());
  REQUIRE(ta.size() == tb.size());
  double worst = 0;
  for (const auto& [name, t] : ta) {
    REQUIRE(tb.count(name));
    if (!t.is_floating_point()) {
      CHECK(torch::equal(t, tb.at(name)));
      continue;
    }
    worst = std::max(worst, (t.to(torch::kFloat64) - tb.at(name).to(torch::kFloat64)).abs().max().item<double>());
  }
  return worst;
}

}  // namespace

TEST_CASE("training from dumped float32 features equals training with the target in the step", "[features]") {
  test::TempDir tmp;
  auto online = options(tmp / "online");
  const auto on = train::train(online, {"eagle-train", "train"});

  auto dump = options(tmp / "unused");
  dump.output = (tmp / "features").string();
  dump.features_dtype = config::TargetDtype::float32;
  dump.features_shard_mb = 1;  // several shards
  const auto d = features::dump_features(dump);
  CHECK(d.shards > 3);
  CHECK(d.bytes_per_token == (3 * 64 + 64) * 4 + 4);

  // No target at all: the folder holds the data, the features and the target's ends.
  auto offline = options(tmp / "offline");
  offline.features_path = dump.output;
  offline.data_path.clear();
  offline.model_name_or_path.clear();
  const auto off = train::train(offline, {"eagle-train", "train"});

  CHECK(off.real_tokens == on.real_tokens);
  const auto a = logged(tmp / "online"), b = logged(tmp / "offline");
  check_close(a.loss, b.loss, 1e-5);
  REQUIRE(a.eval.contains("eval_loss"));
  CHECK(std::abs(a.eval["eval_loss"].get<double>() - b.eval["eval_loss"].get<double>()) <= 1e-5);
  CHECK(a.eval["eval_acc"] == b.eval["eval_acc"]);
  CHECK(max_weight_difference(tmp / "online" / "checkpoint-5" / "model.safetensors",
                              tmp / "offline" / "checkpoint-5" / "model.safetensors") <= 1e-5);
  // The head names the target the features came from.
  auto cfg = json::parse(test::read_file(tmp / "offline" / "checkpoint-5" / "config.json"));
  CHECK_THAT(cfg.dump(), Catch::Contains("tiny-llama"));
  REQUIRE(off.eval);
  CHECK_FALSE(off.eval->acceptance.ar.has_value());  // AR needs the target

  SECTION("with the target given, the AR is measured; another target is refused") {
    auto with_target = options(tmp / "with-target");
    with_target.features_path = dump.output;
    with_target.data_path.clear();
    with_target.max_steps = 2;
    with_target.eval_num_prompts = 2;
    with_target.eval_max_new_tokens = 8;
    const auto measured = train::train(with_target, {"eagle-train", "train"});
    CHECK((measured.eval && measured.eval->acceptance.ar));

    auto other = options(tmp / "other");
    other.features_path = dump.output;
    other.model_name_or_path = kRoot + "/tests/fixtures/models/tiny-llama3";
    CHECK_THAT(test::train_error(other).format(), Catch::Contains("computed by another target"));
  }
  SECTION("a run with a shorter training_seq_len than the dump is refused") {
    auto shorter = options(tmp / "shorter");
    shorter.features_path = dump.output;
    shorter.training_seq_len = 64;
    CHECK_THAT(test::train_error(shorter).format(), Catch::Contains("longer than training_seq_len"));
  }
}

TEST_CASE("training from a speculators folder gives the online losses on the same target", "[features]") {
  test::TempDir tmp;
  const std::string folder = kRoot + "/tests/fixtures/speculators/tiny-llama";
  // The same samples as JSON lines for the online run.
  const auto rows = data::read_speculators_folder(folder, test::load_options());
  std::string jsonl;
  for (const auto& s : test::all_samples(rows.samples))
    jsonl += json{{"input_ids", s.input_ids}, {"loss_mask", s.loss_mask}}.dump() + "\n";
  test::write_file(tmp / "samples.jsonl", jsonl);

  auto online = options(tmp / "online");
  online.data_path = (tmp / "samples.jsonl").string();
  online.validation_fraction = 0;
  online.max_steps = 3;
  train::train(online, {"eagle-train", "train"});

  auto offline = online;
  offline.output_dir = (tmp / "offline").string();
  offline.data_path.clear();
  offline.features_path = folder;  // its final norm and LM head come from model_name_or_path
  train::train(offline, {"eagle-train", "train"});

  const auto a = logged(tmp / "online"), b = logged(tmp / "offline");
  REQUIRE(a.loss.count(1));
  // The hidden states come from transformers, the online ones from eagle-train's forward: equal up
  // to float32 rounding.
  CHECK(std::abs(a.loss.at(1) - b.loss.at(1)) <= 1e-5);
  check_close(a.loss, b.loss, 1e-4);

  auto no_target = offline;
  no_target.output_dir = (tmp / "no-target").string();
  no_target.model_name_or_path.clear();
  CHECK_THAT(test::train_error(no_target).format(), Catch::Contains("needs its target"));
}
