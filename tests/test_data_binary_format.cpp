// eagle-train prepare as a subprocess: exact round trip JSONL -> prepared -> samples, stats.json,
// the stored validation split, refusing to overwrite, usage errors.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "data_helpers.h"
#include "eagle/data/binary_format.h"
#include "eagle/data/flat_builder.h"
#include "eagle/data/loader.h"
#include "eagle/data/stats_file.h"
#include "eagle/run/dir_lock.h"
#include "eagle/util/hash.h"
#include "fuzz_helpers.h"
#include "helpers.h"

using eagle::data::Sample;
using eagle::test::run_cli;
using eagle::test::TempDir;
using eagle::test::all_samples;
using eagle::test::same;
using eagle::test::write_file;

namespace {

eagle::data::LoadOptions opts(std::int64_t seq_len = 2048, double val = 0) {
  return eagle::test::load_options(seq_len, val);
}

std::vector<Sample> make_samples(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Sample> out(n);
  for (auto& s : out) {
    std::size_t len = 1 + rng() % 30;
    for (std::size_t i = 0; i < len; ++i) {
      s.input_ids.push_back(rng() % 3000);
      s.loss_mask.push_back(static_cast<std::uint8_t>(rng() % 2));
    }
    s.loss_mask[len - 1] = 1;
  }
  return out;
}

std::string to_jsonl(const std::vector<Sample>& samples) {
  std::string text;
  for (const auto& s : samples) {
    nlohmann::json j;
    j["input_ids"] = s.input_ids;
    j["loss_mask"] = s.loss_mask;
    text += j.dump() + "\n";
  }
  return text;
}

}  // namespace

TEST_CASE("prepare round trip: JSONL -> prepared -> the same samples, mapped", "[data]") {
  TempDir dir;
  auto samples = make_samples(200, 1);
  write_file(dir / "in.jsonl", to_jsonl(samples));
  auto r = run_cli("prepare --input " + (dir / "in.jsonl").string() + " --output " + (dir / "ds").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("prepare 100%") && Catch::Contains("samples/s"));  // progress, off a terminal
  CHECK(eagle::data::is_prepared_dataset((dir / "ds").string()));
  CHECK_FALSE(std::filesystem::exists(dir / "ds" / eagle::data::kValidationFile));
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))  // the temporary folder is gone
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  auto d = eagle::data::load_dataset((dir / "ds").string(), opts());
  CHECK(same(all_samples(d.train), samples));
  CHECK_FALSE(d.validation);
  CHECK(d.train.storage().token_bytes == 2);
  CHECK(d.train.source() == (dir / "ds" / "train.bin").string());

  // stats.json agrees with the in-memory statistics of the same input.
  auto direct = eagle::data::load_dataset((dir / "in.jsonl").string(), opts()).train.stats();
  auto j = nlohmann::json::parse(eagle::test::read_file(dir / "ds" / "stats.json"));
  CHECK(j["records"] == 200);
  CHECK(j["kept"] == 200);
  const auto& t = j["splits"]["train"];
  CHECK(t["samples"] == 200);
  CHECK(t["tokens"] == direct.tokens);
  CHECK(t["trained_tokens"] == direct.trained_tokens);
  CHECK(eagle::data::TokenCounts(t["trained_token_counts"].get<std::vector<eagle::data::TokenCounts::Entry>>()) ==
        direct.trained_token_counts);
  CHECK(t["length_histogram"].size() == direct.length_histogram.size());
  CHECK(t["length_histogram"][1]["min_length"] == 2);
  CHECK(t["length_histogram"][1]["samples"] == direct.length_histogram[1]);
  CHECK(d.train.stats().trained_token_counts == direct.trained_token_counts);

  // The .bin file alone loads too; a prepared folder without a stored split is split in memory.
  CHECK(same(all_samples(eagle::data::load_dataset((dir / "ds" / "train.bin").string(), opts()).train), samples));
  auto split = eagle::data::load_dataset((dir / "ds").string(), opts(2048, 0.1));
  REQUIRE(split.validation);
  CHECK(split.validation->size() == 20);
  CHECK(split.train.size() == 180);

  // The output exists now: a second prepare refuses to overwrite it (exit 4) and leaves it intact.
  auto again = run_cli("prepare --input " + (dir / "in.jsonl").string() + " --output " + (dir / "ds").string());
  CHECK(again.exit_code == 4);
  CHECK_THAT(again.output, Catch::Contains("already exists"));
  CHECK(eagle::data::is_prepared_dataset((dir / "ds").string()));

  // A prepared folder is not an input of prepare.
  auto nested = run_cli("prepare --input " + (dir / "ds").string() + " --output " + (dir / "ds2").string());
  CHECK(nested.exit_code == 3);
  CHECK_THAT(nested.output, Catch::Contains("is a prepared dataset"));
}

