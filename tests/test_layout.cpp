// The source tree's layering (docs/developer.md "Layout"): areas from the bottom util, config,
// data and server (siblings), then model (the tensor kit), device and io (siblings), target and run
// (siblings), head, features, generate and acceptance (siblings), train, cli: the target never
// includes the head, and the acceptance measures never include the training run. A file may include
// its own area and the areas below it, never one above or a sibling; the plain-C++ areas include no
// LibTorch header (they compile without the precompiled header).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "helpers.h"

namespace fs = std::filesystem;

namespace {

const std::map<std::string, int> kRank{{"util", 0},       {"config", 1}, {"data", 2},     {"server", 2},
                                       {"model", 3},      {"device", 3}, {"target", 4},   {"io", 3},
                                       {"run", 4},        {"head", 5},   {"features", 6}, {"generate", 6},
                                       {"acceptance", 6}, {"train", 7},  {"follow", 8},   {"cli", 9}};
const std::set<std::string> kPlainCpp{"util", "config", "data", "server", "io", "run"};

// The findings of a check, one a line, for the failure message.
std::string one_per_line(const std::vector<std::string>& items) {
  std::string all;
  for (const auto& item : items) all += item + "\n";
  return all;
}

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
  INFO(one_per_line(violations));
  CHECK(checked > 200);  // the scan saw the tree
  CHECK(violations.empty());
}

TEST_CASE("the seams the ranks guard: the target below the head, the acceptance measures below training", "[layout]") {
  CHECK(kRank.at("target") < kRank.at("head"));
  CHECK(kRank.at("acceptance") < kRank.at("train"));
  // Both sides of each seam hold files, so the rank check above has includes to read.
  for (const char* area : {"target", "head", "acceptance", "train"}) {
    INFO(area);
    CHECK(!include_lines(area).empty());
  }
}

TEST_CASE("the plain C++ areas include no LibTorch header", "[layout]") {
  const std::regex torch_include(R"(#include\s+<(torch|ATen|c10)/)");
  std::vector<std::string> violations;
  for (const auto& area : kPlainCpp)
    for (const auto& [file, line] : include_lines(area))
      if (std::regex_search(line, torch_include)) violations.push_back(file + ": " + line);
  INFO(one_per_line(violations));
  CHECK(violations.empty());
}

namespace {

// The files of an area as modules: a header and the source of the same path are one module. A header
// in src/<area>/ without a source of its own is part of module M when M's source includes it and it
// includes M's header (a private half, as target_impl.h is of target); else it is a module itself.
struct AreaModules {
  std::map<std::string, std::string> module_of;       // a file's normalised path -> its module's stem
  std::map<std::string, std::set<std::string>> uses;  // module -> modules of the area it includes
};

std::vector<std::string> quoted_includes(const fs::path& file) {
  static const std::regex quoted(R"re(#include\s+"([^"]+)")re");
  std::vector<std::string> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, quoted)) out.push_back(m[1]);
  }
  return out;
}

// A file's module within its area: its path below the area's folder without the extension, so a kind
// folder's files are modules "<kind>/<stem>" (head/dflash/head.cpp is "dflash/head").
std::string module_name(const fs::path& area_root, const fs::path& file) {
  return fs::relative(file, area_root).replace_extension().generic_string();
}

AreaModules area_modules(const std::string& area) {
  const fs::path root(EAGLE_SOURCE_DIR), pub = root / "include" / "eagle" / area, src = root / "src" / area;
  std::vector<std::pair<fs::path, fs::path>> files;  // (area root, file)
  for (const fs::path& dir : {pub, src})
    if (fs::exists(dir))
      for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) files.emplace_back(dir, e.path().lexically_normal());
  // The file an include line names: eagle/<area>/x.h under include/, else beside the including file.
  auto resolve = [&](const fs::path& from, const std::string& inc) {
    return inc.rfind("eagle/", 0) == 0 ? (root / "include" / inc).lexically_normal()
                                       : (from.parent_path() / inc).lexically_normal();
  };
  AreaModules m;
  for (const auto& [dir, f] : files) m.module_of[f.string()] = module_name(dir, f);
  for (const auto& [dir, f] : files) {
    if (dir != src || f.extension() != ".h") continue;
    if (fs::exists(fs::path(f).replace_extension(".cpp"))) continue;
    for (const auto& inc : quoted_includes(f)) {
      const fs::path header = resolve(f, inc);
      if (header.string().rfind(pub.string(), 0) != 0) continue;
      const fs::path owner_source = (src / fs::relative(header, pub)).replace_extension(".cpp");
      if (!fs::exists(owner_source)) continue;
      for (const auto& owner_inc : quoted_includes(owner_source))
        if (resolve(owner_source, owner_inc) == f) m.module_of[f.string()] = module_name(pub, header);
    }
  }
  for (const auto& [dir, f] : files) {
    const std::string from = m.module_of.at(f.string());
    m.uses[from];
    for (const auto& inc : quoted_includes(f)) {
      auto it = m.module_of.find(resolve(f, inc).string());
      if (it != m.module_of.end() && it->second != from) m.uses[from].insert(it->second);
    }
  }
  return m;
}

