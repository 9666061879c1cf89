// acceptance::measure's AR at every depth: entry k-1 of ar_by_depth equals the chain AR measured with
// draft length k alone, over the same prompts, batched and one by one; the last entry is ar. Per
// category: the counts add up to the prompts, and each category's numbers are its prompts' own.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "acceptance_helpers.h"
#include "eagle/acceptance/decode.h"
#include "eagle/acceptance/measure.h"
#include "eagle/util/progress.h"

using namespace eagle;

namespace {

acceptance::AcceptanceSettings chain_settings(std::int64_t draft_len, std::int64_t batch_size) {
  acceptance::AcceptanceSettings s;
  s.num_prompts = 8;
  s.max_new_tokens = 20;
  s.draft_len = draft_len;
  s.batch_size = batch_size;
  return s;
}

}  // namespace

TEST_CASE("the AR at each depth k equals a measure drafting k tokens", "[acceptance]") {
  test::TempDir dir;
  auto target = test::tiny_llama();
  auto trained = test::trained_on_replies(dir.path(), target);
  const auto data = test::smoke_data();
  for (std::int64_t rows : {1, 3}) {
    INFO("batch size " << rows);
    const auto all = acceptance::measure(target, *trained, data, chain_settings(4, rows));
    REQUIRE(all.ar);
    REQUIRE(all.ar_ci95);
    REQUIRE(all.ar_by_depth.size() == 4);
    CHECK(all.ar_by_depth.back() == *all.ar);
    for (std::int64_t k = 1; k <= 4; ++k) {
      INFO("depth " << k);
      const auto alone = acceptance::measure(target, *trained, data, chain_settings(k, rows));
      REQUIRE(alone.ar);
      CHECK(all.ar_by_depth[static_cast<std::size_t>(k - 1)] == *alone.ar);  // exactly: the same pass
      CHECK(alone.ar_by_depth.size() == static_cast<std::size_t>(k));
      CHECK(*alone.ar <= static_cast<double>(k + 1));
    }
    // A trained head accepts more tokens a round when it may draft more.
    CHECK(all.ar_by_depth.back() > all.ar_by_depth.front());
  }
}

TEST_CASE("per category: counts add up to the prompts, each AR is its prompts' own", "[acceptance]") {
  test::TempDir dir;
  auto target = test::tiny_llama();
  auto trained = test::trained_head(dir / "run", target);
  const auto smoke = test::smoke_data();
  std::vector<data::Sample> samples;
  for (std::size_t i = 0; i < 12; ++i) {
    samples.push_back(smoke.sample(i));
    samples.back().category = i % 3 == 0 ? "coding" : i % 3 == 1 ? "math" : "";
  }
  const auto data = data::Dataset::from_samples(samples);
  auto s = chain_settings(2, 1);
  s.num_prompts = 9;
  const auto used = acceptance::eval_prompt_samples(data, s.num_prompts);
  REQUIRE(used.size() == 9);
  const auto all = acceptance::measure(target, *trained, data, s);
  REQUIRE(all.ar_by_category.size() == 3);
  std::int64_t count = 0;
  for (const auto& [name, c] : all.ar_by_category) {
    INFO(name);
    count += c.count;
    // The same prompts measured alone give the same numbers.
    std::vector<std::size_t> mine;
    for (auto i : used)
      if (data.category(i) == (name == acceptance::kNoCategory ? std::string() : name)) mine.push_back(i);
    CHECK(static_cast<std::int64_t>(mine.size()) == c.count);
    auto alone_settings = s;
    alone_settings.num_prompts = static_cast<std::int64_t>(mine.size());
    const auto alone = acceptance::measure(target, *trained, data.subset(mine), alone_settings);
    REQUIRE(alone.ar);
    CHECK(c.ar == *alone.ar);
    CHECK(c.ar_ci95 == *alone.ar_ci95);
    CHECK(c.ar_by_depth == alone.ar_by_depth);
    // One category; only uncategorized prompts: none.
    CHECK(alone.ar_by_category.size() == (name == acceptance::kNoCategory ? 0u : 1u));
  }
  CHECK(count == 9);
  CHECK(all.ar_by_category.count(acceptance::kNoCategory) == 1);
}

TEST_CASE("no prompt, no AR by depth", "[acceptance]") {
  auto target = test::tiny_llama();
  torch::manual_seed(1);
  auto cfg = head::HeadConfig::from_target(target.config(), 3, target.aux_layer_ids(), 256);
  head::DraftVocab vocab;
  vocab.target_vocab_size = target.config().vocab_size;
  for (std::int64_t i = 0; i < 256; ++i) vocab.draft_ids.push_back(i);
  auto head = head::make_head(cfg, vocab);
  head->init_from_target(target.embedding_weight(), target.lm_head_weight());
  auto s = chain_settings(2, 4);
  s.num_prompts = 0;
  const auto none = acceptance::measure(target, *head, test::smoke_data(), s);
  CHECK_FALSE(none.ar);
  CHECK(none.ar_by_depth.empty());
  CHECK(none.ar_by_category.empty());
}

TEST_CASE("the eval command's progress line shows each depth pass: prompts, running AR, speed (issue 53 item 7)",
          "[acceptance]") {
  test::TempDir dir;
  auto target = test::tiny_llama();
  auto trained = test::trained_on_replies(dir.path(), target);
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  auto s = chain_settings(3, 1);
  {
    util::ProgressDisplay display("eval", util::ProgressMode::bar, out);
    s.progress = &display;
    const auto stats = acceptance::measure(target, *trained, test::smoke_data(), s);
    REQUIRE(stats.ar);
  }
  std::fflush(out);
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  std::fclose(out);
  // The first pass always draws (a bar redraws at most 5 times a second after it).
  CHECK_THAT(text, Catch::Contains("eval [") && Catch::Contains("depth 1/3 over 8 prompts, AR ") &&
                       Catch::Contains(" tok/s | ") && Catch::Contains(" elapsed | ETA "));
}
