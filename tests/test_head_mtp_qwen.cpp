// The MTP head (--draft mtp) on the tiny dense Qwen3.5 fixture against scripts/make_mtp_qwen_reference.py's
// PyTorch forward of vLLM's Qwen3.5 MTP layer (transformers' Qwen3_5DecoderLayer for the block): the target's
// post-norm step-1 state, the TTT unroll's logits, one training step's loss and gradients, drafting against a
// cache-based serving loop and against the unroll, the checkpoint round trip, the export into a copy of the
// target folder, and the refusals by name (a missing or foreign mtp.* tensor, no or two MTP layers).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "eagle/head/export/io.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "mtp_fixtures.h"

using namespace eagle;
namespace fs = std::filesystem;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kQwen = kRoot + "models/tiny-qwen3-5-mtp";

std::map<std::string, torch::Tensor> reference() {
  return model::load_safetensors(kRoot + "reference/mtp-qwen3-5.safetensors");
}

std::shared_ptr<head::MtpHead> three_step_head() { return test::mtp_three_step_head(kQwen); }

// A copy of the fixture folder whose model.safetensors is edited by `edit`.
fs::path edited_copy(const test::TempDir& dir, const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
  const auto out = dir / "edited";
  fs::create_directories(out);
  fs::copy_file(fs::path(kQwen) / "config.json", out / "config.json");
  auto tensors = model::load_safetensors(kQwen + "/model.safetensors");
  std::map<std::string, torch::Tensor> copy;
  for (const auto& [name, t] : tensors) copy[name] = t.clone();
  edit(copy);
  model::save_safetensors((out / "model.safetensors").string(), copy);
  return out;
}

}  // namespace

TEST_CASE("the tiny Qwen3.5 folder reads as an MTP head under vLLM's mtp.* names", "[head]") {
  auto loaded = head::load_head(kQwen);
  CHECK(loaded.format == head::HeadFormat::mtp);
  const auto& c = loaded.config;
  CHECK(c.mtp_family == "qwen3_5");
  CHECK(c.qk_norm);
  CHECK(c.norm_one_plus);
  CHECK(c.attn_output_gate);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.rope.head_dim == 4);  // partial_rotary_factor 0.25 of head_dim 16
  CHECK(c.ttt_steps == 1);      // mtp_num_hidden_layers: vLLM's default k
  CHECK(c.aux_layer_ids == std::vector<std::int64_t>{2});
  REQUIRE(dynamic_cast<head::MtpHead*>(loaded.head.get()) != nullptr);
  auto file = model::load_safetensors(kQwen + "/model.safetensors");
  std::size_t n = 0;
  for (const auto& [name, p] : head::named_parameters(*loaded.head)) {
    INFO(name);
    const auto native = head::mtp_native_name(name, "qwen3_5");
    REQUIRE(file.count(native));
    CHECK(torch::equal(p, file.at(native)));
    ++n;
  }
  CHECK(n == 15);  // fc, 3 MTP norms, 2 block norms, q (with its gate), k, v, o, q/k norms, 3 MLP
  CHECK(head::mtp_native_name("mtp_block.self_attn.q_norm.weight", "qwen3_5") ==
        "mtp.layers.0.self_attn.q_norm.weight");
  CHECK(head::mtp_native_name("pre_fc_norm_embedding.weight", "qwen3_5") == "mtp.pre_fc_norm_embedding.weight");
}

TEST_CASE("the Qwen3.5 target hands the MTP head its last hidden state after the final norm", "[head]") {
  test::check_target_last_hidden(kQwen, reference());
}

TEST_CASE("the Qwen3.5 MTP head's unroll and one training step equal vLLM's forward in PyTorch", "[head]") {
  test::check_mtp_training_step(kQwen, "qwen3_5", reference(), 15);
}

TEST_CASE("the Qwen3.5 MTP head drafts what a serving loop drafts, and what its unroll predicts", "[head]") {
  test::check_mtp_drafting(*three_step_head(), reference());
}

