// eagle-train export: reads a head checkpoint or an exported head (any supported layout) and writes
// it in the layout a serving engine loads (docs/export.md).
#include "eagle/cli/commands.h"
#include "eagle/head/head.h"
#include "eagle/head/dflash_io.h"
#include "eagle/head/head_io.h"
#include "eagle/head/mtp_io.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

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
  }
  return head::HeadFormat::sglang;
}
}  // namespace

void run_export(const config::Options& opts, const Invocation& argv) {
  auto loaded = head::load_head(opts.checkpoint);
  if (loaded.config.mtp())
    log::info("export", "read the MTP head ({} layout) from {}", head::format_name(loaded.format), opts.checkpoint);
  else if (loaded.config.dflash())
    log::info("export", "read the DFlash draft (block {}, {} layers) from {}", loaded.config.dflash_block_size,
              loaded.config.num_layers, opts.checkpoint);
  else
    log::info("export", "read EAGLE-{} head ({} layout) from {}", loaded.config.eagle_version,
              head::format_name(loaded.format), opts.checkpoint);
  // A NaN head would be written out and served broken: refused before anything is written.
  head::check_finite_parameters(*loaded.head, opts.checkpoint,
                                "export an earlier checkpoint (training with nan_policy skip keeps going)");
  const auto format = head_format(opts.format);
  if (format == head::HeadFormat::mtp || loaded.config.mtp()) {
    // The target folder with its MTP tensors replaced (docs/export.md): the target named here, else
    // the one the head records.
    head::head_config_json(loaded.config, format);  // refuses an EAGLE head, or an MTP head in another format
    const std::string target =
        !opts.model_name_or_path.empty() ? opts.model_name_or_path : loaded.config.target_name_or_path;
    EAGLE_CHECK(!target.empty(), Error(ErrorKind::usage, "an MTP export is a copy of the target folder, and the "
                                                         "head names no target")
                                     .place("--model_name_or_path")
                                     .hint("name the target model folder"));
    EAGLE_CHECK(opts.quantize == config::Quantize::none,
                Error(ErrorKind::usage, "MTP exports keep the target's dtypes").place("--quantize").found("fp8"));
    head::export_mtp_target(*loaded.head, target, opts.output);
    return;
  }
  if (format == head::HeadFormat::dflash || loaded.config.dflash()) {
    // vLLM's DFlashDraftModel folder, which SGLang's reads too (docs/export.md): no embedding or LM head
    // (the engines share the target's).
    head::head_config_json(loaded.config, format);  // refuses an EAGLE head, or a DFlash head in another format
    EAGLE_CHECK(
        opts.quantize == config::Quantize::none,
        Error(ErrorKind::usage, "DFlash exports are written in fp32 (the engines cast them to the serving dtype)")
            .place("--quantize")
            .found("fp8"));
    const bool sglang = format == head::HeadFormat::sglang;
    head::export_dflash(*loaded.head, opts.output, sglang ? head::DFlashEngine::sglang : head::DFlashEngine::vllm);
    const auto block = loaded.config.dflash_block_size;
    if (sglang)
      log::info("export",
                "wrote the DFlash draft to {}: serve it with SGLang's --speculative-algorithm DFLASH "
                "--speculative-draft-model-path {} --speculative-num-draft-tokens {}",
                opts.output, opts.output, block);
    else
      log::info("export",
                "wrote the DFlash draft to {}: serve it with speculative_config {{\"method\": \"dflash\", "
                "\"model\": \"{}\", \"num_speculative_tokens\": {}}}",
                opts.output, opts.output, block - 1);
    return;
  }
  torch::Tensor embedding;
  if (format == head::HeadFormat::speculators) {
    // The target's embedding goes into the export: the target named here, else the one the head
    // records. Loading maps the weights (CPU, stored dtype): nothing is copied but the embedding.
    const std::string target =
        !opts.model_name_or_path.empty() ? opts.model_name_or_path : loaded.config.target_name_or_path;
    EAGLE_CHECK(!target.empty(), Error(ErrorKind::usage, "a speculators export carries the target's embedding, and "
                                                         "the head names no target")
                                     .place("--model_name_or_path").hint("name the target model folder"));
    embedding = target::TargetModel::load(target, torch::ScalarType::Undefined, torch::kCPU).embedding_weight();
  }
  head::Fp8Settings fp8{opts.quantize_scale == config::QuantScale::mse ? head::Fp8Scale::mse : head::Fp8Scale::amax,
                        opts.quantize_fc};
  // --quantize_scale and --quantize_fc without --quantize fp8 are refused by the option table (acts_only).
  head::export_head(*loaded.head, format, opts.output, embedding,
                    opts.quantize == config::Quantize::fp8 ? &fp8 : nullptr);
}

}  // namespace eagle::cli
