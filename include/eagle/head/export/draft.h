// A draft of any kind exported in a layout a serving engine loads (eagle-train export; docs/export.md):
// the head's kind decides what is written (an EAGLE head's folder, the target folder with its MTP
// tensors replaced, vLLM's DFlashDraftModel folder) and which formats and settings it refuses.
#pragma once

#include <string>

#include "eagle/head/draft_spec.h"
#include "eagle/head/export/io.h"
#include "eagle/head/export/quant.h"

namespace eagle::head {

struct ExportRequest {
  std::string output;              // the new folder (refused when it exists)
  std::string target_dir;          // the target named for the export; empty: the one the head records
  const Fp8Settings* fp8 = nullptr;  // --quantize fp8's settings; null: the head's own dtype
};

// Logs what was read (the head's kind and layout), then writes `head` (loaded from `source`, as
// LoadedHead::format) in `format`, logging how to serve what needs it.
void export_draft(const LoadedHead& loaded, HeadFormat format, const ExportRequest& request, const std::string& source);

}  // namespace eagle::head
