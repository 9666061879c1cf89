// The predicted peak memory of a training step (see memory_estimate.h). Per token, per TTT step and
// per draft layer, what autograd keeps for backward with each recomputation mode; the backward's
// working memory of one step; the chunked loss's working tensors; the micro-batch's inputs; the
// head's parameters, gradients and AdamW moments; online, the target's weights and forward.
#include "eagle/train/memory_estimate.h"

#include <algorithm>

#include <fmt/format.h>

#include "eagle/config/option_table.h"
#include "eagle/device/memory.h"
#include "eagle/features/inputs.h"
#include "eagle/head/draft_spec.h"
#include "eagle/model/dtype.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::train {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kF32 = 4.0;

double head_parameters(const head::HeadConfig& c) {
  const double h = static_cast<double>(c.hidden_size), i = static_cast<double>(c.intermediate_size);
  const double qkv = static_cast<double>((c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim);
  const double att = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double aux = static_cast<double>(c.aux_layer_ids.size() * static_cast<std::size_t>(c.target_hidden_size));
  double p = aux * h + h * static_cast<double>(c.draft_vocab_size) + h;  // fc, lm_head, final norm
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const double in = l == 0 ? 2 * h : h;
    p += in * qkv + att * h + 3 * h * i + (l == 0 ? 3 : 2) * h;
  }
  return p;
}

// Dense layers, the experts of sparse ones, embedding and LM head (the checkpoint's floats).
double target_parameters(const target::TargetConfig& t) {
  const double h = static_cast<double>(t.hidden_size);
  const auto kv = t.num_key_value_heads > 0 ? t.num_key_value_heads : t.num_attention_heads;
  const auto d = t.head_dim > 0 ? t.head_dim : t.hidden_size / t.num_attention_heads;
  const double attn = h * static_cast<double>((2 * t.num_attention_heads + 2 * kv) * d);
  double p = h * static_cast<double>(t.vocab_size) * (t.tie_word_embeddings ? 1 : 2);
  for (std::int64_t l = 0; l < t.num_hidden_layers; ++l) {
    const double mlp = t.sparse(l) ? static_cast<double>(t.moe.num_experts) * 3 * h *
                                         static_cast<double>(t.moe.intermediate_size > 0 ? t.moe.intermediate_size
                                                                                         : t.intermediate_size)
                                   : 3 * h * static_cast<double>(t.intermediate_size);
    // Gemma 4's MoE layers keep their dense MLP beside the experts.
    const double beside = t.gemma4.enabled && t.sparse(l) ? 3 * h * static_cast<double>(t.intermediate_size) : 0.0;
    p += attn + mlp + beside + 2 * h;
  }
  return p;
}

}  // namespace

const MemoryPart& MemoryEstimate::part(const std::string& name) const {
  for (const auto& p : parts)
    if (p.name == name) return p;
  throw Error(ErrorKind::internal, "no such part of the memory estimate").found(name);
}

