// The sampling distribution of a temperature and a nucleus (top_p): the one top-p rule of
// generate's token choice and of the acceptance evaluation at a temperature.
#pragma once

#include <torch/torch.h>

namespace eagle::model {

// probs [.., V] with every token outside the nucleus set to 0: the smallest set of the most likely
// tokens whose mass reaches top_p (a token is kept while the mass ranked above it is below top_p).
// Not renormalised; the dtype of probs. top_p >= 1: probs unchanged.
torch::Tensor top_p_filter(const torch::Tensor& probs, double top_p);

// The distribution sampled from: softmax(logits / temperature) [.., V] in fp64, restricted to the
// nucleus of top_p (top_p_filter) and renormalised.
torch::Tensor sampling_probs(const torch::Tensor& logits, double temperature, double top_p);

}  // namespace eagle::model
