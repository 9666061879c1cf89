// Activation recomputation (gradient checkpointing) for LibTorch C++, which has no
// torch.utils.checkpoint: a function of tensors runs without keeping its activations, and runs
// again in the backward pass, with the autocast state of the forward, to be differentiated there.
// Only its inputs are kept. The draft heads' TTT unroll recomputes the cheap parts of each step
// this way (eagle3_head.cpp, docs/training.md "Long context").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace eagle::head {

// What the EAGLE-3 TTT unroll recomputes in backward instead of keeping for every step:
// off: nothing (every step's activations kept); mlp: each layer's post-attention half (o_proj, the
// residual, the post-attention norm, the MLP) and the final norm; layer: also the pre-attention
// half's input (the embedding lookup, the input norms, the concatenation; q/k/v are projected once,
// their weights' gradients made from the recomputed input: recompute_input). The attention itself
// is never recomputed.
enum class RecomputeMode { off, mlp, layer };
RecomputeMode parse_recompute_mode(const std::string& name);  // Error(usage) when not off, mlp or layer
std::string recompute_mode_name(RecomputeMode mode);

using TensorFunction = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// fn(inputs) with the graph of fn not kept: the outputs' gradients reach the inputs and params (the
// tensors fn reads besides its inputs that are trained: the module parameters it uses) through a
// second run of fn in backward. fn must be deterministic and must not change its inputs; its
// outputs must be new tensors (not inputs or views of them). Inputs that are not floating point
// (ids, positions) pass through without gradients. No host synchronisation: graph-capture safe.
std::vector<torch::Tensor> recompute(const TensorFunction& fn, const std::vector<torch::Tensor>& inputs,
                                     const std::vector<torch::Tensor>& params);

// Projections of a recomputed input: x = fn(inputs)[0] (cheap: an embedding, norms, a
// concatenation) is not kept but made again in backward; y_j = torch::linear(x, weights[j]) are made
// once: their backward needs only x and the weights, so the projections' gradient matmuls run once in
// backward, from the recomputed x, and the projections themselves are not run again (what
// recompute() would do). Under autocast the matmuls run in the autocast dtype, as torch::linear's.
// params: the tensors fn reads that are trained (not the weights). Graph-capture safe.
std::vector<torch::Tensor> recompute_input(const TensorFunction& fn, const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& params,
                                           const std::vector<torch::Tensor>& weights);

}  // namespace eagle::head
