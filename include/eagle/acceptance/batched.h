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

// The target's side of a batched evaluation's first prefill (the first batch_size prompts, rows 0..R-1,
// prefilled together whatever the draft length), kept for the next evaluation of the same prompts with
// the same batch size (measure()'s depths): their cache columns [0, N) and what the head reads of them.
// Decoding from it is bit for bit decoding from a prefill run again (the same forward on the same
// inputs). Not kept for targets whose cache holds more than keys and values (the hybrids' states).
struct PrefillReuse {
  std::int64_t rows = 0, length = 0;  // R, N; 0: nothing kept yet
  target::KvPrefix kv;                // the target cache's rows [0, R), columns [0, N)
  torch::Tensor aux_hidden;           // [R, N, F] the head's features of the prompts
  torch::Tensor first;                // [R] int64 (host) the target's first choice after each prompt
  std::int64_t reused = 0;            // prefills skipped (for the log)
};

// reuse: where the first prefill is kept or taken from (nullptr: prefilled every time).
AcceptanceResult batched_acceptance(const target::TargetModel& target, head::DraftHead& head,
                                    const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t max_new_tokens,
                                    std::int64_t draft_len, std::int64_t batch_size, std::int64_t max_cuda_graphs = 0,
                                    PrefillReuse* reuse = nullptr);

}  // namespace eagle::acceptance
