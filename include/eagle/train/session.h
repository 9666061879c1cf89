// What `train` and `eval` set up alike: the device and threads, the data, the frozen target and the
// draft head, and the target features of a batch as the head's inputs.
#pragma once

#include <memory>
#include <optional>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/data/loader.h"
#include "eagle/model/head.h"
#include "eagle/model/target.h"
#include "eagle/train/batch_tensors.h"

namespace eagle::train {

// "auto" -> cuda when available, else cpu; "cuda" without a device -> Error(config).
torch::Device resolve_device(const std::string& device);
// Fixes intra-op threads (0: the machine's cores) and seeds LibTorch's generators.
void configure_runtime(const config::Options& opts);
torch::ScalarType target_dtype(config::TargetDtype d);

// Training data and the held-out split: eval_data_path when given, else the prepared (or
// validation_fraction) split of data_path.
struct SessionData {
  data::Dataset train;
  std::optional<data::Dataset> heldout;
};
SessionData load_session_data(const config::Options& opts);

// Loads the target (dtype, device, aux layers from the options) and checks the dataset's ids fit
// its vocabulary, naming the dataset and the first offending id.
model::TargetModel load_target(const config::Options& opts, torch::Device device);
void check_vocabulary(const data::Dataset& dataset, const model::TargetModel& target);

// The draft head for this target and data: EAGLE-3 with a draft vocabulary chosen from the trained
// token counts (LM head started from the target's rows), or EAGLE-1; on the device, fp32.
std::shared_ptr<model::DraftHead> make_head(const config::Options& opts, const model::TargetModel& target,
                                            const data::TokenStats& stats, torch::Device device);
// What the target computes as the teacher of this head (EAGLE-3: logits over its draft ids).
model::TeacherSpec teacher_spec(model::DraftHead& head, torch::Device device);
// The trainable parameters by name (the frozen target tensors are not parameters of the head).
std::vector<std::pair<std::string, torch::Tensor>> named_parameters(model::DraftHead& head);
std::int64_t count_parameters(model::DraftHead& head);
// Copies every parameter and buffer of src into dst (same names and shapes; Error(input) else).
void copy_weights(model::DraftHead& src, model::DraftHead& dst, const std::string& source);

// The target forward of one batch turned into the head's inputs (no gradients flow into them).
model::HeadInputs head_inputs(const model::TargetModel& target, const BatchTensors& batch,
                              const model::TeacherSpec& teacher);

// Enables autocast to bf16 on the device for its lifetime when `enabled`.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType type_;
  bool enabled_, previous_;
  at::ScalarType previous_dtype_;
};

}  // namespace eagle::train
