// A head's config.json read back into a HeadConfig (see head_io.h): every layout's field names, each
// read through one typed getter (a field of the wrong JSON type is named with the type expected,
// never nlohmann's type_error), each size and the aux layers range-checked before anything is built.
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/config_fields.h"
#include "eagle/head/dflash/io.h"
#include "eagle/head/dflash2/io.h"
#include "eagle/head/dspark/io.h"
#include "eagle/head/export/io.h"
#include "eagle/head/mtp/io.h"
#include "eagle/model/config_limits.h"
#include "eagle/util/error.h"

using nlohmann::json;

namespace eagle::head {
namespace {

using Fields = ConfigFields;

namespace lim = model::limits;  // the ceilings the target's reader applies too

model::RopeConfig rope_from_json(const Fields& layer, std::int64_t head_dim, std::int64_t max_pos) {
  model::RopeConfig r;
  r.head_dim = head_dim;
  r.max_position_embeddings = max_pos;
  const Fields p = layer.has("rope_parameters") ? layer.object("rope_parameters")
                   : layer.has("rope_scaling")  ? layer.object("rope_scaling")
                                                : layer.object("rope_parameters");
  constexpr double kHuge = lim::kMaxRope, kTiny = lim::kMinRope;
  r.theta = p.number_or("rope_theta", layer.number_or("rope_theta", 10000.0, kTiny, kHuge), kTiny, kHuge);
  r.type = p.string_or("rope_type", p.string_or("type", "default"));
  r.factor = p.number_or("factor", 1.0, kTiny, kHuge);
  r.low_freq_factor = p.number_or("low_freq_factor", 1.0, kTiny, kHuge);
  r.high_freq_factor = p.number_or("high_freq_factor", 4.0, kTiny, kHuge);
  r.original_max_position_embeddings = p.integer_or("original_max_position_embeddings", 0, 0, lim::kMaxPositions);
  r.beta_fast = p.number_or("beta_fast", 32.0, 0, kHuge);
  r.beta_slow = p.number_or("beta_slow", 1.0, 0, kHuge);
  r.truncate = p.boolean_or("truncate", true);
  r.attention_factor = p.number_or("attention_factor", 0.0, 0, kHuge);
  r.mscale = p.number_or("mscale", 0.0, -kHuge, kHuge);
  r.mscale_all_dim = p.number_or("mscale_all_dim", 0.0, -kHuge, kHuge);
  return r;
}

// The MLA draft layer's sizes (a DeepseekV3Config of one layer): the LoRA ranks and head widths, one
// key/value head per query head; q_lora_rank required (vLLM's loader fuses q_a_proj, head.h).
void read_mla_layer(const Fields& layer, HeadConfig& c) {
  c.q_lora_rank = layer.integer("q_lora_rank", 1, lim::kMaxSize);
  c.kv_lora_rank = layer.integer("kv_lora_rank", 1, lim::kMaxSize);
  c.qk_nope_head_dim = layer.integer("qk_nope_head_dim", 1, lim::kMaxHeadDim);
  c.qk_rope_head_dim = layer.integer("qk_rope_head_dim", 2, lim::kMaxHeadDim);
  c.v_head_dim = layer.integer("v_head_dim", 1, lim::kMaxHeadDim);
  EAGLE_CHECK(c.qk_rope_head_dim % 2 == 0,
              layer.bad("qk_rope_head_dim", "must be even for RoPE").found(std::to_string(c.qk_rope_head_dim)));
  EAGLE_CHECK(c.num_key_value_heads == c.num_attention_heads,
              layer.bad("num_key_value_heads", "multi-head latent attention has one key/value head per query head")
                  .expected(std::to_string(c.num_attention_heads))
                  .found(std::to_string(c.num_key_value_heads)));
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  EAGLE_CHECK(c.head_dim <= lim::kMaxHeadDim,
              layer.bad("qk_nope_head_dim", "query/key head width (qk_nope_head_dim + qk_rope_head_dim) out of range")
                  .expected(fmt::format("at most {}", lim::kMaxHeadDim))
                  .found(std::to_string(c.head_dim)));
}

// The aux layers the head fuses: input-of-layer ids, low -> high, inside the target (0..L when its
// layer count is recorded). Others would select features the head was never trained on, or past
// the target's last hidden state.
void check_aux_layer_ids(const HeadConfig& c, const std::string& file) {
  const std::int64_t top = c.target_num_hidden_layers > 0 ? c.target_num_hidden_layers : lim::kMaxLayers;
  bool ok = !c.aux_layer_ids.empty();
  for (std::size_t i = 0; i < c.aux_layer_ids.size(); ++i)
    ok = ok && c.aux_layer_ids[i] >= 0 && c.aux_layer_ids[i] <= top &&
         (i == 0 || c.aux_layer_ids[i] >= c.aux_layer_ids[i - 1]);
  EAGLE_CHECK(ok, config_error(file, "eagle_aux_hidden_state_layer_ids", "aux layer ids out of range or out of order")
                      .expected(fmt::format("input-of-layer ids in [0, {}]{}, low -> high", top,
                                            c.target_num_hidden_layers > 0 ? " (the target's layers)" : ""))
                      .found(fmt::format("[{}]", fmt::join(c.aux_layer_ids, ", "))));
}

}  // namespace

HeadConfig head_config_from_json(const json& j, const std::string& file, HeadFormat* format_out) {
  if (is_mtp_config(j)) {  // a MiMo or Qwen3.5 target's config.json (the shipped layer, an export, a checkpoint)
    if (format_out) *format_out = HeadFormat::mtp;
    return mtp_config_from_json(j, file);
  }
  if (is_dspark_config(j)) {  // a DSpark draft (Qwen3DSparkModel): an export or checkpoint of --draft dspark
    if (format_out) *format_out = HeadFormat::dspark;
    return dspark_config_from_json(j, file);
  }
  if (is_dspark_speculators_config(j)) {  // a DSpark draft as speculators saves it (speculators_model_type dspark)
    if (format_out) *format_out = HeadFormat::speculators;
    return dspark_config_from_speculators_json(j, file);
  }
  if (is_dflash2_config(j)) {  // a DFlash2 draft (DFlash2DraftModel) in vLLM's or speculators' layout
    if (format_out) *format_out = j.contains("speculators_model_type") ? HeadFormat::speculators : HeadFormat::dflash;
    return dflash2_config_from_json(j, file);
  }
  if (is_dflash_config(j)) {  // a DFlash draft (DFlashDraftModel): vLLM's layout (eagle-train's too) or speculators'
    if (format_out) *format_out = j.contains("speculators_model_type") ? HeadFormat::speculators : HeadFormat::dflash;
    return dflash_config_from_json(j, file);
  }
  const Fields top{j, file, ""};
  HeadFormat format;
  const std::string arch = top.first_string("architectures");
  const std::string spec_type = top.string_or("speculators_model_type", "");
  if (spec_type == "eagle3" || spec_type == "peagle")
    format = HeadFormat::speculators;
  else if (arch == "LlamaForCausalLMEagle3" || arch == "Eagle3LlamaForCausalLM" || arch == "Eagle3Qwen3ForCausalLM" ||
           arch == "Eagle3DeepseekV3ForCausalLM" || arch == "Eagle3DeepseekV2ForCausalLM")
    format = HeadFormat::sglang;
  else if (arch == "EagleLlamaForCausalLM")
    format = HeadFormat::vllm_eagle1;
  else
    throw config_error(file, "architectures", "not a draft head this tool reads")
        .expected(
            "LlamaForCausalLMEagle3, Eagle3DeepseekV3ForCausalLM, Eagle3Speculator (speculators_model_type "
            "eagle3 or peagle) or EagleLlamaForCausalLM")
        .found(arch.empty() ? "none" : arch);
  if (format_out) *format_out = format;
  EAGLE_CHECK(
      format != HeadFormat::speculators || top.has("transformer_layer_config"),
      config_error(file, "transformer_layer_config", "missing").expected("the speculators head's layer config"));
  const Fields layer = format == HeadFormat::speculators ? top.object("transformer_layer_config") : top;
  HeadConfig c;
  c.eagle_version = format == HeadFormat::vllm_eagle1 ? 1 : 3;
  constexpr std::int64_t kMaxSize = lim::kMaxSize, kMaxVocab = lim::kMaxVocab;
  c.hidden_size = layer.integer("hidden_size", 1, kMaxSize);
  c.intermediate_size = layer.integer("intermediate_size", 1, kMaxSize);
  c.num_attention_heads = layer.integer("num_attention_heads", 1, lim::kMaxHeads);
  c.num_key_value_heads = layer.integer_or("num_key_value_heads", c.num_attention_heads, 1, c.num_attention_heads);
  EAGLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              layer.bad("num_key_value_heads", "must divide num_attention_heads")
                  .found(fmt::format("{} heads, {} key/value heads", c.num_attention_heads, c.num_key_value_heads)));
  if (layer.has("head_dim")) {
    c.head_dim = layer.integer("head_dim", 2, lim::kMaxHeadDim);
  } else {
    EAGLE_CHECK(
        c.hidden_size % c.num_attention_heads == 0,
        layer.bad("head_dim", "missing, and hidden_size is not divisible by num_attention_heads")
            .found(fmt::format("hidden_size {}, num_attention_heads {}", c.hidden_size, c.num_attention_heads)));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  const bool mla = arch == "Eagle3DeepseekV3ForCausalLM" || arch == "Eagle3DeepseekV2ForCausalLM";
  if (mla) read_mla_layer(layer, c);  // head_dim: qk_nope + qk_rope (DeepseekV3Config's head_dim is the RoPE's)
  EAGLE_CHECK(c.head_dim % 2 == 0, layer.bad("head_dim", "must be even for RoPE").found(std::to_string(c.head_dim)));
  c.rms_norm_eps = layer.rms_norm_eps();
  c.hidden_act = layer.string_or("hidden_act", "silu");
  c.max_position_embeddings = layer.integer_or("max_position_embeddings", 2048, 1, lim::kMaxPositions);
  c.rope = rope_from_json(layer, mla ? c.qk_rope_head_dim : c.head_dim, c.max_position_embeddings);
  if (mla) {  // as HeadConfig::use_mla_layer trains it: vLLM's deepseek_yarn, or default RoPE
    EAGLE_CHECK(c.rope.type == "default" || c.rope.type == "yarn",
                layer.bad("rope_scaling", "the MLA draft layer rotates default RoPE or YaRN")
                    .expected("rope_type default or yarn")
                    .found(c.rope.type));
    c.rope.truncate = true;
    c.rope.attention_factor = 0.0;
  }
  if (c.eagle_version == 3) {  // EAGLE 3.1 switches at the top level (norm_before_fc also in eagle_config)
    const Fields eagle = top.object("eagle_config");
    auto flag = [&](const char* key) {
      return top.has(key) ? top.boolean_or(key, false) : eagle.boolean_or(key, false);
    };
    c.fc_norm = flag("fc_norm");
    c.norm_output = flag("norm_output");
    c.norm_before_fc = flag("norm_before_fc");
    EAGLE_CHECK(!(c.fc_norm && c.norm_before_fc),
                config_error(file, "norm_before_fc", "fc_norm and norm_before_fc together are not read")
                    .hint("speculators refuses the pair; export one of them"));
    // speculators: norm_before_residual is true when absent; eagle-train trains it false.
    const bool nbr = top.boolean_or("norm_before_residual", format == HeadFormat::speculators && spec_type != "peagle");
    EAGLE_CHECK(!nbr, config_error(file, "norm_before_residual", "heads with norm_before_residual are not read")
                          .expected("false (written by eagle-train)")
                          .found("true (or absent in speculators format)"));
    c.qk_norm = layer.string_or("model_type", "llama") == "qwen3" || arch == "Eagle3Qwen3ForCausalLM";
    c.num_layers = layer.integer_or("num_hidden_layers", 1, 1, kMaxDraftLayers);
  }
  c.target_dtype = top.string_or("dtype", top.string_or("torch_dtype", layer.string_or("torch_dtype", c.target_dtype)));
  c.vocab_size = layer.integer("vocab_size", 1, kMaxVocab);
  c.draft_vocab_size = c.eagle_version == 3 ? top.integer("draft_vocab_size", 1, c.vocab_size) : c.vocab_size;
  c.target_hidden_size = top.integer_or("target_hidden_size", c.hidden_size, 1, kMaxSize);
  // P-EAGLE: the speculators peagle type, or an EAGLE-layout head of eagle-train's that says so.
  c.parallel_drafting = spec_type == "peagle" || top.object("eagle_train").boolean_or("parallel_drafting", false);
  if (c.parallel_drafting) {  // a token of the vocabulary, named so whatever the number (2^64-1 too)
    const auto& id = top.has("mask_token_id") ? top.j["mask_token_id"] : json();
    const bool in_vocab = id.is_number_unsigned() ? id.get<std::uint64_t>() < static_cast<std::uint64_t>(c.vocab_size)
                          : id.is_number_integer()
                              ? id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < c.vocab_size
                              : true;  // missing or not an integer: named below
    EAGLE_CHECK(in_vocab, top.bad("mask_token_id", "token id outside the vocabulary")
                              .expected(fmt::format("an id in [0, {}) (vocab_size)", c.vocab_size))
                              .found(id.dump()));
    c.mask_token_id = top.integer("mask_token_id", 0, c.vocab_size - 1);
  }
  const Fields spec = top.object("speculators_config");
  c.ttt_steps = spec.first_object("proposal_methods").integer_or("speculative_tokens", c.ttt_steps, 1, 64);
  const Fields verifier = spec.object("verifier");
  c.target_name_or_path = verifier.string_or("name_or_path", c.target_name_or_path);
  if (const auto a = verifier.first_string("architectures"); !a.empty()) c.target_architecture = a;
  const Fields e = top.object("eagle_train");
  // The architecture says which EAGLE a head is; the version eagle-train writes beside it must agree (a head
  // edited to 2, or to 1 under an EAGLE-3 architecture, evaluated and exported as if it did).
  const auto version = e.integer_or("eagle_version", c.eagle_version, 1, 3);
  EAGLE_CHECK(version == c.eagle_version,
              config_error(file, "eagle_train.eagle_version", "contradicts the head's architecture")
                  .expected(fmt::format("{} (architectures {})", c.eagle_version, arch.empty() ? spec_type : arch))
                  .found(std::to_string(version)));
  c.target_name_or_path = e.string_or("target_name_or_path", c.target_name_or_path);
  c.target_architecture = e.string_or("target_architecture", c.target_architecture);
  c.target_dtype = e.string_or("target_dtype", c.target_dtype);
  c.target_num_hidden_layers = e.integer_or("target_num_hidden_layers", c.target_num_hidden_layers, 0, lim::kMaxLayers);
  c.ttt_steps = e.integer_or("ttt_steps", c.ttt_steps, 1, 64);
  c.ttt_loss_decay = e.number_or("ttt_loss_decay", c.ttt_loss_decay, 0, 1);
  c.fc_bias = e.boolean_or("fc_bias", c.fc_bias);
  c.eagle1_feature_weight = e.number_or("eagle1_feature_weight", c.eagle1_feature_weight, 0, 1e6);
  c.eagle1_token_weight = e.number_or("eagle1_token_weight", c.eagle1_token_weight, 0, 1e6);
  if (c.eagle_version == 3) {
    const Fields eagle = top.object("eagle_config");
    if (top.has("eagle_aux_hidden_state_layer_ids")) {
      c.aux_layer_ids = top.integers("eagle_aux_hidden_state_layer_ids");
    } else if (eagle.has("eagle_aux_hidden_state_layer_ids")) {
      for (auto id : eagle.integers("eagle_aux_hidden_state_layer_ids")) c.aux_layer_ids.push_back(id + 1);
    }
    // Named nowhere (SpecForge's default save): left empty, for load_head to resolve as the engines do.
    if (!c.aux_layer_ids.empty() || top.has("eagle_aux_hidden_state_layer_ids")) check_aux_layer_ids(c, file);
  }
  return c;
}

}  // namespace eagle::head
