// Drafting many sequences at once (head.h: draft_ragged) equals draft() per sequence: rows of
// different lengths prefilled together (right-padded, as a subset of the cache rows), then every
// row at once with one to K + 1 pending positions and an idle row, for one- and two-layer heads;
// and the heads that cannot draft this way say so.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/head/eagle/eagle1_head.h"
#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/target/target.h"
#include "eagle_test_paths.h"

using namespace eagle;

namespace {

const std::string kTinyLlama = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama";

head::DraftVocab vocab_of(std::int64_t target_vocab, std::int64_t size) {
  head::DraftVocab v;
  v.target_vocab_size = target_vocab;
  for (std::int64_t i = 0; i < size; ++i) v.draft_ids.push_back((i * 7) % target_vocab);
  std::sort(v.draft_ids.begin(), v.draft_ids.end());
  return v;
}

// Right-padded [R, N] of the given rows, padding `pad`.
torch::Tensor padded(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t N, std::int64_t pad) {
  auto out = torch::full({static_cast<std::int64_t>(rows.size()), N}, pad, torch::kInt64);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t k = 0; k < rows[r].size(); ++k)
      out[static_cast<std::int64_t>(r)][static_cast<std::int64_t>(k)] = rows[r][k];
  return out;
}

}  // namespace

TEST_CASE("draft_ragged equals draft() row by row, in a subset of rows and all rows with an idle one", "[head]") {
  auto target = target::TargetModel::load(kTinyLlama, torch::kFloat32, torch::kCPU);
  const auto V = target.config().vocab_size;
  for (std::int64_t layers : {1, 2}) {
    INFO("draft_num_layers " << layers);
    torch::manual_seed(11);
    auto cfg = head::HeadConfig::from_target(target.config(), 3, target.aux_layer_ids(), 64);
    cfg.num_layers = layers;
    head::Eagle3Head head(cfg, vocab_of(V, 64));
    head.init_from_target(target.embedding_weight(), target.lm_head_weight());
    REQUIRE(head.drafts_ragged());
    const std::int64_t K = 3, capacity = 40, spare = capacity - 1;
    // Three sequences: prompts of 9, 4 and 6 tokens with their target features.
    std::vector<std::int64_t> lengths{9, 4, 6};
    std::vector<torch::Tensor> ids, features;
    for (auto n : lengths) {
      ids.push_back(torch::randint(0, V, {1, n + 4}, torch::kInt64));
      auto cache = target.new_cache(1, n + 4);
      features.push_back(target.forward_cached(cache, ids.back()).aux_hidden);
    }
    // One by one: the prefix pass and drafts, then a second round with 1 + acc new positions.
    std::vector<std::int64_t> acc{2, 0, 1};
    std::vector<torch::Tensor> expected_first, expected_second;
    for (std::size_t r = 0; r < 3; ++r) {
      auto cache = head.new_cache(1, capacity);
      const auto n = lengths[r];
      expected_first.push_back(head.draft(cache, features[r].narrow(1, 0, n), ids[r].narrow(1, 1, n), K));
      expected_second.push_back(
          head.draft(cache, features[r].narrow(1, n, 1 + acc[r]), ids[r].narrow(1, n + 1, 1 + acc[r]), K));
    }
    // Batched: rows 0 and 2 prefilled together as a subset, then row 1 alone, into a 4-row cache.
    auto cache = head.new_cache(4, capacity);
    auto prefill = [&](std::vector<std::size_t> seqs, std::vector<std::int64_t> rows) {
      std::int64_t N = 0;
      for (auto s : seqs) N = std::max(N, lengths[s]);
      const auto R = static_cast<std::int64_t>(seqs.size());
      auto f = torch::zeros({R, N, features[0].size(2)});
      std::vector<std::vector<std::int64_t>> next, columns;
      std::vector<std::int64_t> last;
      for (std::int64_t i = 0; i < R; ++i) {
        const auto s = seqs[static_cast<std::size_t>(i)];
        const auto n = lengths[s];
        f[i].narrow(0, 0, n).copy_(features[s][0].narrow(0, 0, n));
        auto t = ids[s][0].narrow(0, 1, n).contiguous();
        next.emplace_back(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + n);
        columns.emplace_back();
        for (std::int64_t k = 0; k < n; ++k) columns.back().push_back(k);
        last.push_back(n - 1);
      }
      return head.draft_ragged(
          cache,
          {f, padded(next, N, 0), padded(columns, N, spare), torch::tensor(rows), torch::tensor(last), N + K - 1}, K);
    };
    auto a = prefill({0, 2}, {0, 2});
    auto b = prefill({1}, {1});
    CHECK(torch::equal(a[0], expected_first[0][0]));
    CHECK(torch::equal(a[1], expected_first[2][0]));
    CHECK(torch::equal(b[0], expected_first[1][0]));
    // Every row at once, row 3 idle: row r's 1 + acc[r] new positions at its own columns.
    const std::int64_t N = K + 1;
    auto f = torch::zeros({4, N, features[0].size(2)});
    std::vector<std::vector<std::int64_t>> next(4), columns(4);
    std::vector<std::int64_t> last(4, 0);
    std::int64_t key_len = 0;
    for (std::size_t r = 0; r < 3; ++r) {
      const auto n = lengths[r], m = 1 + acc[r];
      f[static_cast<std::int64_t>(r)].narrow(0, 0, m).copy_(features[r][0].narrow(0, n, m));
      auto t = ids[r][0].narrow(0, n + 1, m).contiguous();
      next[r].assign(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + m);
      for (std::int64_t k = 0; k < m; ++k) columns[r].push_back(n + k);
      last[r] = m - 1;
      key_len = std::max(key_len, n + m + K - 1);
    }
    auto all = head.draft_ragged(
        cache, {f, padded(next, N, 0), padded(columns, N, spare), {}, torch::tensor(last), key_len}, K);
    REQUIRE(all.sizes() == torch::IntArrayRef{4, K});
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("row " << r);
      CHECK(torch::equal(all[static_cast<std::int64_t>(r)], expected_second[r][0]));
    }
  }
}

TEST_CASE("P-EAGLE and EAGLE-1 heads do not draft many sequences at once", "[head]") {
  auto target = target::TargetModel::load(kTinyLlama, torch::kFloat32, torch::kCPU);
  auto cfg = head::HeadConfig::from_target(target.config(), 3, target.aux_layer_ids(), 64);
  cfg.parallel_drafting = true;
  cfg.mask_token_id = 1;
  head::Eagle3Head parallel(cfg, vocab_of(target.config().vocab_size, 64));
  CHECK_FALSE(parallel.drafts_ragged());
  auto eagle1_cfg = head::HeadConfig::from_target(target.config(), 1, target.aux_layer_ids(), 64);
  head::Eagle1Head eagle1(eagle1_cfg);
  CHECK_FALSE(eagle1.drafts_ragged());
}
