// Reading pretokenized samples: JSONL, JSON arrays, folders, gzip, labels/loss_mask conventions,
// the prepared binary format (round trip, refusal of truncated or foreign files), splits.
#include <sys/stat.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <random>

#include "eagle/data/binary_format.h"
#include "eagle/data/flat_builder.h"
#include "eagle/data/loader.h"
#include "eagle/util/error.h"
#include "data_helpers.h"
#include "helpers.h"

using eagle::data::Sample;
using eagle::test::TempDir;
using eagle::test::all_samples;
using eagle::test::same;
using eagle::test::write_file;

namespace {

eagle::data::LoadOptions opts(std::int64_t seq_len = 2048, double val = 0) {
  return eagle::test::load_options(seq_len, val);
}

std::string jsonl_line(const Sample& s) {
  std::string ids, mask;
  for (std::size_t i = 0; i < s.input_ids.size(); ++i) {
    if (i) {
      ids += ',';
      mask += ',';
    }
    ids += std::to_string(s.input_ids[i]);
    mask += std::to_string(s.loss_mask[i]);
  }
  return "{\"input_ids\": [" + ids + "], \"loss_mask\": [" + mask + "]}";
}

void write_gz(const std::filesystem::path& p, const std::string& content) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(gzwrite(f, content.data(), static_cast<unsigned>(content.size())) == static_cast<int>(content.size()));
  gzclose(f);
}

std::vector<Sample> random_samples(std::size_t n, std::uint32_t max_id, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Sample> out(n);
  for (auto& s : out) {
    std::size_t len = 1 + rng() % 40;
    for (std::size_t i = 0; i < len; ++i) {
      s.input_ids.push_back(rng() % (max_id + 1));
      s.loss_mask.push_back(static_cast<std::uint8_t>(rng() % 3 != 0));
    }
    s.loss_mask.back() = 1;  // at least one trained token
  }
  return out;
}

const std::vector<Sample> kThree = {{{5, 6, 7}, {0, 1, 1}}, {{8, 9}, {1, 1}}, {{10, 11, 12, 13}, {0, 0, 1, 0}}};

}  // namespace

TEST_CASE("JSONL: loss_mask, labels and no mask give exact samples; extra fields ignored", "[data]") {
  TempDir dir;
  write_file(dir / "a.jsonl",
             "{\"id\": \"x\", \"input_ids\": [5, 6, 7], \"loss_mask\": [0, 1, 1], \"conversations\": [{\"from\": "
             "\"human\", \"value\": \"[1,2]\"}]}\n"
             "\n"
             "{\"labels\": [8, 9], \"input_ids\": [8, 9]}\r\n"
             "{\"input_ids\": [10, 11, 12, 13], \"labels\": [-100, -100, 12, -100]}");  // no final newline
  auto d = eagle::data::load_dataset((dir / "a.jsonl").string(), opts());
  CHECK(same(all_samples(d.train), kThree));
  CHECK_FALSE(d.validation);

  write_file(dir / "b.jsonl", "\xEF\xBB\xBF{\"input_ids\": [3, 4]}\n");  // with a UTF-8 byte-order mark
  auto all = eagle::data::load_dataset((dir / "b.jsonl").string(), opts());
  CHECK(same(all_samples(all.train), {{{3, 4}, {1, 1}}}));
}

