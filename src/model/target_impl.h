// Private state of TargetModel shared by its loader (target.cpp) and its forward passes
// (target_forward.cpp): device-resident weights, fused where that makes fewer, larger matmuls.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/model/safetensors.h"
#include "eagle/model/target.h"

namespace eagle::model {

// The safetensors files of a model folder (model.safetensors, or the shards its
// model.safetensors.index.json names) and where each tensor lives: the loader's and the
// fingerprint's (target_fingerprint.cpp).
struct CheckpointFiles {
  std::vector<SafetensorsFile> files;
  std::map<std::string, std::size_t> where;  // tensor name -> index into files
};
CheckpointFiles open_checkpoint(const std::filesystem::path& dir);

struct TargetLayerWeights {
  torch::Tensor input_norm, post_norm;  // [H]
  torch::Tensor qkv_w, qkv_b;           // [(heads + 2 kv_heads) * head_dim, H]; bias undefined unless attention_bias
  torch::Tensor o_w, o_b;               // [H, heads * head_dim]; bias undefined unless o_bias
  torch::Tensor q_norm, k_norm;         // [head_dim] (Qwen3) or undefined
  torch::Tensor gate_up_w;              // [2 I, H]: gate rows then up rows
  torch::Tensor down_w;                 // [H, I]
};

// Where one cached forward writes a layer's new keys and values, and which keys it then attends
// (target_ragged.cpp). Shared length (forward_cached): every row's new tokens go to columns
// [cache->length, cache->length + T) and [0, cache->length + T) is attended. Per-row
// (forward_ragged): row r's token i goes to column columns[r, i] of cache row row_index[r] and
// columns [0, key_len) of those rows are attended (the mask decides which of them each token sees).
struct CacheWrite {
  KvCache* cache = nullptr;
  torch::Tensor row_index;  // [R, 1] int64 cache rows; per-row only
  torch::Tensor columns;    // [R, T] int64 cache columns; undefined: shared length
  bool all_rows = false;    // per-row: the rows are 0..B-1 in order, so the cache is read without a gather
  std::int64_t key_len = 0;  // per-row: columns attended

  // Writes k, v [R, kv_heads, T, head_dim] of layer l; returns the keys and values to attend.
  std::pair<torch::Tensor, torch::Tensor> apply(std::size_t l, const torch::Tensor& k, const torch::Tensor& v) const;
};

struct TargetModel::Impl {
  TargetConfig cfg;
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat32;
  torch::Tensor embed, final_norm, lm_head;  // lm_head aliases embed when tied
  std::vector<TargetLayerWeights> layers;
  torch::Tensor inv_freq;  // [head_dim / 2] fp32 on device (dynamic RoPE rescales it per call)
  std::vector<std::int64_t> aux_ids;
  std::int64_t parameter_count = 0;

  // The attention of a layer: q [B, heads, T, d], k, v [B, kv_heads, T, d] (with RoPE) -> [B, heads,
  // T, d]. The training forward attends within the batch's documents; the incremental one writes
  // k, v into the KV cache and attends it.
  using Attend = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
  // One decoder layer.
  torch::Tensor layer(std::size_t l, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                      const Attend& attend) const;
  // cos, sin [B, T, head_dim] in the model dtype for position_ids [B, T] (dynamic RoPE from their
  // largest value, on the device).
  std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& position_ids) const;
};

}  // namespace eagle::model
