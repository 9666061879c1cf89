// The sampling distribution (see sampling.h).
#include "eagle/model/sampling.h"

namespace eagle::model {

torch::Tensor top_p_filter(const torch::Tensor& probs, double top_p) {
  if (top_p >= 1.0) return probs;
  auto [sorted, order] = probs.sort(-1, /*descending=*/true);
  auto before = sorted.cumsum(-1) - sorted;  // the mass of the tokens ranked above
  sorted.masked_fill_(before >= top_p, 0.0);
  return torch::zeros_like(probs).scatter_(-1, order, sorted);
}

torch::Tensor sampling_probs(const torch::Tensor& logits, double temperature, double top_p) {
  auto probs = torch::softmax(logits.to(torch::kFloat64) / temperature, -1);
  if (top_p < 1.0) {
    probs = top_p_filter(probs, top_p);
    probs = probs / probs.sum(-1, true);
  }
  return probs;
}

}  // namespace eagle::model
