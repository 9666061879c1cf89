// The mixture-of-experts MLP of a head's decoder layer (see head_moe.h).
#include "eagle/head/moe.h"

#include <cmath>

#include <fmt/format.h>

#include "eagle/model/moe.h"
#include "eagle/util/error.h"

namespace eagle::head {

namespace {
const std::string kScoreBias = "e_score_correction_bias";
}  // namespace

bool is_checkpoint_buffer(const std::string& name) {
  return name.size() > kScoreBias.size() && name.ends_with("." + kScoreBias);
}

HeadExpertsImpl::HeadExpertsImpl(std::int64_t experts, std::int64_t hidden, std::int64_t intermediate) {
  // nn.Linear's default start per expert (kaiming-uniform bounds 1/sqrt(fan_in)); the shipped weights
  // replace them (mtp_io.h).
  const double a = 1.0 / std::sqrt(static_cast<double>(hidden)), b = 1.0 / std::sqrt(static_cast<double>(intermediate));
  gate_up_proj = register_parameter("gate_up_proj", torch::empty({experts, 2 * intermediate, hidden}).uniform_(-a, a));
  down_proj = register_parameter("down_proj", torch::empty({experts, hidden, intermediate}).uniform_(-b, b));
}

HeadMoeImpl::HeadMoeImpl(const HeadConfig& cfg) : router(cfg.moe_router) {
  const bool grouped = router.routing == model::MoeRouting::sigmoid_grouped;
  EAGLE_CHECK(
      (router.routing == model::MoeRouting::softmax_topk || grouped) && router.num_experts >= 1 &&
          router.experts_per_token >= 1 && router.experts_per_token <= router.num_experts &&
          cfg.moe_intermediate_size >= 1 && cfg.shared_intermediate_size >= 1 && !(grouped && cfg.shared_expert_gate),
      Error(ErrorKind::internal, "not a mixture of experts the head's layer trains")
          .expected("softmax top-k (Qwen) or sigmoid grouped routing (DeepSeek-V3, GLM-4.5), 1 <= k <= experts, "
                    "expert and shared expert widths >= 1")
          .found(fmt::format("{} experts, top {}, widths {} and {}", router.num_experts, router.experts_per_token,
                             cfg.moe_intermediate_size, cfg.shared_intermediate_size)));
  EAGLE_CHECK(cfg.hidden_act == "silu", Error(ErrorKind::usage, "unsupported hidden_act for the head's experts")
                                            .place("hidden_act")
                                            .expected("silu")
                                            .found(cfg.hidden_act));
  const auto h = cfg.hidden_size;
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(h, router.num_experts).bias(false)));
  // Zeros until the target's values are read (mtp_io.h); a buffer, so never trained (vLLM and transformers
  // keep it fp32).
  if (grouped)
    score_bias = gate->register_buffer(kScoreBias, torch::zeros({router.num_experts}, torch::kFloat32));
  experts = register_module("experts", HeadExperts(router.num_experts, h, cfg.moe_intermediate_size));
  shared_expert =
      register_module(grouped ? "shared_experts" : "shared_expert", HeadMlp(cfg, cfg.shared_intermediate_size));
  if (cfg.shared_expert_gate)
    shared_expert_gate =
        register_module("shared_expert_gate", torch::nn::Linear(torch::nn::LinearOptions(h, 1).bias(false)));
}

torch::Tensor HeadMoeImpl::forward(const torch::Tensor& x) {
  const auto flat = x.reshape({-1, x.size(-1)});
  // sigmoid_grouped: the router in fp32, the correction bias in the choice only (model/moe.h).
  const auto route = model::route_experts(router, flat, gate->weight, {}, score_bias);
  // One matmul per expert with tokens, never at::_grouped_mm: torch 2.11's _grouped_mm backward fails on
  // CPU (and is unchecked on CUDA), and a recomputed step (recompute.h: forward without gradients, again
  // with them in backward) must run the same kernels both times.
  auto y = model::run_experts(flat, route, {experts->gate_up_proj, {}, experts->down_proj, {}}, {},
                              /*grouped_mm=*/false);
  // Qwen3_5MoeSparseMoeBlock: experts + sigmoid(shared_expert_gate(x)) * shared_expert(x); DeepseekV3MoE,
  // Glm4MoeMoE: experts + shared_experts(x).
  auto shared = shared_expert->forward(flat);
  if (shared_expert_gate) shared = torch::sigmoid(shared_expert_gate->forward(flat)) * shared;
  return (y + shared).view(x.sizes());
}

}  // namespace eagle::head
