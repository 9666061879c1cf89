// A sample's turns and their regeneration rules, exactly, on hand-built samples (no model): which
// tokens the target is given, where replies stop, the template's tokens after an end id, the context
// limit under both overlong policies, and samples copied unchanged.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "eagle/data/regeneration.h"

using namespace eagle::data;
using eagle::config::OverlongPolicy;

namespace {

Sample make(std::vector<TokenId> ids, std::vector<std::uint8_t> mask) { return {std::move(ids), std::move(mask)}; }

std::vector<TokenId> pending(const Regeneration& r) { return {r.pending().begin(), r.pending().end()}; }

// Feeds the pending tokens and accepts `token`, as the generator does after a forward.
void step(Regeneration& r, TokenId token) {
  REQUIRE(!r.finished());
  r.mark_fed();
  r.accept(token);
}

GenerationLimits limits(std::int64_t max_new, std::int64_t context, OverlongPolicy p = OverlongPolicy::truncate) {
  return {max_new, context, p, {2}};
}

}  // namespace

TEST_CASE("turns are the loss-mask runs: untrained prompt, trained reply, untrained tail", "[data]") {
  auto turns = split_turns(make({1, 10, 11, 12, 13, 14, 15, 16}, {0, 0, 1, 1, 0, 1, 0, 0}));
  REQUIRE(turns.size() == 2);
  CHECK((turns[0].prompt_begin == 0 && turns[0].reply_begin == 2 && turns[0].reply_end == 4));
  CHECK((turns[1].prompt_begin == 4 && turns[1].reply_begin == 5 && turns[1].reply_end == 6));
  CHECK(split_turns(make({1, 2}, {0, 0})).empty());
  auto first_trained = split_turns(make({1, 2, 3}, {1, 1, 0}));
  REQUIRE(first_trained.size() == 1);
  CHECK(first_trained[0].reply_begin == 0);
}

TEST_CASE("two turns: the user turns are kept, both replies replaced, the tail kept", "[data]") {
  // <bos> u u | a a <eos> | u | a <eos> | t
  Regeneration r(make({1, 20, 21, 30, 31, 2, 22, 32, 2, 40}, {0, 0, 0, 1, 1, 1, 0, 1, 1, 0}), limits(8, 64));
  CHECK(pending(r) == std::vector<TokenId>{1, 20, 21});
  CHECK(r.cached() == 0);
  step(r, 50);
  CHECK(pending(r) == std::vector<TokenId>{50});
  CHECK(r.cached() == 3);
  step(r, 2);  // the end id closes reply 1; turn 2's prompt follows it
  CHECK(pending(r) == std::vector<TokenId>{2, 22});
  CHECK(r.cached() == 4);
  step(r, 51);
  step(r, 52);
  step(r, 2);
  REQUIRE(r.finished());
  CHECK(r.outcome() == Outcome::regenerated);
  CHECK(r.output().input_ids == std::vector<TokenId>{1, 20, 21, 50, 2, 22, 51, 52, 2, 40});
  CHECK(r.output().loss_mask == std::vector<std::uint8_t>{0, 0, 0, 1, 1, 0, 1, 1, 1, 0});
  CHECK(r.generated() == 5);
  CHECK(r.stopped_by_end() == 2);
  CHECK(r.stopped_by_length() == 0);
  CHECK(!r.truncated());
}

TEST_CASE("the template's trained tokens after the source reply's end id follow a generated end id", "[data]") {
  // Chat templates train "<|im_end|>\n": the "\n" (id 9) is not generated but must stay.
  Regeneration r(make({1, 20, 30, 2, 9, 21, 31, 2, 9}, {0, 0, 1, 1, 1, 0, 1, 1, 1}), limits(8, 64));
  step(r, 50);
  step(r, 2);
  CHECK(pending(r) == std::vector<TokenId>{2, 9, 21});
  step(r, 51);
  step(r, 52);
  step(r, 2);
  REQUIRE(r.finished());
  CHECK(r.output().input_ids == std::vector<TokenId>{1, 20, 50, 2, 9, 21, 51, 52, 2, 9});
  CHECK(r.output().loss_mask == std::vector<std::uint8_t>{0, 0, 1, 1, 1, 0, 1, 1, 1, 1});
}

