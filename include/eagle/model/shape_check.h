// The one shape check of the tensor code: "[2, 3]"-style text and checks that fill an Error's
// expected/found parts, so every shape or tensor mismatch reads the same (cf. flash-attention's
// CHECK_SHAPE and CHECK_DEVICE).
#pragma once

#include <optional>
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

// "int64 [2, 3] on cpu"; "undefined" for an undefined tensor. Without a device ("bfloat16 [4, 8]"):
// a tensor of a file.
std::string tensor_text(const torch::Tensor& t);
std::string tensor_text(torch::ScalarType dtype, c10::IntArrayRef shape,
                        std::optional<torch::Device> device = std::nullopt);
// Throws `error` (expected and found as tensor_text) unless t is defined with this dtype, shape and device.
void check_tensor(const torch::Tensor& t, torch::ScalarType dtype, c10::IntArrayRef shape, torch::Device device,
                  Error error);

}  // namespace eagle::model
