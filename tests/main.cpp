// Test runner: Catch2 v2 with two additions for CTest. --require-gpu exits 77 (CTest's skip code
// for the [gpu] entry) when no CUDA device is present; a filter that matches no test case fails,
// so an entry can never pass by running nothing.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstring>
#include <iostream>
#include <vector>

#include "eagle/util/log_sink.h"

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool require_gpu = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-gpu") == 0) {
      require_gpu = true;
      continue;
    }
    args.push_back(argv[i]);
  }
  if (require_gpu && !torch::cuda::is_available()) {
    std::cout << "no CUDA device found: the [gpu] tests are skipped\n";
    return 77;
  }
  eagle::log::set_log_level(eagle::log::LogLevel::warn);
  Catch::Session session;
  int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data());
  if (rc != 0) return rc;
  const auto& config = session.config();
  if (config.hasTestFilters() && !config.listTestNamesOnly() &&
      Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config).empty()) {
    std::cerr << "no test case matches the filter: refusing to pass by running nothing\n";
    return 1;
  }
  return session.run();
}
