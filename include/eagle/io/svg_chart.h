// Small inline SVG charts for the run report: line charts over steps and bar charts with optional
// error bars. Plain strings, no dependency: the report must open offline in any browser.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eagle::io {

// One line of a line chart: (x, y) points in the order drawn. Non-finite y values break the line
// (the points either side are not joined).
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

// A line chart `title` over `x_label` with one coloured polyline per series and a legend.
// Empty series are left out; with no point at all the chart says "no data".
std::string line_chart(std::string_view title, std::string_view x_label, const std::vector<Series>& series);

// One bar: its label under the axis, its value, and an optional half-width drawn as an error bar.
struct Bar {
  std::string label;
  double value = 0.0;
  std::optional<double> half_width;
};

// A bar chart `title` with the value printed above each bar; the y axis starts at y_min (e.g. 1 for
// acceptance lengths, which are never below 1).
std::string bar_chart(std::string_view title, const std::vector<Bar>& bars, double y_min = 0.0);

// Text escaped for HTML and SVG (&, <, >, ", ').
std::string html_escape(std::string_view text);

// A value printed for a chart or table: up to 4 significant decimals, no trailing zeros.
std::string format_number(double v);

}  // namespace eagle::io
