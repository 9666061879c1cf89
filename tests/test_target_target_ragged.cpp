// The per-row cached forward of batched generation equals the unbatched forward: rows of different
// lengths prefilled together (right-padded), decoded together, extended as a subset of rows, and a
// row reused by a shorter sequence after a longer one (its stale columns never attended); the hybrid
// targets' Gated DeltaNet rows also rolled back to their own accepted lengths.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "helpers.h"

using namespace eagle;
using eagle::target::RaggedStep;
using eagle::target::TargetModel;

namespace {

std::string model_dir(const std::string& name) {
  return std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

constexpr std::int64_t kCapacity = 33;  // columns 0..31 for tokens, 32 spare
constexpr std::int64_t kSpare = kCapacity - 1;

// The logits of the unbatched forward at every position of ids [T].
torch::Tensor full_logits(const TargetModel& m, const torch::Tensor& ids) {
  auto cache = m.new_cache(1, ids.size(0));
  return m.forward_cached(cache, ids.view({1, -1})).logits[0];
}

// One ragged step: rows[i] extended by seqs[i] starting at column starts[i] (an empty seqs[i]: the row idles at
// the spare column).
RaggedStep step(const std::vector<torch::Tensor>& seqs, const std::vector<std::int64_t>& starts,
                const std::vector<std::int64_t>& rows, bool all_rows, std::int64_t spare = kSpare) {
  std::int64_t N = 0, key_len = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    N = std::max(N, seqs[i].size(0));
    key_len = std::max(key_len, starts[i] + seqs[i].size(0));
  }
  const auto R = static_cast<std::int64_t>(seqs.size());
  auto ids = torch::zeros({R, N}, torch::kInt64), columns = torch::full({R, N}, spare, torch::kInt64);
  auto last = torch::zeros({R}, torch::kInt64);
  for (std::int64_t i = 0; i < R; ++i) {
    const auto n = seqs[i].size(0);
    ids[i].narrow(0, 0, n).copy_(seqs[i]);
    columns[i].narrow(0, 0, n).copy_(torch::arange(starts[i], starts[i] + n));
    last[i] = std::max<std::int64_t>(n - 1, 0);
  }
  return {ids, columns, all_rows ? torch::Tensor() : torch::tensor(rows, torch::kInt64), last, key_len};
}

double max_err(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("ragged prefill and decode equal the unbatched forward for every family", "[target]") {
  // (tiny-phi3's longrope switches with the call's length: its own case below.)
  for (const char* name : {"tiny-llama",      "tiny-llama3",         "tiny-mistral",
                           "tiny-qwen2",      "tiny-qwen3",          "tiny-qwen3-moe",
                           "tiny-mixtral",    "tiny-gpt-oss",        "tiny-gpt-oss-mxfp4",
                           "tiny-gemma3",     "tiny-gemma2",         "tiny-phi4",
                           "tiny-qwen3-yarn", "tiny-mistral-window", "tiny-qwen2-window",
                           "tiny-qwen3-fp8",  "tiny-deepseek-v3",    "tiny-deepseek-v3-nolora",
                           "tiny-glm4-moe",   "tiny-glm4-moe-lite",  "tiny-gemma4",
                           "tiny-deepseek-v2", "tiny-gemma4-moe"}) {
    INFO(name);
    auto m = TargetModel::load(model_dir(name), torch::kFloat32, torch::kCPU);
    torch::manual_seed(7);
    const auto V = m.config().vocab_size;
    // Three sequences of different lengths, each of a prompt and three decoded tokens.
    std::vector<torch::Tensor> seqs{torch::randint(3, V, {12}), torch::randint(3, V, {5}), torch::randint(3, V, {9})};
    std::vector<std::int64_t> prompt{7, 2, 9};
    std::vector<torch::Tensor> expected;
    for (const auto& s : seqs) expected.push_back(full_logits(m, s));

    auto cache = m.new_cache(3, kCapacity);
    // Rows 0 and 2 prefilled together (right-padded), then row 1 alone.
    auto first =
        m.forward_ragged(cache, step({seqs[0].narrow(0, 0, 7), seqs[2].narrow(0, 0, 9)}, {0, 0}, {0, 2}, false));
    CHECK(first.sizes() == torch::IntArrayRef{2, V});
    CHECK(first.scalar_type() == torch::kFloat32);
    CHECK(max_err(first[0], expected[0][6]) <= 1e-4);
    CHECK(max_err(first[1], expected[2][8]) <= 1e-4);
    auto second = m.forward_ragged(cache, step({seqs[1].narrow(0, 0, 2)}, {0}, {1}, false));
    CHECK(max_err(second[0], expected[1][1]) <= 1e-4);
    // Decode all rows together: one token each at its own position (row 2 is already done: it
    // idles at the spare column, as the graphed decode step does).
    for (std::int64_t k = 0; k < 3; ++k) {
      auto ids = torch::stack({seqs[0][7 + k], seqs[1][2 + k], torch::tensor(0)}).view({3, 1});
      auto columns = torch::tensor({7 + k, 2 + k, kSpare}).view({3, 1});
      auto out = m.forward_ragged(cache, {ids, columns, {}, torch::zeros({3}, torch::kInt64), 8 + k});
      CHECK(max_err(out[0], expected[0][7 + k]) <= 1e-4);
      CHECK(max_err(out[1], expected[1][2 + k]) <= 1e-4);
    }
    // Row 0 goes on with two tokens at once while the others wait.
    auto more = m.forward_ragged(cache, step({seqs[0].narrow(0, 10, 2)}, {10}, {0}, false));
    CHECK(max_err(more[0], expected[0][11]) <= 1e-4);

    // Row 0 is reused by a shorter sequence: its old columns 3.. are stale and must not be seen.
    auto reuse = torch::randint(3, V, {3});
    auto out = m.forward_ragged(cache, step({reuse}, {0}, {0}, false));
    CHECK(max_err(out[0], full_logits(m, reuse)[2]) <= 1e-4);
    // All rows in order without a gather give the same as with one.
    auto a = m.forward_ragged(cache, step({reuse.narrow(0, 2, 1), seqs[1].narrow(0, 4, 1), seqs[2].narrow(0, 8, 1)},
                                          {2, 4, 8}, {0, 1, 2}, true));
    auto b = m.forward_ragged(cache, step({reuse.narrow(0, 2, 1), seqs[1].narrow(0, 4, 1), seqs[2].narrow(0, 8, 1)},
                                          {2, 4, 8}, {0, 1, 2}, false));
    CHECK(max_err(a, b) <= 1e-5);
    CHECK(max_err(a[2], expected[2][8]) <= 1e-4);
  }
}

TEST_CASE("ragged decode with longrope: each row takes the long factors once its sequence outgrows the original",
          "[target]") {
  // tiny-phi3: original context 8. Row 0's prompt of 10 is past it from the start: its prefill and
  // decode equal the full forward. Row 1's prompt of 5 uses the short factors as its own unpadded
  // forward does, whatever row 0 holds in the same step.
  auto m = TargetModel::load(model_dir("tiny-phi3"), torch::kFloat32, torch::kCPU);
  torch::manual_seed(11);
  const auto V = m.config().vocab_size;
  const auto long_seq = torch::randint(3, V, {12}), short_seq = torch::randint(3, V, {5});
  const auto expected_long = full_logits(m, long_seq), expected_short = full_logits(m, short_seq);
  auto cache = m.new_cache(2, kCapacity);
  auto first = m.forward_ragged(cache, step({long_seq.narrow(0, 0, 10), short_seq}, {0, 0}, {0, 1}, false));
  CHECK(max_err(first[0], expected_long[9]) <= 1e-4);
  CHECK(max_err(first[1], expected_short[4]) <= 1e-4);
  for (std::int64_t k = 0; k < 2; ++k) {
    auto ids = torch::stack({long_seq[10 + k], torch::tensor(0)}).view({2, 1});
    auto columns = torch::tensor({10 + k, kSpare}).view({2, 1});
    auto out = m.forward_ragged(cache, {ids, columns, {}, torch::zeros({2}, torch::kInt64), 11 + k});
    CHECK(max_err(out[0], expected_long[10 + k]) <= 1e-4);
  }
}

TEST_CASE("a malformed ragged step is refused by name", "[target]") {
  auto m = TargetModel::load(model_dir("tiny-llama"), torch::kFloat32, torch::kCPU);
  auto cache = m.new_cache(2, 8);
  auto ids = torch::zeros({2, 1}, torch::kInt64);
  auto last = torch::zeros({2}, torch::kInt64);
  CHECK_THROWS_WITH(m.forward_ragged(cache, {ids, torch::zeros({2, 2}, torch::kInt64), {}, last, 1}),
                    Catch::Contains("columns"));
  CHECK_THROWS_WITH(m.forward_ragged(cache, {ids, torch::zeros({2, 1}, torch::kInt64), {}, last, 9}),
                    Catch::Contains("outside the KV cache"));
  CHECK_THROWS_WITH(
      m.forward_ragged(cache, {ids.narrow(0, 0, 1), torch::zeros({1, 1}, torch::kInt64), {}, last.narrow(0, 0, 1), 1}),
      Catch::Contains("rows"));
}

TEST_CASE("forward_ragged_all gives every position's features and logits as forward_cached does", "[target]") {
  for (const char* name :
       {"tiny-llama", "tiny-qwen3", "tiny-gpt-oss", "tiny-gemma2", "tiny-mistral-window", "tiny-gemma4",
        "tiny-gemma4-moe"}) {
    INFO(name);
    auto m = TargetModel::load(model_dir(name), torch::kFloat32, torch::kCPU);
    torch::manual_seed(5);
    const auto V = m.config().vocab_size;
    std::vector<torch::Tensor> seqs{torch::randint(3, V, {13}), torch::randint(3, V, {8})};
    std::vector<eagle::target::TargetStepOutput> expected;
    for (const auto& s : seqs) {
      auto cache = m.new_cache(1, s.size(0));
      expected.push_back(m.forward_cached(cache, s.view({1, -1})));
    }
    auto cache = m.new_cache(2, kCapacity);
    // Prompts of 9 and 4 tokens together, right-padded; then 4 tokens for each row at once (a
    // verify step), each at its own columns.
    auto check_rows = [&](const eagle::target::TargetStepOutput& out, const std::vector<std::int64_t>& starts,
                          const std::vector<std::int64_t>& counts) {
      for (std::size_t r = 0; r < starts.size(); ++r) {
        const auto row = static_cast<std::int64_t>(r);
        INFO("row " << r);
        const auto& e = expected[r];
        CHECK(max_err(out.logits[row].narrow(0, 0, counts[r]), e.logits[0].narrow(0, starts[r], counts[r])) <= 1e-4);
        CHECK(max_err(out.aux_hidden[row].narrow(0, 0, counts[r]), e.aux_hidden[0].narrow(0, starts[r], counts[r])) <=
              1e-4);
        CHECK(max_err(out.final_hidden[row].narrow(0, 0, counts[r]),
                      e.final_hidden[0].narrow(0, starts[r], counts[r])) <= 1e-4);
      }
    };
    auto prefill =
        m.forward_ragged_all(cache, step({seqs[0].narrow(0, 0, 9), seqs[1].narrow(0, 0, 4)}, {0, 0}, {0, 1}, false));
    CHECK(prefill.logits.sizes() == torch::IntArrayRef{2, 9, V});
    CHECK(prefill.aux_hidden.size(2) == m.config().hidden_size * static_cast<std::int64_t>(m.aux_layer_ids().size()));
    check_rows(prefill, {0, 0}, {9, 4});
    auto verify =
        m.forward_ragged_all(cache, step({seqs[0].narrow(0, 9, 4), seqs[1].narrow(0, 4, 4)}, {9, 4}, {0, 1}, true));
    check_rows(verify, {9, 4}, {4, 4});
  }
}

TEST_CASE("hybrid targets: ragged rows equal each row decoded alone, rolled back to their own lengths", "[target]") {
  // The Gated DeltaNet states per row (KvCache::RaggedLinear): prompts of different lengths prefilled together (the
  // chunked form, padding inert), steps of different token counts per row (the recurrent form), rows rolled back to
  // different accepted lengths inside their last step, an idle row, a subset of rows, a row reused from column 0,
  // and a long step that is not logged. Each row equals its own forward_cached calls of the same tokens (truncated
  // where the row rolled back).
  constexpr std::int64_t kCap = 97, kLog = 6;  // columns 0..95, 96 spare; steps of at most 6 columns are logged
  for (const char* name : {"tiny-qwen3-5", "tiny-qwen3-5-moe", "tiny-qwen3-next"}) {
    INFO(name);
    auto m = TargetModel::load(model_dir(name), torch::kFloat32, torch::kCPU);
    torch::manual_seed(13);
    const auto V = m.config().vocab_size;
    auto tokens = [&](std::int64_t n) { return torch::randint(3, V, {n}); };
    const std::vector<torch::Tensor> seq{tokens(48), tokens(40), tokens(60)};
    auto cache = m.new_cache(3, kCap, kLog);
    std::vector<eagle::target::KvCache> alone;
    for (int r = 0; r < 3; ++r) alone.push_back(m.new_cache(1, kCap));
    // One ragged step (forward_ragged_all, or forward_ragged's last logits) against each row's forward_cached of its
    // tokens. fp32 within 1e-5 of the logits' scale: tiny-qwen3-5's tied logits reach 51, where transformers itself
    // moves by 1.5e-5 between a row alone and in a batch of 3 (measured).
    auto run = [&](const std::vector<torch::Tensor>& toks, const std::vector<std::int64_t>& starts,
                   const std::vector<std::int64_t>& rows, bool all_rows, bool every_position = true) {
      const auto st = step(toks, starts, rows, all_rows, kCap - 1);
      eagle::target::TargetStepOutput out;
      if (every_position)
        out = m.forward_ragged_all(cache, st);
      else
        out.logits = m.forward_ragged(cache, st).unsqueeze(1);
      for (std::size_t i = 0; i < toks.size(); ++i) {
        const auto n = toks[i].size(0);
        if (n == 0) continue;
        auto& a = alone[static_cast<std::size_t>(rows[i])];
        INFO("row " << rows[i] << " at column " << starts[i] << ", " << n << " tokens");
        REQUIRE(a.length == starts[i]);
        const auto e = m.forward_cached(a, toks[i].view({1, n}));
        const auto got = every_position ? out.logits[i].narrow(0, 0, n) : out.logits[i];
        const auto want = every_position ? e.logits[0] : e.logits[0].narrow(0, n - 1, 1);
        CHECK(max_err(got, want) <= 1e-5 * want.abs().max().item<double>());
        CHECK(torch::equal(got.argmax(-1), want.argmax(-1)));
        if (every_position)
          CHECK(max_err(out.aux_hidden[i].narrow(0, 0, n), e.aux_hidden[0]) <=
                1e-5 * e.aux_hidden.abs().max().item<double>());
      }
    };
    auto cat = [](const std::vector<torch::Tensor>& parts) { return torch::cat(parts); };
    const auto idle = torch::zeros({0}, torch::kInt64);

    // Rows 0 and 2 prefilled together (40 and 25 tokens: chunked, not logged), then row 1 alone (5: logged).
    run({seq[0].narrow(0, 0, 40), seq[2].narrow(0, 0, 25)}, {0, 0}, {0, 2}, false);
    run({seq[1].narrow(0, 0, 5)}, {0}, {1}, false);
    // A verification of 3, 1 and 6 tokens; rows 0 and 2 accept 1 and 4 of them (the rest are other tokens), row 1 all.
    run({cat({seq[0].narrow(0, 40, 1), tokens(2)}), seq[1].narrow(0, 5, 1), cat({seq[2].narrow(0, 25, 4), tokens(2)})},
        {40, 5, 25}, {0, 1, 2}, false);
    m.truncate(alone[0], 41);
    m.truncate(alone[2], 29);
    // Each row goes on from its accepted prefix (all rows in order, no gather).
    run({seq[0].narrow(0, 41, 2), seq[1].narrow(0, 6, 4), seq[2].narrow(0, 29, 1)}, {41, 6, 29}, {0, 1, 2}, true);
    // Row 1 idles (all padding leaves its states as they are), then goes on alone.
    run({seq[0].narrow(0, 43, 1), idle, seq[2].narrow(0, 30, 1)}, {43, 10, 30}, {0, 1, 2}, true, false);
    run({seq[1].narrow(0, 10, 2)}, {10}, {1}, false);
    // Row 0 reused by a new sequence from column 0: its states start from zero.
    const auto reuse = tokens(30);
    alone[0] = m.new_cache(1, kCap);
    run({reuse.narrow(0, 0, 3)}, {0}, {0}, false);
    // A long step (20, 18, 19 tokens: chunked, not logged) after each row's logged one, then a verification of which
    // rows 0 and 1 accept a prefix, then one more step from there.
    run({reuse.narrow(0, 3, 20), seq[1].narrow(0, 12, 18), seq[2].narrow(0, 31, 19)}, {3, 12, 31}, {0, 1, 2}, true);
    run({cat({reuse.narrow(0, 23, 1), tokens(2)}), cat({seq[1].narrow(0, 30, 1), tokens(1)}), seq[2].narrow(0, 50, 3)},
        {23, 30, 50}, {0, 1, 2}, true);
    m.truncate(alone[0], 24);
    m.truncate(alone[1], 31);
    run({reuse.narrow(0, 24, 2), seq[1].narrow(0, 31, 1), seq[2].narrow(0, 53, 2)}, {24, 31, 53}, {0, 1, 2}, true,
        false);
  }
}
