// Test helpers for runs: the smoke options, and the error a training run ends with.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "eagle/config/options.h"
#include "eagle/config/resolve.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"

namespace eagle::test {

// configs/smoke.json on the tiny Llama fixture (tests/fixtures/models/tiny-llama) and its data
// (tests/fixtures/data/smoke.jsonl); callers set the output and what they vary.
inline config::Options smoke_options() {
  config::Options o;
  config::apply_json_file(o, std::string(EAGLE_SOURCE_DIR) + "/configs/smoke.json");
  o.model_name_or_path = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama";
  o.data_path = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl";
  return o;
}

inline Error train_error(const config::Options& o, const train::TrainHooks& hooks = {}) {
  try {
    train::train(o, {"eagle-train", "train"}, hooks);
  } catch (const Error& e) {
    return e;
  }
  FAIL("the run did not throw");
  return Error(ErrorKind::internal, "unreachable");
}

}  // namespace eagle::test
