// Head checkpoints, export and import: names, shapes and config fields per EAGLE.md, round trips
// with identical logits, refusals, and the export subcommand.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <limits>

#include <sys/wait.h>
#include <unistd.h>

#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;
using namespace eagle::test;
using nlohmann::json;

namespace {
json read_json(const std::filesystem::path& p) { return json::parse(read_file(p)); }

// The imported EAGLE-3 head, given the target's embedding and LM head, gives the exported one's TTT logits bit
// for bit.
void check_same_ttt_logits(head::Eagle3Head& exported, head::LoadedHead& loaded, const TinyTarget& target,
                           const head::HeadConfig& cfg) {
  loaded.head->set_target_weights(target.embedding, target.lm_head);
  auto in = tiny_inputs(cfg);
  auto a = exported.ttt_logits(in);
  auto b = dynamic_cast<head::Eagle3Head&>(*loaded.head).ttt_logits(in);
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(torch::equal(a[k], b[k]));
}
}  // namespace

TEST_CASE("SGLang export: config fields, tensor names and shapes, round trip with identical logits", "[head]") {
  torch::manual_seed(11);
  auto cfg = tiny_head_config(3, 2);
  cfg.target_dtype = "bfloat16";  // the target serves in bf16: SGLang must run the draft in it too
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  TempDir tmp;
  auto dir = (tmp / "sglang").string();
  head::export_head(head, head::HeadFormat::sglang, dir);
  auto j = read_json(tmp / "sglang" / "config.json");
  CHECK(j["architectures"] == json({"LlamaForCausalLMEagle3"}));
  CHECK(j["model_type"] == "llama");
  CHECK(j["num_hidden_layers"] == 1);
  CHECK(j["hidden_size"] == 16);
  CHECK(j["head_dim"] == 4);
  CHECK(j["num_key_value_heads"] == 2);
  CHECK(j["vocab_size"] == 40);
  CHECK(j["draft_vocab_size"] == 12);
  CHECK(j["target_hidden_size"] == 16);
  CHECK(j["tie_word_embeddings"] == false);
  CHECK(j["rope_theta"] == 10000.0);
  CHECK(j.contains("rope_scaling"));
  // The config names the target's dtype (SGLang's --dtype auto follows it); the tensors stay fp32.
  CHECK(j["torch_dtype"] == "bfloat16");
  CHECK(j["dtype"] == "bfloat16");
  CHECK(j["eagle_aux_hidden_state_layer_ids"] == json({2, 4, 5}));  // input-of-layer
  // The speculators layout says the same at its top level, not float32 (its tensors' dtype).
  auto spec = head::head_config_json(cfg, head::HeadFormat::speculators);
  CHECK(spec["torch_dtype"] == "bfloat16");
  CHECK(spec["dtype"] == "bfloat16");
  CHECK(spec["transformer_layer_config"]["torch_dtype"] == "bfloat16");
  CHECK(j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == json({1, 3, 4}));  // output-of-layer
  auto file = model::SafetensorsFile::open((tmp / "sglang" / "model.safetensors").string());
  std::vector<std::string> expected = {"d2t",
                                       "fc.weight",
                                       "lm_head.weight",
                                       "midlayer.hidden_norm.weight",
                                       "midlayer.input_layernorm.weight",
                                       "midlayer.mlp.down_proj.weight",
                                       "midlayer.mlp.gate_proj.weight",
                                       "midlayer.mlp.up_proj.weight",
                                       "midlayer.post_attention_layernorm.weight",
                                       "midlayer.self_attn.k_proj.weight",
                                       "midlayer.self_attn.o_proj.weight",
                                       "midlayer.self_attn.q_proj.weight",
                                       "midlayer.self_attn.v_proj.weight",
                                       "norm.weight",
                                       "t2d"};
  auto names = file.names();
  std::sort(names.begin(), names.end());
  CHECK(names == expected);
  CHECK(file.shape("fc.weight") == std::vector<std::int64_t>{16, 48});
  CHECK(file.shape("midlayer.self_attn.q_proj.weight") == std::vector<std::int64_t>{16, 32});
  CHECK(file.shape("midlayer.self_attn.k_proj.weight") == std::vector<std::int64_t>{8, 32});
  CHECK(file.shape("lm_head.weight") == std::vector<std::int64_t>{12, 16});
  CHECK(file.dtype("d2t") == torch::kInt64);
  CHECK(file.dtype("t2d") == torch::kBool);
  CHECK(file.shape("t2d") == std::vector<std::int64_t>{40});
  CHECK(torch::equal(file.get("d2t"), torch::arange(12, torch::kInt64) * 2));  // ids 3i: offset 2i

  auto loaded = head::load_head(dir);
  CHECK(loaded.format == head::HeadFormat::sglang);
  CHECK(loaded.config.aux_layer_ids == cfg.aux_layer_ids);
  check_same_ttt_logits(head, loaded, target, cfg);
  CHECK_THROWS_AS(head::export_head(head, head::HeadFormat::sglang, dir), Error);  // never overwrites
  CHECK_THROWS_AS(head::export_head(head, head::HeadFormat::vllm_eagle1, (tmp / "x").string()), Error);
}

