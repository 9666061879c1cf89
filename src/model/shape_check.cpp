// Shape text and shape checks (see shape_check.h).
#include "eagle/model/shape_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace eagle::model {

std::string shape_text(c10::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

void check_shape(c10::IntArrayRef found, c10::IntArrayRef expected, Error error) {
  if (found == expected) return;
  throw std::move(error).expected(shape_text(expected)).found(shape_text(found));
}

void check_shape(const torch::Tensor& t, c10::IntArrayRef expected, Error error) {
  if (!t.defined()) throw std::move(error).expected(shape_text(expected)).found("undefined");
  check_shape(t.sizes(), expected, std::move(error));
}

namespace {

// The names config.json files and numpy use; ScalarType's own for the rest.
std::string dtype_text(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat64: return "float64";
    case torch::kInt64: return "int64";
    case torch::kInt32: return "int32";
    case torch::kInt16: return "int16";
    case torch::kInt8: return "int8";
    case torch::kUInt8: return "uint8";
    case torch::kBool: return "bool";
    default: return c10::toString(t);
  }
}

}  // namespace

std::string tensor_text(torch::ScalarType dtype, c10::IntArrayRef shape, std::optional<torch::Device> device) {
  std::string s = dtype_text(dtype) + " " + shape_text(shape);
  return device ? s + " on " + device->str() : s;
}

std::string tensor_text(const torch::Tensor& t) {
  return t.defined() ? tensor_text(t.scalar_type(), t.sizes(), t.device()) : "undefined";
}

void check_tensor(const torch::Tensor& t, torch::ScalarType dtype, c10::IntArrayRef shape, torch::Device device,
                  Error error) {
  if (t.defined() && t.scalar_type() == dtype && t.sizes() == shape && t.device() == device) return;
  throw std::move(error).expected(tensor_text(dtype, shape, device)).found(tensor_text(t));
}

}  // namespace eagle::model
