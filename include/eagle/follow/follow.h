// eagle-train follow (docs/follow.md): a draft kept current while its target changes. Rounds of training on the
// newest shards of a rollout folder (with replay of older ones), each round a train run of publish_every steps that
// starts from the draft of the round before; after each round the new draft and the serving one are measured on
// the held-out newest shard against the current target, and the new one is published (versions/<n>, latest) only
// if it does not lose acceptance. Runs until a stop signal or max_steps; a restart on the same output_dir resumes
// from its ledger.
#pragma once

#include <string>
#include <vector>

#include "eagle/config/options.h"

namespace eagle::follow {

void follow(const config::Options& opts, const std::vector<std::string>& command_line);

}  // namespace eagle::follow
