// config.json and command_line.txt of a run.
#include "eagle/run/run_files.h"

#include <fstream>
#include <iterator>

#include "eagle/config/resolve.h"
#include "eagle/util/fs_sync.h"

namespace eagle::run {

std::string shell_quote(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                   "_-./=:,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

void write_run_files(const std::filesystem::path& output_dir, const config::Options& opts,
                     const std::vector<std::string>& args) {
  util::write_file_atomic(output_dir / "config.json",
                          config::to_json(opts, config::Command::train).dump(2) + "\n");
  // One line per process start: a resumed run's command follows the original one.
  std::filesystem::path cmd_path = output_dir / "command_line.txt";
  std::string history;
  if (std::filesystem::exists(cmd_path)) {
    std::ifstream in(cmd_path, std::ios::binary);
    history.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!history.empty() && history.back() != '\n') history += '\n';
  }
  util::write_file_atomic(cmd_path, history + shell_quote(args) + "\n");
}

}  // namespace eagle::run
