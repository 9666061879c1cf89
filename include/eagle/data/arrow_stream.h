// A reader of Arrow IPC stream files (the .arrow files Hugging Face `datasets.save_to_disk`
// writes) restricted to what speculators' token data holds: integer and list<integer> columns,
// uncompressed, without dictionaries or nulls, little-endian. Anything else is refused by name. The
// file is memory-mapped; every flatbuffer and buffer access is checked against its bounds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace eagle::data {

// One column of one record batch, viewing the mapped file.
struct ArrowColumn {
  std::string name;
  bool is_list = false;  // list<int> (or large_list<int>) instead of one int per row
  int bits = 64;         // width of the integers: 8, 16, 32 or 64
  bool is_signed = true;
  std::int64_t rows = 0;
  std::int64_t value_count = 0;  // integers in `values` (= rows for a plain column)
  const std::uint8_t* values = nullptr;
  const std::uint8_t* offsets = nullptr;  // lists: rows + 1 offsets into values
  bool large_offsets = false;             // int64 offsets (large_list) instead of int32

  // Integer k of the values, widened.
  std::int64_t value(std::int64_t k) const;
  // The values of row r of a list column: [begin, end) into value().
  std::pair<std::int64_t, std::int64_t> list_range(std::int64_t r) const;
};

struct ArrowBatch {
  std::int64_t rows = 0;
  std::vector<ArrowColumn> columns;
  // The column of that name; throws Error(input) naming the file when it is absent.
  const ArrowColumn& column(std::string_view name, const std::string& file) const;
};

// Calls on_batch for each record batch of the stream file, in order (the columns view the mapping,
// valid during the call). Throws Error(input) naming the file and the message for anything the
// reader does not handle or a truncated or inconsistent file.
void read_arrow_stream(const std::string& path, const std::function<void(const ArrowBatch&)>& on_batch);

}  // namespace eagle::data
