// --draft mtp from stored features and from a vLLM hidden-states server (features/inputs_drafts.cpp), on the
// tiny dense Qwen3.5 and MiMo targets (float32): 4 steps from a dump-features folder give the losses, the
// held-out loss, the weights and the step-0 AR of the same run with the target in the step (Qwen from the
// dump's post-norm last hidden state, an EAGLE-1 and an EAGLE-3 dump alike; MiMo from a --features_pre_norm
// dump); a Qwen head trains the same from a replayed server whose files hold aux id L before the final
// norm, as vLLM's extract_hidden_states returns it. MiMo refuses a post-norm dump and any server, an MTP
// run without its target folder is refused, and so is a pre-norm dump with an aux id L, each by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "eagle/features/dump.h"
#include "eagle/features/inputs.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "replay_server.h"
#include "server_helpers.h"
#include "train_helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/";
const std::string kQwen = kModels + "tiny-qwen3-5-mtp", kMimo = kModels + "tiny-mimo";

// The first 24 samples of the smoke data: 18 to train on, 6 held out.
fs::path few_samples(const test::TempDir& tmp) {
  std::ifstream in(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl");
  std::string text, line;
  for (int i = 0; i < 24 && std::getline(in, line); ++i) text += line + "\n";
  const auto path = tmp / "few.jsonl";
  std::ofstream(path) << text;
  return path;
}

// 4 steps of the target's MTP layer, evaluated (held-out loss and AR) at steps 0, 2 and 4, saved at 4.
config::Options mtp_options(const test::TempDir& tmp, const std::string& run, const std::string& model) {
  config::Options o = test::smoke_options();
  o.model_name_or_path = model;
  o.data_path = few_samples(tmp).string();
  o.output_dir = (tmp / run).string();
  o.draft = config::Draft::mtp;
  o.ttt_steps = 3;
  o.training_seq_len = 128;
  o.bucket_granularity = 32;
  o.validation_fraction = 0.25;
  o.per_device_train_batch_size = 2;
  o.max_steps = 4;
  o.learning_rate = 1e-3;
  o.warmup_steps = 0;
  o.logging_steps = 1;
  o.eval_steps = 2;
  o.save_steps = 4;
  o.eval_num_prompts = 2;
  o.eval_max_new_tokens = 8;
  return o;
}

// The target's features of the run's data in a dump-features folder (float32, EAGLE-1 or EAGLE-3).
std::string dump(const config::Options& run, const test::TempDir& tmp, const std::string& name, bool pre_norm,
                 std::int64_t eagle_version = 1) {
  auto o = run;
  o.draft = config::Draft::eagle;
  o.eagle_version = eagle_version;
  o.output = (tmp / name).string();
  o.features_dtype = config::TargetDtype::float32;
  o.features_pre_norm = pre_norm;
  features::dump_features(o);
  return o.output;
}

config::Options from_features(config::Options o, const std::string& run, const std::string& folder) {
  o.output_dir = (fs::path(o.output_dir).parent_path() / run).string();
  o.features_path = folder;
  o.data_path.clear();
  return o;
}

struct Logged {
  std::map<std::int64_t, double> loss, eval_loss, ar;
};
Logged logged(const std::string& run) {
  Logged out;
  for (const auto& j : test::read_jsonl(fs::path(run) / "metrics.jsonl")) {
    if (!j.contains("step")) continue;
    const auto step = j["step"].get<std::int64_t>();
    if (j.contains("loss") && j["loss"].is_number()) out.loss[step] = j["loss"].get<double>();
    if (j.contains("eval_loss") && j["eval_loss"].is_number()) out.eval_loss[step] = j["eval_loss"].get<double>();
    if (j.contains("ar") && j["ar"].is_number()) out.ar[step] = j["ar"].get<double>();
  }
  return out;
}

void check_close(const std::map<std::int64_t, double>& a, const std::map<std::int64_t, double>& b, double tol) {
  REQUIRE(!a.empty());
  REQUIRE(a.size() == b.size());
  for (const auto& [step, v] : a) {
    INFO("step " << step);
    REQUIRE(b.count(step));
    CHECK(std::abs(v - b.at(step)) <= tol);
  }
}

// The run from stored or served features trains and evaluates as the online one: the same losses and
// held-out losses, the same weights, and the shipped layer's AR at step 0 exactly (the whole target decodes
// it in both, its aux id L set as the family reads it).
void check_same_run(const config::Options& online, const config::Options& other) {
  const auto a = logged(online.output_dir), b = logged(other.output_dir);
  REQUIRE(a.loss.size() == 4);
  check_close(a.loss, b.loss, 1e-5);
  check_close(a.eval_loss, b.eval_loss, 1e-5);
  REQUIRE(a.ar.count(0));
  REQUIRE(b.ar.count(0));
  CHECK(a.ar.at(0) == b.ar.at(0));
  auto ta = model::load_safetensors((fs::path(online.output_dir) / "checkpoint-4" / "model.safetensors").string());
  auto tb = model::load_safetensors((fs::path(other.output_dir) / "checkpoint-4" / "model.safetensors").string());
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, t] : ta) {
    INFO(name);
    REQUIRE(tb.count(name));
    CHECK((t - tb.at(name)).abs().max().item<double>() <= 1e-5);
  }
}

