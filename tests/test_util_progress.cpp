// The shared progress texts and display (util/progress.h): durations, bars, ETA, and the display
// of a long read in plain mode.
#include <catch2/catch.hpp>

#include <cstdio>
#include <limits>

#include "eagle/data/progress.h"
#include "eagle/util/progress.h"

using namespace eagle::util;

TEST_CASE("durations, bars and ETAs", "[util]") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(42.4) == "42s");
  CHECK(format_duration(307) == "5m07s");
  CHECK(format_duration(3723) == "1h02m03s");
  CHECK(format_duration(-1) == "?");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "?");
  CHECK(format_bar(0.3, 10) == "[###.......]");
  CHECK(format_bar(1.5, 4) == "[####]");
  CHECK(format_bar(std::numeric_limits<double>::quiet_NaN(), 2) == "[..]");
  CHECK(format_eta(0, 10, 5.0) == "ETA ?");
  CHECK(format_eta(25, 100, 10.0) == "ETA 30s");  // 0.4 s a unit, 75 left
}

TEST_CASE("the display draws when due: at most 5 times a second as a bar, every interval as lines", "[util]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  {
    ProgressDisplay bar("data", ProgressMode::bar, out);
    CHECK(bar.due(0.0, false));
    CHECK(bar.show("a", "plain a", 0.0, false));
    CHECK_FALSE(bar.due(0.1, false));
    CHECK(bar.due(0.1, true));  // the final state always
    CHECK(bar.show("b", "plain b", 0.1, true));
  }
  std::rewind(out);
  char buf[64] = {};
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, out);
  CHECK(std::string(buf, n) == "\ra\x1b[K\rb\x1b[K\n");
  std::fclose(out);
  ProgressDisplay plain("data", ProgressMode::plain, stderr, 10.0);
  CHECK_FALSE(plain.due(5.0, false));
  CHECK(plain.due(10.0, false));
  CHECK(resident_bytes() > 0);
  CHECK(peak_resident_bytes() >= resident_bytes());
}

TEST_CASE("the one progress-line composer adds label, bar and percentage to the caller's text", "[util]") {
  const auto t = ProgressLine("dump", 0, 10).compose(0.3, "30/100 tokens");
  CHECK(t.bar == "dump [###.......]  30% 30/100 tokens");
  CHECK(t.plain == "dump 30%: 30/100 tokens");
  CHECK(ProgressLine("read").compose(1.0, "done").plain == "read 100%: done");
  // One decimal, no label (the training bar), and a percentage the caller computed.
  const auto s = ProgressLine("", 1, 4).compose(0.0, 0.0, "0/10");
  CHECK(s.bar == "[....]   0.0% 0/10");
  CHECK(ProgressLine("", 1).percent_text(30.0) == "30.0%");
}
