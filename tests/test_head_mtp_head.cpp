// The MTP head (--draft mtp) on the tiny MiMo fixture against scripts/make_mtp_reference.py's
// independent PyTorch forward of vLLM's MiMo MTP layer: the TTT unroll's logits, one training
// step's loss and gradients, drafting against a cache-based serving loop and against the unroll,
// the checkpoint round trip, the export into a copy of the target folder and its import, the refusals.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "eagle/head/export/io.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/run/run_files.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "helpers.h"
#include "mtp_fixtures.h"

using namespace eagle;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kMimo = kRoot + "models/tiny-mimo";

std::map<std::string, torch::Tensor> reference() {
  return model::load_safetensors(kRoot + "reference/mtp-mimo.safetensors");
}

std::shared_ptr<head::MtpHead> three_step_head() { return test::mtp_three_step_head(kMimo); }

}  // namespace

TEST_CASE("the tiny MiMo folder reads as an MTP head under its native names", "[head]") {
  auto loaded = head::load_head(kMimo);
  CHECK(loaded.format == head::HeadFormat::mtp);
  const auto& c = loaded.config;
  CHECK(c.mtp_family == "mimo");
  CHECK(c.eagle_version == 3);
  CHECK(c.attention_bias);                                 // the Qwen2 block's q/k/v bias
  CHECK(c.ttt_steps == 1);                                 // num_nextn_predict_layers: vLLM's default k
  CHECK(c.aux_layer_ids == std::vector<std::int64_t>{2});  // hidden_states[L], taken before the final norm
  CHECK(c.draft_vocab_size == 256);
  REQUIRE(dynamic_cast<head::MtpHead*>(loaded.head.get()) != nullptr);
  // Every trained tensor is one of the target's model.mtp_layers.0.*, with its value.
  auto shard = model::load_safetensors(kMimo + "/model-00002-of-00002.safetensors");
  std::size_t n = 0;
  for (const auto& [name, p] : head::named_parameters(*loaded.head)) {
    INFO(name);
    const auto native = head::mtp_native_name(name);
    REQUIRE(shard.count(native));
    CHECK(torch::equal(p, shard.at(native)));
    ++n;
  }
  CHECK(n == 16);  // 3 MTP norms, input_proj, 2 block norms, q/k/v weights and biases, o_proj, 3 MLP
  CHECK(head::mtp_native_name("mtp_block.self_attn.q_proj.bias") == "model.mtp_layers.0.self_attn.q_proj.bias");
  CHECK(head::mtp_native_name("input_proj.weight") == "model.mtp_layers.0.input_proj.weight");
}

TEST_CASE("the MTP head's unroll and one training step equal vLLM's MiMo MTP forward in PyTorch", "[head]") {
  // 3 MTP norms, input_proj, 2 block norms, q/k/v weights and biases, o_proj, 3 MLP
  test::check_mtp_training_step(kMimo, "mimo", reference(), 16);
}

TEST_CASE("the MTP head drafts what a cache-based serving loop drafts, and what its unroll predicts", "[head]") {
  test::check_mtp_drafting(*three_step_head(), reference());
}

TEST_CASE("an MTP checkpoint holds the native names alone and reads back bit for bit", "[head]") {
  test::TempDir dir;
  auto head = three_step_head();
  {
    torch::NoGradGuard ng;
    for (auto& p : head->named_parameters()) p.value().add_(0.01 * torch::randn_like(p.value()));
  }
  head::write_head_files(*head, head::checkpoint_format(head->config()), dir.path().string());
  CHECK(head::checkpoint_format(head->config()) == head::HeadFormat::mtp);
  auto file = model::load_safetensors((dir / "model.safetensors").string());
  CHECK(file.size() == 16);  // no d2t/t2d: vLLM's MiMo loader raises on names it cannot place
  for (const auto& [name, t] : file) CHECK(name.rfind("model.mtp_layers.0.", 0) == 0);
  auto config = nlohmann::json::parse(test::read_file(dir / "config.json"));
  CHECK(config["architectures"][0] == "MiMoForCausalLM");
  CHECK(config["eagle_train"]["ttt_steps"] == 3);
  // The resume path (load_head_weights) and eval's reader (load_head) both read it exactly.
  auto again = three_step_head();
  head::load_head_weights(*again, dir.path().string());
  auto loaded = head::load_head(dir.path().string());
  CHECK(loaded.config.ttt_steps == 3);
  auto a = head->named_parameters(), b = again->named_parameters(), c = loaded.head->module().named_parameters();
  for (const auto& p : a) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), b[p.key()]));
    CHECK(torch::equal(p.value(), c[p.key()]));
  }
}

