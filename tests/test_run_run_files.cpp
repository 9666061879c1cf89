// The run's files (run/run_files.h): config.json (read back as a config file) and
// command_line.txt, a line per start.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "eagle/config/resolve.h"
#include "eagle/run/run_files.h"
#include "helpers.h"

using namespace eagle::run;
using nlohmann::json;

TEST_CASE("config.json and command_line.txt of the run", "[run]") {
  CHECK(shell_quote({"eagle-train", "train", "--max_steps", "20"}) == "eagle-train train --max_steps 20");
  CHECK(shell_quote({"a b", "it's", "", "x=1,2"}) == "'a b' 'it'\\''s' '' x=1,2");
  eagle::test::TempDir tmp;
  eagle::config::Options o;
  o.max_steps = 20;
  o.output_dir = tmp.path().string();
  write_run_files(tmp.path(), o, {"eagle-train", "train", "--max_steps", "20", "--output_dir", o.output_dir});
  json cfg = json::parse(eagle::test::read_file(tmp / "config.json"));
  CHECK(cfg == eagle::config::to_json(o, eagle::config::Command::train));
  CHECK(cfg["max_steps"] == 20);
  // The saved config is accepted back as a config file, giving the same options.
  eagle::config::Options back;
  eagle::config::apply_json_file(back, (tmp / "config.json").string());
  CHECK(eagle::config::to_json(back, eagle::config::Command::train) == cfg);
  std::string first = "eagle-train train --max_steps 20 --output_dir " + tmp.path().string() + "\n";
  CHECK(eagle::test::read_file(tmp / "command_line.txt") == first);
  // A resumed start adds its own line below.
  write_run_files(tmp.path(), o, {"eagle-train", "train", "--resume_from_checkpoint", "auto"});
  CHECK(eagle::test::read_file(tmp / "command_line.txt") ==
        first + "eagle-train train --resume_from_checkpoint auto\n");
}
