// Reading pretokenized JSON samples (JSONL, a JSON array, folders, .gz) into flat storage, with the
// validation and the bad-sample and overlong policies of docs/data.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eagle/data/flat_builder.h"
#include "eagle/data/read_options.h"

namespace eagle::data {

// Called now and then with the input bytes consumed so far (all files) and the samples kept.
using ProgressFn = std::function<void(std::uint64_t bytes, std::uint64_t samples)>;

// True for the names read as sample files: .jsonl, .json, .jsonl.gz, .json.gz.
bool is_sample_file(const std::string& path);
// Expands folders (recursively, sorted by path) into sample files; checks that every path exists
// and that a plain file has a sample-file extension. Throws ErrorKind::input.
std::vector<std::string> list_sample_files(const std::vector<std::string>& inputs);
// Reads the files in order, appending the kept samples to `out`.
ReadCounts read_sample_files(const std::vector<std::string>& files, const ReadOptions& opts, FlatBuilder& out,
                             const ProgressFn& progress = {});

}  // namespace eagle::data
