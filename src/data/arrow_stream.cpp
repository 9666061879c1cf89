// Arrow IPC stream reading for integer and list<integer> columns (see arrow_stream.h). The framing
// (Arrow columnar format, "Encapsulated message format"): repeated
//   0xFFFFFFFF | int32 metadata length | Message flatbuffer | body
// ended by 0xFFFFFFFF 0x00000000; the first message is the Schema, the others RecordBatches.
#include "eagle/data/arrow_stream.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "eagle/util/checked.h"
#include "eagle/util/error.h"
#include "eagle/util/mapped_file.h"

namespace eagle::data {
namespace {

static_assert(std::endian::native == std::endian::little, "Arrow files are read as little-endian");

// Flatbuffer enum values (Arrow's Schema.fbs and Message.fbs).
constexpr std::uint8_t kSchemaMessage = 1, kDictionaryMessage = 2, kRecordBatchMessage = 3;
constexpr std::uint8_t kIntType = 2, kListType = 12, kLargeListType = 21;

// Bounds-checked little-endian reads inside one region (a message's metadata or the whole file).
struct Region {
  const std::uint8_t* base;
  std::size_t size;
  const std::string* file;

  Error bad(const std::string& what) const {
    return Error(ErrorKind::input, "not an Arrow stream this reader handles")
        .file(*file)
        .found(what)
        .hint("speculators data folders are written by datasets.save_to_disk (Arrow IPC stream, uncompressed)");
  }
  void need(std::size_t pos, std::size_t n) const {
    if (pos > size || n > size - pos) throw bad(fmt::format("{} bytes at offset {} run past {} bytes", n, pos, size));
  }
  template <typename T>
  T get(std::size_t pos) const {
    need(pos, sizeof(T));
    T v;
    std::memcpy(&v, base + pos, sizeof(T));
    return v;
  }
};

// A flatbuffer table: a signed offset to its vtable, whose entries locate the fields.
class Table {
 public:
  Table(const Region& r, std::size_t pos) : r_(&r), pos_(pos) {
    const auto soffset = static_cast<std::int64_t>(r.get<std::int32_t>(pos));
    const std::int64_t vt = static_cast<std::int64_t>(pos) - soffset;
    if (vt < 0) throw r.bad("a table's vtable lies before the metadata");
    vt_ = static_cast<std::size_t>(vt);
    vt_len_ = r.get<std::uint16_t>(vt_);
  }
  template <typename T>
  T scalar(int field, T fallback) const {
    const std::size_t o = offset(field);
    return o ? r_->get<T>(pos_ + o) : fallback;
  }
  bool has(int field) const { return offset(field) != 0; }
  std::optional<Table> table(int field) const {
    auto p = indirect(field);
    return p ? std::optional<Table>(Table(*r_, *p)) : std::nullopt;
  }
  std::string string(int field) const {
    auto p = indirect(field);
    if (!p) return {};
    const auto n = r_->get<std::uint32_t>(*p);
    r_->need(*p + 4, n);
    return std::string(reinterpret_cast<const char*>(r_->base + *p + 4), n);
  }
  // A vector field: (first element's position, element count).
  std::pair<std::size_t, std::size_t> vector(int field) const {
    auto p = indirect(field);
    if (!p) return {0, 0};
    return {*p + 4, r_->get<std::uint32_t>(*p)};
  }
  std::vector<Table> tables(int field) const {
    auto [start, n] = vector(field);
    std::vector<Table> out;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = start + 4 * i;
      out.emplace_back(*r_, at + r_->get<std::uint32_t>(at));
    }
    return out;
  }

