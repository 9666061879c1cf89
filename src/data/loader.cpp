// load_dataset: prepared folders are mapped, JSON inputs are parsed into memory; both end as the
// same Dataset layout, with statistics and an optional seeded validation split.
#include "eagle/data/loader.h"

#include <filesystem>

#include <fmt/format.h>

#include "eagle/data/binary_format.h"
#include "eagle/data/flat_builder.h"
#include "eagle/data/json_reader.h"
#include "eagle/data/progress.h"
#include "eagle/util/log.h"
#include "eagle/util/error.h"

namespace eagle::data {
namespace {

namespace fs = std::filesystem;

// A copy of ds with every sample cut to seq_len tokens (or dropped), for prepared data written with
// a larger limit than this run's.
Dataset limit_length(const Dataset& ds, std::int64_t seq_len, config::OverlongPolicy policy) {
  FlatBuilder b;
  TokenStats counts = ds.stats();
  std::vector<TokenId> ids;
  std::vector<std::uint8_t> mask;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    std::int64_t n = ds.length(i);
    if (n > seq_len) {
      if (policy == config::OverlongPolicy::drop) {
        ++counts.dropped;
        continue;
      }
      n = seq_len;
    }
    ids.resize(static_cast<std::size_t>(n));
    mask.resize(static_cast<std::size_t>(n));
    bool any = false;
    for (std::int64_t p = 0; p < n; ++p) {
      ids[p] = ds.token(i, p);
      mask[p] = ds.trained(i, p) ? 1 : 0;
      any = any || mask[p];
    }
    if (!any) {
      ++counts.dropped;
      continue;
    }
    if (n < ds.length(i)) ++counts.truncated;
    b.add(ids.data(), mask.data(), static_cast<std::size_t>(n), ds.category(i));
  }
  return b.finish(ds.source(), counts);
}

Dataset fit_length(Dataset ds, const LoadOptions& opts) {
  if (ds.stats().max_length <= opts.training_seq_len) return ds;
  log::warn("data", "{} holds samples of up to {} tokens, more than training_seq_len {}: applying overlong_policy "
            "on a copy in memory (prepare it with --training_seq_len {} to avoid the copy)",
            ds.source(), ds.stats().max_length, opts.training_seq_len, opts.training_seq_len);
  return limit_length(ds, opts.training_seq_len, opts.overlong_policy);
}

LoadedData split(Dataset all, const LoadOptions& opts, const std::string& source) {
  LoadedData out;
  if (opts.validation_fraction <= 0) {
    out.train = std::move(all);
    return out;
  }
  auto s = split_dataset(std::move(all), opts.validation_fraction, opts.seed, source);
  if (!s.validation) log::warn("data", "{}: too few samples to hold out a validation split", source);
  out.train = std::move(s.train);
  out.validation = std::move(s.validation);
  return out;
}

void log_summary(const std::string& what, const Dataset& ds) {
  const TokenStats& s = ds.stats();
  double trained = s.tokens ? 100.0 * static_cast<double>(s.trained_tokens) / static_cast<double>(s.tokens) : 0.0;
  log::info("data", "{}: {} samples, {} tokens ({:.1f}% trained), longest {}, max id {}", what, s.samples, s.tokens,
            trained, s.max_length, s.max_token_id);
}

LoadedData load_prepared(const std::string& path, const LoadOptions& opts) {
  fs::path dir(path);
  LoadedData out;
  out.train = fit_length(open_dataset_file((dir / kTrainFile).string()), opts);
  if (fs::exists(dir / kValidationFile)) {
    out.validation = fit_length(open_dataset_file((dir / kValidationFile).string()), opts);
  } else if (opts.validation_fraction > 0) {
    log::info("data", "{} has no stored validation split: holding out {} of it in memory", path,
              opts.validation_fraction);
    out = split(std::move(out.train), opts, path);
  }
  return out;
}

}  // namespace

