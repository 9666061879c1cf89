// The MTP head (--draft mtp) of DeepSeek-V3 (MLA) and GLM-4.5 (GQA with qkv bias, partial RoPE) on the tiny
// fixtures whose layer model.layers.2 follows the target's last, against scripts/make_mtp_deepseek_reference.py's
// PyTorch forward of vLLM's deepseek_mtp.py / glm4_moe_mtp.py (transformers' DeepseekV3DecoderLayer /
// Glm4MoeDecoderLayer for the block, its MoE with the sigmoid grouped router, e_score_correction_bias and
// shared_experts): the TTT unroll's logits, one training step's loss and gradients (router, experts, shared
// experts), drafting against a cache-based serving loop and the unroll, the checkpoint and export round trips
// (the correction bias frozen and carried), the target's lm_head used for shared_head.head, refusals by name.
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
using nlohmann::json;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kLayer = "model.layers.2.", kExperts = kLayer + "mlp.experts.";
constexpr std::int64_t kNumExperts = 8, kParameters = 19;  // 4 MTP glue, 2 norms, 7 of attention, router, 2+3 MLP

struct Fixture {
  std::string family, folder, reference, architecture;
  std::int64_t shared_width;
  bool mla;
};
const Fixture kDeepseek{"deepseek_v3", kRoot + "models/tiny-deepseek-v3-mtp",
                        kRoot + "reference/mtp-deepseek-v3.safetensors", "DeepseekV3ForCausalLM", 32, true};
const Fixture kGlm{"glm4_moe", kRoot + "models/tiny-glm4-moe-mtp", kRoot + "reference/mtp-glm4-moe.safetensors",
                   "Glm4MoeForCausalLM", 16, false};

