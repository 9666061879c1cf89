// --init_draft (see init_draft.h): the draft's config decides the head's shape, the run's options how it trains.
#include "eagle/train/init_draft.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/config/draft_kind.h"
#include "eagle/config/option_table.h"
#include "eagle/config/resolve.h"
#include "eagle/head/export/draft_options.h"
#include "eagle/head/draft_spec.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::train {

namespace {

Error contradiction(const config::Options& o, const std::string& option, const std::string& draft_value,
                    const std::string& given) {
  return Error(ErrorKind::usage, "an option contradicts the draft --init_draft names")
      .file(o.init_draft + "/config.json")
      .place(option)
      .expected(fmt::format("{} (the draft's)", draft_value))
      .found(given)
      .hint(fmt::format("leave --{} out: the draft's config.json decides the head's shape", option));
}

// Every option given (other than its default) that moves a field of the head where the draft differs from the
// run's: refused by name. An option's fields are those that change when it alone is reset to its default.
void refuse_contradictions(const config::Options& o, const ConfigureHead& configure, const head::HeadConfig& draft,
                           const head::HeadConfig& run) {
  std::set<std::string> differ;
  std::map<std::string, head::HeadDifference> by_field;
  for (auto& d : head::head_config_differences(draft, run)) {
    differ.insert(d.field);
    by_field.emplace(d.field, d);
  }
  if (differ.empty()) return;
  const config::Options defaults;
  for (const auto& e : config::option_table()) {
    // The head's options (the kind is checked apart: every field moves with it).
    const bool head_option = e.group == config::Group::draft || e.name == "aux_hidden_state_layer_ids";
    if (!head_option || e.name == "draft" || e.name == "eagle_version") continue;
    if (e.to_json(o) == e.to_json(defaults)) continue;
    config::Options reset = o;
    e.copy(reset, defaults);
    head::HeadConfig alternative;
    try {
      alternative = configure(reset);
    } catch (const Error&) {
      continue;  // the option cannot be left out of this run: it is not what shapes the head here
    }
    // The fields it moves where the draft differs; the one named after it first (block_size before ttt_steps).
    std::optional<std::string> field;
    for (const auto& d : head::head_config_differences(alternative, run)) {
      if (!differ.count(d.field)) continue;
      if (!field) field = d.field;
      if (d.field.find(e.name) != std::string::npos) {
        field = d.field;
        break;
      }
    }
    if (!field) continue;
    const auto& mine = by_field.at(*field);
    throw contradiction(o, e.name, fmt::format("{} {}", *field, mine.checkpoint),
                        fmt::format("{} {} from --{} {}", *field, mine.run, e.name, e.to_json(o).dump()));
  }
}

}  // namespace

std::vector<std::int64_t> aux_layers_for_unnamed(const config::Options& opts) {
  if (!opts.aux_hidden_state_layer_ids.empty()) return opts.aux_hidden_state_layer_ids;
  const auto dir = features::target_config_dir(opts);
  if (dir.empty()) return {};
  return target::default_aux_layer_ids(target::TargetConfig::from_model_dir(dir).num_hidden_layers);
}

config::Options with_init_draft(const config::Options& opts) {
  if (opts.init_draft.empty()) return opts;
  config::Options o = opts;
  auto draft = head::read_head_folder_config(o.init_draft);
  if (draft.aux_layer_ids.empty()) draft.aux_layer_ids = aux_layers_for_unnamed(o);  // SpecForge names none
  const auto asked = config::draft_kind(o);
  if (const auto conflict = head::options_for_draft(draft, o))
    throw contradiction(o, conflict->option, conflict->draft_value, conflict->given);
  if (config::draft_kind(o) != asked)
    log::info("model", "--init_draft {}: {} draft, trained as {}", o.init_draft, head::draft_spec(draft).noun,
              config::draft_kind_flags(config::draft_kind(o)));
  config::validate(o, config::Command::train);
  return o;
}

InitDraft load_init_draft(const config::Options& opts, const features::RunInputs& inputs,
                          const ConfigureHead& configure, torch::Device device) {
  const auto run = configure(opts);
  const auto& tc = inputs.ends.config;
  auto loaded = head::load_head(opts.init_draft, device, aux_layers_for_unnamed(opts));
  head::check_head_fits_target(loaded.config, tc, opts.init_draft);
  head::check_finite_parameters(*loaded.head, opts.init_draft, "the draft is corrupt; download or export it again");
  const auto kind = head::kind_of(loaded.config);
  EAGLE_CHECK(kind == config::draft_kind(opts), contradiction(opts, "draft", config::draft_kind_flags(kind),
                                                              config::draft_kind_flags(config::draft_kind(opts))));
  auto config = head::with_run_training(loaded.config, run);
  refuse_contradictions(opts, configure, config, run);
  // The draft vocabulary is the draft's: its d2t where it has one (EAGLE-3), else the target's whole.
  auto vocab = head::DraftVocab::identity(tc.vocab_size);
  for (const auto& b : loaded.head->module().named_buffers())
    if (b.key() == "d2t") vocab = head::DraftVocab::from_d2t(b.value().to(torch::kCPU), tc.vocab_size);
  const auto differences = head::head_config_differences(config, run);
  log::info(
      "model", "starting from the draft {} ({} layout): its weights and draft vocabulary, a fresh optimizer{}",
      opts.init_draft, head::format_name(loaded.format),
      differences.empty()
          ? std::string()
          : fmt::format("; its config where the options' defaults differ ({}{})", differences.front().field,
                        differences.size() > 1 ? fmt::format(" and {} more", differences.size() - 1) : std::string()));
  return InitDraft{std::move(loaded), std::move(vocab), std::move(config)};
}

void start_from_init_draft(head::DraftHead& head, const InitDraft& init, const std::string& dir) {
  torch::NoGradGuard ng;
  auto source = init.loaded.head->module().named_parameters();
  auto target = head.module().named_parameters();
  EAGLE_CHECK(source.size() == target.size(),
              Error(ErrorKind::internal, "the draft --init_draft names and the run's head differ in parameters")
                  .file(dir)
                  .expected(std::to_string(target.size()))
                  .found(std::to_string(source.size())));
  for (auto& p : target) {
    const auto* s = source.find(p.key());
    EAGLE_CHECK(s && s->sizes() == p.value().sizes(),
                Error(ErrorKind::internal, "the draft --init_draft names and the run's head differ in a parameter")
                    .file(dir)
                    .place(p.key()));
    p.value().copy_(*s);
  }
}

}  // namespace eagle::train
