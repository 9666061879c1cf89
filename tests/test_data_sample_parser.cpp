// Validation of pretokenized samples: every error names file, line (or array index) and field, in
// process and through `eagle-train prepare` (exit code 3); bad-sample and overlong policies.
#include <catch2/catch.hpp>

#include "eagle/data/loader.h"
#include "eagle/util/error.h"
#include "helpers.h"

using eagle::test::run_cli;
using eagle::test::TempDir;
using eagle::test::write_file;

namespace {

eagle::data::LoadOptions opts(std::int64_t seq_len = 2048,
                              eagle::config::BadSamplePolicy bad = eagle::config::BadSamplePolicy::error,
                              eagle::config::OverlongPolicy over = eagle::config::OverlongPolicy::truncate) {
  return {seq_len, bad, over, 0, 42};
}

struct BadCase {
  const char* sample;         // written as line 2 of a JSONL file after one good line
  std::vector<const char*> expected;  // parts of the message
};

const std::vector<BadCase> kBad = {
    {"{\"input_ids\": [1, 2,}", {"malformed JSON", "line 2"}},
    {"{\"input_ids\": [1, 2]} {\"x\": 1}", {"malformed JSON", "line 2", "content after the object"}},
    {"[1, 2, 3]", {"not a JSON object", "line 2"}},
    {"{\"loss_mask\": [1, 1]}", {"input_ids is missing", "line 2", "field input_ids"}},
    {"{\"input_ids\": 7}", {"not an array", "line 2", "field input_ids", "found 7"}},
    {"{\"input_ids\": [1, 2.5]}", {"not an integer", "line 2, field input_ids[1]", "found 2.5"}},
    {"{\"input_ids\": [1, \"a\"]}", {"not an integer", "field input_ids[1]", "found \"a\""}},
    {"{\"input_ids\": [3, -1]}", {"negative", "line 2, field input_ids[1]", "found -1"}},
    {"{\"input_ids\": [4294967296]}", {"too large", "field input_ids[0]", "found 4294967296"}},
    {"{\"input_ids\": [1, 2], \"loss_mask\": [1]}",
     {"loss_mask length differs", "line 2, field loss_mask", "expected 2 entries, found 1"}},
    {"{\"input_ids\": [1, 2], \"labels\": [1, 2, 3]}",
     {"labels length differs", "field labels", "expected 2 entries, found 3"}},
    {"{\"input_ids\": [1, 2], \"loss_mask\": [1, 2]}", {"not 0 or 1", "line 2, field loss_mask[1]", "found 2"}},
    {"{\"input_ids\": [5, 6, 7], \"labels\": [-100, 7, -100]}",
     {"labels differ from input_ids", "line 2, field labels[1]", "found 7", "shifted"}},
    {"{\"input_ids\": [1, 2], \"labels\": [1, 2], \"loss_mask\": [1, 1]}", {"both labels and loss_mask", "line 2"}},
    {"{\"input_ids\": []}", {"empty sample", "line 2", "field input_ids"}},
    {"{\"input_ids\": [1, 2], \"loss_mask\": [0, 0]}", {"no trained token", "line 2", "field loss_mask"}},
    {"{\"input_ids\": [1, 2], \"labels\": [-100, -100]}", {"no trained token", "line 2", "field labels"}},
    {"{\"input_ids\": [1], \"input_ids\": [2]}", {"given twice", "line 2", "field input_ids"}},
};

const char* kGood = "{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, 1]}\n";

}  // namespace

TEST_CASE("each validation error names file, line and field", "[data]") {
  TempDir dir;
  for (const auto& c : kBad) {
    INFO(c.sample);
    auto path = dir / "bad.jsonl";
    write_file(path, std::string(kGood) + c.sample + "\n" + kGood);
    try {
      eagle::data::load_dataset(path.string(), opts());
      FAIL("accepted");
    } catch (const eagle::Error& e) {
      CHECK(e.exit_code() == eagle::ExitCode::input);
      CHECK(e.file() == path.string());
      for (const char* part : c.expected) CHECK_THAT(e.format(), Catch::Contains(part));
    }
  }
}

