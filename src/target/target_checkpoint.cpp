// A target folder's safetensors files (model.safetensors or the shards of
// model.safetensors.index.json) and their checks against config.json before anything is built from
// it: the counts, every tensor's name and shape, the dtype, the fit in the GPU's memory.
#include <charconv>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "target_impl.h"

#ifdef EAGLE_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace eagle::target {

namespace fs = std::filesystem;

namespace {

// model.language_model.X listed as model.X (Qwen3_5ForConditionalGeneration's text model, what transformers'
// qwen3_5_text PrefixChange reads as Qwen3_5ForCausalLM's names).
void list_as_text_model(CheckpointFiles& ck) {
  constexpr std::string_view kText = "model.language_model.";
  std::map<std::string, std::size_t> where;
  for (const auto& [name, i] : ck.where) {
    if (!name.starts_with(kText)) {
      where.emplace(name, i);
      continue;
    }
    auto listed = "model." + name.substr(kText.size());
    ck.stored[listed] = name;
    where[listed] = i;
  }
  ck.where = std::move(where);
}

}  // namespace

// The files and where each tensor lives, by the files' own names.
static CheckpointFiles open_files(const fs::path& dir) {
  CheckpointFiles ck;
  const auto single = dir / "model.safetensors";
  const auto index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    ck.files.push_back(model::SafetensorsFile::open(single.string()));
    for (const auto& n : ck.files[0].names()) ck.where[n] = 0;
    return ck;
  }
  if (!fs::exists(index)) {
    const bool pickle = fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json");
    throw Error(ErrorKind::input, "no safetensors weights in the model folder")
        .file(dir.string())
        .expected("model.safetensors or model.safetensors.index.json")
        .found(pickle ? "pickle weights (pytorch_model.bin), which are never read" : "neither")
        .hint(pickle ? "convert the checkpoint to safetensors (save_pretrained(..., safe_serialization=True))"
                     : "point --model_name_or_path at a Hugging Face model folder");
  }
  nlohmann::json j = util::read_json_object(index, "safetensors index");
  EAGLE_CHECK(j.contains("weight_map") && j["weight_map"].is_object(),
              Error(ErrorKind::input, "index has no weight_map object").file(index.string()).place("weight_map"));
  std::map<std::string, std::size_t> shard_of_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    EAGLE_CHECK(it.value().is_string(), Error(ErrorKind::input, "weight_map value is not a file name")
                                            .file(index.string())
                                            .place(fmt::format("weight_map \"{}\"", it.key())));
    const auto shard = it.value().get<std::string>();
    EAGLE_CHECK(shard.find('/') == std::string::npos && shard.find("..") == std::string::npos,
                Error(ErrorKind::input, "shard name must be a plain file name in the model folder")
                    .file(index.string())
                    .place(fmt::format("weight_map \"{}\"", it.key()))
                    .found(shard));
    auto [pos, fresh] = shard_of_file.emplace(shard, ck.files.size());
    if (fresh) ck.files.push_back(model::SafetensorsFile::open((dir / shard).string()));
    const auto& f = ck.files[pos->second];
    EAGLE_CHECK(f.contains(it.key()), Error(ErrorKind::input, "the index names a tensor its shard lacks")
                                          .file(f.path())
                                          .place(fmt::format("tensor \"{}\"", it.key()))
                                          .hint("the shard may be from another checkpoint or truncated"));
    ck.where[it.key()] = pos->second;
  }
  // Tensors present in a shard but absent from the map count as unexpected, caught by the caller.
  for (std::size_t i = 0; i < ck.files.size(); ++i)
    for (const auto& n : ck.files[i].names()) ck.where.emplace(n, i);
  return ck;
}

CheckpointFiles open_checkpoint(const fs::path& dir, bool text_model) {
  CheckpointFiles ck = open_files(dir);
  if (text_model) list_as_text_model(ck);
  return ck;
}


namespace {

// 1 + the largest N of the names holding `marker` followed by "N." (0 when none does).
std::int64_t stored_count(const CheckpointFiles& ck, std::string_view marker) {
  std::int64_t stored = 0;
  for (const auto& [name, file] : ck.where) {
    const auto at = name.find(marker);
    if (at == std::string::npos) continue;
    std::int64_t n = 0;
    const char* begin = name.data() + at + marker.size();
    auto [end, ec] = std::from_chars(begin, name.data() + name.size(), n);
    if (ec == std::errc() && end != begin && *end == '.') stored = std::max(stored, n + 1);
  }
  return stored;
}

}  // namespace