// The target config of a fixture folder's config.json edited by `edit`, written under dir.
target::TargetConfig edited_config(const test::TempDir& dir, const Fixture& f,
                                   const std::function<void(json&)>& edit) {
  auto j = json::parse(test::read_file(fs::path(f.folder) / "config.json"));
  edit(j);
  test::write_file(dir / "config.json", j.dump());
  return target::TargetConfig::from_json_file((dir / "config.json").string());
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("the DeepSeek-V3 and GLM-4.5 folders read as MTP heads at model.layers.{L} with the target's router",
          "[head]") {
  for (const auto& f : {kDeepseek, kGlm}) {
    INFO(f.family);
    auto loaded = head::load_head(f.folder);
    CHECK(loaded.format == head::HeadFormat::mtp);
    const auto& c = loaded.config;
    CHECK(c.mtp_family == f.family);
    CHECK(c.target_num_hidden_layers == 2);
    CHECK(c.moe_router.routing == model::MoeRouting::sigmoid_grouped);
    CHECK(c.moe_router.num_experts == kNumExperts);
    CHECK(c.moe_router.experts_per_token == (f.mla ? 3 : 2));
    CHECK(c.moe_router.n_group == (f.mla ? 4 : 2));
    CHECK(c.moe_router.topk_group == (f.mla ? 2 : 1));
    CHECK(c.moe_router.routed_scaling_factor == (f.mla ? 2.5 : 1.5));
    CHECK(c.moe_router.norm_topk_prob);
    CHECK(c.moe_intermediate_size == 16);
    CHECK(c.shared_intermediate_size == f.shared_width);
    CHECK_FALSE(c.shared_expert_gate);
    CHECK(c.mla() == f.mla);
    CHECK(c.attention_bias == !f.mla);
    CHECK_FALSE(c.qk_norm);
    CHECK_FALSE(c.norm_one_plus);
    CHECK(c.ttt_steps == 1);
    if (f.mla) {  // vLLM's DeepseekV2MLAAttention of the target's config: YaRN over the rope width, its theta
      CHECK(c.q_lora_rank == 16);
      CHECK(c.kv_lora_rank == 16);
      CHECK(c.head_dim == 12);
      CHECK(c.v_head_dim == 8);
      CHECK(c.rope.type == "yarn");
      CHECK(c.rope.head_dim == 4);
      CHECK(c.rope.mscale_all_dim == 0.8);
    } else {  // partial RoPE: half of head_dim 16
      CHECK(c.head_dim == 16);
      CHECK(c.num_key_value_heads == 2);
      CHECK(c.rope.head_dim == 8);
      CHECK(c.rope.theta == 1000000.0);
    }
    auto* mtp = dynamic_cast<head::MtpHead*>(loaded.head.get());
    REQUIRE(mtp != nullptr);
    REQUIRE(mtp->mtp_block->moe != nullptr);
    CHECK(head::named_parameters(*loaded.head).size() == kParameters);
    auto file = model::load_safetensors(f.folder + "/model.safetensors");
    const auto& moe = *mtp->mtp_block->moe;
    for (std::int64_t e = 0; e < kNumExperts; ++e) {
      const auto p = kExperts + std::to_string(e) + ".";
      CHECK(torch::equal(moe.experts->gate_up_proj[e].narrow(0, 0, 16), file.at(p + "gate_proj.weight")));
      CHECK(torch::equal(moe.experts->gate_up_proj[e].narrow(0, 16, 16), file.at(p + "up_proj.weight")));
      CHECK(torch::equal(moe.experts->down_proj[e], file.at(p + "down_proj.weight")));
    }
    CHECK(torch::equal(moe.shared_expert->down_proj->weight,
                       file.at(kLayer + "mlp.shared_experts.down_proj.weight")));
    CHECK(torch::equal(mtp->output_norm->weight, file.at(kLayer + "shared_head.norm.weight")));
    // The correction bias: read into the router's buffer, fp32, not a trained parameter.
    REQUIRE(moe.score_bias.defined());
    CHECK(moe.score_bias.scalar_type() == torch::kFloat32);
    CHECK(torch::equal(moe.score_bias, file.at(kLayer + "mlp.gate.e_score_correction_bias")));
    CHECK(moe.score_bias.abs().sum().item<double>() > 0);
    for (const auto& [name, p] : head::named_parameters(*loaded.head))
      CHECK(name.find("score_correction") == std::string::npos);
    const auto& cfg = loaded.config;
    CHECK(head::mtp_native_name("shared_head.norm.weight", cfg) == kLayer + "shared_head.norm.weight");
    CHECK(head::mtp_native_name("mtp_block.mlp.shared_experts.up_proj.weight", cfg) ==
          kLayer + "mlp.shared_experts.up_proj.weight");
    CHECK(head::mtp_native_name("eh_proj.weight", cfg) == kLayer + "eh_proj.weight");
  }
}

TEST_CASE("the DeepSeek-V3 and GLM-4.5 targets hand the MTP head their last hidden state after the final norm",
          "[head]") {
  for (const auto& f : {kDeepseek, kGlm}) {
    INFO(f.family);
    // The target reads its own layers and leaves model.layers.2.* (the MTP layer) unloaded.
    test::check_target_last_hidden(f.folder, model::load_safetensors(f.reference));
  }
}

TEST_CASE("the DeepSeek-V3 and GLM-4.5 MTP heads' unroll and training step equal vLLM's forward in PyTorch",
          "[head]") {
  for (const auto& f : {kDeepseek, kGlm}) {
    const auto ref = model::load_safetensors(f.reference);
    test::check_mtp_training_step(f.folder, f.family, ref, kParameters);
    INFO(f.family);
    // The router, the routed experts and the shared experts train (nonzero reference gradients).
    for (const char* p : {"mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj",
                          "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.down_proj.weight"})
      CHECK(ref.at("grad." + kLayer + p).abs().sum().item<double>() > 0);
  }
}

TEST_CASE("the DeepSeek-V3 and GLM-4.5 MTP heads draft what a serving loop drafts, and what their unroll predicts",
          "[head]") {
  for (const auto& f : {kDeepseek, kGlm}) {
    INFO(f.family);
    test::check_mtp_drafting(*test::mtp_three_step_head(f.folder), model::load_safetensors(f.reference));
  }
}

TEST_CASE("DeepSeek's MTP logits are the target's lm_head's: the layer's shared_head.head is read by nobody",
          "[head]") {
  // The fixture's shared_head.head differs from the target's lm_head (the reference's logits use the latter).
  auto file = model::load_safetensors(kDeepseek.folder + "/model.safetensors");
  CHECK_FALSE(torch::allclose(file.at(kLayer + "shared_head.head.weight"), file.at("lm_head.weight")));
  CHECK(torch::equal(file.at(kLayer + "embed_tokens.weight"), file.at("model.embed_tokens.weight")));
  // Without either copy the layer loads all the same.
  test::TempDir dir;
  const auto folder = test::edited_mtp_copy(dir / "bare", kDeepseek.folder, [](auto& t) {
    t.erase(kLayer + "shared_head.head.weight");
    t.erase(kLayer + "embed_tokens.weight");
  });
  auto head = std::make_shared<head::MtpHead>(head::read_head_folder_config(kDeepseek.folder));
  head::load_mtp_weights(*head, folder.string());
  auto shipped = test::mtp_three_step_head(kDeepseek.folder);
  for (const auto& p : shipped->named_parameters()) CHECK(torch::equal(p.value(), head->named_parameters()[p.key()]));
}

TEST_CASE("a DeepSeek-V3 / GLM-4.5 MTP checkpoint and export keep the experts as the target and the bias",
          "[head]") {
  for (const auto& f : {kDeepseek, kGlm}) {
    INFO(f.family);
    test::TempDir dir;
    auto head = test::mtp_three_step_head(f.folder);
    auto& moe = *head->mtp_block->moe;
    {
      torch::NoGradGuard ng;
      for (auto& p : head->named_parameters()) p.value().add_(0.01 * torch::randn_like(p.value()));
      moe.score_bias.add_(0.01);  // frozen in training; carried by both files as the head holds it
    }
    const auto ckpt = dir / "checkpoint";
    fs::create_directories(ckpt);
    head::write_head_files(*head, head::checkpoint_format(head->config()), ckpt.string());
    auto file = model::load_safetensors((ckpt / "model.safetensors").string());
    CHECK(file.size() == kParameters + 1);  // the parameters and the correction bias
    CHECK(file.count(kExperts + "gate_up_proj"));
    CHECK(torch::equal(file.at(kLayer + "mlp.gate.e_score_correction_bias"), moe.score_bias));
    auto config = json::parse(test::read_file(ckpt / "config.json"));
    CHECK(config["architectures"][0] == f.architecture);
    CHECK(config["num_hidden_layers"] == 2);
    CHECK(config["eagle_train"]["mtp_family"] == f.family);
    // The checkpoint's config reads back into the same head.
    auto loaded = head::load_head(ckpt.string());
    const auto &a = head->config(), &b = loaded.config;
    CHECK(b.mtp_family == a.mtp_family);
    CHECK(b.head_dim == a.head_dim);
    CHECK(b.num_key_value_heads == a.num_key_value_heads);
    CHECK(b.rms_norm_eps == a.rms_norm_eps);
    CHECK(b.attention_bias == a.attention_bias);
    CHECK(b.qk_norm == a.qk_norm);
    CHECK(b.q_lora_rank == a.q_lora_rank);
    CHECK(b.kv_lora_rank == a.kv_lora_rank);
    CHECK(b.v_head_dim == a.v_head_dim);
    CHECK(b.rope.type == a.rope.type);
    CHECK(b.rope.theta == a.rope.theta);
    CHECK(b.rope.head_dim == a.rope.head_dim);
    CHECK(b.rope.factor == a.rope.factor);
    CHECK(b.rope.original_max_position_embeddings == a.rope.original_max_position_embeddings);
    CHECK(b.rope.mscale == a.rope.mscale);
    CHECK(b.rope.mscale_all_dim == a.rope.mscale_all_dim);
    CHECK(b.moe_router.n_group == a.moe_router.n_group);
    CHECK(b.moe_router.topk_group == a.moe_router.topk_group);
    CHECK(b.moe_router.routed_scaling_factor == a.moe_router.routed_scaling_factor);
    CHECK(b.shared_intermediate_size == a.shared_intermediate_size);
    // Export into the per-expert target, and into a copy holding the experts fused.
    const auto per_expert = dir / "per-expert";
    head::export_mtp_target(*head, f.folder, per_expert.string());
    const auto fused_target = test::edited_mtp_copy(dir / "fused-target", f.folder,
                                                    [](auto& t) { test::fuse_mtp_experts(t, kExperts, kNumExperts); });
    const auto fused = dir / "fused";
    head::export_mtp_target(*head, fused_target.string(), fused.string());
    auto x = model::load_safetensors((per_expert / "model.safetensors").string());
    auto y = model::load_safetensors((fused / "model.safetensors").string());
    const auto before = model::load_safetensors(f.folder + "/model.safetensors");
    REQUIRE(x.size() == before.size());
    CHECK(x.count(kExperts + "7.up_proj.weight"));
    CHECK_FALSE(x.count(kExperts + "gate_up_proj"));
    CHECK(y.count(kExperts + "gate_up_proj"));
    // The target's own tensors, and the embedding and LM head copies of the MTP layer, as they were.
    for (const auto& [name, t] : before)
      if (name.rfind(kLayer, 0) != 0 || name.find("embed_tokens") != std::string::npos ||
          name.find("shared_head.head") != std::string::npos)
        CHECK(torch::equal(x.at(name), t));
    CHECK(torch::equal(x.at(kLayer + "mlp.gate.e_score_correction_bias"), moe.score_bias));
    CHECK(torch::equal(x.at(kExperts + "5.down_proj.weight"), moe.experts->down_proj[5]));
    auto from_x = head::load_head(per_expert.string()), from_y = head::load_head(fused.string());
    auto c = loaded.head->module().named_parameters(), d = from_x.head->module().named_parameters(),
         e = from_y.head->module().named_parameters();
    for (const auto& p : head->named_parameters()) {
      INFO(p.key());
      CHECK(torch::equal(p.value(), c[p.key()]));
      CHECK(torch::equal(p.value(), d[p.key()]));
      CHECK(torch::equal(p.value(), e[p.key()]));
      CHECK(torch::equal(p.value(), y.at(head::mtp_native_name(p.key(), head->config()))));
    }
    for (auto* h : {loaded.head.get(), from_x.head.get(), from_y.head.get()})
      CHECK(torch::equal(dynamic_cast<head::MtpHead&>(*h).mtp_block->moe->score_bias, moe.score_bias));
  }
}

TEST_CASE("the DeepSeek-V3 and GLM MTP heads refuse, by name, what vLLM would serve otherwise", "[head]") {
  test::TempDir dir;
  auto from = [&](const Fixture& f, const std::function<void(json&)>& edit) {
    return refusal([&] { head::mtp_config_from_target(edited_config(dir, f, edit)); });
  };
  using Catch::Contains;
  CHECK_THAT(from(kDeepseek, [](json& j) { j.erase("scoring_func"); }),
             Contains("scoring_func") && Contains("softmax"));
  CHECK_THAT(from(kDeepseek, [](json& j) { j.erase("topk_method"); }), Contains("topk_method"));
  CHECK_THAT(from(kDeepseek, [](json& j) { j["q_lora_rank"] = nullptr; }), Contains("q_lora_rank"));
  CHECK_THAT(from(kDeepseek, [](json& j) { j["attention_bias"] = true; }),
             Contains("attention biases") && Contains("attention_bias"));
  CHECK_THAT(from(kDeepseek, [](json& j) { j["rope_parameters"]["attention_factor"] = 1.0; }),
             Contains("attention_factor 1"));
  CHECK_THAT(from(kDeepseek, [](json& j) { j["num_nextn_predict_layers"] = 2; }),
             Contains("one MTP layer") && Contains("num_nextn_predict_layers"));
  CHECK_THAT(from(kDeepseek, [](json& j) { j["num_nextn_predict_layers"] = 0; }), Contains("ships no MTP layer"));
  CHECK_THAT(from(kGlm, [](json& j) { j["n_shared_experts"] = 0; }), Contains("n_shared_experts"));
  CHECK_THAT(from(kGlm,
                  [](json& j) {
                    j["rope_parameters"]["rope_type"] = "linear";
                    j["rope_parameters"]["factor"] = 2.0;
                  }),
             Contains("rope_parameters") && Contains("linear"));
  // GLM-4.7-Flash: vLLM 0.32.0 reads model.layers.0 as its MTP layer.
  auto lite = json::parse(test::read_file(kRoot + "models/tiny-glm4-moe-lite/config.json"));
  lite["num_nextn_predict_layers"] = 1;
  test::write_file(dir / "lite.json", lite.dump());
  const auto lite_config = target::TargetConfig::from_json_file((dir / "lite.json").string());
  CHECK_THAT(refusal([&] { head::mtp_config_from_target(lite_config); }),
             Contains("GLM-4.7-Flash") && Contains("model.layers.0"));
  // GLM with use_qk_norm: the head's attention takes the target's q_norm / k_norm.
  auto qk = head::mtp_config_from_target(edited_config(dir, kGlm, [](json& j) { j["use_qk_norm"] = true; }));
  CHECK(qk.qk_norm);
  auto with_norms = std::make_shared<head::MtpHead>(qk);
  CHECK(with_norms->named_parameters().contains("mtp_block.self_attn.q_norm.weight"));
  CHECK(head::mtp_native_name("mtp_block.self_attn.k_norm.weight", qk) == kLayer + "self_attn.k_norm.weight");

  // The weights: a missing correction bias, an expert past n_routed_experts, a foreign tensor of the layer, and a
  // DeepSeek target whose folder holds no MTP layer (tiny-deepseek-v3 with its model.layers.3 tensors dropped).
  auto weights = [&](const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
    test::TempDir d;
    const auto folder = test::edited_mtp_copy(d / "edited", kDeepseek.folder, edit);
    auto head = std::make_shared<head::MtpHead>(head::read_head_folder_config(kDeepseek.folder));
    return refusal([&] { head::load_mtp_weights(*head, folder.string()); });
  };
  CHECK_THAT(weights([](auto& t) { t.erase(kLayer + "mlp.gate.e_score_correction_bias"); }),
             Contains("missing") && Contains(kLayer + "mlp.gate.e_score_correction_bias"));
  CHECK_THAT(weights([](auto& t) { t.erase(kLayer + "mlp.shared_experts.up_proj.weight"); }),
             Contains("missing") && Contains(kLayer + "mlp.shared_experts.up_proj.weight"));
  CHECK_THAT(weights([](auto& t) { t[kExperts + "8.gate_proj.weight"] = t.at(kExperts + "0.gate_proj.weight"); }),
             Contains("more experts") && Contains(kExperts + "8.gate_proj.weight") && Contains("experts 0..7"));
  CHECK_THAT(weights([](auto& t) { t[kLayer + "mlp.shared_expert_gate.weight"] = torch::zeros({1, 32}); }),
             Contains("not part of the head") && Contains(kLayer + "mlp.shared_expert_gate.weight"));
  CHECK_THAT(weights([](auto& t) { t[kLayer + "self_attn.q_a_proj.weight"] = torch::zeros({8, 32}); }),
             Contains("wrong shape") && Contains(kLayer + "self_attn.q_a_proj.weight"));
  // (its config.json names no router: refused as such; with the router named, its weights lack the layer).
  const auto plain = kRoot + "models/tiny-deepseek-v3";
  CHECK_THAT(refusal([&] { head::read_head_folder_config(plain); }), Contains("scoring_func"));
  const auto named = test::edited_mtp_copy(dir / "named", plain, [](auto& t) {
    std::erase_if(t, [](const auto& kv) { return kv.first.starts_with("model.layers.3."); });
  });
  auto j = json::parse(test::read_file(fs::path(plain) / "config.json"));
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  test::write_file(named / "config.json", j.dump());
  auto no_layer = std::make_shared<head::MtpHead>(head::read_head_folder_config(named.string()));
  CHECK_THAT(refusal([&] { head::load_mtp_weights(*no_layer, named.string()); }),
             Contains("a tensor of the MTP layer is missing") && Contains("model.layers.3."));
}
