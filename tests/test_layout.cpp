// The source tree's layering (docs/developer.md "Layout"): areas from the bottom util, config,
// data, then model and device (siblings), io and run (siblings), features and generate (siblings),
// train, cli. A file may include its own area and the
// areas below it, never one above or a sibling; the plain-C++ areas include no LibTorch header
// (they compile without the precompiled header).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <regex>
#include <string>

#include "helpers.h"

namespace fs = std::filesystem;

namespace {

const std::map<std::string, int> kRank{{"util", 0},     {"config", 1},   {"data", 2},  {"model", 3},
                                       {"device", 3},   {"io", 4},       {"run", 4},   {"features", 5},
                                       {"generate", 5}, {"train", 6},    {"cli", 7}};
const std::set<std::string> kPlainCpp{"util", "config", "data", "io", "run"};

// Every #include line of the area's headers and sources, with the file it is in.
std::vector<std::pair<std::string, std::string>> include_lines(const std::string& area) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const fs::path& root :
       {fs::path(EAGLE_SOURCE_DIR) / "include" / "eagle" / area, fs::path(EAGLE_SOURCE_DIR) / "src" / area}) {
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path());
      for (std::string line; std::getline(in, line);)
        if (line.rfind("#include", 0) == 0) out.emplace_back(fs::relative(e.path(), EAGLE_SOURCE_DIR).string(), line);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("no area includes a higher or sibling area", "[layout]") {
  const std::regex eagle_include(R"(#include\s+"eagle/([a-z_]+)/)");
  std::vector<std::string> violations;
  std::size_t checked = 0;
  for (const auto& [area, rank] : kRank) {
    for (const auto& [file, line] : include_lines(area)) {
      std::smatch m;
      if (!std::regex_search(line, m, eagle_include)) continue;
      ++checked;
      const std::string to = m[1];
      auto it = kRank.find(to);
      if (it == kRank.end()) {
        violations.push_back(file + ": unknown area: " + line);
        continue;
      }
      if (to != area && it->second >= rank) violations.push_back(file + " (" + area + ") includes " + to + ": " + line);
    }
  }
  INFO([&] {
    std::string all;
    for (const auto& v : violations) all += v + "\n";
    return all;
  }());
  CHECK(checked > 200);  // the scan saw the tree
  CHECK(violations.empty());
}

TEST_CASE("the plain C++ areas include no LibTorch header", "[layout]") {
  const std::regex torch_include(R"(#include\s+<(torch|ATen|c10)/)");
  std::vector<std::string> violations;
  for (const auto& area : kPlainCpp)
    for (const auto& [file, line] : include_lines(area))
      if (std::regex_search(line, torch_include)) violations.push_back(file + ": " + line);
  INFO([&] {
    std::string all;
    for (const auto& v : violations) all += v + "\n";
    return all;
  }());
  CHECK(violations.empty());
}

TEST_CASE("docs/developer.md's layout names every source file of every area", "[layout]") {
  const std::string doc = eagle::test::read_file(fs::path(EAGLE_SOURCE_DIR) / "docs" / "developer.md");
  const auto start = doc.find("## Layout");
  REQUIRE(start != std::string::npos);
  const std::string layout = doc.substr(start, doc.find("\n## ", start + 1) - start);
  std::vector<std::string> missing;
  for (const auto& [area, rank] : kRank) {
    if (layout.find("\n" + area + "/") == std::string::npos) missing.push_back(area + "/ (the area itself)");
    for (const fs::path& root :
         {fs::path(EAGLE_SOURCE_DIR) / "include" / "eagle" / area, fs::path(EAGLE_SOURCE_DIR) / "src" / area}) {
      for (const auto& e : fs::directory_iterator(root)) {
        const std::string stem = e.path().stem().string();
        if (layout.find(stem) == std::string::npos) missing.push_back(area + "/" + e.path().filename().string());
      }
    }
  }
  INFO([&] {
    std::string all;
    for (const auto& m : missing) all += m + "\n";
    return all;
  }());
  CHECK(missing.empty());
}

TEST_CASE("nothing in the repository reads a path outside it", "[layout]") {
  // A user's clone has no workspace beside it: scripts, tests, CMake and docs name only paths in
  // the repository (the demo data is data/alpaca_5000.json.gz). The patterns are assembled so that
  // this file does not match itself.
  const std::vector<std::string> patterns{std::string("..") + "/shared", std::string("/shared") + "/data",
                                          std::string("/shared") + "/reviews", std::string("/work") + "/"};
  const std::set<std::string> binary{".safetensors", ".gz", ".bin", ".arrow", ".png"};
  std::vector<std::string> found;
  std::size_t files = 0;
  const fs::path root(EAGLE_SOURCE_DIR);
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (name.rfind("build", 0) == 0 || name == ".git" || name == ".cache" || name == "output" ||
          name == "__pycache__")
        it.disable_recursion_pending();
      continue;
    }
    // A git worktree's .git is a file naming the main checkout's folder, not part of the repository.
    if (!it->is_regular_file() || name == ".git" || binary.count(it->path().extension().string())) continue;
    ++files;
    std::ifstream in(it->path());
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      for (const auto& p : patterns)
        if (line.find(p) != std::string::npos)
          found.push_back(fs::relative(it->path(), root).string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  INFO([&] {
    std::string all;
    for (const auto& f : found) all += f + "\n";
    return all;
  }());
  CHECK(files > 100);
  CHECK(found.empty());
}
