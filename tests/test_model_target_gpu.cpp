// The target model on CUDA: the packed training forward and the KV-cache forward equal the
// transformers reference (fp32), as on CPU. Runs only in the [gpu] CTest entry.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "eagle/model/safetensors.h"
#include "eagle/model/target.h"
#include "helpers.h"

using namespace eagle;

TEST_CASE("target forward on CUDA matches transformers", "[model][gpu]") {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    INFO(name);
    const std::string root = EAGLE_SOURCE_DIR;
    auto ref = model::load_safetensors(root + "/tests/fixtures/reference/" + name + ".safetensors");
    auto m = model::TargetModel::load(root + "/tests/fixtures/models/" + name, torch::kFloat32, torch::kCUDA);
    const auto V = m.config().vocab_size;
    const auto a = ref.at("a.input_ids"), b = ref.at("b.input_ids");
    const auto Ta = a.size(1), Tb = b.size(1);
    model::TargetBatch packed{
        torch::cat({a, b}, 1).cuda(), torch::cat({torch::arange(Ta), torch::arange(Tb)}).unsqueeze(0).cuda(),
        torch::cat({torch::zeros({Ta}, torch::kInt64), torch::ones({Tb}, torch::kInt64)}).unsqueeze(0).cuda()};
    auto out = m.forward(packed, {torch::arange(V), 5});
    CHECK(out.teacher_logits.is_cuda());
    auto logits = out.teacher_logits.cpu();
    CHECK(torch::allclose(logits.narrow(1, 0, Ta), ref.at("a.logits"), 0, 1e-4));
    CHECK(torch::allclose(logits.narrow(1, Ta, Tb), ref.at("b.logits"), 0, 1e-4));
    CHECK(torch::allclose(out.final_hidden.cpu().narrow(1, 0, Ta), ref.at("a.hidden_states")[-1], 0, 1e-4));

    auto cache = m.new_cache(1, 32);
    auto first = m.forward_cached(cache, a.narrow(1, 0, 5));
    auto rest = m.forward_cached(cache, a.narrow(1, 5, Ta - 5));
    CHECK(torch::allclose(torch::cat({first.logits, rest.logits}, 1).cpu(), ref.at("a.logits"), 0, 1e-4));
  }
}
