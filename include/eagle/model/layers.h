// Llama-family building blocks shared by the target model and the draft heads: RMSNorm, rotary
// position embeddings (default, linear, dynamic, llama3 and yarn scaling), grouped-query helpers,
// SwiGLU.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace eagle::model {

// Hugging Face LlamaRMSNorm: normalise in fp32, cast back to the input dtype, then scale.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// Gemma's RMSNorm: x / rms(x) * (1 + w), all in fp32, then the cast back.
torch::Tensor rms_norm_one_plus(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// tanh soft cap: cap * tanh(x / cap) (Gemma's scores and logits); cap 0: x unchanged.
torch::Tensor soft_cap(const torch::Tensor& x, double cap);
// GptOssRMSNorm: the same, but the weight multiplies in fp32 before the cast back.
torch::Tensor rms_norm_fp32_weight(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// RMSNorm without a weight, in fp32, cast back (Gemma 4's value norm: Gemma4RMSNorm with_scale=False).
torch::Tensor rms_norm_unscaled(const torch::Tensor& x, double eps);

struct RopeConfig {
  std::int64_t head_dim = 64;     // the rotated dimensions (partial rotary: fewer than the head's)
  double theta = 10000.0;
  std::string type = "default";  // default | linear | dynamic | llama3 | yarn | longrope
  double factor = 1.0;           // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;  // llama3
  double high_freq_factor = 4.0; // llama3
  std::int64_t original_max_position_embeddings = 0;  // llama3, dynamic, yarn
  std::int64_t max_position_embeddings = 2048;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn: the correction range in rotations
  bool truncate = true;                      // yarn: floor/ceil the correction range
  // yarn: the factor cos and sin are multiplied by; 0: derived from factor (and mscale,
  // mscale_all_dim when both are set) as transformers' _compute_yarn_parameters does.
  double attention_factor = 0.0, mscale = 0.0, mscale_all_dim = 0.0;
  // longrope (Phi-3): per-frequency divisors [head_dim / 2], the long ones for a sequence longer
  // than original_max_position_embeddings; attention_factor as for yarn (0: derived from factor).
  std::vector<double> short_factor, long_factor;
};

// Inverse frequencies [head_dim/2] in fp32. For dynamic scaling, seq_len is the longest position+1
// in the batch (Hugging Face recomputes the base when it exceeds max_position_embeddings).
torch::Tensor rope_inv_freq(const RopeConfig& cfg, std::int64_t seq_len = 0);
// longrope's frequencies with the long factors (rope_inv_freq(cfg) has the short ones).
torch::Tensor rope_inv_freq_long(const RopeConfig& cfg);
// Dynamic scaling from a sequence length that stays on the device (an int64 scalar tensor): equal
// to rope_inv_freq(cfg, seq_len) without reading seq_len on the host, so a captured CUDA graph
// recomputes it on every replay. inv_freq is rope_inv_freq(cfg) on seq_len's device.
torch::Tensor rope_inv_freq_dynamic(const RopeConfig& cfg, const torch::Tensor& inv_freq,
                                    const torch::Tensor& seq_len);
// What vLLM and SGLang apply for a dynamic-NTK config (DynamicNTKScalingRotaryEmbedding): one
// fixed base for every length, theta * (factor^2 - factor + 1)^(d / (d - 2)), i.e. transformers'
// formula at seq_len = factor * max_position_embeddings. Other types: rope_inv_freq(cfg).
torch::Tensor rope_inv_freq_serving(const RopeConfig& cfg);

// What cos and sin are multiplied by: yarn's attention factor, 1 for the other types.
double rope_attention_factor(const RopeConfig& cfg);

// cos and sin [B, T, head_dim] for integer position_ids [B, T], in dtype, multiplied by scaling in
// fp32 before the cast (rope_attention_factor).
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                                                     torch::ScalarType dtype, double scaling = 1.0);

// x [B, heads, T, head_dim] (or [B, T, heads, head_dim] with head_axis 2); cos/sin [B, T, r]
// (rotate-half convention) rotate the first r <= head_dim features, the rest pass (partial rotary).
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         std::int64_t head_axis = 1);

// [B, kv_heads, T, D] -> [B, kv_heads * n_rep, T, D]
torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n_rep);

// down(silu(gate(x)) * up(x)); weights in nn.Linear layout [out, in].
torch::Tensor swiglu(const torch::Tensor& x, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                     const torch::Tensor& down_w);

}  // namespace eagle::model
