// The one shape check of the tensor code: "[2, 3]"-style text and a check that fills an Error's
// expected/found parts, so every shape mismatch reads the same (cf. flash-attention's CHECK_SHAPE).
#pragma once

#include <string>

#include <torch/torch.h>

#include "eagle/util/error.h"

namespace eagle::model {

// "[2, 3]"; "[]" for a scalar.
std::string shape_text(c10::IntArrayRef shape);

// Throws `error` (with expected/found set to the two shapes) when found != expected.
void check_shape(c10::IntArrayRef found, c10::IntArrayRef expected, Error error);
// The same for a tensor; an undefined tensor is found as "undefined".
void check_shape(const torch::Tensor& t, c10::IntArrayRef expected, Error error);

}  // namespace eagle::model