MemoryEstimate estimate_step_memory(const StepShape& s) {
  const auto& c = s.head;
  const double n = static_cast<double>(s.tokens), k = static_cast<double>(c.steps());
  const double a = s.bf16 ? 2.0 : kF32;  // matmul outputs under autocast; norms compute in fp32
  const double h = static_cast<double>(c.hidden_size), i = static_cast<double>(c.intermediate_size);
  const double nh = static_cast<double>(c.num_attention_heads), d = static_cast<double>(c.head_dim);
  const double qkv = (nh + 2.0 * static_cast<double>(c.num_key_value_heads)) * d, att = nh * d;
  const double vd = static_cast<double>(c.draft_vocab_size), tb = static_cast<double>(s.target_element_bytes);
  const double aux = static_cast<double>(c.aux_layer_ids.size() * static_cast<std::size_t>(c.target_hidden_size));
  const bool chunked = c.loss_chunk_size > 0;
  const double chunk = std::min(n, static_cast<double>(c.loss_chunk_size));
  const auto mode = c.recompute;
  // Kept for backward, per token of one TTT step: each layer's q, k, v, the attention's output and
  // log-sum-exp, the merged TTT output and the layer's output; without recomputation also the
  // norms and the concatenated input (pre-attention), o_proj's input, the norm and the MLP's four
  // [I] activations (post-attention); the final-normed output (the loss's input), and the unchunked
  // loss's log-softmax and teacher softmax. Coefficients checked against the counted allocations
  // of scripts/bench/bench_head_step.cpp (docs/benchmarks.md).
  double per_step = h * a;
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    per_step += (qkv + 2 * att + h) * a + nh * kF32;
    if (mode != head::RecomputeMode::layer) per_step += (l == 0 ? 2 : 1) * h * (kF32 + a);
    if (mode == head::RecomputeMode::off) per_step += (att + 4 * i) * a + 3 * h * kF32;
  }
  if (!chunked) per_step += 2 * vd * kF32;
  // The chunked loss makes its gradients in the forward: the unroll's one fp32 sum of the LM head's.
  const double head_grad_sum = chunked ? vd * h * kF32 : 0.0;
  // Working memory at the step's peak: backward's (the last step, whose kept tensors are freed as it
  // goes), plus the loss's working tensors (about six [chunk, V_d] fp32 copies, in the forward when
  // chunked; unchunked one [tokens, V_d] in backward).
  // With recomputation, backward's: the step's MLP half made again (4 x I + 3 x H) and the gradients
  // in flight through its attention and pre-attention half (q/k/v's with the key heads expanded, the
  // recomputed input and its gradient, the states'); the forward's last step holds one loss chunk and
  // the gradients it makes beside it. The peak is the larger of the two; 12 x H per token is fitted
  // to the counted peaks at T 2048 to 32768 (docs/benchmarks.md).
  const bool recomputed = mode != head::RecomputeMode::off;
  const double step_work = (recomputed ? 4 * i + 12 * h : qkv + 4 * h) * a * n;
  const double loss_work = chunked ? 6 * chunk * vd * kF32 : n * vd * kF32;
  const double work = recomputed && chunked ? std::max(step_work, loss_work + 12 * h * a * n) : step_work + loss_work;
  const double p_head = head_parameters(c);
  MemoryEstimate e;
  auto add = [&](std::string name, double bytes, bool transient = false) {
    e.parts.push_back({std::move(name), bytes, transient});
  };
  if (s.target) add("target weights", target_parameters(*s.target) * tb);
  add("head parameters", p_head * kF32);
  add("head gradients and AdamW moments", 3 * p_head * kF32);
  add("micro-batch inputs (aux features, teacher logits, ids)",
      n * (aux * tb + vd * kF32 + (s.target ? h * tb : 0.0) + 6 * 8));
  double target_work = 0;
  if (s.target) {
    const auto& t = *s.target;
    const double ht = static_cast<double>(t.hidden_size);
    const auto kv = t.num_key_value_heads > 0 ? t.num_key_value_heads : t.num_attention_heads;
    const auto td = t.head_dim > 0 ? t.head_dim : t.hidden_size / t.num_attention_heads;
    const double rows = s.target_chunk_tokens > 0 ? std::min(n, static_cast<double>(s.target_chunk_tokens)) : n;
    const double inter = static_cast<double>(t.moe.enabled() && t.moe.intermediate_size > 0 ? t.moe.intermediate_size
                                                                                            : t.intermediate_size);
    // The residual stream and its norm, q/k/v and the attention's output over the row; one chunk of
    // the MLP half; the teacher's LM-head chunk of 1024 rows over the full vocabulary.
    target_work = n * (3 * ht + static_cast<double>((2 * t.num_attention_heads + 2 * kv) * td)) * tb +
                  rows * (3 * inter + ht) * tb + 2 * 1024 * static_cast<double>(t.vocab_size) * kF32;
    add("target forward (working)", target_work, true);
  }
  // + the FC's fp32 copy of stored (non-fp32) features, autocast's bf16 copy of it, the FC's output.
  const double kept =
      k * per_step * n + head_grad_sum + n * ((tb != kF32 ? aux * kF32 : 0.0) + (s.bf16 ? aux * 2 : 0.0) + 2 * h * a);
  add("head activations kept for backward", kept, true);
  add("head backward (working)", work, true);
  double resident = 0;
  for (const auto& p : e.parts)
    if (!p.transient) resident += p.bytes;
  e.peak = resident + std::max(target_work, kept + work);
  e.head_step = kept + work;
  return e;
}

