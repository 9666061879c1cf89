// Training against the recorded vLLM hidden-states server (tests/fixtures/vllm-server/tiny-llama-h32,
// replayed by replay_server.h): the options of such a run, and counting what its storage folder holds.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "eagle/config/options.h"
#include "train_helpers.h"

namespace eagle::test {

inline const std::string kServerFixture = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/vllm-server/tiny-llama-h32";

// A 5-step run into `out` against the server at `url`, whose storage folder is out's sibling "storage".
inline config::Options server_options(const std::filesystem::path& out, const std::string& url) {
  config::Options o = smoke_options();
  o.model_name_or_path = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama-h32";
  o.data_path = kServerFixture + "/samples.jsonl";
  o.output_dir = out.string();
  o.training_seq_len = 64;
  o.bucket_granularity = 16;
  o.validation_fraction = 0;
  o.per_device_train_batch_size = 2;
  o.max_steps = 5;
  o.logging_steps = 1;
  o.eval_steps = 0;
  o.save_steps = 0;
  o.eval_num_prompts = 0;
  o.aux_hidden_state_layer_ids = {1, 2, 3};  // as the recording's server was started (then the last layer, 4)
  o.target_server = url;
  o.target_server_retries = 1;
  o.target_server_timeout_s = 10;
  o.target_server_storage = (out.parent_path() / "storage").string();  // every test's servers write there
  return o;
}

inline std::size_t files_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace eagle::test