TEST_CASE("SGLang export of a full draft vocabulary writes no d2t or t2d (vLLM refuses them) and imports back",
          "[head]") {
  torch::manual_seed(13);
  auto cfg = tiny_head_config(3, 2);
  cfg.draft_vocab_size = cfg.vocab_size;
  auto target = tiny_target();
  head::Eagle3Head head(cfg, head::DraftVocab::identity(cfg.vocab_size));
  head.set_target_weights(target.embedding, target.lm_head);
  TempDir tmp;
  const auto dir = (tmp / "full").string();
  head::export_head(head, head::HeadFormat::sglang, dir);
  CHECK(read_json(tmp / "full" / "config.json")["draft_vocab_size"] == 40);
  // vLLM 0.32's llama_eagle3.py / deepseek_eagle3.py make no draft_id_to_target_id when draft_vocab_size equals
  // the target's, then fail on a d2t tensor ("There is no module or parameter named 'draft_id_to_target_id'").
  auto file = model::SafetensorsFile::open((tmp / "full" / "model.safetensors").string());
  CHECK_FALSE(file.contains("d2t"));
  CHECK_FALSE(file.contains("t2d"));
  CHECK(file.contains("lm_head.weight"));
  auto loaded = head::load_head(dir);
  CHECK(loaded.config.draft_vocab_size == 40);
  check_same_ttt_logits(head, loaded, target, cfg);
  // A reduced vocabulary keeps both (the case above), and the speculators layout keeps them always.
  head::export_head(head, head::HeadFormat::speculators, (tmp / "spec").string(), target.embedding);
  CHECK(model::SafetensorsFile::open((tmp / "spec" / "model.safetensors").string()).contains("d2t"));
}