TEST_CASE("a Qwen3.5 MTP checkpoint and export hold the mtp.* names and read back bit for bit", "[head]") {
  test::TempDir dir;
  auto head = three_step_head();
  {
    torch::NoGradGuard ng;
    for (auto& p : head->named_parameters()) p.value().add_(0.01 * torch::randn_like(p.value()));
  }
  const auto ckpt = dir / "checkpoint";
  std::filesystem::create_directories(ckpt);
  head::write_head_files(*head, head::checkpoint_format(head->config()), ckpt.string());
  auto file = model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(file.size() == 15);
  for (const auto& [name, t] : file) CHECK(name.rfind("mtp.", 0) == 0);
  auto config = nlohmann::json::parse(test::read_file(ckpt / "config.json"));
  CHECK(config["architectures"][0] == "Qwen3_5ForCausalLM");
  CHECK(config["mtp_num_hidden_layers"] == 1);
  CHECK(config["eagle_train"]["mtp_family"] == "qwen3_5");
  auto again = three_step_head();
  head::load_head_weights(*again, ckpt.string());
  auto loaded = head::load_head(ckpt.string());
  CHECK(loaded.config.ttt_steps == 3);
  CHECK(loaded.config.rope.head_dim == 4);

  // The export: the target folder with mtp.* replaced, every other tensor as it was.
  const auto out = dir / "export";
  head::export_mtp_target(*head, kQwen, out.string());
  auto before = model::load_safetensors(kQwen + "/model.safetensors");
  auto after = model::load_safetensors((out / "model.safetensors").string());
  REQUIRE(before.size() == after.size());
  for (const auto& [name, t] : before) {
    INFO(name);
    REQUIRE(after.count(name));
    if (name.rfind("mtp.", 0) != 0) CHECK(torch::equal(after.at(name), t));
  }
  CHECK(nlohmann::json::parse(test::read_file(out / "config.json"))["mtp_num_hidden_layers"] == 1);
  auto exported = head::load_head(out.string());
  auto a = head->named_parameters(), b = again->named_parameters(), c = loaded.head->module().named_parameters(),
       d = exported.head->module().named_parameters();
  for (const auto& p : a) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), b[p.key()]));
    CHECK(torch::equal(p.value(), c[p.key()]));
    CHECK(torch::equal(p.value(), d[p.key()]));
    CHECK(torch::equal(p.value(), after.at(head::mtp_native_name(p.key(), "qwen3_5"))));
  }
}

TEST_CASE("the Qwen3.5 MTP head refuses a folder missing an mtp tensor or holding a foreign one, by name", "[head]") {
  auto cfg = head::read_head_folder_config(kQwen);
  {
    test::TempDir dir;
    const auto folder = edited_copy(dir, [](auto& t) { t.erase("mtp.layers.0.self_attn.k_norm.weight"); });
    auto head = std::make_shared<head::MtpHead>(cfg);
    CHECK_THROWS_WITH(head::load_mtp_weights(*head, folder.string()),
                      Catch::Contains("a tensor of the MTP layer is missing") &&
                          Catch::Contains("mtp.layers.0.self_attn.k_norm.weight"));
  }
  {
    test::TempDir dir;
    const auto folder =
        edited_copy(dir, [](auto& t) { t["mtp.layers.1.input_layernorm.weight"] = torch::zeros({32}); });
    auto head = std::make_shared<head::MtpHead>(cfg);
    CHECK_THROWS_WITH(
        head::load_mtp_weights(*head, folder.string()),
        Catch::Contains("not part of the head") && Catch::Contains("mtp.layers.1.input_layernorm.weight"));
  }
  {
    // SpecForge's merge writes mtp.embed_tokens.weight, which vLLM loads and replaces: read past.
    test::TempDir dir;
    const auto folder =
        edited_copy(dir, [](auto& t) { t["mtp.embed_tokens.weight"] = t.at("model.embed_tokens.weight"); });
    auto head = std::make_shared<head::MtpHead>(cfg);
    CHECK_NOTHROW(head::load_mtp_weights(*head, folder.string()));
  }
  {
    test::TempDir dir;
    const auto folder = edited_copy(dir, [](auto& t) { t["mtp.fc.weight"] = torch::zeros({32, 32}); });
    auto head = std::make_shared<head::MtpHead>(cfg);
    CHECK_THROWS_WITH(head::load_mtp_weights(*head, folder.string()),
                      Catch::Contains("wrong shape") && Catch::Contains("mtp.fc.weight"));
  }
}

TEST_CASE("--draft mtp refuses Qwen targets without one MTP layer, by name", "[head]") {
  // The transformers-written fixtures carry no mtp_num_hidden_layers: no MTP layer shipped.
  CHECK_THROWS_WITH(head::mtp_config_from_target(target::TargetConfig::from_model_dir(kRoot + "models/tiny-qwen3-5")),
                    Catch::Contains("the target ships no MTP layer"));
  CHECK_FALSE(
      head::is_mtp_config(nlohmann::json::parse(test::read_file(fs::path(kRoot) / "models/tiny-qwen3-5/config.json"))));
  // Qwen3-Next reads num_nextn_predict_layers with vLLM's default 1 (its MTP layer: test_head_mtp_moe.cpp).
  CHECK(target::TargetConfig::from_model_dir(kRoot + "models/tiny-qwen3-next").num_mtp_layers == 1);
  test::TempDir dir;
  // Two MTP layers: vLLM's multi-module speculator, not this head.
  auto two = nlohmann::json::parse(test::read_file(fs::path(kQwen) / "config.json"));
  two["mtp_num_hidden_layers"] = 2;
  test::write_file(dir / "two.json", two.dump());
  CHECK_THROWS_WITH(head::mtp_config_from_target(target::TargetConfig::from_json_file((dir / "two.json").string())),
                    Catch::Contains("one MTP layer") && Catch::Contains("mtp_num_hidden_layers"));
}
