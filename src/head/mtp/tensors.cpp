// The MTP head's tensors under a checkpoint's native names, fused or per-expert experts (see mtp_tensors.h).
#include "eagle/head/mtp/tensors.h"

#include <fmt/format.h>

#include "eagle/head/moe.h"

namespace eagle::head {

namespace {
const std::string kGateUp = "mtp_block.mlp.experts.gate_up_proj", kDown = "mtp_block.mlp.experts.down_proj";
}  // namespace

std::vector<MtpTensor> mtp_tensors(DraftHead& head, const MtpLayout& layout, ExpertNames experts) {
  std::vector<MtpTensor> out;
  const auto base = layout.prefix + layout.block + "mlp.experts.";
  for (const auto& p : head.module().named_parameters()) {
    const auto& w = p.value();
    if (experts == ExpertNames::fused || (p.key() != kGateUp && p.key() != kDown)) {
      out.push_back({mtp_native_name(layout, p.key()), w});
      continue;
    }
    for (std::int64_t e = 0; e < w.size(0); ++e) {
      const auto x = fmt::format("{}{}.", base, e);
      if (p.key() == kDown) {
        out.push_back({x + "down_proj.weight", w[e]});
      } else {  // gate rows, then up rows (the order of transformers' chunk and of vLLM's w1 / w3 shards)
        const auto I = w.size(1) / 2;
        out.push_back({x + "gate_proj.weight", w[e].narrow(0, 0, I)});
        out.push_back({x + "up_proj.weight", w[e].narrow(0, I, I)});
      }
    }
  }
  // The frozen tensors of the layer the head keeps as buffers (DeepSeek's and GLM's correction bias).
  for (const auto& b : head.module().named_buffers())
    if (is_checkpoint_buffer(b.key())) out.push_back({mtp_native_name(layout, b.key()), b.value()});
  return out;
}

ExpertNames expert_names_of(const MtpLayout& layout, const std::map<std::string, std::string>& names) {
  return names.count(layout.prefix + layout.block + "mlp.experts.0.gate_proj.weight") ? ExpertNames::per_expert
                                                                                      : ExpertNames::fused;
}

}  // namespace eagle::head