TEST_CASE("speculators export: Eagle3Speculator config and layers.0 names, round trip", "[head]") {
  torch::manual_seed(12);
  auto cfg = tiny_head_config(3, 4);
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  TempDir tmp;
  auto dir = (tmp / "spec").string();
  // Without the target's embedding a speculators export is refused (speculators would zero it).
  CHECK_THROWS_WITH(head::export_head(head, head::HeadFormat::speculators, dir),
                    Catch::Contains("embed_tokens.weight"));
  CHECK_FALSE(std::filesystem::exists(dir));
  head::export_head(head, head::HeadFormat::speculators, dir, target.embedding);
  auto j = read_json(tmp / "spec" / "config.json");
  CHECK(j["speculators_model_type"] == "eagle3");
  CHECK(j["architectures"] == json({"Eagle3Speculator"}));
  CHECK(j["norm_before_residual"] == false);
  CHECK(j["draft_vocab_size"] == 12);
  CHECK(j["target_hidden_size"] == 16);
  CHECK(j["eagle_aux_hidden_state_layer_ids"] == json({2, 4, 5}));
  CHECK(j["transformer_layer_config"]["num_hidden_layers"] == 1);
  CHECK(j["transformer_layer_config"]["hidden_size"] == 16);
  CHECK(j["speculators_config"]["algorithm"] == "eagle3");
  CHECK(j["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 4);
  CHECK(j["speculators_config"]["verifier"]["name_or_path"] == "tests/tiny");
  CHECK(j["speculators_config"]["verifier"]["architectures"] == json({"LlamaForCausalLM"}));
  CHECK(j.contains("speculators_version"));
  auto file = model::SafetensorsFile::open((tmp / "spec" / "model.safetensors").string());
  CHECK(file.contains("layers.0.hidden_norm.weight"));
  CHECK(file.contains("layers.0.self_attn.q_proj.weight"));
  CHECK_FALSE(file.contains("midlayer.hidden_norm.weight"));
  REQUIRE(file.contains("embed_tokens.weight"));
  CHECK(torch::equal(file.get("embed_tokens.weight"), target.embedding));
  auto loaded = head::load_head(dir);
  CHECK(loaded.format == head::HeadFormat::speculators);
  CHECK(loaded.config.ttt_steps == 4);
  check_same_ttt_logits(head, loaded, target, cfg);
}

TEST_CASE("vllm-eagle1 export: names without input_layernorm, round trip, a biased fc is refused", "[head]") {
  torch::manual_seed(13);
  auto cfg = tiny_head_config(1);
  auto target = tiny_target();
  head::Eagle1Head head(cfg);
  head.set_target_weights(target.embedding, target.lm_head);
  TempDir tmp;
  auto dir = (tmp / "e1").string();
  head::export_head(head, head::HeadFormat::vllm_eagle1, dir);
  auto j = read_json(tmp / "e1" / "config.json");
  CHECK(j["architectures"] == json({"EagleLlamaForCausalLM"}));
  auto file = model::SafetensorsFile::open((tmp / "e1" / "model.safetensors").string());
  CHECK(file.shape("fc.weight") == std::vector<std::int64_t>{16, 32});
  CHECK(file.contains("layers.0.post_attention_layernorm.weight"));
  CHECK_FALSE(file.contains("layers.0.input_layernorm.weight"));
  CHECK_FALSE(file.contains("fc.bias"));
  CHECK_FALSE(file.contains("lm_head.weight"));
  auto loaded = head::load_head(dir);
  CHECK(loaded.config.eagle_version == 1);
  loaded.head->set_target_weights(target.embedding, target.lm_head);
  auto in = tiny_inputs(cfg);
  CHECK(torch::equal(head.predict_features(in), dynamic_cast<head::Eagle1Head&>(*loaded.head).predict_features(in)));

  auto biased_cfg = cfg;
  biased_cfg.fc_bias = true;
  head::Eagle1Head biased(biased_cfg);
  try {
    head::export_head(biased, head::HeadFormat::vllm_eagle1, (tmp / "b").string());
    FAIL("a biased fc was exported");
  } catch (const Error& e) {
    CHECK_THAT(e.format(), Catch::Contains("fc.bias"));
  }
  CHECK_FALSE(std::filesystem::exists(tmp / "b"));
}

TEST_CASE("eagle-train export converts a checkpoint and refuses what it cannot write", "[head]") {
  torch::manual_seed(14);
  auto cfg = tiny_head_config(3, 2);
  head::Eagle3Head head(cfg, tiny_vocab());
  TempDir tmp;
  std::filesystem::create_directories(tmp / "ckpt");
  head::write_head_files(head, head::checkpoint_format(cfg), (tmp / "ckpt").string());
  // speculators needs the target's embedding: the head names "tests/tiny", which is not there.
  auto no_target = run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --format speculators --output " +
                           (tmp / "spec").string());
  CHECK(no_target.exit_code == 3);
  CHECK_THAT(no_target.output, Catch::Contains("tests/tiny"));
  CHECK_FALSE(std::filesystem::exists(tmp / "spec"));
  auto ok =
      run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --format sglang --output " + (tmp / "out").string());
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(std::filesystem::exists(tmp / "out" / "model.safetensors"));
  CHECK(read_json(tmp / "out" / "config.json")["architectures"] == json({"LlamaForCausalLMEagle3"}));
  auto again =
      run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --format sglang --output " + (tmp / "out").string());
  CHECK(again.exit_code == 4);
  auto wrong = run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --format vllm-eagle1 --output " +
                       (tmp / "e1").string());
  CHECK(wrong.exit_code == 2);
  CHECK_THAT(wrong.output, Catch::Contains("vllm-eagle1"));
  auto missing = run_cli("export --checkpoint " + (tmp / "none").string() + " --output " + (tmp / "n").string());
  CHECK(missing.exit_code == 3);
  // A head holding NaN or Inf is refused naming the tensor, and nothing is written.
  {
    torch::NoGradGuard no_grad;
    head.module().named_parameters()["midlayer.mlp.down_proj.weight"][0][1] = std::numeric_limits<float>::infinity();
  }
  std::filesystem::create_directories(tmp / "nan");
  head::write_head_files(head, head::checkpoint_format(cfg), (tmp / "nan").string());
  auto nan = run_cli("export --checkpoint " + (tmp / "nan").string() + " --output " + (tmp / "nan-out").string());
  INFO(nan.output);
  CHECK(nan.exit_code == 3);
  CHECK_THAT(nan.output, Catch::Contains("NaN or Inf") && Catch::Contains("midlayer.mlp.down_proj.weight"));
  CHECK_FALSE(std::filesystem::exists(tmp / "nan-out"));
}