TEST_CASE("prepare: one process per output; a killed prepare's leftovers go at the next start", "[data]") {
  TempDir dir;
  write_file(dir / "in.jsonl", to_jsonl(make_samples(20, 4)));
  const std::string cmd = "prepare --input " + (dir / "in.jsonl").string() + " --output " + (dir / "ds").string();
  {
    // Another process preparing the same output holds its lock (this test process stands in).
    eagle::run::DirLock held((dir / "ds").string() + ".lock", "the prepare output", true);
    auto r = run_cli(cmd);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("in use by another eagle-train process") &&
                             Catch::Contains("pid " + std::to_string(::getpid())));
    CHECK_FALSE(std::filesystem::exists(dir / "ds"));
  }
  std::filesystem::create_directories(dir / "ds.tmp-99999");  // a killed prepare's temporary folder
  write_file(dir / "ds.tmp-99999" / "train.bin", "partial");
  auto r = run_cli(cmd);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("left by an interrupted prepare"));
  CHECK_FALSE(std::filesystem::exists(dir / "ds.tmp-99999"));
  CHECK_FALSE(std::filesystem::exists(dir / "ds.lock"));
  CHECK(eagle::data::is_prepared_dataset((dir / "ds").string()));
}

TEST_CASE("prepare stores a seeded validation split that load_dataset returns", "[data]") {
  TempDir dir;
  auto samples = make_samples(100, 2);
  // Two inputs (a file and a gzip-free folder) are read in the order given.
  std::filesystem::create_directories(dir / "more");
  std::vector<Sample> first(samples.begin(), samples.begin() + 60), rest(samples.begin() + 60, samples.end());
  write_file(dir / "a.jsonl", to_jsonl(first));
  write_file(dir / "more" / "b.jsonl", to_jsonl(rest));
  auto cmd = "prepare --input " + (dir / "a.jsonl").string() + " " + (dir / "more").string() +
             " --validation_fraction 0.1 --seed 5 --training_seq_len 16 --output ";
  auto r = run_cli(cmd + (dir / "ds").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto d = eagle::data::load_dataset((dir / "ds").string(), opts(16));
  REQUIRE(d.validation);

  for (auto& s : samples) {  // what truncation to 16 tokens leaves
    if (s.input_ids.size() > 16) {
      s.input_ids.resize(16);
      s.loss_mask.resize(16);
    }
  }
  std::vector<Sample> kept;
  for (const auto& s : samples)
    if (std::find(s.loss_mask.begin(), s.loss_mask.end(), 1) != s.loss_mask.end()) kept.push_back(s);
  auto vi = eagle::data::validation_indices(kept.size(), 0.1, 5);
  std::vector<Sample> want_val, want_train;
  for (auto i : vi) want_val.push_back(kept[i]);
  for (auto i : eagle::data::complement_indices(kept.size(), vi)) want_train.push_back(kept[i]);
  CHECK(same(all_samples(*d.validation), want_val));
  CHECK(same(all_samples(d.train), want_train));

  // Same seed, same split; the stats file names both splits.
  auto r2 = run_cli(cmd + (dir / "ds2").string());
  REQUIRE(r2.exit_code == 0);
  CHECK(eagle::test::read_file(dir / "ds" / "validation.bin") ==
        eagle::test::read_file(dir / "ds2" / "validation.bin"));
  auto j = nlohmann::json::parse(eagle::test::read_file(dir / "ds" / "stats.json"));
  CHECK(j["splits"]["validation"]["samples"] == want_val.size());
  CHECK(j["truncated"].get<std::uint64_t>() > 0);

  // A run with a shorter training_seq_len cuts the mapped samples in memory.
  auto short_run = eagle::data::load_dataset((dir / "ds").string(), opts(8));
  for (std::size_t i = 0; i < short_run.train.size(); ++i) REQUIRE(short_run.train.length(i) <= 8);
}

TEST_CASE("prepare usage and input errors", "[data]") {
  TempDir dir;
  auto no_input = run_cli("prepare --output " + (dir / "x").string());
  CHECK(no_input.exit_code == 2);
  CHECK_THAT(no_input.output, Catch::Contains("--input"));
  auto missing = run_cli("prepare --input " + (dir / "nope.jsonl").string() + " --output " + (dir / "x").string());
  CHECK(missing.exit_code == 3);
  CHECK_THAT(missing.output, Catch::Contains("nope.jsonl") && Catch::Contains("not found"));
  write_file(dir / "data.txt", "x");
  auto ext = run_cli("prepare --input " + (dir / "data.txt").string() + " --output " + (dir / "x").string());
  CHECK(ext.exit_code == 3);
  CHECK_THAT(ext.output, Catch::Contains("unknown input file type"));
  CHECK_FALSE(std::filesystem::exists(dir / "x"));
}

namespace {

// Overwrites `bytes` at `offset` of a file in place.
void patch(const std::filesystem::path& file, std::uint64_t offset, const void* bytes, std::size_t n) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

}  // namespace

TEST_CASE("a prepared body that disagrees with its header is refused naming the sample and position", "[data]") {
  TempDir dir;
  // Two samples of 4 tokens, ids < 10: the header says max_token_id 9 and 2-byte tokens.
  write_file(dir / "in.jsonl", "{\"input_ids\": [1, 2, 3, 4], \"loss_mask\": [0, 1, 1, 1]}\n"
                               "{\"input_ids\": [5, 6, 7, 9], \"loss_mask\": [0, 0, 1, 1]}\n");
  REQUIRE(run_cli("prepare --input " + (dir / "in.jsonl").string() + " --output " + (dir / "ds").string()).exit_code == 0);
  const auto bin = dir / "ds" / "train.bin";
  const auto h = eagle::data::read_dataset_header(bin.string());
  REQUIRE(h.token_bytes == 2);
  SECTION("a token id above the header's max_token_id (an id the target's vocabulary lacks)") {
    const std::uint16_t big = 60000;
    patch(bin, h.tokens_offset + 2 * 6, &big, 2);  // sample 1, position 2
    auto r = run_cli("data-stats --data_path " + (dir / "ds").string());
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("train.bin") && Catch::Contains("sample 1, position 2") &&
                             Catch::Contains("60000") && Catch::Contains("max_token_id"));
  }
  SECTION("loss-mask bits that do not add up to the header's trained tokens (all zero)") {
    const std::uint8_t zero = 0;
    patch(bin, h.mask_offset, &zero, 1);
    auto r = run_cli("data-stats --data_path " + (dir / "ds").string());
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("train.bin") && Catch::Contains("loss mask does not match the header"));
  }
}

