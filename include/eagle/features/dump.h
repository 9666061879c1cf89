// `eagle-train dump-features`: the frozen target run once over a dataset, in length-sorted batches
// (graphed per shape on a GPU), and what training needs of it stored in a features folder
// (docs/offline.md): the prepared data, the target's ends, and per token the aux hidden states,
// the last hidden state after the final norm (before it with features_pre_norm, as the manifest
// records) and the target's argmax, in shards of bounded size.
// A killed dump continues where it stopped when run again with the same options.
#pragma once

#include <cstdint>
#include <functional>

#include "eagle/config/options.h"

namespace eagle::features {

struct DumpSummary {
  std::int64_t samples = 0, tokens = 0;         // of the whole folder
  std::int64_t shards = 0, shards_written = 0;  // shards_written: by this process (the rest existed)
  std::uint64_t bytes_per_token = 0, shard_bytes = 0;
  double seconds = 0, tokens_per_s = 0;  // this process's target forwards and writes
  bool already_complete = false;         // the folder was complete: nothing was done
};

// What an in-process caller (a test) may watch; empty functions are not called.
struct DumpHooks {
  std::function<void(std::int64_t shards_written)> after_shard;
};

DumpSummary dump_features(const config::Options& opts, const DumpHooks& hooks = {});

}  // namespace eagle::features