TEST_CASE("a JSON array file, gzip files and a folder of them read the same samples", "[data]") {
  TempDir dir;
  std::string array = "[\n";
  for (std::size_t i = 0; i < kThree.size(); ++i) array += (i ? ",\n  " : "  ") + jsonl_line(kThree[i]);
  array += "\n]\n";
  write_file(dir / "arr.json", "\xEF\xBB\xBF" + array);
  CHECK(same(all_samples(eagle::data::load_dataset((dir / "arr.json").string(), opts()).train), kThree));

  std::string jsonl;
  for (const auto& s : kThree) jsonl += jsonl_line(s) + "\n";
  write_gz(dir / "x.jsonl.gz", jsonl);
  write_gz(dir / "y.json.gz", array);
  CHECK(same(all_samples(eagle::data::load_dataset((dir / "x.jsonl.gz").string(), opts()).train), kThree));
  CHECK(same(all_samples(eagle::data::load_dataset((dir / "y.json.gz").string(), opts()).train), kThree));

  // A damaged gzip file is an input error naming the file.
  std::string gz = eagle::test::read_file(dir / "x.jsonl.gz");
  write_file(dir / "cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  CHECK_THROWS_WITH(eagle::data::load_dataset((dir / "cut.jsonl.gz").string(), opts()),
                    Catch::Contains("cut.jsonl.gz") && Catch::Contains("gzip file is truncated"));

  // A folder: sample files in path order (sub-folders included), other files ignored.
  std::filesystem::create_directories(dir / "f" / "sub");
  write_file(dir / "f" / "b.jsonl", jsonl_line(kThree[1]) + "\n");
  std::string one = "[";
  one += jsonl_line(kThree[0]);
  one += "]";
  write_gz(dir / "f" / "a.json.gz", one);
  write_file(dir / "f" / "sub" / "c.jsonl", jsonl_line(kThree[2]) + "\n");
  write_file(dir / "f" / "README.md", "not data");
  auto f = eagle::data::load_dataset((dir / "f").string(), opts());
  CHECK(same(all_samples(f.train), kThree));
  CHECK(f.train.stats().samples == 3);
  CHECK(f.train.stats().trained_tokens == 5);
  CHECK(f.train.max_token_id() == 13);
}

TEST_CASE("statistics of a JSONL load: trained-token counts, histogram, lengths", "[data]") {
  TempDir dir;
  write_file(dir / "s.jsonl",
             "{\"input_ids\": [2, 2, 3], \"loss_mask\": [1, 1, 0]}\n{\"input_ids\": [3, 9], \"loss_mask\": [1, 0]}\n"
             "{\"input_ids\": [1, 1, 1, 1, 1], \"loss_mask\": [0, 0, 0, 1, 1]}\n");
  auto s = eagle::data::load_dataset((dir / "s.jsonl").string(), opts()).train.stats();
  CHECK(s.trained_token_counts.entries() == std::vector<eagle::data::TokenCounts::Entry>{{1, 2}, {2, 2}, {3, 1}});
  CHECK(s.length_histogram == std::vector<std::uint64_t>{0, 2, 1});  // lengths 3, 2 -> [2,4); 5 -> [4,8)
  CHECK(s.tokens == 10);
  CHECK(s.trained_tokens == 5);
  CHECK(s.max_token_id == 9);
  CHECK(s.max_length == 5);
}

