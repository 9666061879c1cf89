// The DFlash block draft (--draft dflash) on the tiny Qwen3 target against
// scripts/make_dflash_reference.py's independent PyTorch forward of vLLM's DFlashQwen3ForCausalLM
// and of one training step: the blocks' logits, the loss and every gradient (soft and hard CE,
// chunked and unchunked loss), the block-sparse attention against the dense mask, the anchors,
// the drafting rounds of vLLM's greedy loop (one row, and ragged rows at once), and the export vLLM 0.32
// and SGLang load with its import.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <nlohmann/json.hpp>

#include "eagle/head/dflash/attention.h"
#include "eagle/head/dflash/head.h"
#include "eagle/head/dflash/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "helpers.h"

using namespace eagle;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kQwen3 = kRoot + "models/tiny-qwen3";

std::map<std::string, torch::Tensor> reference() {
  return model::load_safetensors(kRoot + "reference/dflash-head.safetensors");
}

head::DFlashSettings fixture_settings() {
  head::DFlashSettings s;
  s.block_size = 4;
  s.num_layers = 2;
  s.target_layer_ids = {1, 0};  // sorted by the config (vLLM's ascending order)
  s.mask_token_id = 255;
  s.num_anchors = 5;
  s.decay_gamma = 4.0;
  return s;
}

// The reference's draft: its weights under the checkpoint names, the target's embedding and LM head.
std::shared_ptr<head::DFlashHead> reference_head(std::map<std::string, torch::Tensor>& ref, bool hard = false,
                                                 std::int64_t chunk = 0) {
  auto settings = fixture_settings();
  settings.hard_labels = hard;
  auto cfg = head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), settings);
  cfg.loss_chunk_size = chunk;
  auto h = std::make_shared<head::DFlashHead>(cfg);
  torch::NoGradGuard ng;
  for (auto& p : h->named_parameters()) {
    INFO(p.key());
    REQUIRE(ref.count("param." + p.key()));
    p.value().copy_(ref.at("param." + p.key()));
  }
  auto ends = target::TargetModel::load_ends(kQwen3, torch::kFloat32, torch::kCPU);
  h->set_target_weights(ends.embed, ends.lm_head);
  return h;
}

head::HeadInputs reference_inputs(std::map<std::string, torch::Tensor>& ref) {
  head::HeadInputs in;
  in.input_ids = ref.at("input_ids");
  in.position_ids = ref.at("position_ids");
  in.document_ids = ref.at("document_ids");
  in.loss_mask = ref.at("loss_mask");
  in.aux_hidden = ref.at("aux_hidden");
  in.teacher_logits = ref.at("target_logits");
  in.target_argmax = ref.at("target_argmax");
  in.extra = ref.at("anchors");
  return in;
}

}  // namespace

TEST_CASE("a DFlash config follows its target and SpecForge's default target layers", "[head]") {
  auto cfg = head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), fixture_settings());
  CHECK(cfg.dflash());
  CHECK(cfg.steps() == 3);
  CHECK(cfg.aux_layer_ids == std::vector<std::int64_t>{1, 2});  // hidden_states[t + 1]
  CHECK(head::dflash_target_layer_ids(cfg) == std::vector<std::int64_t>{0, 1});
  CHECK(cfg.hidden_size == 48);
  CHECK(cfg.head_dim == 20);
  CHECK(cfg.qk_norm);
  CHECK(cfg.draft_vocab_size == 256);
  CHECK(head::dflash_default_target_layer_ids(36, 5) == std::vector<std::int64_t>{1, 9, 17, 25, 33});
  CHECK(head::dflash_default_target_layer_ids(32, 5) == std::vector<std::int64_t>{1, 8, 15, 22, 29});
  CHECK(head::dflash_default_target_layer_ids(36, 1) == std::vector<std::int64_t>{18});
  auto bad = fixture_settings();
  bad.mask_token_id = 256;
  CHECK_THROWS_WITH(head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), bad),
                    Catch::Contains("mask token inside the target's vocabulary"));
  bad = fixture_settings();
  bad.target_layer_ids = {3};
  CHECK_THROWS_WITH(head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), bad),
                    Catch::Contains("outside the target"));
  head::DFlashHead h(cfg);
  std::size_t n = 0;
  for (const auto& p : h.named_parameters()) {
    (void)p;
    ++n;
  }
  CHECK(n == 25);  // fc, hidden_norm, norm; per layer 2 norms, q/k/v/o, q_norm, k_norm, 3 MLP
}

