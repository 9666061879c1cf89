// The tensor checks of shape_check.h: check_tensor's expected/found texts name dtype, shape and
// device, so every malformed-tensor error reads the same.
#include <catch2/catch.hpp>

#include "eagle/model/shape_check.h"

using namespace eagle;

namespace {

Error tensor_error(const torch::Tensor& t, torch::ScalarType dtype, c10::IntArrayRef shape) {
  try {
    model::check_tensor(t, dtype, shape, torch::kCPU, Error(ErrorKind::internal, "malformed batch").place("ids"));
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::usage, "no error");
}

}  // namespace

TEST_CASE("check_tensor accepts the tensor asked for and names dtype, shape and device otherwise", "[model]") {
  const auto ids = torch::zeros({2, 3}, torch::kInt64);
  CHECK_NOTHROW(model::check_tensor(ids, torch::kInt64, {2, 3}, torch::kCPU, Error(ErrorKind::internal, "x")));
  CHECK(model::tensor_text(ids) == "int64 [2, 3] on cpu");
  CHECK(model::tensor_text(torch::kBFloat16, {4, 8}) == "bfloat16 [4, 8]");

  const auto shape = tensor_error(ids, torch::kInt64, {2, 4});
  CHECK(shape.kind() == ErrorKind::internal);
  CHECK(shape.format() == "ids: malformed batch: expected int64 [2, 4] on cpu, found int64 [2, 3] on cpu");
  CHECK(tensor_error(ids.to(torch::kInt32), torch::kInt64, {2, 3}).found() == "int32 [2, 3] on cpu");
  CHECK(tensor_error(torch::Tensor(), torch::kInt64, {2, 3}).found() == "undefined");
}
