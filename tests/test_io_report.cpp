// The run report (report.h) and its SVG charts (svg_chart.h), drawn from hand-made run folders.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "eagle/io/report.h"
#include "eagle/io/svg_chart.h"
#include "eagle/util/error.h"
#include "helpers.h"

using namespace eagle::io;
using eagle::test::TempDir;
using eagle::test::write_file;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The chart titled `title` in a report: from its <svg> to its </svg>.
std::string chart(const std::string& html, const std::string& title) {
  auto at = html.find("<title>" + title + "</title>");
  REQUIRE(at != std::string::npos);
  auto start = html.rfind("<svg", at), end = html.find("</svg>", at);
  return html.substr(start, end - start);
}

// The number of points of the first polyline in `svg`.
std::size_t first_polyline_points(const std::string& svg) {
  auto at = svg.find("points=\"");
  REQUIRE(at != std::string::npos);
  auto end = svg.find('"', at + 8);
  return count(svg.substr(at + 8, end - at - 8), ",");
}

void write_run(const fs::path& dir) {
  fs::create_directories(dir);
  write_file(dir / "metrics.jsonl",
             R"({"step": 10, "loss": 7.1, "acc": [0.1, 0.05, 0.02], "tau": 1.2, "lr": 1e-4, "grad_norm": 2.0, "tokens_per_s": 900.0, "padding_efficiency": 0.9, "ms_per_step": 30.0, "nonfinite_steps": 0, "peak_memory_mib": 512.0})"
             "\n"
             R"({"step": 20, "loss": 6.5, "acc": [0.2, 0.1, 0.05], "tau": 1.4, "lr": 1e-4, "grad_norm": 1.5, "tokens_per_s": 950.0, "padding_efficiency": 0.9, "ms_per_step": 29.0, "nonfinite_steps": 0, "peak_memory_mib": 530.0, "eval_loss": 6.6, "eval_acc": [0.2, 0.1, 0.04], "eval_tau": 1.35, "ar": 1.6, "tree_ar": 1.9})"
             "\n"
             R"({"step": 30, "loss": null, "acc": [0.3, 0.15, 0.07], "tau": 1.6, "lr": 5e-5, "grad_norm": 1.1, "tokens_per_s": 940.0, "padding_efficiency": 0.9, "ms_per_step": 31.0, "nonfinite_steps": 0, "peak_memory_mib": 531.0})"
             "\n"
             R"({"step": 40, "loss": 5.9, "acc": [0.35, 0.2, 0.1], "tau": 1.7, "lr": 1e-5, "grad_norm": 1.0, "tokens_per_s": 960.0, "padding_efficiency": 0.9, "ms_per_step": 28.0, "nonfinite_steps": 0, "peak_memory_mib": 531.0})"
             "\n"
             R"({"step": 40, "eval_loss": 6.0, "eval_acc": [0.3, 0.2, 0.1], "eval_tau": 1.6, "ar": 1.8, "tree_ar": 2.1})"
             "\n");
  json summary = {{"exit_reason", "completed"}, {"detail", ""}, {"steps", 40}, {"total_steps", 40},
                  {"final_loss", 5.9}, {"ar", 1.8}, {"ar_by_depth", {1.5, 1.7, 1.8}},
                  {"ar_by_category",
                   {{"coding", {{"count", 3}, {"ar", 2.4}, {"ar_ci95", 0.3}}},
                    {"math", {{"count", 2}, {"ar", 1.9}, {"ar_ci95", 0.5}}}}},
                  {"tokens_per_s", 950.0}};
  write_file(dir / "summary.json", summary.dump());
  write_file(dir / "config.json", json{{"data_path", "data/<script>alert(1)</script>.jsonl"}, {"max_steps", 40}}.dump());
}

}  // namespace

TEST_CASE("the run report draws each recorded curve and table, self-contained", "[io]") {
  TempDir dir;
  write_run(dir / "run");
  fs::path path = write_report(dir / "run");
  CHECK(path == dir / "run" / "report.html");
  std::string html = eagle::test::read_file(path);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  // One training loss point per logged window; the null loss at step 30 breaks the line in two.
  std::string loss = chart(html, "Loss");
  CHECK(count(loss, "<polyline") == 3);  // train loss (2 pieces) and held-out loss
  CHECK(first_polyline_points(loss) == 2);
  // acc per TTT step: one line each for acc_0..acc_2, training and held-out.
  CHECK(count(chart(html, "Training acc per TTT step"), "<polyline") == 3);
  CHECK(count(chart(html, "Held-out acc per TTT step"), "<polyline") == 3);
  std::string ar = chart(html, "Acceptance length");
  CHECK_THAT(ar, Catch::Contains("AR (chain)") && Catch::Contains("tree AR"));
  CHECK_FALSE(ar.find("temperature AR") != std::string::npos);  // never measured: no legend entry
  // AR by depth: one bar per k with its value; per category: bars, counts and intervals.
  std::string depth = chart(html, "AR by depth (drafted tokens per round)");
  CHECK(count(depth, "<rect") == 3);
  CHECK_THAT(depth, Catch::Contains(">k=3<") && Catch::Contains(">1.8<"));
  CHECK_THAT(html, Catch::Contains("<td>coding</td><td>3</td><td>2.4</td><td>&plusmn; 0.3</td>"));
  CHECK(count(chart(html, "AR per category"), "stroke=\"#333\"") == 2);  // the two error bars
  CHECK(first_polyline_points(chart(html, "Peak memory (MiB)")) == 4);
  // Options are escaped; nothing is fetched or run (no script, no link, no external resource).
  CHECK_THAT(html, Catch::Contains("data/&lt;script&gt;alert(1)&lt;/script&gt;.jsonl"));
  for (const char* bad : {"<script", "src=", "href=", "url(", "@import"}) CHECK(html.find(bad) == std::string::npos);
}

