// Shared helpers of the data tests.
#pragma once

#include "eagle/data/loader.h"

namespace eagle::test {

// Load options with the strict defaults (error on a bad sample, truncate long ones, seed 42).
inline data::LoadOptions load_options(std::int64_t seq_len = 2048, double validation_fraction = 0) {
  return {seq_len, config::BadSamplePolicy::error, config::OverlongPolicy::truncate, validation_fraction, 42};
}

// Every sample of a dataset, in order.
inline std::vector<data::Sample> all_samples(const data::Dataset& ds) {
  std::vector<data::Sample> out;
  for (std::size_t i = 0; i < ds.size(); ++i) out.push_back(ds.sample(i));
  return out;
}

// Equal ids, masks and categories, sample by sample.
inline bool same(const std::vector<data::Sample>& a, const std::vector<data::Sample>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].input_ids != b[i].input_ids || a[i].loss_mask != b[i].loss_mask || a[i].category != b[i].category)
      return false;
  return true;
}

}  // namespace eagle::test