// The config may not claim more decoder layers than the checkpoint holds (1 + the largest N of
// "model.layers.N."; extra ones are reported with the other unexpected tensors), nor more experts
// per layer where each has its own tensors ("experts.N."; gpt-oss and Gemma 4 store them as one tensor,
// whose shape is checked), and the embedding must have its vocabulary and hidden size: compared before
// any name is listed per layer or per expert.
void check_counts(const fs::path& dir, const CheckpointFiles& ck, const TargetConfig& c) {
  const auto config_file = (dir / "config.json").string();
  auto more_than_stored = [&](const char* field, const char* what, std::int64_t claimed, std::int64_t stored) {
    return Error(ErrorKind::input, fmt::format("config.json and the checkpoint disagree on the number of {}", what))
        .file(config_file)
        .place(field)
        .expected(fmt::format("at most {} (the checkpoint's)", stored))
        .found(std::to_string(claimed));
  };
  const auto layers = stored_count(ck, "model.layers.");
  EAGLE_CHECK(c.num_hidden_layers <= layers,
              more_than_stored("num_hidden_layers", "layers", c.num_hidden_layers, layers));
  if (c.moe.enabled() && c.family != Family::gpt_oss && !c.gemma4.enabled) {
    const auto experts = stored_count(ck, ".experts.");
    EAGLE_CHECK(c.moe.num_experts <= experts,
                more_than_stored(c.family == Family::qwen3_moe ? "num_experts" : "num_local_experts", "experts",
                                 c.moe.num_experts, experts));
  }
  auto it = ck.where.find("model.embed_tokens.weight");
  if (it == ck.where.end()) return;  // reported with every other missing tensor
  const auto shape = ck.files[it->second].shape(ck.file_name("model.embed_tokens.weight"));
  model::check_shape({c.vocab_size, c.hidden_size}, shape,
                     Error(ErrorKind::input,
                           "config.json and the checkpoint's model.embed_tokens.weight disagree on the "
                           "embedding size")
                         .file(config_file)
                         .place("vocab_size, hidden_size"));
}

// Refuses, before anything is read, a model whose weights cannot fit in the device's free memory.
void check_fits(const TargetConfig& c, torch::ScalarType dtype, torch::Device device, const std::string& dir) {
  if (!device.is_cuda()) return;  // CPU: memory-mapped, paged in as used
#ifdef EAGLE_WITH_CUDA
  const auto bytes = static_cast<double>(parameter_counts(c).first) * static_cast<double>(c10::elementSize(dtype));
  std::size_t free = 0, total = 0;
  {
    c10::cuda::CUDAGuard guard(device.has_index() ? device.index() : c10::cuda::current_device());
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  }
  // 5% of the free memory is left for activations, the head and the allocator's rounding.
  EAGLE_CHECK(
      bytes <= 0.95 * static_cast<double>(free),
      Error(ErrorKind::input, "the target's weights do not fit in the GPU's free memory")
          .file(dir)
          .expected(fmt::format("at most {:.1f} GiB of weights (95% of {:.1f} GiB free)",
                                0.95 * static_cast<double>(free) / (1 << 30), static_cast<double>(free) / (1 << 30)))
          .found(fmt::format("{:.1f} GiB ({} parameters in {})", bytes / (1 << 30), parameter_counts(c).first,
                             c10::toString(dtype)))
          .hint("use a smaller --target_dtype, a larger GPU, or train from stored features (dump-features)"));
#else
  (void)c, (void)dtype, (void)dir;
#endif
}

namespace {

// Whether name is in model.layers.{L .. L + num_mtp_layers - 1} of a family that stores its MTP layers
// there (the sigmoid-routed ones: DeepSeek-V3, GLM-4.5, GLM-4.7-Flash).
bool is_mtp_layer_tensor(const TargetConfig& c, const std::string& name) {
  constexpr std::string_view kLayers = "model.layers.";
  if (c.moe.routing != MoeRouting::sigmoid_grouped || !name.starts_with(kLayers)) return false;
  std::int64_t n = 0;
  const char* begin = name.data() + kLayers.size();
  auto [end, ec] = std::from_chars(begin, name.data() + name.size(), n);
  return ec == std::errc() && end != begin && *end == '.' && n >= c.num_hidden_layers &&
         n < c.num_hidden_layers + c.num_mtp_layers;
}

std::string list_some(const std::vector<std::string>& v) {
  constexpr std::size_t kShown = 8;
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < kShown; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > kShown) s += fmt::format(" and {} more", v.size() - kShown);
  return s;
}

}  // namespace

