// Helpers of the target-model tests: the fixture folders (tests/fixtures/models), their configs, the
// error a config or a checkpoint folder gives, and the transformers references (tests/fixtures/reference)
// with what compares a forward to them.
#pragma once

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"

namespace eagle::test {

inline std::filesystem::path model_fixture(const std::string& name) {
  return std::filesystem::path(EAGLE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

inline nlohmann::json fixture_config(const std::string& name) {
  return nlohmann::json::parse(read_file(model_fixture(name) / "config.json"));
}

// config written as dir/config.json and read.
inline target::TargetConfig parse_config(const TempDir& dir, const nlohmann::json& config) {
  write_file(dir / "config.json", config.dump());
  return target::TargetConfig::from_json_file((dir / "config.json").string());
}

// The error reading this config gives (the test fails when it reads fine).
inline std::string config_error(const TempDir& dir, const nlohmann::json& config) {
  try {
    parse_config(dir, config);
  } catch (const Error& e) {
    return e.format();
  }
  FAIL("no error for config " << config.dump());
  return "";
}

// The error loading a model folder of this config and these tensors in dir gives.
inline std::string model_load_error(const std::filesystem::path& dir, const nlohmann::json& config,
                                    const std::map<std::string, torch::Tensor>& tensors) {
  write_file(dir / "config.json", config.dump(2));
  model::save_safetensors((dir / "model.safetensors").string(), tensors);
  try {
    target::TargetModel::load(dir.string(), torch::kFloat32, torch::kCPU);
  } catch (const Error& e) {
    return e.format();
  }
  FAIL("no error loading " << dir);
  return "";
}

// The transformers reference outputs of a fixture (scripts/make_reference_fixtures.py).
inline std::map<std::string, torch::Tensor> reference(const std::string& name) {
  return model::load_safetensors(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/" + name + ".safetensors");
}

// A fixture model whose aux output is every hidden state hidden_states[0..L].
inline target::TargetModel load_all_hidden(const std::string& name, torch::ScalarType dtype) {
  auto m = target::TargetModel::load(model_fixture(name).string(), dtype, torch::kCPU);
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i <= m.config().num_hidden_layers; ++i) ids.push_back(i);
  m.set_aux_layer_ids(ids);
  return m;
}

// aux [B, T, (L+1) * H] as [L+1, B, T, H] fp32, the layout of the references' hidden_states.
inline torch::Tensor stacked(const torch::Tensor& aux, std::int64_t H) {
  return aux.view({aux.size(0), aux.size(1), -1, H}).permute({2, 0, 1, 3}).to(torch::kFloat32);
}

inline double max_err(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>();
}

// One unpadded row [1, T]: positions 0..T-1, one document.
inline target::TargetBatch unpadded(const torch::Tensor& ids) {
  const auto T = ids.size(1);
  return {ids, torch::arange(T).unsqueeze(0), torch::zeros({1, T}, torch::kInt64)};
}

}  // namespace eagle::test
