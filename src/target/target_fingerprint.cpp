// A cheap fingerprint of every tensor of a model folder (see target.h): name, dtype, shape and a
// sampled FNV-1a of the stored bytes, read from the mapping without loading any weight.
#include <fmt/format.h>

#include "eagle/model/shape_check.h"
#include "eagle/util/hash.h"
#include "target_impl.h"

namespace eagle::target {
namespace {

constexpr std::size_t kChunk = 1024, kChunks = 4;  // 4 KiB read per tensor

// The byte count, then the whole tensor up to 4 KiB, else 4 chunks at 0, 1/3, 2/3 and the end.
std::uint64_t sampled_hash(std::string_view bytes) {
  std::uint64_t h = util::fnv1a_u64(bytes.size());
  if (bytes.size() <= kChunk * kChunks) return util::fnv1a(bytes.data(), bytes.size(), h);
  for (std::size_t k = 0; k < kChunks; ++k) {
    const std::size_t at = (bytes.size() - kChunk) * k / (kChunks - 1);
    h = util::fnv1a(bytes.data() + at, kChunk, h);
  }
  return h;
}

}  // namespace

std::map<std::string, std::string> tensor_fingerprints(const std::string& model_dir) {
  const auto ck = open_checkpoint(model_dir);
  std::map<std::string, std::string> out;
  for (const auto& [name, i] : ck.where) {
    const auto& f = ck.files[i];
    out[name] =
        fmt::format("{} {:016x}", model::tensor_text(f.dtype(name), f.shape(name)), sampled_hash(f.bytes(name)));
  }
  return out;
}

}  // namespace eagle::target