// A vLLM hidden-states server's recording in the layout of tests/fixtures/vllm-server (replay_server.h),
// made from the target in-process instead of vLLM, for every sample the run reads: per sample
// hidden_states [T, 1, H], aux id L alone before the final norm (vLLM's extract_hidden_states returns
// hidden + residual after the last layer), token_ids [T] int64, and the completion answer.
void record_target_server(const config::Options& o, const fs::path& out) {
  const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
  auto target = target::TargetModel::load(o.model_name_or_path, torch::kFloat32, torch::kCPU);
  target.set_aux_layer_ids({config.num_hidden_layers});
  target.set_last_aux_pre_norm(true);
  fs::create_directories(out / "hidden_states");
  const json model{{"id", "recorded"}, {"object", "model"}, {"max_model_len", 1024}};
  std::ofstream(out / "models.json") << json{{"object", "list"}, {"data", json::array({model})}}.dump();
  std::ofstream responses(out / "responses.jsonl");
  auto data = features::load_train_data(o, config);
  std::int64_t row = 0;
  for (const data::Dataset* ds : {&data.train, data.heldout ? &*data.heldout : nullptr}) {
    for (std::size_t i = 0; ds && i < ds->size(); ++i, ++row) {
      const auto T = ds->length(i);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(T));
      for (std::int64_t p = 0; p < T; ++p) ids[static_cast<std::size_t>(p)] = ds->token(i, p);
      const auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
      auto out_t = target.forward({input, torch::arange(T, torch::kInt64).unsqueeze(0),
                                   torch::zeros({1, T}, torch::kInt64)},
                                  {});
      model::save_safetensors((out / "hidden_states" / ("hs_" + std::to_string(row) + ".safetensors")).string(),
                              {{"hidden_states", out_t.aux_hidden[0].unsqueeze(1).contiguous()},
                               {"token_ids", input[0].contiguous()}});
      const json answer{{"id", "cmpl-" + std::to_string(row)},
                        {"object", "text_completion"},
                        {"model", "recorded"},
                        {"choices", json::array({json{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}})}};
      responses << json{{"request", {{"model", "recorded"}, {"prompt", ids}, {"max_tokens", 1}}},
                        {"response", answer.dump()}}
                       .dump()
                << "\n";
    }
  }
}

}  // namespace

