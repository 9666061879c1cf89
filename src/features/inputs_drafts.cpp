// The draft families' inputs beside the EAGLE heads' (inputs.cpp): an MTP head's (the target's own last
// hidden state, before or after its final norm as the family's step 1 reads it, online, stored or from
// vLLM servers) and a DFlash draft's (the target layers it reads, online, stored or from vLLM servers, aux
// id L before the final norm).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/config/option_table.h"
#include "eagle/features/inputs.h"
#include "eagle/head/dflash_head.h"
#include "eagle/head/mtp_io.h"
#include "eagle/head/mtp_layout.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "inputs_impl.h"

namespace eagle::features {

namespace detail {
namespace {

// The stored last hidden state as an MTP head's step-1 state (features_path or target_server): a Qwen
// head takes it after the final norm (applied by the source when it was stored before it), a MiMo head
// only as stored before the norm (a dump with features_pre_norm, a speculators folder). vLLM's
// extract_hidden_states is asked for aux id L alone, which it returns as hidden + residual, before the
// final norm (EagleModelMixin._maybe_add_hidden_state after the last layer,
// vllm/model_executor/models/interfaces.py, qwen3_next.py); its MiMoModel.forward
// (vllm/model_executor/models/mimo.py) collects no aux hidden states, so no server serves MiMo.
RunInputs stored_mtp_inputs(const config::Options& o, torch::Device device, bool eval,
                            const target::TargetConfig& config, const head::MtpLayout& layout) {
  EAGLE_CHECK(o.target_server.empty() || !layout.step1_pre_norm,
              Error(ErrorKind::usage, "vLLM's extract_hidden_states returns no hidden states of a MiMo target (its "
                                      "MiMoModel collects none)")
                  .place("target_server")
                  .found(fmt::format("--draft mtp on {}", config.architecture))
                  .hint("train MiMo's MTP layer with the target in-process (MiMo-7B fits one GPU) or from "
                        "dump-features --features_pre_norm"));
  // A dump's manifest says where its last hidden state was taken (a speculators folder: before the norm).
  EAGLE_CHECK(!layout.step1_pre_norm || !is_features_folder(o.features_path) ||
                  read_manifest(o.features_path).layout.pre_norm,
              Error(ErrorKind::usage, "the stored features hold the target's last hidden state after its final "
                                      "norm, and MiMo's MTP layer reads it before")
                  .file(o.features_path + "/" + kFeaturesManifest)
                  .place("layout.last_hidden")
                  .hint("dump the features again with --features_pre_norm, or train with the target in-process"));
  const HeadReads last_only{1, {}};  // the last hidden state alone: no aux layer is read or requested
  auto in = o.features_path.empty() ? open_server(o, last_only, device, eval)
                                    : load_offline_inputs(o, last_only, device, eval);
  in.last_as_aux = layout.step1_pre_norm ? LastAsAux::pre_norm : LastAsAux::post_norm;
  in.aux_layer_ids = {config.num_hidden_layers};
  // The AR decodes with the whole target (loaded when it is measured): aux id L as online.
  if (in.target) {
    in.target->set_aux_layer_ids(in.aux_layer_ids);
    in.target->set_last_aux_pre_norm(layout.step1_pre_norm);
  }
  log::info("data", "MTP head: the step-1 state is the {} last hidden state, {}",
            o.features_path.empty() ? "served" : "stored",
            layout.step1_pre_norm         ? "before the final norm"
            : in.store->layout().pre_norm ? "the target's final norm applied here"
                                          : "after the final norm, as stored");
  return in;
}

}  // namespace

// An MTP head's inputs (--draft mtp, MTP.md 2.3, 2.4): the target's last hidden state as the one aux
// feature (id L), before its final norm for MiMo and after it for the Qwen families, DeepSeek-V3 and GLM-4.5 (the family's
// step 1, MtpLayout::step1_pre_norm): online the target keeps aux id L so; else stored_mtp_inputs.
RunInputs load_mtp_inputs(const config::Options& o, torch::Device device, bool eval) {
  // The shipped layer is read from the target folder whatever the features come from (train/setup.cpp).
  EAGLE_CHECK(!o.model_name_or_path.empty(),
              Error(ErrorKind::usage, "an MTP head's shipped layer is read from the target's folder")
                  .place("model_name_or_path")
                  .hint("give --model_name_or_path, the target the features were computed by (its MTP tensors are "
                        "read; its other weights only when the AR is measured)"));
  const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
  // Refuses a target without a trainable MTP layer before anything loads.
  const auto layout = head::mtp_layout(head::mtp_config_from_target(config));
  if (!o.features_path.empty() || !o.target_server.empty()) return stored_mtp_inputs(o, device, eval, config, layout);
  RunInputs in;
  if (eval) {
    in.heldout = load_eval_data(o, config);
  } else {
    auto data = load_train_data(o, config);
    in.train = std::move(data.train);
    in.heldout = std::move(data.heldout);
  }
  auto target = target::load_target(o, device, {config.num_hidden_layers});
  target.set_last_aux_pre_norm(layout.step1_pre_norm);
  auto online = online_inputs(std::move(target), o.model_name_or_path);
  online.train = std::move(in.train);
  online.heldout = std::move(in.heldout);
  return online;
}

}  // namespace detail

using namespace detail;

head::DFlashSettings dflash_settings(const config::Options& o, const target::TargetConfig& target) {
  head::DFlashSettings s;
  s.block_size = o.dflash_block_size;
  s.num_layers = config::resolved_draft_num_layers(o.draft, o.draft_num_layers);
  s.target_layer_ids = o.dflash_target_layers;
  EAGLE_CHECK(o.mask_token_id >= 0 || !target.eos_token_ids.empty(),
              Error(ErrorKind::usage, "DFlash needs a mask token and the target names no end-of-sequence id")
                  .place("mask_token_id")
                  .hint("give --mask_token_id (a token of the target's vocabulary; its embedding row is the mask "
                        "slots' input)"));
  s.mask_token_id = o.mask_token_id >= 0 ? o.mask_token_id : target.eos_token_ids.front();
  s.num_anchors = o.dflash_num_anchors;
  s.decay_gamma = o.dflash_decay_gamma;
  s.hard_labels = o.dflash_hard_labels;
  return s;
}

RunInputs load_dflash_inputs(const config::Options& o, torch::Device device,
                             const std::vector<std::int64_t>& aux_layer_ids, bool eval) {
  const HeadReads head{3, aux_layer_ids};
  const auto dir = target_config_dir(o);  // empty only for a speculators folder without its target (refused there)
  const auto last = dir.empty() ? std::int64_t{-1} : target::TargetConfig::from_model_dir(dir).num_hidden_layers;
  const bool reads_last = std::find(aux_layer_ids.begin(), aux_layer_ids.end(), last) != aux_layer_ids.end();
  RunInputs in;
  if (!o.features_path.empty()) {
    // A dump's aux id L is the HF convention (after the final norm); vLLM feeds DFlash the state before it.
    EAGLE_CHECK(!reads_last,
                Error(ErrorKind::usage, "stored features hold the target's last layer after its final norm; vLLM "
                                        "feeds a DFlash draft the state before it")
                    .place("dflash_target_layers")
                    .found(fmt::format("{} (the last layer)", last - 1))
                    .hint("train with the target in-process or from --target_server, or choose earlier layers"));
    in = load_offline_inputs(o, head, device, eval);
    EAGLE_CHECK(in.aux_layer_ids == aux_layer_ids,
                Error(ErrorKind::usage, "the stored features hold other target layers than the DFlash draft reads")
                    .file(o.features_path)
                    .place("dflash_target_layers")
                    .expected(fmt::format("aux ids [{}] (DFlash layers + 1)", fmt::join(aux_layer_ids, ", ")))
                    .found(fmt::format("[{}]", fmt::join(in.aux_layer_ids, ", ")))
                    .hint("dump-features --aux_hidden_state_layer_ids with the DFlash layers + 1"));
  } else if (!o.target_server.empty()) {
    in = open_server(o, head, device, eval);  // vLLM's aux states are un-normed, aux id L included
  } else {
    const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
    RunInputs data;
    if (eval) {
      data.heldout = load_eval_data(o, config);
    } else {
      auto d = load_train_data(o, config);
      data.train = std::move(d.train);
      data.heldout = std::move(d.heldout);
    }
    in = online_inputs(target::load_target(o, device, aux_layer_ids), o.model_name_or_path);
    in.train = std::move(data.train);
    in.heldout = std::move(data.heldout);
  }
  // The AR's target (and the online step's): aux id L before the final norm, as vLLM's aux states.
  if (in.target) in.target->set_last_aux_pre_norm(true);
  return in;
}


RunInputs load_dflash_train_inputs(const config::Options& o, torch::Device device) {
  const auto dir = target_config_dir(o);
  EAGLE_CHECK(!dir.empty(), Error(ErrorKind::usage, "--draft dflash is shaped after its target")
                                .place("model_name_or_path")
                                .hint("give --model_name_or_path (a folder with config.json)"));
  const auto config = target::TargetConfig::from_model_dir(dir);
  const auto cfg = head::dflash_config_from_target(config, dflash_settings(o, config));  // every check, by name
  // The DFlash config (checkpoints and exports alike) is written with rope_theta alone: refused now,
  // not at the first checkpoint.
  EAGLE_CHECK(cfg.rope.type == "default",
              Error(ErrorKind::usage, "DFlash drafts are written with default RoPE only, and the target scales its RoPE")
                  .place("draft")
                  .found(fmt::format("--draft dflash on a target with rope_type {}", cfg.rope.type))
                  .hint("train an EAGLE head for this target (scaled RoPE in the DFlash config is not written yet)"));
  log::info("model", "DFlash draft: target layers [{}] (aux ids [{}]), block {}, mask token {}",
            fmt::join(head::dflash_target_layer_ids(cfg), ", "), fmt::join(cfg.aux_layer_ids, ", "),
            cfg.dflash_block_size, cfg.mask_token_id);
  return load_dflash_inputs(o, device, cfg.aux_layer_ids, /*eval=*/false);
}

}  // namespace eagle::features
