// TargetModel loading: config.json plus model.safetensors or the shards of
// model.safetensors.index.json, every tensor checked for presence and shape before any use.
#include <charconv>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"
#include "target_impl.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace eagle::target {

namespace fs = std::filesystem;

std::vector<std::int64_t> default_aux_layer_ids(std::int64_t L) {
  // EAGLE-3's [2, L/2, L-3] is strictly increasing from L = 7 on. Smaller (test) models get evenly
  // spread layer inputs [1, L/2, L-1] instead, clamped to [0, L-1], so the ids stay low -> high and
  // never select the final normed output (hidden_states[L]).
  if (L >= 7) return {2, L / 2, L - 3};
  auto clamp = [L](std::int64_t v) { return std::max<std::int64_t>(0, std::min(v, L - 1)); };
  return {clamp(1), clamp(L / 2), clamp(L - 1)};
}

CheckpointFiles open_checkpoint(const fs::path& dir) {
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

namespace {

// The config may not claim more decoder layers than the checkpoint holds (1 + the largest N of
// "model.layers.N."; extra ones are reported with the other unexpected tensors), and the embedding
// must have its vocabulary and hidden size.
void check_layer_count(const fs::path& dir, const CheckpointFiles& ck, const TargetConfig& c) {
  constexpr std::string_view kLayers = "model.layers.";
  std::int64_t stored = 0;
  for (const auto& [name, file] : ck.where) {
    if (name.rfind(kLayers, 0) != 0) continue;
    std::int64_t n = 0;
    const char* begin = name.data() + kLayers.size();
    auto [end, ec] = std::from_chars(begin, name.data() + name.size(), n);
    if (ec == std::errc() && end != begin && *end == '.') stored = std::max(stored, n + 1);
  }
  const auto config_file = (dir / "config.json").string();
  EAGLE_CHECK(c.num_hidden_layers <= stored,
              Error(ErrorKind::input, "config.json and the checkpoint disagree on the number of layers")
                  .file(config_file)
                  .place("num_hidden_layers")
                  .expected(fmt::format("at most {} (the checkpoint's)", stored))
                  .found(std::to_string(c.num_hidden_layers)));
  auto it = ck.where.find("model.embed_tokens.weight");
  if (it == ck.where.end()) return;  // reported with every other missing tensor
  const auto shape = ck.files[it->second].shape("model.embed_tokens.weight");
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

std::string list_some(const std::vector<std::string>& v) {
  constexpr std::size_t kShown = 8;
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < kShown; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > kShown) s += fmt::format(" and {} more", v.size() - kShown);
  return s;
}

// Checks names and shapes against the config and throws one error naming every problem; tensors
// beyond `expected` are problems too unless extras_allowed.
void check_tensors(const fs::path& dir, const CheckpointFiles& ck,
                   const std::map<std::string, std::vector<std::int64_t>>& expected, const TargetConfig& c,
                   bool extras_allowed = false) {
  std::vector<std::string> missing, unexpected, wrong;
  for (const auto& [name, shape] : expected) {
    auto it = ck.where.find(name);
    if (it == ck.where.end()) {
      missing.push_back(name);
      continue;
    }
    auto got = ck.files[it->second].shape(name);
    if (got != shape) wrong.push_back(fmt::format("{} {} (expected {})", name, got, shape));
  }
  for (const auto& [name, file] : ck.where) {
    if (expected.count(name) || extras_allowed) continue;
    // Harmless extras: a tied checkpoint that still stores lm_head, and the RoPE buffers of old exports.
    if (c.tie_word_embeddings && name == "lm_head.weight") continue;
    if (name.size() > 20 && name.ends_with("rotary_emb.inv_freq")) continue;
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

bool is_float(torch::ScalarType t) { return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16; }

// The dtype the target runs in: `dtype`, or for Undefined the checkpoint's (its embedding's, else
// config.json's); every expected tensor must be floating point.
torch::ScalarType resolve_dtype(torch::ScalarType dtype, const CheckpointFiles& ck,
                                const std::map<std::string, std::vector<std::int64_t>>& expected,
                                const TargetConfig& c) {
  const auto stored = ck.files[ck.where.at("model.embed_tokens.weight")].dtype("model.embed_tokens.weight");
  if (dtype == torch::ScalarType::Undefined)
    dtype = is_float(stored) ? stored : model::dtype_of_name(c.dtype).value_or(torch::kFloat32);
  EAGLE_CHECK(is_float(dtype), Error(ErrorKind::usage, "the target dtype must be float32, bfloat16 or float16")
                                   .found(std::string(c10::toString(dtype))));
  for (const auto& [name, shape] : expected) {
    const auto t = ck.files[ck.where.at(name)].dtype(name);
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

}  // namespace

TargetConfig TargetConfig::from_model_dir(const std::string& dir) {
  EAGLE_CHECK(fs::is_directory(dir), Error(ErrorKind::input, "model folder not found")
                                         .file(dir)
                                         .hint("--model_name_or_path must be a local Hugging Face model folder"));
  return from_json_file((fs::path(dir) / "config.json").string());
}

TargetModel TargetModel::load(const std::string& dir_name, torch::ScalarType dtype, torch::Device device) {
  const fs::path dir(dir_name);
  const auto c = TargetConfig::from_model_dir(dir_name);
  const auto ck = open_checkpoint(dir);
  // The config's sizes are checked against what the files hold before anything is built from them
  // (a config claiming ten million layers must fail at once, not after listing their tensors).
  check_layer_count(dir, ck, c);
  const auto expected = expected_tensors(c);
  check_tensors(dir, ck, expected, c);

  auto raw = [&](const std::string& name) { return ck.files[ck.where.at(name)].get(name); };
  dtype = resolve_dtype(dtype, ck, expected, c);
  check_fits(c, dtype, device, dir_name);
  // On CPU in the stored dtype, to() returns the mapping's view itself: no copy. MXFP4 blocks and
  // scales stay uint8 until assemble dequantizes them.
  auto m = assemble(c, dtype, device, [&](const std::string& name) {
    auto t = raw(name);
    if (is_fp8_weight(c, name))  // dequantized on the device, block by block
      return dequantize_fp8(t.to(device), raw(name + "_scale_inv").to(device), c.fp8_block, dtype, name);
    return t.scalar_type() == torch::kUInt8 ? t.to(device) : t.to(device, dtype);
  });
  log::info("model", "loaded {} ({} layers, hidden {}, vocab {}, {} parameters) as {} on {}", c.architecture,
            c.num_hidden_layers, c.hidden_size, c.vocab_size, m.parameter_count(), c10::toString(dtype), device.str());
  return m;
}

TargetModel TargetModel::random(const TargetConfig& config_in, torch::ScalarType dtype, torch::Device device) {
  auto config = config_in;
  config.quant_method.clear();  // random float experts and weights
  config.fp8_block.clear();
  const auto shapes = expected_tensors(config);
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  auto m = assemble(config, dtype, device, [&](const std::string& name) {
    const auto& shape = shapes.at(name);
    if (name.find("norm.weight") != std::string::npos)  // unit scale: w = 1, or Gemma's 1 + w with w = 0
      return config.norm_one_plus ? torch::zeros(shape, opts) : torch::ones(shape, opts);
    return torch::randn(shape, opts).mul_(0.02);  // transformers' initializer_range
  });
  log::info("model", "random {} ({} layers, hidden {}, vocab {}, {} parameters) as {} on {}", config.architecture,
            config.num_hidden_layers, config.hidden_size, config.vocab_size, m.parameter_count(), c10::toString(dtype),
            device.str());
  return m;
}

TargetModel TargetModel::assemble(const TargetConfig& c, torch::ScalarType dtype, torch::Device device,
                                  const std::function<torch::Tensor(const std::string&)>& get) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = c;
  // "cuda" means the current device; tensors report it with its index, so the model's device does too.
  if (device.is_cuda() && !device.has_index())
    device = torch::empty({0}, torch::TensorOptions().device(device)).device();
  impl->device = device;
  impl->dtype = dtype;
  impl->embed = get("model.embed_tokens.weight");
  impl->final_norm = get("model.norm.weight");
  impl->lm_head = c.tie_word_embeddings ? impl->embed : get("lm_head.weight");
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l);
    TargetLayerWeights w;
    w.input_norm = get(p + "input_layernorm.weight");
    w.post_norm = get(p + "post_attention_layernorm.weight");
    if (c.sandwich_norms) {
      w.pre_ff_norm = get(p + "pre_feedforward_layernorm.weight");
      w.post_ff_norm = get(p + "post_feedforward_layernorm.weight");
    }
    w.qkv_w = c.fused_checkpoint ? get(p + "self_attn.qkv_proj.weight")
                                 : torch::cat({get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                                               get(p + "self_attn.v_proj.weight")});
    if (c.attention_bias)
      w.qkv_b = torch::cat(
          {get(p + "self_attn.q_proj.bias"), get(p + "self_attn.k_proj.bias"), get(p + "self_attn.v_proj.bias")});
    w.o_w = get(p + "self_attn.o_proj.weight");
    if (c.o_bias) w.o_b = get(p + "self_attn.o_proj.bias");
    if (c.qk_norm) {
      w.q_norm = get(p + "self_attn.q_norm.weight");
      w.k_norm = get(p + "self_attn.k_norm.weight");
    }
    if (c.attention_sinks) w.sinks = get(p + "self_attn.sinks");
    if (c.sparse(l)) {
      assemble_experts(c, p, w, get, dtype);
    } else {
      w.gate_up_w = c.fused_checkpoint  // Phi-3: gate rows, then up rows, as chunk(2) splits them
                        ? get(p + "mlp.gate_up_proj.weight")
                        : torch::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")});
      w.down_w = get(p + "mlp.down_proj.weight");
    }
    impl->layers.push_back(std::move(w));
  }
  std::tie(impl->parameter_count, impl->active_parameter_count) = parameter_counts(c);
  impl->inv_freq = model::rope_inv_freq(c.rope).to(device);
  if (c.rope.type == "longrope") impl->long_inv_freq = model::rope_inv_freq_long(c.rope).to(device);
  if (c.local_rope) impl->local_inv_freq = model::rope_inv_freq(*c.local_rope).to(device);
  impl->aux_ids = default_aux_layer_ids(c.num_hidden_layers);
  TargetModel m;
  m.impl_ = std::move(impl);
  return m;
}

TargetEnds TargetModel::load_ends(const std::string& dir_name, torch::ScalarType dtype, torch::Device device) {
  TargetEnds e;
  e.config = TargetConfig::from_model_dir(dir_name);
  const auto& c = e.config;
  const auto ck = open_checkpoint(fs::path(dir_name));
  auto expected = expected_tensors(c);
  std::erase_if(expected, [](const auto& kv) { return kv.first.rfind("model.layers.", 0) == 0; });
  check_tensors(fs::path(dir_name), ck, expected, c, /*extras_allowed=*/true);
  e.dtype = resolve_dtype(dtype, ck, expected, c);
  auto get = [&](const std::string& name) { return ck.files[ck.where.at(name)].get(name).to(device, e.dtype); };
  e.embed = get("model.embed_tokens.weight");
  e.final_norm = get("model.norm.weight");
  e.lm_head = c.tie_word_embeddings ? e.embed : get("lm_head.weight");
  log::info("model", "loaded the ends of {} (embedding, final norm, LM head; no decoder layer) as {} on {}", dir_name,
            c10::toString(e.dtype), device.str());
  return e;
}

TargetEnds TargetModel::ends() const {
  return {impl_->cfg, impl_->dtype, impl_->embed, impl_->final_norm, impl_->lm_head};
}

const TargetConfig& TargetModel::config() const { return impl_->cfg; }
torch::Device TargetModel::device() const { return impl_->device; }
torch::ScalarType TargetModel::dtype() const { return impl_->dtype; }
std::int64_t TargetModel::parameter_count() const { return impl_->parameter_count; }
std::int64_t TargetModel::active_parameter_count() const { return impl_->active_parameter_count; }

bool TargetModel::graph_safe() const {
  const auto& m = *impl_;
  if (!m.cfg.moe() || !m.device.is_cuda()) return true;
#ifdef EAGLE_WITH_CUDA
  return m.dtype == torch::kBFloat16 && at::cuda::getDeviceProperties(m.device.index())->major >= 9 &&
         m.cfg.hidden_size % 8 == 0 && m.cfg.moe_intermediate_size % 8 == 0;
#else
  return false;
#endif
}
std::int64_t TargetModel::graphed_steps(std::int64_t max_cuda_graphs, Step step) const {
  if (!impl_->device.is_cuda() || !graph_safe()) return 0;
  if (step == Step::decoding && impl_->cfg.rope.type == "dynamic") return 0;
  return max_cuda_graphs;
}
const std::vector<std::int64_t>& TargetModel::aux_layer_ids() const { return impl_->aux_ids; }
torch::Tensor TargetModel::lm_head_weight() const { return impl_->lm_head; }
torch::Tensor TargetModel::embedding_weight() const { return impl_->embed; }

std::vector<std::string> TargetModel::non_finite_weights() const {
  torch::NoGradGuard no_grad;
  const auto& m = *impl_;
  std::vector<std::string> bad;
  auto check = [&](const std::string& name, const torch::Tensor& t) {
    if (t.defined() && !torch::isfinite(t).all().item<bool>()) bad.push_back(name);
  };
  check("model.embed_tokens.weight", m.embed);
  check("model.norm.weight", m.final_norm);
  if (!m.cfg.tie_word_embeddings) check("lm_head.weight", m.lm_head);
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const auto& w = m.layers[l];
    const auto p = fmt::format("model.layers.{}.", l);
    check(p + "input_layernorm.weight", w.input_norm);
    check(p + "post_attention_layernorm.weight", w.post_norm);
    check(p + "pre_feedforward_layernorm.weight", w.pre_ff_norm);
    check(p + "post_feedforward_layernorm.weight", w.post_ff_norm);
    check(p + "self_attn.{q,k,v}_proj.weight", w.qkv_w);
    check(p + "self_attn.{q,k,v}_proj.bias", w.qkv_b);
    check(p + "self_attn.o_proj.weight", w.o_w);
    check(p + "self_attn.o_proj.bias", w.o_b);
    check(p + "self_attn.q_norm.weight", w.q_norm);
    check(p + "self_attn.k_norm.weight", w.k_norm);
    check(p + "mlp.{gate,up}_proj.weight", w.gate_up_w);
    check(p + "mlp.down_proj.weight", w.down_w);
    check(p + "self_attn.sinks", w.sinks);
    check(p + "router", w.router_w);
    check(p + "router bias", w.router_b);
    check(p + "experts (gate, up)", w.experts_gate_up);
    check(p + "experts (gate, up) bias", w.experts_gate_up_b);
    check(p + "experts (down)", w.experts_down);
    check(p + "experts (down) bias", w.experts_down_b);
  }
  return bad;
}

void TargetModel::set_aux_layer_ids(std::vector<std::int64_t> ids) {
  const auto L = impl_->cfg.num_hidden_layers;
  EAGLE_CHECK(
      !ids.empty(),
      Error(ErrorKind::usage, "aux hidden-state layer ids must not be empty").place("aux_hidden_state_layer_ids"));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EAGLE_CHECK(ids[i] >= 0 && ids[i] <= L, Error(ErrorKind::usage, "aux hidden-state layer id out of range")
                                                .place("aux_hidden_state_layer_ids")
                                                .expected(fmt::format("0..{} (input-of-layer ids)", L))
                                                .found(std::to_string(ids[i])));
    EAGLE_CHECK(i == 0 || ids[i] >= ids[i - 1],
                Error(ErrorKind::usage, "aux hidden-state layer ids must be listed low -> high")
                    .place("aux_hidden_state_layer_ids")
                    .found(fmt::format("{}", ids)));
  }
  impl_->aux_ids = std::move(ids);
}