TEST_CASE("the DFlash training blocks equal the reference's logits, sparse and dense", "[head]") {
  auto ref = reference();
  auto h = reference_head(ref);
  auto in = reference_inputs(ref);
  torch::NoGradGuard ng;
  for (bool dense : {false, true}) {
    INFO("dense " << dense);
    auto logits = h->logits(h->block_hidden(in, in.extra, dense));
    CHECK(torch::allclose(logits, ref.at("block_logits"), 1e-4, 1e-5));
  }
  // alpha_k's teacher forcing: step k at t is slot k + 1 of the block anchored at t + 1.
  auto steps = h->ttt_logits(in);
  REQUIRE(steps.size() == 3);
  const auto anchors = ref.at("anchors");
  for (std::int64_t j = 0; j < anchors.size(1); ++j) {
    const auto a = anchors[0][j].item<std::int64_t>();
    for (std::int64_t k = 0; k < 3; ++k) {
      INFO("anchor " << a << ", step " << k);
      CHECK(torch::allclose(steps[static_cast<std::size_t>(k)][0][a - 1], ref.at("block_logits")[0][j][k + 1], 1e-4,
                            1e-5));
    }
  }
}

TEST_CASE("one DFlash training step equals the reference's loss and every gradient", "[head]") {
  auto ref = reference();
  for (bool hard : {false, true}) {
    for (std::int64_t chunk : {0, 3}) {
      INFO((hard ? "hard CE" : "soft CE") << ", loss_chunk_size " << chunk);
      const std::string prefix = hard ? "hard." : "";
      auto h = reference_head(ref, hard, chunk);
      auto in = reference_inputs(ref);
      auto out = h->train_step_forward(in, ref.at("denominators"));
      CHECK(out.loss.item<double>() == Approx(ref.at(prefix + "loss").item<double>()).epsilon(1e-5));
      out.loss.backward();
      std::size_t compared = 0;
      for (auto& p : h->named_parameters()) {
        const auto name = prefix + "grad." + p.key();
        INFO(name);
        REQUIRE(ref.count(name));
        REQUIRE(p.value().grad().defined());
        CHECK(torch::allclose(p.value().grad(), ref.at(name), 1e-4, 1e-6));
        ++compared;
      }
      CHECK(compared == 25);
      CHECK(torch::equal(out.metric_sums.select(1, head::kValid), ref.at("denominators")));
    }
  }
}

TEST_CASE("DFlash's block-sparse attention equals the dense mask, values and gradients", "[head]") {
  auto ref = reference();
  const auto anchors = ref.at("anchors"), doc = ref.at("document_ids");
  const std::int64_t b = 2, h = 4, kvh = 2, t = doc.size(1), n = anchors.size(1), s = 4, d = 8;
  torch::manual_seed(3);
  auto q = torch::randn({b, h, n * s, d}, torch::requires_grad());
  auto ck = torch::randn({b, kvh, t, d}, torch::requires_grad()), cv = torch::randn({b, kvh, t, d}, torch::requires_grad());
  auto bk = torch::randn({b, kvh, n * s, d}, torch::requires_grad()), bv = torch::randn({b, kvh, n * s, d}, torch::requires_grad());
  auto up = torch::randn({b, h, n * s, d});
  auto grads = [&](const torch::Tensor& out) {
    for (auto* x : {&q, &ck, &cv, &bk, &bv}) x->mutable_grad() = torch::Tensor();
    (out * up).sum().backward();
    return std::vector<torch::Tensor>{q.grad().clone(), ck.grad().clone(), cv.grad().clone(), bk.grad().clone(),
                                      bv.grad().clone()};
  };
  auto dense = head::dflash_attention_dense(q, ck, cv, bk, bv, anchors, doc, 0.3);
  auto dense_grads = grads(dense);
  for (std::int64_t chunk : {0, 1, 2, 5}) {
    INFO("anchor_chunk " << chunk);
    auto sparse = head::dflash_attention(q, ck, cv, bk, bv, anchors, doc, 0.3, chunk);
    CHECK(torch::allclose(sparse, dense, 1e-5, 1e-6));
    auto sparse_grads = grads(sparse);
    for (std::size_t i = 0; i < sparse_grads.size(); ++i) {
      INFO("input " << i);
      CHECK(torch::allclose(sparse_grads[i], dense_grads[i], 1e-5, 1e-6));
    }
  }
  // A block never sees another block: changing block 1's keys leaves block 0's queries unchanged.
  torch::NoGradGuard ng;
  auto bk2 = bk.detach().clone();
  bk2.narrow(2, s, s).add_(1.0);
  auto changed = head::dflash_attention(q, ck, cv, bk2, bv, anchors, doc, 0.3);
  auto base = head::dflash_attention(q, ck, cv, bk, bv, anchors, doc, 0.3);
  CHECK(torch::equal(changed.narrow(2, 0, s), base.narrow(2, 0, s)));
  CHECK_FALSE(torch::allclose(changed.narrow(2, s, s), base.narrow(2, s, s)));
}

