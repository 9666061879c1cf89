// A sample's category: read from JSONL (a string or null; anything else refused by name), kept by
// splits, subsets and copies, written to and read back from a prepared file (version 3's categories
// section, a damaged section refused), and through `eagle-train prepare` with its validation split.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>

#include "data_helpers.h"
#include "eagle/data/binary_format.h"
#include "eagle/data/categories.h"
#include "eagle/data/flat_builder.h"
#include "eagle/data/loader.h"
#include "eagle/util/error.h"
#include "helpers.h"

using eagle::data::Dataset;
using eagle::data::Sample;
using eagle::data::SampleCategories;
using eagle::test::run_cli;
using eagle::test::TempDir;
using eagle::test::write_file;

namespace {

std::vector<Sample> categorized(std::size_t n) {
  std::vector<Sample> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].input_ids = {1, static_cast<eagle::data::TokenId>(10 + i), 7, 8};
    out[i].loss_mask = {0, 0, 1, 1};
    out[i].category = i % 3 == 0 ? "coding" : i % 3 == 1 ? "math" : "";
  }
  return out;
}

std::string to_jsonl(const std::vector<Sample>& samples) {
  std::string text;
  for (const auto& s : samples) {
    nlohmann::json j{{"input_ids", s.input_ids}, {"loss_mask", s.loss_mask}};
    if (!s.category.empty()) j["category"] = s.category;
    text += j.dump() + "\n";
  }
  return text;
}

std::vector<std::string> categories_of(const Dataset& ds) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ds.size(); ++i) out.push_back(ds.category(i));
  return out;
}

}  // namespace

TEST_CASE("JSONL samples carry their category; null or absent is none", "[data]") {
  TempDir dir;
  write_file(dir / "in.jsonl", R"({"input_ids": [1, 2, 3], "category": "coding"}
{"input_ids": [1, 2, 4], "category": null}
{"input_ids": [1, 2, 5]}
{"input_ids": [1, 2, 6], "category": "math", "id": "x"}
)");
  auto d = eagle::data::load_dataset((dir / "in.jsonl").string(), eagle::test::load_options(256));
  REQUIRE(d.train.has_categories());
  CHECK(categories_of(d.train) == std::vector<std::string>{"coding", "", "", "math"});
  CHECK(d.train.sample(3).category == "math");
  // No category anywhere: none stored.
  write_file(dir / "plain.jsonl", "{\"input_ids\": [1, 2, 3]}\n");
  auto plain = eagle::data::load_dataset((dir / "plain.jsonl").string(), eagle::test::load_options(256));
  CHECK_FALSE(plain.train.has_categories());
  CHECK(plain.train.category(0).empty());
}

TEST_CASE("a category that is not a short string is refused by line and field", "[data]") {
  TempDir dir;
  for (const auto& [value, message] : std::vector<std::pair<std::string, std::string>>{
           {"5", "field category is not a string"},
           {"[\"a\"]", "field category is not a string"},
           {"\"" + std::string(eagle::data::kMaxCategoryBytes + 1, 'x') + "\"", "field category is too long"}}) {
    INFO(value);
    write_file(dir / "bad.jsonl", "{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 2], \"category\": " + value + "}\n");
    try {
      eagle::data::load_dataset((dir / "bad.jsonl").string(), eagle::test::load_options(256));
      FAIL("accepted");
    } catch (const eagle::Error& e) {
      CHECK_THAT(e.format(), Catch::Contains("line 2") && Catch::Contains(message));
    }
  }
  write_file(dir / "twice.jsonl", R"({"input_ids": [1, 2], "category": "a", "category": "b"})" "\n");
  CHECK_THROWS_WITH(eagle::data::load_dataset((dir / "twice.jsonl").string(), eagle::test::load_options(256)),
                    Catch::Contains("field given twice"));
}

TEST_CASE("splits, subsets and copies keep each sample's category", "[data]") {
  const auto samples = categorized(30);
  const auto all = Dataset::from_samples(samples);
  REQUIRE(all.has_categories());
  CHECK(eagle::test::same(eagle::test::all_samples(all), samples));
  const std::vector<std::size_t> picked{4, 0, 29};
  CHECK(categories_of(all.subset(picked)) == std::vector<std::string>{"math", "coding", ""});
  CHECK(categories_of(eagle::data::copy_samples(all, picked, "copy")) == std::vector<std::string>{"math", "coding", ""});
  auto split = eagle::data::split_dataset(all, 0.2, 7, "mem");
  REQUIRE(split.validation);
  for (std::size_t j = 0; j < split.indices.validation.size(); ++j)
    CHECK(split.validation->category(j) == samples[split.indices.validation[j]].category);
  for (std::size_t j = 0; j < split.indices.train.size(); ++j)
    CHECK(split.train.category(j) == samples[split.indices.train[j]].category);
}

