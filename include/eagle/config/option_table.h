// The one option table: each option is declared once (option_table.cpp) and that declaration gives
// the command-line flag, the JSON config key, the help text, the range check and docs/options.md.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "eagle/config/options.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace eagle::config {

enum class Command : unsigned {
  train = 1u << 0,
  prepare = 1u << 1,
  data_stats = 1u << 2,
  inspect = 1u << 3,
  export_ = 1u << 4,
  eval = 1u << 5,
  generate = 1u << 6,
  dump_features = 1u << 7,
  report = 1u << 8,
  follow = 1u << 9,
};
using CommandMask = unsigned;
constexpr CommandMask mask(Command c) { return static_cast<CommandMask>(c); }
std::string_view command_name(Command c);
const std::vector<Command>& all_commands();

// Groups only organise help and docs; the JSON config is flat.
enum class Group { data, model, draft, train, optim, eval, generate, log, checkpoint, distributed, runtime };
std::string_view group_name(Group g);

struct OptionEntry {
  std::string name;          // flag --name and JSON key "name"
  Group group;
  CommandMask commands;      // the subcommands that take it
  std::string help;          // unit and meaning of 0/empty included
  std::string type;          // for docs: "int", "float", "bool", "string", "list of int", "a|b|c"
  std::string default_text;  // the default as JSON text
  bool in_config = true;     // false for "config" itself: not written by --dump-config
  std::function<nlohmann::json(const Options&)> to_json;
  // Reads a JSON value into opts; throws Error naming source (file) and key on a type mismatch.
  std::function<void(Options&, const nlohmann::json&, const std::string& source)> from_json;
  std::function<CLI::Option*(CLI::App&, Options&)> add_flag;
  std::function<void(Options& dst, const Options& src)> copy;
  // Returns "" when the value is in range, else what was expected ("an integer >= 0").
  std::function<std::string(const Options&)> check;
  // The declared numeric range (has_range false for strings, booleans and enums).
  bool has_range = false;
  double range_lo = 0.0;
  double range_hi = 0.0;
  bool range_hi_open = false;  // true: the value must stay below range_hi
  // Whether the value was given (a non-empty string or list; numbers and booleans always are).
  std::function<bool(const Options&)> is_set;
  // The subcommands that cannot run without it; `alternatives` name options that may stand in.
  struct Requirement {
    CommandMask commands = 0;
    std::vector<std::string> alternatives;
  };
  std::vector<Requirement> required;
  // Where the option acts only when another setting holds (`when`, for the message): a value other
  // than the default, given where `holds` is false, would be ignored, so it is refused by name.
  struct ActsOnly {
    CommandMask commands = 0;
    std::string when;
    std::function<bool(const Options&)> holds;
  };
  std::vector<ActsOnly> acts_only;
};

const std::vector<OptionEntry>& option_table();
const OptionEntry* find_option(std::string_view name);

// SGLang's draft tree verifies at most 1 + topk + (steps - 1) * topk^2 tokens a round, the root
// included: eval_tree_draft_tokens against the tree of `steps` drafting steps (eval_tree_steps, else
// eval_draft_len, else the head's TTT steps). The option table checks it where the options give the
// steps; EvalSettings::from, where the head's steps are known: Error(usage) naming the option.
void check_tree_draft_tokens(const Options& o, std::int64_t steps);
// best_metric_depth at most the evaluation's draft length (eval_draft_len, else the head's TTT steps),
// checked like check_tree_draft_tokens: Error(usage) naming the option.
void check_best_metric_depth(const Options& o, std::int64_t draft_len);

// draft_num_layers resolved for a draft (0: the draft's default, 1 for eagle and mtp, 5 for dflash);
// draft as --draft and the JSON config write it.
std::int64_t resolved_draft_num_layers(const std::string& draft, std::int64_t draft_num_layers);
std::int64_t resolved_draft_num_layers(const Options& opts);
// The draft table's row of these options: --draft with eagle_version (eagle: eagle3 or eagle1).
DraftKind draft_kind(const Options& opts);
std::string name_of(Draft v);

// The names of enum values as flags and JSON write them ("truncate", "bfloat16", ...).
std::string name_of(LrScheduler v);
std::string name_of(BadSamplePolicy v);
std::string name_of(OverlongPolicy v);
std::string name_of(NanPolicy v);
std::string name_of(TargetDtype v);
std::string name_of(ExportFormat v);
std::string name_of(Quantize v);
std::string name_of(QuantScale v);
std::string name_of(DdpBackend v);
std::string name_of(DraftSampling v);
std::string name_of(BestMetric v);

}  // namespace eagle::config
