// TargetConfig::from_json_file: reads a Hugging Face config.json in the transformers 4.x and 5.x
// spellings and refuses, by name, every architecture or field that would change the math; and
// generation_end_ids, which adds generation_config.json's eos ids.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config_reader.h"
#include "eagle/target/target_config.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::target {

namespace {

using nlohmann::json;

// The families, one row each: how config.json names it, whether its MLP is a mixture of experts
// (read_moe), the reader of the fields only it has (after the common ones), another model_type the
// same architecture is published under (Kimi-K2's config.json says kimi_k2 for DeepseekV3ForCausalLM),
// and whether it is a multimodal wrapper read as its text model (text_config, model.language_model.*).
struct FamilyRow {
  Family family;
  const char* architecture;
  const char* model_type;
  bool moe;
  void (*read)(const Reader&, TargetConfig&);
  const char* model_type_alias = nullptr;
  bool multimodal = false;
};
constexpr FamilyRow kFamilies[] = {
    {Family::llama, "LlamaForCausalLM", "llama", false, nullptr},
    {Family::mistral, "MistralForCausalLM", "mistral", false, nullptr},
    {Family::qwen2, "Qwen2ForCausalLM", "qwen2", false, nullptr},
    {Family::mimo, "MiMoForCausalLM", "mimo", false, read_mimo},
    {Family::qwen3, "Qwen3ForCausalLM", "qwen3", false, nullptr},
    {Family::qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe", true, nullptr},
    {Family::mixtral, "MixtralForCausalLM", "mixtral", true, nullptr},
    {Family::gpt_oss, "GptOssForCausalLM", "gpt_oss", true, nullptr},
    {Family::gemma2, "Gemma2ForCausalLM", "gemma2", false, read_gemma},
    {Family::gemma3_text, "Gemma3ForCausalLM", "gemma3_text", false, read_gemma},
    {Family::phi3, "Phi3ForCausalLM", "phi3", false, read_phi3},
    {Family::deepseek_v2, "DeepseekV2ForCausalLM", "deepseek_v2", true, read_deepseek},
    {Family::deepseek_v3, "DeepseekV3ForCausalLM", "deepseek_v3", true, read_deepseek, "kimi_k2"},
    {Family::glm4_moe, "Glm4MoeForCausalLM", "glm4_moe", true, read_glm4_moe},
    {Family::glm4_moe_lite, "Glm4MoeLiteForCausalLM", "glm4_moe_lite", true, read_deepseek},
    {Family::qwen3_next, "Qwen3NextForCausalLM", "qwen3_next", true, read_hybrid},
    {Family::qwen3_5, "Qwen3_5ForCausalLM", "qwen3_5_text", false, read_hybrid},
    {Family::qwen3_5, "Qwen3_5ForConditionalGeneration", "qwen3_5", false, read_hybrid, nullptr, true},
    {Family::qwen3_5_moe, "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", true, read_hybrid},
    {Family::qwen3_5_moe, "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", true, read_hybrid, nullptr, true},
    {Family::gemma4_text, "Gemma4ForCausalLM", "gemma4_text", false, read_gemma4},
    {Family::gemma4_text, "Gemma4ForConditionalGeneration", "gemma4", false, read_gemma4, nullptr, true}};

// "A, B, ... or Z": the supported architectures, for the refusal of any other.
std::string family_list() {
  std::string out;
  const auto n = std::size(kFamilies);
  for (std::size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : (i + 1 == n ? " or " : ", ")) + std::string(kFamilies[i].architecture);
  return out;
}

// Numbers whose 0 means "none", as null does, in every family (docs/models.md): the soft caps (a
// family without them accepts 0 or null, and refuses a cap). sliding_window follows the same rule
// (read_attention_types).
constexpr std::string_view kNoneMeansZero[] = {"attn_logit_softcapping", "final_logit_softcapping"};

// Fields that other decoders use to change the math; none of them exists in the supported
// families, so their presence means the checkpoint is something we would compute wrongly.
constexpr const char* kForeignMathFields[] = {
    "attn_logit_softcapping", "final_logit_softcapping", "logit_scale",
    "embedding_multiplier",   "residual_multiplier",     "attention_multiplier",
    "logits_scaling",         "no_rope_layers",          "use_qk_norm",
    "query_pre_attn_scalar"};

void read_fp8(const Reader& r, const json& q, TargetConfig& c);

// A quantization_config: gpt-oss's MXFP4 experts are read (dequantized exactly at load); any other
// method is refused by name.
void read_quantization(const Reader& r, TargetConfig& c) {
  if (!r.has("quantization_config")) return;
  const auto& q = r.j["quantization_config"];
  EAGLE_CHECK(q.is_object(), r.bad("quantization_config", "not an object").found(q.dump()));
  const std::string method =
      q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"].get<std::string>() : q.dump();
  // FP8 is read for the attention-only dense families (a hybrid's Gated DeltaNet projections are not covered).
  // Gemma 4 is not: which of its per-layer-input projections a release would quantize is unknown.
  if (method == "fp8" && !c.moe.enabled() && !c.hybrid() && !c.gemma4.enabled) return read_fp8(r, q, c);
  EAGLE_CHECK(c.family == Family::gpt_oss && method == "mxfp4",
              r.bad("quantization_config.quant_method", "quantized checkpoint not supported")
                  .expected(c.family == Family::gpt_oss ? "mxfp4, or no quantization_config"
                                                        : "fp8 (block-scaled e4m3) on a dense target, or none")
                  .found(method)
                  .hint("use the checkpoint's bf16 release, or dequantize it with transformers first"));
  EAGLE_CHECK(c.hidden_size % 32 == 0 && c.moe.intermediate_size % 32 == 0,
              r.bad("quantization_config",
                    "MXFP4 blocks hold 32 values: hidden_size and intermediate_size must be "
                    "multiples of 32")
                  .found(fmt::format("{} and {}", c.hidden_size, c.moe.intermediate_size)));
  c.quant.method = method;
}

// Which keys each layer attends, as transformers' masks do per family: `layer_types` when the
// config lists them (full_attention | sliding_attention, the window being sliding_window); else
// Mistral, Mixtral and Phi-3 slide in every layer when sliding_window is set, Qwen2/Qwen3 from
// layer max_window_layers on with use_sliding_window (Qwen3-MoE: every layer), gpt-oss and Gemma 2
// alternate (sliding first), Gemma 3 slides except every sliding_window_pattern-th layer.
void read_attention_types(const Reader& r, TargetConfig& c) {
  const auto t = c.family;
  if (hybrid_family(t) || t == Family::gemma4_text) return;  // read_hybrid's, read_gemma4's own
  const auto L = c.num_hidden_layers;
  const bool qwen = t == Family::qwen2 || t == Family::mimo || t == Family::qwen3 || t == Family::qwen3_moe;
  // DeepSeek-V2/V3, GLM-4.5 and GLM-4.7-Flash never slide (transformers' masks ignore sliding_window there).
  const bool full_only = t == Family::deepseek_v2 || t == Family::deepseek_v3 || t == Family::glm4_moe ||
                         t == Family::glm4_moe_lite;
  const bool slides = qwen ? r.boolean_or("use_sliding_window", false) : !full_only;
  const bool gemma = t == Family::gemma2 || t == Family::gemma3_text;
  const std::int64_t default_window = t == Family::gpt_oss ? 128 : (gemma ? 4096 : 0);
  // An explicit null is "none", as 0 is (absent: the family's default): layers that must slide then
  // refuse both alike below, instead of null silently taking the default window.
  const bool none_given = r.j.contains("sliding_window") && r.j["sliding_window"].is_null();
  const auto window = slides && !none_given ? r.integer_or("sliding_window", qwen ? 4096 : default_window) : 0;
  EAGLE_CHECK(window >= 0,
              r.bad("sliding_window", "must be positive, or 0 or null for none").found(std::to_string(window)));
  std::vector<bool> sliding(static_cast<std::size_t>(L), false);
  if (auto types = read_layer_types(r, L, "full_attention", "sliding_attention", "attention type")) {
    sliding = std::move(*types);
  } else {
    const auto pattern = t == Family::gemma3_text ? r.integer_or("sliding_window_pattern", 6) : 2;
    EAGLE_CHECK(pattern >= 1, r.bad("sliding_window_pattern", "must be positive").found(std::to_string(pattern)));
    const auto from =
        t == Family::qwen2 || t == Family::mimo || t == Family::qwen3 ? r.integer_or("max_window_layers", 0) : 0;
    for (std::int64_t l = 0; l < L; ++l) {
      const bool alternate = t == Family::gpt_oss || gemma;
      sliding[static_cast<std::size_t>(l)] = alternate ? (l + 1) % pattern != 0 : l >= from;
    }
  }
  for (std::size_t l = 0; l < sliding.size(); ++l) {
    if (!sliding[l] || window == 0) continue;
    if (c.attention.layer_windows.empty()) c.attention.layer_windows.assign(sliding.size(), 0);
    c.attention.layer_windows[l] = window;
  }
  const bool must_slide = r.has("layer_types") || t == Family::gpt_oss || gemma;  // listed or alternating
  EAGLE_CHECK(window > 0 || !must_slide || std::find(sliding.begin(), sliding.end(), true) == sliding.end() || qwen ||
                  full_only,
              r.bad("sliding_window", "sliding_attention layers need a window (0 and null mean none)")
                  .expected("a window of 1 or more tokens")
                  .found(r.has("sliding_window") ? r.j["sliding_window"].dump() : "null"));
}

// FP8 block-scaled checkpoints (fine-grained FP8: e4m3 weights, weight_scale_inv per block).
void read_fp8(const Reader& r, const json& q, TargetConfig& c) {
  const Reader qr{r.path, q};
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error(ErrorKind::input, what).file(r.path).place("field \"quantization_config." + key + "\"");
  };
  const auto fmt_name = qr.string_or("fmt", "e4m3");
  EAGLE_CHECK(fmt_name == "e4m3", bad("fmt", "only e4m3 FP8 is read").found(fmt_name));
  EAGLE_CHECK(qr.has("weight_block_size") && q["weight_block_size"].is_array() && q["weight_block_size"].size() == 2,
              bad("weight_block_size", "FP8 checkpoints are read block-scaled only")
                  .expected("[rows, columns] of each weight_scale_inv block")
                  .hint("per-tensor FP8 (weight_scale) is not supported"));
  // Bounded like a size (a block near 2^63 overflowed the grid arithmetic of the scales' shape).
  for (const auto& x : q["weight_block_size"]) {
    const bool in_range = x.is_number_integer() && !(x.is_number_unsigned() && x.get<std::uint64_t>() > (1u << 20)) &&
                          x.get<std::int64_t>() >= 1 && x.get<std::int64_t>() <= model::limits::kMaxSize;
    EAGLE_CHECK(in_range,
                bad("weight_block_size", "block sizes out of range")
                    .expected(fmt::format("integers in [1, {}] (rows, columns of each block)", model::limits::kMaxSize))
                    .found(x.dump()));
    c.quant.fp8_block.push_back(x.get<std::int64_t>());
  }
  if (!qr.has("modules_to_not_convert")) return;
  const auto& skip = q["modules_to_not_convert"];
  EAGLE_CHECK(skip.is_array() && std::all_of(skip.begin(), skip.end(), [](const json& m) { return m.is_string(); }),
              bad("modules_to_not_convert", "not a list of module names")
                  .expected("a list of strings (the modules kept in float), or null")
                  .found(skip.dump().substr(0, 120)));
  for (const auto& m : skip) c.quant.fp8_skip.push_back(m.get<std::string>() + ".");
}

}  // namespace

