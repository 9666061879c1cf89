// The MTP row (see mtp/spec.h).
#include "eagle/head/mtp/spec.h"

#include "eagle/head/flops.h"
#include "eagle/head/mtp/config.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/io.h"
#include "eagle/head/mtp/layout.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::head {
namespace {

// Aux id L, the target's last hidden state, before or after its final norm as the family's step 1
// reads it (MTP.md 2.3, 2.4).
FeatureNeeds mtp_reads(const HeadConfig& cfg) {
  FeatureNeeds n;
  n.aux_layer_ids = {cfg.target_num_hidden_layers};
  n.last_as_aux = true;
  n.last_pre_norm = mtp_layout(cfg).step1_pre_norm;
  return n;
}

FeatureNeeds mtp_plan(const HeadSettings& s) {
  // The shipped layer is read from the target folder whatever the features come from.
  EAGLE_CHECK(!s.model_dir.empty(),
              Error(ErrorKind::usage, "an MTP head's shipped layer is read from the target's folder")
                  .place("model_name_or_path")
                  .hint("give --model_name_or_path, the target the features were computed by (its MTP tensors are "
                        "read; its other weights only when the AR is measured)"));
  // Refuses a target without a trainable MTP layer before anything loads.
  return mtp_reads(mtp_config_from_target(target::TargetConfig::from_model_dir(s.model_dir)));
}

HeadConfig mtp_configure(const HeadSettings& s, const target::TargetConfig& tc, std::int64_t) {
  auto cfg = mtp_config_from_target(tc);
  cfg.ttt_steps = s.ttt_steps;
  cfg.ttt_loss_decay = s.ttt_loss_decay;
  cfg.loss = s.loss;
  cfg.loss_chunk_size = s.loss_chunk_size;
  cfg.recompute = s.recompute_activations == "off" ? RecomputeMode::off : RecomputeMode::mlp;
  cfg.target_name_or_path = s.target_name;
  cfg.target_architecture = tc.architecture;
  return cfg;
}

// Read from the target folder under its native names. Trained: every tensor of the layer (its input
// norms and projection, the decoder block, the output norm: MiMo's model.mtp_layers.0.*, Qwen3.5's
// mtp.*). Frozen: the embedding and the LM head, the target's (vLLM swaps in the target's; MTP.md 0).
std::shared_ptr<DraftHead> mtp_make(const HeadConfig& cfg, const HeadSettings& s, const target::TargetEnds& ends,
                                    const DraftVocab&, torch::Device device) {
  auto head = std::make_shared<MtpHead>(cfg);
  load_mtp_weights(*head, s.model_dir);
  head->module().to(device);
  head->set_target_weights(ends.embed, ends.lm_head);
  const auto layout = mtp_layout(cfg);
  auto prefix = layout.prefix;
  prefix.pop_back();  // model.mtp_layers.0, mtp, model.layers.{L}
  // DeepSeek-V3, GLM-4.5: the logits are the target's lm_head of shared_head.norm (vLLM swaps the target's LM
  // head in for shared_head.head); a shared_head.head the folder holds is left as it is.
  const bool shared_head = layout.output_norm.rfind("shared_head.", 0) == 0;
  log::info("model", "MTP head: {}'s {} ({} parameters trained; embedding and LM head frozen{}), {} TTT step(s)",
            s.model_dir, prefix, count_parameters(*head),
            shared_head ? ", the target's lm_head as shared_head.head" : "", cfg.ttt_steps);
  return head;
}

DraftLimits mtp_limits(const HeadConfig&) { return {}; }

// An MTP head reads hidden_states[L] (before the final norm), not the EAGLE-3 default.
void mtp_resolve_resume(const HeadConfig& head, nlohmann::json& before, nlohmann::json& now) {
  resolve_resumed_option(before, now, "aux_hidden_state_layer_ids", head.aux_layer_ids, nlohmann::json::array(),
                         head.aux_layer_ids);
}

}  // namespace

const DraftSpec& mtp_spec() {
  static const DraftSpec spec{DraftKind::mtp,
                              "mtp",
                              "the target's MTP",
                              "TTT step(s)",
                              /*reduced_vocab=*/false,
                              /*memory_model=*/true,
                              /*auto_recompute=*/false,
                              /*evaluate_at_start=*/true,
                              {HeadFormat::mtp},
                              HeadFormat::mtp,
                              mtp_plan,
                              mtp_reads,
                              mtp_configure,
                              mtp_make,
                              ttt_loss_plan,
                              mtp_limits,
                              /*untrainable=*/nullptr,
                              mtp_resolve_resume,
                              ttt_train_flops};
  return spec;
}

}  // namespace eagle::head
