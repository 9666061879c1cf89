// The feature store of a speculators offline data folder (see store.h): one safetensors file of
// vLLM hidden states per row, every row's header checked when the folder is opened, the values
// (finite, computed for the row's tokens) when the row is read.
#include <cstring>

#include <fmt/format.h>

#include "eagle/data/speculators_folder.h"
#include "eagle/features/store.h"
#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::features {
namespace {

// hidden_states/hs_<row>.safetensors per row: headers checked here, the file mapped again per read
// (a folder of 100k rows cannot keep 100k mappings).
class SpeculatorsStore : public FeatureStore {
 public:
  SpeculatorsStore(const std::string& dir, const data::Dataset& samples, const std::vector<std::int64_t>& rows,
                   std::int64_t hidden_size, std::int64_t n_aux)
      : dir_(dir), n_aux_(n_aux) {
    source_ = dir;
    EAGLE_CHECK(!rows.empty() && rows.size() == samples.size(),
                Error(ErrorKind::internal, "the rows of a speculators folder and its samples disagree").file(dir));
    const auto f = model::SafetensorsFile::open(data::speculators_hidden_file(dir, rows.front()));
    EAGLE_CHECK(f.contains("hidden_states") && f.shape("hidden_states").size() == 3,
                Error(ErrorKind::input, "no hidden_states [T, layers, H] tensor").file(f.path()));
    const auto shape = f.shape("hidden_states");
    slots_ = shape[1];
    layout_.dtype = f.dtype("hidden_states");
    layout_.hidden_size = shape[2];
    layout_.aux_width = n_aux * shape[2];
    layout_.pre_norm = true;
    layout_.has_argmax = false;
    EAGLE_CHECK(layout_.hidden_size == hidden_size,
                Error(ErrorKind::input, "the hidden states are of another target")
                    .file(f.path())
                    .place("hidden_states")
                    .expected(fmt::format("hidden size {} (the target's)", hidden_size))
                    .found(std::to_string(layout_.hidden_size)));
    EAGLE_CHECK(slots_ >= 1 + n_aux && (n_aux == 0 || slots_ == 1 + n_aux),
                Error(ErrorKind::input, "the hidden states hold another number of layers")
                    .file(f.path())
                    .place("hidden_states")
                    .expected(fmt::format("{} layers: {} aux layers, then the last", n_aux + 1, n_aux))
                    .found(fmt::format("{} layers", slots_))
                    .hint("EAGLE-3 reads 3 aux layers plus the last layer (speculators' default layer ids)"));
    EAGLE_CHECK(
        layout_.dtype == torch::kBFloat16 || layout_.dtype == torch::kFloat16 || layout_.dtype == torch::kFloat32,
        Error(ErrorKind::input, "hidden states must be bfloat16, float16 or float32")
            .file(f.path())
            .found(c10::toString(layout_.dtype)));
    // Every row's header now, not when its row is first batched (hours into a run).
    for (std::size_t i = 0; i < rows.size(); ++i) check_header(rows[i], samples.length(i));
  }

  void read(std::int64_t row, std::int64_t pos, std::int64_t n, const std::int32_t* ids, void* aux, void* last,
            std::int64_t*) const override {
    const auto f = check_header(row, pos + n);
    const auto tokens = f.get("token_ids").to(torch::kInt64).contiguous();
    const auto* tok = tokens.data_ptr<std::int64_t>();
    for (std::int64_t k = 0; k < n; ++k)
      EAGLE_CHECK(tok[pos + k] == ids[k],
                  Error(ErrorKind::input, "the hidden states were computed for other tokens than the row's")
                      .file(f.path())
                      .place(fmt::format("token_ids[{}]", pos + k))
                      .expected(fmt::format("{} (input_ids of row {})", ids[k], row))
                      .found(std::to_string(tok[pos + k])));
    const auto hs = f.get("hidden_states");
    const auto* base = static_cast<const std::uint8_t*>(hs.data_ptr());
    const auto H = layout_.hidden_size;
    const auto elem = static_cast<std::int64_t>(c10::elementSize(layout_.dtype));
    const std::int64_t row_bytes = slots_ * H * elem;
    const auto bad = first_non_finite(base + pos * row_bytes, n * slots_ * H, layout_.dtype);
    EAGLE_CHECK(bad < 0, Error(ErrorKind::input, "the stored hidden states hold NaN or Inf")
                             .file(f.path())
                             .place(fmt::format("tensor \"hidden_states\", position {}, layer slot {}",
                                                pos + bad / (slots_ * H), bad % (slots_ * H) / H))
                             .expected("finite values")
                             .hint("regenerate this row's hidden states, or leave the row out of the data"));
    for (std::int64_t k = 0; k < n; ++k) {
      const auto* t = base + (pos + k) * row_bytes;
      // Slots in ascending layer order: the aux layers first, the last layer at the end.
      if (n_aux_ > 0 && aux)
        std::memcpy(static_cast<std::uint8_t*>(aux) + k * n_aux_ * H * elem, t,
                    static_cast<std::size_t>(n_aux_ * H * elem));
      std::memcpy(static_cast<std::uint8_t*>(last) + k * H * elem, t + (slots_ - 1) * H * elem,
                  static_cast<std::size_t>(H * elem));
    }
  }

 private:
  // Opens the row's file and checks its header against the folder's first row: hidden_states
  // [>= tokens, slots, H] of the folder's dtype, token_ids [T] beside it.
  model::SafetensorsFile check_header(std::int64_t row, std::int64_t tokens) const {
    auto f = model::SafetensorsFile::open(data::speculators_hidden_file(dir_, row));
    EAGLE_CHECK(f.contains("hidden_states") && f.contains("token_ids"),
                Error(ErrorKind::input, "a hidden-state file lacks hidden_states or token_ids").file(f.path()));
    const auto shape = f.shape("hidden_states");
    const auto H = layout_.hidden_size;
    EAGLE_CHECK(shape.size() == 3 && shape[1] == slots_ && shape[2] == H && shape[0] >= tokens &&
                    f.dtype("hidden_states") == layout_.dtype,
                Error(ErrorKind::input, "hidden states of another shape or dtype than the folder's first row")
                    .file(f.path())
                    .place("hidden_states")
                    .expected(fmt::format("{} [>= {}, {}, {}]", model::dtype_name(layout_.dtype), tokens, slots_, H))
                    .found(model::tensor_text(f.dtype("hidden_states"), shape)));
    const auto ids = f.shape("token_ids");
    EAGLE_CHECK(ids.size() == 1 && ids[0] == shape[0], Error(ErrorKind::input, "token_ids does not match hidden_states")
                                                           .file(f.path())
                                                           .place("token_ids")
                                                           .expected(fmt::format("[{}]", shape[0]))
                                                           .found(model::shape_text(ids)));
    return f;
  }

  std::string dir_;
  std::int64_t n_aux_, slots_ = 0;
};

}  // namespace

std::shared_ptr<const FeatureStore> open_speculators_features(const std::string& dir, const data::Dataset& samples,
                                                              const std::vector<std::int64_t>& rows,
                                                              std::int64_t hidden_size, std::int64_t n_aux) {
  return std::make_shared<SpeculatorsStore>(dir, samples, rows, hidden_size, n_aux);
}

}  // namespace eagle::features
