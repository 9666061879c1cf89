// The publish gate's measurement (eagle-train follow): a head folder's AR as eval measures it.
#pragma once

#include <string>

#include "eagle/config/options.h"

namespace eagle::follow {

// The chain AR of the head in head_dir on the options' held-out prompts (eval_data_path) against their target
// (model_name_or_path), with the options' evaluation settings: what `eagle-train eval --checkpoint head_dir` reports.
double measure_ar(const config::Options& o, const std::string& head_dir);

}  // namespace eagle::follow
