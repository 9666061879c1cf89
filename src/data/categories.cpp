// The samples' categories and their section of a prepared file (see categories.h).
#include "eagle/data/categories.h"

#include <cstring>

#include "eagle/util/checked.h"
#include "eagle/util/error.h"

namespace eagle::data {
namespace {

Error bad_section(const std::string& path, std::string what) {
  return Error(ErrorKind::input, std::move(what)).file(path).place("section categories")
      .hint("the file is damaged; prepare it again");
}

std::uint64_t align4(std::uint64_t x) { return (x + 3) / 4 * 4; }

}  // namespace

SampleCategories::SampleCategories() : names_{std::string()} { index_.emplace(std::string(), 0); }

void SampleCategories::add(std::string_view name) {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) {
    it = index_.emplace(std::string(name), static_cast<std::uint32_t>(names_.size())).first;
    names_.emplace_back(name);
  }
  of_sample_.push_back(it->second);
}

std::string SampleCategories::encode(const std::vector<std::size_t>& indices) const {
  std::string out(8 * names_.size(), '\0');
  std::uint64_t end = 0;
  for (std::size_t n = 0; n < names_.size(); ++n) {
    end += names_[n].size();
    std::memcpy(out.data() + 8 * n, &end, 8);
  }
  for (const auto& name : names_) out += name;
  out.resize(align4(out.size()), '\0');
  for (std::size_t i : indices) {
    const std::uint32_t c = of_sample_.at(i);
    out.append(reinterpret_cast<const char*>(&c), 4);
  }
  return out;
}

SampleCategories SampleCategories::decode(const std::uint8_t* bytes, std::uint64_t size, std::uint64_t names,
                                          std::uint64_t samples, const std::string& path) {
  const auto table = util::checked_mul<std::uint64_t>(names, 8);
  if (names == 0 || !table || *table > size)
    throw bad_section(path, "the category names do not fit their section")
        .expected("1 or more names in " + std::to_string(size) + " bytes").found(std::to_string(names) + " names");
  std::vector<std::uint64_t> ends(names);
  std::memcpy(ends.data(), bytes, *table);
  const std::uint64_t blob = size - *table;
  std::uint64_t begin = 0;
  SampleCategories out;
  for (std::uint64_t n = 0; n < names; ++n) {
    if (ends[n] < begin || ends[n] > blob || ends[n] - begin > kMaxCategoryBytes || (n == 0 && ends[0] != 0))
      throw bad_section(path, "a category name lies outside its section")
          .expected(n == 0 ? std::string("an empty first name (no category)")
                           : "names of at most " + std::to_string(kMaxCategoryBytes) + " bytes, in order")
          .found("name " + std::to_string(n) + " ending at byte " + std::to_string(ends[n]));
    if (n > 0) {
      std::string name(reinterpret_cast<const char*>(bytes + *table + begin), ends[n] - begin);
      if (!out.index_.emplace(name, static_cast<std::uint32_t>(n)).second)
        throw bad_section(path, "a category name is given twice").found(name);
      out.names_.push_back(std::move(name));
    }
    begin = ends[n];
  }
  const std::uint64_t start = align4(*table + begin);
  const auto per_sample = util::checked_mul<std::uint64_t>(samples, 4);
  const auto total = per_sample ? util::checked_add<std::uint64_t>(start, *per_sample) : std::nullopt;
  if (!total || *total != size)
    throw bad_section(path, "the categories section has the wrong size")
        .expected(total ? std::to_string(*total) + " bytes (a u32 per sample)" : std::string("a u32 per sample"))
        .found(std::to_string(size) + " bytes");
  out.of_sample_.resize(samples);
  if (samples > 0) std::memcpy(out.of_sample_.data(), bytes + start, *per_sample);
  for (std::uint64_t i = 0; i < samples; ++i)
    if (out.of_sample_[i] >= names)
      throw bad_section(path, "a sample's category is not in the names")
          .place("section categories, sample " + std::to_string(i))
          .expected("an index < " + std::to_string(names)).found(std::to_string(out.of_sample_[i]));
  return out;
}

}  // namespace eagle::data
