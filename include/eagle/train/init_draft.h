// --init_draft (docs/training.md, "Fine-tune a released draft"): a run's head started from a draft folder in
// any layout eval reads. The draft's config.json decides the head's shape; the run's options decide how it is
// trained; an option given that would build another head is refused by name.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/features/inputs.h"
#include "eagle/head/draft_vocab.h"
#include "eagle/head/export/io.h"

namespace eagle::train {

// The aux layers an EAGLE-3 head that names none is read with (eval, --init_draft), as vLLM and SGLang serve
// it: --aux_hidden_state_layer_ids where given, else the target's default layers (target::default_aux_layer_ids);
// empty where no target config.json is known.
std::vector<std::int64_t> aux_layers_for_unnamed(const config::Options& opts);

// The options a run with --init_draft trains with (opts unchanged without it). What the inputs are loaded for
// comes from the draft's config.json: --draft (left at eagle: the draft's kind), draft_num_layers (left at 0),
// aux_hidden_state_layer_ids and dflash_target_layers (left empty: the draft's). Given and different:
// Error(usage) naming the option and the draft's value.
config::Options with_init_draft(const config::Options& opts);

// The draft --init_draft names, loaded on the device and checked against the run's target.
struct InitDraft {
  head::LoadedHead loaded;
  head::DraftVocab vocab;   // its draft vocabulary (d2t), kept
  head::HeadConfig config;  // its shape with the run's training fields (TTT steps, losses, anchors, target names)
};

// The head a run's options configure for its target, without --init_draft (train/setup.cpp's rule).
using ConfigureHead = std::function<head::HeadConfig(const config::Options&)>;

// Loads opts.init_draft for a run whose inputs are loaded; refuses by name every option whose value (other than
// its default) would configure a head that differs from the draft's where configure(opts) does.
InitDraft load_init_draft(const config::Options& opts, const features::RunInputs& inputs,
                          const ConfigureHead& configure, torch::Device device);
// Copies the draft's parameters into head, made by its row from init.config (every name and shape the same).
void start_from_init_draft(head::DraftHead& head, const InitDraft& init, const std::string& dir);

}  // namespace eagle::train
