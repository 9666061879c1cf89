// HeadConfig from the target's config, and the head's parameter list (see head.h).
#include "eagle/head/head.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

std::vector<std::pair<std::string, torch::Tensor>> named_parameters(DraftHead& head) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : head.module().named_parameters(/*recurse=*/true))
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  return out;
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
  EAGLE_CHECK(bad.empty(), Error(ErrorKind::input, "the head's weights hold NaN or Inf")
                               .file(head_dir)
                               .place(fmt::format("tensor {}", fmt::join(bad, ", ")))
                               .expected("finite values")
                               .hint(hint));
}

}  // namespace eagle::head
