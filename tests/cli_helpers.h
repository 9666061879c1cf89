// Test helpers for the commands' outputs: eval's JSON report, and two tensor files compared name by
// name, bit for bit.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "eagle/model/safetensors.h"
#include "helpers.h"

namespace eagle::test {

// `eagle-train eval ARGS --json`, which must succeed; its JSON report.
inline nlohmann::json eval_json(const std::string& args) {
  auto r = run_cli("eval " + args + " --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.output.substr(r.output.find("{\n")));
}

// The same tensor names in both files, each equal to the bit.
inline void check_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b) {
  auto ta = model::load_safetensors(a.string());
  auto tb = model::load_safetensors(b.string());
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, t] : ta) {
    INFO(name);
    REQUIRE(tb.count(name));
    CHECK(torch::equal(t, tb.at(name)));
  }
}

}  // namespace eagle::test
