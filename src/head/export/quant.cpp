// FP8 e4m3 per-channel quantization of a head's linear weights, and the compressed-tensors block
// vLLM reads it by (vllm/model_executor/layers/quantization/compressed_tensors/, docs/export.md).
#include "eagle/head/export/quant.h"

#include <limits>

#include <fmt/format.h>

#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::head {
using json = nlohmann::json;

namespace {

// The quantized projections of a decoder layer (q/k/v fuse into vLLM's qkv_proj and gate/up into
// gate_up_proj: per-channel scales are concatenated there, so nothing is re-rounded at load).
constexpr const char* kLinearSuffixes[] = {".q_proj.weight", ".k_proj.weight",    ".v_proj.weight", ".o_proj.weight",
                                           ".gate_proj.weight", ".up_proj.weight", ".down_proj.weight"};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

json weight_args() {
  return {{"num_bits", 8},   {"type", "float"},      {"strategy", "channel"}, {"symmetric", true},
          {"dynamic", false}, {"group_size", nullptr}, {"observer", "minmax"}, {"actorder", nullptr}};
}

json activation_args() {
  return {{"num_bits", 8},  {"type", "float"},       {"strategy", "token"}, {"symmetric", true},
          {"dynamic", true}, {"group_size", nullptr}, {"observer", nullptr}, {"actorder", nullptr}};
}

Error unsupported(const std::string& file, const std::string& field, const std::string& expected, const json& found) {
  return Error(ErrorKind::input, "the head's quantization is not one eagle-train reads")
      .file(file)
      .place("quantization_config." + field)
      .expected(expected)
      .found(found.dump())
      .hint("eagle-train reads the FP8 heads it exports (compressed-tensors, per-channel FP8 weights)");
}

}  // namespace

torch::Tensor fp8_row_scales(const torch::Tensor& weight, Fp8Scale rule) {
  torch::NoGradGuard ng;
  const auto w = weight.to(torch::kFloat32);
  // An all-zero row keeps a tiny scale (its values quantize to 0 exactly).
  const auto amax = w.abs().amax(1, /*keepdim=*/true).clamp_min(1e-12);
  auto scales = amax / kFp8E4m3Max;
  if (rule == Fp8Scale::amax) return scales;
  auto best_err = torch::full({w.size(0), 1}, std::numeric_limits<float>::infinity());
  for (int step = 0; step <= 20; ++step) {
    const double clip = 1.0 - 0.01 * step;
    const auto s = amax * clip / kFp8E4m3Max;
    const auto err = (dequantize_fp8(quantize_fp8(w, s), s) - w).square().sum(1, /*keepdim=*/true);
    const auto better = err < best_err;
    scales = torch::where(better, s, scales);
    best_err = torch::where(better, err, best_err);
  }
  return scales;
}

torch::Tensor quantize_fp8(const torch::Tensor& weight, const torch::Tensor& scales) {
  torch::NoGradGuard ng;
  return (weight.to(torch::kFloat32) / scales).clamp(-kFp8E4m3Max, kFp8E4m3Max).to(torch::kFloat8_e4m3fn);
}

torch::Tensor dequantize_fp8(const torch::Tensor& q, const torch::Tensor& scales) {
  return q.to(torch::kFloat32) * scales.to(torch::kFloat32);
}

bool is_fp8_linear(const std::string& name, const Fp8Settings& settings) {
  if (name == "fc.weight") return settings.quantize_fc;
  for (const char* suffix : kLinearSuffixes)
    if (ends_with(name, suffix)) return true;
  return false;
}

json quantize_head_tensors(std::map<std::string, torch::Tensor>& tensors, const Fp8Settings& settings) {
  std::map<std::string, torch::Tensor> scales;
  for (auto& [name, t] : tensors) {
    if (!is_fp8_linear(name, settings)) continue;
    EAGLE_CHECK(t.dim() == 2, Error(ErrorKind::internal, "a linear weight is not a matrix").place("tensor " + name));
    auto s = fp8_row_scales(t, settings.scale);
    t = quantize_fp8(t, s).contiguous();
    scales[name + "_scale"] = s.contiguous();
  }
  tensors.merge(scales);
  // vLLM matches `ignore` against its own module prefixes: model.fc for the fusion layer, lm_head.
  json ignore = json::array({"lm_head"});
  if (!settings.quantize_fc) ignore.insert(ignore.end(), {"fc", "model.fc"});
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", weight_args()},
              {"input_activations", activation_args()},
              {"output_activations", nullptr}}}}},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr}};
}

torch::Tensor read_head_weight(const model::SafetensorsFile& file, const std::string& name, bool quantized) {
  auto stored = file.get(name);
  if (stored.scalar_type() != torch::kFloat8_e4m3fn) return stored;
  const std::string scale_name = name + "_scale";
  EAGLE_CHECK(quantized, Error(ErrorKind::input, "an FP8 tensor in a head whose config.json has no quantization_config")
                             .file(file.path())
                             .place(fmt::format("tensor {}", name)));
  EAGLE_CHECK(file.contains(scale_name), Error(ErrorKind::input, "an FP8 weight without its scale")
                                             .file(file.path())
                                             .place(fmt::format("tensor {}", scale_name)));
  auto scale = file.get(scale_name);
  model::check_shape(scale.sizes().vec(), {stored.size(0), 1},
                     Error(ErrorKind::input, "an FP8 scale of the wrong shape (one per output channel)")
                         .file(file.path())
                         .place(fmt::format("tensor {}", scale_name)));
  EAGLE_CHECK(torch::isfinite(scale).all().item<bool>() && (scale > 0).all().item<bool>(),
              Error(ErrorKind::input, "an FP8 scale that is not finite and positive")
                  .file(file.path())
                  .place(fmt::format("tensor {}", scale_name)));
  return dequantize_fp8(stored, scale);
}

bool check_quantization_config(const json& config, const std::string& file) {
  if (!config.is_object() || !config.contains("quantization_config") || config["quantization_config"].is_null())
    return false;
  const json& q = config["quantization_config"];
  if (!q.is_object()) throw unsupported(file, "", "an object", q);
  auto field = [&](const json& j, const std::string& key, const json& expected, const std::string& where) {
    EAGLE_CHECK(j.is_object() && j.contains(key) && j[key] == expected,
                unsupported(file, where + key, expected.dump(), j.is_object() && j.contains(key) ? j[key] : json()));
  };
  field(q, "quant_method", "compressed-tensors", "");
  field(q, "format", "float-quantized", "");
  EAGLE_CHECK(q.contains("config_groups") && q["config_groups"].is_object() && q["config_groups"].size() == 1,
              unsupported(file, "config_groups", "one group", q.value("config_groups", json())));
  const auto it = q["config_groups"].begin();
  const std::string group_name = it.key();
  const json& group = it.value();
  const std::string where = fmt::format("config_groups.{}.", group_name);
  field(group, "targets", json::array({"Linear"}), where);
  const json& w = group.contains("weights") ? group["weights"] : json();
  for (const char* key : {"num_bits", "type", "strategy", "symmetric", "dynamic"})
    field(w, key, weight_args()[key], where + "weights.");
  return true;
}

}  // namespace eagle::head
