// The inputs of a DFlash draft (--draft dflash, docs/heads.md): its settings from the options and
// the target, and the target layers it reads, online, from stored features or from vLLM servers.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/features/inputs.h"
#include "eagle/head/dflash_head.h"
#include "eagle/target/target.h"

namespace eagle::features {

// The DFlash settings of these options for this target: draft_num_layers 0 is 5, mask_token_id -1
// the target's first end-of-sequence id (Error(usage) naming mask_token_id when it has none).
head::DFlashSettings dflash_settings(const config::Options& opts, const target::TargetConfig& target);

// The inputs of a DFlash head that reads aux_layer_ids (DFlash target layer t is aux id t + 1; the
// train inputs: head::dflash_config_from_target's, eval: the loaded head's). Online: the target with
// those aux layers, aux id L (t = L - 1) taken before the final norm as vLLM does. features_path:
// the dump's aux layers must be these (dump-features --aux_hidden_state_layer_ids t + 1 ...), and
// t = L - 1 is refused (a dump stores the HF convention, normed); speculators folders as for
// EAGLE-3. target_server: vLLM started with eagle_aux_hidden_state_layer_ids = these ids.
RunInputs load_dflash_inputs(const config::Options& opts, torch::Device device,
                             const std::vector<std::int64_t>& aux_layer_ids, bool eval);

// The train inputs of --draft dflash: load_dflash_inputs with the aux ids of the head the options
// build for the target (its config.json read first; every DFlash option checked there, by name).
RunInputs load_dflash_train_inputs(const config::Options& opts, torch::Device device);

}  // namespace eagle::features
