// Shared test helpers (see helpers.h).
#include "helpers.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace eagle::test {

std::string smoke_args() {
  const std::string root = EAGLE_SOURCE_DIR;
  return "--config " + root + "/configs/smoke.json --model_name_or_path " + root +
         "/tests/fixtures/models/tiny-llama --data_path " + root + "/tests/fixtures/data/smoke.jsonl";
}

pid_t start_cli(const std::string& args, const std::filesystem::path& log, const std::string& env) {
  const std::string cmd = "exec " + (env.empty() ? "" : "env " + env + " ") + EAGLE_TRAIN_BIN + " " + args + " > " +
                          log.string() + " 2>&1";
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + cmd);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) throw std::runtime_error("waitpid failed for pid " + std::to_string(pid));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::map<std::int64_t, double> logged_losses(const std::filesystem::path& run) {
  std::map<std::int64_t, double> out;
  for (const auto& j : read_jsonl(run / "metrics.jsonl"))
    if (j.contains("loss") && !j["loss"].is_null()) out[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  return out;
}

ProcessResult run_command(const std::string& cmd) {
  // fork + exec of sh -c with a pipe for stdout, and wait4 for the child's own peak memory.
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed: " + cmd);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + cmd);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  ProcessResult r;
  std::array<char, 4096> buf{};
  ssize_t n;
  while ((n = read(fds[0], buf.data(), buf.size())) > 0) r.output.append(buf.data(), static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_kb = usage.ru_maxrss;
  return r;
}

ProcessResult run_cli(const std::string& args) {
  return run_command(std::string(EAGLE_TRAIN_BIN) + " " + args + " 2>&1");
}

std::string venv_python() {
  const char* deps = std::getenv("EAGLE_DEPS_DIR");
  const char* home = std::getenv("HOME");
  std::string dir = deps ? deps : std::string(home ? home : "") + "/.cache/eagle-train";
  return dir + "/venv/bin/python";
}

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() / ("eagle_test_" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::filesystem::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary);
  out << content;
}
std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace eagle::test
