// Reading the rows of a speculators offline-training folder (see speculators_folder.h).
#include "eagle/data/speculators_folder.h"

#include <cstdint>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/data/arrow_stream.h"
#include "eagle/data/flat_builder.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"

namespace eagle::data {
namespace {

namespace fs = std::filesystem;

// The Arrow files of the folder, in state.json's _data_files order (the row order of the dataset).
std::vector<std::string> arrow_files(const fs::path& dir) {
  const auto state = dir / kSpeculatorsStateFile;
  const nlohmann::json j = util::read_json_object(state, "dataset state file");
  EAGLE_CHECK(j.contains("_data_files") && j["_data_files"].is_array() && !j["_data_files"].empty(),
              Error(ErrorKind::input, "no data files listed")
                  .file(state.string())
                  .place("_data_files")
                  .expected("a list of {\"filename\": \"data-XXXXX-of-YYYYY.arrow\"}"));
  std::vector<std::string> out;
  for (const auto& f : j["_data_files"]) {
    const std::string name =
        f.is_object() && f.contains("filename") && f["filename"].is_string() ? f["filename"].get<std::string>() : "";
    EAGLE_CHECK(!name.empty() && name.find('/') == std::string::npos && name.find("..") == std::string::npos,
                Error(ErrorKind::input, "a data file entry is not a plain file name")
                    .file(state.string())
                    .place("_data_files")
                    .found(f.dump()));
    out.push_back((dir / name).string());
  }
  return out;
}

}  // namespace

bool is_speculators_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(path) / kSpeculatorsStateFile, ec) &&
         fs::is_directory(fs::path(path) / kSpeculatorsHiddenDir, ec);
}

std::string speculators_hidden_file(const std::string& path, std::int64_t row) {
  return (fs::path(path) / kSpeculatorsHiddenDir / fmt::format("hs_{}.safetensors", row)).string();
}

SpeculatorsRows read_speculators_folder(const std::string& path, const LoadOptions& opts) {
  FlatBuilder builder;
  SpeculatorsRows out;
  TokenStats counts;
  std::vector<TokenId> ids;
  std::vector<std::uint8_t> mask;
  std::int64_t row = 0;
  for (const auto& file : arrow_files(path)) {
    read_arrow_stream(file, [&](const ArrowBatch& b) {
      const ArrowColumn& id_col = b.column("input_ids", file);
      const ArrowColumn& mask_col = b.column("loss_mask", file);
      EAGLE_CHECK(id_col.is_list && mask_col.is_list,
                  Error(ErrorKind::input, "input_ids and loss_mask must be lists of integers").file(file));
      for (std::int64_t r = 0; r < b.rows; ++r, ++row) {
        auto place = [&] { return fmt::format("row {} (hidden_states/hs_{}.safetensors)", row, row); };
        auto [ib, ie] = id_col.list_range(r);
        auto [mb, me] = mask_col.list_range(r);
        EAGLE_CHECK(ie - ib == me - mb, Error(ErrorKind::input, "input_ids and loss_mask differ in length")
                                            .file(file)
                                            .place(place())
                                            .found(fmt::format("{} and {}", ie - ib, me - mb)));
        std::int64_t n = ie - ib;
        if (n > opts.training_seq_len) {
          if (opts.overlong_policy == config::OverlongPolicy::drop) {
            ++counts.dropped;
            continue;
          }
          ++counts.truncated;
          n = opts.training_seq_len;
        }
        if (n == 0) {
          ++counts.dropped;
          continue;
        }
        ids.resize(static_cast<std::size_t>(n));
        mask.resize(static_cast<std::size_t>(n));
        for (std::int64_t p = 0; p < n; ++p) {
          const std::int64_t id = id_col.value(ib + p), m = mask_col.value(mb + p);
          EAGLE_CHECK(id >= 0 && (opts.vocab_size <= 0 || id < opts.vocab_size) && id <= UINT32_MAX,
                      Error(ErrorKind::input, "token id outside the target's vocabulary")
                          .file(file)
                          .place(fmt::format("{}, position {}", place(), p))
                          .expected(fmt::format("ids in [0, {})", opts.vocab_size))
                          .found(std::to_string(id)));
          for (const auto& media : opts.media_tokens)
            EAGLE_CHECK(id != media.id,
                        media_token_error(media, fmt::format("{}, position {}", place(), p)).file(file));
          EAGLE_CHECK(m == 0 || m == 1, Error(ErrorKind::input, "loss_mask values must be 0 or 1")
                                            .file(file)
                                            .place(fmt::format("{}, position {}", place(), p))
                                            .found(std::to_string(m)));
          ids[static_cast<std::size_t>(p)] = static_cast<TokenId>(id);
          mask[static_cast<std::size_t>(p)] = static_cast<std::uint8_t>(m);
        }
        builder.add(ids.data(), mask.data(), static_cast<std::size_t>(n));
        out.rows.push_back(row);
      }
    });
  }
  EAGLE_CHECK(
      !out.rows.empty(),
      Error(ErrorKind::input, "the folder holds no usable row").file(path).found(fmt::format("{} rows read", row)));
  if (counts.truncated || counts.dropped)
    log::info("data", "{}: {} rows truncated to training_seq_len {}, {} dropped", path, counts.truncated,
              opts.training_seq_len, counts.dropped);
  out.samples = builder.finish(path, counts);
  return out;
}

}  // namespace eagle::data
