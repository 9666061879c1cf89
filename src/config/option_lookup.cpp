// The option table's lookups (option_table.h): the table built once from declare_options
// (option_table.cpp), options by name, the commands' and groups' names, the enums' spellings.
#include "eagle/config/draft_kind.h"
#include "eagle/config/option_table.h"

#include "option_builder.h"

namespace eagle::config {

using namespace detail;

std::string_view command_name(Command c) {
  switch (c) {
    case Command::train:
      return "train";
    case Command::prepare:
      return "prepare";
    case Command::data_stats:
      return "data-stats";
    case Command::inspect:
      return "inspect";
    case Command::export_:
      return "export";
    case Command::eval:
      return "eval";
    case Command::generate:
      return "generate";
    case Command::dump_features:
      return "dump-features";
    case Command::report:
      return "report";
    case Command::follow:
      return "follow";
  }
  return "?";
}

const std::vector<Command>& all_commands() {
  static const std::vector<Command> v{Command::train,   Command::prepare, Command::data_stats, Command::inspect,
                                      Command::export_, Command::eval,    Command::generate,   Command::dump_features,
                                      Command::report,  Command::follow};
  return v;
}

std::string_view group_name(Group g) {
  switch (g) {
    case Group::data:
      return "data";
    case Group::model:
      return "model";
    case Group::draft:
      return "draft";
    case Group::train:
      return "train";
    case Group::optim:
      return "optim";
    case Group::eval:
      return "eval";
    case Group::generate:
      return "generate";
    case Group::log:
      return "log";
    case Group::checkpoint:
      return "checkpoint";
    case Group::distributed:
      return "distributed";
    case Group::runtime:
      return "runtime";
  }
  return "?";
}

const std::vector<OptionEntry>& option_table() {
  static const std::vector<OptionEntry> table = declare_options();
  return table;
}

const OptionEntry* find_option(std::string_view name) {
  for (const auto& e : option_table())
    if (e.name == name) return &e;
  return nullptr;
}

std::int64_t resolved_draft_num_layers(const std::string& draft, std::int64_t draft_num_layers) {
  if (draft_num_layers > 0) return draft_num_layers;
  const auto d = enum_parse<Draft>(draft);
  // The published z-lab DFlash drafts and speculators' DSpark and DFlash2 recipes have 5 layers.
  return d == Draft::dflash || d == Draft::dspark || d == Draft::dflash2 ? 5 : 1;
}

std::int64_t resolved_draft_num_layers(const Options& opts) {
  return resolved_draft_num_layers(name_of(opts.draft), opts.draft_num_layers);
}

DraftKind draft_kind(const Options& opts) {
  switch (opts.draft) {
    case Draft::mtp:
      return DraftKind::mtp;
    case Draft::dflash:
      return DraftKind::dflash;
    case Draft::dspark:
      return DraftKind::dspark;
    case Draft::dflash2:
      return DraftKind::dflash2;
    case Draft::eagle:
      break;
  }
  return opts.eagle_version == 1 ? DraftKind::eagle1 : DraftKind::eagle3;
}

void set_draft_kind(Options& o, DraftKind kind) {
  o.eagle_version = kind == DraftKind::eagle1 ? 1 : 3;
  switch (kind) {
    case DraftKind::mtp:
      o.draft = Draft::mtp;
      return;
    case DraftKind::dflash:
      o.draft = Draft::dflash;
      return;
    case DraftKind::dspark:
      o.draft = Draft::dspark;
      return;
    case DraftKind::dflash2:
      o.draft = Draft::dflash2;
      return;
    case DraftKind::eagle3:
    case DraftKind::eagle1:
      o.draft = Draft::eagle;
      return;
  }
}

std::string draft_kind_flags(DraftKind kind) {
  Options o;
  set_draft_kind(o, kind);
  return o.draft == Draft::eagle ? "--draft eagle --eagle_version " + std::to_string(o.eagle_version)
                                 : "--draft " + name_of(o.draft);
}

std::string name_of(Draft v) { return enum_name(v); }

std::string name_of(LrScheduler v) { return enum_name(v); }
std::string name_of(BadSamplePolicy v) { return enum_name(v); }
std::string name_of(OverlongPolicy v) { return enum_name(v); }
std::string name_of(NanPolicy v) { return enum_name(v); }
std::string name_of(TargetDtype v) { return enum_name(v); }
std::string name_of(ExportFormat v) { return enum_name(v); }
std::string name_of(Quantize v) { return enum_name(v); }
std::string name_of(QuantScale v) { return enum_name(v); }
std::string name_of(DdpBackend v) { return enum_name(v); }
std::string name_of(DraftSampling v) { return enum_name(v); }
std::string name_of(BestMetric v) { return enum_name(v); }

}  // namespace eagle::config
