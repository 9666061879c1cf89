// Reading a JSON object from a file (util/json_file.h): each failure an Error(input) naming the file,
// and the typed field read with its missing / wrong-type errors.
#include <catch2/catch.hpp>

#include "eagle/util/json_file.h"
#include "helpers.h"

using namespace eagle;

namespace {

// The error read_json_object throws for `path`, or an empty one when it reads fine.
Error read_error(const std::filesystem::path& path) {
  try {
    util::read_json_object(path, "test config", "fix the test", "rewrite it");
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::internal, "");
}

}  // namespace

TEST_CASE("read_json_object reads an object and names the file in every error", "[util]") {
  test::TempDir tmp;
  test::write_file(tmp / "ok.json", R"({"a": 1, "b": [2, 3]})");
  const auto j = util::read_json_object(tmp / "ok.json", "test config");
  CHECK(j["a"] == 1);
  CHECK(j["b"].size() == 2);

  const auto missing = read_error(tmp / "none.json");
  CHECK(missing.kind() == ErrorKind::input);
  CHECK(missing.file() == (tmp / "none.json").string());
  CHECK(missing.message() == "the test config not found");

  test::write_file(tmp / "bad.json", "{\"a\": [1,}");
  const auto bad = read_error(tmp / "bad.json");
  CHECK(bad.kind() == ErrorKind::input);
  CHECK(bad.file() == (tmp / "bad.json").string());
  CHECK(bad.message() == "test config is not valid JSON");
  CHECK_FALSE(bad.found().empty());
  CHECK(bad.hint() == "rewrite it");

  test::write_file(tmp / "list.json", "[1, 2]");
  const auto list = read_error(tmp / "list.json");
  CHECK(list.message() == "test config is not a JSON object");
  CHECK(list.file() == (tmp / "list.json").string());

  CHECK(read_error(tmp.path()).message() == "the test config is not a regular file");

  // A key twice, at the top or nested (a DFlash config with two block sizes): refused by name (issue 53 L5);
  // the same key in two objects is not a duplicate.
  test::write_file(tmp / "twice.json", R"({"block_size": 4, "dflash_config": {"a": 1}, "block_size": 8})");
  const auto twice = read_error(tmp / "twice.json");
  CHECK(twice.kind() == ErrorKind::input);
  CHECK(twice.message() == "a key is given twice in the test config");
  CHECK(twice.place() == "key \"block_size\"");
  test::write_file(tmp / "nested.json", R"({"d": {"mask_token_id": 1, "mask_token_id": 2}})");
  CHECK(read_error(tmp / "nested.json").place() == "key \"mask_token_id\"");
  test::write_file(tmp / "apart.json", R"({"a": {"k": 1}, "b": {"k": 2}, "k": 3})");
  CHECK(util::read_json_object(tmp / "apart.json", "test config")["k"] == 3);
}

TEST_CASE("json_field reads a typed field or names the missing or mistyped one", "[util]") {
  const auto j = nlohmann::json::parse(R"({"n": 3, "s": "x", "v": [1, 2]})");
  CHECK(util::json_field<std::int64_t>(j, "n", "f.json") == 3);
  CHECK(util::json_field<std::string>(j, "s", "f.json") == "x");
  CHECK(util::json_field<std::vector<int>>(j, "v", "f.json") == std::vector<int>{1, 2});
  CHECK(util::json_field_or(j, "absent", 7.5, "f.json") == 7.5);
  CHECK(util::json_field_or(j, "n", std::int64_t{9}, "f.json") == 3);

  try {
    util::json_field<std::int64_t>(j, "absent", "f.json");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.format() == "f.json: field absent: required field missing");
  }
  try {
    util::json_field<std::int64_t>(j, "s", "f.json");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    CHECK(e.place() == "field s");
    CHECK(e.message() == "field has the wrong type");
  }
  CHECK_THROWS_AS(util::json_field_or(j, "s", std::int64_t{0}, "f.json"), Error);
}
