// Resolving options: defaults < --config file.json < command-line flags, then validation; JSON
// dump (--dump-config) and the generated docs/options.md.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle/config/option_table.h"

namespace eagle::config {

// The flags of one subcommand, bound to a scratch Options that CLI11 writes into.
struct BoundFlags {
  Command command;
  Options parsed;  // defaults, overwritten by the flags given
  std::vector<std::pair<const OptionEntry*, CLI::Option*>> flags;
};

void add_flags(CLI::App& sub, BoundFlags& bound);

// Reads a JSON config file (an object). Unknown keys are an error listing all of them, with a
// "did you mean" for near misses; wrong types name the file and key.
void apply_json(Options& opts, const nlohmann::json& doc, const std::string& source);
// keys, when given, receives the keys the file sets.
void apply_json_file(Options& opts, const std::string& path, std::set<std::string>* keys = nullptr);

// defaults < the file named by --config < the flags given on the command line. from_config, when
// given, receives the options whose value came from the file (for error messages).
Options resolve(const BoundFlags& bound, std::set<std::string>* from_config = nullptr);

// Range checks of every option the command takes; one error, on one line, listing every failure
// (a value from the config file names the file).
void validate(const Options& opts, Command command, const std::set<std::string>& from_config = {});
// The options the command cannot run without (the table's required()); one error listing every
// missing one. Not needed for --dump-config.
void check_required(const Options& opts, Command command);

// Options that would be silently ignored: a value other than the default where the setting it acts
// with does not hold (the table's acts_only(), e.g. --quantize_scale without --quantize fp8); one
// error listing every one. A config written by --dump-config holds defaults there and passes.
void check_ignored(const Options& opts, Command command);

// The options a command takes, as a flat JSON object that --config accepts back unchanged.
nlohmann::json to_json(const Options& opts, Command command);

// docs/options.md, generated from the table.
std::string options_markdown();

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace eagle::config
