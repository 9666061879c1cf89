// HeadConfig from the target's config, DraftHead's defaults (the drafting steps a kind lacks refuse by
// name) and the head's parameter list (see head.h).
#include "eagle/head/head.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/model/shape_check.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"

namespace eagle::head {

HeadConfig HeadConfig::from_target(const target::TargetConfig& target, std::int64_t eagle_version,
                                   std::vector<std::int64_t> aux_layer_ids, std::int64_t draft_vocab_size) {
  EAGLE_CHECK(eagle_version == 1 || eagle_version == 3, Error(ErrorKind::usage, "unknown EAGLE version")
                                                            .place("eagle_version")
                                                            .expected("1 or 3")
                                                            .found(fmt::format("{}", eagle_version)));
  HeadConfig c;
  c.eagle_version = eagle_version;
  c.hidden_size = target.hidden_size;
  // A target whose every layer is MoE may name no dense MLP width (Qwen3_5MoeTextConfig has no
  // intermediate_size: 0 here, and a zero-wide MLP cannot be initialised): the Llama rule then, 8/3 H
  // rounded up to a multiple of 256 (SpecForge's configs/qwen3.5-122b-a10b-eagle3-moe.json: H 3072, 8192).
  c.intermediate_size =
      target.intermediate_size > 0 ? target.intermediate_size : (8 * target.hidden_size / 3 + 255) / 256 * 256;
  c.num_attention_heads = target.num_attention_heads;
  c.num_key_value_heads = target.num_key_value_heads > 0 ? target.num_key_value_heads : target.num_attention_heads;
  c.head_dim = target.head_dim > 0 ? target.head_dim : target.hidden_size / target.num_attention_heads;
  c.rms_norm_eps = target.rms_norm_eps;
  c.hidden_act = "silu";  // the draft layer is a Llama layer, whatever the target's MLP (Gemma: GELU)
  c.max_position_embeddings = target.max_position_embeddings;
  c.rope = target.rope;          // the full-attention layers' (Gemma 3's global RoPE)
  c.rope.head_dim = c.head_dim;  // every feature of the head turns (no partial rotary in the draft layer)
  if (c.rope.type == "longrope") {
    // Phi-3's factors are per rotary frequency of the target's heads; the head rotates plain RoPE
    // at the target's base, and its export says so (docs/heads.md).
    c.rope = model::RopeConfig{};
    c.rope.head_dim = c.head_dim;
    c.rope.theta = target.rope.theta;
    c.rope.max_position_embeddings = target.max_position_embeddings;
  }
  c.vocab_size = target.vocab_size;
  c.draft_vocab_size = eagle_version == 3 ? std::min(draft_vocab_size, target.vocab_size) : target.vocab_size;
  c.target_hidden_size = target.hidden_size;
  c.target_num_hidden_layers = target.num_hidden_layers;
  const auto l = target.num_hidden_layers;
  if (aux_layer_ids.empty() && eagle_version == 3) aux_layer_ids = target::default_aux_layer_ids(l);
  c.aux_layer_ids = std::move(aux_layer_ids);
  c.target_architecture = target.architecture;
  c.target_dtype = target.dtype;
  return c;
}

void HeadConfig::use_mla_layer(const target::TargetConfig& target) {
  auto refuse = [&](const char* what) {
    return Error(ErrorKind::usage, fmt::format("the MLA draft layer (draft_layer deepseek) {}", what))
        .place("draft_layer");
  };
  EAGLE_CHECK(eagle_version == 3 && !mtp() && !dflash(),
              refuse("is an EAGLE-3 head's layer").expected("--draft eagle, eagle_version 3"));
  EAGLE_CHECK(target.mla(), refuse("needs a target with multi-head latent attention")
                                .expected("a DeepSeek-V3-family target (kv_lora_rank > 0: DeepSeek-V3, Kimi-K2)")
                                .found(target.architecture)
                                .hint("use draft_layer llama"));
  // vLLM's DeepseekV2Eagle3Model maps q_a_proj and kv_a_proj_with_mqa onto fused_qkv_a_proj, which
  // DeepseekV2MLAAttention builds only with a q_lora_rank: a q_proj layer would not load.
  EAGLE_CHECK(target.attention.q_lora_rank > 0,
              refuse("needs a q_lora_rank (vLLM's deepseek_eagle3 loader fuses q_a_proj "
                     "with kv_a_proj_with_mqa)")
                  .expected("a target with q_lora_rank > 0")
                  .found("q_lora_rank null (q_proj straight from the hidden state)"));
  // vLLM serves every scaled RoPE of this layer as deepseek_yarn.
  EAGLE_CHECK(target.rope.type == "default" || target.rope.type == "yarn",
              refuse("rotates default RoPE or YaRN (vLLM serves every scaled type as deepseek_yarn)")
                  .expected("rope_type default or yarn")
                  .found(target.rope.type));
  set_mla_shape(target);
  // Unscaled, vLLM's layer builds get_rope from {"rope_type": "default"} alone: base 10000 whatever
  // rope_theta says (deepseek_eagle3.py), so the head rotates at 10000 and its export says so.
  if (rope.type == "default") rope.theta = 10000.0;
}

void HeadConfig::set_mla_shape(const target::TargetConfig& target) {
  num_attention_heads = num_key_value_heads = target.num_attention_heads;
  q_lora_rank = target.attention.q_lora_rank;
  kv_lora_rank = target.attention.kv_lora_rank;
  qk_nope_head_dim = target.attention.qk_nope_head_dim;
  qk_rope_head_dim = target.attention.qk_rope_head_dim;
  v_head_dim = target.attention.v_head_dim;
  head_dim = qk_nope_head_dim + qk_rope_head_dim;
  attention_bias = false;  // vLLM's layer has no biases
  rope = target.rope;
  rope.head_dim = qk_rope_head_dim;
  rope.truncate = true;         // deepseek_yarn floors and ceils the correction range always
  rope.attention_factor = 0.0;  // vLLM reads attn_factor, not attention_factor: the factor from the mscales
}

std::vector<std::pair<std::string, torch::Tensor>> named_parameters(DraftHead& head) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : head.module().named_parameters(/*recurse=*/true))
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  return out;
}

