// Target forward benchmark: real tokens/s of a fixed random Llama (4 layers, hidden 512, 8 heads,
// vocabulary 32000, fp32, batch 4 x 512) and its model FLOPs utilisation against the fp32 matmul
// FLOP/s measured in the same run; also the peak resident memory of the forward with the chunked
// teacher versus the whole [B*T, V] logits at once; then a mixture-of-experts target (Qwen3-MoE
// layout, 16 experts, top 2) against a dense Qwen3 of the same active parameters; and the peak
// memory of one long row with the layers' position-wise half in chunks or whole (a process per chunk
// size). Run through
// scripts/bench/bench_target.sh.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_target_util.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"

namespace fs = std::filesystem;
using namespace eagle::bench;

namespace {

constexpr std::int64_t kLayers = 4, kHidden = 512, kHeads = 8, kInter = 1536, kVocab = 32000;
constexpr std::int64_t kBatch = 4, kSeq = 512;

void write_model(const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", kVocab},
                      {"hidden_size", kHidden}, {"intermediate_size", kInter}, {"num_hidden_layers", kLayers},
                      {"num_attention_heads", kHeads}, {"num_key_value_heads", kHeads}, {"rms_norm_eps", 1e-5},
                      {"max_position_embeddings", 4096}, {"rope_theta", 10000.0}, {"torch_dtype", "float32"},
                      {"tie_word_embeddings", false}, {"hidden_act", "silu"}};
  std::ofstream(dir / "config.json") << c.dump(2);
  torch::manual_seed(0);
  std::map<std::string, torch::Tensor> t;
  auto lin = [](std::int64_t out, std::int64_t in) { return torch::randn({out, in}) / std::sqrt(double(in)); };
  t["model.embed_tokens.weight"] = torch::randn({kVocab, kHidden});
  t["lm_head.weight"] = lin(kVocab, kHidden);
  t["model.norm.weight"] = torch::ones({kHidden});
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l);
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
      t[p + "self_attn." + n + ".weight"] = lin(kHidden, kHidden);
    t[p + "mlp.gate_proj.weight"] = lin(kInter, kHidden);
    t[p + "mlp.up_proj.weight"] = lin(kInter, kHidden);
    t[p + "mlp.down_proj.weight"] = lin(kHidden, kInter);
    t[p + "input_layernorm.weight"] = torch::ones({kHidden});
    t[p + "post_attention_layernorm.weight"] = torch::ones({kHidden});
  }
  eagle::model::save_safetensors((dir / "model.safetensors").string(), t);
}

double matmul_flops(int reps) {
  const std::int64_t n = 2048;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::matmul(a, b);  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    auto c = torch::matmul(a, b);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * n / best;
}

// A Qwen3-MoE target (16 experts of intermediate 768, 2 per token) and the dense Qwen3 whose MLP
// (intermediate 1536) has the same active parameters.
void moe_versus_dense(int reps) {
  nlohmann::json base = {{"vocab_size", kVocab}, {"hidden_size", kHidden}, {"num_hidden_layers", kLayers},
                         {"num_attention_heads", kHeads}, {"num_key_value_heads", kHeads / 2}, {"head_dim", 64},
                         {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 4096}, {"rope_theta", 1e6},
                         {"torch_dtype", "float32"}, {"tie_word_embeddings", false}};
  auto dense = base, moe = base;
  dense["architectures"] = {"Qwen3ForCausalLM"};
  dense["model_type"] = "qwen3";
  dense["intermediate_size"] = 2 * 768;
  moe["architectures"] = {"Qwen3MoeForCausalLM"};
  moe["model_type"] = "qwen3_moe";
  moe["num_experts"] = 16;
  moe["num_experts_per_tok"] = 2;
  moe["moe_intermediate_size"] = 768;
  moe["norm_topk_prob"] = true;
  const auto d = forward_rate(dense, reps, kBatch, kSeq);
  const auto e = forward_rate(moe, reps, kBatch, kSeq);
  std::cout << fmt::format(
      "dense Qwen3 ({:.1f} M parameters, {:.1f} M active): {:.0f} tokens/s (median of {})\n"
      "Qwen3-MoE, 16 experts top 2 ({:.1f} M parameters, {:.1f} M active): {:.0f} tokens/s ({:.2f}x the dense)\n",
      d.params / 1e6, d.active / 1e6, d.tokens_per_s, reps, e.params / 1e6, e.active / 1e6, e.tokens_per_s,
      e.tokens_per_s / d.tokens_per_s);
}

