// The DFlash2 row of the draft table (head/draft_spec.h): DFlash's target layers, anchors and 1 + N block,
// with the convolutions and the candidate selector (dflash2/head.h).
#pragma once

#include "eagle/head/draft_spec.h"

namespace eagle::head {

const DraftSpec& dflash2_spec();

}  // namespace eagle::head
