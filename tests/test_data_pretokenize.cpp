// scripts/pretokenize.py: its own exact checks (tests/pretokenize_test.py, run with the project's
// venv Python), and the real Alpaca file turned into byte-level data that eagle-train reads.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "eagle/data/loader.h"
#include "helpers.h"

using eagle::test::TempDir;

namespace {

using eagle::test::venv_python;

int shell(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("pretokenize.py: byte level, ShareGPT/OpenAI/Alpaca, BPE with and without a chat template", "[data]") {
  std::string cmd = venv_python() + " " EAGLE_SOURCE_DIR "/tests/pretokenize_test.py";
  CHECK(shell(cmd) == 0);
}

TEST_CASE("the real Alpaca file becomes byte-level training data", "[data]") {
  TempDir dir;
  auto out = (dir / "alpaca.jsonl").string();
  const std::string alpaca = EAGLE_SOURCE_DIR "/data/alpaca_5000.json.gz";  // shipped with the repo
  std::string cmd =
      venv_python() + " " EAGLE_SOURCE_DIR "/scripts/pretokenize.py --byte-level " + alpaca + " -o " + out;
  REQUIRE(shell(cmd) == 0);
  eagle::data::LoadOptions o{4096, eagle::config::BadSamplePolicy::error, eagle::config::OverlongPolicy::truncate, 0.05,
                             1};
  auto d = eagle::data::load_dataset(out, o);
  REQUIRE(d.validation);
  CHECK(d.train.size() + d.validation->size() == 4998);  // 2 records have an empty output
  CHECK(d.validation->size() == 250);
  CHECK(d.train.max_token_id() <= 258);
  CHECK(d.train.stats().trained_tokens > 0);
  CHECK(d.train.stats().trained_tokens < d.train.stats().tokens);
}
