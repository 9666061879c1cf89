// Online and offline feature sources (see source.h).
#include "eagle/features/source.h"

#include <cstring>

#include "eagle/model/layers.h"
#include "eagle/util/error.h"

namespace eagle::features {
namespace {

// The head inputs that come from the batch itself (ids, mask, positions, documents, attention);
// each source adds the target's features.
head::HeadInputs batch_inputs(const BatchTensors& b) {
  head::HeadInputs in;
  in.input_ids = b.input_ids;
  in.loss_mask = b.loss_mask;
  in.position_ids = b.position_ids;
  in.document_ids = b.document_ids;
  in.attention = b.attention;
  in.extra = b.extra;
  return in;
}

class OnlineFeatures : public FeatureSource {
 public:
  OnlineFeatures(const target::TargetModel& target, target::TeacherSpec teacher)
      : target_(target), teacher_(std::move(teacher)) {}

  torch::Device device() const override { return target_.device(); }
  BatchTensors allocate(const data::Batch& batch, std::int64_t max_segments) const override {
    return allocate_like(batch, target_.device(), max_segments);
  }
  void fill(const data::Batch& batch, BatchTensors& buffers) const override { copy_into(batch, buffers); }

  head::HeadInputs head_inputs(const BatchTensors& b) const override {
    auto out = target_.forward(target::TargetBatch{b.input_ids, b.position_ids, b.document_ids, b.attention}, teacher_);
    head::HeadInputs in = batch_inputs(b);
    in.aux_hidden = out.aux_hidden;
    in.final_hidden = out.final_hidden;
    in.teacher_logits = out.teacher_logits;
    in.target_argmax = out.target_argmax;
    return in;
  }

 private:
  const target::TargetModel& target_;
  target::TeacherSpec teacher_;
};

class OfflineFeatures : public FeatureSource {
 public:
  OfflineFeatures(std::shared_ptr<const FeatureStore> store, std::vector<std::int64_t> samples,
                  const target::TargetEnds& ends, const target::TeacherSpec& teacher, torch::Device device,
                  LastAsAux last_as_aux)
      : store_(std::move(store)),
        samples_(std::move(samples)),
        device_(device),
        teacher_(teacher),
        ends_(ends),
        last_as_aux_(last_as_aux) {
    torch::NoGradGuard no_grad;
    const auto& l = store_->layout();
    // The caller refuses it by name first (features/inputs_drafts.cpp): no final norm can be undone.
    EAGLE_CHECK(last_as_aux_ != LastAsAux::pre_norm || l.pre_norm,
                Error(ErrorKind::internal, "the store holds the last hidden state after the final norm")
                    .file(store_->source())
                    .expected("a store of the last hidden state before the final norm"));
    aux_width_ = last_as_aux_ == LastAsAux::none ? l.aux_width : 0;
    ends_.final_norm = ends.final_norm.to(device);
    if (teacher_.draft_ids.defined()) teacher_.draft_ids = teacher_.draft_ids.to(device, torch::kInt64);
    // With a stored argmax only the draft rows of the LM head are needed (V_d x H instead of V x H).
    if (l.has_argmax && teacher_.draft_ids.defined())
      draft_rows_ = ends.lm_head.index_select(0, teacher_.draft_ids.to(ends.lm_head.device())).to(device);
    if (!l.has_argmax) lm_head_ = ends.lm_head.to(device);
    dtype_ = ends.dtype;
  }

  torch::Device device() const override { return device_; }

  BatchTensors allocate(const data::Batch& b, std::int64_t max_segments) const override {
    const auto& l = store_->layout();
    BatchTensors t = allocate_like(b, device_, max_segments);
    const auto opts = torch::TensorOptions().dtype(l.dtype).device(device_);
    if (aux_width_ > 0) t.aux_hidden = torch::zeros({b.rows, b.length, aux_width_}, opts);
    t.last_hidden = torch::zeros({b.rows, b.length, l.hidden_size}, opts);
    if (l.has_argmax) t.target_argmax = torch::zeros({b.rows, b.length}, opts.dtype(torch::kInt64));
    return t;
  }

