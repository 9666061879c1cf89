// eagle-train prepare: JSON sample files -> a prepared dataset folder (train.bin, optional
// validation.bin, stats.json), written under a temporary name and renamed at the end.

#include <filesystem>
#include <fstream>

#include "eagle/cli/commands.h"
#include "eagle/config/option_table.h"
#include "eagle/data/binary_format.h"
#include "eagle/data/flat_builder.h"
#include "eagle/data/json_reader.h"
#include "eagle/data/loader.h"
#include "eagle/data/progress.h"
#include "eagle/util/progress.h"
#include "eagle/data/stats_file.h"
#include "eagle/run/dir_lock.h"
#include "eagle/util/log.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"

namespace eagle::cli {
namespace {

namespace fs = std::filesystem;

// The output folder must be new (or an empty folder): prepare never replaces what the user has.
void check_output(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  bool empty_dir = fs::is_directory(out, ec) && fs::is_empty(out, ec);
  EAGLE_CHECK(empty_dir, Error(ErrorKind::output, "the output already exists")
                             .file(out)
                             .expected("a new or empty folder")
                             .hint("choose another --output or remove the old one"));
}

// Temporary folders of a prepare that was killed (util::is_temporary of the output's name, also the
// OUTPUT.tmp-<pid> of older versions): nobody writes them (this process holds the output's lock), so they go.
void remove_leftovers(const fs::path& out) {
  std::error_code ec;
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec)) return;
  std::vector<fs::path> leftovers;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (util::is_temporary(e.path().filename().string(), out.filename().string())) leftovers.push_back(e.path());
  for (const auto& p : leftovers) {
    fs::remove_all(p, ec);
    log::info("data", "removed {}, left by an interrupted prepare", p.string());
  }
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  f.close();
  EAGLE_CHECK(f.good(), Error(ErrorKind::output, "cannot write the file").file(path.string()));
}

}  // namespace

void run_prepare(const config::Options& opts, const Invocation& argv) {
  std::uint64_t rss_at_start = util::resident_bytes();  // mostly LibTorch's libraries
  fs::path out = fs::path(opts.output).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/" -> "dir"
  // One prepare per output at a time: the lock beside it is held until this process ends.
  std::error_code parent_ec;
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path(), parent_ec);
  run::DirLock lock(out.string() + ".lock", "the prepare output", /*beside_output=*/true);
  remove_leftovers(out);
  check_output(opts.output);
  auto files = data::list_sample_files(opts.input);
  std::uint64_t total = 0;
  for (const auto& f : files) total += fs::file_size(f);
  log::info("data", "prepare: {} file(s), {:.1f} MB -> {}", files.size(), static_cast<double>(total) / 1e6,
            opts.output);

  data::FlatBuilder builder;
  data::ReadOptions ro{opts.training_seq_len, opts.bad_sample_policy, opts.overlong_policy};
  data::ByteProgress progress("prepare", total);
  data::ReadCounts rc =
      data::read_sample_files(files, ro, builder, [&](std::uint64_t b, std::uint64_t n) { progress.update(b, n); });
  progress.finish(rc.input_bytes, rc.kept);
  double read_s = progress.elapsed_s(), read_cpu_s = progress.cpu_s();
  EAGLE_CHECK(rc.kept > 0, Error(ErrorKind::input, "no samples left to write")
                               .file(files.front())
                               .found(std::to_string(rc.records) + " samples read, none kept"));
  if (rc.truncated)
    log::info("data", "{} samples longer than {} tokens truncated", rc.truncated, opts.training_seq_len);
  if (rc.dropped) log::info("data", "{} samples dropped (overlong or no trained token left)", rc.dropped);
  if (rc.skipped) log::warn("data", "{} bad samples skipped", rc.skipped);

  data::TokenStats counts;
  counts.truncated = rc.truncated;
  counts.dropped = rc.dropped;
  counts.skipped = rc.skipped;
  data::Dataset all = builder.finish(opts.output, counts);
  const auto split =
      data::split_validation(all.size(), opts.validation_fraction, static_cast<std::uint64_t>(opts.seed));
  const auto& train = split.train;
  const auto& val = split.validation;

  const fs::path tmp = util::temporary_name(out);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  EAGLE_CHECK(!ec, Error(ErrorKind::output, "cannot create the folder").file(tmp.string()).found(ec.message()));
  try {
    nlohmann::json j;
    j["format"] = "eagle-train dataset statistics";
    j["version"] = data::kStatsFormatVersion;
    j["inputs"] = files;
    j["input_bytes"] = rc.input_bytes;
    j["training_seq_len"] = opts.training_seq_len;
    j["overlong_policy"] = config::name_of(opts.overlong_policy);
    j["bad_sample_policy"] = config::name_of(opts.bad_sample_policy);
    j["validation_fraction"] = opts.validation_fraction;
    j["seed"] = opts.seed;
    j["records"] = rc.records;
    j["kept"] = rc.kept;
    j["truncated"] = rc.truncated;
    j["dropped"] = rc.dropped;
    j["skipped"] = rc.skipped;
    auto ts = data::write_dataset_file((tmp / data::kTrainFile).string(), all, train, counts, opts.training_seq_len);
    j["splits"]["train"] = data::stats_to_json(ts);
    j["splits"]["train"]["file"] = data::kTrainFile;
    if (!val.empty()) {
      auto vs = data::write_dataset_file((tmp / data::kValidationFile).string(), all, val, data::TokenStats{},
                                         opts.training_seq_len);
      j["splits"]["validation"] = data::stats_to_json(vs);
      j["splits"]["validation"]["file"] = data::kValidationFile;
    }
    write_json(tmp / data::kStatsFile, j);
    if (fs::exists(out)) fs::remove(out);  // an empty folder (check_output)
    fs::rename(tmp, out);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  double total_s = progress.elapsed_s();
  double mb = static_cast<double>(rc.input_bytes) / 1e6;
  log::info("data", "wrote {}: {} train + {} validation samples, {} tokens; read {:.1f} MB/s ({:.1f} MB per CPU "
            "second), {:.2f} s in all", opts.output, train.size(), val.size(), all.total_tokens(),
            mb / std::max(read_s, 1e-9), mb / std::max(read_cpu_s, 1e-9), total_s);
  log::info("data", "memory: peak resident {:.0f} MB, {:.0f} MB of it resident before reading",
            static_cast<double>(util::peak_resident_bytes()) / 1e6, static_cast<double>(rss_at_start) / 1e6);
}

}  // namespace eagle::cli