LoadOptions LoadOptions::from(const config::Options& o) {
  return LoadOptions{o.training_seq_len, o.bad_sample_policy, o.overlong_policy, o.validation_fraction,
                     static_cast<std::uint64_t>(o.seed)};
}

void check_token_ids(const Dataset& dataset, std::int64_t vocab_size, const std::vector<MediaToken>& media_tokens) {
  const auto max_id = static_cast<std::int64_t>(dataset.max_token_id());
  std::vector<MediaToken> media;  // the placeholders the data could hold
  for (const auto& m : media_tokens)
    if (m.id <= max_id) media.push_back(m);
  const bool vocab = vocab_size > 0 && max_id >= vocab_size;
  if (dataset.size() == 0 || (!vocab && media.empty())) return;
  for (std::size_t i = 0; i < dataset.size(); ++i)
    for (std::int64_t p = 0; p < dataset.length(i); ++p) {
      const auto id = static_cast<std::int64_t>(dataset.token(i, p));
      const auto place = [&] { return fmt::format("sample {}, position {}", i, p); };
      if (vocab && id >= vocab_size)
        throw Error(ErrorKind::input, "token id outside the target's vocabulary").file(dataset.source())
            .place(place()).expected(fmt::format("ids < {}", vocab_size)).found(std::to_string(id))
            .hint("the data was tokenized for another model");
      for (const auto& m : media)
        if (id == m.id) throw media_token_error(m, place()).file(dataset.source());
    }
}

bool is_prepared_dataset(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kTrainFile, ec);
}

LoadedData load_dataset(const std::string& path, const LoadOptions& opts) {
  EAGLE_CHECK(!path.empty(), Error(ErrorKind::usage, "no training data given").hint("set --data_path"));
  LoadedData out;
  if (is_prepared_dataset(path)) {
    out = load_prepared(path, opts);
  } else if (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0) {
    out = split(fit_length(open_dataset_file(path), opts), opts, path);
  } else {
    std::error_code ec;
    EAGLE_CHECK(!fs::is_directory(path, ec) ||
                    !(fs::exists(fs::path(path) / kValidationFile, ec) || fs::exists(fs::path(path) / kStatsFile, ec)),
                Error(ErrorKind::input, "a prepared dataset folder without its train.bin").file(path)
                    .expected(std::string(kTrainFile) + " beside " + kStatsFile)
                    .hint("prepare the dataset again, or give the folder of its JSON files"));
    auto files = list_sample_files({path});
    std::uint64_t total = 0;
    for (const auto& f : files) total += fs::file_size(f);
    FlatBuilder builder;
    ReadOptions ro{opts.training_seq_len, opts.bad_sample_policy, opts.overlong_policy, opts.vocab_size,
                   opts.allow_untrained, opts.media_tokens};
    ByteProgress progress("read", total);
    ReadCounts rc =
        read_sample_files(files, ro, builder, [&](std::uint64_t b, std::uint64_t n) { progress.update(b, n); });
    if (progress.drawn()) progress.finish(rc.input_bytes, rc.kept);
    TokenStats counts;
    counts.truncated = rc.truncated;
    counts.dropped = rc.dropped;
    counts.skipped = rc.skipped;
    log::info("data", "read {} samples from {} file(s): kept {}, truncated {}, dropped {}, skipped {}", rc.records,
              files.size(), rc.kept, rc.truncated, rc.dropped, rc.skipped);
    EAGLE_CHECK(rc.kept > 0, Error(ErrorKind::input, "no samples left to train on").file(path)
                                 .found(std::to_string(rc.records) + " samples read, none kept"));
    out = split(builder.finish(path, counts), opts, path);
  }
  check_token_ids(out.train, opts.vocab_size, opts.media_tokens);
  if (out.validation) check_token_ids(*out.validation, opts.vocab_size, opts.media_tokens);
  log_summary("train", out.train);
  if (out.validation) log_summary("validation", *out.validation);
  return out;
}

}  // namespace eagle::data