std::int64_t TargetModel::chunk_tokens() const { return impl_->chunk_tokens; }
void TargetModel::set_chunk_tokens(std::int64_t tokens) {
  EAGLE_CHECK(tokens >= 0, Error(ErrorKind::usage, "target_chunk_tokens must be >= 0").found(std::to_string(tokens)));
  impl_->chunk_tokens = tokens;
}

TargetModel load_target(const config::Options& opts, torch::Device device,
                        const std::vector<std::int64_t>& aux_layer_ids) {
  auto target = TargetModel::load(opts.model_name_or_path, model::target_dtype(opts.target_dtype), device);
  if (!aux_layer_ids.empty()) target.set_aux_layer_ids(aux_layer_ids);
  target.set_chunk_tokens(opts.target_chunk_tokens);
  const auto& c = target.config();
  log::info("model", "target {}: {} layers, hidden {}, vocabulary {}, {} parameters, aux layers [{}]", c.architecture,
            c.num_hidden_layers, c.hidden_size, c.vocab_size, target.parameter_count(),
            fmt::join(target.aux_layer_ids(), ", "));
  return target;
}

TargetModel load_target(const config::Options& opts, torch::Device device) {
  return load_target(opts, device, opts.aux_hidden_state_layer_ids);
}

}  // namespace eagle::target
