// Ranks compare digests of what must agree before anything of a different size is exchanged: ranks
// started with other TTT steps or draft vocabularies would otherwise meet in collectives of other
// sizes (a gloo abort), and ones with another learning rate, seed or data would train a wrong head.
#include "rank_check.h"

#include <fmt/format.h>

#include <set>

#include "eagle/util/error.h"
#include "eagle/util/hash.h"

namespace eagle::train {

RankDigests option_digests(const nlohmann::json& options) {
  // Local to a process or a machine; every other option changes what is trained.
  static const std::set<std::string> kLocal{
      "device", "num_threads", "max_cuda_graphs", "config", "log_level", "ddp_backend", "ddp_timeout_s",
      "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "data_path", "eval_data_path",
      "model_name_or_path", "features_path"};
  RankDigests out;
  for (const auto& [key, value] : options.items())
    if (!kLocal.count(key)) out.push_back({"option " + key, util::fnv1a(value.dump()), value.dump()});
  return out;
}

RankDigests input_digests(const std::vector<std::int64_t>& lengths, const head::HeadConfig& head) {
  const std::uint64_t data = util::fnv1a(lengths.data(), lengths.size() * sizeof(std::int64_t));
  const std::string target = fmt::format("{} of {} layers, hidden size {}, vocabulary {}, {}", head.target_architecture,
                                         head.target_num_hidden_layers, head.target_hidden_size, head.vocab_size,
                                         head.target_dtype);
  return {{"the training data (its sample lengths)", data, fmt::format("{} samples", lengths.size())},
          {"the target", util::fnv1a(target), target}};
}

void check_ranks_agree(device::ProcessGroup& group, const RankDigests& digests) {
  if (group.size() == 1) return;
  // 40-bit digests: the sum over at most 2^16 ranks stays exact in an int64. The sum equals
  // size x own digest on every rank only when all ranks hold the same digest.
  constexpr std::uint64_t kMask = (std::uint64_t{1} << 40) - 1;
  std::vector<std::int64_t> own;
  for (const auto& d : digests) own.push_back(static_cast<std::int64_t>(d.digest & kMask));
  const auto sums = group.sum(own);
  std::vector<std::int64_t> differs(own.size(), 0);
  for (std::size_t i = 0; i < own.size(); ++i) differs[i] = sums[i] != own[i] * group.size() ? 1 : 0;
  const auto any_differs = group.sum(differs);  // what one rank saw, every rank knows
  for (std::size_t i = 0; i < own.size(); ++i) {
    if (any_differs[i] == 0) continue;
    throw Error(ErrorKind::usage, fmt::format("the ranks were started differently: {} differs", digests[i].what))
        .place(fmt::format("rank {} of {}", group.rank(), group.size()))
        .found(fmt::format("{} on this rank", digests[i].value))
        .hint("start every rank with the same options, data and target (one torchrun command, one config)");
  }
}

}  // namespace eagle::train
