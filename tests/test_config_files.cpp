// The shipped configs parse, validate and keep their key settings.
#include <catch2/catch.hpp>

#include "eagle/config/resolve.h"
#include "helpers.h"

using namespace eagle::config;

namespace {
Options load(const std::string& name) {
  Options o;
  apply_json_file(o, std::string(EAGLE_SOURCE_DIR) + "/configs/" + name);
  validate(o, Command::train);
  return o;
}
}  // namespace

TEST_CASE("the Llama 3.1 8B EAGLE-3 recipe parses and validates", "[config]") {
  Options o = load("llama3.1-8b-eagle3.json");
  CHECK(o.eagle_version == 3);
  CHECK(o.training_seq_len == 4096);
  CHECK(o.aux_hidden_state_layer_ids == std::vector<std::int64_t>{2, 16, 29});  // [2, L/2, L-3] for L=32
  CHECK(o.bf16);
  CHECK(o.target_dtype == TargetDtype::bfloat16);
  CHECK(o.draft_vocab_size == 32000);
}
