// Shared helpers of the data tests.
#pragma once

#include "eagle/data/loader.h"

namespace eagle::test {

// Load options with the strict defaults (error on a bad sample, truncate long ones, seed 42).
inline data::LoadOptions load_options(std::int64_t seq_len = 2048, double validation_fraction = 0) {
  return {seq_len, config::BadSamplePolicy::error, config::OverlongPolicy::truncate, validation_fraction, 42};
}

}  // namespace eagle::test
