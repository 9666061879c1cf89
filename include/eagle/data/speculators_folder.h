// The token data of a speculators offline-training folder (vllm-project/speculators: prepare_data.py
// writes the Arrow files with datasets.save_to_disk, data_generation_offline.py the hidden states
// that vLLM computed; docs/offline.md): its rows as samples, and the hidden-state file of each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eagle/data/dataset.h"
#include "eagle/data/loader.h"

namespace eagle::data {

inline constexpr const char* kSpeculatorsStateFile = "state.json";
inline constexpr const char* kSpeculatorsHiddenDir = "hidden_states";

struct SpeculatorsRows {
  Dataset samples;                 // input_ids and loss_mask of each kept row, in row order
  std::vector<std::int64_t> rows;  // the folder's row of each sample (its hs_<row>.safetensors)
};

// Whether path is such a folder: state.json beside a hidden_states folder.
bool is_speculators_folder(const std::string& path);

// Reads the Arrow files in state.json's order (columns input_ids and loss_mask, lists of
// integers). A row longer than training_seq_len follows overlong_policy: truncated, it keeps the
// hidden states of its first tokens (they do not depend on later ones). Ids at or above
// vocab_size (when set), media_tokens and malformed rows are refused by file and row.
SpeculatorsRows read_speculators_folder(const std::string& path, const LoadOptions& opts);

// path/hidden_states/hs_<row>.safetensors
std::string speculators_hidden_file(const std::string& path, std::int64_t row);

}  // namespace eagle::data
