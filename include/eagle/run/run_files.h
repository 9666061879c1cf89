// The record of how a run was started, saved in output_dir: config.json (the resolved options of
// `train`, which --config accepts back) and command_line.txt (the command as typed, shell-quoted,
// one line per process start, so a resumed run keeps the original command above its own).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle/config/options.h"

namespace eagle::run {

// One shell word per argument, quoted only where needed: a b'c -> a 'b'\''c'.
std::string shell_quote(const std::vector<std::string>& args);

// Writes output_dir/config.json (config::to_json(opts, Command::train), 2-space indented; the
// latest start's) and appends shell_quote(args) as a line to output_dir/command_line.txt, each
// atomically (temporary file, fsync, rename).
void write_run_files(const std::filesystem::path& output_dir, const config::Options& opts,
                     const std::vector<std::string>& args);

// Whether a resumed run may give this option another value than the checkpoint's: the learning
// rate and schedule, the number of steps, evaluation, logging, checkpointing and runtime options.
// Every other option shapes the head, its loss or the data order, and must stay (docs/training.md).
bool may_change_on_resume(std::string_view option);
// The options of `now` (a train config as config::to_json writes it) that differ from the
// checkpoint's `saved` one and may not change, as "name: checkpoint V, now W". Paths are compared
// as the folders they name; options the checkpoint does not record are not compared.
std::vector<std::string> resume_conflicts(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace eagle::run
