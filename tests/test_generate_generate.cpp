// Batched generation equals transformers' greedy generate() token for token on every fixture model
// (tests/fixtures/reference/generate.json, made by scripts/make_generate_fixtures.py): one row, all
// prompts of different lengths in one batch, fewer rows than prompts (finished rows take the next
// prompt), an end id from generation_config.json, and two turns. Then sampling: seeded, top_p.
#include <torch/torch.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "eagle/generate/generate.h"
#include "helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/";

const json& fixture() {
  static const json j =
      json::parse(test::read_file(fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/reference/generate.json"));
  return j;
}

// A sample asking for one reply to `prompt` (the one trained placeholder token is replaced).
data::Sample ask(const json& prompt) {
  data::Sample s{prompt.get<std::vector<data::TokenId>>(), {}};
  s.loss_mask.assign(s.input_ids.size(), 0);
  s.input_ids.push_back(7);
  s.loss_mask.push_back(1);
  return s;
}

generate::GenerateSettings settings(std::int64_t rows, const std::vector<std::int64_t>& end_ids) {
  auto o = config::Options{};
  o.generate_batch_size = rows;
  o.max_new_tokens = fixture()["max_new_tokens"].get<std::int64_t>();
  o.training_seq_len = 128;
  return generate::GenerateSettings::from(o, end_ids);
}

// The outputs of every sample, in input order (checking that they come in order).
std::vector<data::Sample> run(const target::TargetModel& m, const std::vector<data::Sample>& samples,
                              const generate::GenerateSettings& s, generate::GenerateResult* result = nullptr) {
  std::vector<data::Sample> out;
  auto r =
      generate::generate(m, data::Dataset::from_samples(samples), 0, s, [&](std::size_t i, const data::Regeneration& g) {
        CHECK(i == out.size());
        CHECK(g.finished());
        out.push_back(g.output());
      });
  CHECK(r.samples == samples.size());
  if (result) *result = r;
  return out;
}

// The reply after the prompt of a one-turn output.
std::vector<data::TokenId> reply(const data::Sample& out, std::size_t prompt_len) {
  for (std::size_t i = 0; i < out.loss_mask.size(); ++i) CHECK(out.loss_mask[i] == (i < prompt_len ? 0 : 1));
  return {out.input_ids.begin() + static_cast<std::ptrdiff_t>(prompt_len), out.input_ids.end()};
}

}  // namespace

TEST_CASE("greedy generation equals transformers' generate, alone and batched", "[generate]") {
  for (const auto& [name, f] : fixture()["families"].items()) {
    INFO(name);
    auto m = target::TargetModel::load(kModels + name, torch::kFloat32, torch::kCPU);
    const auto end_ids = target::generation_end_ids(kModels + name, m.config());
    CHECK(end_ids == f["end_ids"].get<std::vector<std::int64_t>>());
    std::vector<data::Sample> samples;
    for (const auto& c : f["prompts"]) samples.push_back(ask(c["prompt"]));
    // 1 row (one prompt at a time), 2 rows (rows refilled as prompts finish), 4 rows (all at once).
    for (std::int64_t rows : {1, 2, 4}) {
      INFO("rows " << rows);
      generate::GenerateResult result;
      auto outs = run(m, samples, settings(rows, end_ids), &result);
      std::uint64_t tokens = 0;
      for (std::size_t i = 0; i < outs.size(); ++i) {
        const auto& c = f["prompts"][i];
        CHECK(reply(outs[i], c["prompt"].size()) == c["reply"].get<std::vector<data::TokenId>>());
        tokens += c["reply"].size();
      }
      CHECK(result.generated_tokens == tokens);
      CHECK(result.graphed_shapes == 0);
    }
  }
}

TEST_CASE("a reply stops at an end id of generation_config.json", "[generate]") {
  for (const auto& [name, f] : fixture()["families"].items()) {
    INFO(name);
    test::TempDir dir;
    for (const char* file : {"config.json", "model.safetensors"})
      fs::copy_file(kModels + name + "/" + file, dir / file);
    const auto& e = f["end"];
    test::write_file(dir / "generation_config.json",
                     json{{"eos_token_id", e["generation_config_eos_token_id"]}, {"do_sample", false}}.dump());
    auto m = target::TargetModel::load(dir.path().string(), torch::kFloat32, torch::kCPU);
    const auto end_ids = target::generation_end_ids(dir.path().string(), m.config());
    CHECK(end_ids.size() == f["end_ids"].size() + 1);
    auto outs = run(m, {ask(e["prompt"]), ask(f["prompts"][0]["prompt"])}, settings(2, end_ids));
    CHECK(reply(outs[0], e["prompt"].size()) == e["reply"].get<std::vector<data::TokenId>>());
  }
}

TEST_CASE("two turns: the user turns stay, both replies are the target's", "[generate]") {
  for (const auto& [name, f] : fixture()["families"].items()) {
    INFO(name);
    auto m = target::TargetModel::load(kModels + name, torch::kFloat32, torch::kCPU);
    const auto& t = f["two_turns"];
    data::Sample s{t["input_ids"].get<std::vector<data::TokenId>>(), t["loss_mask"].get<std::vector<std::uint8_t>>()};
    // Beside a one-turn sample, with a row each and with one row for both.
    for (std::int64_t rows : {1, 2}) {
      auto outs =
          run(m, {ask(f["prompts"][1]["prompt"]), s}, settings(rows, f["end_ids"].get<std::vector<std::int64_t>>()));
      CHECK(outs[1].input_ids == t["expected_ids"].get<std::vector<data::TokenId>>());
      CHECK(outs[1].loss_mask == t["expected_mask"].get<std::vector<std::uint8_t>>());
    }
  }
}

TEST_CASE("sampling: seeded, top_p near 0 is greedy, excluded tokens are never drawn", "[generate]") {
  const auto& f = fixture()["families"]["tiny-llama"];
  auto m = target::TargetModel::load(kModels + "tiny-llama", torch::kFloat32, torch::kCPU);
  std::vector<data::Sample> samples;
  for (const auto& c : f["prompts"]) samples.push_back(ask(c["prompt"]));
  auto s = settings(4, {});
  s.temperature = 1.0;
  const auto a = run(m, samples, s), b = run(m, samples, s);
  s.seed = 43;
  const auto c = run(m, samples, s);
  bool same_ab = true, same_ac = true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    same_ab = same_ab && a[i].input_ids == b[i].input_ids;
    same_ac = same_ac && a[i].input_ids == c[i].input_ids;
  }
  CHECK(same_ab);
  CHECK(!same_ac);
  s.top_p = 1e-6;  // only the most likely token is left: greedy, without end ids
  const auto greedy = run(m, samples, settings(4, {}));
  const auto nucleus = run(m, samples, s);
  for (std::size_t i = 0; i < greedy.size(); ++i) CHECK(nucleus[i].input_ids == greedy[i].input_ids);

  // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two, in proportion 5:3.
  auto logits = torch::log(torch::tensor({0.5, 0.3, 0.15, 0.05}, torch::kFloat32)).repeat({20000, 1});
  generate::TokenChooser chooser(torch::kCPU, 1.0, 0.7, 1);
  auto counts = torch::bincount(chooser.choose(logits), {}, 4);
  CHECK(counts[2].item<std::int64_t>() == 0);
  CHECK(counts[3].item<std::int64_t>() == 0);
  CHECK(counts[0].item<double>() / 20000.0 == Approx(0.625).margin(0.015));
  generate::TokenChooser all(torch::kCPU, 1.0, 1.0, 1);
  CHECK(torch::bincount(all.choose(logits), {}, 4)[3].item<double>() / 20000.0 == Approx(0.05).margin(0.008));
}

