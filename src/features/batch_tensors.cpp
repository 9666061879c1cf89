// Batch -> tensors (see batch_tensors.h).
#include "eagle/features/batch_tensors.h"

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::features {

namespace {

template <typename T>
torch::Tensor host(const std::vector<T>& v, torch::ScalarType src, torch::ScalarType dst, std::int64_t rows,
                   std::int64_t length, bool pin) {
  auto t = torch::from_blob(const_cast<T*>(v.data()), {rows, length}, torch::TensorOptions().dtype(src)).to(dst);
  return pin ? t.pin_memory() : t;
}

// Host tensors over a copy of the batch (pinned when pin is true, for asynchronous copies).
BatchTensors host_tensors(const data::Batch& b, bool pin) {
  const auto n = static_cast<std::size_t>(b.rows * b.length);
  EAGLE_CHECK(b.input_ids.size() == n && b.loss_mask.size() == n && b.position_ids.size() == n &&
                  b.document_ids.size() == n,
              Error(ErrorKind::internal, "batch arrays do not match rows x length"));
  BatchTensors t;
  t.input_ids = host(b.input_ids, torch::kInt32, torch::kInt64, b.rows, b.length, pin);
  t.position_ids = host(b.position_ids, torch::kInt32, torch::kInt64, b.rows, b.length, pin);
  t.document_ids = host(b.document_ids, torch::kInt32, torch::kInt64, b.rows, b.length, pin);
  t.loss_mask = host(b.loss_mask, torch::kUInt8, torch::kBool, b.rows, b.length, pin);
  return t;
}

}  // namespace

BatchTensors allocate_like(const data::Batch& b, torch::Device device, std::int64_t max_segments) {
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  BatchTensors t;
  t.input_ids = torch::zeros({b.rows, b.length}, i64);
  t.position_ids = torch::zeros({b.rows, b.length}, i64);
  t.document_ids = torch::full({b.rows, b.length}, -1, i64);
  t.loss_mask = torch::zeros({b.rows, b.length}, torch::TensorOptions().dtype(torch::kBool).device(device));
  t.attention = model::AttentionSpec{b.packed, max_segments};
  return t;
}

void copy_into(const data::Batch& b, BatchTensors& dst) {
  EAGLE_CHECK(b.packed == dst.attention.packed,
              Error(ErrorKind::internal, "a batch does not match its buffers' attention layout")
                  .expected(dst.attention.packed ? "a packed batch" : "a padded batch")
                  .found(b.packed ? "a packed batch" : "a padded batch"));
  if (b.packed && dst.attention.max_segments > 0) {
    const auto runs = b.max_segments_per_row();
    EAGLE_CHECK(runs <= dst.attention.max_segments,
                Error(ErrorKind::internal, "a packed row holds more samples than its attention offsets have room for")
                    .expected(fmt::format("at most {} runs of document ids per row", dst.attention.max_segments))
                    .found(std::to_string(runs)));
  }
  const bool to_cuda = dst.input_ids.is_cuda();
  BatchTensors src = host_tensors(b, /*pin=*/to_cuda);
  dst.input_ids.copy_(src.input_ids, /*non_blocking=*/to_cuda);
  dst.position_ids.copy_(src.position_ids, to_cuda);
  dst.document_ids.copy_(src.document_ids, to_cuda);
  dst.loss_mask.copy_(src.loss_mask, to_cuda);
}

}  // namespace eagle::features
