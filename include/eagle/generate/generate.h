// Batched regeneration of training replies by the target (eagle-train generate): generate_batch_size
// rows of one KV cache, each holding one sample at its own length; new prompts and next turns are
// prefilled together (right-padded, per-row positions), then every generating row decodes one token
// per step; a row whose sample finishes takes the next waiting sample. On GPU the decode step has a
// fixed shape per 256 cached columns and is replayed from a CUDA graph (CudaGraphCache).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/data/regeneration.h"
#include "eagle/target/target.h"

namespace eagle::generate {

struct GenerateSettings {
  std::int64_t batch_size = 32;  // rows of the KV cache
  data::GenerationLimits limits;
  double temperature = 0.0;          // 0: greedy
  double top_p = 1.0;                // nucleus mass when sampling
  std::uint64_t seed = 42;           // sampling generator (mixed with the first sample's index)
  std::int64_t max_cuda_graphs = 8;  // decode shapes captured on GPU; 0: none
  std::int64_t vocab_size = 0;       // --target_server: answered token ids must be below it (0: unchecked)

  static GenerateSettings from(const config::Options& o, const std::vector<std::int64_t>& end_ids);
};

// The next token of each row from logits [R, V] fp32: the argmax at temperature 0 (ties: the lowest
// id, as torch.argmax and transformers), else a sample of softmax(logits / temperature) restricted to
// the smallest set of most likely tokens whose probability reaches top_p.
class TokenChooser {
 public:
  TokenChooser(torch::Device device, double temperature, double top_p, std::uint64_t seed);
  torch::Tensor choose(const torch::Tensor& logits);  // [R] int64 on the logits' device

 private:
  double temperature_, top_p_;
  at::Generator generator_;
};

struct GenerateResult {
  std::uint64_t samples = 0;           // samples emitted
  std::uint64_t generated_tokens = 0;  // tokens the target chose, samples in flight included
  std::int64_t graphed_shapes = 0;     // decode shapes replayed from CUDA graphs
  double seconds = 0;
  bool interrupted = false;  // stop_requested() said so before the end
};

// Called once per sample, in input order, when it is finished.
using EmitFn = std::function<void(std::size_t index, const data::Regeneration& r)>;

// Regenerates samples first .. dataset.size()-1 of `dataset`. stop_requested is polled once per step;
// when it returns true, the samples finished in order so far have been emitted and it returns.
GenerateResult generate(const target::TargetModel& target, const data::Dataset& dataset, std::size_t first,
                        const GenerateSettings& settings, const EmitFn& emit,
                        const std::function<bool()>& stop_requested = {});

}  // namespace eagle::generate
