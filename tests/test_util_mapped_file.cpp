// Whole-file mappings (util/mapped_file.h): the bytes of the file, an empty file, and errors that
// name the file.
#include <catch2/catch.hpp>

#include <string>

#include "eagle/util/mapped_file.h"
#include "helpers.h"

using namespace eagle;

TEST_CASE("MappedFile maps the bytes of a whole file", "[util]") {
  test::TempDir tmp;
  test::write_file(tmp / "a.bin", std::string("abc\0def", 7));
  const util::MappedFile m(tmp / "a.bin");
  REQUIRE(m.size() == 7);
  CHECK(std::string(reinterpret_cast<const char*>(m.data()), m.size()) == std::string("abc\0def", 7));
  CHECK(m.path() == (tmp / "a.bin").string());

  // Copy-on-write: a write changes this process's pages, not the file.
  const util::MappedFile c(tmp / "a.bin", "the file", util::MappedFile::Access::copy_on_write);
  c.writable_data()[0] = 'X';
  CHECK(c.data()[0] == 'X');
  CHECK(test::read_file(tmp / "a.bin")[0] == 'a');

  test::write_file(tmp / "empty.bin", "");
  const util::MappedFile e(tmp / "empty.bin");
  CHECK(e.size() == 0);
}

TEST_CASE("MappedFile of a missing file or a folder names it", "[util]") {
  test::TempDir tmp;
  try {
    util::MappedFile m(tmp / "none.bin", "the dataset file");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    CHECK(e.file() == (tmp / "none.bin").string());
    CHECK(e.message() == "the dataset file not found");
  }
  try {
    util::MappedFile m(tmp.path());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.file() == tmp.path().string());
    CHECK(e.found() == "a folder");
  }
}
