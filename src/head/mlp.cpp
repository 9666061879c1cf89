// The dense SwiGLU MLP of a head's decoder layer (see head_mlp.h).
#include "eagle/head/mlp.h"

#include "eagle/util/error.h"

namespace eagle::head {

HeadMlpImpl::HeadMlpImpl(const HeadConfig& cfg, std::int64_t intermediate_size) {
  const auto width = intermediate_size > 0 ? intermediate_size : cfg.intermediate_size;
  EAGLE_CHECK(cfg.hidden_act == "silu", Error(ErrorKind::usage, "unsupported hidden_act for the draft head")
                                            .place("hidden_act")
                                            .expected("silu")
                                            .found(cfg.hidden_act));
  const auto linear = [](std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  gate_proj = register_module("gate_proj", linear(cfg.hidden_size, width));
  up_proj = register_module("up_proj", linear(cfg.hidden_size, width));
  down_proj = register_module("down_proj", linear(width, cfg.hidden_size));
}

}  // namespace eagle::head
