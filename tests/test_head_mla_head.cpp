// The MLA draft layer (--draft_layer deepseek, vLLM's deepseek_eagle3.py): the EAGLE-3 head with a
// DeepSeek-V3 attention layer against an independent PyTorch forward built from transformers'
// DeepseekV3Attention modules (scripts/make_mla_head_reference.py: logits, loss, gradients), its drafting
// paths against its training-time-test unroll, its export in the layout vLLM loads, and its refusals.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";

std::map<std::string, torch::Tensor> reference() {
  return model::load_safetensors(kRoot + "reference/eagle3-mla-head.safetensors");
}

// The reference head (heads/eagle3-mla-ref) re-made with the given recompute mode and TTT attention.
std::shared_ptr<head::Eagle3Head> reference_head(head::RecomputeMode mode, head::TttAttentionImpl impl) {
  auto loaded = head::load_head(kRoot + "heads/eagle3-mla-ref");
  auto& src = dynamic_cast<head::Eagle3Head&>(*loaded.head);
  auto cfg = loaded.config;
  cfg.recompute = mode;
  cfg.attention = impl;
  auto out = std::make_shared<head::Eagle3Head>(cfg, src.vocab());
  torch::NoGradGuard ng;
  auto from = src.named_parameters();
  for (auto& p : out->named_parameters()) p.value().copy_(from[p.key()]);
  const auto embedding = reference().at("embedding");
  out->set_target_weights(embedding, embedding);
  return out;
}

head::HeadInputs reference_inputs(const std::map<std::string, torch::Tensor>& ref) {
  head::HeadInputs in;
  in.input_ids = ref.at("input_ids");
  in.position_ids = ref.at("position_ids");
  in.document_ids = ref.at("document_ids");
  in.aux_hidden = ref.at("aux_hidden");
  in.loss_mask = ref.at("loss_mask");
  in.teacher_logits = ref.at("teacher_logits");
  in.target_argmax = ref.at("target_argmax");
  return in;
}

}  // namespace

TEST_CASE("the MLA draft layer reads vLLM's Eagle3DeepseekV3ForCausalLM config", "[head]") {
  const auto c = head::read_head_folder_config(kRoot + "heads/eagle3-mla-ref");
  CHECK(c.mla());
  CHECK(c.q_lora_rank == 24);
  CHECK(c.kv_lora_rank == 32);
  CHECK(c.qk_nope_head_dim == 12);
  CHECK(c.qk_rope_head_dim == 8);
  CHECK(c.v_head_dim == 10);
  CHECK(c.head_dim == 20);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.rope.type == "yarn");
  CHECK(c.rope.head_dim == 8);
  CHECK(head::attention_width(c) == 20);
  // (12 + 8)^-1/2 * yarn_get_mscale(4, 0.8)^2, what the reference's DeepseekV3Attention.scaling printed.
  CHECK(head::attention_scale(c) == Approx(0.2759546461363348).epsilon(1e-12));
  CHECK(head::draft_layer_name(c) == "deepseek");
}

TEST_CASE("the MLA draft layer's unroll and one training step equal the PyTorch reference", "[head]") {
  const auto ref = reference();
  for (auto mode : {head::RecomputeMode::off, head::RecomputeMode::layer}) {
    for (auto impl : {head::TttAttentionImpl::reference, head::TttAttentionImpl::efficient}) {
      INFO("recompute " << head::recompute_mode_name(mode) << ", efficient "
                        << (impl == head::TttAttentionImpl::efficient));
      auto head = reference_head(mode, impl);
      auto in = reference_inputs(ref);
      {
        torch::NoGradGuard ng;
        auto logits = head->ttt_logits(in);
        REQUIRE(logits.size() == 3);
        for (std::size_t k = 0; k < 3; ++k) {
          INFO("step " << k);
          CHECK(torch::allclose(logits[k], ref.at("logits_" + std::to_string(k)), 1e-4, 1e-4));
        }
      }
      auto out = head->train_step_forward(in, ref.at("denominators"));
      CHECK(out.loss.item<double>() == Approx(ref.at("loss").item<double>()).epsilon(1e-5));
      out.loss.backward();
      auto params = head->named_parameters();
      std::size_t compared = 0;
      for (const auto& [name, expected] : ref) {
        if (name.rfind("grad.", 0) != 0) continue;
        INFO(name);
        REQUIRE(params.contains(name.substr(5)));
        CHECK(torch::allclose(params[name.substr(5)].grad(), expected, 1e-4, 1e-5));
        ++compared;
      }
      CHECK(compared == 9);
    }
  }
}

