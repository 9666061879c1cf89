// The acceptance at every depth and per category as every sink writes it: metrics.jsonl's eval row
// (ar_ci95, ar_by_depth, ar_by_category in the format report.cpp reads), the eval line's curve and the
// TensorBoard tags.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "eagle/io/progress.h"
#include "eagle/io/step_stats.h"

using namespace eagle::io;
using nlohmann::json;

namespace {

EvalStats by_depth_stats() {
  EvalStats e{300, 2.12345, {0.7, 0.5}, 2.4, {}};
  auto& a = e.acceptance;
  a.ar = 1.8;
  a.ar_ci95 = 0.25;
  a.ar_by_depth = {1.5, 1.75, 1.8};
  a.ar_by_category["coding"] = CategoryAcceptance{3, 2.5, 0.5, {1.75, 2.0, 2.5}};
  a.ar_by_category["math"] = CategoryAcceptance{2, 1.25, 0.0, {1.0, 1.25, 1.25}};
  return e;
}

}  // namespace

TEST_CASE("an eval row holds ar_ci95, ar_by_depth and ar_by_category", "[io]") {
  const json j = to_json(by_depth_stats());
  CHECK(j["ar"] == 1.8);
  CHECK(j["ar_ci95"] == 0.25);
  CHECK(j["ar_by_depth"] == json::array({1.5, 1.75, 1.8}));
  CHECK(j["ar_by_category"] == json::parse(R"({
      "coding": {"count": 3, "ar": 2.5, "ar_ci95": 0.5, "ar_by_depth": [1.75, 2.0, 2.5]},
      "math": {"count": 2, "ar": 1.25, "ar_ci95": 0.0, "ar_by_depth": [1.0, 1.25, 1.25]}})"));
  // Not measured: absent, as the other metrics.
  EvalStats none{300, 2.0, {0.5}, 1.5, {}};
  const json n = to_json(none);
  for (const char* key : {"ar", "ar_ci95", "ar_by_depth", "ar_by_category"}) CHECK_FALSE(n.contains(key));
  // A depth whose AR is not a number is null, not dropped: entry k-1 stays depth k.
  auto e = by_depth_stats();
  e.acceptance.ar_by_depth[1] = std::numeric_limits<double>::quiet_NaN();
  CHECK(to_json(e)["ar_by_depth"] == json::parse("[1.5, null, 1.8]"));
}

TEST_CASE("the eval line prints the AR curve by depth in one line", "[io]") {
  auto e = by_depth_stats();
  CHECK(format_eval_line(e) ==
        "step 300 AR: 1.800 | eval loss 2.1235 | acc 0.700 0.500 | tau 2.400 | AR by depth k = 1..3: 1.500 1.750 "
        "1.800");
  e.acceptance.ar_by_depth.clear();
  CHECK(format_eval_line(e) == "step 300 AR: 1.800 | eval loss 2.1235 | acc 0.700 0.500 | tau 2.400");
}

TEST_CASE("TensorBoard gets eval/ar_depth_<k> for k = 1..K", "[io]") {
  const auto scalars = tensorboard_scalars(by_depth_stats());
  auto value = [&](const std::string& tag) {
    auto it = std::find_if(scalars.begin(), scalars.end(), [&](const auto& p) { return p.first == tag; });
    REQUIRE(it != scalars.end());
    return it->second;
  };
  CHECK(value("eval/ar_depth_1") == 1.5f);
  CHECK(value("eval/ar_depth_3") == 1.8f);
  CHECK(std::none_of(scalars.begin(), scalars.end(), [](const auto& p) { return p.first == "eval/ar_depth_4"; }));
}

TEST_CASE("a window's model FLOPs give TFLOP/s and MFU in the step row, line and TensorBoard", "[io]") {
  ThroughputWindow w;
  w.add(100, 128, 3e12);
  w.add(100, 128, 1e12);
  StepStats s;
  w.fill(s, 2.0, /*peak_tflops=*/4.0);
  REQUIRE(s.tflops);
  CHECK(*s.tflops == Approx(2.0));  // 4e12 FLOPs in 2 s
  REQUIRE(s.mfu);
  CHECK(*s.mfu == Approx(0.5));
  const auto row = to_json(s);
  CHECK(row["tflops"].get<double>() == Approx(2.0));
  CHECK(row["mfu"].get<double>() == Approx(0.5));
  CHECK_THAT(format_step_line(s), Catch::Contains("| 2 TFLOP/s | MFU 50.0%"));
  const auto tags = tensorboard_scalars(s);
  CHECK(std::count_if(tags.begin(), tags.end(), [](const auto& t) { return t.first == "train/mfu"; }) == 1);
  // No FLOPs counted (or no peak): the fields are absent, not 0.
  StepStats none;
  ThroughputWindow{}.fill(none, 1.0, 4.0);
  CHECK_FALSE(none.tflops);
  CHECK_FALSE(to_json(none).contains("mfu"));
  StepStats no_peak;
  w.fill(no_peak, 2.0);
  CHECK(no_peak.tflops);
  CHECK_FALSE(no_peak.mfu);
}
