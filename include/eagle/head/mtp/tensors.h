// The MTP head's tensors under a checkpoint's native names: every parameter as mtp_native_name names
// it, except the MoE block's routed experts, which a checkpoint holds either fused as the head holds
// them (transformers 5's layout: <block>mlp.experts.gate_up_proj [E, 2 I, H], .down_proj [E, H, I]) or
// per expert (Hugging Face checkpoints: <block>mlp.experts.{e}.gate_proj.weight [I, H], up_proj [I, H],
// down_proj [H, I]); vLLM's qwen3_5_mtp.py and qwen3_next_mtp.py load either.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/head/head.h"
#include "eagle/head/mtp/layout.h"

namespace eagle::head {

enum class ExpertNames { fused, per_expert };

// One checkpoint tensor of the head: its native name and the parameter, or the view of it, that holds it
// (reading copies into the view, writing reads it); after the parameters, the frozen buffers a checkpoint
// holds (is_checkpoint_buffer: DeepSeek's and GLM's mlp.gate.e_score_correction_bias).
struct MtpTensor {
  std::string name;
  torch::Tensor value;
};
std::vector<MtpTensor> mtp_tensors(DraftHead& head, const MtpLayout& layout, ExpertNames experts);

// How a folder's tensor names (name -> shard) hold the experts: per_expert where expert 0's gate_proj
// is there, else fused (also for a head without experts).
ExpertNames expert_names_of(const MtpLayout& layout, const std::map<std::string, std::string>& names);

}  // namespace eagle::head