StepShape step_shape(const config::Options& o, const target::TargetConfig& target, const head::HeadConfig& head,
                     std::int64_t tokens) {
  StepShape s;
  s.head = head;
  s.tokens = tokens > 0                   ? tokens
             : o.max_tokens_per_batch > 0 ? std::max(o.max_tokens_per_batch, o.training_seq_len)
                                          : o.per_device_train_batch_size * o.training_seq_len;
  s.bf16 = o.bf16;
  if (o.features_path.empty()) s.target = target;
  const auto dtype = model::target_dtype(o.target_dtype);
  s.target_element_bytes = dtype != torch::ScalarType::Undefined ? static_cast<std::int64_t>(c10::elementSize(dtype))
                                                                 : (target.dtype == "float32" ? 4 : 2);
  s.target_chunk_tokens = o.target_chunk_tokens;
  return s;
}

std::string format_estimate(const MemoryEstimate& e, const StepShape& s) {
  const auto& c = s.head;
  std::string out = fmt::format(
      "predicted peak memory of one step: {} tokens per micro-batch, K {}, {} draft layer(s), H {}, I {}, V_d {}, "
      "{}, loss_chunk_size {}, recompute_activations {}, target {}\n",
      s.tokens, c.steps(), c.num_layers, c.hidden_size, c.intermediate_size, c.draft_vocab_size,
      s.bf16 ? "bf16 autocast" : "fp32", c.loss_chunk_size, head::recompute_mode_name(c.recompute),
      s.target ? "online (weights and forward counted)" : "offline (stored features)");
  for (const auto& p : e.parts)
    out += fmt::format("  {:<58} {:>9.2f} GiB{}\n", p.name, p.bytes / kGiB, p.transient ? "  (phase)" : "");
  out += fmt::format("  {:<58} {:>9.2f} GiB\n", "peak (resident + the larger phase)", e.peak / kGiB);
  return out;
}

void check_step_fits(const MemoryEstimate& e, double available, const std::string& source) {
  EAGLE_CHECK(e.peak <= available,
              Error(ErrorKind::usage, "the predicted peak memory of a training step exceeds the memory available")
                  .place("max_tokens_per_batch, training_seq_len, per_device_train_batch_size")
                  .expected(fmt::format("at most {:.2f} GiB ({})", available / kGiB, source))
                  .found(fmt::format("{:.2f} GiB predicted (train --dry_run shows the parts)", e.peak / kGiB))
                  .hint("fewer tokens per micro-batch (max_tokens_per_batch, per_device_train_batch_size), "
                        "--recompute_activations layer, a smaller --loss_chunk_size, --bf16, stored features "
                        "(dump-features); --check_memory=false skips this check"));
}

void check_step_memory(const config::Options& o, const target::TargetConfig& target, const head::HeadConfig& head,
                       torch::Device device, const std::map<data::Shape, std::int64_t>& shapes) {
  std::int64_t tokens = 1;
  for (const auto& [shape, count] : shapes) tokens = std::max(tokens, shape.rows * shape.length);
  const auto shape = step_shape(o, target, head, tokens);
  const auto e = estimate_step_memory(shape);
  const auto available = device::available_memory(device);
  // Once the target is loaded its weights are no longer free memory: the rest of the step must fit.
  const double needed = e.peak - (shape.target ? e.part("target weights").bytes : 0.0);
  log::info("train", "predicted peak memory of a step: {:.2f} GiB ({} tokens per micro-batch){}", e.peak / kGiB,
            shape.tokens,
            available ? fmt::format(", {:.2f} GiB more needed, {:.2f} GiB available", needed / kGiB,
                                    static_cast<double>(available->bytes) / kGiB)
                      : std::string());
  if (!o.check_memory || !available) return;
  auto rest = e;
  rest.peak = needed;
  check_step_fits(rest, static_cast<double>(available->bytes), available->source);
}