TEST_CASE("on CUDA the graphed decode steps generate what the CPU generates", "[generate][gpu]") {
  for (const auto& [name, f] : fixture()["families"].items()) {
    INFO(name);
    auto cpu = target::TargetModel::load(kModels + name, torch::kFloat32, torch::kCPU);
    auto gpu = target::TargetModel::load(kModels + name, torch::kFloat32, torch::kCUDA);
    std::vector<data::Sample> samples;
    for (const auto& c : f["prompts"]) samples.push_back(ask(c["prompt"]));
    samples.push_back({f["two_turns"]["input_ids"].get<std::vector<data::TokenId>>(),
                       f["two_turns"]["loss_mask"].get<std::vector<std::uint8_t>>()});
    const auto end_ids = f["end_ids"].get<std::vector<std::int64_t>>();
    generate::GenerateResult result;
    auto on_gpu = run(gpu, samples, settings(3, end_ids), &result);
    auto on_cpu = run(cpu, samples, settings(3, end_ids));
    CHECK(result.graphed_shapes > 0);
    for (std::size_t i = 0; i < samples.size(); ++i) CHECK(on_gpu[i].input_ids == on_cpu[i].input_ids);
    for (std::size_t i = 0; i < f["prompts"].size(); ++i)
      CHECK(reply(on_gpu[i], f["prompts"][i]["prompt"].size()) ==
            f["prompts"][i]["reply"].get<std::vector<data::TokenId>>());
  }
}

TEST_CASE("generate refuses a KV cache that cannot fit before allocating it, naming the options (issue 41 item 16)",
          "[generate]") {
  test::TempDir dir;
  test::write_file(dir / "in.jsonl", R"({"input_ids": [5, 9, 7], "loss_mask": [0, 0, 1]})"
                                     "\n");
  auto r = test::run_cli("generate --model_name_or_path " + kModels + "tiny-llama --data_path " +
                         (dir / "in.jsonl").string() + " --output " + (dir / "out.jsonl").string() +
                         " --generate_batch_size 4096 --training_seq_len 1048576 --device cpu --num_threads 1");
  INFO(r.output);
  CHECK(r.exit_code == 2);  // was bad_alloc (exit 1)
  CHECK_THAT(r.output, Catch::Contains("KV cache does not fit") && Catch::Contains("generate_batch_size") &&
                           Catch::Contains("training_seq_len") && Catch::Contains("MemAvailable"));
}