TEST_CASE("DFlash anchors: the reference's sample from the same seed, the slot counts, resumable seeds", "[head]") {
  auto ref = reference();
  const auto mask = ref.at("loss_mask"), doc = ref.at("document_ids");
  const auto seed = static_cast<std::uint64_t>(ref.at("anchor_seed").item<std::int64_t>());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CHECK(torch::equal(torch::rand({2, doc.size(1)}, gen), ref.at("anchor_noise")));
  auto anchors = head::dflash_sample_anchors(mask, doc, 4, 5, at::make_generator<at::CPUGeneratorImpl>(seed));
  CHECK(torch::equal(anchors, ref.at("anchors")));
  auto counts = head::dflash_count_slots(mask, doc, anchors, 4);
  auto expected = ref.at("denominators").to(torch::kInt64);
  REQUIRE(counts.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) CHECK(counts[k] == expected[static_cast<std::int64_t>(k)].item<std::int64_t>());
  // Row 1 has two candidates (9, 10): three padding anchors, invalid in every slot.
  auto cand = head::dflash_anchor_candidates(mask, doc, 4);
  CHECK(cand[1].sum().item<std::int64_t>() == 2);
  CHECK(cand.gather(1, anchors)[1].sum().item<std::int64_t>() == 2);
  // The generator of (seed, step, micro-batch, rank) draws the same anchors again; another step others.
  auto again = [&](std::int64_t step) {
    return head::dflash_sample_anchors(mask, doc, 4, 5, head::dflash_anchor_generator(42, step, 1, 0));
  };
  CHECK(torch::equal(again(7), again(7)));
  bool differs = false;
  for (std::int64_t step = 8; step < 16 && !differs; ++step) differs = !torch::equal(again(step), again(7));
  CHECK(differs);
  // More anchors than positions: every position once.
  CHECK(head::dflash_sample_anchors(mask, doc, 4, 100, head::dflash_anchor_generator(1, 0, 0)).size(1) == doc.size(1));
}

TEST_CASE("DFlash drafts vLLM's rounds: one forward per round over the cached context", "[head]") {
  auto ref = reference();
  auto h = reference_head(ref);
  const auto tokens = ref.at("round_tokens"), feats = ref.at("round_features");
  const auto rounds = ref.at("round_n").size(0);
  auto cache = h->new_cache(1, 32), logit_cache = h->new_cache(1, 32);
  for (std::int64_t r = 0; r < rounds; ++r) {
    INFO("round " << r);
    const auto n = ref.at("round_n")[r].item<std::int64_t>(), start = cache.length;
    CHECK(tokens[n].item<std::int64_t>() == ref.at("round_anchor")[r].item<std::int64_t>());
    // The positions verified since the last round join the context; the last next id is the anchor x_n.
    auto f = feats.narrow(0, start, n - start).unsqueeze(0);
    auto ids = tokens.narrow(0, start + 1, n - start).unsqueeze(0);
    auto drafts = h->draft(cache, f, ids, 3);
    CHECK(cache.length == n);
    CHECK(torch::equal(drafts[0], ref.at("round_drafts")[r]));
    auto logits = h->parallel_logits(logit_cache, f, ids, 3);
    CHECK(torch::allclose(logits[0], ref.at("round_logits")[r], 1e-4, 1e-5));
  }
}

