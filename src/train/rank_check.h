// At start-up every rank compares with the others what must agree in data parallelism: the options
// that change what is trained, the data and the target (rank_check.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle/device/distributed.h"
#include "eagle/head/head.h"

namespace eagle::train {

// One digest per thing compared: what ("option ttt_steps", "the training data"), its digest, and
// the value as this rank's error shows it.
struct RankDigest {
  std::string what;
  std::uint64_t digest = 0;
  std::string value;
};
using RankDigests = std::vector<RankDigest>;

// The options of a train config (config::to_json) that must agree across ranks: all but those of
// one process or one machine (device, threads, paths that may be mounted elsewhere, logging).
RankDigests option_digests(const nlohmann::json& options);
// The training data (its sample lengths, in order) and the target the head was shaped after.
RankDigests input_digests(const std::vector<std::int64_t>& lengths, const head::HeadConfig& head);

// Every rank exchanges its digests (the same count on each, so the collectives match); when any
// differs, every rank throws Error(usage) naming the first that differs and this rank's value. One
// process: nothing to compare.
void check_ranks_agree(device::ProcessGroup& group, const RankDigests& digests);

}  // namespace eagle::train
