// eagle-train export: reads a head checkpoint or an exported head (any supported layout) and writes
// it in the layout a serving engine loads (docs/export.md).
#include "eagle/cli/commands.h"
#include "eagle/util/log.h"
#include "eagle/model/head_io.h"
#include "eagle/util/error.h"

namespace eagle::cli {

namespace {
model::HeadFormat head_format(config::ExportFormat f) {
  switch (f) {
    case config::ExportFormat::sglang: return model::HeadFormat::sglang;
    case config::ExportFormat::speculators: return model::HeadFormat::speculators;
    case config::ExportFormat::vllm_eagle1: return model::HeadFormat::vllm_eagle1;
  }
  return model::HeadFormat::sglang;
}
}  // namespace

void run_export(const config::Options& opts) {
  auto loaded = model::load_head(opts.checkpoint);
  log::info("export", "read EAGLE-{} head ({} layout) from {}", loaded.config.eagle_version,
            model::format_name(loaded.format), opts.checkpoint);
  model::export_head(*loaded.head, head_format(opts.format), opts.output);
}

}  // namespace eagle::cli