TEST_CASE("the MLA draft layer drafts what its unroll predicts, by chain, steps, nodes and ragged rows", "[head]") {
  torch::manual_seed(3);
  auto head = reference_head(head::RecomputeMode::off, head::TttAttentionImpl::efficient);
  const auto ref = reference();
  const auto F = ref.at("aux_hidden").size(2);
  const std::int64_t n = 6;
  auto feats = torch::randn({1, n, F});
  auto ids = torch::randint(0, 256, {1, n + 1}, torch::kInt64);
  auto cache = head->new_cache(1, 32);
  CHECK(cache.keys.size(-1) == 20);  // the values (10 wide) padded to the query/key width
  const auto chain = test::check_drafting_matches_unroll(*head, cache, feats, ids);

  // draft_extend and draft_nodes: the logits of TTT steps 0 and 1 at the prefix's last position.
  head::HeadInputs in;
  in.input_ids = torch::cat({ids, chain.narrow(1, 0, 1)}, 1);
  // x_0..x_n, d_1 (n + 2 tokens); the features after n - 1 are never read at anchor n - 1.
  in.position_ids = torch::arange(n + 2, torch::kInt64).unsqueeze(0);
  in.document_ids = torch::zeros({1, n + 2}, torch::kInt64);
  in.aux_hidden = torch::cat({feats, torch::randn({1, 2, F})}, 1);
  const auto unrolled = head->ttt_logits(in);
  auto steps = head->new_cache(1, 32);
  auto first = head->draft_extend(steps, feats, ids.narrow(1, 1, n));
  CHECK(torch::allclose(first.logits.index({0, 0}), unrolled[0].index({0, n - 1}), 1e-4, 1e-4));
  auto token = chain.narrow(1, 0, 1);
  auto mask = torch::ones({1, n + 1}, torch::kBool);
  auto second = head->draft_nodes(steps, first.state, token, torch::full({1, 1}, n, torch::kInt64), n, mask);
  CHECK(torch::allclose(second.logits.index({0, 0}), unrolled[1].index({0, n - 1}), 1e-4, 1e-4));

  // Ragged rows: one row of the same prefix drafts the same chain.
  REQUIRE(head->drafts_ragged());
  auto rows = head->new_cache(1, 32);
  head::DraftHead::RaggedDraft step;
  step.features = feats;
  step.next_ids = ids.narrow(1, 1, n);
  step.columns = torch::arange(n, torch::kInt64).unsqueeze(0);
  step.last = torch::tensor({n - 1}, torch::kInt64);
  step.key_len = n + 3;
  CHECK(torch::equal(head->draft_ragged(rows, step, 3), chain));
}

TEST_CASE("the MLA draft layer exports as vLLM's Eagle3DeepseekV3ForCausalLM and imports back bit-exactly", "[head]") {
  test::TempDir dir;
  auto head = reference_head(head::RecomputeMode::layer, head::TttAttentionImpl::efficient);
  REQUIRE(head::checkpoint_format(head->config()) == head::HeadFormat::sglang);
  head::export_head(*head, head::HeadFormat::sglang, (dir / "mla").string());
  const auto j = nlohmann::json::parse(test::read_file(dir / "mla" / "config.json"));
  CHECK(j["architectures"] == nlohmann::json::array({"Eagle3DeepseekV3ForCausalLM"}));
  CHECK(j["model_type"] == "deepseek_v2");  // vLLM rewrites deepseek_v3 drafts to its MTP model
  CHECK(j["num_hidden_layers"] == 1);
  CHECK(j["q_lora_rank"] == 24);
  CHECK(j["kv_lora_rank"] == 32);
  CHECK(j["qk_nope_head_dim"] == 12);
  CHECK(j["qk_rope_head_dim"] == 8);
  CHECK(j["v_head_dim"] == 10);
  CHECK(j["num_key_value_heads"] == 4);
  CHECK(j["rope_interleave"] == true);
  CHECK(j["rope_scaling"]["rope_type"] == "yarn");
  CHECK(j["rope_scaling"]["factor"] == 4.0);
  CHECK(j["rope_scaling"]["mscale"] == 1.0);
  CHECK(j["rope_scaling"]["mscale_all_dim"] == 0.8);
  CHECK(j["rope_scaling"]["original_max_position_embeddings"] == 16);
  CHECK(j["norm_before_residual"] == false);
  CHECK(j["eagle_aux_hidden_state_layer_ids"] == nlohmann::json::array({1, 2, 3}));
  CHECK(j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == nlohmann::json::array({0, 1, 2}));
  CHECK(j["draft_vocab_size"] == 64);
  // The tensor names vLLM's Eagle3DeepseekV2ForCausalLM.load_weights reads (midlayer. -> layers.0.,
  // q_a_proj + kv_a_proj_with_mqa -> fused_qkv_a_proj, gate_proj + up_proj -> gate_up_proj), and nothing else.
  const auto t = model::load_safetensors((dir / "mla" / "model.safetensors").string());
  std::set<std::string> names;
  for (const auto& [name, _] : t) names.insert(name);
  const std::string a = "midlayer.self_attn.";
  const std::set<std::string> expected{"fc.weight",
                                       "norm.weight",
                                       "lm_head.weight",
                                       "d2t",
                                       "t2d",
                                       "midlayer.input_layernorm.weight",
                                       "midlayer.hidden_norm.weight",
                                       "midlayer.post_attention_layernorm.weight",
                                       a + "q_a_proj.weight",
                                       a + "q_a_layernorm.weight",
                                       a + "q_b_proj.weight",
                                       a + "kv_a_proj_with_mqa.weight",
                                       a + "kv_a_layernorm.weight",
                                       a + "kv_b_proj.weight",
                                       a + "o_proj.weight",
                                       "midlayer.mlp.gate_proj.weight",
                                       "midlayer.mlp.up_proj.weight",
                                       "midlayer.mlp.down_proj.weight"};
  CHECK(names == expected);
  CHECK(t.at(a + "q_a_proj.weight").sizes() == torch::IntArrayRef({24, 128}));  // 2H: [norm(e); norm(h)]
  CHECK(t.at(a + "kv_a_proj_with_mqa.weight").sizes() == torch::IntArrayRef({40, 128}));
  CHECK(t.at(a + "o_proj.weight").sizes() == torch::IntArrayRef({64, 40}));
  auto back = head::load_head((dir / "mla").string());
  CHECK(back.format == head::HeadFormat::sglang);
  CHECK(back.config.mla());
  auto original = head->named_parameters();
  std::size_t n = 0;
  for (auto& p : back.head->module().named_parameters()) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), original[p.key()]));
    ++n;
  }
  CHECK(n == original.size());
  CHECK_THROWS_WITH(
      head::export_head(*head, head::HeadFormat::speculators, (dir / "spec").string(), torch::zeros({256, 64})),
      Catch::Contains("EAGLE layout only"));
  head::Fp8Settings fp8;
  CHECK_THROWS_WITH(head::export_head(*head, head::HeadFormat::sglang, (dir / "fp8").string(), {}, &fp8),
                    Catch::Contains("FP8"));
}

