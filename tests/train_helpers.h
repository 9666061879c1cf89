// Test helper: the error a training run ends with (the test fails when the run does not throw).
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "eagle/config/options.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"

namespace eagle::test {

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
