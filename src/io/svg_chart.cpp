// Inline SVG line and bar charts for the run report.
#include "eagle/io/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace eagle::io {
namespace {

constexpr double kWidth = 640, kHeight = 300;
constexpr double kLeft = 64, kRight = 16, kTop = 34, kBottom = 64;  // plot margins, pixels
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kMaxPoints = 1000;  // per drawn series

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

// Ranges and ticks are computed on half values (v / 2), so any two finite doubles have a finite distance
// (1e308 - -1.7e308 overflows a double, its half does not).
double half_span(double lo, double hi) { return hi * 0.5 - lo * 0.5; }

// A tick step of 1, 2 or 5 times a power of ten giving about `count` ticks over [lo, hi]; infinite when the
// step itself passes the largest double (a range near the whole double line).
double nice_step(double lo, double hi, int count) {
  const double raw_half = half_span(lo, hi) / count;
  if (!(raw_half > 0) || !std::isfinite(raw_half)) return 1.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw_half)));
  const double f = 2 * (raw_half / mag);
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

// Widens a range to whole tick steps (and a flat range to a visible one); a range whose rounding to steps
// would overflow stays as it is.
Range padded(Range r, int ticks, double* step) {
  if (half_span(r.lo, r.hi) < 0.5e-12 * std::max(1.0, std::abs(r.hi))) {
    double pad = std::max(std::abs(r.hi) * 0.05, 0.5);
    r.lo -= pad;
    r.hi += pad;
  }
  *step = nice_step(r.lo, r.hi, ticks);
  const double lo = std::floor(r.lo / *step) * *step, hi = std::ceil(r.hi / *step) * *step;
  if (std::isfinite(lo) && std::isfinite(hi)) {
    r.lo = lo;
    r.hi = hi;
  }
  return r;
}

// The tick values from lo to hi by step: at most kMaxTicks, by index (adding a step to 1e17 changes nothing, so
// a loop of `v += step` never ends); only the two ends when the step does not divide the range into few.
constexpr double kMaxTicks = 50;
std::vector<double> ticks(double lo, double hi, double step) {
  if (!(lo <= hi)) return {};
  const double n = std::isfinite(step) && step > 0 ? std::floor(half_span(lo, hi) / (step * 0.5) + 1e-6) : kNaN;
  if (!(n >= 0 && n <= kMaxTicks)) return lo == hi ? std::vector<double>{lo} : std::vector<double>{lo, hi};
  std::vector<double> out;
  for (int i = 0; i <= static_cast<int>(n); ++i) {
    const double v = 2 * (lo * 0.5 + i * (step * 0.5));  // i * step alone may pass the largest double
    if (std::isfinite(v)) out.push_back(std::min(v, hi));
  }
  return out;
}

struct Frame {
  Range x, y;
  double px(double v) const {
    return kLeft + half_span(x.lo, v) / half_span(x.lo, x.hi) * (kWidth - kLeft - kRight);
  }
  double py(double v) const {
    return kHeight - kBottom - half_span(y.lo, v) / half_span(y.lo, y.hi) * (kHeight - kTop - kBottom);
  }
};

std::string open_svg(std::string_view title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" role=\"img\">"
      "<title>{}</title><text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
      kWidth, kHeight, kWidth, kHeight, html_escape(title), kLeft, html_escape(title));
}

std::string y_axis(const Frame& f, double step) {
  std::string out;
  for (double v : ticks(f.y.lo, f.y.hi, step)) {
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
  if (f.x.hi == f.x.lo) f.x.hi = f.x.lo + std::max(1.0, std::abs(f.x.lo) * 1e-6);
  double y_step = 1;
  f.y = padded(f.y, 5, &y_step);
  std::string out = open_svg(title) + y_axis(f, y_step);
  const double x_step = nice_step(f.x.lo, f.x.hi, 6), x_first = std::ceil(f.x.lo / x_step) * x_step;
  for (double v : std::isfinite(x_first) ? ticks(x_first, f.x.hi, x_step) : std::vector<double>{f.x.lo, f.x.hi})
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
    // At most about kMaxPoints drawn per series (a 1e6-line log would otherwise make a page of tens of MB):
    // every stride-th point and the last, a break kept wherever a skipped point was not finite.
    const std::size_t stride = (s.points.size() + kMaxPoints - 1) / kMaxPoints;
    bool gap = false;
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const auto& [x, y] = s.points[i];
      gap = gap || !std::isfinite(y);
      if (i % stride != 0 && i + 1 != s.points.size()) continue;
      if (gap || !std::isfinite(y)) flush();
      gap = false;
      if (!std::isfinite(y)) continue;
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
