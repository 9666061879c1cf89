// The ceilings of every size, count and number a model's config.json may hold, shared by the
// target's reader (target/target_config.cpp) and the head's (head/export/config_json.cpp): a target
// that train accepts makes a head whose config.json eval, export and resume read back, and no
// count drives a loop or an allocation before it is bounded (docs/models.md "Limits").
#pragma once

#include <cstdint>

namespace eagle::model::limits {

// Sizes: hidden_size, intermediate_size (the largest released models: about 5e4).
inline constexpr std::int64_t kMaxSize = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxHeads = 4096;                   // num_attention_heads, num_key_value_heads
inline constexpr std::int64_t kMaxHeadDim = 4096;                 // head_dim
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;  // vocab_size
// max_position_embeddings, original_max_position_embeddings: 16M tokens (the longest released
// context is about 10M).
inline constexpr std::int64_t kMaxPositions = std::int64_t{1} << 24;
// num_hidden_layers of a target (the deepest released: 126); a checkpoint is compared with it too.
inline constexpr std::int64_t kMaxLayers = 1024;
// Experts of a mixture-of-experts layer (the most released: 384); a checkpoint is compared too.
inline constexpr std::int64_t kMaxExperts = 4096;
// rms_norm_eps lies in (0, kMaxNormEps): 0 divides by zero on a zero row, 1 or more is no RMSNorm.
inline constexpr double kMaxNormEps = 1.0;
// RoPE numbers (rope_theta, factor, low/high_freq_factor, beta_fast/slow, attention_factor,
// |mscale|): at most kMaxRope (the largest released theta is 5e8); a theta or factor at least
// kMinRope.
inline constexpr double kMaxRope = 1e12;
inline constexpr double kMinRope = 1e-6;

}  // namespace eagle::model::limits