TEST_CASE("max_new_tokens ends a reply without an end id", "[data]") {
  Regeneration r(make({1, 20, 30, 21, 31}, {0, 0, 1, 0, 1}), limits(3, 64));
  for (TokenId t : {50, 51, 52}) step(r, t);
  CHECK(pending(r) == std::vector<TokenId>{52, 21});  // turn 2 starts right after the cut reply
  for (TokenId t : {53, 54, 55}) step(r, t);
  REQUIRE(r.finished());
  CHECK(r.output().input_ids == std::vector<TokenId>{1, 20, 50, 51, 52, 21, 53, 54, 55});
  CHECK(r.stopped_by_length() == 2);
  CHECK(r.stopped_by_end() == 0);
  CHECK(r.generated() == 6);
}

TEST_CASE("the context limit cuts replies and refuses prompts per overlong_policy", "[data]") {
  const auto two_turns = make({1, 20, 30, 21, 22, 23, 31}, {0, 0, 1, 0, 0, 0, 1});
  SECTION("a reply reaching the context ends; the next prompt no longer fits") {
    for (auto policy : {OverlongPolicy::truncate, OverlongPolicy::drop}) {
      Regeneration r(two_turns, limits(100, 5, policy));
      for (TokenId t : {50, 51, 52}) step(r, t);
      REQUIRE(r.finished());
      CHECK(r.stopped_by_length() == 1);
      CHECK(r.truncated());
      if (policy == OverlongPolicy::truncate) {
        CHECK(r.outcome() == Outcome::regenerated);  // turn 1 kept
        CHECK(r.output().input_ids == std::vector<TokenId>{1, 20, 50, 51, 52});
      } else {
        CHECK(r.outcome() == Outcome::dropped);
      }
    }
  }
  SECTION("a first prompt that leaves no room for a token drops the sample under both policies") {
    for (auto policy : {OverlongPolicy::truncate, OverlongPolicy::drop}) {
      Regeneration r(make({1, 20, 21, 30}, {0, 0, 0, 1}), limits(8, 3, policy));
      CHECK(r.outcome() == Outcome::dropped);
    }
    Regeneration fits(make({1, 20, 21, 30}, {0, 0, 0, 1}), limits(8, 4));
    CHECK(!fits.finished());
  }
  SECTION("the tail is cut at the context") {
    Regeneration r(make({1, 20, 30, 40, 41, 42}, {0, 0, 1, 0, 0, 0}), limits(100, 5));
    step(r, 2);
    REQUIRE(r.finished());
    CHECK(r.output().input_ids == std::vector<TokenId>{1, 20, 2, 40, 41});
    CHECK(r.truncated());
  }
}

TEST_CASE("samples without a trained token or without a prompt are copied unchanged", "[data]") {
  const auto untrained = make({1, 2, 3}, {0, 0, 0});
  Regeneration a(untrained, limits(8, 64));
  CHECK(a.outcome() == Outcome::copied);
  CHECK(a.output().input_ids == untrained.input_ids);
  CHECK(a.output().loss_mask == untrained.loss_mask);
  Regeneration b(make({5, 6, 7}, {1, 1, 1}), limits(8, 64));
  CHECK(b.outcome() == Outcome::copied);
  CHECK(b.generated() == 0);
}

TEST_CASE("regeneration counts add up per outcome and survive JSON", "[data]") {
  RegenerationCounts c;
  Regeneration copied(make({1, 2}, {0, 0}), limits(8, 64));
  Regeneration dropped(make({1, 20, 21, 30}, {0, 0, 0, 1}), limits(8, 3));
  Regeneration done(make({1, 20, 30}, {0, 0, 1}), limits(2, 64));
  step(done, 50);
  step(done, 51);
  for (const auto* r : {&copied, &dropped, &done}) c.add(*r);
  CHECK(c.samples == 3);
  CHECK((c.copied == 1 && c.dropped == 1 && c.regenerated == 1));
  CHECK((c.generated_tokens == 2 && c.stopped_by_length == 1 && c.stopped_by_end == 0));
  auto back = RegenerationCounts::from_json(c.to_json(), "p");
  CHECK(back.to_json() == c.to_json());
  CHECK(RegenerationCounts::from_json(nlohmann::json(), "p").samples == 0);
  CHECK_THROWS_WITH(RegenerationCounts::from_json(nlohmann::json{{"samples", -1}}, "p"), Catch::Contains("counts."));
}