TEST_CASE("prepared file round trip: samples, stats and mapping, uint16 and uint32 tokens", "[data]") {
  TempDir dir;
  for (std::uint32_t max_id : {1000u, 200000u}) {
    auto samples = random_samples(300, max_id, max_id);
    auto ds = eagle::data::Dataset::from_samples(samples);
    std::vector<std::size_t> all(samples.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::string path = (dir / std::to_string(max_id)).string();
    path += ".bin";
    eagle::data::write_dataset_file(path, ds, all, {}, 2048);
    auto h = eagle::data::read_dataset_header(path);
    CHECK(h.token_bytes == (max_id > 65535 ? 4u : 2u));
    CHECK(h.tokens_offset % 64 == 0);
    CHECK(h.offsets_offset % 64 == 0);
    auto back = eagle::data::open_dataset_file(path);
    CHECK(same(all_samples(back), samples));
    CHECK(back.storage().owner != nullptr);
    CHECK(back.max_token_id() == ds.max_token_id());
    CHECK(back.stats().trained_token_counts == ds.stats().trained_token_counts);
    CHECK(back.stats().length_histogram == ds.stats().length_histogram);

    // A subset in another order, re-packed mask bits included.
    std::vector<std::size_t> pick{7, 3, 299, 0, 150};
    eagle::data::write_dataset_file(path + ".sub", ds, pick, {}, 2048);
    auto sub = eagle::data::open_dataset_file(path + ".sub");
    std::vector<Sample> want;
    for (auto i : pick) want.push_back(samples[i]);
    CHECK(same(all_samples(sub), want));
  }
}

TEST_CASE("truncated, extended, corrupt and foreign dataset files are refused", "[data]") {
  TempDir dir;
  auto ds = eagle::data::Dataset::from_samples(kThree);
  std::string path = (dir / "d.bin").string();
  eagle::data::write_dataset_file(path, ds, {0, 1, 2}, {}, 2048);
  std::string bytes = eagle::test::read_file(path);
  auto refused = [&](const std::string& content, const char* what) {
    write_file(dir / "bad.bin", content);
    try {
      eagle::data::open_dataset_file((dir / "bad.bin").string());
      FAIL("accepted a bad file: " << what);
    } catch (const eagle::Error& e) {
      CHECK(e.exit_code() == eagle::ExitCode::input);
      CHECK_THAT(e.format(), Catch::Contains("bad.bin") && Catch::Contains(what));
    }
  };
  refused(bytes.substr(0, bytes.size() - 64), "truncated");
  refused(bytes.substr(0, 100), "truncated");
  refused(bytes + "x", "extra bytes");
  std::string flipped = bytes;
  flipped[40] ^= 1;
  refused(flipped, "corrupt");
  std::string jsonl(300, ' ');
  jsonl.replace(0, 22, "{\"input_ids\": [1, 2]}\n");
  refused(jsonl, "not an eagle-train dataset");
  refused("", "not an eagle-train dataset");
}

TEST_CASE("validation split: seeded, exact size, disjoint, deterministic", "[data]") {
  auto a = eagle::data::validation_indices(1000, 0.1, 7);
  CHECK(a.size() == 100);
  CHECK(a == eagle::data::validation_indices(1000, 0.1, 7));
  CHECK(a != eagle::data::validation_indices(1000, 0.1, 8));
  CHECK(std::is_sorted(a.begin(), a.end()));
  auto rest = eagle::data::complement_indices(1000, a);
  CHECK(rest.size() == 900);
  std::vector<std::size_t> merged;
  std::merge(a.begin(), a.end(), rest.begin(), rest.end(), std::back_inserter(merged));
  for (std::size_t i = 0; i < merged.size(); ++i) REQUIRE(merged[i] == i);
  CHECK(eagle::data::validation_indices(3, 0.01, 1).size() == 1);  // at least one
  CHECK(eagle::data::validation_indices(2, 0.9, 1).size() == 1);   // never all
  CHECK(eagle::data::validation_indices(1000, 0, 1).empty());

  // load_dataset on JSONL holds out exactly those samples.
  TempDir dir;
  auto samples = random_samples(50, 500, 3);
  std::string text;
  for (const auto& s : samples) text += jsonl_line(s) + "\n";
  write_file(dir / "v.jsonl", text);
  auto d = eagle::data::load_dataset((dir / "v.jsonl").string(), opts(2048, 0.2));
  REQUIRE(d.validation);
  auto vi = eagle::data::validation_indices(50, 0.2, 42);
  std::vector<Sample> want_val, want_train;
  for (auto i : vi) want_val.push_back(samples[i]);
  for (auto i : eagle::data::complement_indices(50, vi)) want_train.push_back(samples[i]);
  CHECK(same(all_samples(*d.validation), want_val));
  CHECK(same(all_samples(d.train), want_train));

  write_file(dir / "one.jsonl", jsonl_line(samples[0]) + "\n");  // nothing to hold out
  auto one = eagle::data::load_dataset((dir / "one.jsonl").string(), opts(2048, 0.2));
  CHECK_FALSE(one.validation);
  CHECK(one.train.size() == 1);
}

TEST_CASE("a multimodal target's media placeholders are refused by file and line or sample, naming which", "[data]") {
  TempDir dir;
  write_file(dir / "m.jsonl", "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4, 250, 6], \"loss_mask\": [0, 1, 1]}\n");
  auto text = opts();
  text.vocab_size = 256;
  auto media = text;
  media.media_tokens = {{250, "image_token_id"}, {252, "vision_start_token_id"}};
  auto error_of = [](const std::string& path, const eagle::data::LoadOptions& lo) {
    try {
      eagle::data::load_dataset(path, lo);
    } catch (const eagle::Error& e) {
      CHECK(e.kind() == eagle::ErrorKind::input);
      return e.format();
    }
    FAIL("loaded");
    return std::string();
  };
  const auto jsonl = (dir / "m.jsonl").string();
  CHECK_THAT(error_of(jsonl, media), Catch::Contains("m.jsonl: line 2, field input_ids[1]") &&
                                         Catch::Contains("a media placeholder token") &&
                                         Catch::Contains("found 250 (the target's image_token_id)") &&
                                         Catch::Contains("text-only data") && Catch::Contains("vision tower"));
  CHECK(eagle::data::load_dataset(jsonl, text).train.size() == 2);  // a text-only target takes the same file
  auto skip = media;
  skip.bad_sample_policy = eagle::config::BadSamplePolicy::skip;
  auto kept = eagle::data::load_dataset(jsonl, skip).train;
  CHECK(kept.size() == 1);
  CHECK(kept.stats().skipped == 1);

  // A prepared file: by sample and position.
  auto ds = eagle::data::Dataset::from_samples({{{1, 2, 3}, {1, 1, 1}}, {{7, 8, 252, 9}, {1, 1, 1, 1}}});
  const auto bin = (dir / "m.bin").string();
  eagle::data::write_dataset_file(bin, ds, {0, 1}, {}, 2048);
  CHECK_THAT(error_of(bin, media), Catch::Contains("m.bin: sample 1, position 2") &&
                                       Catch::Contains("found 252 (the target's vision_start_token_id)"));
  CHECK(eagle::data::load_dataset(bin, text).train.size() == 2);
  // check_token_ids alone: placeholders above the data's largest id are never met.
  CHECK_NOTHROW(eagle::data::check_token_ids(ds, 256, {{253, "vision_end_token_id"}}));
  CHECK_THROWS_WITH(eagle::data::check_token_ids(ds, 256, {{9, "video_token_id"}}),
                    Catch::Contains("sample 1, position 3") && Catch::Contains("video_token_id"));
}

TEST_CASE("max_token_id is kept in the stats (O(1)) and correct for in-memory data", "[data]") {
  auto ds = eagle::data::Dataset::from_samples({{{4, 70000, 2}, {1, 0, 1}}, {{9}, {1}}});
  CHECK(ds.max_token_id() == 70000);
  CHECK(ds.stats().max_token_id == 70000);
  // Storage given with default stats: they are computed.
  eagle::data::Dataset copy(ds.storage(), {}, "x");
  CHECK(copy.max_token_id() == 70000);
  CHECK(copy.stats().trained_tokens == 3);
  CHECK(eagle::data::Dataset().max_token_id() == 0);
}

TEST_CASE("one huge token id costs no memory: counts are bounded by what was seen", "[data]") {
  eagle::test::TempDir dir;
  // 4294967295 is a valid id of the format (uint32); dense per-id counts would take 32 GB.
  eagle::test::write_file(dir / "huge.jsonl", "{\"input_ids\": [1, 2, 4294967295, 3], \"loss_mask\": [0, 1, 1, 1]}\n"
                                              "{\"input_ids\": [4, 5, 6], \"loss_mask\": [0, 1, 1]}\n");
  const std::string data = (dir / "huge.jsonl").string();
  constexpr long kLimitKb = 2L << 20;  // 2 GiB: LibTorch's libraries take about 0.4 of it
  auto stats = eagle::test::run_cli("data-stats --json --data_path " + data);
  INFO(stats.output);
  CHECK(stats.exit_code == 0);
  CHECK(stats.max_rss_kb < kLimitKb);
  auto prep = eagle::test::run_cli("prepare --input " + data + " --output " + (dir / "ds").string());
  INFO(prep.output);
  CHECK(prep.exit_code == 0);
  CHECK(prep.max_rss_kb < kLimitKb);
  auto back = eagle::data::load_dataset((dir / "ds").string(), eagle::test::load_options());
  CHECK(back.train.stats().max_token_id == 4294967295u);
  CHECK(back.train.stats().trained_token_counts.count(4294967295u) == 1);
  CHECK(back.train.stats().trained_token_counts.entries().size() == 5);
  // Training refuses it by file and line (the tiny target has 512 ids), before any tensor exists.
  auto train = eagle::test::run_cli("train --model_name_or_path " EAGLE_SOURCE_DIR
                                    "/tests/fixtures/models/tiny-llama --data_path " + data +
                                    " --output_dir " + (dir / "run").string());
  INFO(train.output);
  CHECK(train.exit_code == 3);
  CHECK_THAT(train.output, Catch::Contains("huge.jsonl: line 1, field input_ids[2]") &&
                               Catch::Contains("4294967295") && Catch::Contains("ids < 512"));
  CHECK(train.max_rss_kb < kLimitKb);
}

TEST_CASE("data inputs that are not regular files are refused by path, in folders too; walks survive symlink loops",
          "[data]") {
  eagle::test::TempDir dir;
  namespace fs = std::filesystem;
  REQUIRE(::mkfifo((dir / "pipe.jsonl").c_str(), 0600) == 0);
  // `timeout` guards the test itself: opening a FIFO would block.
  auto fifo = eagle::test::run_command("timeout 60 " EAGLE_TRAIN_BIN " data-stats --data_path " +
                                       (dir / "pipe.jsonl").string() + " 2>&1");
  INFO(fifo.output);
  CHECK(fifo.exit_code == 3);
  CHECK_THAT(fifo.output, Catch::Contains("pipe.jsonl") && Catch::Contains("FIFO"));
  fs::create_symlink("/dev/null", dir / "null.jsonl");
  auto device = eagle::test::run_cli("data-stats --data_path " + (dir / "null.jsonl").string());
  CHECK(device.exit_code == 3);
  CHECK_THAT(device.output, Catch::Contains("null.jsonl") && Catch::Contains("a device"));
  // A folder whose sub-folder links back to it: each folder is read once.
  fs::create_directories(dir / "data" / "sub");
  eagle::test::write_file(dir / "data" / "sub" / "a.jsonl", "{\"input_ids\": [1, 2, 3, 4], \"loss_mask\": [0, 1, 1, 1]}\n");
  fs::create_directory_symlink(dir / "data", dir / "data" / "sub" / "loop");
  auto walk = eagle::test::run_command("timeout 60 " EAGLE_TRAIN_BIN " data-stats --json --data_path " +
                                       (dir / "data").string() + " 2>&1");
  INFO(walk.output);
  CHECK(walk.exit_code == 0);
  CHECK_THAT(walk.output, Catch::Contains("\"samples\": 1"));
  // In a folder, a sample-file name that is not a regular file is refused by name: never opened (a
  // FIFO blocks), never skipped (its samples would be missing without a word).
  REQUIRE(::mkfifo((dir / "data" / "sub" / "pipe.jsonl").c_str(), 0600) == 0);
  auto pipe = eagle::test::run_command("timeout 60 " EAGLE_TRAIN_BIN " data-stats --json --data_path " +
                                       (dir / "data").string() + " 2>&1");
  INFO(pipe.output);
  CHECK(pipe.exit_code == 3);
  CHECK_THAT(pipe.output, Catch::Contains("sub/pipe.jsonl") && Catch::Contains("FIFO"));
  fs::remove(dir / "data" / "sub" / "pipe.jsonl");
  fs::create_symlink(dir / "gone.jsonl", dir / "data" / "dangling.jsonl");
  auto dangling = eagle::test::run_cli("data-stats --data_path " + (dir / "data").string());
  INFO(dangling.output);
  CHECK(dangling.exit_code == 3);
  CHECK_THAT(dangling.output, Catch::Contains("dangling.jsonl") && Catch::Contains("dangling symbolic link") &&
                                  Catch::Contains("gone.jsonl"));
  fs::remove(dir / "data" / "dangling.jsonl");
  // A folder with a sample file's name is refused too, not walked as a folder (issue 53 L6: it was skipped).
  fs::create_directory(dir / "data" / "c.jsonl");
  auto folder = eagle::test::run_cli("data-stats --data_path " + (dir / "data").string());
  INFO(folder.output);
  CHECK(folder.exit_code == 3);
  CHECK_THAT(folder.output, Catch::Contains("c.jsonl") && Catch::Contains("folder"));
  fs::remove(dir / "data" / "c.jsonl");
  // Names that are not sample files are no data: left alone whatever they are.
  fs::create_symlink(dir / "gone", dir / "data" / "notes.txt");
  CHECK(eagle::test::run_cli("data-stats --data_path " + (dir / "data").string()).exit_code == 0);
}