head::RecomputeMode resolve_recompute(const config::Options& o, const target::TargetConfig& target,
                                      const head::HeadConfig& head, torch::Device device, bool target_loaded) {
  if (o.recompute_activations != "auto") return head::parse_recompute_mode(o.recompute_activations);
  const auto available = device::available_memory(device);
  if (!available) {
    log::info("train", "recompute_activations auto: layer (the memory available on {} is unknown)", device.str());
    return head::RecomputeMode::layer;
  }
  const double budget = kAutoShare * static_cast<double>(available->bytes);
  double needed = 0;
  for (const auto mode : {head::RecomputeMode::off, head::RecomputeMode::mlp, head::RecomputeMode::layer}) {
    auto h = head;
    h.recompute = mode;
    const auto shape = step_shape(o, target, h);
    const auto e = estimate_step_memory(shape);
    needed = e.peak - (shape.target && target_loaded ? e.part("target weights").bytes : 0.0);
    if (needed <= budget || mode == head::RecomputeMode::layer) {
      log::info("train",
                "recompute_activations auto: {} (a step of {} tokens predicted at {:.2f} GiB, {:.0f}% of the {:.2f} "
                "GiB available)",
                head::recompute_mode_name(mode), shape.tokens, needed / kGiB,
                100.0 * needed / static_cast<double>(available->bytes), static_cast<double>(available->bytes) / kGiB);
      return mode;
    }
  }
  return head::RecomputeMode::layer;
}

void dry_run(const config::Options& o) {
  const auto dir = features::target_config_dir(o);
  EAGLE_CHECK(!dir.empty(), Error(ErrorKind::usage, "train --dry_run needs the target's config.json")
                                .place("model_name_or_path")
                                .hint("give --model_name_or_path (a folder with config.json)"));
  // The estimate models the TTT unroll (EAGLE, MTP), not DFlash's anchored blocks (not measured yet).
  const auto& spec = head::draft_spec(config::draft_kind(o));
  EAGLE_CHECK(spec.memory_model,
              Error(ErrorKind::usage, fmt::format("train --dry_run does not model {} step yet", spec.noun))
                  .place("dry_run")
                  .found(fmt::format("--draft {}", config::name_of(o.draft)))
                  .hint("train a few steps and read peak_memory_mib in metrics.jsonl"));
  const auto target = target::TargetConfig::from_model_dir(dir);
  // The head as its row configures it for this target (an MTP head: the target's layer over the full
  // vocabulary, an EAGLE-3-shaped step of one layer).
  const auto settings = head::HeadSettings::from(o, dir);
  auto head = spec.configure(settings, target, spec.reduced_vocab ? std::min(o.draft_vocab_size, target.vocab_size)
                                                                  : target.vocab_size);
  // The device the run would take; a CUDA one named where none is (a prediction for another machine)
  // is reported as unknown, not refused.
  const bool cuda = o.device.rfind("cuda", 0) == 0 || (o.device == "auto" && torch::cuda::is_available());
  const auto device = cuda ? torch::Device(o.device == "auto" ? std::string("cuda") : o.device) : torch::Device("cpu");
  const bool known = !cuda || torch::cuda::is_available();
  // auto without a device to measure: layer, as resolve_recompute takes when the memory is unknown.
  head.recompute = known || o.recompute_activations != "auto" ? resolve_recompute(o, target, head, device, false)
                                                              : head::RecomputeMode::layer;
  const auto shape = step_shape(o, target, head);
  const auto e = estimate_step_memory(shape);
  std::fputs(format_estimate(e, shape).c_str(), stdout);
  const auto available = known ? device::available_memory(device) : std::nullopt;
  if (!available) {
    std::printf("  available: unknown here (no %s device)\n", device.str().c_str());
    return;
  }
  std::printf("  available: %.2f GiB (%s): %s\n", static_cast<double>(available->bytes) / kGiB,
              available->source.c_str(), e.peak <= static_cast<double>(available->bytes) ? "fits" : "does not fit");
  std::fflush(stdout);
  if (o.check_memory) check_step_fits(e, static_cast<double>(available->bytes), available->source);
}

}  // namespace eagle::train
