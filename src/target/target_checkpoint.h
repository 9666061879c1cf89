// The checks of a target folder's files against its config.json before anything is built from them
// (target_checkpoint.cpp; used by the loader, target.cpp), each an Error(input) naming the file and
// the field or tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/target/target.h"
#include "target_impl.h"

namespace eagle::target {

// No more layers, nor experts (families with per-expert tensors), than the files hold, and the
// embedding's vocabulary and hidden size: compared before any name is listed per layer or expert.
void check_counts(const std::filesystem::path& dir, const CheckpointFiles& ck, const TargetConfig& c);
// Every expected name present with its shape (one error naming every problem); extras refused
// unless extras_allowed (harmless ones excepted).
void check_tensors(const std::filesystem::path& dir, const CheckpointFiles& ck,
                   const std::map<std::string, std::vector<std::int64_t>>& expected, const TargetConfig& c,
                   bool extras_allowed = false);
// The dtype the target runs in (Undefined: the checkpoint's); every expected tensor floating point,
// FP8 and MXFP4 ones in their formats.
torch::ScalarType resolve_dtype(torch::ScalarType dtype, const CheckpointFiles& ck,
                                const std::map<std::string, std::vector<std::int64_t>>& expected,
                                const TargetConfig& c);
// The weights in the GPU's free memory (nothing checked on CPU: memory-mapped).
void check_fits(const TargetConfig& c, torch::ScalarType dtype, torch::Device device, const std::string& dir);
// The tensors on either side of the decoder layers (embedding, final norm, LM head) with their
// shapes, nothing listed per layer (target_tensors.cpp; expected_tensors starts from them).
std::map<std::string, std::vector<std::int64_t>> end_tensors(const TargetConfig& c);

}  // namespace eagle::target
