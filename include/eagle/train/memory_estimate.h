// The predicted peak memory of one training step (docs/training.md "Long context", validated in
// docs/benchmarks.md): a formula over the shapes of the target and the head, the tokens of a
// micro-batch, K, the dtype, the chunk sizes and the recomputation mode. `train --dry_run` prints
// it; `train` refuses to start when it exceeds the device's available memory (check_memory).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/plan.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::train {

struct StepShape {
  head::HeadConfig head;                      // H, I, heads, layers, V_d, K, loss_chunk_size, recompute
  std::int64_t tokens = 0;                    // tokens of the largest micro-batch (rows x padded length)
  bool bf16 = false;                          // autocast: activations in bf16
  std::optional<target::TargetConfig> target;  // online: the target runs in the step (its weights, forward)
  std::int64_t target_element_bytes = 2;      // the target's (and its features') dtype
  std::int64_t target_chunk_tokens = 4096;    // 0: whole rows
};

struct MemoryPart {
  std::string name;
  double bytes = 0;
  bool transient = false;  // working memory of one phase (the peak takes the larger phase)
};

struct MemoryEstimate {
  std::vector<MemoryPart> parts;
  // The resident parts plus the larger of the target's forward and the head's kept activations with
  // its backward's working memory.
  double peak = 0;
  double head_step = 0;  // kept activations and backward's working memory (the bench's peak extra)
  const MemoryPart& part(const std::string& name) const;
};

MemoryEstimate estimate_step_memory(const StepShape& shape);

// The step of a micro-batch of `tokens` tokens (0: the options' largest, max_tokens_per_batch, at
// least one row of training_seq_len, else per_device_train_batch_size rows of it) for this target
// and head.
StepShape step_shape(const config::Options& opts, const target::TargetConfig& target, const head::HeadConfig& head,
                     std::int64_t tokens = 0);

// The table `train --dry_run` prints: every part in GiB and the peak.
std::string format_estimate(const MemoryEstimate& estimate, const StepShape& shape);

// Error(usage, exit 2) naming the peak, the memory available and the options that lower it when
// the peak exceeds `available` bytes.
void check_step_fits(const MemoryEstimate& estimate, double available, const std::string& source);

// train's check before the first step: the estimate of the largest micro-batch of the run (the
// sampler's shapes: rows x length) against the device's available memory, the target's weights
// already loaded (logged; refused unless check_memory is false).
void check_step_memory(const config::Options& opts, const target::TargetConfig& target, const head::HeadConfig& head,
                       torch::Device device, const std::map<data::Shape, std::int64_t>& shapes);

// train --dry_run: reads the target's config.json only (no weights, no data), prints the estimate
// and exits 0, or the refusal of check_step_fits (exit 2) when it does not fit the device.
void dry_run(const config::Options& opts);

// --recompute_activations: the named mode, or for auto (the default) the first of off, mlp and layer
// whose predicted peak for the largest micro-batch the options allow takes at most kAutoShare of the
// memory available on `device` (recomputation costs time: it is used only where memory needs it);
// layer when none does or the memory is unknown. target_loaded: the target's weights are already in
// memory (online training), so they are not counted again. Logged.
inline constexpr double kAutoShare = 0.75;
head::RecomputeMode resolve_recompute(const config::Options& opts, const target::TargetConfig& target,
                                      const head::HeadConfig& head, torch::Device device, bool target_loaded);

}  // namespace eagle::train
