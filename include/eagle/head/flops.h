// Model FLOPs of a head's training step on a micro-batch's real tokens, the draft table's train_flops
// (docs/training.md, "TFLOP/s and MFU"). Matmul FLOPs only, 2 per multiply-add, as target/flops.h: a
// trained matmul counts 3 times its forward (forward, input and weight gradients), a frozen one on the
// gradient's path (the target's LM head an MTP, EAGLE-1 or block draft reads) twice, attention's scores
// and values 3 times. Recomputed activations (recompute_activations) are not counted: MFU, not hardware
// FLOPs.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/head/head.h"

namespace eagle::head {

// Multiply-adds per token of one draft decoder layer's projections (q, k, v, o or MLA's) and its MLP or
// active experts, its queries, keys and values read from in_width features (EAGLE-3's first layer: 2H).
double layer_macs(const HeadConfig& cfg, std::int64_t in_width);
// FLOPs per attended key of one draft layer's scores and weighted values (forward).
double attention_key_flops(const HeadConfig& cfg);

// The TTT heads (EAGLE-3 and its variants, EAGLE-1, MTP): the input projection once per real token, then
// for each of the K steps every layer, step k's queries attending their sample's keys plus k diagonal keys,
// and the LM head (trained over the draft vocabulary; the target's, frozen, for EAGLE-1 and MTP).
double ttt_train_flops(const HeadConfig& cfg, const data::Batch& batch, const torch::Tensor& extra);
// The block drafts (DFlash, DSpark, DFlash2): fc and each layer's context keys and values once per real
// token; then for each anchor whose block lies in its sample, the block's tokens through every layer
// (attending the keys before the anchor and the whole block), the target's frozen LM head on each drafting
// slot, and DSpark's Markov head (its rank to the draft vocabulary) there. DFlash2's convolutions and
// selector and DSpark's confidence head are small and not counted. extra: the batch's anchors [B, N].
double block_train_flops(const HeadConfig& cfg, const data::Batch& batch, const torch::Tensor& extra);

}  // namespace eagle::head
