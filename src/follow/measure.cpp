// The publish gate's measurement (see measure.h), eval's path.
#include "measure.h"

#include "eagle/acceptance/measure.h"
#include "eagle/device/runtime.h"
#include "eagle/features/inputs.h"
#include "eagle/head/export/io.h"
#include "eagle/train/evaluate.h"
#include "eagle/train/init_draft.h"

namespace eagle::follow {

double measure_ar(const config::Options& o, const std::string& head_dir) {
  const torch::Device device = device::resolve_device(o.device);
  auto loaded = head::load_head(head_dir, device, train::aux_layers_for_unnamed(o));
  auto& head = *loaded.head;
  head::check_head_fits_target(loaded.config, target::TargetConfig::from_model_dir(o.model_name_or_path), head_dir);
  const auto settings = train::EvalSettings::from(o, loaded.config.ttt_steps);
  acceptance::check_head_settings(loaded.config, settings.acceptance);
  const auto inputs =
      features::load_inputs(o, head::draft_spec(loaded.config).reads(loaded.config), device, features::Split::eval);
  head.set_target_weights(inputs.ends.embed, inputs.ends.lm_head);
  const auto features = inputs.sources(head.teacher_spec(), device).heldout;
  const auto stats =
      train::evaluate(*features, inputs.target ? &*inputs.target : nullptr, head, *inputs.heldout, settings, 0);
  return stats.acceptance.ar.value_or(1.0);
}

}  // namespace eagle::follow