// Every cycle a depth-first walk meets, as "a -> b -> a".
std::vector<std::string> cycles(const std::map<std::string, std::set<std::string>>& uses) {
  std::map<std::string, int> state;  // 1: on the walk's path, 2: done
  std::vector<std::string> path, found;
  std::function<void(const std::string&)> walk = [&](const std::string& u) {
    state[u] = 1;
    path.push_back(u);
    for (const auto& v : uses.at(u)) {
      if (state[v] == 0) {
        walk(v);
      } else if (state[v] == 1) {
        std::string c;
        for (auto it = std::find(path.begin(), path.end(), v); it != path.end(); ++it) c += *it + " -> ";
        found.push_back(c + v);
      }
    }
    path.pop_back();
    state[u] = 2;
  };
  for (const auto& [u, _] : uses)
    if (state[u] == 0) walk(u);
  return found;
}

}  // namespace

TEST_CASE("no two files of an area use each other, directly or around a circle", "[layout]") {
  std::vector<std::string> found;
  std::size_t modules = 0;
  for (const auto& [area, rank] : kRank) {
    const auto m = area_modules(area);
    modules += m.uses.size();
    for (const auto& c : cycles(m.uses)) found.push_back(area + ": " + c);
  }
  INFO(one_per_line(found));
  CHECK(modules > 60);  // the scan saw the tree
  CHECK(found.empty());
}

TEST_CASE("head/'s kind folders stand side by side on the shared kit, export above them", "[layout]") {
  // Within head/: the flat kit (rank 0) includes no folder; each kind folder (eagle/, mtp/, dflash/)
  // includes the kit and itself, never another kind; export/ reads every kind; the registry (the one
  // file that names every kind's row) sits on top.
  // A kind built on another names it here: DSpark and DFlash2 on DFlash's backbone.
  const std::map<std::string, int> sub_rank{{"", 0},       {"eagle", 1},   {"mtp", 1},   {"dflash", 1},
                                            {"dspark", 2}, {"dflash2", 2}, {"export", 3}};
  auto rank_of = [&](const std::string& module) {
    if (module == "registry") return 4;
    const auto slash = module.find('/');
    const auto it = sub_rank.find(slash == std::string::npos ? "" : module.substr(0, slash));
    return it == sub_rank.end() ? -1 : it->second;
  };
  auto folder_of = [](const std::string& module) {
    const auto slash = module.find('/');
    return slash == std::string::npos ? std::string() : module.substr(0, slash);
  };
  const auto m = area_modules("head");
  std::vector<std::string> violations;
  std::size_t folders = 0;
  for (const auto& [from, uses] : m.uses) {
    if (rank_of(from) < 0) violations.push_back(from + ": a folder of head/ without a rank");
    if (!folder_of(from).empty()) ++folders;
    for (const auto& to : uses)
      if (folder_of(to) != folder_of(from) && rank_of(to) >= rank_of(from))
        violations.push_back(from + " includes " + to);
  }
  INFO(one_per_line(violations));
  CHECK(folders > 10);  // the scan saw the kind folders
  CHECK(violations.empty());
}

TEST_CASE("the cycle finder sees a circle of modules and only that", "[layout]") {
  CHECK(cycles({{"a", {"b"}}, {"b", {"c"}}, {"c", {}}}).empty());
  CHECK(cycles({{"a", {"b"}}, {"b", {"c"}}, {"c", {"a"}}}) == std::vector<std::string>{"a -> b -> c -> a"});
  CHECK(cycles({{"a", {"b", "c"}}, {"b", {}}, {"c", {"b"}}}).empty());  // a diamond is no circle
}

