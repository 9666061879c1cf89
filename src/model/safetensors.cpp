// safetensors reader (private memory mapping, full header validation, zero-copy CPU tensors) and
// writer (sorted contiguous offsets, 8-byte padded header, written atomically by util::write_atomic).
#include "eagle/model/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/util/checked.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/json_file.h"
#include "eagle/util/mapped_file.h"

namespace eagle::model {

namespace {

// Largest header we accept: real checkpoints have a few hundred kilobytes; the bound stops a
// corrupt length from allocating gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  std::size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {"F32", torch::kFloat32, 4}, {"BF16", torch::kBFloat16, 2}, {"F16", torch::kFloat16, 2},
    {"F64", torch::kFloat64, 8}, {"I64", torch::kInt64, 8},     {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},       {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},   {"F8_E4M3", torch::kFloat8_e4m3fn, 1}, {"F8_E5M2", torch::kFloat8_e5m2, 1},
};

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeInfo* dtype_by_type(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (t == d.type) return &d;
  return nullptr;
}

std::string dtype_names() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

std::string tensor_place(const std::string& name) { return fmt::format("tensor \"{}\"", name); }

}  // namespace

struct SafetensorsFile::Impl {
  struct Entry {
    const DtypeInfo* dtype = nullptr;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // offsets inside the data section
  };

  std::string path;
  std::unique_ptr<util::MappedFile> map;
  void* base = nullptr;  // map's bytes
  std::size_t size = 0;
  std::uint64_t data_start = 0;  // 8 + header length
  std::map<std::string, Entry> entries;
  std::map<std::string, std::string> metadata;

  Error bad(const std::string& what) const {
    return Error(ErrorKind::input, "invalid safetensors file: " + what).file(path);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path, util::MappedFile::Links links) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  // Private and writable: an accidental in-place op on a loaded tensor copies the page instead of
  // crashing on a read-only page or writing through to the file (the descriptor is read-only).
  impl->map = std::make_unique<util::MappedFile>(path, "the safetensors file", util::MappedFile::Access::copy_on_write,
                                                 ErrorKind::input, links);
  impl->base = impl->map->writable_data();
  impl->size = impl->map->size();
  EAGLE_CHECK(impl->size >= 8, impl->bad("file shorter than the 8-byte header length")
                                   .expected("at least 8 bytes").found(fmt::format("{} bytes", impl->size)));
  const auto* bytes = static_cast<const unsigned char*>(impl->base);

  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little endian
  EAGLE_CHECK(header_len <= kMaxHeaderBytes && header_len <= impl->size - 8,
              impl->bad("header length does not fit the file")
                  .place("header length (first 8 bytes)")
                  .expected(fmt::format("at most {} bytes", std::min<std::uint64_t>(impl->size - 8, kMaxHeaderBytes)))
                  .found(fmt::format("{} bytes", header_len))
                  .hint("the file may be truncated or not a safetensors file"));
  impl->data_start = 8 + header_len;
  const std::uint64_t data_size = impl->size - impl->data_start;