  void fill(const data::Batch& b, BatchTensors& dst) const override {
    copy_into(b, dst);
    const auto& l = store_->layout();
    const bool cuda = device_.is_cuda();
    // On CPU the buffers themselves are filled; for a GPU a fresh pinned host copy each time (the
    // caching host allocator reuses it only after its asynchronous copy has run).
    auto staging = [&](const torch::Tensor& buffer) {
      if (!buffer.defined() || !cuda) return buffer;
      return torch::empty(buffer.sizes(), buffer.options().device(torch::kCPU).pinned_memory(true));
    };
    torch::Tensor aux = staging(dst.aux_hidden), last = staging(dst.last_hidden), argmax = staging(dst.target_argmax);
    const auto elem = static_cast<std::int64_t>(c10::elementSize(l.dtype));
    auto* aux_p = aux.defined() ? static_cast<std::uint8_t*>(aux.data_ptr()) : nullptr;
    auto* last_p = static_cast<std::uint8_t*>(last.data_ptr());
    auto* argmax_p = argmax.defined() ? argmax.data_ptr<std::int64_t>() : nullptr;
    std::size_t k = 0;  // the next of b.sample_indices (samples in row order)
    for (std::int64_t r = 0; r < b.rows; ++r) {
      std::int64_t p = 0;
      while (p < b.length && b.document_ids[static_cast<std::size_t>(b.at(r, p))] >= 0) {
        const auto at = b.at(r, p);
        const auto doc = b.document_ids[static_cast<std::size_t>(at)];
        std::int64_t q = p;
        while (q < b.length && b.document_ids[static_cast<std::size_t>(b.at(r, q))] == doc) ++q;
        const std::int64_t n = q - p;
        EAGLE_CHECK(k < b.sample_indices.size(), Error(ErrorKind::internal, "batch documents and samples disagree"));
        const auto sample = samples_.at(static_cast<std::size_t>(b.sample_indices[k++]));
        store_->read(sample, b.position_ids[static_cast<std::size_t>(at)], n,
                     &b.input_ids[static_cast<std::size_t>(at)], aux_p ? aux_p + at * aux_width_ * elem : nullptr,
                     last_p + at * l.hidden_size * elem, argmax_p ? argmax_p + at : nullptr);
        p = q;
      }
      // Padding after the row's samples: zeros (finite, and masked out of every loss).
      const auto at = b.at(r, p), pad = b.length - p;
      if (aux_p) std::memset(aux_p + at * aux_width_ * elem, 0, static_cast<std::size_t>(pad * aux_width_ * elem));
      std::memset(last_p + at * l.hidden_size * elem, 0, static_cast<std::size_t>(pad * l.hidden_size * elem));
      if (argmax_p) std::fill(argmax_p + at, argmax_p + at + pad, 0);
    }
    if (cuda) {
      if (aux.defined()) dst.aux_hidden.copy_(aux, /*non_blocking=*/true);
      dst.last_hidden.copy_(last, true);
      if (argmax.defined()) dst.target_argmax.copy_(argmax, true);
    }
  }

  void prefetch(const data::Sampler& sampler, std::int64_t batches) const override {
    store_->prefetch(sampler, batches, samples_);
  }

  head::HeadInputs head_inputs(const BatchTensors& b) const override {
    torch::NoGradGuard no_grad;
    head::HeadInputs in = batch_inputs(b);
    const auto stored = b.last_hidden.to(dtype_);
    const auto last = store_->layout().pre_norm ? ends_.norm(stored) : stored;
    in.final_hidden = last;
    switch (last_as_aux_) {
      case LastAsAux::none:
        in.aux_hidden = b.aux_hidden;
        break;
      case LastAsAux::pre_norm:  // the store holds it before the final norm (checked at construction)
        in.aux_hidden = stored;
        break;
      case LastAsAux::post_norm:
        in.aux_hidden = last;
        break;
    }
    if (store_->layout().has_argmax) {
      in.target_argmax = b.target_argmax;
      if (draft_rows_.defined()) in.teacher_logits = torch::linear(last, draft_rows_).to(torch::kFloat32);
    } else {
      auto t = target::lm_head_teacher(last, lm_head_, teacher_);
      in.target_argmax = t.argmax;
      in.teacher_logits = t.logits;
    }
    return in;
  }

 private:
  std::shared_ptr<const FeatureStore> store_;
  std::vector<std::int64_t> samples_;
  torch::Device device_;
  target::TeacherSpec teacher_;
  target::TargetEnds ends_;  // the target's final norm on the device (embedding and LM head: views of the caller's)
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Tensor draft_rows_, lm_head_;
  LastAsAux last_as_aux_;
  std::int64_t aux_width_ = 0;  // the aux values per token read from the store (0 with last_as_aux_)
};

}  // namespace

std::unique_ptr<FeatureSource> online_features(const target::TargetModel& target, const target::TeacherSpec& teacher) {
  return std::make_unique<OnlineFeatures>(target, teacher);
}

std::unique_ptr<FeatureSource> offline_features(std::shared_ptr<const FeatureStore> store,
                                                std::vector<std::int64_t> samples, const target::TargetEnds& ends,
                                                const target::TeacherSpec& teacher, torch::Device device,
                                                LastAsAux last_as_aux) {
  return std::make_unique<OfflineFeatures>(std::move(store), std::move(samples), ends, teacher, device, last_as_aux);
}

}  // namespace eagle::features
