// Helpers of the target-model tests: the fixture folders (tests/fixtures/models), their configs, and
// the error a config or a checkpoint folder gives.
#pragma once

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

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

}  // namespace eagle::test
