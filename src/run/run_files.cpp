// config.json and command_line.txt of a run.
#include "eagle/run/run_files.h"

#include <fmt/format.h>

#include <set>

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

bool may_change_on_resume(std::string_view option) {
  static const std::set<std::string_view> kMayChange{
      // optimisation schedule and length of the run
      "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "max_grad_norm", "max_steps",
      "num_train_epochs", "nan_policy",
      // evaluation and gates
      "eval_data_path", "eval_steps", "eval_num_prompts", "eval_max_new_tokens", "eval_draft_len", "min_ar",
      "max_final_loss",
      // logging, checkpoints, where the run lives
      "logging_steps", "log_level", "output_dir", "overwrite_output_dir", "save_steps", "save_total_limit",
      "resume_from_checkpoint",
      // runtime (bit-exact resumes need the same device and threads; the run itself is the same)
      "device", "num_threads", "max_cuda_graphs", "config", "ddp_backend", "ddp_timeout_s",
      // where the target's features come from: servers of the same target may move or restart
      "target_server", "target_server_inflight", "target_server_timeout_s", "target_server_retries",
      "target_server_storage",
      // memory layout of the loss and the TTT unroll (the same values and gradients up to fp32 rounding),
      // the memory estimate's report and check
      "loss_chunk_size", "recompute_activations", "dry_run", "check_memory"};
  return kMayChange.count(option) > 0;
}

std::vector<std::string> resume_conflicts(const nlohmann::json& saved, const nlohmann::json& now) {
  static const std::set<std::string_view> kPaths{"data_path", "model_name_or_path", "features_path"};
  std::vector<std::string> out;
  for (const auto& [key, value] : now.items()) {
    if (may_change_on_resume(key) || !saved.contains(key)) continue;
    const auto& before = saved.at(key);
    bool same = before == value;
    if (!same && kPaths.count(key) && before.is_string() && value.is_string()) {
      std::error_code e1, e2;
      auto a = std::filesystem::weakly_canonical(before.get<std::string>(), e1);
      auto b = std::filesystem::weakly_canonical(value.get<std::string>(), e2);
      same = !e1 && !e2 && a == b;
    }
    if (!same) out.push_back(fmt::format("{}: checkpoint {}, now {}", key, before.dump(), value.dump()));
  }
  return out;
}

}  // namespace eagle::run
