// The identity of the target a dump-features folder was computed by: its folder, architecture and
// sizes, and a fingerprint of every tensor (target::tensor_fingerprints), so that a resumed dump or a
// run from the features refuses another target, or a fine-tune of this one, by the tensor that
// differs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "eagle/target/target.h"

namespace eagle::features {

// model_name_or_path (as recorded: the dump records the canonical folder), architecture,
// num_hidden_layers, hidden_size, vocab_size, and "tensors": name -> fingerprint of weights_dir's files.
nlohmann::json target_identity(const std::string& model_name_or_path, const std::string& weights_dir,
                               const target::TargetConfig& config);

// Throws Error(usage) naming the first field or tensor where the identity recorded in manifest_file
// differs from now's (expected: now's, the target given; found: the recorded one). with_path: the
// folder must be the same too (a resumed dump), else only its contents.
void check_same_target(const nlohmann::json& recorded, const nlohmann::json& now, const std::string& manifest_file,
                       bool with_path, const std::string& hint);

}  // namespace eagle::features