// The defaults of the drafting steps a head kind may lack (head.h): each refuses by name.
namespace {

Error no_steps() {
  return Error(ErrorKind::usage, "tree and sampled evaluation need an EAGLE-3 head")
      .place("eval_tree_topk / eval_temperature")
      .hint("evaluate an EAGLE-1 head with the greedy chain (eval_tree_topk 0, eval_temperature 0)");
}

}  // namespace

DraftHead::Step DraftHead::draft_extend(DraftCache&, const torch::Tensor&, const torch::Tensor&) { throw no_steps(); }
DraftHead::Step DraftHead::draft_nodes(DraftCache&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                       std::int64_t, const torch::Tensor&) {
  throw no_steps();
}
torch::Tensor DraftHead::draft_vocab_ids() const { throw no_steps(); }
std::vector<torch::Tensor> DraftHead::ttt_logits(const HeadInputs&) { throw no_steps(); }
torch::Tensor DraftHead::parallel_logits(DraftCache&, const torch::Tensor&, const torch::Tensor&, std::int64_t) {
  throw Error(ErrorKind::internal, "parallel_logits needs a P-EAGLE head (parallel_drafting)");
}
void DraftHead::parallel_chain(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                               std::int64_t draft_len, const PickToken& pick) {
  const auto logits = parallel_logits(cache, features, next_ids, draft_len);  // [B, K, V_d]
  for (std::int64_t j = 0; j < draft_len; ++j) pick(j, logits.select(1, j));
}
torch::Tensor DraftHead::draft_ragged(DraftCache&, const RaggedDraft&, std::int64_t) {
  throw Error(ErrorKind::internal, "this head does not draft many sequences at once (drafts_ragged)");
}

void check_head_input(const torch::Tensor& t, const char* name, c10::IntArrayRef expected) {
  model::check_shape(
      t, expected,
      Error(ErrorKind::internal, "head input has the wrong shape").place(fmt::format("HeadInputs.{}", name)));
}

void check_row_inputs(const HeadInputs& in) {
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1);
  for (auto [t, name] : {std::pair{&in.loss_mask, "loss_mask"},
                         {&in.position_ids, "position_ids"},
                         {&in.document_ids, "document_ids"},
                         {&in.target_argmax, "target_argmax"}})
    check_head_input(*t, name, {b, len});
}

std::int64_t count_parameters(DraftHead& head) {
  std::int64_t n = 0;
  for (const auto& [name, p] : named_parameters(head)) n += p.numel();
  return n;
}

void check_finite_parameters(DraftHead& head, const std::string& head_dir, const std::string& hint) {
  std::vector<std::string> bad;
  for (const auto& [name, p] : named_parameters(head))
    if (!torch::isfinite(p).all().item<bool>()) bad.push_back(name);
  // The frozen buffers too (an MTP layer's correction bias; the vocabulary maps are integers).
  for (const auto& b : head.module().named_buffers())
    if (b.value().is_floating_point() && !torch::isfinite(b.value()).all().item<bool>()) bad.push_back(b.key());
  EAGLE_CHECK(bad.empty(), Error(ErrorKind::input, "the head's weights hold NaN or Inf")
                               .file(head_dir)
                               .place(fmt::format("tensor {}", fmt::join(bad, ", ")))
                               .expected("finite values")
                               .hint(hint));
}

}  // namespace eagle::head