TEST_CASE("prepared files store the categories; prepare keeps them in both splits", "[data]") {
  TempDir dir;
  const auto samples = categorized(40);
  const auto all = Dataset::from_samples(samples);
  const std::vector<std::size_t> some{39, 1, 2, 3};
  eagle::data::write_dataset_file((dir / "x.bin").string(), all, some, {}, 256);
  CHECK(eagle::data::read_dataset_header((dir / "x.bin").string()).version == 3);
  auto back = eagle::data::open_dataset_file((dir / "x.bin").string());
  CHECK(categories_of(back) == std::vector<std::string>{"coding", "math", "", "coding"});  // 39, 1, 2, 3
  // A dataset without categories writes no section.
  auto plain = samples;
  for (auto& s : plain) s.category.clear();
  eagle::data::write_dataset_file((dir / "plain.bin").string(), Dataset::from_samples(plain), some, {}, 256);
  CHECK(eagle::data::read_dataset_header((dir / "plain.bin").string()).category_names == 0);
  CHECK_FALSE(eagle::data::open_dataset_file((dir / "plain.bin").string()).has_categories());

  // JSONL -> prepare (validation split) -> the split load_dataset makes of the same JSONL in memory.
  write_file(dir / "in.jsonl", to_jsonl(samples));
  auto r = run_cli("prepare --input " + (dir / "in.jsonl").string() + " --output " + (dir / "ds").string() +
                   " --validation_fraction 0.25 --seed 3");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto prepared = eagle::data::load_dataset((dir / "ds").string(), eagle::test::load_options(256));
  auto o = eagle::test::load_options(256, 0.25);
  o.seed = 3;
  auto direct = eagle::data::load_dataset((dir / "in.jsonl").string(), o);
  REQUIRE(prepared.validation);
  REQUIRE(direct.validation);
  CHECK(eagle::test::same(eagle::test::all_samples(*prepared.validation), eagle::test::all_samples(*direct.validation)));
  CHECK(eagle::test::same(eagle::test::all_samples(prepared.train), eagle::test::all_samples(direct.train)));
  CHECK(prepared.validation->has_categories());
}

TEST_CASE("the categories section round-trips and a damaged one is refused", "[data]") {
  SampleCategories c;
  for (const char* name : {"coding", "", "math", "coding", "qa"}) c.add(name);
  CHECK(c.names() == std::vector<std::string>{"", "coding", "math", "qa"});
  const std::vector<std::size_t> order{4, 3, 2, 1, 0};
  const std::string section = c.encode(order);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(section.data());
  auto back = SampleCategories::decode(bytes, section.size(), c.names().size(), order.size(), "f.bin");
  REQUIRE(back.size() == 5);
  for (std::size_t j = 0; j < order.size(); ++j) CHECK(back.of(j) == c.of(order[j]));
  auto refused = [&](std::string s, std::uint64_t names, std::uint64_t samples, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(SampleCategories::decode(reinterpret_cast<const std::uint8_t*>(s.data()), s.size(), names,
                                               samples, "f.bin"),
                      Catch::Contains("f.bin") && Catch::Contains("section categories"));
  };
  refused(section, 4, 6, "one sample more than stored");
  refused(section + "xxxx", 4, 5, "extra bytes");
  refused(section, 0, 5, "no names");
  refused(section, std::uint64_t{1} << 61, 5, "a name count whose table overflows");
  std::string beyond = section;
  const std::uint32_t nine = 9;
  std::memcpy(beyond.data() + beyond.size() - 4, &nine, 4);
  refused(beyond, 4, 5, "an index beyond the names");
  std::string first = section;
  const std::uint64_t one = 1;
  std::memcpy(first.data(), &one, 8);
  refused(first, 4, 5, "a first name that is not empty");
  SampleCategories two;
  two.add("ab");
  two.add("cd");
  std::string twice = two.encode({0, 1});  // names "", "ab", "cd": 24 bytes of ends, then "abcd"
  std::memcpy(twice.data() + 24 + 2, "ab", 2);
  refused(twice, 3, 2, "a name given twice");
}
