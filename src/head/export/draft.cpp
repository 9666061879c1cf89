// Exporting a draft of any kind (see export/draft.h): what was in cli/cmd_export.cpp, by kind.
#include "eagle/head/export/draft.h"

#include "eagle/head/dflash/io.h"
#include "eagle/head/mtp/io.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"

namespace eagle::head {
namespace {

// The target folder with its MTP tensors replaced (docs/export.md): the target named here, else the
// one the head records.
void export_mtp(const LoadedHead& loaded, HeadFormat format, const ExportRequest& r) {
  head_config_json(loaded.config, format);  // refuses an EAGLE head, or an MTP head in another format
  const std::string target = !r.target_dir.empty() ? r.target_dir : loaded.config.target_name_or_path;
  EAGLE_CHECK(!target.empty(), Error(ErrorKind::usage, "an MTP export is a copy of the target folder, and the "
                                                       "head names no target")
                                   .place("--model_name_or_path")
                                   .hint("name the target model folder"));
  EAGLE_CHECK(r.fp8 == nullptr,
              Error(ErrorKind::usage, "MTP exports keep the target's dtypes").place("--quantize").found("fp8"));
  export_mtp_target(*loaded.head, target, r.output);
}

// vLLM's DFlashDraftModel folder, which SGLang's reads too (docs/export.md): no embedding or LM head
// (the engines share the target's).
void export_dflash_draft(const LoadedHead& loaded, HeadFormat format, const ExportRequest& r) {
  head_config_json(loaded.config, format);  // refuses an EAGLE head, or a DFlash head in another format
  EAGLE_CHECK(r.fp8 == nullptr,
              Error(ErrorKind::usage, "DFlash exports are written in fp32 (the engines cast them to the serving dtype)")
                  .place("--quantize")
                  .found("fp8"));
  const auto block = loaded.config.dflash_block_size;
  if (format == HeadFormat::speculators) {  // speculators' layout: no embedding (the target's, shared)
    export_head(*loaded.head, format, r.output, {}, nullptr);
    log::info("export",
              "wrote the DFlash draft in speculators' layout to {}: vLLM serves it with speculative_config "
              "{{\"model\": \"{}\"}} (speculators_model_type dflash, {} tokens a round)",
              r.output, r.output, block - 1);
    return;
  }
  const bool sglang = format == HeadFormat::sglang;
  export_dflash(*loaded.head, r.output, sglang ? DFlashEngine::sglang : DFlashEngine::vllm);
  if (sglang)
    log::info("export",
              "wrote the DFlash draft to {}: serve it with SGLang's --speculative-algorithm DFLASH "
              "--speculative-draft-model-path {} --speculative-num-draft-tokens {}",
              r.output, r.output, block);
  else
    log::info("export",
              "wrote the DFlash draft to {}: serve it with speculative_config {{\"method\": \"dflash\", "
              "\"model\": \"{}\", \"num_speculative_tokens\": {}}}",
              r.output, r.output, block - 1);
}

void export_eagle(const LoadedHead& loaded, HeadFormat format, const ExportRequest& r) {
  torch::Tensor embedding;
  if (format == HeadFormat::speculators) {
    // The target's embedding goes into the export: the target named here, else the one the head
    // records. Loading maps the weights (CPU, stored dtype): nothing is copied but the embedding.
    const std::string target = !r.target_dir.empty() ? r.target_dir : loaded.config.target_name_or_path;
    EAGLE_CHECK(!target.empty(), Error(ErrorKind::usage, "a speculators export carries the target's embedding, and "
                                                         "the head names no target")
                                     .place("--model_name_or_path")
                                     .hint("name the target model folder"));
    embedding = target::TargetModel::load(target, torch::ScalarType::Undefined, torch::kCPU).embedding_weight();
  }
  export_head(*loaded.head, format, r.output, embedding, r.fp8);
}

}  // namespace

void export_draft(const LoadedHead& loaded, HeadFormat format, const ExportRequest& request, const std::string& source) {
  const auto& c = loaded.config;
  // What a killed export of this output left beside it (util::temporary_name) is cleaned first.
  for (const auto& left : util::remove_dead_temporaries(request.output))
    log::info("export", "removed {}, left by a killed export (its process is gone)", left.string());
  switch (kind_of(c)) {
    case DraftKind::mtp:
      log::info("export", "read the MTP head ({} layout) from {}", format_name(loaded.format), source);
      break;
    case DraftKind::dspark:
      log::info("export", "read the DSpark draft (block {}, {} layers, Markov rank {}) from {}", c.dflash_block_size,
                c.num_layers, c.dspark_markov_rank, source);
      break;
    case DraftKind::dflash2:
      log::info("export", "read the DFlash2 draft (block {}, {} layers, selector rank {} over the top {}) from {}",
                c.dflash_block_size, c.num_layers, c.dflash2_selector_rank, c.dflash2_selector_top_k, source);
      break;
    case DraftKind::dflash:
      log::info("export", "read the DFlash draft (block {}, {} layers) from {}", c.dflash_block_size, c.num_layers,
                source);
      break;
    case DraftKind::eagle3:
    case DraftKind::eagle1:
      log::info("export", "read EAGLE-{} head ({} layout) from {}", c.eagle_version, format_name(loaded.format),
                source);
      break;
  }
  // A format that names another kind is refused by that kind's config writer (head_config_json).
  if (format == HeadFormat::mtp || kind_of(c) == DraftKind::mtp) return export_mtp(loaded, format, request);
  if (format == HeadFormat::dspark || kind_of(c) == DraftKind::dspark) {
    head_config_json(c, format);  // refuses a DSpark head in another format, or another head as dspark
    EAGLE_CHECK(!request.fp8, Error(ErrorKind::usage,
                                    "DSpark exports are written in fp32 (vLLM casts them to the "
                                    "serving dtype)")
                                  .place("--quantize"));
    export_head(*loaded.head, format, request.output, {}, nullptr);  // speculators: no embedding (shared)
    if (format == HeadFormat::speculators)
      log::info("export",
                "wrote the DSpark draft in speculators' layout to {}: vLLM serves it with speculative_config "
                "{{\"model\": \"{}\"}} (speculators_model_type dspark, {} tokens a round)",
                request.output, request.output, c.steps());
    else
      log::info("export",
                "wrote the DSpark draft to {}: serve it with speculative_config {{\"method\": \"dspark\", "
                "\"model\": \"{}\", \"num_speculative_tokens\": {}}}",
                request.output, request.output, c.steps());
    return;
  }
  if (kind_of(c) == DraftKind::dflash2) {
    head_config_json(c, format);  // refuses a format other than dflash and speculators
    EAGLE_CHECK(!request.fp8,
                Error(ErrorKind::usage, "DFlash2 exports are written in fp32 (vLLM casts them to the serving dtype)")
                    .place("--quantize"));
    export_head(*loaded.head, format, request.output, {}, nullptr);
    log::info("export",
              "wrote the DFlash2 draft to {}: serve it with speculative_config {{\"method\": \"dflash\", "
              "\"model\": \"{}\", \"num_speculative_tokens\": {}}} (vLLM's V2 model runner)",
              request.output, request.output, c.steps());
    return;
  }
  if (format == HeadFormat::dflash || kind_of(c) == DraftKind::dflash)
    return export_dflash_draft(loaded, format, request);
  export_eagle(loaded, format, request);
}

}  // namespace eagle::head
