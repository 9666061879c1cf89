// The Arrow IPC stream reader and the speculators folder reader on files written by Hugging Face
// datasets 5.2.0 + pyarrow 25.0.1 (scripts/make_speculators_fixture.py): exact values over several
// record batches, the rows of a real speculators folder against the samples they were made from,
// and truncated or corrupt files refused by name, never read past their end.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data_helpers.h"
#include "eagle/data/arrow_stream.h"
#include "eagle/data/speculators_folder.h"
#include "eagle/util/error.h"
#include "fuzz_helpers.h"
#include "helpers.h"

using namespace eagle;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(EAGLE_SOURCE_DIR) / "tests" / "fixtures";
const fs::path kSynthetic = kFixtures / "speculators" / "arrow-2500" / "data-00000-of-00001.arrow";
const fs::path kSpeculators = kFixtures / "speculators" / "tiny-llama";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    return e.format();
  }
  FAIL("no error");
  return "";
}

}  // namespace

TEST_CASE("an Arrow stream of several record batches reads back exactly", "[data]") {
  // Synthetic row i has 1 + i % 7 ids 7*i + k with loss_mask k % 2; one-token rows (no trained
  // token) were dropped by speculators' preprocessing, so 2142 of 2500 rows are stored.
  std::int64_t rows = 0, batches = 0;
  std::int64_t i = 0;  // the synthetic row of the next stored row
  data::read_arrow_stream(kSynthetic.string(), [&](const data::ArrowBatch& b) {
    ++batches;
    const auto& ids = b.column("input_ids", "");
    const auto& mask = b.column("loss_mask", "");
    const auto& len = b.column("seq_len", "");
    CHECK(ids.is_list);
    CHECK(ids.bits == 32);  // datasets narrows a column named input_ids to int32
    CHECK(mask.bits == 64);
    CHECK_FALSE(len.is_list);
    for (std::int64_t r = 0; r < b.rows; ++r, ++rows, ++i) {
      if (i % 7 == 0) ++i;
      auto [ib, ie] = ids.list_range(r);
      auto [mb, me] = mask.list_range(r);
      REQUIRE(ie - ib == 1 + i % 7);
      REQUIRE(me - mb == ie - ib);
      CHECK(len.value(r) == ie - ib);
      for (std::int64_t k = 0; k < ie - ib; ++k) {
        REQUIRE(ids.value(ib + k) == 7 * i + k);
        REQUIRE(mask.value(mb + k) == k % 2);
      }
    }
  });
  CHECK(batches == 3);
  CHECK(rows == 2142);
  CHECK(i == 2499);  // the last stored row is 2498: 2499 is a multiple of 7
}

TEST_CASE("truncated or corrupt Arrow files are refused naming the file", "[data]") {
  test::TempDir tmp;
  const std::string bytes = test::read_file(kSynthetic);
  const auto cut = tmp / "cut.arrow";
  // Cut inside the schema, inside a batch's metadata, inside a body, right after a message.
  for (std::size_t n : {std::size_t{5}, std::size_t{100}, bytes.size() / 3, bytes.size() - 20}) {
    INFO(n);
    test::write_file(cut, bytes.substr(0, n));
    CHECK_THAT(error_of([&] { data::read_arrow_stream(cut.string(), [](const data::ArrowBatch&) {}); }),
               Catch::Contains(cut.string()));
  }
  std::string garbage = bytes;
  for (std::size_t k = 8; k < 200 && k < garbage.size(); k += 3) garbage[k] = static_cast<char>(0xA5);
  test::write_file(cut, garbage);
  CHECK_THAT(error_of([&] { data::read_arrow_stream(cut.string(), [](const data::ArrowBatch&) {}); }),
             Catch::Contains(cut.string()));
}

TEST_CASE("a speculators folder's rows are its source samples, clipped, without untrained rows", "[data]") {
  REQUIRE(data::is_speculators_folder(kSpeculators.string()));
  auto lo = test::load_options(2048);
  auto rows = data::read_speculators_folder(kSpeculators.string(), lo);
  // The fixture: the first 16 samples of smoke.jsonl clipped to 80 tokens, rows without a trained
  // token dropped (as speculators' prepare_data does), then one hidden-state file per kept row.
  auto source = data::load_dataset((kFixtures / "data" / "smoke.jsonl").string(), test::load_options(2048)).train;
  std::vector<data::Sample> expected;
  for (std::size_t i = 0; i < 16; ++i) {
    auto s = source.sample(i);
    s.input_ids.resize(std::min<std::size_t>(80, s.input_ids.size()));
    s.loss_mask.resize(s.input_ids.size());
    bool any = false;
    for (auto m : s.loss_mask) any = any || m;
    if (any) expected.push_back(s);
  }
  CHECK(test::same(test::all_samples(rows.samples), expected));
  CHECK(rows.rows == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});

  // Longer rows follow overlong_policy; the row numbers keep pointing at the hidden-state files.
  auto drop = test::load_options(75);
  drop.overlong_policy = config::OverlongPolicy::drop;
  auto dropped = data::read_speculators_folder(kSpeculators.string(), drop);
  CHECK(dropped.rows == std::vector<std::int64_t>{0});
  CHECK(dropped.samples.length(0) == 72);
  auto truncated = data::read_speculators_folder(kSpeculators.string(), test::load_options(75));
  CHECK(truncated.samples.size() == 8);
  CHECK(truncated.samples.stats().max_length == 75);

  auto small_vocab = lo;
  small_vocab.vocab_size = 100;
  CHECK_THAT(error_of([&] { data::read_speculators_folder(kSpeculators.string(), small_vocab); }),
             Catch::Contains("outside the target's vocabulary") && Catch::Contains("hs_0.safetensors"));
  // A multimodal target's media placeholder in a row: refused by row and position, naming which.
  auto media = lo;
  media.media_tokens = {{static_cast<std::int64_t>(rows.samples.token(0, 3)), "image_token_id"}};
  CHECK_THAT(error_of([&] { data::read_speculators_folder(kSpeculators.string(), media); }),
             Catch::Contains("row 0 (hidden_states/hs_0.safetensors), position") &&
                 Catch::Contains("a media placeholder token") && Catch::Contains("image_token_id"));

  // A state.json whose file entry has a filename of another JSON type: refused by name (was a type_error).
  test::TempDir tmp;
  std::filesystem::copy(kSpeculators, tmp / "spec", std::filesystem::copy_options::recursive);
  auto state = nlohmann::json::parse(test::read_file(tmp / "spec" / "state.json"));
  state["_data_files"][0]["filename"] = 7;
  test::write_file(tmp / "spec" / "state.json", state.dump());
  CHECK_THAT(error_of([&] { data::read_speculators_folder((tmp / "spec").string(), lo); }),
             Catch::Contains("state.json") && Catch::Contains("_data_files"));
}

