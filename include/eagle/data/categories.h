// The category of each sample (a prompt's `category` field, as SPEED-Bench's prompts carry one): a
// table of names and one index per sample, kept through JSONL, prepared files, splits and subsets so
// the evaluation can report its acceptance per category. Plain C++: no tensors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace eagle::data {

// The longest category name read (bytes): a name is a label, not a document.
inline constexpr std::size_t kMaxCategoryBytes = 256;

class SampleCategories {
 public:
  SampleCategories();
  // Appends one sample of category `name` ("" : none).
  void add(std::string_view name);
  std::size_t size() const { return of_sample_.size(); }
  const std::string& of(std::size_t sample) const { return names_[of_sample_[sample]]; }
  // names()[0] is "" (no category); of_sample()[i] indexes names() for sample i.
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<std::uint32_t>& of_sample() const { return of_sample_; }
  bool any() const { return names_.size() > 1; }  // some sample has a category

  // The prepared file's categories section (docs/data.md): the names' end offsets (u64), their bytes,
  // zero padding to 4 bytes, then the u32 index of each sample at `indices` of this table.
  std::string encode(const std::vector<std::size_t>& indices) const;
  // The section back, checked against the file: Error(input) naming `path` and what is wrong
  // (offsets out of order, a name too long, an index beyond the names, the wrong size).
  static SampleCategories decode(const std::uint8_t* bytes, std::uint64_t size, std::uint64_t names,
                                 std::uint64_t samples, const std::string& path);

 private:
  std::vector<std::string> names_;
  std::vector<std::uint32_t> of_sample_;
  std::unordered_map<std::string, std::uint32_t> index_;
};

}  // namespace eagle::data
