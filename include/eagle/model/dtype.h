// Floating-point dtypes by the names config.json files, manifests and logs use ("float32",
// "bfloat16", "float16"), and the dtype of the --target_dtype/--features_dtype options.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <torch/torch.h>

#include "eagle/config/options.h"

namespace eagle::model {

// "bfloat16", "float16"; "float32" for every other dtype (the head and the loss run in fp32).
std::string dtype_name(torch::ScalarType t);
// The dtype of one of the three names; none for any other text (the caller decides: refuse or
// fall back).
std::optional<torch::ScalarType> dtype_of_name(std::string_view name);
// The ScalarType of --target_dtype; Undefined for auto (the checkpoint's dtype).
torch::ScalarType target_dtype(config::TargetDtype d);

}  // namespace eagle::model
