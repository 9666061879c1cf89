// Small random heads and inputs for the [head] tests: random tensors stand in for the target's
// features (legitimate inputs of the head), with hand-built token ids and document layouts.
#pragma once

#include <torch/torch.h>

#include "eagle/model/eagle1_head.h"
#include "eagle/model/eagle3_head.h"

namespace eagle::test {

inline model::HeadConfig tiny_head_config(std::int64_t version, std::int64_t steps = 3) {
  model::HeadConfig c;
  c.eagle_version = version;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.rope.head_dim = 4;
  c.vocab_size = 40;
  c.draft_vocab_size = version == 3 ? 12 : 40;
  c.target_hidden_size = 16;
  c.target_num_hidden_layers = 8;
  c.aux_layer_ids = version == 3 ? std::vector<std::int64_t>{2, 4, 5} : std::vector<std::int64_t>{};
  c.ttt_steps = steps;
  c.target_name_or_path = "tests/tiny";
  c.target_architecture = "LlamaForCausalLM";
  return c;
}

// Draft ids: every third target id (0, 3, ..., 33), so d2t is not zero and t2d not all true.
inline model::DraftVocab tiny_vocab() {
  model::DraftVocab v;
  v.target_vocab_size = 40;
  for (std::int64_t i = 0; i < 12; ++i) v.draft_ids.push_back(3 * i);
  return v;
}

struct TinyTarget {
  torch::Tensor embedding, lm_head;  // [V, H]
};

inline TinyTarget tiny_target(std::int64_t v = 40, std::int64_t h = 16) {
  return {torch::randn({v, h}), torch::randn({v, h}) * 0.3};
}

// Two rows of length 10: row 0 holds one sample of 8 tokens then padding; row 1 packs samples of
// 4 and 6 tokens. Features and teacher logits random; target_argmax mostly in the draft vocabulary.
inline model::HeadInputs tiny_inputs(const model::HeadConfig& cfg) {
  model::HeadInputs in;
  const std::int64_t b = 2, t = 10;
  in.input_ids = torch::randint(0, cfg.vocab_size, {b, t}, torch::kInt64);
  in.document_ids =
      torch::tensor({0, 0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, torch::kInt64).view({b, t});
  in.position_ids =
      torch::tensor({0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5}, torch::kInt64).view({b, t});
  in.loss_mask = (in.document_ids >= 0).to(torch::kUInt8);
  in.loss_mask.index_put_({0, 1}, 0);
  in.aux_hidden = torch::randn({b, t, 3 * cfg.target_hidden_size});
  in.final_hidden = torch::randn({b, t, cfg.hidden_size});
  in.teacher_logits = torch::randn({b, t, cfg.draft_vocab_size}) * 2;
  in.target_argmax = torch::randint(0, 12, {b, t}, torch::kInt64) * 3;
  in.target_argmax.index_put_({1, 3}, 4);  // not a draft id
  return in;
}

}  // namespace eagle::test
