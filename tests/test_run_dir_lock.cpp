// The exclusive lock of an output: a second holder is refused naming the first one's pid; the lock
// goes with its holder (destroyed, or the process dead).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "eagle/run/dir_lock.h"
#include "eagle/util/error.h"
#include "helpers.h"

using eagle::run::DirLock;
namespace fs = std::filesystem;

TEST_CASE("an output lock has one holder at a time and names it", "[run]") {
  eagle::test::TempDir tmp;
  const fs::path lock_file = tmp / ".lock";
  {
    DirLock first(lock_file, "output_dir");
    try {
      DirLock second(lock_file, "output_dir");
      FAIL("a second lock on the same file was granted");
    } catch (const eagle::Error& e) {
      CHECK(e.kind() == eagle::ErrorKind::usage);
      CHECK(e.exit_code() == eagle::ExitCode::usage);
      CHECK_THAT(e.format(), Catch::Contains("in use by another eagle-train process") &&
                                 Catch::Contains("pid " + std::to_string(::getpid())) &&
                                 Catch::Contains(tmp.path().string()));
    }
  }
  DirLock again(lock_file, "output_dir");  // released with its holder
  CHECK(fs::exists(lock_file));
  {
    DirLock beside(tmp / "out.lock", "the prepare output", /*remove_on_release=*/true);
    CHECK(fs::exists(tmp / "out.lock"));
  }
  CHECK_FALSE(fs::exists(tmp / "out.lock"));
}