 private:
  std::size_t offset(int field) const {
    const std::size_t o = 4 + 2 * static_cast<std::size_t>(field);
    return o < vt_len_ ? r_->get<std::uint16_t>(vt_ + o) : 0;
  }
  std::optional<std::size_t> indirect(int field) const {
    const std::size_t o = offset(field);
    if (!o) return std::nullopt;
    return pos_ + o + r_->get<std::uint32_t>(pos_ + o);
  }
  const Region* r_;
  std::size_t pos_, vt_ = 0;
  std::uint16_t vt_len_ = 0;
};

struct FieldType {
  std::string name;
  bool is_list = false, large = false;
  int bits = 0;
  bool is_signed = true;
};

FieldType int_type(const Table& field, const Region& r, FieldType f) {
  auto t = field.table(3);
  if (!t) throw r.bad(fmt::format("column \"{}\" has no integer type", f.name));
  f.bits = t->scalar<std::int32_t>(0, 0);
  f.is_signed = t->scalar<std::uint8_t>(1, 0) != 0;
  if (f.bits != 8 && f.bits != 16 && f.bits != 32 && f.bits != 64)
    throw r.bad(fmt::format("column \"{}\" has {}-bit integers", f.name, f.bits));
  return f;
}

FieldType parse_field(const Table& field, const Region& r) {
  FieldType f;
  f.name = field.string(0);
  if (field.has(4)) throw r.bad(fmt::format("column \"{}\" is dictionary-encoded", f.name));
  const auto type = field.scalar<std::uint8_t>(2, 0);
  if (type == kIntType) return int_type(field, r, f);
  if (type != kListType && type != kLargeListType)
    throw r.bad(
        fmt::format("column \"{}\" has Arrow type id {} (integers and lists of integers are read)", f.name, type));
  auto children = field.tables(5);
  if (children.size() != 1 || children[0].scalar<std::uint8_t>(2, 0) != kIntType || children[0].has(4))
    throw r.bad(fmt::format("column \"{}\" is a list of something other than integers", f.name));
  f.is_list = true;
  f.large = type == kLargeListType;
  return int_type(children[0], r, f);
}

// Reads the RecordBatch message `header` whose body starts at `body` of `file` (body_len bytes).
ArrowBatch read_batch(const Table& header, const Region& meta, const Region& file, std::size_t body,
                      std::size_t body_len, const std::vector<FieldType>& schema) {
  if (header.has(3)) throw meta.bad("a compressed record batch");
  ArrowBatch b;
  b.rows = header.scalar<std::int64_t>(0, 0);
  if (b.rows < 0) throw meta.bad("a negative row count");
  auto [nodes_at, n_nodes] = header.vector(1);
  auto [bufs_at, n_bufs] = header.vector(2);
  std::size_t ni = 0, bi = 0;
  auto node = [&](const std::string& col) {
    if (ni >= n_nodes) throw meta.bad(fmt::format("column \"{}\" has no field node", col));
    const std::size_t at = nodes_at + 16 * ni++;
    const auto length = meta.get<std::int64_t>(at), nulls = meta.get<std::int64_t>(at + 8);
    if (nulls != 0) throw meta.bad(fmt::format("column \"{}\" holds {} nulls", col, nulls));
    if (length < 0) throw meta.bad(fmt::format("column \"{}\" has a negative length", col));
    return length;
  };
  // The next buffer, checked to lie inside the body and to hold at least `need` bytes.
  auto buffer = [&](const std::string& col, std::uint64_t need) -> const std::uint8_t* {
    if (bi >= n_bufs) throw meta.bad(fmt::format("column \"{}\" lacks a buffer", col));
    const std::size_t at = bufs_at + 16 * bi++;
    const auto off = meta.get<std::int64_t>(at), len = meta.get<std::int64_t>(at + 8);
    if (off < 0 || len < 0 || static_cast<std::uint64_t>(off) + static_cast<std::uint64_t>(len) > body_len ||
        static_cast<std::uint64_t>(len) < need)
      throw file.bad(fmt::format("column \"{}\": a buffer of {} bytes at {} (body {} bytes, {} needed)", col, len, off,
                                 body_len, need));
    return file.base + body + static_cast<std::size_t>(off);
  };
  // count x width bytes; a product that wraps (2^62 x 4 is 0) would pass the buffer check above.
  auto bytes_of = [&](const std::string& col, const char* field, std::int64_t count, std::uint64_t width) {
    const auto n = util::checked_mul(static_cast<std::uint64_t>(count), width);
    if (!n)
      throw meta.bad(fmt::format("column \"{}\": {} {} of {} bytes overflow a 64-bit size", col, count, field, width));
    return *n;
  };
  for (const FieldType& f : schema) {
    ArrowColumn c;
    c.name = f.name;
    c.is_list = f.is_list;
    c.bits = f.bits;
    c.is_signed = f.is_signed;
    c.rows = node(f.name);
    if (c.rows != b.rows) throw meta.bad(fmt::format("column \"{}\" has {} rows of {}", f.name, c.rows, b.rows));
    buffer(f.name, 0);  // validity: no nulls, so unread
    if (f.is_list) {
      c.large_offsets = f.large;
      const auto n_offsets = util::checked_add<std::int64_t>(c.rows, 1);
      if (!n_offsets) throw meta.bad(fmt::format("column \"{}\" has {} rows", f.name, c.rows));
      c.offsets = buffer(f.name, bytes_of(f.name, "list offsets", *n_offsets, f.large ? 8 : 4));
      c.value_count = node(f.name);
      buffer(f.name, 0);
    } else {
      c.value_count = c.rows;
    }
    c.values = buffer(f.name, bytes_of(f.name, "values", c.value_count, static_cast<std::uint64_t>(f.bits / 8)));
    if (f.is_list) {
      std::int64_t prev = 0;
      for (std::int64_t r = 0; r <= c.rows; ++r) {
        std::int64_t o;
        if (f.large)
          std::memcpy(&o, c.offsets + 8 * r, 8);
        else {
          std::int32_t o32;
          std::memcpy(&o32, c.offsets + 4 * r, 4);
          o = o32;
        }
        if (o < prev || o > c.value_count)
          throw file.bad(fmt::format("column \"{}\": list offset {} of row {} is out of order or range", f.name, o, r));
        prev = o;
      }
    }
    b.columns.push_back(std::move(c));
  }
  return b;
}

}  // namespace