TEST_CASE("a SpecForge-style SGLang head imports and matches an independent PyTorch TTT forward", "[head]") {
  // Fixture from scripts/make_head_reference.py: bf16 weights, llama3 RoPE scaling, only the nested
  // (output-of-layer) aux ids, a packed row of two samples, three TTT steps.
  const std::string root = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";
  auto loaded = head::load_head(root + "heads/eagle3-ref");
  CHECK(loaded.format == head::HeadFormat::sglang);
  CHECK(loaded.config.aux_layer_ids == std::vector<std::int64_t>{2, 4, 5});
  CHECK(loaded.config.rope.type == "llama3");
  CHECK(loaded.config.rope.original_max_position_embeddings == 16);
  CHECK(loaded.config.draft_vocab_size == 20);
  eagle::test::check_head_against_reference(*loaded.head, loaded.config,
                                            model::load_safetensors(root + "reference/eagle3-head.safetensors"));
}

TEST_CASE("a head whose config.json leaves out some of its tensors is refused, the tensor named (issue 41 item 6)",
          "[head]") {
  const auto heads = std::filesystem::path(EAGLE_SOURCE_DIR) / "tests/fixtures/heads";
  struct Case {
    const char* fixture;
    json patch;  // merged into config.json
    const char* tensor;
  };
  const std::vector<Case> cases{{"eagle3-2layer-ref", {{"num_hidden_layers", 1}}, "layers.1."},
                                {"eagle31-qwen3-ref", {{"fc_norm", false}}, "fc_norm.0.weight"},
                                {"eagle31-qwen3-ref",
                                 {{"model_type", "llama"}, {"architectures", {"LlamaForCausalLMEagle3"}}},
                                 "midlayer.self_attn.k_norm.weight"},
                                {"peagle-ref", {{"eagle_train", {{"parallel_drafting", false}}}}, "mask_hidden"}};
  for (const auto& c : cases) {
    INFO(c.fixture << " " << c.patch.dump());
    TempDir tmp;
    const auto dir = tmp / "head";
    std::filesystem::copy(heads / c.fixture, dir);
    head::load_head(dir.string());  // the fixture as it is reads
    auto j = read_json(dir / "config.json");
    j.merge_patch(c.patch);
    write_file(dir / "config.json", j.dump(2));
    CHECK_THROWS_WITH(head::load_head(dir.string()), Catch::Contains("model.safetensors") &&
                                                         Catch::Contains("not part of the head") &&
                                                         Catch::Contains(c.tensor));
  }
}

TEST_CASE("export removes the temporary folder a killed export left, never a live one's (issue 53 L7)", "[head]") {
  torch::manual_seed(15);
  auto cfg = tiny_head_config(3, 2);
  head::Eagle3Head head(cfg, tiny_vocab());
  TempDir tmp;
  std::filesystem::create_directories(tmp / "ckpt");
  head::write_head_files(head, head::checkpoint_format(cfg), (tmp / "ckpt").string());
  // A process that has exited: its pid names the leftover of a killed export.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  const auto dead = tmp / (".tmp-out." + std::to_string(child));
  const auto live = tmp / (".tmp-out." + std::to_string(getpid()));  // this test: alive
  const auto other = tmp / (".tmp-other." + std::to_string(child));  // another output's
  for (const auto& d : {dead, live, other}) {
    std::filesystem::create_directories(d);
    eagle::test::write_file(d / "model.safetensors", "partial");
  }
  auto ok =
      run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --format sglang --output " + (tmp / "out").string());
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK_THAT(ok.output, Catch::Contains("left by a killed export"));
  CHECK(std::filesystem::exists(live / "model.safetensors"));
  CHECK(std::filesystem::exists(other / "model.safetensors"));
  CHECK(std::filesystem::exists(tmp / "out" / "model.safetensors"));
}
