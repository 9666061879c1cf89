// The one progress display of eagle-train (training steps, dataset reads, feature dumps,
// generation): a line redrawn in place on a terminal, cooperating with log lines (they print above
// it), or a log line every plain interval off a terminal; the one composer of its lines; plus the
// shared duration and bar texts.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace eagle::util {

// "42s", "5m07s", "1h02m03s"; "?" for a negative or non-finite duration.
std::string format_duration(double seconds);
// "[#########.....................]": `width` cells filled by fraction (clamped to [0, 1]).
std::string format_bar(double fraction, int width = 30);
// "ETA 2m20s" from the rate so far (done of total in elapsed_s); "ETA ?" before any progress.
std::string format_eta(double done, double total, double elapsed_s);

// Resident memory of this process from /proc/self/status (VmRSS, VmHWM = peak), bytes; 0 if unknown.
std::uint64_t resident_bytes();
std::uint64_t peak_resident_bytes();

enum class ProgressMode {
  auto_,  // bar when the stream is a terminal (isatty), plain lines otherwise
  bar,    // redrawn in place with "\r" + ESC[K at most 5 times a second (and always when final);
          // every log line clears and redraws it
  plain,  // a log line through `area` every plain_interval_s seconds and when final
  off,
};

class ProgressDisplay {
 public:
  static constexpr double kMinRedrawS = 0.2;
  static constexpr double kPlainIntervalS = 30.0;

  explicit ProgressDisplay(std::string area, ProgressMode mode = ProgressMode::auto_, std::FILE* out = stderr,
                           double plain_interval_s = kPlainIntervalS);
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  // Whether show() would draw now; callers test it before formatting a line.
  bool due(double elapsed_s, bool final) const;
  // Draws bar_line (bar mode) or logs plain_line (plain mode) when due; returns whether it did.
  bool show(std::string_view bar_line, std::string_view plain_line, double elapsed_s, bool final);
  // Ends the bar's line (called by the destructor).
  void finish();

  ProgressMode mode() const { return mode_; }
  bool is_bar() const { return mode_ == ProgressMode::bar; }

 private:
  void clear_bar();
  void draw_bar();
  std::string area_;
  ProgressMode mode_;
  std::FILE* out_;
  double interval_s_;
  double last_s_ = -1.0;  // elapsed_s of the last line shown; < 0: none yet
  std::string bar_;       // the bar as last drawn; empty: nothing on screen
  bool bar_visible_ = false;
};

// The two texts of one progress line: the bar form and the plain (log line) form.
struct ProgressTexts {
  std::string bar, plain;
};

// The one composer of progress lines; callers compose only their own text (counts, speed, elapsed,
// ETA) and this adds the label, bar and percentage:
//   bar:   "LABEL [#########.....................]  30% TEXT"  (no "LABEL " for an empty label)
//   plain: "LABEL 30%: TEXT"
// The bar's percentage is padded to three digits before the point, so the line does not jitter.
class ProgressLine {
 public:
  // decimals: of the percentage ("30%" for 0, "30.0%" for 1); bar_width: cells of the bar.
  explicit ProgressLine(std::string label, int decimals = 0, int bar_width = 30);

  // fraction in [0, 1] fills the bar and gives the percentage (100 x fraction); the second form
  // takes a percentage the caller computed itself.
  ProgressTexts compose(double fraction, std::string_view text) const;
  ProgressTexts compose(double fraction, double percent, std::string_view text) const;
  // "30.0%", unpadded (for a caller that places it in its own text).
  std::string percent_text(double percent) const;
  // display.show of compose(fraction, text).
  bool show(ProgressDisplay& display, double fraction, std::string_view text, double elapsed_s, bool final) const;

 private:
  std::string label_;
  int decimals_, bar_width_;
};

}  // namespace eagle::util