TEST_CASE("DFlash drafts ragged rows as each row alone: any lengths, a subset of rows, idle rows, stale slots",
          "[head]") {
  auto ref = reference();
  auto h = reference_head(ref);
  REQUIRE(h->drafts_ragged());
  const auto tokens = ref.at("round_tokens"), feats = ref.at("round_features");
  const std::int64_t capacity = 32, spare = capacity - 1;
  auto cache = h->new_cache(3, capacity);
  cache.keys.normal_();  // slots of earlier prompts: a row's block must never see them
  cache.values.normal_();
  std::vector<head::DraftCache> alone;
  for (int i = 0; i < 3; ++i) alone.push_back(h->new_cache(1, capacity));
  // Row `row` alone (draft()): positions [from, to) join its context, then its round.
  auto one = [&](std::size_t row, std::int64_t from, std::int64_t to, std::int64_t draft_len) {
    return h->draft(alone[row], feats.narrow(0, from, to - from).unsqueeze(0),
                    tokens.narrow(0, from + 1, to - from).unsqueeze(0), draft_len)[0];
  };
  // All rows at once: cache row `row` gets positions [from, to) at their columns, padded to n columns
  // at the spare slot (none: idle), as acceptance/batched.cpp lays them out.
  struct Span {
    std::int64_t row, from, to;
  };
  auto ragged = [&](const std::vector<Span>& spans, std::int64_t n, bool all_rows, std::int64_t key_len,
                    std::int64_t draft_len) {
    const auto r = static_cast<std::int64_t>(spans.size());
    auto f = torch::zeros({r, n, feats.size(1)});
    auto next = torch::zeros({r, n}, torch::kInt64), columns = torch::full({r, n}, spare, torch::kInt64);
    auto last = torch::zeros({r}, torch::kInt64), rows = torch::zeros({r}, torch::kInt64);
    for (std::int64_t i = 0; i < r; ++i) {
      const auto& s = spans[static_cast<std::size_t>(i)];
      const auto len = s.to - s.from;
      rows[i].fill_(s.row);
      if (len == 0) continue;
      f[i].narrow(0, 0, len).copy_(feats.narrow(0, s.from, len));
      next[i].narrow(0, 0, len).copy_(tokens.narrow(0, s.from + 1, len));
      columns[i].narrow(0, 0, len).copy_(torch::arange(s.from, s.to, torch::kInt64));
      last[i].fill_(len - 1);
    }
    auto d = h->draft_ragged(cache, {f, next, columns, all_rows ? torch::Tensor() : rows, last, key_len}, draft_len);
    REQUIRE(d.size(0) == r);
    REQUIRE(d.size(1) == draft_len);
    return d;
  };
  // Prompts of 4 and 7 positions into rows 0 and 2 (row 1 untouched), 3 tokens each.
  auto a = ragged({{0, 0, 4}, {2, 0, 7}}, 7, false, 7 + 3 - 1, 3);
  CHECK(torch::equal(a[0], one(0, 0, 4, 3)));
  CHECK(torch::equal(a[1], one(2, 0, 7, 3)));
  // A round of every row: 2 and 1 new positions, row 1 idle, more slots read than any row holds,
  // blocks of 2 tokens (a shallower depth of the evaluation).
  auto b = ragged({{0, 4, 6}, {1, 0, 0}, {2, 7, 8}}, 3, true, 16, 2);
  CHECK(torch::equal(b[0], one(0, 4, 6, 2)));
  CHECK(torch::equal(b[2], one(2, 7, 8, 2)));
  // The next round reaches the reference's own: positions up to 8, the anchor at 8 (its last round).
  auto c = ragged({{0, 6, 8}, {1, 0, 0}, {2, 8, 8}}, 2, true, 12, 3);
  CHECK(torch::equal(c[0], ref.at("round_drafts")[2]));
}