TEST_CASE("errors in a JSON array name the array index and its line", "[data]") {
  TempDir dir;
  write_file(dir / "a.json", "[\n  {\"input_ids\": [1]},\n  {\"input_ids\": [1, -4]}\n]\n");
  try {
    eagle::data::load_dataset((dir / "a.json").string(), opts());
    FAIL("accepted");
  } catch (const eagle::Error& e) {
    CHECK_THAT(e.format(), Catch::Contains("a.json") && Catch::Contains("array index 1 (line 3)") &&
                               Catch::Contains("field input_ids[1]") && Catch::Contains("negative"));
  }
  write_file(dir / "b.json", "[{\"input_ids\": [1]}, {\"input_ids\": [2]\n");
  CHECK_THROWS_WITH(eagle::data::load_dataset((dir / "b.json").string(), opts()), Catch::Contains("malformed JSON"));
  write_file(dir / "c.json", "[{\"input_ids\": [1]}, \"unclosed\n");  // fails before any element
  CHECK_THROWS_WITH(eagle::data::load_dataset((dir / "c.json").string(), opts()),
                    Catch::Contains("c.json") && Catch::Contains("malformed JSON"));
}

TEST_CASE("prepare exits 3 on each validation error with the file, line and field", "[data]") {
  TempDir dir;
  for (const auto& c : kBad) {
    INFO(c.sample);
    auto path = dir / "bad.jsonl";
    write_file(path, std::string(kGood) + c.sample + "\n");
    auto r = run_cli("prepare --input " + path.string() + " --output " + (dir / "out").string());
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains(path.string()));
    for (const char* part : c.expected) CHECK_THAT(r.output, Catch::Contains(part));
    CHECK_FALSE(std::filesystem::exists(dir / "out"));
  }
}

TEST_CASE("bad_sample_policy skip counts bad samples and keeps the good ones", "[data]") {
  TempDir dir;
  std::string text = kGood;
  for (const auto& c : kBad) text += std::string(c.sample) + "\n";
  text += "{\"input_ids\": [9, 8]}\n";
  write_file(dir / "mixed.jsonl", text);
  auto d = eagle::data::load_dataset((dir / "mixed.jsonl").string(), opts(2048, eagle::config::BadSamplePolicy::skip));
  REQUIRE(d.train.size() == 2);
  CHECK(d.train.sample(0).input_ids == std::vector<eagle::data::TokenId>{1, 2, 3});
  CHECK(d.train.sample(1).input_ids == std::vector<eagle::data::TokenId>{9, 8});
  CHECK(d.train.stats().skipped == kBad.size());

  // In a JSON array, elements with errors are skipped the same way.
  write_file(dir / "arr.json",
             "[{\"input_ids\": [1, \"x\"]}, {\"input_ids\": [4]}, {\"input_ids\": [1], \"loss_mask\": [3]}, "
             "{\"input_ids\": [5, 6]}]");
  auto a = eagle::data::load_dataset((dir / "arr.json").string(), opts(2048, eagle::config::BadSamplePolicy::skip));
  REQUIRE(a.train.size() == 2);
  CHECK(a.train.sample(1).input_ids == std::vector<eagle::data::TokenId>{5, 6});
  CHECK(a.train.stats().skipped == 2);
}

TEST_CASE("overlong_policy truncate cuts samples, drop removes them, both counted", "[data]") {
  TempDir dir;
  write_file(dir / "long.jsonl",
             "{\"input_ids\": [1, 2, 3, 4, 5, 6], \"loss_mask\": [1, 0, 1, 0, 1, 1]}\n"
             "{\"input_ids\": [7, 8, 9]}\n"
             "{\"input_ids\": [1, 2, 3, 4, 5], \"loss_mask\": [0, 0, 0, 0, 1]}\n");  // trained only past the cut
  auto t = eagle::data::load_dataset((dir / "long.jsonl").string(), opts(4));
  REQUIRE(t.train.size() == 2);
  CHECK(t.train.sample(0).input_ids == std::vector<eagle::data::TokenId>{1, 2, 3, 4});
  CHECK(t.train.sample(0).loss_mask == std::vector<std::uint8_t>{1, 0, 1, 0});
  CHECK(t.train.stats().truncated == 1);
  CHECK(t.train.stats().dropped == 1);

  auto d = eagle::data::load_dataset((dir / "long.jsonl").string(), opts(4, eagle::config::BadSamplePolicy::error,
                                                                         eagle::config::OverlongPolicy::drop));
  REQUIRE(d.train.size() == 1);
  CHECK(d.train.sample(0).input_ids == std::vector<eagle::data::TokenId>{7, 8, 9});
  CHECK(d.train.stats().dropped == 2);
  CHECK(d.train.stats().truncated == 0);
}