TEST_CASE("an MTP head refuses EAGLE checkpoints and formats; a resume refuses another --draft", "[head]") {
  auto head = three_step_head();
  // An EAGLE-3 checkpoint is another head (a resume with --draft mtp over an EAGLE run).
  CHECK_THROWS_WITH(head::load_head_weights(*head, kRoot + "heads/eagle3-ref"),
                    Catch::Contains("the checkpoint holds another head"));
  CHECK_THROWS_WITH(head::head_config_json(head->config(), head::HeadFormat::sglang),
                    Catch::Contains("the export format does not fit the head"));
  // --draft is not among the options that may change on resume.
  auto conflicts = run::resume_conflicts(nlohmann::json{{"draft", "eagle"}}, nlohmann::json{{"draft", "mtp"}});
  REQUIRE(conflicts.size() == 1);
  CHECK_THAT(conflicts[0], Catch::Contains("draft"));
  // A target without MTP layers has no MTP head.
  CHECK_THROWS_WITH(head::mtp_config_from_target(target::TargetConfig::from_model_dir(kRoot + "models/tiny-qwen2")),
                    Catch::Contains("the target ships no MTP layer"));
}

TEST_CASE("export_mtp_target copies a target folder of symlinks with the MTP tensors replaced", "[head]") {
  namespace fs = std::filesystem;
  test::TempDir dir;
  // A Hugging Face cache snapshot: every file a symlink to its blob.
  const auto target = dir / "snapshot";
  fs::create_directories(target);
  for (const auto& e : fs::directory_iterator(kMimo)) fs::create_symlink(e.path(), target / e.path().filename());
  auto head = three_step_head();
  {
    torch::NoGradGuard ng;
    for (auto& p : head->named_parameters()) p.value().add_(0.01 * torch::randn_like(p.value()));
  }
  const auto out = dir / "export";
  head::export_mtp_target(*head, target.string(), out.string());
  const std::string shard1 = "model-00001-of-00002.safetensors", shard2 = "model-00002-of-00002.safetensors";
  for (const auto& name : {shard1, shard2, std::string("config.json"), std::string("model.safetensors.index.json")}) {
    INFO(name);
    CHECK(fs::is_regular_file(fs::symlink_status(out / name)));  // never a link that could dangle
  }
  CHECK(test::read_file(out / shard1) == test::read_file(fs::path(kMimo) / shard1));
  CHECK_FALSE(fs::exists(util::temporary_name(out)));
  // eval's reader imports it bit for bit (fp32 target: the trained values exactly).
  auto loaded = head::load_head(out.string());
  CHECK(loaded.format == head::HeadFormat::mtp);
  CHECK(loaded.config.ttt_steps == 3);
  auto a = head->named_parameters(), b = loaded.head->module().named_parameters();
  for (const auto& p : a) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), b[p.key()]));
  }
  // The target's own tensors of the rewritten shard are unchanged; the original is untouched.
  auto before = model::load_safetensors(kMimo + "/" + shard2), after = model::load_safetensors((out / shard2).string());
  CHECK(torch::equal(after.at("model.norm.weight"), before.at("model.norm.weight")));
  CHECK(torch::equal(after.at("lm_head.weight"), before.at("lm_head.weight")));
  CHECK_FALSE(torch::equal(after.at("model.mtp_layers.0.input_proj.weight"),
                           before.at("model.mtp_layers.0.input_proj.weight")));
  // Nothing is overwritten, and an EAGLE target has no MTP layer to replace.
  CHECK_THROWS_WITH(head::export_mtp_target(*head, target.string(), out.string()),
                    Catch::Contains("the output folder exists"));
  CHECK_THROWS_WITH(head::export_mtp_target(*head, kRoot + "models/tiny-qwen2", (dir / "qwen").string()),
                    Catch::Contains("the target ships no MTP layer"));
}

TEST_CASE("a MiMo folder holding a second MTP layer its config does not count is refused by name (issue 53 L4)",
          "[head]") {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const auto out = dir / "mimo";
  fs::create_directories(out);
  fs::copy_file(fs::path(kMimo) / "config.json", out / "config.json");  // num_nextn_predict_layers 1
  std::map<std::string, torch::Tensor> copy;  // the two shards as one file, and layer 0 again as layer 1
  for (const char* shard : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors"})
    for (const auto& [name, t] : model::load_safetensors(kMimo + shard)) {
      copy[name] = t.clone();
      if (name.rfind("model.mtp_layers.0.", 0) == 0) copy["model.mtp_layers.1." + name.substr(19)] = t.clone();
    }
  model::save_safetensors((out / "model.safetensors").string(), copy);
  auto head = std::make_shared<head::MtpHead>(head::read_head_folder_config(kMimo));
  CHECK_THROWS_WITH(head::load_mtp_weights(*head, out.string()),
                    Catch::Contains("an MTP layer its config.json does not count") &&
                        Catch::Contains("model.mtp_layers.1.") && Catch::Contains("num_nextn_predict_layers 1"));
  // The shipped folder, one layer: reads.
  auto shipped = std::make_shared<head::MtpHead>(head::read_head_folder_config(kMimo));
  CHECK_NOTHROW(head::load_mtp_weights(*shipped, kMimo));
}