TEST_CASE("the run report says what a run did not record", "[io]") {
  TempDir dir;
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "metrics.jsonl",
             R"({"step": 5, "loss": 3.0, "acc": [0.5], "tau": 1.5})" "\n" R"({"step": 10, "loss": 2.)");
  RunRecords r = read_run_folder(dir / "run");
  CHECK(r.steps.size() == 1);
  CHECK(r.torn_last_line);  // a killed run's partial last line
  CHECK(r.summary.is_null());
  std::string html = render_report(r);
  CHECK_THAT(html, Catch::Contains("no summary.json") && Catch::Contains("last line is torn"));
  CHECK_THAT(html, Catch::Contains("Not measured: this run recorded no ar_by_depth"));
  CHECK_THAT(html, Catch::Contains("Not measured: the evaluation prompts carry no category field"));
  CHECK_THAT(html, Catch::Contains("No config.json"));
  CHECK_THAT(chart(html, "Peak memory (MiB)"), Catch::Contains("no data"));
}

TEST_CASE("the run report refuses a folder without metrics and a malformed line by its number", "[io]") {
  TempDir dir;
  fs::create_directories(dir / "empty");
  CHECK_THROWS_WITH(read_run_folder(dir / "empty"), Catch::Contains("metrics.jsonl"));
  fs::create_directories(dir / "bad");
  write_file(dir / "bad" / "metrics.jsonl", "{\"step\": 1, \"loss\": 1}\nnot json\n{\"step\": 3, \"loss\": 1}\n");
  try {
    read_run_folder(dir / "bad");
    FAIL("a malformed middle line was accepted");
  } catch (const eagle::Error& e) {
    CHECK(e.kind() == eagle::ErrorKind::input);
    CHECK(e.place() == "line 2");
    CHECK_THAT(e.file(), Catch::EndsWith("metrics.jsonl"));
  }
  write_file(dir / "bad" / "metrics.jsonl", "{\"step\": 1, \"loss\": 1}\n");
  write_file(dir / "bad" / "summary.json", "[1, 2]");
  CHECK_THROWS_WITH(read_run_folder(dir / "bad"), Catch::Contains("summary.json"));
}

TEST_CASE("SVG charts: breaks at non-finite values, single points, no data, escaping", "[io]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::string svg = line_chart("t", "step", {Series{"a", {{0, 1}, {1, nan}, {2, 3}, {3, 4}}}});
  CHECK(count(svg, "<polyline") == 2);
  CHECK(count(line_chart("t", "step", {Series{"one", {{5, 2}}}}), "<circle") == 1);
  CHECK_THAT(line_chart("t", "step", {Series{"none", {}}}), Catch::Contains("no data"));
  CHECK_THAT(line_chart("t", "step", {Series{"all nan", {{1, nan}}}}), Catch::Contains("no data"));
  CHECK_THAT(bar_chart("<b>", {Bar{"x&y", 2.0, 0.1}}), Catch::Contains("&lt;b&gt;") && Catch::Contains("x&amp;y"));
  CHECK(html_escape("a<b>\"c\"&'") == "a&lt;b&gt;&quot;c&quot;&amp;&#39;");
  CHECK(format_number(2.5) == "2.5");
  CHECK(format_number(1.23456) == "1.2346");
  CHECK(format_number(3.0) == "3");
  CHECK(format_number(nan) == "n/a");
  CHECK(format_number(1.5e-5) == "1.5e-05");
}

TEST_CASE("SVG charts are bounded for any finite value and any number of points (issue 53 item 6)", "[io]") {
  // Steps near 1e17 (a step there plus 1 is the same double) and losses out to -1.7e308 drew ticks forever.
  const double huge = 1.7e308;
  for (const auto& points : std::vector<std::vector<std::pair<double, double>>>{
           {{1e17, 1.0}, {1e17 + 16, 2.0}, {1e17 + 32, 3.0}},
           {{0, -huge}, {1, huge}},
           {{1e300, -huge}, {-1e300, 1e-300}},
           {{5, 1e-300}, {6, 1e-300}}}) {
    const auto svg = line_chart("t", "step", {Series{"s", points}});
    const auto bad = std::min(svg.find("nan"), svg.find("inf"));
    INFO(svg.substr(bad == std::string::npos ? 0 : bad - std::min<std::size_t>(bad, 200), 400));
    CHECK(count(svg, "<polyline") == 1);
    CHECK(svg.size() < 20000);
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(svg.find("inf") == std::string::npos);
  }
  CHECK(bar_chart("b", {Bar{"x", huge, huge}, Bar{"y", -huge, {}}}).size() < 20000);
  // A million points draw as about a thousand, the line still broken where a skipped point was not finite.
  Series many{"loss", {}};
  for (int i = 0; i < 1000000; ++i)
    many.points.emplace_back(i, i == 500001 ? std::numeric_limits<double>::quiet_NaN() : std::sin(i * 1e-4));
  const auto svg = line_chart("t", "step", {many});
  CHECK(count(svg, "<polyline") == 2);
  CHECK(svg.size() < 40000);
}

TEST_CASE("the run report of a long run stays a page of bounded size", "[io]") {
  RunRecords r;
  r.dir = "run";
  for (int i = 1; i <= 300000; ++i)
    r.steps.push_back(json{{"step", i}, {"loss", 1.0 / i}, {"acc", {0.5, 0.25, 0.125}}, {"lr", 1e-3},
                           {"tokens_per_s", 1000.0}, {"grad_norm", 1.0}});
  const auto page = render_report(r);
  CHECK(page.size() < 2'000'000);  // about 0.3 MB: 3 points a pixel column at most per series
}
