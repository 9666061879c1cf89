// The target's decoding caches: the per-layer key/value cache with the hybrid targets' Gated DeltaNet
// states and their rollback (KvCache), and one ragged step of batched decoding over it (RaggedStep).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace eagle::target {

// Per-layer key/value cache of one sequence batch, for incremental decoding. MLA layers keep their
// keys and values decompressed per head (values value_head_dim wide), not the latent.
struct KvCache {
  std::vector<torch::Tensor> keys, values;  // per layer [B, kv_heads, capacity, head_dim or value_head_dim]
  std::int64_t length = 0;                  // tokens currently cached
  // Hybrid targets' Gated DeltaNet layers (empty tensors [B, kv_heads, capacity, 0] in keys/values): per layer
  // (undefined for attention layers) the conv window, the last linear_conv_kernel - 1 inputs [B, K - 1, conv_dim],
  // and the recurrent state [B, value_heads, key_head_dim, value_head_dim] fp32, both at `length`. `rollback`
  // keeps what the last forward_cached appended (calls of at most 256 tokens): the states before it and, per
  // token, the conv's inputs and outputs and the b, a projections, so that truncate inside that call recomputes
  // the states at the accepted length (target_linear.cpp). After a forward_tree of a branched tree (its per-node
  // inputs kept in node order, whatever its size) the states stay the root's, from before the call, until
  // accept_tree_path recomputes the accepted path's (target_linear_tree.cpp).
  struct LinearStep {
    std::int64_t start = -1, count = 0;  // the call's first position and its token count (start -1: none)
    std::vector<torch::Tensor> conv_before, state_before, conv_inputs, conv_outputs, b, a;  // per layer
    // The last call's tree, not yet accepted: each node's parent (-1: it follows the cached tokens); empty: a chain.
    std::vector<std::int64_t> tree_parent;
  };
  // The ragged forwards (forward_ragged, forward_ragged_all) keep each row at its own column instead: row r's
  // conv_states and recurrent_states stand at column start[r], followed by count[r] tokens of the row's last ragged
  // step, logged per Gated DeltaNet layer (their conv inputs and b, a projections [B, log_tokens, conv_dim or
  // value_heads], in place) when that step had at most log_tokens columns (new_cache's rollback_tokens), else count
  // 0 and the states at the step's end. A row's next step starts at a column in [start, start + count] (the
  // accepted prefix: the attention layers' rollback is the same column) or at 0 (a new sequence: zero states), and
  // first replays the accepted logged tokens (the recurrent form): recomputation, not a snapshot of the state per
  // drafted position (log_tokens x (conv_dim + 2 value_heads) values per row and layer against log_tokens states).
  struct RaggedLinear {
    std::int64_t log_tokens = 0;
    torch::Tensor start, count;                    // [B] int64 on the model's device
    std::vector<torch::Tensor> conv_inputs, b, a;  // per layer (undefined: attention layers, or log_tokens 0)
  };
  std::vector<torch::Tensor> conv_states, recurrent_states;
  LinearStep rollback;
  RaggedLinear ragged;
};

// The keys and values of a KvCache's rows [0, rows) at columns [0, length), copied out: a prefill kept
// for later decodings of the same prompts, written back into a new cache of the same layers (of any
// capacity; the forwards read columns below their length only). Only keys and values: not for a cache
// with Gated DeltaNet states (a hybrid target's), whose layers keep no keys and are left out here.
struct KvPrefix {
  std::vector<torch::Tensor> keys, values;  // per layer [rows, kv_heads, length, d]; undefined: no keys

  static KvPrefix of(const KvCache& cache, std::int64_t rows, std::int64_t length) {
    KvPrefix p;
    for (std::size_t l = 0; l < cache.keys.size(); ++l) {
      const bool has = cache.keys[l].defined() && cache.keys[l].numel() > 0;
      p.keys.push_back(has ? cache.keys[l].narrow(0, 0, rows).narrow(2, 0, length).clone() : torch::Tensor());
      p.values.push_back(has ? cache.values[l].narrow(0, 0, rows).narrow(2, 0, length).clone() : torch::Tensor());
    }
    return p;
  }
  void write_into(KvCache& cache) const {
    for (std::size_t l = 0; l < keys.size(); ++l) {
      if (!keys[l].defined()) continue;
      const auto rows = keys[l].size(0), length = keys[l].size(2);
      cache.keys[l].narrow(0, 0, rows).narrow(2, 0, length).copy_(keys[l]);
      cache.values[l].narrow(0, 0, rows).narrow(2, 0, length).copy_(values[l]);
    }
  }
};

// One forward of batched generation (target_ragged.cpp) over a KvCache whose rows hold sequences of
// different lengths: a row's tokens sit at columns 0, 1, ... of its cache row, and the column is the
// token's position id. KvCache::length is not used. A row's step starting at column 0 begins a new sequence.
struct RaggedStep {
  torch::Tensor ids;         // [R, N] int64: each row's new tokens, right-padded
  torch::Tensor columns;     // [R, N] int64: the column (= position) of each new token; padding tokens go to
                             // the cache's last column (capacity - 1), which no real token reaches: a hybrid
                             // target's Gated DeltaNet layers tell padding by it (a row all padding idles)
  torch::Tensor rows;        // [R] int64: the cache rows extended; undefined: all B rows in order (no gather)
  torch::Tensor last;        // [R] int64 in [0, N): the token of each row whose logits are returned
  std::int64_t key_len = 0;  // columns [0, key_len) are read (> every real column); each token attends
                             // the columns <= its own; dynamic RoPE scales for key_len positions
};

}  // namespace eagle::target
