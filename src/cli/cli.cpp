// Command-line front end: subcommands, --version, --dump-config, and the one place errors become
// exit codes.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <set>

#include "eagle/cli/commands.h"
#include "eagle_version.h"
#include "eagle/config/resolve.h"
#include "eagle/run/signals.h"
#include "eagle/device/torch_error.h"
#include "eagle/util/log.h"
#include "eagle/util/error.h"

namespace eagle::cli {
namespace {

using config::Command;

struct CommandInfo {
  Command command;
  const char* description;
  void (*run)(const config::Options&, const Invocation&);
};

const CommandInfo kCommands[] = {
    {Command::train, "Train a draft head on a target model (the main job)", run_train},
    {Command::prepare, "Convert JSONL/JSON token data into a memory-mapped dataset with statistics", run_prepare},
    {Command::data_stats, "Length histogram and padding efficiency per bucket granularity", run_data_stats},
    {Command::inspect, "Check a target model folder and print its architecture", run_inspect},
    {Command::export_, "Export a trained head for SGLang, vLLM or speculators", run_export},
    {Command::eval, "Measure the acceptance rate of a trained or imported head", run_eval},
    {Command::generate, "Regenerate the replies of training samples with the target (batched, resumable)",
     run_generate},
    {Command::dump_features, "Run the target once over a dataset and store its features for training without it",
     run_dump_features},
    {Command::report, "Draw a run folder's loss, accuracy, acceptance, throughput and options as one HTML file",
     run_report},
    {Command::follow,
     "Keep a draft current while its target changes: train on a growing rollout folder, publish "
     "versions that do not lose acceptance",
     run_follow},
};

int run_parsed(CLI::App& app, std::vector<config::BoundFlags>& bound, const std::map<CLI::App*, std::size_t>& index,
               bool dump_config, const Invocation& argv) {
  for (CLI::App* sub : app.get_subcommands()) {
    config::BoundFlags& b = bound[index.at(sub)];
    std::set<std::string> from_config;
    config::Options opts = config::resolve(b, &from_config);
    config::validate(opts, b.command, from_config);
    log::LogLevel level = log::LogLevel::info;
    log::parse_log_level(opts.log_level, level);
    log::set_log_level(level);
    if (dump_config) {
      std::cout << config::to_json(opts, b.command).dump(2) << "\n";
      return 0;
    }
    config::check_required(opts, b.command);
    config::check_ignored(opts, b.command);
    for (const auto& c : kCommands)
      if (c.command == b.command) c.run(opts, argv);
    return 0;
  }
  std::cerr << app.help();
  return static_cast<int>(ExitCode::usage);
}

// `eagle-train report RUN_DIR`: the positional is --output_dir given without its name (one value,
// bound to the same option, so precedence and --dump-config treat it as the flag).
void add_run_dir_argument(CLI::App& sub, config::BoundFlags& bound) {
  for (std::size_t i = 0; i < bound.flags.size(); ++i) {
    const auto [entry, flag] = bound.flags[i];  // copies: the vector grows below
    if (entry->name != "output_dir") continue;
    CLI::Option* positional =
        sub.add_option("run_dir", bound.parsed.output_dir, "The run folder (the same as --output_dir)");
    positional->excludes(flag);
    bound.flags.emplace_back(entry, positional);
    return;
  }
}

}  // namespace

std::string version_text() {
#ifdef EAGLE_WITH_CUDA
  const char* compiled = "yes";
#else
  const char* compiled = "no";
#endif
  return fmt::format("eagle-train {}, LibTorch {}, CUDA compiled in: {}, CUDA available: {}", EAGLE_VERSION,
                     EAGLE_TORCH_VERSION, compiled, torch::cuda::is_available() ? "yes" : "no");
}

namespace {
constexpr std::string_view kLauncherBlocked = "EAGLE_TRAIN_LAUNCHER_BLOCKED";
}  // namespace

void install_start_up_signals(int argc, char** argv, char** envp) {
  // The launcher (apps/eagle_train_launcher.cpp) blocked SIGINT/SIGTERM before exec'ing this process,
  // so that one sent while LibTorch loads stays pending.
  bool launcher_blocked = false;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e)
    launcher_blocked |= std::string_view(*e).substr(0, kLauncherBlocked.size() + 1) == "EAGLE_TRAIN_LAUNCHER_BLOCKED=";
  // A SIGINT/SIGTERM while the libraries start or the options, data or target are read is kept for
  // the run's own stop path (a summary, exit 130) instead of ending the process with 143.
  if (argc > 1 && argv != nullptr && argv[1] != nullptr &&
      (std::string_view(argv[1]) == "train" || std::string_view(argv[1]) == "generate" ||
       std::string_view(argv[1]) == "follow")) {
    run::install_stop_signals();  // unblocks them: a pending one reaches the handlers
  } else if (launcher_blocked) {
    // The other commands keep the default action: a pending stop ends the process now, as it would have.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    ::pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  }
}

int main(int argc, char** argv) {
  install_start_up_signals(argc, argv, environ);      // done already from .preinit_array in eagle-train
  ::unsetenv(std::string(kLauncherBlocked).c_str());  // not for the processes this one starts
  // Started by torchrun (RANK or WORLD_SIZE set, device::launch_info's rule): a launcher killed with
  // SIGKILL cannot forward a signal, so the kernel's parent-death signal stops the rank instead.
  if (std::getenv("RANK") != nullptr || std::getenv("WORLD_SIZE") != nullptr) run::stop_when_parent_dies();
  CLI::App app{"eagle-train: trains EAGLE-3 and EAGLE-1 speculative-decoding draft heads", "eagle-train"};
  app.require_subcommand(0, 1);
  bool show_version = false, options_md = false, dump_config = false;
  app.add_flag("--version", show_version, "Print the version, the LibTorch version and CUDA support");
  app.add_flag("--options-markdown", options_md, "Print docs/options.md (generated from the option table)")
      ->group("");
  std::vector<config::BoundFlags> bound;
  bound.reserve(std::size(kCommands));
  std::map<CLI::App*, std::size_t> index;
  for (const auto& c : kCommands) {
    CLI::App* sub = app.add_subcommand(std::string(config::command_name(c.command)), c.description);
    bound.push_back(config::BoundFlags{c.command, {}, {}});
    config::add_flags(*sub, bound.back());
    if (c.command == Command::report) add_run_dir_argument(*sub, bound.back());
    sub->add_flag("--dump-config", dump_config, "Print the resolved options as JSON and exit");
    index[sub] = bound.size() - 1;
  }
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code == 0 ? 0 : static_cast<int>(ExitCode::usage);
    }
    if (show_version) {
      std::cout << version_text() << "\n";
      return 0;
    }
    if (options_md) {
      std::cout << config::options_markdown();
      return 0;
    }
    return run_parsed(app, bound, index, dump_config, Invocation(argv, argv + argc));
  } catch (...) {
    const Error e = device::to_error(std::current_exception());
    log::error("main", "{}", e.format());
    return static_cast<int>(e.exit_code());
  }
}

}  // namespace eagle::cli
