// Shared test helpers: running eagle-train as a subprocess, temporary folders.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle_test_paths.h"

namespace eagle::test {

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
  long max_rss_kb = 0;  // peak resident memory of the shell and what it ran (the largest process)
};

// Runs a shell command and captures its standard output (redirect stderr in cmd to see it too).
ProcessResult run_command(const std::string& cmd);
// Runs `eagle-train ARGS` through the shell (args are passed verbatim) and captures its output.
ProcessResult run_cli(const std::string& args);
// The flags of configs/smoke.json on the tiny Llama fixture and its data (train_helpers.h's
// smoke_options() as command-line flags).
std::string smoke_args();
// Starts `eagle-train ARGS` in the background through the shell (args verbatim; env: variable
// assignments such as "RANK=0 WORLD_SIZE=2" for its environment), its stdout and stderr to log.
// The pid is eagle-train's own, so signals reach it.
pid_t start_cli(const std::string& args, const std::filesystem::path& log, const std::string& env = "");
// Waits for a child: its exit code, or minus the signal that killed it.
int wait_exit(pid_t pid);
// Every non-empty line of a JSON-lines file (a run's metrics.jsonl), parsed.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file);
// The training losses a run folder's metrics.jsonl logged, by step (null losses left out).
std::map<std::int64_t, double> logged_losses(const std::filesystem::path& run);
// The Python of scripts/setup.sh's environment ($EAGLE_DEPS_DIR or ~/.cache/eagle-train).
std::string venv_python();

// A fresh empty folder under the system temporary folder, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_file(const std::filesystem::path& p, const std::string& content);
std::string read_file(const std::filesystem::path& p);

}  // namespace eagle::test
