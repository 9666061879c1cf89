// The target a dump records: every tensor fingerprinted from its files (name, dtype, shape, sampled
// bytes), so a fine-tune that keeps the final norm and the LM head is refused by the tensor it
// changed, both when a dump is resumed and when a run trains from the features.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "eagle/features/dump.h"
#include "eagle/features/store.h"
#include "eagle/features/target_identity.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "train_helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kTinyLlama = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama";
constexpr const char* kTuned = "model.layers.1.mlp.down_proj.weight";

// A copy of the tiny Llama in dir with one mid-layer tensor changed (a fine-tune of one layer):
// the embedding, final norm and LM head stay the same.
void fine_tune(const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy_file(kTinyLlama + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  auto tensors = model::load_safetensors(kTinyLlama + "/model.safetensors");
  for (auto& [name, t] : tensors) t = t.clone();
  tensors.at(kTuned) += 1e-3;
  model::save_safetensors((dir / "model.safetensors").string(), tensors);
}

config::Options dump_options(const fs::path& out, const std::string& model) {
  config::Options o = test::smoke_options();
  o.model_name_or_path = model;
  o.training_seq_len = 64;
  o.output = out.string();
  o.features_shard_mb = 1;
  return o;
}

}  // namespace

TEST_CASE("every tensor of a target is fingerprinted from its files", "[features]") {
  test::TempDir tmp;
  const auto base = target::tensor_fingerprints(kTinyLlama);
  const auto loaded = target::TargetModel::load(kTinyLlama, torch::ScalarType::Undefined, torch::kCPU);
  CHECK(base.size() == 3 + 9 * static_cast<std::size_t>(loaded.config().num_hidden_layers));  // each one
  CHECK_THAT(base.at(kTuned), Catch::StartsWith("float32 [64, 96] "));
  fine_tune(tmp / "tuned");
  const auto tuned = target::tensor_fingerprints((tmp / "tuned").string());
  for (const auto& [name, print] : base) {
    INFO(name);
    CHECK((print == tuned.at(name)) == (name != kTuned));
  }
}

TEST_CASE("a dump resumed with a fine-tuned target, or trained from with one, is refused by tensor", "[features]") {
  test::TempDir tmp;
  const auto model = tmp / "model";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kTinyLlama + "/" + f, model / f);

  SECTION("a resumed dump") {
    auto o = dump_options(tmp / "f", model.string());
    features::DumpHooks kill;
    kill.after_shard = [](std::int64_t) { throw Error(ErrorKind::interrupted, "killed"); };
    CHECK_THROWS_AS(features::dump_features(o, kill), Error);
    fine_tune(model);  // the same folder now holds a fine-tune of one layer
    try {
      features::dump_features(o);
      FAIL("the dump continued with another target");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      CHECK_THAT(e.format(), Catch::Contains("computed by another target") &&
                                 Catch::Contains(std::string("target.tensors \"") + kTuned + "\"") &&
                                 Catch::Contains("manifest.json"));
    }
    CHECK_FALSE(features::read_manifest(o.output).complete);
  }
  SECTION("training from the features") {
    const auto dump = tmp / "f";
    features::dump_features(dump_options(dump, model.string()));
    fine_tune(tmp / "tuned");
    auto run = [&](const fs::path& target) {
      config::Options t = test::smoke_options();
      t.features_path = dump.string();
      t.data_path.clear();
      t.model_name_or_path = target.string();
      t.training_seq_len = 64;
      t.max_steps = 1;
      t.eval_steps = 0;
      t.save_steps = 0;
      t.eval_num_prompts = 0;  // only the ends of the target are loaded: the check reads its files
      t.output_dir = (tmp / ("run-" + target.filename().string())).string();
      return t;
    };
    const auto e = test::train_error(run(tmp / "tuned"));
    CHECK(e.kind() == ErrorKind::usage);
    CHECK_THAT(e.format(),
               Catch::Contains(std::string("target.tensors \"") + kTuned + "\"") && Catch::Contains("tuned"));
    // The dump's own target, by another path (a copy): accepted.
    fs::create_directories(tmp / "copy");
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(model / f, tmp / "copy" / f);
    CHECK_NOTHROW(train::train(run(tmp / "copy"), {"eagle-train", "train"}));
  }
}

TEST_CASE("a features folder of the first version is refused: its fingerprint covered the ends only", "[features]") {
  test::TempDir tmp;
  test::write_file(tmp / "manifest.json", R"({"format": "eagle-train features", "version": 1})");
  CHECK_THROWS_WITH(features::read_manifest(tmp.path().string()),
                    Catch::Contains("unsupported features version") && Catch::Contains("dump the features again"));
}
