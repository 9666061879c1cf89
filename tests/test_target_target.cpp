// Target model parity with transformers (tests/fixtures, made by scripts/make_reference_fixtures.py):
// hidden states and logits in fp32 and bf16, padded and packed batches, the chunked teacher, the
// KV-cache forward and greedy continuation.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "target_fixtures.h"

using namespace eagle;
using eagle::target::TargetModel;

namespace {

using test::load_all_hidden;
using test::max_err;
using test::reference;
using test::stacked;
using test::unpadded;

const char* kFamilies[] = {"tiny-llama",
                           "tiny-llama3",
                           "tiny-mistral",
                           "tiny-qwen2",
                           "tiny-qwen3",
                           "tiny-qwen3-moe",
                           "tiny-mixtral",
                           "tiny-gpt-oss",
                           "tiny-gpt-oss-mxfp4",
                           "tiny-gemma3",
                           "tiny-gemma2",
                           "tiny-phi3",
                           "tiny-phi4",
                           "tiny-qwen3-yarn",
                           "tiny-mistral-window",
                           "tiny-qwen2-window",
                           "tiny-qwen3-fp8",
                           "tiny-deepseek-v3",
                           "tiny-deepseek-v3-nolora",
                           "tiny-glm4-moe",
                           "tiny-glm4-moe-lite",
                           "tiny-gemma4",
                           "tiny-deepseek-v2",
                           "tiny-gemma4-moe"};

// longrope switches factors by sequence length: transformers per call (a padded batch takes its
// longest row's), eagle-train per sample in training batches (docs/models.md, RoPE).
bool longrope(const TargetModel& m) { return m.config().rope.type == "longrope"; }

std::string model_dir(const std::string& name) {
  return std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// aux [B, T, (L+1) H] -> [L+1, B, T, H], the layout of transformers' stacked hidden_states.
// Samples a [1, Ta] and b [1, Tb] packed into one row: positions restarting, documents 0 and 1.
target::TargetBatch packed_pair(const torch::Tensor& ids_a, const torch::Tensor& ids_b) {
  const auto Ta = ids_a.size(1), Tb = ids_b.size(1);
  return {torch::cat({ids_a, ids_b}, 1), torch::cat({torch::arange(Ta), torch::arange(Tb)}).unsqueeze(0),
          torch::cat({torch::zeros({Ta}, torch::kInt64), torch::ones({Tb}, torch::kInt64)}).unsqueeze(0)};
}

target::TeacherSpec full_vocab(const TargetModel& m, std::int64_t chunk = 1024) {
  return {torch::arange(m.config().vocab_size), chunk};
}

}  // namespace

TEST_CASE("target fp32 forward matches transformers for every family", "[target]") {
  for (const char* name : kFamilies) {
    INFO(name);
    auto m = load_all_hidden(name, torch::kFloat32);
    auto ref = reference(name);
    const auto H = m.config().hidden_size;
    for (const char* s : {"a", "b"}) {
      INFO(s);
      const std::string p = s;
      auto out = m.forward(unpadded(ref.at(p + ".input_ids")), full_vocab(m, 5));  // chunks of 5 rows
      CHECK(max_err(stacked(out.aux_hidden, H), ref.at(p + ".hidden_states")) <= 1e-4);
      CHECK(max_err(out.final_hidden, ref.at(p + ".hidden_states")[-1]) <= 1e-4);
      CHECK(max_err(out.teacher_logits, ref.at(p + ".logits")) <= 1e-4);
      CHECK(out.teacher_logits.scalar_type() == torch::kFloat32);
      CHECK(torch::equal(out.target_argmax, ref.at(p + ".logits").argmax(-1)));
    }
  }
}

TEST_CASE("target padded and packed batches equal the per-sample forward", "[target]") {
  for (const char* name : kFamilies) {
    INFO(name);
    auto m = load_all_hidden(name, torch::kFloat32);
    auto ref = reference(name);
    const auto H = m.config().hidden_size;
    const auto ids_a = ref.at("a.input_ids"), ids_b = ref.at("b.input_ids");
    const auto Ta = ids_a.size(1), Tb = ids_b.size(1);

    // Padded (right padding, document id -1), as transformers' attention_mask batch.
    const auto mask = ref.at("padded.attention_mask");
    target::TargetBatch padded{ref.at("padded.input_ids"), torch::arange(Ta).unsqueeze(0).expand({2, Ta}).contiguous(),
                               torch::where(mask == 1, torch::zeros_like(mask), torch::full_like(mask, -1))};
    auto out = m.forward(padded, full_vocab(m));
    auto hs = stacked(out.aux_hidden, H);
    auto ref_hs = ref.at("padded.hidden_states");
    CHECK(max_err(hs.select(1, 0), ref_hs.select(1, 0)) <= 1e-4);
    if (!longrope(m)) CHECK(max_err(hs.select(1, 1).narrow(1, 0, Tb), ref_hs.select(1, 1).narrow(1, 0, Tb)) <= 1e-4);
    CHECK(max_err(hs.select(1, 1).narrow(1, 0, Tb), ref.at("b.hidden_states").select(1, 0)) <= 1e-4);
    CHECK(max_err(out.teacher_logits[1].narrow(0, 0, Tb), ref.at("b.logits")[0]) <= 1e-4);
    CHECK(torch::isfinite(out.teacher_logits).all().item<bool>());  // padding rows stay finite

    // Packed: both samples in one row, positions restarting, block-diagonal attention.
    const auto packed = packed_pair(ids_a, ids_b);
    auto pk = m.forward(packed, full_vocab(m, 7));
    auto pk_hs = stacked(pk.aux_hidden, H);
    CHECK(max_err(pk_hs.narrow(2, 0, Ta), ref.at("a.hidden_states")) <= 1e-4);
    CHECK(max_err(pk_hs.narrow(2, Ta, Tb), ref.at("b.hidden_states")) <= 1e-4);
    CHECK(max_err(pk.teacher_logits.narrow(1, 0, Ta), ref.at("a.logits")) <= 1e-4);
    CHECK(max_err(pk.teacher_logits.narrow(1, Ta, Tb), ref.at("b.logits")) <= 1e-4);
  }
}

TEST_CASE("target teacher: draft-vocabulary columns, chunking and default aux layers", "[target]") {
  auto m = TargetModel::load(model_dir("tiny-llama"), torch::ScalarType::Undefined, torch::kCPU);
  CHECK(m.dtype() == torch::kFloat32);
  CHECK(m.aux_layer_ids() == std::vector<std::int64_t>{1, 2, 3});  // L = 4 < 7: [1, L/2, L-1]
  auto ref = reference("tiny-llama");
  auto batch = unpadded(ref.at("a.input_ids"));
  const auto draft = torch::tensor({3, 17, 64, 200, 511}, torch::kInt64);
  auto big = m.forward(batch, {draft, 4096});
  auto small = m.forward(batch, {draft, 3});
  CHECK(max_err(big.teacher_logits, small.teacher_logits) <= 1e-5);  // matmul blocking differs by rows
  CHECK(torch::equal(big.target_argmax, small.target_argmax));
  CHECK(max_err(big.teacher_logits, ref.at("a.logits").index_select(2, draft)) <= 1e-4);
  CHECK(big.aux_hidden.size(2) == 3 * m.config().hidden_size);
  const auto H = m.config().hidden_size;
  CHECK(max_err(big.aux_hidden.narrow(2, 0, H), ref.at("a.hidden_states")[1]) <= 1e-4);
  CHECK(max_err(big.aux_hidden.narrow(2, 2 * H, H), ref.at("a.hidden_states")[3]) <= 1e-4);
  CHECK(max_err(m.embed(ref.at("a.input_ids")), ref.at("a.hidden_states")[0]) == 0.0);
  auto no_teacher = m.forward(batch, {});
  CHECK_FALSE(no_teacher.teacher_logits.defined());
  CHECK(torch::equal(no_teacher.target_argmax, big.target_argmax));
  // Outputs carry no autograd history, and are not inference tensors (the head saves them).
  CHECK_FALSE(big.aux_hidden.requires_grad());
  CHECK_FALSE(big.aux_hidden.is_inference());

  CHECK(target::default_aux_layer_ids(32) == std::vector<std::int64_t>{2, 16, 29});
  CHECK(target::default_aux_layer_ids(7) == std::vector<std::int64_t>{2, 3, 4});
  CHECK(target::default_aux_layer_ids(2) == std::vector<std::int64_t>{1, 1, 1});
  CHECK(target::default_aux_layer_ids(1) == std::vector<std::int64_t>{0, 0, 0});
  CHECK_THROWS_WITH(m.set_aux_layer_ids({1, 5}), Catch::Contains("out of range") && Catch::Contains("0..4"));
  CHECK_THROWS_WITH(m.set_aux_layer_ids({3, 1}), Catch::Contains("low -> high"));
}

TEST_CASE("target bf16 forward stays within the documented bound of transformers' bf16", "[target]") {
  for (const char* name : kFamilies) {
    INFO(name);
    auto m = load_all_hidden(name, torch::kBFloat16);
    auto ref = reference(name);
    auto out = m.forward(unpadded(ref.at("a.input_ids")), full_vocab(m));
    CHECK(out.aux_hidden.scalar_type() == torch::kBFloat16);
    // Bound of docs/models.md (measured <= 0.011 on the dense fixtures): both sides round to bf16
    // (8 bits of mantissa) after every op, in different orders.
    const auto hs = stacked(out.aux_hidden, m.config().hidden_size);  // [L+1, 1, T, H]
    const auto ref_hs = ref.at("a.bf16.hidden_states");
    const auto ref_logits = ref.at("a.bf16.logits");
    // Per token: the largest error over layers and features, relative to the largest magnitude.
    const auto rel_hs = (hs - ref_hs).abs().amax({0, 3}).squeeze(0) / ref_hs.abs().max();
    const auto rel_logits = (out.teacher_logits - ref_logits).abs().amax(-1).squeeze(0) / ref_logits.abs().max();
    // A mixture of experts may route one token of the prompt differently where two experts' router
    // scores nearly tie (a gap of ~1e-4 flips under bf16 rounding in either implementation); that
    // token, and only one, may exceed the bound. The tokens after it attend to its changed keys and
    // values, so they may exceed 0.02 too, but not 0.1 (tiny-deepseek-v3: token 5 rerouted at 0.18,
    // the next three at 0.021-0.058, the rest within 0.02).
    const bool moe = m.config().moe.enabled();
    INFO("hidden " << rel_hs << " logits " << rel_logits);
    for (const auto& rel : {rel_hs, rel_logits}) {
      CHECK((rel > (moe ? 0.1 : 0.02)).sum().item<std::int64_t>() <= (moe ? 1 : 0));
      if (moe && (rel > 0.02).any().item<bool>()) {  // only tokens from the first outlier on may exceed 0.02
        const auto first = (rel > 0.02).to(torch::kInt64).argmax().item<std::int64_t>();
        CHECK((rel.narrow(0, 0, first) > 0.02).sum().item<std::int64_t>() == 0);
      }
    }
  }
}

TEST_CASE("target KV-cache forward equals the full forward; greedy continuation matches", "[target]") {
  for (const char* name : kFamilies) {
    INFO(name);
    auto m = TargetModel::load(model_dir(name), torch::kFloat32, torch::kCPU);
    auto ref = reference(name);
    const auto ids = ref.at("a.input_ids");
    const auto T = ids.size(1);
    const auto full = m.forward(unpadded(ids), {});

    // Prefill 6, then 3, then the rest: logits and aux features equal the full forward's (longrope:
    // a first call already past the original context, so that every call takes the long factors).
    auto cache = m.new_cache(1, 32);
    std::vector<torch::Tensor> logits, aux;
    using Split = std::vector<std::pair<std::int64_t, std::int64_t>>;
    const auto splits = longrope(m) ? Split{{0, 9}, {9, 1}, {10, T - 10}} : Split{{0, 6}, {6, 3}, {9, T - 9}};
    for (auto [s, n] : splits) {
      auto o = m.forward_cached(cache, ids.narrow(1, s, n));
      logits.push_back(o.logits);
      aux.push_back(o.aux_hidden);
    }
    CHECK(cache.length == T);
    CHECK(max_err(torch::cat(logits, 1), ref.at("a.logits")) <= 1e-4);
    CHECK(max_err(torch::cat(aux, 1), full.aux_hidden) <= 1e-4);

    // Roll back and recompute the tail.
    m.truncate(cache, 8);
    auto tail = m.forward_cached(cache, ids.narrow(1, 8, T - 8));
    CHECK(max_err(tail.logits, ref.at("a.logits").narrow(1, 8, T - 8)) <= 1e-4);

    // Greedy decoding token by token equals transformers' greedy continuation.
    const auto greedy = ref.at("a.greedy");
    const auto N = greedy.size(1);
    auto c2 = m.new_cache(1, T + N);
    auto next = m.forward_cached(c2, ids).logits.select(1, T - 1).argmax(-1, true);
    std::vector<torch::Tensor> got;
    for (std::int64_t i = 0; i < N; ++i) {
      got.push_back(next);
      if (i + 1 < N) next = m.forward_cached(c2, next).logits.select(1, 0).argmax(-1, true);
    }
    CHECK(torch::equal(torch::cat(got, 1), greedy));

    // Verification: all drafted tokens in one forward after rolling back to the prompt.
    m.truncate(c2, T);
    auto verify = m.forward_cached(c2, greedy.narrow(1, 0, N - 1));
    CHECK(torch::equal(verify.logits.argmax(-1), greedy.narrow(1, 1, N - 1)));
    CHECK_THROWS_WITH(m.forward_cached(c2, greedy), Catch::Contains("capacity"));
    CHECK_THROWS(m.truncate(c2, c2.length + 1));
  }
}

TEST_CASE("RoPE inverse frequencies of the scaled types match transformers", "[target]") {
  auto ref = model::load_safetensors(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/rope.safetensors");
  model::RopeConfig linear{.head_dim = 64, .theta = 10000.0, .type = "linear", .factor = 4.0};
  CHECK(max_err(model::rope_inv_freq(linear), ref.at("linear")) <= 1e-7);
  model::RopeConfig dynamic{.head_dim = 64, .theta = 10000.0, .type = "dynamic", .factor = 2.0};
  dynamic.max_position_embeddings = 128;
  CHECK(max_err(model::rope_inv_freq(dynamic, 300), ref.at("dynamic")) <= 1e-6);
  // Within max_position_embeddings dynamic scaling leaves the frequencies unchanged.
  model::RopeConfig plain{.head_dim = 64, .theta = 10000.0};
  CHECK(max_err(model::rope_inv_freq(dynamic, 100), model::rope_inv_freq(plain)) == 0.0);
  // The device-side form (the length never read on the host) equals the host one on both sides of
  // max_position_embeddings.
  const auto base_inv = model::rope_inv_freq(dynamic);
  for (std::int64_t len : {1, 100, 128, 129, 300, 5000}) {
    INFO("seq_len " << len);
    CHECK(max_err(model::rope_inv_freq_dynamic(dynamic, base_inv, torch::tensor(len)),
                  model::rope_inv_freq(dynamic, len)) <= 1e-7);
  }
  // What a draft head uses: vLLM's fixed base theta * (s^2 - s + 1)^(d / (d - 2)) = 3^(64/62) theta.
  auto serving = model::rope_inv_freq_serving(dynamic);
  auto want = 1.0 / torch::pow(torch::tensor(10000.0 * std::pow(3.0, 64.0 / 62.0)),
                               torch::arange(0, 64, 2).to(torch::kFloat64) / 64.0);
  CHECK(max_err(serving, want) <= 1e-6 * want.max().item<double>());
  CHECK(max_err(model::rope_inv_freq_serving(linear), model::rope_inv_freq(linear)) == 0.0);
  model::RopeConfig llama3{.head_dim = 64,
                           .theta = 500000.0,
                           .type = "llama3",
                           .factor = 8.0,
                           .low_freq_factor = 1.0,
                           .high_freq_factor = 4.0,
                           .original_max_position_embeddings = 64};
  CHECK(max_err(model::rope_inv_freq(llama3), ref.at("llama3")) <= 1e-7);
}

TEST_CASE("a target in chunks of positions equals the whole-row forward and transformers", "[target]") {
  // Chunks of 3 positions (not dividing the fixtures' lengths) in the layers' position-wise half,
  // packed rows and a KV-cache prefill; the experts route each chunk's tokens alone.
  for (const char* name : kFamilies) {
    INFO(name);
    auto m = load_all_hidden(name, torch::kFloat32);
    auto ref = reference(name);
    const auto H = m.config().hidden_size;
    const auto ids_a = ref.at("a.input_ids"), ids_b = ref.at("b.input_ids");
    const auto Ta = ids_a.size(1), Tb = ids_b.size(1);
    const auto packed = packed_pair(ids_a, ids_b);
    REQUIRE(m.chunk_tokens() == 0);
    auto whole = m.forward(packed, full_vocab(m));
    auto whole_cached = m.new_cache(1, Ta);
    auto whole_step = m.forward_cached(whole_cached, ids_a);
    m.set_chunk_tokens(3);
    REQUIRE(Ta % 3 != 0);
    auto pk = m.forward(packed, full_vocab(m));
    CHECK(max_err(pk.aux_hidden, whole.aux_hidden) <= 1e-5);
    CHECK(max_err(pk.teacher_logits, whole.teacher_logits) <= 5e-5);  // logits of magnitude ~30: a few ulp
    CHECK(torch::equal(pk.target_argmax, whole.target_argmax));
    auto pk_hs = stacked(pk.aux_hidden, H);
    CHECK(max_err(pk_hs.narrow(2, 0, Ta), ref.at("a.hidden_states")) <= 1e-4);
    CHECK(max_err(pk_hs.narrow(2, Ta, Tb), ref.at("b.hidden_states")) <= 1e-4);
    CHECK(max_err(pk.teacher_logits.narrow(1, 0, Ta), ref.at("a.logits")) <= 1e-4);
    auto cache = m.new_cache(1, Ta);
    auto step = m.forward_cached(cache, ids_a);
    CHECK(max_err(step.logits, whole_step.logits) <= 5e-5);
    CHECK(max_err(step.logits, ref.at("a.logits")) <= 1e-4);
  }
  auto m = TargetModel::load(model_dir("tiny-llama"), torch::kFloat32, torch::kCPU);
  CHECK_THROWS_AS(m.set_chunk_tokens(-1), eagle::Error);
}
