// The MTP head (--draft mtp) of the mixture-of-experts Qwen families on the tiny Qwen3.5-MoE and Qwen3-Next
// fixtures against scripts/make_mtp_qwen_moe_reference.py's PyTorch forward of vLLM's MTP layer (transformers'
// Qwen3_5MoeDecoderLayer / Qwen3NextDecoderLayer for the block, its sparse MoE block with router, experts and
// gated shared expert): the TTT unroll's logits, one training step's loss and gradients (router and experts
// included), drafting against a cache-based serving loop and the unroll, the checkpoint round trip, the export
// with the experts per expert or fused as the target holds them, and the refusals by name.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "eagle/head/export/io.h"
#include "eagle/head/moe.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "helpers.h"
#include "mtp_fixtures.h"

using namespace eagle;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<head::MtpHead> head_of(const std::string& folder) { return test::mtp_three_step_head(folder); }

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";

struct Fixture {
  std::string family, folder, reference, architecture;
};
const Fixture kMoe{"qwen3_5_moe", kRoot + "models/tiny-qwen3-5-moe-mtp",
                   kRoot + "reference/mtp-qwen3-5-moe.safetensors", "Qwen3_5MoeForCausalLM"};
const Fixture kNext{"qwen3_next", kRoot + "models/tiny-qwen3-next-mtp", kRoot + "reference/mtp-qwen3-next.safetensors",
                    "Qwen3NextForCausalLM"};
constexpr std::int64_t kExperts = 4, kParameters = 19;  // fc, 3 norms, 8 of attention, router, 2 experts, 4 shared

// A copy of a fixture folder whose model.safetensors is edited by `edit`.
fs::path edited_copy(const fs::path& out, const std::string& folder,
                     const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
  return test::edited_mtp_copy(out, folder, edit);
}

// The per-expert mtp.layers.0.mlp.experts.{e}.* tensors replaced by transformers 5's fused two.
void fuse_experts(std::map<std::string, torch::Tensor>& t) {
  test::fuse_mtp_experts(t, "mtp.layers.0.mlp.experts.", kExperts);
}

}  // namespace

TEST_CASE("the MoE Qwen folders read as MTP heads with the target's router, experts and shared expert", "[head]") {
  for (const auto& f : {kMoe, kNext}) {
    INFO(f.family);
    auto loaded = head::load_head(f.folder);
    CHECK(loaded.format == head::HeadFormat::mtp);
    const auto& c = loaded.config;
    CHECK(c.mtp_family == f.family);
    CHECK(c.moe());
    CHECK(c.moe_router.routing == model::MoeRouting::softmax_topk);
    CHECK(c.moe_router.num_experts == kExperts);
    CHECK(c.moe_router.experts_per_token == 2);
    CHECK(c.moe_router.norm_topk_prob);
    CHECK(c.moe_intermediate_size == 16);
    CHECK(c.shared_intermediate_size == 24);
    CHECK(c.shared_expert_gate);
    CHECK(c.attn_output_gate);
    CHECK(c.norm_one_plus);
    CHECK(c.rope.head_dim == 4);
    CHECK(c.ttt_steps == 1);
    CHECK(c.target_architecture == f.architecture);
    auto* mtp = dynamic_cast<head::MtpHead*>(loaded.head.get());
    REQUIRE(mtp != nullptr);
    REQUIRE(mtp->mtp_block->moe != nullptr);
    CHECK(mtp->mtp_block->mlp.is_empty());
    CHECK(head::named_parameters(*loaded.head).size() == kParameters);
    // Every per-expert tensor of the file is the slice of the fused parameter the head holds.
    auto file = model::load_safetensors(f.folder + "/model.safetensors");
    const auto& experts = *mtp->mtp_block->moe->experts;
    for (std::int64_t e = 0; e < kExperts; ++e) {
      const auto p = "mtp.layers.0.mlp.experts." + std::to_string(e) + ".";
      CHECK(torch::equal(experts.gate_up_proj[e].narrow(0, 0, 16), file.at(p + "gate_proj.weight")));
      CHECK(torch::equal(experts.gate_up_proj[e].narrow(0, 16, 16), file.at(p + "up_proj.weight")));
      CHECK(torch::equal(experts.down_proj[e], file.at(p + "down_proj.weight")));
    }
    CHECK(torch::equal(mtp->mtp_block->moe->gate->weight, file.at("mtp.layers.0.mlp.gate.weight")));
    CHECK(torch::equal(mtp->mtp_block->moe->shared_expert_gate->weight,
                       file.at("mtp.layers.0.mlp.shared_expert_gate.weight")));
  }
}

