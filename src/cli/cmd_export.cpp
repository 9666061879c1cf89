// eagle-train export: reads a head checkpoint or an exported head (any supported layout) and writes
// it in the layout a serving engine loads (docs/export.md).
#include "eagle/cli/commands.h"
#include "eagle/head/export/draft.h"
#include "eagle/train/init_draft.h"

namespace eagle::cli {

namespace {
head::HeadFormat head_format(config::ExportFormat f) {
  switch (f) {
    case config::ExportFormat::sglang:
      return head::HeadFormat::sglang;
    case config::ExportFormat::speculators:
      return head::HeadFormat::speculators;
    case config::ExportFormat::vllm_eagle1:
      return head::HeadFormat::vllm_eagle1;
    case config::ExportFormat::mtp:
      return head::HeadFormat::mtp;
    case config::ExportFormat::dflash:
      return head::HeadFormat::dflash;
    case config::ExportFormat::dspark:
      return head::HeadFormat::dspark;
  }
  return head::HeadFormat::sglang;
}
}  // namespace

void run_export(const config::Options& opts, const Invocation& argv) {
  // A head that names no aux layers is exported with the engines' default layers of --model_name_or_path.
  const auto loaded = head::load_head(opts.checkpoint, torch::kCPU, train::aux_layers_for_unnamed(opts));
  // A NaN head would be written out and served broken: refused before anything is written.
  head::check_finite_parameters(*loaded.head, opts.checkpoint,
                                "export an earlier checkpoint (training with nan_policy skip keeps going)");
  head::Fp8Settings fp8{opts.quantize_scale == config::QuantScale::mse ? head::Fp8Scale::mse : head::Fp8Scale::amax,
                        opts.quantize_fc};
  // --quantize_scale and --quantize_fc without --quantize fp8 are refused by the option table (acts_only).
  head::export_draft(loaded, head_format(opts.format),
                     {opts.output, opts.model_name_or_path, opts.quantize == config::Quantize::fp8 ? &fp8 : nullptr},
                     opts.checkpoint);
}

}  // namespace eagle::cli
