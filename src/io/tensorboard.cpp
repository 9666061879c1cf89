// TensorBoard event files: TFRecord framing, CRC32C and hand-encoded Event protobufs.
#include "eagle/io/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "eagle/util/error.h"

namespace eagle::io {
namespace fs = std::filesystem;

namespace {

constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire format, the three wire types the Event messages use.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}
void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_double(std::string& out, int field, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_tag(out, field, 1);  // fixed64
  put_le(out, bits, 8);
}
void put_float(std::string& out, int field, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_tag(out, field, 5);  // fixed32
  put_le(out, bits, 4);
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);  // length-delimited
  put_varint(out, bytes.size());
  out.append(bytes);
}
// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary), session_log = 7 (SessionLog; 6 is the deprecated log_message).
std::string event_head(double wall_time, std::int64_t step) {
  std::string out;
  put_double(out, 1, wall_time);
  if (step != 0) {
    put_tag(out, 2, 0);
    put_varint(out, static_cast<std::uint64_t>(step));
  }
  return out;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::uint32_t crc32c(std::string_view data, std::uint32_t crc) {
  crc = ~crc;
  for (unsigned char b : data) crc = kCrc32cTable[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t mask_crc(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc(crc32c(std::string_view(out.data(), 8))), 4);
  out.append(data);
  put_le(out, mask_crc(crc32c(data)), 4);
  return out;
}

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string out = event_head(wall_time, 0);
  put_bytes(out, 3, version);
  return out;
}

std::string encode_scalars_event(double wall_time, std::int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars) {
  // Summary.value = 1 (repeated Value); Value.tag = 1 (string), Value.simple_value = 2 (float).
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_float(v, 2, value);
    put_bytes(summary, 1, v);
  }
  std::string out = event_head(wall_time, step);
  put_bytes(out, 5, summary);
  return out;
}

std::string encode_session_start_event(double wall_time, std::int64_t step) {
  std::string session_log;  // SessionLog.status = 1 (enum), START = 1
  put_tag(session_log, 1, 0);
  put_varint(session_log, 1);
  std::string out = event_head(wall_time, step);
  put_bytes(out, 7, session_log);
  return out;
}

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const fs::path& logdir) {
  std::error_code ec;
  fs::create_directories(logdir, ec);
  if (ec)
    throw Error(ErrorKind::output, "cannot create the TensorBoard folder").file(logdir.string()).found(ec.message());
  double now = unix_time_now();
  std::string base = "events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." + host_name();
  path_ = logdir / base;
  // A second writer in the same second (a quick resume) must not append to the first file:
  // TensorBoard expects file_version first in every file.
  for (int n = 1; fs::exists(path_); ++n) path_ = logdir / (base + "." + std::to_string(n));
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_)
    throw Error(ErrorKind::output, "cannot create the TensorBoard events file")
        .file(path_.string())
        .found(std::strerror(errno));
  write_record(encode_file_version_event(now));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string frame = tfrecord_frame(event);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size() || std::fflush(file_) != 0)
    throw Error(ErrorKind::output, "cannot write the TensorBoard events file")
        .file(path_.string())
        .found(std::strerror(errno));
}

void TensorBoardWriter::add_scalars(std::int64_t step, const std::vector<std::pair<std::string, float>>& scalars,
                                    double wall_time) {
  if (scalars.empty()) return;
  write_record(encode_scalars_event(wall_time < 0 ? unix_time_now() : wall_time, step, scalars));
}

void TensorBoardWriter::add_scalar(std::string_view tag, float value, std::int64_t step, double wall_time) {
  add_scalars(step, {{std::string(tag), value}}, wall_time);
}

void TensorBoardWriter::session_start(std::int64_t step, double wall_time) {
  write_record(encode_session_start_event(wall_time < 0 ? unix_time_now() : wall_time, step));
}

}  // namespace eagle::io
