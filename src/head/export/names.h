// The head's tensor names per export format, shared by writing (head_io.cpp) and reading
// (head_load.cpp) a head folder.
#pragma once

#include <string>

#include "eagle/head/export/io.h"

namespace eagle::head {

// The head's own parameter name under a format: EAGLE-3 modules are registered as SGLang names
// (midlayer.*), EAGLE-1 as vLLM names (layers.0.*); speculators says layers.0. for midlayer. A
// multi-layer head's layers 1..n-1 (extra_layers.{l-1}.*) are layers.{l}.* in every format. Not for
// the MTP heads, whose names are their family's (mtp_native_name).
std::string format_tensor_name(const std::string& name, HeadFormat format);

}  // namespace eagle::head
