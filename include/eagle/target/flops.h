// Model FLOPs of the target's forward on a batch's real tokens, for the trainer's TFLOP/s and MFU
// (docs/training.md, "TFLOP/s and MFU"). Matmul FLOPs only, 2 per multiply-add, as PaLM's MFU counts:
// every projection, MLP or active expert, the LM head over the whole vocabulary, and attention's scores
// and weighted values over the keys each real token attends in its own sample (a sliding layer's window
// at most). Norms, activations, RoPE, softmax and losses are not counted; padding is waste, not work.
#pragma once

#include <cstdint>

#include "eagle/data/batch.h"
#include "eagle/target/target_config.h"

namespace eagle::target {

// The keys the batch's real tokens attend causally within their own samples, summed: position + 1 per
// token, at most `window` (0: no window), plus `extra` keys per token (a TTT step's diagonal keys).
double attended_keys(const data::Batch& b, std::int64_t window = 0, std::int64_t extra = 0);

// Forward FLOPs of one real token through the target's layers' projections, MLPs (or routers and active
// experts) and the LM head (attention's scores and values excluded: forward_flops adds them per key).
double token_flops(const TargetConfig& c);

// The target's forward on the batch's real tokens: token_flops per real token plus, in every attention
// layer, 2 x heads x (query width + value width) FLOPs per attended key.
double forward_flops(const TargetConfig& c, const data::Batch& b);

}  // namespace eagle::target
