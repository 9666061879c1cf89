// Benchmark of the TTT attention: one K-step unroll (forward and backward) of the reference or the
// efficient implementation on random CPU inputs; prints one JSON line with the wall time and the
// peak resident memory above the inputs. One configuration per process (scripts/bench/bench_ttt.sh).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include "eagle/head/ttt_attention.h"

namespace {
long rss_kib() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}
long peak_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s reference|efficient K T [B heads head_dim]\n", argv[0]);
    return 2;
  }
  const std::string impl_name = argv[1];
  const auto impl = impl_name == "reference" ? eagle::head::TttAttentionImpl::reference
                                             : eagle::head::TttAttentionImpl::efficient;
  const std::int64_t steps = std::stoll(argv[2]), t = std::stoll(argv[3]);
  const std::int64_t b = argc > 4 ? std::stoll(argv[4]) : 1, h = argc > 5 ? std::stoll(argv[5]) : 8;
  const std::int64_t d = argc > 6 ? std::stoll(argv[6]) : 64;
  // One unroll of K steps (forward and backward) at length len; returns the wall seconds.
  auto run = [&](std::int64_t len, long* rss_before) {
    torch::manual_seed(0);
    const eagle::model::AttentionLayout doc(torch::zeros({b, len}, torch::kInt64), {false, 0});
    std::vector<torch::Tensor> qs, ks, vs;
    for (std::int64_t k = 0; k < steps; ++k) {
      qs.push_back(torch::randn({b, h, len, d}).requires_grad_());
      ks.push_back(torch::randn({b, h, len, d}).requires_grad_());
      vs.push_back(torch::randn({b, h, len, d}).requires_grad_());
    }
    if (rss_before) *rss_before = rss_kib();
    const auto start = std::chrono::steady_clock::now();
    auto loss = torch::zeros({});
    for (std::int64_t k = 0; k < steps; ++k) {
      std::vector<torch::Tensor> kd(ks.begin() + 1, ks.begin() + k + 1), vd(vs.begin() + 1, vs.begin() + k + 1);
      auto out = eagle::head::ttt_attention(impl, qs[static_cast<std::size_t>(k)], ks[0], vs[0], kd, vd, doc, 0.125);
      loss = loss + out.square().mean();
    }
    loss.backward();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run(32, nullptr);  // warm-up: library start-up memory is not counted
  long before = 0;
  const double seconds = run(t, &before);
  const double peak_mib = static_cast<double>(peak_kib() - before) / 1024.0;
  std::printf("{\"impl\": \"%s\", \"K\": %lld, \"T\": %lld, \"B\": %lld, \"heads\": %lld, \"head_dim\": %lld, "
              "\"seconds\": %.3f, \"peak_mib\": %.1f}\n",
              impl_name.c_str(), static_cast<long long>(steps), static_cast<long long>(t), static_cast<long long>(b),
              static_cast<long long>(h), static_cast<long long>(d), seconds, peak_mib);
  return 0;
}
