// Stored target features for training without running the target (docs/offline.md): what a store
// holds per token, the one interface the offline feature source reads batches from, and the two
// stores behind it: folders written by `eagle-train dump-features` (a manifest, the prepared
// dataset, the target's ends and bounded safetensors shards, memory-mapped) and speculators' offline
// data folders (one safetensors file of vLLM hidden states per row).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "eagle/data/dataset.h"
#include "eagle/data/loader.h"
#include "eagle/data/sampler.h"

namespace eagle::features {

struct FeatureLayout {
  std::int64_t aux_width = 0;                  // per token: n_aux * H (EAGLE-3's fused layers); 0: none stored
  std::int64_t hidden_size = 0;                // per token: H of the last hidden state
  torch::ScalarType dtype = torch::kBFloat16;  // of both
  // The last layer's output before the target's final norm (speculators, vLLM servers, a dump with
  // features_pre_norm); else after it (Hugging Face's hidden_states[L], a dump's default).
  bool pre_norm = false;
  bool has_argmax = false;  // the target's full-vocabulary argmax is stored; else computed from the LM head
};

class FeatureStore {
 public:
  virtual ~FeatureStore() = default;
  const FeatureLayout& layout() const { return layout_; }
  const std::string& source() const { return source_; }
  // Copies positions [pos, pos + n) of the store's sample `sample` into aux (n rows of aux_width;
  // skipped when aux_width is 0 or aux is null), last (n rows of H), both in the store's dtype, and argmax (n;
  // only when stored, else null). ids are the batch's tokens there; a store that keeps the tokens compares
  // them (Error(input) naming its file on a mismatch). Thread-compatible, no tensor is made.
  virtual void read(std::int64_t sample, std::int64_t pos, std::int64_t n, const std::int32_t* ids, void* aux,
                    void* last, std::int64_t* argmax) const = 0;
  // Where reading is slow (a server): starts fetching the samples of the next `batches` batches of
  // `sampler` (row samples index `samples`, the store's sample of each of the dataset's) in the
  // order they will be read. The stores on disk need nothing ahead.
  virtual void prefetch(const data::Sampler& sampler, std::int64_t batches,
                        const std::vector<std::int64_t>& samples) const {}

 protected:
  FeatureLayout layout_;
  std::string source_;
};

// ---- folders written by dump-features ----
inline constexpr const char* kFeaturesManifest = "manifest.json";
inline constexpr const char* kFeaturesFormat = "eagle-train features";
// 2: the target's identity fingerprints every tensor (1: its final norm and first LM-head rows).
inline constexpr int kFeaturesVersion = 2;
inline constexpr const char* kFeaturesTargetDir = "target";  // config.json + model.safetensors: the ends only
inline constexpr const char* kFeaturesShardDir = "features";

// One shard: the features of samples [first_sample, first_sample + samples) of one split.
struct ShardInfo {
  std::string split;  // "train" or "validation"
  std::int64_t index = 0, first_sample = 0, samples = 0, tokens = 0;
  std::string file;  // relative to the folder: features/<split>-<index>.safetensors
};

// The manifest: what the folder holds and from what (checked by a resumed dump and by training).
struct FeatureManifest {
  FeatureLayout layout;
  std::vector<std::int64_t> aux_layer_ids;  // input-of-layer ids of the aux features, low -> high
  nlohmann::json target;                    // the target's identity (target_identity.h)
  nlohmann::json options;                   // the dump options that decide the content
  std::vector<ShardInfo> shards;            // every shard of every split, train first
  bool complete = false;                    // every shard written
  std::uint64_t bytes_per_token() const;    // shard bytes per token
};

bool is_features_folder(const std::string& dir);
nlohmann::json to_json(const FeatureManifest& m);
FeatureManifest read_manifest(const std::string& dir);

// Cuts a split of samples into shards of at most max_shard_bytes (a sample larger than that gets
// a shard of its own), in sample order.
std::vector<ShardInfo> plan_shards(const std::string& split, const data::Dataset& samples,
                                   std::uint64_t bytes_per_token, std::uint64_t max_shard_bytes);

// The tensors of one shard: aux_hidden [N, aux_width] (when stored), last_hidden [N, H],
// target_argmax [N] int32 and sample_offsets [samples + 1] int64 (token offsets of the samples).
void write_shard(const std::string& dir, const ShardInfo& shard, const std::map<std::string, torch::Tensor>& tensors);
// Whether the shard file is there, complete and of this shard (a killed dump leaves none or a
// temporary file, never a torn one: write_shard writes a temporary name, then renames).
bool shard_done(const std::string& dir, const ShardInfo& shard, const FeatureLayout& layout);

// The samples of the folder's splits: the store numbers train samples 0..n-1 and validation
// samples n.. after them. Every shard is opened (mapped, checked against the manifest and the
// dataset lengths, every target_argmax in [0, vocab_size)); a read refuses NaN or Inf naming the
// shard, the tensor, the sample and the position.
std::shared_ptr<const FeatureStore> open_dumped_features(const std::string& dir, const FeatureManifest& manifest,
                                                         const data::Dataset& train, const data::Dataset* validation,
                                                         std::int64_t vocab_size);

// ---- speculators offline data folders ----
// Row r of the folder is store sample r. The layout (dtype, slots, H) comes from the first row's
// file; every row's file header is checked when the folder is opened (rows[i], the folder row of
// samples' sample i: hidden_states of the first row's dtype and slots, at least the sample's tokens,
// token_ids beside it), its values when read (token_ids equal to the row's ids, finite).
// n_aux: the slots before the last one that hold aux layers (3 for EAGLE-3, 0 for EAGLE-1).
std::shared_ptr<const FeatureStore> open_speculators_features(const std::string& dir, const data::Dataset& samples,
                                                              const std::vector<std::int64_t>& rows,
                                                              std::int64_t hidden_size, std::int64_t n_aux);

// The index of the first NaN or Inf of count values of a floating dtype (bfloat16, float16, float32,
// float64) at data, -1 when all are finite.
std::int64_t first_non_finite(const void* data, std::int64_t count, torch::ScalarType dtype);

}  // namespace eagle::features
