// FP8 draft exports as vLLM 0.32 loads EAGLE-3 drafts (docs/export.md "FP8 exports"): the linear
// weights as float8_e4m3fn with one float32 scale per output channel, dynamic per-token
// activations (compressed-tensors "float-quantized", llm-compressor's FP8_DYNAMIC scheme, so no
// calibration data is needed); lm_head, the norms, d2t/t2d and by default fc stay unquantized.
// Reading one back dequantizes it, so eval measures the quantized head.
#pragma once

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace eagle::model {
class SafetensorsFile;
}

namespace eagle::head {

// How each row's scale is chosen: amax maps the row's largest magnitude to the FP8 maximum (448,
// nothing clipped); mse clips the row to the fraction of its amax (1.00 down to 0.80 in steps of
// 0.01) whose quantized row has the least squared error.
enum class Fp8Scale { amax, mse };

struct Fp8Settings {
  Fp8Scale scale = Fp8Scale::amax;
  bool quantize_fc = false;  // vLLM serves an FP8 fc; SGLang loads it without its scale (wrong)
};

inline constexpr double kFp8E4m3Max = 448.0;

// Per-row scales [out, 1] (float32) of a [out, in] weight under the rule.
torch::Tensor fp8_row_scales(const torch::Tensor& weight, Fp8Scale rule);
// weight [out, in] as float8_e4m3fn: weight / scale rounded to nearest, clamped to +-448.
torch::Tensor quantize_fp8(const torch::Tensor& weight, const torch::Tensor& scales);
// q [out, in] (float8_e4m3fn) times its row scales [out, 1], in float32.
torch::Tensor dequantize_fp8(const torch::Tensor& q, const torch::Tensor& scales);

// Whether a tensor of an EAGLE-3 head (sglang names) is a linear weight the export quantizes.
bool is_fp8_linear(const std::string& name, const Fp8Settings& settings);

// Replaces each quantized linear NAME.weight by its FP8 values and adds NAME.weight_scale; returns
// the config.json "quantization_config" block that describes them.
nlohmann::json quantize_head_tensors(std::map<std::string, torch::Tensor>& tensors, const Fp8Settings& settings);

// A head tensor read as float32 for the head's parameter: an FP8 weight times its NAME_scale
// (refused without a scale of [out, 1], finite and positive, or when the head is not `quantized`).
torch::Tensor read_head_weight(const model::SafetensorsFile& file, const std::string& name, bool quantized);

// A head config.json's quantization_config: absent (false), or exactly the scheme written above
// (true); anything else is refused naming the field, since the weights would be read wrongly.
bool check_quantization_config(const nlohmann::json& config, const std::string& file);

}  // namespace eagle::head
