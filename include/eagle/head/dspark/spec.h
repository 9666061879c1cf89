// The DSpark row of the draft table (draft_spec.h): DFlash's backbone with vLLM's Markov and confidence heads.
#pragma once

#include "eagle/head/draft_spec.h"
#include "eagle/head/dspark/head.h"

namespace eagle::head {

const DraftSpec& dspark_spec();

}  // namespace eagle::head
