// Dtype names and the dtype options (see dtype.h).
#include "eagle/model/dtype.h"

namespace eagle::model {

std::string dtype_name(torch::ScalarType t) {
  if (t == torch::kBFloat16) return "bfloat16";
  if (t == torch::kFloat16) return "float16";
  return "float32";
}

std::optional<torch::ScalarType> dtype_of_name(std::string_view name) {
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  if (name == "float32") return torch::kFloat32;
  return std::nullopt;
}

torch::ScalarType target_dtype(config::TargetDtype d) {
  switch (d) {
    case config::TargetDtype::float32:
      return torch::kFloat32;
    case config::TargetDtype::bfloat16:
      return torch::kBFloat16;
    case config::TargetDtype::float16:
      return torch::kFloat16;
    case config::TargetDtype::auto_:
      break;
  }
  return torch::ScalarType::Undefined;
}

}  // namespace eagle::model
