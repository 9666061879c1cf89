// Test helpers for the MTP heads (tests/test_head_mtp_*.cpp): a fixture target folder's MTP head with 3
// TTT steps, and the head inputs of a reference file written by scripts/make_mtp*_reference.py.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "eagle/head/head_io.h"
#include "eagle/head/mtp_head.h"
#include "eagle/head/mtp_io.h"
#include "eagle/target/target.h"

namespace eagle::test {

// The folder's MTP head re-made with 3 TTT steps (a folder's own default is 1, vLLM's k), its weights read
// from the target folder, the target's embedding and LM head set.
inline std::shared_ptr<head::MtpHead> mtp_three_step_head(const std::string& folder,
                                                          head::RecomputeMode mode = head::RecomputeMode::off,
                                                          std::int64_t chunk = 0) {
  auto cfg = head::read_head_folder_config(folder);
  cfg.ttt_steps = 3;
  cfg.ttt_loss_decay = 0.8;
  cfg.recompute = mode;
  cfg.loss_chunk_size = chunk;
  auto head = std::make_shared<head::MtpHead>(cfg);
  head::load_mtp_weights(*head, folder);
  auto target = target::TargetModel::load_ends(folder, torch::kFloat32, torch::kCPU);
  head->set_target_weights(target.embed, target.lm_head);
  return head;
}

// The reference's row: ids, positions, documents, the target's hidden state, its logits and argmax, the mask.
inline head::HeadInputs mtp_reference_inputs(const std::map<std::string, torch::Tensor>& ref) {
  head::HeadInputs in;
  in.input_ids = ref.at("input_ids");
  in.position_ids = ref.at("position_ids");
  in.document_ids = ref.at("document_ids");
  in.aux_hidden = ref.at("hidden");
  in.teacher_logits = ref.at("target_logits");
  in.target_argmax = ref.at("target_argmax");
  in.loss_mask = ref.at("loss_mask");
  return in;
}

}  // namespace eagle::test