TEST_CASE("the MoE Qwen targets hand the MTP head their last hidden state after the final norm", "[head]") {
  for (const auto& f : {kMoe, kNext}) {
    INFO(f.family);
    test::check_target_last_hidden(f.folder, model::load_safetensors(f.reference));
  }
}

TEST_CASE("the MoE Qwen MTP heads' unroll and training step equal vLLM's forward in PyTorch, router and experts",
          "[head]") {
  for (const auto& f : {kMoe, kNext}) {
    const auto ref = model::load_safetensors(f.reference);
    test::check_mtp_training_step(f.folder, f.family, ref, kParameters);
    // The router and the experts train (the reference's gradients are not all zero there).
    CHECK(ref.at("grad.mtp.layers.0.mlp.gate.weight").abs().sum().item<double>() > 0);
    CHECK(ref.at("grad.mtp.layers.0.mlp.experts.gate_up_proj").abs().sum().item<double>() > 0);
  }
}

TEST_CASE("the MoE Qwen MTP heads draft what a serving loop drafts, and what their unroll predicts", "[head]") {
  for (const auto& f : {kMoe, kNext}) {
    INFO(f.family);
    test::check_mtp_drafting(*head_of(f.folder), model::load_safetensors(f.reference));
  }
}

TEST_CASE("a MoE Qwen MTP checkpoint and export keep the experts per expert or fused as the target, bit for bit",
          "[head]") {
  for (const auto& f : {kMoe, kNext}) {
    INFO(f.family);
    test::TempDir dir;
    auto head = head_of(f.folder);
    {
      torch::NoGradGuard ng;
      for (auto& p : head->named_parameters()) p.value().add_(0.01 * torch::randn_like(p.value()));
    }
    // The checkpoint: the head's own (fused) names, read back bit for bit.
    const auto ckpt = dir / "checkpoint";
    std::filesystem::create_directories(ckpt);
    head::write_head_files(*head, head::checkpoint_format(head->config()), ckpt.string());
    auto file = model::load_safetensors((ckpt / "model.safetensors").string());
    CHECK(file.size() == kParameters);
    CHECK(file.count("mtp.layers.0.mlp.experts.gate_up_proj"));
    auto config = nlohmann::json::parse(test::read_file(ckpt / "config.json"));
    CHECK(config["architectures"][0] == f.architecture);
    CHECK(config["num_experts"] == kExperts);
    CHECK(config["eagle_train"]["mtp_family"] == f.family);
    auto loaded = head::load_head(ckpt.string());
    CHECK(loaded.config.moe_router.num_experts == kExperts);
    CHECK(loaded.config.shared_intermediate_size == 24);
    // Export into the per-expert target, and into a copy holding the experts fused.
    const auto per_expert = dir / "per-expert";
    head::export_mtp_target(*head, f.folder, per_expert.string());
    const auto fused_target = edited_copy(dir / "fused-target", f.folder, fuse_experts);
    const auto fused = dir / "fused";
    head::export_mtp_target(*head, fused_target.string(), fused.string());
    auto a = model::load_safetensors((per_expert / "model.safetensors").string());
    auto b = model::load_safetensors((fused / "model.safetensors").string());
    const auto before = model::load_safetensors(f.folder + "/model.safetensors");
    REQUIRE(a.size() == before.size());
    CHECK(a.count("mtp.layers.0.mlp.experts.3.up_proj.weight"));
    CHECK_FALSE(a.count("mtp.layers.0.mlp.experts.gate_up_proj"));
    CHECK(b.count("mtp.layers.0.mlp.experts.gate_up_proj"));
    CHECK_FALSE(b.count("mtp.layers.0.mlp.experts.0.gate_proj.weight"));
    for (const auto& [name, t] : before)
      if (name.rfind("mtp.", 0) != 0) CHECK(torch::equal(a.at(name), t));
    auto x = head::load_head(per_expert.string()), y = head::load_head(fused.string());
    auto c = loaded.head->module().named_parameters(), d = x.head->module().named_parameters(),
         e = y.head->module().named_parameters();
    for (const auto& p : head->named_parameters()) {
      INFO(p.key());
      CHECK(torch::equal(p.value(), c[p.key()]));
      CHECK(torch::equal(p.value(), d[p.key()]));
      CHECK(torch::equal(p.value(), e[p.key()]));
      CHECK(torch::equal(p.value(), b.at(head::mtp_native_name(p.key(), f.family))));
    }
    CHECK(torch::equal(a.at("mtp.layers.0.mlp.experts.2.down_proj.weight"),
                       head->named_parameters()["mtp_block.mlp.experts.down_proj"][2]));
  }
}

