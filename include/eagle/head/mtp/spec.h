// The MTP row of the draft table (draft_spec.h): the target's own shipped MTP layer, fine-tuned.
#pragma once

#include "eagle/head/draft_spec.h"

namespace eagle::head {

const DraftSpec& mtp_spec();

}  // namespace eagle::head
