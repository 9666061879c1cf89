// The options that build a given draft's head (train --init_draft, train/init_draft.h): what a draft folder's
// config.json says of the kind, the layer count and the target layers its inputs are read at, as options.
#pragma once

#include <optional>
#include <string>

#include "eagle/config/options.h"
#include "eagle/head/head.h"

namespace eagle::head {

// An option given with another value than the draft's.
struct OptionConflict {
  std::string option;       // e.g. "draft_num_layers"
  std::string draft_value;  // the draft's, as the option writes it
  std::string given;        // the option's
};

// Sets, where o leaves them at their defaults, --draft and eagle_version (the draft's kind), draft_num_layers, and
// the layers the inputs are read at (EAGLE-3: aux_hidden_state_layer_ids, the draft's; a block draft:
// dflash_target_layers). The first option given with another value is returned, o then unchanged from there on.
std::optional<OptionConflict> options_for_draft(const HeadConfig& draft, config::Options& o);

// The draft's shape with the run's training fields: TTT steps (not a block draft's: its block decides), the loss
// and its weights, chunking, recompute, DFlash's anchors, gamma and labels, and the target the exports name.
HeadConfig with_run_training(HeadConfig draft, const HeadConfig& run);

}  // namespace eagle::head