namespace {

// The header's checksum recomputed, so a mutated header reaches the checks behind it.
void reseal(std::string& bytes) {
  eagle::data::DatasetHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.checksum = 0;
  h.checksum = eagle::util::fnv1a(&h, sizeof h);
  std::memcpy(bytes.data(), &h, sizeof h);
}

// Opens the file and reads every sample, so a bad count let through reads outside the mapping.
void open_and_read(const std::string& path) {
  auto ds = eagle::data::open_dataset_file(path);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < ds.size(); ++i)
    for (auto id : ds.sample(i).input_ids) sum += id;
  CHECK(sum != 1);
}

}  // namespace

TEST_CASE("fuzzed prepared-file headers are read or refused, never read outside the file", "[data]") {
  TempDir dir;
  const std::string good_path = (dir / "good.bin").string(), path = (dir / "fuzz.bin").string();
  auto samples = make_samples(40, 27);
  for (std::size_t i = 0; i < samples.size(); i += 2) samples[i].category = i % 4 ? "math" : "coding";
  auto ds = eagle::data::Dataset::from_samples(samples);
  std::vector<std::size_t> all(samples.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  eagle::data::write_dataset_file(good_path, ds, all, {}, 2048);
  const std::string good = eagle::test::read_file(good_path);
  eagle::test::FuzzCounts counts;
  auto run = [&](std::string s, bool seal, const std::string& what) {
    if (seal) reseal(s);
    write_file(path, s);
    counts.run(what, [&] { open_and_read(path); });
  };
  // Every header field (uint32 then uint64) set to each value that breaks size arithmetic, the
  // file's own size and a section's neighbours, with a matching checksum.
  std::vector<std::uint64_t> values = eagle::test::adversarial_values();
  for (std::uint64_t v : {good.size(), good.size() - 64, good.size() + 64, std::uint64_t{256}}) values.push_back(v);
  for (std::size_t p = 8; p < 184; p += p < 24 ? 4 : 8)  // through the categories fields
    for (std::uint64_t v : values) {
      std::string s = good;
      eagle::test::put_le(s, p, v, p < 24 ? 4 : 8);
      run(s, true, "field at " + std::to_string(p) + " = " + std::to_string(v));
    }
  // Two fields at once (a count and a section offset moved together), and random bytes.
  std::mt19937_64 rng(27);
  for (int i = 0; i < 1500; ++i) {
    std::string s = good;
    for (int k = 0; k < 2; ++k) eagle::test::put_le(s, 24 + 8 * (rng() % 20), values[rng() % values.size()], 8);
    run(s, true, "pair case " + std::to_string(i));
  }
  for (int i = 0; i < 1000; ++i) {
    std::string s = eagle::test::random_mutation(good, rng);
    run(s, s.size() >= sizeof(eagle::data::DatasetHeader) && rng() % 2, "random case " + std::to_string(i));
  }
  CHECK(counts.ok > 0);
  CHECK(counts.refused > 1000);
}

TEST_CASE("a stats.json whose length_histogram has entries of another JSON type is refused by name", "[data]") {
  nlohmann::json j = nlohmann::json::parse(R"({"samples": 1, "tokens": 4, "trained_tokens": 2, "max_length": 4,
      "max_token_id": 9, "truncated": 0, "dropped": 0, "skipped": 0, "trained_token_counts": [[9, 2]],
      "length_histogram": [{"samples": 1}]})");
  CHECK(eagle::data::stats_from_json(j, "stats.json").length_histogram == std::vector<std::uint64_t>{1});
  for (const char* bad : {R"([3])", R"([{"samples": "1"}])", R"(5)"}) {
    INFO(bad);
    j["length_histogram"] = nlohmann::json::parse(bad);
    try {
      eagle::data::stats_from_json(j, "stats.json");
      FAIL("accepted");
    } catch (const eagle::Error& e) {  // was nlohmann's type_error (exit 1), or a silent 0
      CHECK_THAT(e.format(), Catch::Contains("stats.json") && Catch::Contains("length_histogram"));
    }
  }
}
