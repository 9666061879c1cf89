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

}  // namespace eagle::model