namespace {

// Reads every value of every column, so a size check that let a bad count through reads outside
// the mapping here (a crash) instead of passing.
void read_all(const std::string& path) {
  data::read_arrow_stream(path, [](const data::ArrowBatch& b) {
    std::int64_t sum = 0;
    for (const auto& c : b.columns)
      for (std::int64_t r = 0; r < c.rows; ++r) {
        auto [lo, hi] = c.is_list ? c.list_range(r) : std::pair<std::int64_t, std::int64_t>{r, r + 1};
        for (std::int64_t k = lo; k < hi; ++k) sum += c.value(k);
      }
    CHECK(sum != 1);  // keeps the reads
  });
}

}  // namespace

TEST_CASE("fuzzed Arrow streams are read or refused, never read outside the file", "[data]") {
  test::TempDir tmp;
  const std::string bytes = test::read_file(kSpeculators / "data-00000-of-00001.arrow");
  const auto path = (tmp / "fuzz.arrow").string();
  test::FuzzCounts counts;
  auto run = [&](const std::string& content, const std::string& what) {
    test::write_file(path, content);
    counts.run(what, [&] { read_all(path); });
  };
  // Every small count of the file (row counts, FieldNode lengths, buffer sizes) replaced at all its
  // places at once by a value that breaks size arithmetic: a row count and its FieldNode lengths of
  // 2^62 together wrapped the offsets' size to 4 bytes and read past the end.
  std::map<std::uint64_t, std::vector<std::size_t>> places;
  for (std::size_t p = 0; p + 8 <= bytes.size(); p += 4) {
    std::uint64_t v;
    std::memcpy(&v, bytes.data() + p, 8);
    if (v >= 1 && v <= 100000) places[v].push_back(p);
  }
  for (const auto& [v, at] : places)
    for (std::uint64_t bad : test::adversarial_values()) {
      std::string s = bytes;
      for (std::size_t p : at) test::put_le(s, p, bad, 8);
      run(s, fmt::format("{} -> {}", v, bad));
    }
  // One field at a time, as int32 and as int64.
  for (std::size_t p = 0; p + 4 <= bytes.size(); p += 4)
    for (std::uint64_t bad : {std::uint64_t{0xffffffff}, std::uint64_t{0x7fffffff}, std::uint64_t{1} << 62}) {
      std::string s = bytes;
      test::put_le(s, p, bad, bad >> 32 ? 8 : 4);
      run(s, fmt::format("offset {} -> {}", p, bad));
    }
  std::mt19937_64 rng(27);
  for (int i = 0; i < 1000; ++i) run(test::random_mutation(bytes, rng), fmt::format("random case {}", i));
  CHECK(counts.ok > 0);
  CHECK(counts.refused > 500);
}

TEST_CASE("an Arrow row count and FieldNode lengths of 2^62 are refused naming the file", "[data]") {
  test::TempDir tmp;
  std::string bytes = test::read_file(kSpeculators / "data-00000-of-00001.arrow");
  std::int64_t rows = 0;
  data::read_arrow_stream((kSpeculators / "data-00000-of-00001.arrow").string(),
                          [&](const data::ArrowBatch& b) { rows += b.rows; });
  std::int64_t replaced = 0;
  for (std::size_t p = 0; p + 8 <= 2048 && p + 8 <= bytes.size(); p += 4) {
    std::int64_t v;
    std::memcpy(&v, bytes.data() + p, 8);
    if (v == rows) {
      test::put_le(bytes, p, std::uint64_t{1} << 62, 8);
      ++replaced;
    }
  }
  REQUIRE(replaced >= 3);  // the batch's row count and the two list columns' FieldNodes
  const auto path = tmp / "huge.arrow";
  test::write_file(path, bytes);
  CHECK_THAT(error_of([&] { read_all(path.string()); }), Catch::Contains(path.string()) && Catch::Contains("overflow"));
}
