// Every newer target family through the real trainer and the commands, as subprocesses on its tiny
// fixture: trains padded and padding-free (finite losses, the step's AR line), exports a speculators
// head naming the verifier's architecture, evaluates the chain, tree and temperature-1 ARs, regenerates
// replies and dumps features. Hybrid linear-attention targets (Qwen3.5, Qwen3-Next): their batched
// (ragged) decoding is checked against one prompt at a time (the same chain AR, the same greedy replies
// from generate), and a chain-shaped tree against the chain's AR.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"

using eagle::test::logged_losses;
using eagle::test::read_file;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Family {
  const char* fixture;  // tests/fixtures/models/<fixture>
  bool hybrid;          // Gated DeltaNet layers (Qwen3.5, Qwen3-Next)
};

// The 2026 families, one pass each. ADD NEW FAMILIES HERE (hybrid true for Gated DeltaNet layers).
const std::vector<Family> kFamilies = {
    {"tiny-deepseek-v3", false},    // MLA, sigmoid grouped MoE
    {"tiny-glm4-moe", false},       // GLM-4.5: sigmoid grouped MoE, partial RoPE
    {"tiny-glm4-moe-lite", false},  // GLM-4.7-Flash: MLA
    {"tiny-qwen3-next", true},      // Gated DeltaNet + gated attention, MoE with a shared expert
    {"tiny-qwen3-5", true},         // the same layers, dense
    {"tiny-qwen3-5-moe", true},     // every layer MoE, no dense intermediate_size
    {"tiny-qwen3-5-vl", true},      // the multimodal wrapper read as its text model
    {"tiny-gemma4", false},         // per-layer head widths, KV sharing, per-layer inputs
    {"tiny-deepseek-v2", false},    // MLA without q LoRA, softmax group-limited MoE
    {"tiny-gemma4-moe", false},     // Gemma 4's router and experts beside the dense MLP
};

const std::string kRoot = EAGLE_SOURCE_DIR;

// The JSON an `eval --json` run prints after its log lines.
json printed_json(const eagle::test::ProcessResult& r) {
  const auto at = r.output.find("{\n");
  REQUIRE(at != std::string::npos);
  return json::parse(r.output.substr(at));
}

std::vector<json> lines_of(const fs::path& p) {
  std::vector<json> out;
  std::istringstream in(read_file(p));
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

}  // namespace

