// safetensors files: a memory-mapped, validated reader (zero-copy CPU tensors over a private
// mapping) and a writer (sorted contiguous offsets, padded header, temporary name then rename).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "eagle/util/mapped_file.h"

namespace eagle::model {

class SafetensorsFile {
 public:
  // Maps and validates path (header length, JSON, dtypes, offsets inside the file, shape x dtype =
  // byte length, no overlaps); throws eagle::Error naming the file and tensor.
  // links: util::MappedFile::Links (refuse: a file a server names, never read through a link or blocking).
  static SafetensorsFile open(const std::string& path, util::MappedFile::Links links = util::MappedFile::Links::follow);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  std::vector<std::int64_t> shape(const std::string& name) const;
  torch::ScalarType dtype(const std::string& name) const;
  // A CPU tensor viewing the mapping (it keeps the mapping alive). Throws naming a missing tensor.
  torch::Tensor get(const std::string& name) const;
  // The tensor's stored bytes, never copied (valid while this object lives).
  std::string_view bytes(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;

  struct Impl;

 private:
  std::string path_;
  std::shared_ptr<const Impl> impl_;
};

// Writes tensors (any device; contiguous copies are made on CPU) with optional __metadata__.
// Supported dtypes: those the reader knows (F32, BF16, F16, F64, integers, BOOL, F8_E4M3, F8_E5M2).
void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// All tensors of a file, as views over the mapping.
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path);

}  // namespace eagle::model