// Checks names and shapes against the config and throws one error naming every problem; tensors
// beyond `expected` are problems too unless extras_allowed.
void check_tensors(const fs::path& dir, const CheckpointFiles& ck,
                   const std::map<std::string, std::vector<std::int64_t>>& expected, const TargetConfig& c,
                   bool extras_allowed) {
  std::vector<std::string> missing, unexpected, wrong;
  for (const auto& [name, shape] : expected) {
    auto it = ck.where.find(name);
    if (it == ck.where.end()) {
      missing.push_back(name);
      continue;
    }
    auto got = ck.files[it->second].shape(ck.file_name(name));
    if (got != shape) wrong.push_back(fmt::format("{} {} (expected {})", name, got, shape));
  }
  for (const auto& [name, file] : ck.where) {
    if (expected.count(name) || extras_allowed) continue;
    // Harmless extras: a tied checkpoint that still stores lm_head, and the RoPE buffers of old exports.
    if (c.tie_word_embeddings && name == "lm_head.weight") continue;
    if (name.size() > 20 && name.ends_with("rotary_emb.inv_freq")) continue;
    // MiMo's MTP layers: not the target's; --draft mtp reads them itself (head/mtp/io.h).
    if (c.num_mtp_layers > 0 && name.starts_with("model.mtp_layers.")) continue;
    // DeepSeek-V3 and GLM-4.5 store theirs as the layers after the last: left unloaded, as transformers does.
    if (is_mtp_layer_tensor(c, name)) continue;
    // Qwen3.5 and Qwen3-Next ship their MTP layer as mtp.* (transformers ignores it); a multimodal checkpoint's
    // vision tower model.visual.* is never loaded for text-only data.
    if (c.hybrid() && name.starts_with("mtp.")) continue;
    if (c.multimodal && name.starts_with("model.visual.")) continue;
    if (gemma4_ignored_tensor(c, name)) continue;  // what transformers ignores in Gemma 4 checkpoints
    unexpected.push_back(name);
  }
  if (missing.empty() && unexpected.empty() && wrong.empty()) return;
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back(fmt::format("{} missing: {}", missing.size(), list_some(missing)));
  if (!wrong.empty()) parts.push_back(fmt::format("{} with a wrong shape: {}", wrong.size(), list_some(wrong)));
  if (!unexpected.empty()) parts.push_back(fmt::format("{} unexpected: {}", unexpected.size(), list_some(unexpected)));
  throw Error(ErrorKind::input, "checkpoint tensors do not match config.json")
      .file(dir.string())
      .found(fmt::format("{}", fmt::join(parts, "; ")))
      .hint(fmt::format("the checkpoint must be a complete {} with the sizes of its config.json", c.architecture));
}

namespace {
bool is_float(torch::ScalarType t) { return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16; }

}  // namespace

// The dtype the target runs in: `dtype`, or for Undefined the checkpoint's (its embedding's, else
// config.json's); every expected tensor must be floating point.
torch::ScalarType resolve_dtype(torch::ScalarType dtype, const CheckpointFiles& ck,
                                const std::map<std::string, std::vector<std::int64_t>>& expected,
                                const TargetConfig& c) {
  const auto stored =
      ck.files[ck.where.at("model.embed_tokens.weight")].dtype(ck.file_name("model.embed_tokens.weight"));
  if (dtype == torch::ScalarType::Undefined)
    dtype = is_float(stored) ? stored : model::dtype_of_name(c.dtype).value_or(torch::kFloat32);
  EAGLE_CHECK(is_float(dtype), Error(ErrorKind::usage, "the target dtype must be float32, bfloat16 or float16")
                                   .found(std::string(c10::toString(dtype))));
  for (const auto& [name, shape] : expected) {
    const auto t = ck.files[ck.where.at(name)].dtype(ck.file_name(name));
    if (is_fp8_weight(c, name)) {
      EAGLE_CHECK(t == torch::kFloat8_e4m3fn, Error(ErrorKind::input, "FP8 weights must be float8_e4m3fn (F8_E4M3)")
                                                  .file(ck.files[ck.where.at(name)].path())
                                                  .place(fmt::format("tensor \"{}\"", name))
                                                  .found(std::string(c10::toString(t))));
      continue;
    }
    if (is_packed_fp4(name)) {
      EAGLE_CHECK(t == torch::kUInt8, Error(ErrorKind::input, "MXFP4 blocks and scales must be uint8 (U8)")
                                          .file(ck.files[ck.where.at(name)].path())
                                          .place(fmt::format("tensor \"{}\"", name))
                                          .found(std::string(c10::toString(t))));
      continue;
    }
    EAGLE_CHECK(is_float(t),
                Error(ErrorKind::input, "weights must be floating point (quantized checkpoints are not read)")
                    .file(ck.files[ck.where.at(name)].path())
                    .place(fmt::format("tensor \"{}\"", name))
                    .found(std::string(c10::toString(t))));
  }
  return dtype;
}

}  // namespace eagle::target