TEST_CASE("each 2026 family trains, exports, evaluates, regenerates and dumps features", "[train]") {
  TempDir dir;
  // The first 16 smoke samples (byte-level ids below 230), cut to 128 tokens: about 10 train and 3
  // held-out; the first 3 whole for generate and dump-features.
  std::string sixteen, three;
  const auto smoke = read_jsonl(kRoot + "/tests/fixtures/data/smoke.jsonl");
  for (std::size_t i = 0; i < 16; ++i) {
    sixteen += smoke[i].dump() + "\n";
    if (i < 3) three += smoke[i].dump() + "\n";
  }
  eagle::test::write_file(dir / "data.jsonl", sixteen);
  eagle::test::write_file(dir / "few.jsonl", three);
  const std::string data = " --data_path " + (dir / "data.jsonl").string() +
                           " --training_seq_len 128 --validation_fraction 0.25 --num_threads 1";
  const std::string ar = " --eval_num_prompts 2 --eval_max_new_tokens 8";

  for (const auto& family : kFamilies) {
    INFO(family.fixture);
    const auto model = kRoot + "/tests/fixtures/models/" + family.fixture;
    const auto config = json::parse(read_file(fs::path(model) / "config.json"));
    const auto arch = config["architectures"][0].get<std::string>();
    const auto& text = config.contains("text_config") ? config["text_config"] : config;
    const auto hidden = text["hidden_size"].get<std::int64_t>();
    const std::string common = "--config " + kRoot + "/configs/smoke.json --model_name_or_path " + model + data;
    const auto family_dir = dir / family.fixture;
    fs::create_directories(family_dir);

    for (const char* padding_free : {"false", "true"}) {
      INFO("padding_free " << padding_free);
      const auto out = family_dir / (std::string("run-") + padding_free);
      auto r = run_cli("train " + common + " --padding_free=" + padding_free +
                       " --max_steps 2 --logging_steps 1 --eval_steps 2 --save_steps 2 --ttt_steps 2"
                       " --per_device_train_batch_size 2" +
                       ar + " --output_dir " + out.string());  // the default eval_batch_size: batched
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("target " + arch) && Catch::Contains("step 2 AR: "));
      const auto losses = logged_losses(out);
      REQUIRE(losses.size() == 2);
      for (const auto& [step, loss] : losses) CHECK(std::isfinite(loss));
    }
    const auto ckpt = family_dir / "run-true" / "checkpoint-2";

    auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " +
                      (family_dir / "speculators").string());
    INFO(ex.output);
    REQUIRE(ex.exit_code == 0);
    const auto spec = json::parse(read_file(family_dir / "speculators" / "config.json"));
    CHECK(spec["speculators_config"]["verifier"]["architectures"] == json::array({arch}));

    // Chain (batched where the target can), tree and temperature-1 ARs from one eval.
    const std::string eval = "eval --json --checkpoint " + ckpt.string() + " " + common + ar;
    auto e = run_cli(eval + " --eval_tree_topk 2 --eval_tree_draft_tokens 4 --eval_temperature 1");
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
    const auto j = printed_json(e);
    CHECK(j["ar"].get<double>() >= 1.0);
    CHECK(j["tree"] == json::array({2, 2, 4}));  // steps (the head's TTT steps), topk, draft tokens
    // A round accepts at most the tree's depth (2 steps) and the target's own token.
    CHECK((j["tree_ar"].get<double>() >= 1.0 && j["tree_ar"].get<double>() <= 3.0));
    CHECK(j["temp_ar"].get<double>() >= 1.0);
    CHECK((j["tree_temp_ar"].get<double>() >= 1.0 && j["tree_temp_ar"].get<double>() <= 3.0));
    if (family.hybrid) {
      // A chain-shaped tree (top 1, steps + 1 tokens) through forward_tree and accept_tree_path: the chain's AR.
      auto one = run_cli(eval + " --eval_tree_topk 1 --eval_tree_draft_tokens 3");
      INFO(one.output);
      REQUIRE(one.exit_code == 0);
      const auto k = printed_json(one);
      CHECK(k["tree"] == json::array({2, 1, 3}));
      CHECK(k["tree_ar"] == k["ar"]);
      CHECK(k["ar"] == j["ar"]);
      // The chain batched (the default eval_batch_size: both prompts at once, each row its own Gated DeltaNet
      // states, rolled back to its accepted prefix every round) and one prompt at a time: the same AR.
      auto batched = run_cli(eval);
      INFO(batched.output);
      REQUIRE(batched.exit_code == 0);
      CHECK_THAT(batched.output, Catch::Contains("prompts (2 at a time)"));
      auto single = run_cli(eval + " --eval_batch_size 1");
      INFO(single.output);
      REQUIRE(single.exit_code == 0);
      CHECK_THAT(single.output, Catch::Contains("prompts (1 at a time)"));
      CHECK(printed_json(single)["ar"] == printed_json(batched)["ar"]);
      CHECK(printed_json(batched)["ar"] == j["ar"]);
    }
    if (config.contains("image_token_id")) {
      // A multimodal wrapper: eval refuses data holding a media placeholder, by line and name.
      auto lines = lines_of(dir / "few.jsonl");
      lines[1]["input_ids"][4] = config["image_token_id"];
      std::string media;
      for (const auto& l : lines) media += l.dump() + "\n";
      eagle::test::write_file(family_dir / "media.jsonl", media);
      auto m = run_cli(eval + " --data_path " + (family_dir / "media.jsonl").string());
      INFO(m.output);
      CHECK(m.exit_code == 3);
      CHECK_THAT(m.output,
                 Catch::Contains("media.jsonl: line 2, field input_ids[4]") && Catch::Contains("image_token_id"));
    }

    // generate: a couple of replies, two rows at a time (ragged rows of their own lengths; a finished row takes
    // the third sample from column 0).
    const std::string generate = "generate --model_name_or_path " + model + " --data_path " +
                                 (dir / "few.jsonl").string() +
                                 " --max_new_tokens 4 --training_seq_len 256 --device cpu --num_threads 1";
    const auto replies = family_dir / "replies.jsonl";
    auto g = run_cli(generate + " --generate_batch_size 2 --output " + replies.string());
    INFO(g.output);
    REQUIRE(g.exit_code == 0);
    CHECK_THAT(g.output, Catch::Contains("3 samples: 3 regenerated"));
    const auto in = lines_of(dir / "few.jsonl"), out = lines_of(replies);
    REQUIRE(out.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
      INFO("sample " << k);
      // The prompt (the tokens before the first trained one) kept, untrained; then 1..4 new tokens, trained.
      const auto mask = in[k]["loss_mask"].get<std::vector<int>>();
      const auto p = static_cast<std::size_t>(std::find(mask.begin(), mask.end(), 1) - mask.begin());
      const auto ids = out[k]["input_ids"].get<std::vector<std::int64_t>>();
      const auto got = out[k]["loss_mask"].get<std::vector<int>>();
      REQUIRE(ids.size() > p);
      CHECK(ids.size() <= p + 4);
      const auto prompt = in[k]["input_ids"].get<std::vector<std::int64_t>>();
      CHECK(std::equal(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(p), prompt.begin()));
      CHECK(std::vector<int>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(p)) == std::vector<int>(p, 0));
      CHECK(std::vector<int>(got.begin() + static_cast<std::ptrdiff_t>(p), got.end()) ==
            std::vector<int>(ids.size() - p, 1));
    }
    if (family.hybrid) {
      // The Gated DeltaNet rows decoded together give the greedy replies of one sample at a time.
      const auto single = family_dir / "replies-one.jsonl";
      auto g1 = run_cli(generate + " --generate_batch_size 1 --output " + single.string());
      INFO(g1.output);
      REQUIRE(g1.exit_code == 0);
      CHECK(lines_of(single) == out);
    }

    // dump-features: the 3 samples' features, the manifest complete.
    const auto features = family_dir / "features";
    auto d = run_cli("dump-features " + common + " --data_path " + (dir / "few.jsonl").string() +
                     " --training_seq_len 256 --validation_fraction 0 --output " + features.string());
    INFO(d.output);
    REQUIRE(d.exit_code == 0);
    const auto manifest = json::parse(read_file(features / "manifest.json"));
    CHECK(manifest["complete"] == true);
    CHECK(manifest["layout"]["hidden_size"] == hidden);
    CHECK(manifest["layout"]["aux_width"] == 3 * hidden);
    std::int64_t dumped = 0;
    for (const auto& shard : manifest["shards"]) dumped += shard["samples"].get<std::int64_t>();
    CHECK(dumped == 3);
  }
}