// One row of kLongSeq tokens through a random Llama of wide MLPs (hidden 512, intermediate 8192, as
// wide against H as Llama-3.1-8B's 14336 against 4096, 2 layers): the peak resident memory and time
// of a forward with the layers' position-wise half whole (target_chunk_tokens 0) and in chunks,
// beside the bytes of its outputs (aux and final hidden states, fp32 teacher over 8000 draft ids,
// argmax) that any chunk keeps. Each chunk size runs in a process of its own, with every
// allocation of 1 MiB or more mapped and unmapped on its own (glibc's heap would otherwise keep
// freed tensors resident and blur the peak): `eagle_bench_target 1 long CHUNK`.
void long_row_memory(std::int64_t chunk) {
  constexpr std::int64_t kLongSeq = 16384;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", kVocab},
                           {"hidden_size", kHidden}, {"intermediate_size", 8192}, {"num_hidden_layers", 2},
                           {"num_attention_heads", kHeads}, {"num_key_value_heads", kHeads}, {"rms_norm_eps", 1e-5},
                           {"max_position_embeddings", 32768}, {"rope_theta", 10000.0}, {"torch_dtype", "float32"},
                           {"tie_word_embeddings", false}};
  const auto c = config_of(config);
  torch::manual_seed(0);
  auto m = eagle::target::TargetModel::random(c, torch::kFloat32, torch::kCPU);
  m.set_chunk_tokens(chunk);
  const eagle::target::TeacherSpec teacher{torch::arange(0, kVocab, 4), 1024};
  eagle::target::TargetBatch row{torch::randint(kVocab, {1, kLongSeq}), torch::arange(kLongSeq).unsqueeze(0),
                                torch::zeros({1, kLongSeq}, torch::kInt64), {false, 0}};
  const double base = rss_mib();
  reset_peak();
  auto t0 = Clock::now();
  auto out = m.forward(row, teacher);
  const double secs = seconds_since(t0);
  const double peak = peak_rss_mib() - base;
  const double outputs = double(out.aux_hidden.nbytes() + out.final_hidden.nbytes() + out.teacher_logits.nbytes() +
                                out.target_argmax.nbytes()) / (1 << 20);
  std::cout << fmt::format(
      "one row of {} tokens, intermediate 8192, target_chunk_tokens {}: peak RSS increase {:.0f} MiB "
      "(outputs {:.0f} MiB), {:.2f} s\n",
      kLongSeq, chunk, peak, outputs, secs);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 3;
  const fs::path dir = fs::temp_directory_path() / fmt::format("eagle_bench_target_{}", ::getpid());
  if (argc > 3 && std::string(argv[2]) == "long") {  // the long-row memory of one chunk size alone
    long_row_memory(std::atoll(argv[3]));
    return 0;
  }
  write_model(dir);
  auto m = eagle::target::TargetModel::load(dir.string(), torch::kFloat32, torch::kCPU);
  torch::manual_seed(1);
  eagle::target::TargetBatch batch{torch::randint(kVocab, {kBatch, kSeq}),
                                  torch::arange(kSeq).unsqueeze(0).expand({kBatch, kSeq}).contiguous(),
                                  torch::zeros({kBatch, kSeq}, torch::kInt64)};
  // A draft vocabulary of 8000 ids, as the head would train with.
  eagle::target::TeacherSpec teacher{torch::arange(0, kVocab, 4), 1024};

  // The machine may be shared: each timed forward is paired with a matmul measurement taken right
  // before it, and MFU is reported per pair (median and best).
  m.forward(batch, teacher);  // warm-up
  std::vector<double> secs, peaks;
  for (int i = 0; i < reps; ++i) {
    peaks.push_back(matmul_flops(3));
    auto t0 = Clock::now();
    auto out = m.forward(batch, teacher);
    secs.push_back(seconds_since(t0));
  }
  const double tokens = double(kBatch) * kSeq;
  const double matmul_params = double(kLayers) * (4.0 * kHidden * kHidden + 3.0 * kHidden * kInter) +
                               double(kVocab) * kHidden;
  const double head_dim = double(kHidden) / kHeads;
  // QK^T and PV over the causal half: 2 matmuls x 2 FLOPs x heads x head_dim x T(T+1)/2 per row.
  const double attn_flops = double(kLayers) * kBatch * 4.0 * kHeads * head_dim * (kSeq * (kSeq + 1) / 2.0);
  const double model_flops = 2.0 * matmul_params * tokens + attn_flops;
  std::vector<double> mfu, tps;
  for (int i = 0; i < reps; ++i) {
    mfu.push_back(model_flops / secs[i] / peaks[i]);
    tps.push_back(tokens / secs[i]);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  auto best_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };

  // Peak memory of one forward: the chunked teacher against all B*T rows of logits at once.
  auto peak_of = [&](std::int64_t chunk) {
    eagle::target::TeacherSpec spec{teacher.draft_ids, chunk};
    const double base = rss_mib();
    reset_peak();
    auto out = m.forward(batch, spec);
    return peak_rss_mib() - base;
  };
  const double peak_chunked = peak_of(1024);
  const double peak_whole = peak_of(kBatch * kSeq);

  std::cout << fmt::format(
      "threads {}\nfp32 matmul 2048^3: median {:.1f} GFLOP/s (measured before each forward)\n"
      "forward {}x{} ({} real tokens, fp32, teacher over 8000 draft ids): median {:.3f} s over {} runs\n"
      "tokens/s: {:.0f} (median), {:.0f} (best)\n"
      "model FLOPs per forward: {:.2f} GFLOP (matmul params {:.1f} M, attention {:.2f} GFLOP)\n"
      "MFU: {:.1f}% (median), {:.1f}% (best)\n"
      "peak RSS increase of one forward: {:.0f} MiB with chunk_tokens 1024, {:.0f} MiB with all {} rows at once\n",
      torch::get_num_threads(), median(peaks) / 1e9, kBatch, kSeq, tokens, median(secs), reps, median(tps),
      best_of(tps), model_flops / 1e9, matmul_params / 1e6, attn_flops / 1e9, 100.0 * median(mfu),
      100.0 * best_of(mfu), peak_chunked, peak_whole, kBatch * kSeq);
  moe_versus_dense(reps);
  std::error_code ec;
  fs::remove(dir / "model.safetensors", ec);
  fs::remove(dir / "config.json", ec);
  fs::remove(dir, ec);
  return 0;
}