TEST_CASE("docs/developer.md's layout names every source file of every area", "[layout]") {
  const std::string doc = eagle::test::read_file(fs::path(EAGLE_SOURCE_DIR) / "docs" / "developer.md");
  const auto start = doc.find("## Layout");
  REQUIRE(start != std::string::npos);
  const std::string layout = doc.substr(start, doc.find("\n## ", start + 1) - start);
  // An area's row: the line starting "<area>/" and the indented lines after it.
  auto row_of = [&](const std::string& area) {
    const auto at = layout.find("\n" + area + "/ ");
    if (at == std::string::npos) return std::string();
    auto end = layout.find('\n', at + 1);
    while (end != std::string::npos && end + 1 < layout.size() && layout[end + 1] == ' ')
      end = layout.find('\n', end + 1);
    return layout.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
  };
  std::vector<std::string> missing;
  for (const auto& [area, rank] : kRank) {
    const std::string row = row_of(area);
    if (row.empty()) {
      missing.push_back(area + "/ (the area has no row of its own)");
      continue;
    }
    for (const fs::path& root :
         {fs::path(EAGLE_SOURCE_DIR) / "include" / "eagle" / area, fs::path(EAGLE_SOURCE_DIR) / "src" / area}) {
      for (const auto& e : fs::recursive_directory_iterator(root)) {
        if (!e.is_regular_file()) continue;
        // The module as a whole word of the area's own row (not part of another name, not in another
        // row): its stem, or "<kind>/<stem>" for a file in a subfolder.
        const std::string name = module_name(root, e.path());
        const std::regex word("(^|[^A-Za-z0-9_/])" + name + "([^A-Za-z0-9_/]|$)");
        if (!std::regex_search(row, word)) missing.push_back(area + "/" + fs::relative(e.path(), root).string());
      }
    }
  }
  INFO(one_per_line(missing));
  CHECK(missing.empty());
}

TEST_CASE("outside head/ and the option table, nothing asks a head's draft kind: callers ask its row", "[layout]") {
  // A draft kind is a row of head/draft_spec.h. The option table parses --draft (config/), head/ holds
  // the rows; every other area asks the row (what the head reads, its limits, its loss plan, its wording)
  // and never compares the kind by name or re-derives it from a config's sentinel fields.
  const std::vector<std::pair<std::regex, std::string>> asks{
      {std::regex(R"(\.(dflash|mtp)\(\))"), "a sentinel method of HeadConfig"},
      {std::regex(R"(\bmtp_family\b)"), "HeadConfig::mtp_family"},
      {std::regex(R"(\bdflash_block_size\b)"), "HeadConfig::dflash_block_size"},
      {std::regex(R"(eagle_version\s*[!=<>]=?\s*[0-9])"), "eagle_version compared"},
      {std::regex(R"(\bdraft\s*[!=]=)"), "the --draft option compared"},
      {std::regex(R"(\b(Draft|DraftKind)::)"), "a draft kind named"},
      {std::regex(R"re("(eagle3|eagle1|mtp|dflash)")re"), "a draft kind's name as a string"}};
  std::vector<std::string> found;
  std::size_t files = 0;
  const fs::path root(EAGLE_SOURCE_DIR);
  for (const auto& [area, rank] : kRank) {
    if (area == "head" || area == "config") continue;
    for (const fs::path& dir : {root / "include" / "eagle" / area, root / "src" / area}) {
      if (!fs::exists(dir)) continue;
      for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        ++files;
        std::ifstream in(e.path());
        std::size_t n = 0;
        for (std::string line; std::getline(in, line);) {
          ++n;
          const auto code = line.substr(0, line.find("//"));  // comments may name the kinds
          for (const auto& [pattern, what] : asks)
            if (std::regex_search(code, pattern))
              found.push_back(fs::relative(e.path(), root).string() + ":" + std::to_string(n) + " (" + what +
                              "): " + line);
        }
      }
    }
  }
  INFO(one_per_line(found));
  CHECK(files > 150);
  CHECK(found.empty());
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
  INFO(one_per_line(found));
  CHECK(files > 100);
  CHECK(found.empty());
}
