// The inputs of a head whose one aux feature is the target's last hidden state (an MTP head, MTP.md 2.3,
// 2.4: before or after the final norm as the family's step 1 reads it, FeatureNeeds::last_pre_norm), online,
// stored or from vLLM servers (inputs.cpp: every other head's).
#include <fmt/format.h>

#include "eagle/features/inputs.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "inputs_impl.h"

namespace eagle::features {

namespace detail {
namespace {

// The stored last hidden state as the head's step-1 state (features_path or target_server): taken after
// the final norm (applied by the source when it was stored before it) unless the head reads it before
// (MiMo's MTP layer), which only a store holding it before the norm gives (a dump with
// features_pre_norm, a speculators folder). vLLM's extract_hidden_states is asked for aux id L alone,
// which it returns as hidden + residual, before the final norm (EagleModelMixin._maybe_add_hidden_state
// after the last layer, vllm/model_executor/models/interfaces.py, qwen3_next.py); its MiMoModel.forward
// (vllm/model_executor/models/mimo.py) collects no aux hidden states, so no server serves MiMo.
RunInputs stored_last_state_inputs(const config::Options& o, const head::FeatureNeeds& needs, torch::Device device,
                                   bool eval, const target::TargetConfig& config) {
  EAGLE_CHECK(o.target_server.empty() || !needs.last_pre_norm,
              Error(ErrorKind::usage, "vLLM's extract_hidden_states returns no hidden states of a MiMo target (its "
                                      "MiMoModel collects none)")
                  .place("target_server")
                  .found(fmt::format("--draft mtp on {}", config.architecture))
                  .hint("train MiMo's MTP layer with the target in-process (MiMo-7B fits one GPU) or from "
                        "dump-features --features_pre_norm"));
  // A dump's manifest says where its last hidden state was taken (a speculators folder: before the norm).
  EAGLE_CHECK(!needs.last_pre_norm || !is_features_folder(o.features_path) ||
                  read_manifest(o.features_path).layout.pre_norm,
              Error(ErrorKind::usage, "the stored features hold the target's last hidden state after its final "
                                      "norm, and MiMo's MTP layer reads it before")
                  .file(o.features_path + "/" + kFeaturesManifest)
                  .place("layout.last_hidden")
                  .hint("dump the features again with --features_pre_norm, or train with the target in-process"));
  head::FeatureNeeds last_only;  // the last hidden state alone: no aux layer is read or requested
  last_only.aux_hidden = false;
  auto in = o.features_path.empty() ? open_server(o, last_only, device, eval)
                                    : load_offline_inputs(o, last_only, device, eval);
  in.last_as_aux = needs.last_pre_norm ? LastAsAux::pre_norm : LastAsAux::post_norm;
  in.aux_layer_ids = {config.num_hidden_layers};
  // The AR decodes with the whole target (loaded when it is measured): aux id L as online.
  if (in.target) {
    in.target->set_aux_layer_ids(in.aux_layer_ids);
    in.target->set_last_aux_pre_norm(needs.last_pre_norm);
  }
  log::info("data", "MTP head: the step-1 state is the {} last hidden state, {}",
            o.features_path.empty() ? "served" : "stored",
            needs.last_pre_norm           ? "before the final norm"
            : in.store->layout().pre_norm ? "the target's final norm applied here"
                                          : "after the final norm, as stored");
  return in;
}

}  // namespace

RunInputs load_last_state_inputs(const config::Options& o, const head::FeatureNeeds& needs, torch::Device device,
                                 bool eval) {
  // The shipped layer is read from the target folder whatever the features come from (its row's plan).
  EAGLE_CHECK(!o.model_name_or_path.empty(),
              Error(ErrorKind::usage, "an MTP head's shipped layer is read from the target's folder")
                  .place("model_name_or_path")
                  .hint("give --model_name_or_path, the target the features were computed by (its MTP tensors are "
                        "read; its other weights only when the AR is measured)"));
  const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
  if (!o.features_path.empty() || !o.target_server.empty())
    return stored_last_state_inputs(o, needs, device, eval, config);
  RunInputs data;
  add_data(data, o, config, eval);
  auto target = target::load_target(o, device, {config.num_hidden_layers});
  target.set_last_aux_pre_norm(needs.last_pre_norm);
  auto online = online_inputs(std::move(target), o.model_name_or_path);
  online.train = std::move(data.train);
  online.heldout = std::move(data.heldout);
  return online;
}

}  // namespace detail

}  // namespace eagle::features
