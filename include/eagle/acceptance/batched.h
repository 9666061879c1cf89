// Greedy chain speculative decoding of many prompts at once: batch_size rows of ragged KV caches for
// the target and the head, a row refilled with the next prompt when its prompt ends; on a GPU the
// rounds' fixed-shape steps (verify, draft) replay CUDA graphs where the target allows
// (TargetModel::graphed_steps). Equal per prompt to decode_prompt with ChainProposer and
// GreedyVerifier (up to the rounding of batched matrix products); needs head.drafts_ragged().
#pragma once

#include <cstdint>
#include <vector>

#include "eagle/acceptance/decode.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::acceptance {

AcceptanceResult batched_acceptance(const target::TargetModel& target, head::DraftHead& head,
                                    const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t max_new_tokens,
                                    std::int64_t draft_len, std::int64_t batch_size, std::int64_t max_cuda_graphs = 0);

}  // namespace eagle::acceptance
