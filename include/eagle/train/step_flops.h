// A training step's model FLOPs and the GEMM shapes its peak is measured on (docs/training.md, "TFLOP/s and
// MFU"): the trainer's step line, summary.json and report, and the step benchmark (scripts/bench/).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/device/peak_flops.h"
#include "eagle/head/draft_spec.h"
#include "eagle/target/target_config.h"

namespace eagle::train {

// One step's micro-batches on this process: the head row's train_flops of each (extras: the loss plan's,
// one per batch, or none), plus the target's forward on each where the target runs in the step (target
// non-null: online; stored features and target servers computed theirs before).
double step_flops(const head::DraftSpec& spec, const head::HeadConfig& cfg, const target::TargetConfig* target,
                  const std::vector<data::Batch>& micro, const std::vector<torch::Tensor>& extras);

// The step's largest GEMMs at `tokens` rows: the head's MLP (up and down) and LM head, and the target's MLP
// when it runs in the step.
std::vector<device::GemmShape> step_gemm_shapes(const head::HeadConfig& cfg, const target::TargetConfig* target,
                                                std::int64_t tokens);

}  // namespace eagle::train
