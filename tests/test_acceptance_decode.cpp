// The one decoding loop (acceptance/decode.h): decode_prompt with ChainProposer and GreedyVerifier
// equals, prompt by prompt, the greedy chain loop the trainer ran before the acceptance area existed
// (written out below as the reference: head.draft(), the target's forward_cached, the longest
// prefix equal to the target's argmax), for a trained head and two draft lengths; the AR and its
// interval come from the rounds' lengths.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>

#include "acceptance_helpers.h"
#include "eagle/acceptance/decode.h"

using namespace eagle;
using acceptance::PromptAcceptance;

namespace {

// The greedy chain loop of train/evaluate.cpp (acceptance_rate) before the move, for one prompt.
PromptAcceptance reference_chain(const target::TargetModel& target, head::DraftHead& head,
                                 const std::vector<std::int64_t>& prompt, std::int64_t max_new_tokens,
                                 std::int64_t draft_len) {
  torch::NoGradGuard no_grad;
  PromptAcceptance pa;
  const auto device = target.device();
  const auto n = static_cast<std::int64_t>(prompt.size());
  auto tcache = target.new_cache(1, n + max_new_tokens + draft_len + 2);
  auto hcache = head.new_cache(1, n + max_new_tokens + draft_len + 2);
  const auto start = acceptance::prefill_prompt(target, tcache, prompt);
  std::int64_t x = start.last_logits.argmax(-1).item<std::int64_t>();
  auto features = start.aux_hidden;
  auto next_ids = start.next_ids(x);
  pa.generated = 1;
  while (pa.generated < max_new_tokens && !acceptance::is_eos(target.config(), x)) {
    auto drafted = head.draft(hcache, features, next_ids, draft_len);
    auto verify = torch::cat({torch::full({1, 1}, x, next_ids.options()), drafted.to(device)}, 1);
    const std::int64_t before = tcache.length;
    auto vout = target.forward_cached(tcache, verify);
    auto greedy = vout.logits.argmax(-1).view({-1}).cpu();
    auto d = drafted.view({-1}).cpu();
    std::int64_t acc = 0;
    while (acc < draft_len && d[acc].item<std::int64_t>() == greedy[acc].item<std::int64_t>()) ++acc;
    const std::int64_t bonus = greedy[acc].item<std::int64_t>();
    pa.add_round(acc);
    target.truncate(tcache, before + 1 + acc);
    features = vout.aux_hidden.narrow(1, 0, 1 + acc);
    next_ids = torch::cat({drafted.to(device).narrow(1, 0, acc), torch::full({1, 1}, bonus, next_ids.options())}, 1);
    std::vector<std::int64_t> tokens(d.data_ptr<std::int64_t>(), d.data_ptr<std::int64_t>() + acc);
    tokens.push_back(bonus);
    x = bonus;
    if (acceptance::count_new_tokens(target.config(), tokens, max_new_tokens, pa.generated)) break;
  }
  return pa;
}

}  // namespace

TEST_CASE("decode_prompt with a greedy chain equals the reference loop, prompt by prompt", "[acceptance]") {
  test::TrainedSmoke smoke;
  auto& target = smoke.target;
  auto& head = smoke.head;
  const auto prompts = acceptance::eval_prompts(test::smoke_data(), 10);
  REQUIRE(prompts.size() == 10);
  std::int64_t drafts_accepted = 0;
  for (std::int64_t K : {1, 4}) {
    INFO("draft_len " << K);
    acceptance::ChainProposer proposer(K);
    acceptance::GreedyVerifier verifier;
    auto all = acceptance::decode_prompts(target, head, prompts, proposer, verifier, 20);
    REQUIRE(all.per_prompt.size() == prompts.size());
    double sum = 0.0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      INFO("prompt " << i);
      const auto want = reference_chain(target, head, prompts[i], 20, K);
      CHECK(all.per_prompt[i] == want);
      CHECK(acceptance::decode_prompt(target, head, prompts[i], proposer, verifier, 20) == want);
      drafts_accepted += want.accepted - want.rounds;
      sum += static_cast<double>(want.accepted);
    }
    CHECK(all.ar == sum / static_cast<double>(all.rounds));
    CHECK(all.ci95 > 0.0);
  }
  CHECK(drafts_accepted > 0);  // rounds of several lengths: the pending inputs after acceptance are exercised
}

TEST_CASE("the AR and its 95% interval come from the rounds' lengths", "[acceptance]") {
  acceptance::AcceptanceResult r;
  PromptAcceptance a, b;
  a.add_round(0);
  a.add_round(2);
  b.add_round(1);
  r.add(a);
  r.add(b);
  r.finish();
  CHECK(r.rounds == 3);
  CHECK(r.ar == 2.0);  // lengths 1, 3, 2
  CHECK(r.ci95 == Approx(1.96 * 1.0 / std::sqrt(3.0)));
  acceptance::AcceptanceResult one;
  one.add(b);
  one.finish();
  CHECK(one.ar == 2.0);
  CHECK(one.ci95 == 0.0);
}

TEST_CASE("a prompt's prefill, kept at its first decoding, decodes the next depths and modes as a new prefill would",
          "[acceptance]") {
  test::TrainedSmoke smoke;
  const auto prompts = acceptance::eval_prompts(test::smoke_data(), 6);
  acceptance::PrefillStore kept;
  // Each decoding run twice, prefilling anew and from what the first decoding kept: the same rounds.
  auto same = [&](acceptance::Proposer& proposer, acceptance::Verifier& fresh_verifier,
                  acceptance::Verifier& kept_verifier) {
    const auto fresh = acceptance::decode_prompts(smoke.target, smoke.head, prompts, proposer, fresh_verifier, 16);
    const auto reused =
        acceptance::decode_prompts(smoke.target, smoke.head, prompts, proposer, kept_verifier, 16, &kept);
    REQUIRE(reused.per_prompt.size() == fresh.per_prompt.size());
    for (std::size_t i = 0; i < fresh.per_prompt.size(); ++i) {
      INFO("prompt " << i);
      CHECK(reused.per_prompt[i] == fresh.per_prompt[i]);
    }
  };
  for (std::int64_t K : {1, 3}) {
    INFO("chain of " << K);
    acceptance::ChainProposer chain(K);
    acceptance::GreedyVerifier a, b;
    same(chain, a, b);
  }
  REQUIRE(kept.size() == prompts.size());
  for (const auto& k : kept) CHECK(k.has_value());
  {
    INFO("tree");
    acceptance::TreeProposer tree(acceptance::TreeShape{3, 2, 6});
    acceptance::GreedyVerifier a, b;
    same(tree, a, b);
  }
  {
    INFO("temperature 1");
    // One stream of draws per decoding, shared by its proposer and verifier (as measure() does).
    const acceptance::SamplingSettings s{1.0, 1.0, false, 42};
    acceptance::Uniform u1(s.seed), u2(s.seed);
    acceptance::ChainProposer c1(3, s, u1), c2(3, s, u2);
    acceptance::SampledVerifier v1(s, u1), v2(s, u2);
    const auto fresh = acceptance::decode_prompts(smoke.target, smoke.head, prompts, c1, v1, 16);
    const auto reused = acceptance::decode_prompts(smoke.target, smoke.head, prompts, c2, v2, 16, &kept);
    REQUIRE(reused.per_prompt.size() == fresh.per_prompt.size());
    for (std::size_t i = 0; i < fresh.per_prompt.size(); ++i) CHECK(reused.per_prompt[i] == fresh.per_prompt[i]);
  }
}