TEST_CASE("the MoE Qwen MTP head refuses a missing expert, an extra one, a wrong count and a dense Qwen3-Next layer",
          "[head]") {
  auto cfg = head::read_head_folder_config(kMoe.folder);
  auto refused = [&](const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
    test::TempDir dir;
    const auto folder = edited_copy(dir / "edited", kMoe.folder, edit);
    auto head = std::make_shared<head::MtpHead>(cfg);
    try {
      head::load_mtp_weights(*head, folder.string());
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string x = "mtp.layers.0.mlp.experts.";
  CHECK_THAT(refused([&](auto& t) { t.erase(x + "3.up_proj.weight"); }),
             Catch::Contains("a tensor of the MTP layer is missing") && Catch::Contains(x + "3.up_proj.weight"));
  CHECK_THAT(refused([&](auto& t) { t[x + "4.gate_proj.weight"] = t.at(x + "0.gate_proj.weight"); }),
             Catch::Contains("more experts than the config's num_experts") &&
                 Catch::Contains(x + "4.gate_proj.weight") && Catch::Contains("experts 0..3"));
  CHECK_THAT(refused([&](auto& t) { t.erase("mtp.layers.0.mlp.shared_expert_gate.weight"); }),
             Catch::Contains("missing") && Catch::Contains("mtp.layers.0.mlp.shared_expert_gate.weight"));
  // Fused experts of another count: their shape names it.
  CHECK_THAT(refused([&](auto& t) {
               fuse_experts(t);
               t[x + "gate_up_proj"] = t.at(x + "gate_up_proj").narrow(0, 0, 3).clone();
             }),
             Catch::Contains("wrong shape") && Catch::Contains(x + "gate_up_proj"));
  // Both layouts at once: the per-expert tensors are read, the fused one is foreign.
  CHECK_THAT(refused([&](auto& t) {
               t[x + "down_proj"] = torch::zeros({kExperts, 32, 16});
             }),
             Catch::Contains("not part of the head") && Catch::Contains(x + "down_proj"));

  // A Qwen3-Next target whose layer index 0 is dense (vLLM's MTP layer would be too, in some builds): refused.
  test::TempDir dir;
  auto j = nlohmann::json::parse(test::read_file(fs::path(kNext.folder) / "config.json"));
  j["mlp_only_layers"] = nlohmann::json::array({0});
  test::write_file(dir / "config.json", j.dump());
  CHECK_THROWS_WITH(head::mtp_config_from_target(target::TargetConfig::from_json_file((dir / "config.json").string())),
                    Catch::Contains("dense Qwen3-Next MTP layer") && Catch::Contains("mlp_only_layers"));
  // The transformers-written Qwen3.5-MoE target with its layer declared: the target's 8 experts, top 2.
  auto moe = nlohmann::json::parse(test::read_file(fs::path(kRoot) / "models/tiny-qwen3-5-moe/config.json"));
  moe["mtp_num_hidden_layers"] = 1;
  test::write_file(dir / "moe.json", moe.dump());
  const auto c = head::mtp_config_from_target(target::TargetConfig::from_json_file((dir / "moe.json").string()));
  CHECK(c.mtp_family == "qwen3_5_moe");
  CHECK(c.moe_router.num_experts == 8);
  CHECK(c.moe_router.experts_per_token == 2);
}
