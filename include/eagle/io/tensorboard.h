// TensorBoard event files written by hand: TFRecord framing with masked CRC32C and the few Event
// protobuf fields scalars need, so `tensorboard --logdir output_dir` opens them without any
// protobuf or TensorFlow library.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eagle::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); `crc` continues an earlier value.
std::uint32_t crc32c(std::string_view data, std::uint32_t crc = 0);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t mask_crc(std::uint32_t crc);

// One TFRecord: u64 little-endian length, masked CRC32C of those 8 bytes, data, masked CRC32C of data.
std::string tfrecord_frame(std::string_view data);

// Serialised tensorflow.Event messages (protobuf wire format).
// Event{wall_time, step, file_version}: the first record of every events file.
std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2");
// Event{wall_time, step, summary{value{tag, simple_value} ...}}.
std::string encode_scalars_event(double wall_time, std::int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars);
// Event{wall_time, step, session_log{status: START}}: a run (re)starts at `step`. TensorBoard
// treats every START after a run's first as a restart and discards the events it read earlier
// at steps >= `step`, so a resumed run's repeated steps replace the interrupted attempt's.
std::string encode_session_start_event(double wall_time, std::int64_t step);

// Appends scalar events to output_dir/events.out.tfevents.<unix seconds>.<host> (".<n>" is added
// when that name exists already). Each add_scalars call is one record, flushed at once, so a
// killed run loses nothing already logged.
class TensorBoardWriter {
 public:
  // Creates `logdir` if needed, opens a new events file and writes the file_version record.
  explicit TensorBoardWriter(const std::filesystem::path& logdir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Several scalars of one step as one event; wall_time < 0: now.
  void add_scalars(std::int64_t step, const std::vector<std::pair<std::string, float>>& scalars,
                   double wall_time = -1.0);
  void add_scalar(std::string_view tag, float value, std::int64_t step, double wall_time = -1.0);
  // Marks where this process's run starts: step 0 for a fresh run, resumed step + 1 for a resumed
  // one (see encode_session_start_event).
  void session_start(std::int64_t step, double wall_time = -1.0);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Seconds since the Unix epoch, with sub-second precision (TensorBoard's wall_time).
double unix_time_now();

}  // namespace eagle::io