TargetConfig TargetConfig::from_json_file(const std::string& path) {
  const json j = util::read_json_object(path, "model config",
                                        "--model_name_or_path must be a Hugging Face model folder with config.json");
  const Reader top{path, j};

  TargetConfig c;
  EAGLE_CHECK(top.has("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
                  j["architectures"][0].is_string(),
              top.bad("architectures", "expected a list with one architecture name")
                  .found(top.has("architectures") ? j["architectures"].dump() : "nothing"));
  c.architecture = j["architectures"][0].get<std::string>();
  c.model_type = top.string_or("model_type", "");
  const FamilyRow* fam = nullptr;
  for (const auto& f : kFamilies)
    if (c.architecture == f.architecture) fam = &f;
  EAGLE_CHECK(fam != nullptr,
              top.bad("architectures", "unsupported architecture").expected(family_list()).found(c.architecture));
  const bool alias = fam->model_type_alias != nullptr && c.model_type == fam->model_type_alias;
  EAGLE_CHECK(c.model_type == fam->model_type || alias,
              top.bad("model_type", "model_type does not match the architecture")
                  .expected(alias || fam->model_type_alias == nullptr
                                ? std::string(fam->model_type)
                                : fmt::format("{} or {}", fam->model_type, fam->model_type_alias))
                  .found(c.model_type));
  c.family = fam->family;
  const auto t = c.family;
  // A multimodal checkpoint (Qwen3_5ForConditionalGeneration): its text model's fields are text_config's; the
  // vision_config is not read (the vision tower is never loaded).
  c.multimodal = fam->multimodal;
  EAGLE_CHECK(!c.multimodal || (top.has("text_config") && j["text_config"].is_object()),
              top.bad("text_config", "a multimodal checkpoint needs its text model's config")
                  .expected("an object")
                  .found(top.has("text_config") ? j["text_config"].dump() : "nothing"));
  const Reader r = c.multimodal ? Reader{path, j["text_config"], "text_config."} : top;

  // Every size and count within model/config_limits.h's ceilings, the ones the head's reader applies
  // to the head made from them: what train accepts, eval, export and resume read back.
  namespace lim = model::limits;
  c.vocab_size = r.bounded("vocab_size", 1, lim::kMaxVocab);
  c.hidden_size = r.bounded("hidden_size", 1, lim::kMaxSize);
  // Qwen3-MoE's intermediate_size is only its dense layers' (checked below when there are any).
  c.intermediate_size = t == Family::qwen3_moe || t == Family::qwen3_5_moe
                            ? r.bounded_or("intermediate_size", 0, 0, lim::kMaxSize)
                        : t == Family::qwen3_next || t == Family::qwen3_5  // the config classes' defaults
                            ? r.bounded_or("intermediate_size", t == Family::qwen3_next ? 5632 : 12288, 1, lim::kMaxSize)
                            : r.bounded("intermediate_size", 1, lim::kMaxSize);
  c.num_hidden_layers = r.bounded("num_hidden_layers", 1, lim::kMaxLayers);
  c.num_attention_heads = r.bounded("num_attention_heads", 1, lim::kMaxHeads);
  c.num_key_value_heads = r.bounded_or("num_key_value_heads", c.num_attention_heads, 1, lim::kMaxHeads);
  EAGLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              r.bad("num_key_value_heads", "must divide num_attention_heads")
                  .found(fmt::format("{} heads, {} key/value heads", c.num_attention_heads, c.num_key_value_heads)));
  if (t == Family::deepseek_v2 || t == Family::deepseek_v3 || t == Family::glm4_moe_lite) {
    read_mla_dims(r, c);  // head_dim: the RoPE's width here, each head's query/key width after read_rope_layers
  } else if (r.has("head_dim") || hybrid_family(t) || t == Family::gemma4_text) {
    // Qwen3.5, Qwen3-Next, Gemma 4 (its sliding layers'): 256 by default
    c.head_dim = r.bounded_or("head_dim", 256, 1, lim::kMaxHeadDim);
  } else {
    EAGLE_CHECK(c.hidden_size % c.num_attention_heads == 0,
                r.bad("hidden_size", "not divisible by num_attention_heads and no head_dim given"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
    EAGLE_CHECK(c.head_dim <= lim::kMaxHeadDim,
                r.bad("hidden_size", "head_dim (hidden_size / num_attention_heads) out of range")
                    .expected(fmt::format("at most {}", lim::kMaxHeadDim))
                    .found(std::to_string(c.head_dim)));
  }
  EAGLE_CHECK(c.head_dim % 2 == 0, r.bad("head_dim", "must be even for RoPE").found(std::to_string(c.head_dim)));
  c.max_position_embeddings = r.bounded_or("max_position_embeddings", 2048, 1, lim::kMaxPositions);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  EAGLE_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps < lim::kMaxNormEps,
              r.bad("rms_norm_eps", "out of range")
                  .expected(fmt::format("a number in (0, {})", lim::kMaxNormEps))
                  .found(j["rms_norm_eps"].dump()));
  // A multimodal wrapper ties by its own (top-level) field, as transformers' get_expanded_tied_weights_keys reads it.
  // Gemma4Config and Gemma4TextConfig tie by default.
  c.tie_word_embeddings = (c.multimodal ? top : r).boolean_or("tie_word_embeddings", t == Family::gemma4_text);
  const bool gemma = t == Family::gemma2 || t == Family::gemma3_text;
  const bool gemma_mlp = gemma || t == Family::gemma4_text;
  c.hidden_act = gemma_mlp ? "gelu_pytorch_tanh" : r.string_or("hidden_act", "silu");
  EAGLE_CHECK(c.hidden_act == "silu" || gemma_mlp,
              r.bad("hidden_act", "unsupported activation").expected("silu").found(c.hidden_act));
  const Reader& rd = c.multimodal && !r.has("dtype") && !r.has("torch_dtype") ? top : r;
  c.dtype = rd.has("dtype") ? rd.string_or("dtype", "float32") : rd.string_or("torch_dtype", "float32");
  EAGLE_CHECK(c.dtype == "float32" || c.dtype == "bfloat16" || c.dtype == "float16",
              rd.bad(rd.has("dtype") ? "dtype" : "torch_dtype", "unsupported dtype")
                  .expected("float32, bfloat16 or float16")
                  .found(c.dtype));
  read_rope_layers(r, c);
  if (c.mla()) c.head_dim = c.attention.qk_nope_head_dim + c.attention.qk_rope_head_dim;

  // Bias and normalisation layout per family (as in transformers' modeling files).
  const bool attention_bias = r.boolean_or("attention_bias", t == Family::gpt_oss);
  if (t == Family::qwen2 || t == Family::mimo) {
    c.attention.bias = true;  // Qwen2 (and MiMo, a Qwen2 decoder) always has q/k/v bias, never o_proj bias
  } else if (t == Family::mistral || t == Family::mixtral) {
    EAGLE_CHECK(!attention_bias, r.bad("attention_bias", "Mistral and Mixtral have no attention bias").found("true"));
  } else {
    c.attention.bias = attention_bias;
    c.attention.o_bias = attention_bias;  // Llama, Qwen3(-MoE) and gpt-oss put the bias on o_proj too
  }
  c.attention.qk_norm = t == Family::qwen3 || t == Family::qwen3_moe;
  if (fam->read != nullptr) fam->read(r, c);
  c.attention.sinks = t == Family::gpt_oss;
  c.norm_weight_fp32 = t == Family::gpt_oss || t == Family::gemma4_text;  // Gemma4RMSNorm: x * w in fp32
  EAGLE_CHECK(!r.boolean_or("mlp_bias", false),
              r.bad("mlp_bias", "MLP bias is not supported").expected("false").found("true"));
  if (fam->moe) read_moe(r, c);
  bool dense_layers = !c.moe.enabled();
  for (bool sparse : c.moe.sparse_layers) dense_layers = dense_layers || !sparse;
  EAGLE_CHECK(!dense_layers || c.intermediate_size > 0,
              r.bad("intermediate_size", "required (the dense MLP layers' size) and must be positive")
                  .found(std::to_string(c.intermediate_size)));
  read_quantization(c.multimodal && !r.has("quantization_config") ? top : r, c);
  // Sliding windows change which keys a query sees; refused where they apply and are not implemented.
  read_attention_types(r, c);
  for (const char* key : kForeignMathFields) {
    const std::string k = key;
    if (gemma && (k == "attn_logit_softcapping" || k == "final_logit_softcapping" || k == "query_pre_attn_scalar"))
      continue;  // Gemma's own fields (read above)
    if (t == Family::glm4_moe && k == "use_qk_norm") continue;  // GLM-4.5's own (read_glm4_moe)
    if (c.gemma4.enabled && k == "final_logit_softcapping") continue;  // Gemma 4's own (read_gemma4)
    // One rule in every family: a soft cap of 0 means none, as null does.
    if (std::find(std::begin(kNoneMeansZero), std::end(kNoneMeansZero), k) != std::end(kNoneMeansZero) && r.has(key) &&
        r.j[key].is_number() && r.j[key].get<double>() == 0.0)
      continue;
    EAGLE_CHECK(!r.has(key), r.bad(key, "field changes the model's math and is not supported by this architecture")
                                 .found(r.j[key].dump())
                                 .hint("is this really a " + c.architecture + " checkpoint?"));
  }

  c.eos_token_ids = r.id_list("eos_token_id", c.vocab_size);
  c.bos_token_id = r.integer_or("bos_token_id", -1);
  if (c.multimodal) {
    // The wrapper's own ids where its text model names none; and the media placeholders (Qwen3_5Config's
    // defaults), which a text-only target cannot compute (their embeddings come from the vision tower).
    if (c.eos_token_ids.empty()) c.eos_token_ids = top.id_list("eos_token_id", c.vocab_size);
    if (c.bos_token_id < 0) c.bos_token_id = top.integer_or("bos_token_id", -1);
    using Id = std::pair<const char*, std::int64_t>;
    const std::vector<Id> qwen = {Id{"image_token_id", 248056}, Id{"video_token_id", 248057},
                                  Id{"vision_start_token_id", 248053}, Id{"vision_end_token_id", 248054}};
    // Gemma4Model replaces these three (get_placeholder_mask) by the towers' outputs; boi/eoi are plain tokens.
    const std::vector<Id> gemma4 = {Id{"image_token_id", 258880}, Id{"video_token_id", 258884},
                                    Id{"audio_token_id", 258881}};
    for (auto [key, def] : c.gemma4.enabled ? gemma4 : qwen) {
      const auto id = top.integer_or(key, def);
      if (id >= 0 && id < c.vocab_size) c.media_tokens.push_back({id, key});
    }
  }
  return c;
}

std::vector<std::int64_t> generation_end_ids(const std::string& model_dir, const TargetConfig& config) {
  std::vector<std::int64_t> ids = config.eos_token_ids;
  const std::string path = model_dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return ids;
  const json j = util::read_json_object(path, "generation config", "remove the file or fix its JSON");
  for (auto id : Reader{path, j}.id_list("eos_token_id", config.vocab_size))
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

}  // namespace eagle::target