std::int64_t ArrowColumn::value(std::int64_t k) const {
  const std::uint8_t* p = values + k * (bits / 8);
  switch (bits) {
    case 8:
      return is_signed ? static_cast<std::int64_t>(static_cast<std::int8_t>(*p)) : *p;
    case 16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return is_signed ? static_cast<std::int64_t>(static_cast<std::int16_t>(v)) : v;
    }
    case 32: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return is_signed ? static_cast<std::int64_t>(static_cast<std::int32_t>(v)) : v;
    }
    default: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

std::pair<std::int64_t, std::int64_t> ArrowColumn::list_range(std::int64_t r) const {
  if (large_offsets) {
    std::int64_t o[2];
    std::memcpy(o, offsets + 8 * r, 16);
    return {o[0], o[1]};
  }
  std::int32_t o[2];
  std::memcpy(o, offsets + 4 * r, 8);
  return {o[0], o[1]};
}

const ArrowColumn& ArrowBatch::column(std::string_view name, const std::string& file) const {
  for (const auto& c : columns)
    if (c.name == name) return c;
  throw Error(ErrorKind::input, "a column is missing").file(file).place(fmt::format("column \"{}\"", name));
}

void read_arrow_stream(const std::string& path, const std::function<void(const ArrowBatch&)>& on_batch) {
  const util::MappedFile map(path, "the Arrow file");
  const Region file{map.data(), map.size(), &path};
  std::vector<FieldType> schema;
  bool have_schema = false;
  std::size_t pos = 0;
  while (true) {
    if (pos == file.size) break;  // a stream cut without its end marker still ends at a message boundary
    std::int32_t meta_len = 0;
    if (file.get<std::uint32_t>(pos) == 0xFFFFFFFFu) {
      meta_len = file.get<std::int32_t>(pos + 4);
      pos += 8;
    } else {  // the framing of Arrow before 0.15: no continuation marker
      meta_len = file.get<std::int32_t>(pos);
      pos += 4;
    }
    if (meta_len == 0) break;  // end of stream
    if (meta_len < 0) throw file.bad(fmt::format("a negative metadata length at offset {}", pos));
    file.need(pos, static_cast<std::size_t>(meta_len));
    const Region meta{file.base + pos, static_cast<std::size_t>(meta_len), &path};
    const Table message(meta, meta.get<std::uint32_t>(0));
    const auto type = message.scalar<std::uint8_t>(1, 0);
    const auto body_len = message.scalar<std::int64_t>(3, 0);
    const std::size_t body = pos + static_cast<std::size_t>(meta_len);
    if (body_len < 0) throw file.bad("a negative body length");
    file.need(body, static_cast<std::size_t>(body_len));
    auto header = message.table(2);
    if (!header) throw meta.bad("a message without header");
    if (type == kSchemaMessage) {
      if (header->scalar<std::int16_t>(0, 0) != 0) throw meta.bad("a big-endian schema");
      schema.clear();
      for (const Table& f : header->tables(1)) schema.push_back(parse_field(f, meta));
      have_schema = true;
    } else if (type == kRecordBatchMessage) {
      if (!have_schema) throw meta.bad("a record batch before the schema");
      on_batch(read_batch(*header, meta, file, body, static_cast<std::size_t>(body_len), schema));
    } else {
      throw meta.bad(type == kDictionaryMessage ? std::string("a dictionary batch")
                                                : fmt::format("a message of type {}", type));
    }
    pos = body + static_cast<std::size_t>(body_len);
  }
  EAGLE_CHECK(have_schema, file.bad("no schema message"));
}

}  // namespace eagle::data
