// The EAGLE rows of the draft table (draft_spec.h): EAGLE-3 with its variants as settings (3.1's norms,
// the Qwen3 and MLA layers, multi-layer, P-EAGLE) and EAGLE-1.
#pragma once

#include "eagle/head/draft_spec.h"

namespace eagle::head {

const DraftSpec& eagle3_spec();
const DraftSpec& eagle1_spec();

}  // namespace eagle::head