  nlohmann::json header;
  try {
    // A tensor named twice in the header is refused by name (a parser keeps one of them silently).
    std::istringstream text(std::string(reinterpret_cast<const char*>(bytes + 8), header_len));
    header = util::parse_json_unique_keys(text, ErrorKind::input, "a tensor or key is named twice in the header",
                                          impl->path);
  } catch (const nlohmann::json::exception& e) {
    throw impl->bad("header is not valid JSON").place("header").found(e.what());
  }
  EAGLE_CHECK(header.is_object(), impl->bad("header is not a JSON object").place("header"));

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      EAGLE_CHECK(v.is_object(), impl->bad("__metadata__ is not an object").place("__metadata__"));
      for (auto m = v.begin(); m != v.end(); ++m) {
        EAGLE_CHECK(m.value().is_string(), impl->bad("metadata values must be strings")
                                               .place(fmt::format("__metadata__ \"{}\"", m.key())));
        impl->metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto place = tensor_place(name);
    EAGLE_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                impl->bad("tensor entry lacks dtype, shape or data_offsets").place(place));
    EAGLE_CHECK(v["dtype"].is_string(), impl->bad("dtype is not a string").place(place));
    Impl::Entry e;
    e.dtype = dtype_by_name(v["dtype"].get<std::string>());
    EAGLE_CHECK(e.dtype != nullptr, impl->bad("unsupported dtype").place(place)
                                        .expected(dtype_names()).found(v["dtype"].get<std::string>()));
    EAGLE_CHECK(v["shape"].is_array(), impl->bad("shape is not an array").place(place));
    std::uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      EAGLE_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0),
                  impl->bad("shape entries must be non-negative integers").place(place).found(d.dump()));
      // Each size must fit a tensor's int64 size, and the byte count (not only the element count)
      // 64 bits: [2^61] F64 is 2^64 bytes, which wraps to 0 and then matches empty data_offsets.
      const auto dim = d.get<std::uint64_t>();
      const auto grown = util::checked_mul(numel, dim);
      EAGLE_CHECK(dim <= (std::uint64_t{1} << 62) && grown && util::checked_mul(*grown, std::uint64_t{8}),
                  impl->bad("shape overflows")
                      .place(place)
                      .expected("a byte count that fits in 64 bits")
                      .found(v["shape"].dump()));
      numel = *grown;
      e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    EAGLE_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                impl->bad("data_offsets must be two non-negative integers").place(place).found(off.dump()));
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    EAGLE_CHECK(e.begin <= e.end && e.end <= data_size,
                impl->bad("data_offsets outside the data section").place(place)
                    .expected(fmt::format("0 <= begin <= end <= {}", data_size))
                    .found(fmt::format("[{}, {}]", e.begin, e.end))
                    .hint("the file may be truncated"));
    EAGLE_CHECK(e.end - e.begin == numel * e.dtype->bytes,
                impl->bad("byte length does not match shape x dtype").place(place)
                    .expected(fmt::format("{} bytes", numel * e.dtype->bytes))
                    .found(fmt::format("{} bytes", e.end - e.begin)));
    impl->entries.emplace(name, std::move(e));
  }

  // Zero-size tensors occupy no bytes: any offset is theirs, shared or not (the Python library
  // writes several at one offset).
  std::vector<std::pair<const std::string*, const Impl::Entry*>> by_offset;
  for (const auto& [n, e] : impl->entries)
    if (e.end > e.begin) by_offset.emplace_back(&n, &e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto& prev = by_offset[i - 1];
    const auto& cur = by_offset[i];
    EAGLE_CHECK(cur.second->begin >= prev.second->end,
                impl->bad("tensor data overlaps another tensor").place(tensor_place(*cur.first))
                    .found(fmt::format("[{}, {}] overlaps \"{}\" at [{}, {}]", cur.second->begin, cur.second->end,
                                       *prev.first, prev.second->begin, prev.second->end)));
  }

  SafetensorsFile f;
  f.path_ = path;
  f.impl_ = std::move(impl);
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& kv : impl_->entries) out.push_back(kv.first);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return impl_->entries.count(name) > 0; }

namespace {
const SafetensorsFile::Impl::Entry& entry_of(const SafetensorsFile::Impl& impl, const std::string& name) {
  auto it = impl.entries.find(name);
  EAGLE_CHECK(
      it != impl.entries.end(),
      Error(ErrorKind::input, "tensor missing from safetensors file").file(impl.path).place(tensor_place(name)));
  return it->second;
}
}  // namespace

std::vector<std::int64_t> SafetensorsFile::shape(const std::string& name) const { return entry_of(*impl_, name).shape; }

torch::ScalarType SafetensorsFile::dtype(const std::string& name) const { return entry_of(*impl_, name).dtype->type; }

torch::Tensor SafetensorsFile::get(const std::string& name) const {
  const auto& e = entry_of(*impl_, name);
  auto* ptr = static_cast<unsigned char*>(impl_->base) + impl_->data_start + e.begin;
  auto holder = impl_;  // the deleter keeps the mapping alive as long as any view exists
  auto t = torch::from_blob(ptr, e.shape, [holder](void*) mutable { holder.reset(); },
                            torch::TensorOptions().dtype(e.dtype->type));
  // Other writers need not align offsets; kernels expect element alignment, so copy in that case.
  if (reinterpret_cast<std::uintptr_t>(ptr) % e.dtype->bytes != 0) return t.clone();
  return t;
}

std::string_view SafetensorsFile::bytes(const std::string& name) const {
  const auto& e = entry_of(*impl_, name);
  return {static_cast<const char*>(impl_->base) + impl_->data_start + e.begin,
          static_cast<std::size_t>(e.end - e.begin)};
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->metadata; }

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& n : f.names()) out.emplace(n, f.get(n));
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::vector<torch::Tensor> cpu;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: sorted by name, offsets contiguous in that order
    EAGLE_CHECK(t.defined(), Error(ErrorKind::internal, "undefined tensor given to the safetensors writer")
                                 .file(path).place(tensor_place(name)));
    const auto* d = dtype_by_type(t.scalar_type());
    EAGLE_CHECK(d != nullptr, Error(ErrorKind::output, "dtype not supported by the safetensors writer")
                                  .file(path).place(tensor_place(name)).expected(dtype_names())
                                  .found(std::string(c10::toString(t.scalar_type()))));
    auto c = t.detach().to(torch::kCPU).contiguous();
    const std::uint64_t n = static_cast<std::uint64_t>(c.numel()) * d->bytes;
    header[name] = {{"dtype", d->name}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    cpu.push_back(std::move(c));
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned

  util::write_atomic(path, [&](std::ostream& out) {
    unsigned char len[8];
    std::uint64_t hl = h.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((hl >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& c : cpu)
      out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
  });
}

}  // namespace eagle::model
