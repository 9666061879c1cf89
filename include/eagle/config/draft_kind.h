// The options that choose a draft kind, from the kind (the inverse of draft_kind() in option_table.h): what
// train --init_draft sets from a draft's config.json, and how an error names a kind's flags.
#pragma once

#include <string>

#include "eagle/config/options.h"

namespace eagle::config {

// Sets --draft and eagle_version to the kind's.
void set_draft_kind(Options& o, DraftKind kind);
// The flags a user writes for the kind: "--draft eagle --eagle_version 3", "--draft dflash".
std::string draft_kind_flags(DraftKind kind);

}  // namespace eagle::config
