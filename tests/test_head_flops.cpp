// Model FLOPs of a training step (head/flops.h, target/flops.h, train/step_flops.h) against hand counts
// for one small config of each kind of count: the target's forward (full and sliding attention), an
// EAGLE-3 step (TTT unroll) and a DFlash step (anchored blocks). Every number below was counted by hand
// from the layer shapes written beside it (2 FLOPs per multiply-add; docs/training.md, "TFLOP/s and MFU").
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/head/draft_spec.h"
#include "eagle/head/flops.h"
#include "eagle/target/flops.h"
#include "eagle/train/step_flops.h"

using namespace eagle;

namespace {

// One row of 6 columns: sample 0 at positions 0..2, sample 1 at 0..1, one padding column.
data::Batch two_samples() {
  data::Batch b;
  b.rows = 1;
  b.length = 6;
  b.input_ids = {5, 6, 7, 8, 9, 0};
  b.loss_mask = {0, 1, 1, 0, 1, 0};
  b.position_ids = {0, 1, 2, 0, 1, 0};
  b.document_ids = {0, 0, 0, 1, 1, -1};
  b.real_tokens = 5;
  b.packed = true;
  return b;
}

// H 8, MLP 16, 2 query heads and 1 key/value head of width 4, 2 layers, vocabulary 32.
target::TargetConfig tiny_target() {
  target::TargetConfig c;
  c.vocab_size = 32;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  return c;
}

head::HeadConfig tiny_head() {
  head::HeadConfig h;
  h.hidden_size = 8;
  h.intermediate_size = 16;
  h.num_attention_heads = 2;
  h.num_key_value_heads = 1;
  h.head_dim = 4;
  h.vocab_size = 32;
  h.target_hidden_size = 8;
  return h;
}

}  // namespace

TEST_CASE("the target's forward FLOPs match a hand count, with full and sliding attention", "[head]") {
  const auto b = two_samples();
  // Keys attended: sample 0 attends 1 + 2 + 3, sample 1 attends 1 + 2; padding nothing.
  CHECK(target::attended_keys(b) == 9);
  CHECK(target::attended_keys(b, /*window=*/2) == 8);     // 1 2 2 | 1 2
  CHECK(target::attended_keys(b, 0, /*extra=*/1) == 14);  // 9 + 5 tokens x 1
  auto c = tiny_target();
  // Per layer: q 8x8 (64), k and v 8x4 each (64), o 8x8 (64), MLP 3 x 8x16 (384): 576 multiply-adds; two
  // layers 1152, the LM head 8x32 256: 1408 multiply-adds, 2816 FLOPs per real token.
  CHECK(target::token_flops(c) == 2816);
  // 5 real tokens: 14080; attention per key and layer 2 x 2 heads x (4 + 4) = 32, 2 layers x 9 keys: 576.
  CHECK(target::forward_flops(c, b) == 14080 + 576);
  // Layer 1 slides over 2 keys: 32 x 9 + 32 x 8.
  c.attention.layer_windows = {0, 2};
  CHECK(target::forward_flops(c, b) == 14080 + 288 + 256);
}

TEST_CASE("an EAGLE-3 training step's FLOPs match a hand count of its TTT unroll", "[head]") {
  auto h = tiny_head();
  h.eagle_version = 3;
  h.aux_layer_ids = {0, 1, 2};
  h.draft_vocab_size = 16;
  h.ttt_steps = 2;
  const auto b = two_samples();
  // Trained multiply-adds per real token: fc 24x8 (192); per TTT step the layer on [e; s] (q 16x8 128,
  // k and v 16x4 each 128, o 8x8 64, MLP 384: 704) and the LM head 8x16 (128); 2 steps: 192 + 1664 = 1856,
  // x 2 FLOPs x 3 (forward and backward) = 11136 per token, 55680 for 5 tokens.
  // Attention: step 0 attends 9 keys, step 1 the same 9 plus 5 diagonal ones: 23 keys x 32 FLOPs x 3 = 2208.
  const double expected = 55680 + 2208;
  CHECK(head::ttt_train_flops(h, b, {}) == expected);
  CHECK(head::draft_spec(h).train_flops(h, b, {}) == expected);  // the row points at it
  // The step: the head plus the target's forward where the target runs in the step, each micro-batch.
  const auto t = tiny_target();
  const auto& spec = head::draft_spec(h);
  CHECK(train::step_flops(spec, h, nullptr, {b, b}, {}) == 2 * expected);
  CHECK(train::step_flops(spec, h, &t, {b}, {}) == expected + 14080 + 576);
}

TEST_CASE("a DFlash training step's FLOPs match a hand count of its anchored blocks", "[head]") {
  auto h = tiny_head();
  h.aux_layer_ids = {1, 2};
  h.draft_vocab_size = 32;
  h.dflash_block_size = 4;
  h.num_layers = 1;
  h.qk_norm = true;
  // One sample of 7 tokens and a padding column; anchors 0 and 2 hold their block of 4 in the sample,
  // 4 reaches the padding and 6 the end of the row: 2 blocks.
  data::Batch b;
  b.rows = 1;
  b.length = 8;
  b.input_ids = {1, 2, 3, 4, 5, 6, 7, 0};
  b.loss_mask = {1, 1, 1, 1, 1, 1, 1, 0};
  b.position_ids = {0, 1, 2, 3, 4, 5, 6, 0};
  b.document_ids = {0, 0, 0, 0, 0, 0, 0, -1};
  b.real_tokens = 7;
  const auto anchors = torch::tensor({0, 2, 4, 6}, torch::kInt64).view({1, 4});
  // Per real token: fc 16x8 (128) and the layer's context keys and values 8x4 each (64): 192 multiply-adds,
  // x 2 x 3 = 1152 FLOPs, 8064 for 7 tokens.
  // Blocks: 2 x 4 tokens through the layer (q 64, k and v 64, o 64, MLP 384: 576), trained: 4608; the
  // target's LM head on 3 slots each, frozen (x 2): 2 x 3 x 8x32 = 1536; 2 x (3 x 4608 + 2 x 1536) = 33792.
  // Attention keys: anchor 0's 4 queries attend 0 + 4 keys, anchor 2's 2 + 4: 40 keys x 32 x 3 = 3840.
  const double expected = 8064 + 33792 + 3840;
  CHECK(head::block_train_flops(h, b, anchors) == expected);
  CHECK(head::draft_spec(h).train_flops(h, b, anchors) == expected);
  // DSpark's Markov head adds rank x draft vocabulary per slot, trained: 2 blocks x 4 slots x 4x32 x 6.
  h.dspark_markov_rank = 4;
  h.dspark_sample_from_anchor = true;
  // Its anchor-first block drafts 4 slots (labels reach 4 past the anchor): only anchor 0 and 2 still fit
  // (2 + 4 = 6 < 7); the LM head now runs on 4 slots: 2 x 4 x 8x32 x 2 x 2 = 8192 instead of 6144.
  CHECK(head::block_train_flops(h, b, anchors) == expected - 6144 + 8192 + 2 * 4 * 4 * 32 * 6);
}
