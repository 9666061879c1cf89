// The subcommands of eagle-train. Each runs on resolved, validated options and throws eagle::Error
// on failure; each lives in its own src/cli/cmd_<name>.cpp.
#pragma once

#include <string>
#include <vector>

#include "eagle/config/options.h"

namespace eagle::cli {

// Entry point used by apps/eagle_train.cpp: parses, resolves, dispatches, maps errors to exit codes.
int main(int argc, char** argv);

// The stop-signal handlers of train and generate (run::install_stop_signals), for the argv of a
// process: apps/eagle_train.cpp runs it from .preinit_array, before any shared library's
// initialiser (LibTorch's take most of a second), and main again (idempotent). The launcher
// (apps/eagle_train_launcher.cpp) blocked SIGINT/SIGTERM across the exec and says so in envp (read
// from envp, not getenv: the C library may not have set its environment before .preinit_array):
// the other commands get them unblocked with their default action.
void install_start_up_signals(int argc, char** argv, char** envp);

// The command line of this process as main received it (argv[0] first), for command_line.txt.
using Invocation = std::vector<std::string>;

void run_train(const config::Options& opts, const Invocation& argv);
void run_prepare(const config::Options& opts, const Invocation& argv);
void run_data_stats(const config::Options& opts, const Invocation& argv);
void run_inspect(const config::Options& opts, const Invocation& argv);
void run_export(const config::Options& opts, const Invocation& argv);
void run_eval(const config::Options& opts, const Invocation& argv);
void run_generate(const config::Options& opts, const Invocation& argv);
void run_dump_features(const config::Options& opts, const Invocation& argv);
void run_report(const config::Options& opts, const Invocation& argv);
void run_follow(const config::Options& opts, const Invocation& argv);

// "eagle-train 0.1.0, LibTorch 2.11.0, CUDA compiled in: yes, CUDA available: no"
std::string version_text();

}  // namespace eagle::cli