TEST_CASE("the MLA draft layer is shaped after a DeepSeek-V3 target and refuses what vLLM cannot serve", "[head]") {
  const auto tc = target::TargetConfig::from_model_dir(kRoot + "models/tiny-deepseek-v3");
  auto c = head::HeadConfig::from_target(tc, 3, {}, 64);
  c.use_mla_layer(tc);
  CHECK(c.mla());
  CHECK((c.q_lora_rank == 24 && c.kv_lora_rank == 32 && c.qk_nope_head_dim == 12 && c.qk_rope_head_dim == 8 &&
         c.v_head_dim == 10 && c.head_dim == 20 && c.num_key_value_heads == 4));
  CHECK(c.rope.type == "yarn");
  CHECK(c.rope.head_dim == 8);
  CHECK(c.rope.factor == 4.0);
  CHECK(c.rope.mscale_all_dim == 0.8);
  const auto nolora = target::TargetConfig::from_model_dir(kRoot + "models/tiny-deepseek-v3-nolora");
  CHECK_THROWS_WITH(head::HeadConfig::from_target(nolora, 3, {}, 64).use_mla_layer(nolora),
                    Catch::Contains("q_lora_rank"));
  auto llama3 = tc;
  llama3.rope.type = "llama3";
  CHECK_THROWS_WITH(head::HeadConfig::from_target(llama3, 3, {}, 64).use_mla_layer(llama3),
                    Catch::Contains("deepseek_yarn"));
  const auto llama = target::TargetConfig::from_model_dir(kRoot + "models/tiny-llama");
  CHECK_THROWS_WITH(head::HeadConfig::from_target(llama, 3, {}, 64).use_mla_layer(llama),
                    Catch::Contains("multi-head latent attention"));
  // Unscaled RoPE: vLLM's layer rotates at base 10000 whatever rope_theta says (deepseek_eagle3.py).
  auto plain = tc;
  plain.rope = model::RopeConfig{};
  plain.rope.theta = 50000.0;
  auto p = head::HeadConfig::from_target(plain, 3, {}, 64);
  p.use_mla_layer(plain);
  CHECK(p.rope.theta == 10000.0);
  CHECK(head::attention_scale(p) == Approx(1.0 / std::sqrt(20.0)));
  // Variants vLLM's deepseek_eagle3 does not serve are refused by name.
  head::DraftVocab vocab;
  vocab.target_vocab_size = tc.vocab_size;
  for (std::int64_t i = 0; i < 64; ++i) vocab.draft_ids.push_back(4 * i);
  auto nbf = c;
  nbf.norm_before_fc = true;
  CHECK_THROWS_WITH(head::Eagle3Head(nbf, vocab), Catch::Contains("norm_before_fc"));
  auto two = c;
  two.num_layers = 2;
  CHECK_THROWS_WITH(head::Eagle3Head(two, vocab), Catch::Contains("draft_num_layers"));
  head::Eagle3Head ok(c, vocab);  // fc_norm and norm_output are served: built
  CHECK(ok.midlayer->self_attn->kv_b_proj->weight.sizes() == torch::IntArrayRef({4 * 22, 32}));
}
