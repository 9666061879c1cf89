// Inline SVG line and bar charts for the run report.
#include "eagle/io/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace eagle::io {
namespace {

constexpr double kWidth = 640, kHeight = 300;
constexpr double kLeft = 64, kRight = 16, kTop = 34, kBottom = 64;  // plot margins, pixels
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// A tick step of 1, 2 or 5 times a power of ten giving about `count` ticks over [lo, hi].
double nice_step(double lo, double hi, int count) {
  double raw = (hi - lo) / count;
  if (!(raw > 0)) return 1.0;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

// Widens a range to whole tick steps (and a flat range to a visible one).
Range padded(Range r, int ticks, double* step) {
  if (r.hi - r.lo < 1e-12 * std::max(1.0, std::abs(r.hi))) {
    double pad = std::max(std::abs(r.hi) * 0.05, 0.5);
    r.lo -= pad;
    r.hi += pad;
  }
  *step = nice_step(r.lo, r.hi, ticks);
  r.lo = std::floor(r.lo / *step) * *step;
  r.hi = std::ceil(r.hi / *step) * *step;
  return r;
}

struct Frame {
  Range x, y;
  double px(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * (kWidth - kLeft - kRight); }
  double py(double v) const { return kHeight - kBottom - (v - y.lo) / (y.hi - y.lo) * (kHeight - kTop - kBottom); }
};

std::string open_svg(std::string_view title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" role=\"img\">"
      "<title>{}</title><text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
      kWidth, kHeight, kWidth, kHeight, html_escape(title), kLeft, html_escape(title));
}

std::string y_axis(const Frame& f, double step) {
  std::string out;
  for (double v = f.y.lo; v <= f.y.hi + step * 1e-6; v += step) {
    double y = f.py(v);
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
                       kLeft, y, kWidth - kRight, y, kLeft - 6, y + 4, format_number(std::abs(v) < step * 1e-9 ? 0 : v));
  }
  return out;
}

std::string no_data(std::string_view title) {
  return open_svg(title) + fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#888\">no data</text></svg>",
                                       kLeft, kHeight / 2);
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_number(double v) {
  if (!std::isfinite(v)) return "n/a";
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) return fmt::format("{:.3g}", v);
  std::string s = fmt::format("{:.4f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string line_chart(std::string_view title, std::string_view x_label, const std::vector<Series>& series) {
  Frame f;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) {
        f.x.add(x);
        f.y.add(y);
      }
  if (f.x.empty() || f.y.empty()) return no_data(title);
  if (f.x.hi == f.x.lo) f.x.hi = f.x.lo + 1;
  double y_step = 1;
  f.y = padded(f.y, 5, &y_step);
  std::string out = open_svg(title) + y_axis(f, y_step);
  double x_step = nice_step(f.x.lo, f.x.hi, 6);
  for (double v = std::ceil(f.x.lo / x_step) * x_step; v <= f.x.hi + x_step * 1e-6; v += x_step)
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>", f.px(v),
                       kHeight - kBottom + 16, format_number(v));
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
                     (kLeft + kWidth - kRight) / 2, kHeight - kBottom + 32, html_escape(x_label));
  std::size_t colour = 0;
  double legend_x = kLeft;
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    const char* c = kColours[colour++ % std::size(kColours)];
    std::string pts;
    auto flush = [&] {
      if (pts.empty()) return;
      out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>", c, pts);
      pts.clear();
    };
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) {
        flush();
        continue;
      }
      pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", f.px(x), f.py(y));
    }
    flush();
    if (s.points.size() == 1 && std::isfinite(s.points[0].second))
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", f.px(s.points[0].first),
                         f.py(s.points[0].second), c);
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>",
                       legend_x, kHeight - 18, c, legend_x + 14, kHeight - 9, html_escape(s.name));
    legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
  }
  return out + "</svg>";
}

std::string bar_chart(std::string_view title, const std::vector<Bar>& bars, double y_min) {
  Frame f;
  f.y.add(y_min);
  for (const auto& b : bars) {
    f.y.add(b.value);
    if (b.half_width) f.y.add(b.value + *b.half_width);
  }
  if (bars.empty() || f.y.empty()) return no_data(title);
  double y_step = 1;
  f.y = padded(f.y, 5, &y_step);
  f.y.lo = std::max(f.y.lo, y_min);
  f.x = Range{0, static_cast<double>(bars.size())};
  std::string out = open_svg(title) + y_axis(f, y_step);
  double slot = f.px(1) - f.px(0), width = slot * 0.6;
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    double x = f.px(static_cast<double>(i)) + (slot - width) / 2, top = f.py(std::isfinite(b.value) ? b.value : f.y.lo);
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>", x, top,
                       width, std::max(0.0, f.py(f.y.lo) - top), kColours[0]);
    if (b.half_width && std::isfinite(*b.half_width)) {
      double cx = x + width / 2;
      out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>", cx,
                         f.py(b.value - *b.half_width), cx, f.py(b.value + *b.half_width));
    }
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
                       x + width / 2, top - 4, format_number(b.value), x + width / 2, kHeight - kBottom + 16,
                       html_escape(b.label));
  }
  return out + "</svg>";
}

}  // namespace eagle::io
