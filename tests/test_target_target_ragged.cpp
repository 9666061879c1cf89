// The per-row cached forward of batched generation equals the unbatched forward: rows of different
// lengths prefilled together (right-padded), decoded together, extended as a subset of rows, and a
// row reused by a shorter sequence after a longer one (its stale columns never attended).
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

// One ragged step: rows[i] extended by seqs[i] starting at column starts[i].
RaggedStep step(const std::vector<torch::Tensor>& seqs, const std::vector<std::int64_t>& starts,
                const std::vector<std::int64_t>& rows, bool all_rows) {
  std::int64_t N = 0, key_len = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    N = std::max(N, seqs[i].size(0));
    key_len = std::max(key_len, starts[i] + seqs[i].size(0));
  }
  const auto R = static_cast<std::int64_t>(seqs.size());
  auto ids = torch::zeros({R, N}, torch::kInt64), columns = torch::full({R, N}, kSpare, torch::kInt64);
  auto last = torch::zeros({R}, torch::kInt64);
  for (std::int64_t i = 0; i < R; ++i) {
    const auto n = seqs[i].size(0);
    ids[i].narrow(0, 0, n).copy_(seqs[i]);
    columns[i].narrow(0, 0, n).copy_(torch::arange(starts[i], starts[i] + n));
    last[i] = n - 1;
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
