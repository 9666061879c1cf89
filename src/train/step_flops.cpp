// A step's model FLOPs and GEMM shapes (step_flops.h).
#include "eagle/train/step_flops.h"

#include "eagle/target/flops.h"

namespace eagle::train {

double step_flops(const head::DraftSpec& spec, const head::HeadConfig& cfg, const target::TargetConfig* target,
                  const std::vector<data::Batch>& micro, const std::vector<torch::Tensor>& extras) {
  double flops = 0;
  for (std::size_t i = 0; i < micro.size(); ++i) {
    flops += spec.train_flops(cfg, micro[i], i < extras.size() ? extras[i] : torch::Tensor());
    if (target) flops += target::forward_flops(*target, micro[i]);
  }
  return flops;
}

std::vector<device::GemmShape> step_gemm_shapes(const head::HeadConfig& cfg, const target::TargetConfig* target,
                                                std::int64_t tokens) {
  const auto H = cfg.hidden_size, I = cfg.intermediate_size > 0 ? cfg.intermediate_size : 4 * cfg.hidden_size;
  std::vector<device::GemmShape> shapes{{tokens, H, I}, {tokens, I, H}, {tokens, H, cfg.draft_vocab_size}};
  if (target) shapes.push_back({tokens, target->hidden_size, target->intermediate_size});
  return shapes;
}

}  // namespace eagle::train