TEST_CASE("a Qwen3.5 MTP head trains from dumped features as with the target in the step", "[features]") {
  test::TempDir tmp;
  const auto online = mtp_options(tmp, "online", kQwen);
  train::train(online, {"eagle-train", "train"});

  // The dump's last hidden state is after the final norm (hidden_states[L]): the Qwen step-1 state itself.
  const auto eagle1 = from_features(online, "from-eagle1", dump(online, tmp, "eagle1", /*pre_norm=*/false));
  train::train(eagle1, {"eagle-train", "train"});
  check_same_run(online, eagle1);
  auto manifest = json::parse(test::read_file(fs::path(eagle1.features_path) / "manifest.json"));
  CHECK(manifest["layout"]["last_hidden"] == "after the final norm");

  // An EAGLE-3 dump serves too: its aux features are not read.
  const auto eagle3 = from_features(online, "from-eagle3", dump(online, tmp, "eagle3", false, /*eagle_version=*/3));
  train::train(eagle3, {"eagle-train", "train"});
  check_close(logged(online.output_dir).loss, logged(eagle3.output_dir).loss, 1e-5);

  // A pre-norm dump: the trainer applies the target's final norm.
  const auto pre = from_features(online, "from-pre-norm", dump(online, tmp, "pre", true));
  train::train(pre, {"eagle-train", "train"});
  check_same_run(online, pre);

  // The shipped layer is read from the target folder: a run without it is refused, naming the flag.
  auto no_target = eagle1;
  no_target.output_dir = (tmp / "no-target").string();
  no_target.model_name_or_path.clear();
  const auto e = test::train_error(no_target);
  CHECK_THAT(e.format(), Catch::Contains("shipped layer is read from the target's folder") &&
                             Catch::Contains("model_name_or_path"));
}

TEST_CASE("a MiMo MTP head trains from a --features_pre_norm dump and refuses a post-norm one", "[features]") {
  test::TempDir tmp;
  const auto online = mtp_options(tmp, "online", kMimo);
  train::train(online, {"eagle-train", "train"});

  const auto pre_folder = dump(online, tmp, "pre", /*pre_norm=*/true);
  auto manifest = json::parse(test::read_file(fs::path(pre_folder) / "manifest.json"));
  CHECK(manifest["layout"]["last_hidden"] == "before the final norm");
  CHECK(manifest["options"]["features_pre_norm"] == true);
  const auto pre = from_features(online, "from-pre-norm", pre_folder);
  train::train(pre, {"eagle-train", "train"});
  check_same_run(online, pre);

  // MiMo's step 1 reads the state before the final norm, which a default dump does not hold.
  const auto post = from_features(online, "from-post-norm", dump(online, tmp, "post", false));
  CHECK_THAT(test::train_error(post).format(),
             Catch::Contains("MiMo's MTP layer reads it before") && Catch::Contains("--features_pre_norm") &&
                 Catch::Contains("layout.last_hidden"));

  // The folder's flag is one of its options: completing it without the flag is refused.
  auto again = online;
  again.draft = config::Draft::eagle;
  again.eagle_version = 1;
  again.output = pre_folder;
  again.features_dtype = config::TargetDtype::float32;
  CHECK_THROWS_WITH(features::dump_features(again), Catch::Contains("features_pre_norm: folder true, now none"));
  // The pre-norm last state is read as aux id L, which an EAGLE-3 aux layer cannot name at the same time.
  again.output = (tmp / "with-last").string();
  again.eagle_version = 3;
  again.aux_hidden_state_layer_ids = {0, 1, 2};  // tiny-mimo: 2 layers
  again.features_pre_norm = true;
  CHECK_THROWS_WITH(features::dump_features(again), Catch::Contains("features_pre_norm keeps the last layer"));

  // vLLM's MiMoModel returns no aux hidden states: no server serves MiMo's MTP layer.
  auto served = online;
  served.output_dir = (tmp / "served").string();
  served.target_server = "http://127.0.0.1:9";
  served.target_server_storage = (tmp / "storage").string();
  CHECK_THAT(test::train_error(served).format(),
             Catch::Contains("no hidden states of a MiMo target") && Catch::Contains("target_server"));
}

TEST_CASE("a Qwen3.5 MTP head trains from a hidden-states server's pre-norm aux id L as in-process", "[features]") {
  test::TempDir tmp;
  const auto online = mtp_options(tmp, "online", kQwen);
  train::train(online, {"eagle-train", "train"});

  record_target_server(online, tmp / "recording");
  test::ReplayServer server(tmp / "recording", tmp / "storage");
  auto served = online;
  served.output_dir = (tmp / "served").string();
  served.target_server = server.url();
  served.target_server_storage = (tmp / "storage").string();
  served.target_server_retries = 1;
  served.target_server_timeout_s = 10;
  train::train(served, {"eagle-train", "train"});
  // Served before the final norm: the trainer applies the target's own (TargetEnds::norm).
  check_same_run(online, served);
  CHECK(server.completions() > 0);
  CHECK(test::files_in(tmp / "storage") == 0);
}