TEST_CASE("a DFlash export is the folder vLLM 0.32 loads, and it imports back bit for bit", "[head]") {
  auto ref = reference();
  auto h = reference_head(ref);
  {
    torch::NoGradGuard ng;
    for (auto& p : h->named_parameters()) p.value().add_(0.01 * torch::randn_like(p.value()));
  }
  test::TempDir dir;
  const auto out = (dir / "draft").string();
  head::export_dflash(*h, out);
  auto config = nlohmann::json::parse(test::read_file(dir / "draft" / "config.json"));
  CHECK(config["architectures"][0] == "DFlashDraftModel");
  CHECK(config["model_type"] == "qwen3");
  CHECK(config["dflash_config"]["mask_token_id"] == 255);
  CHECK(config["dflash_config"]["target_layer_ids"] == nlohmann::json::array({0, 1}));
  CHECK(config["head_dim"] == 20);
  CHECK(config["rope_theta"] == 1e6);
  CHECK(config["rms_norm_eps"] == 1e-6);
  CHECK(config["attention_bias"] == false);
  CHECK(config["layer_types"] == nlohmann::json::array({"full_attention", "full_attention"}));
  CHECK(config["block_size"] == 4);
  auto file = model::load_safetensors(out + "/model.safetensors");
  CHECK(file.size() == 25);
  CHECK(file.count("fc.weight"));
  CHECK(file.count("layers.1.self_attn.k_norm.weight"));
  CHECK_FALSE(file.count("embed_tokens.weight"));  // vLLM shares the target's embedding and LM head
  CHECK_FALSE(file.count("lm_head.weight"));
  auto loaded = head::load_dflash_head(out);
  const auto& c = loaded->config();
  CHECK(c.dflash_block_size == 4);
  CHECK(c.aux_layer_ids == h->config().aux_layer_ids);
  CHECK(c.mask_token_id == 255);
  CHECK(c.dflash_num_anchors == 5);
  CHECK(c.dflash_decay_gamma == 4.0);
  CHECK(c.rope.theta == h->config().rope.theta);
  auto a = h->named_parameters(), b = loaded->named_parameters();
  CHECK(a.size() == b.size());
  for (const auto& p : a) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), b[p.key()]));
  }
  CHECK_THROWS_WITH(head::export_dflash(*h, out), Catch::Contains("the output folder exists"));
  // SGLang's DFlashDraftModel reads the same folder: the same config and tensors, imported back bit for bit.
  const auto sg = (dir / "sglang").string();
  head::export_dflash(*h, sg, head::DFlashEngine::sglang);
  CHECK(nlohmann::json::parse(test::read_file(dir / "sglang" / "config.json")) == config);
  auto from_sglang = head::load_dflash_head(sg)->named_parameters();
  CHECK(from_sglang.size() == a.size());
  for (const auto& p : a) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), from_sglang[p.key()]));
  }
  // What SGLang would build or check otherwise: refused for sglang by name, written for vLLM.
  auto wider = h->config();
  wider.target_hidden_size = 2 * wider.hidden_size;  // fc over features of another width
  CHECK_THROWS_WITH(head::dflash_config_json(wider, head::DFlashEngine::sglang), Catch::Contains("target_hidden_size"));
  CHECK(head::dflash_config_json(wider)["target_hidden_size"] == 2 * wider.hidden_size);
  auto shallow = h->config();
  shallow.target_num_hidden_layers = 0;  // an imported draft without num_target_layers
  CHECK_THROWS_WITH(head::dflash_config_json(shallow, head::DFlashEngine::sglang),
                    Catch::Contains("num_target_layers"));
  CHECK_NOTHROW(head::dflash_config_json(shallow));
  // What vLLM would serve otherwise than this head computes is refused by name.
  auto causal = config;
  causal["dflash_config"]["causal"] = true;
  CHECK_THROWS_WITH(head::dflash_config_from_json(causal, "config.json"), Catch::Contains("does not compute"));
  auto window = config;
  window["layer_types"][1] = "sliding_attention";
  CHECK_THROWS_WITH(head::dflash_config_from_json(window, "config.json"), Catch::Contains("does not compute"));
  // A DSpark draft (every slot predicts the next token) is not this head: refused by name.
  auto dspark = config;
  dspark["dflash_config"]["sample_from_anchor"] = true;
  CHECK_THROWS_WITH(head::dflash_config_from_json(dspark, "config.json"), Catch::Contains("DSpark"));
  dspark["dflash_config"]["sample_from_anchor"] = false;  // DFlash's own value
  CHECK_NOTHROW(head::dflash_config_from_json(dspark, "config.json"));
}
