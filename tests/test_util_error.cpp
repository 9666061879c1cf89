// The error type: formatting of file/place/expected/found/hint and the exit-code mapping.
#include <catch2/catch.hpp>

#include "eagle/util/error.h"

using namespace eagle;

TEST_CASE("errors format every part that is present", "[util]") {
  Error e = Error(ErrorKind::input, "bad loss_mask value").file("data.jsonl").place("line 3, field \"loss_mask\"")
                .expected("0 or 1").found("2").hint("use labels with -100 instead");
  CHECK(e.format() ==
        "data.jsonl: line 3, field \"loss_mask\": bad loss_mask value: expected 0 or 1, found 2 (hint: use labels "
        "with -100 instead)");
  CHECK(std::string(e.what()) == e.format());
  CHECK(Error(ErrorKind::internal, "boom").format() == "boom");
  CHECK(Error(ErrorKind::input, "x").found("y").format() == "x: found y");
}

TEST_CASE("error kinds map to documented exit codes", "[util]") {
  CHECK(exit_code_of(ErrorKind::usage) == ExitCode::usage);
  CHECK(static_cast<int>(ExitCode::usage) == 2);
  CHECK(static_cast<int>(exit_code_of(ErrorKind::input)) == 3);
  CHECK(static_cast<int>(exit_code_of(ErrorKind::output)) == 4);
  CHECK(static_cast<int>(exit_code_of(ErrorKind::training)) == 5);
  CHECK(static_cast<int>(exit_code_of(ErrorKind::gate)) == 6);
  CHECK(static_cast<int>(exit_code_of(ErrorKind::interrupted)) == 130);
  CHECK(static_cast<int>(exit_code_of(ErrorKind::internal)) == 1);
}

TEST_CASE("a source that stays down exits 4 as output; as() changes the kind alone", "[util]") {
  CHECK(exit_code_of(ErrorKind::source_down) == ExitCode::output);
  const Error e = Error(ErrorKind::output, "failed").file("f").place("p").expected("e").found("x").hint("h");
  const Error down = e.as(ErrorKind::source_down);
  CHECK(down.kind() == ErrorKind::source_down);
  CHECK(e.kind() == ErrorKind::output);
  CHECK(down.format() == e.format());
}

TEST_CASE("EAGLE_CHECK throws only when the condition fails", "[util]") {
  auto check = [](bool cond) { EAGLE_CHECK(cond, Error(ErrorKind::input, "failed")); };
  CHECK_NOTHROW(check(true));
  CHECK_THROWS_AS(check(false), Error);
}

TEST_CASE("a huge path or value is cut in the middle, never echoed whole", "[util]") {
  const std::string path = "/data/" + std::string(50u << 20, 'x') + "/train.jsonl";
  Error e = Error(ErrorKind::input, "input not found").file(path).found(std::string(1u << 20, 'y'));
  const std::string text = e.format();
  CHECK(text.size() < 1200);
  CHECK_THAT(text, Catch::StartsWith("/data/xxx") && Catch::Contains("/train.jsonl: input not found") &&
                       Catch::Contains(std::to_string(path.size()) + " bytes"));
}
